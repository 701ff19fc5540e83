#!/bin/sh
# `gantry new` as a user meets it with Docker: scaffolds a project, lints its
# Dockerfile (hadolint), builds the image as the Dockerfile says (its plugin
# compiled in gantry:dev, served FROM gantry:cpu), runs it with the port
# published on 127.0.0.1, waits for its health check and posts documents with
# the C++ client. The container and the image are removed on every exit.
# Skips (77) with the reason where no Docker engine answers or an image is
# missing, in CI too, as the other `docker` tests do (machines without
# Docker run the rest; scripts/container_tests.sh fails on any skip).
# usage: new_project_image_test.sh GANTRY_CLI INTEROP_CLIENT [HADOLINT]
set -eu
cli="$1"
client="$2"
hadolint="${3:-}"
skip() {
  echo "SKIPPED: $1" >&2
  exit 77
}
command -v docker >/dev/null 2>&1 || skip "no docker client on PATH"
docker info >/dev/null 2>&1 || skip "no Docker daemon answers (docker info failed)"
for image in gantry:dev gantry:cpu; do
  docker image inspect "$image" >/dev/null 2>&1 ||
    skip "no image $image (scripts/docker_images.sh --cpu-only builds both)"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gantry-new-image-XXXXXX")
tag="gantry-test-hello-image:$$"
container="gantry-test-hello-$$"
cleanup() {
  docker rm -f "$container" >/dev/null 2>&1 || true
  docker image rm -f "$tag" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
step() { echo "== $*"; }

step "gantry new HelloImage"
"$cli" new HelloImage --dir "$tmp/hello"

if [ -n "$hadolint" ] && [ -x "$hadolint" ]; then
  step "hadolint the generated Dockerfile"
  "$hadolint" "$tmp/hello/Dockerfile"
fi

step "docker build (gantry:dev builds the plugin, gantry:cpu serves it)"
start=$(date +%s)
docker build --no-cache -q -t "$tag" "$tmp/hello" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; echo "FAIL: docker build"; exit 1; }
echo "built in $(($(date +%s) - start)) s"

step "docker run, port 8080 published on 127.0.0.1"
docker run -d --name "$container" -p 127.0.0.1::8080 "$tag" >/dev/null
port=$(docker port "$container" 8080/tcp | head -n 1 | sed 's/.*://')
i=0
until "$cli" ping "127.0.0.1:$port" --timeout 1000 >/dev/null 2>&1; do
  i=$((i + 1))
  if [ $i -gt 120 ] || [ "$(docker inspect -f '{{.State.Running}}' "$container")" != true ]; then
    docker logs "$container"; echo "FAIL: the container did not become healthy"; exit 1
  fi
  sleep 0.5
done

step "post 3 documents to /encode"
out=$("$client" "127.0.0.1:$port" /encode 3)
echo "$out"
for n in 0 1 2; do
  echo "$out" | grep -q "\"text\":\"hello doc$n\"" || { docker logs "$container"; echo "FAIL: no 'hello doc$n' in the reply"; exit 1; }
done
echo "$out" | grep -q '"executor":"HelloImage"' || { echo "FAIL: the reply's tags do not name HelloImage"; exit 1; }

step "the image's HEALTHCHECK and its executor for container replicas"
executor=$(docker inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$tag" | grep '^GANTRY_EXECUTOR=' || true)
[ "$executor" = "GANTRY_EXECUTOR=/app/executor.yml" ] || { echo "FAIL: GANTRY_EXECUTOR is '$executor'"; exit 1; }
i=0
until [ "$(docker inspect -f '{{.State.Health.Status}}' "$container")" = healthy ]; do
  i=$((i + 1))
  # The HEALTHCHECK's first run is 10 s after the start.
  if [ $i -gt 60 ]; then docker inspect -f '{{json .State.Health}}' "$container"; echo "FAIL: never healthy"; exit 1; fi
  sleep 0.5
done
echo "PASS"
