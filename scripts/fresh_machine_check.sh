#!/usr/bin/env bash
# Proves the README's two commands on a fresh Debian 12: builds a bare
# bookworm image from the Debian mirror apt uses (debootstrap, no image
# registry needed), copies a clean clone of this repository's HEAD into a
# new container, and runs there, timed:
#   1. bash scripts/demo.sh      (the main job)
#   2. bash scripts/test.sh      (the whole test suite, as CI runs it)
# The container is removed on exit, also on failure or Ctrl-C.
#
#   scripts/fresh_machine_check.sh [--only demo|test] [--keep-image]
#
# Needs root (debootstrap, dockerd): scripts/docker_base_image.sh installs
# docker.io and debootstrap when missing, starts dockerd and makes the image. Logs go to
# $GANTRY_FRESH_LOG_DIR (default /tmp/gantry-fresh): one file per command.
#
# What is carried from this machine into the container, and why: the apt
# sources (the same mirror), and the machine's own CA certificates and PIP_*
# settings (a network that proxies HTTPS needs them to reach PyPI). Nothing
# of the project's: no venv, no build, no cache.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
only=""
keep_image=0
while (($#)); do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --keep-image) keep_image=1; shift ;;
    *) echo "fresh_machine_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
readonly image="gantry-base:bookworm"
logs="${GANTRY_FRESH_LOG_DIR:-/tmp/gantry-fresh}"
mkdir -p "${logs}"
start=$(date +%s)
step() { echo "=== [$(($(date +%s) - start))s] $*"; }

if [[ $(id -u) -ne 0 ]]; then
  echo "fresh_machine_check: run as root (debootstrap and dockerd need it)" >&2
  exit 2
fi
step "docker engine and base image"
GANTRY_DOCKER_LOG_DIR="${logs}" bash "${root}/scripts/docker_base_image.sh"

clone="$(mktemp -d /tmp/gantry-clone.XXXXXX)"
container=""
cleanup() {
  [[ -n "${container}" ]] && docker rm -f "${container}" >/dev/null 2>&1 || true
  rm -rf "${clone}"
  if [[ ${keep_image} -eq 0 && -n "${GANTRY_FRESH_DROP_IMAGE:-}" ]]; then
    docker image rm -f "${image}" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT
git clone --quiet "${root}" "${clone}/gantry"
step "clean clone of $(git -C "${clone}/gantry" rev-parse --short HEAD)"

pip_env=()
while IFS='=' read -r name _; do
  pip_env+=(-e "${name}")
done < <(env | grep -E '^PIP_' || true)
# The host network: the container reaches the same mirrors the same way.
# cpu-shares: yield to interactive work on a shared 2-core machine.
container="$(docker run -d --network host --cpu-shares 512 "${pip_env[@]}" -e CI="${CI:-}" \
  -w /root/gantry "${image}" sleep infinity)"
docker cp "${clone}/gantry/." "${container}:/root/gantry"
for f in /etc/apt/sources.list.d/debian.sources /usr/local/share/ca-certificates/*.crt; do
  [[ -f "${f}" ]] || continue
  docker exec "${container}" mkdir -p "$(dirname "${f}")"
  docker cp "${f}" "${container}:${f}"
done
if docker exec "${container}" test -f /etc/apt/sources.list.d/debian.sources; then
  docker exec "${container}" rm -f /etc/apt/sources.list
fi
docker exec "${container}" sh -c 'test ! -e /usr/bin/pip && ! python3 -m pip --version' \
  >/dev/null 2>&1 && echo "container: no python3, no pip (stock minbase)"

run_in_container() {
  local name="$1"
  shift
  local t0=$(date +%s)
  step "container: $*"
  if docker exec "${container}" bash -c "$*" >"${logs}/${name}.log" 2>&1; then
    echo "    ok in $(($(date +%s) - t0)) s (log: ${logs}/${name}.log)"
  else
    local rc=$?
    echo "    FAILED (exit ${rc}) after $(($(date +%s) - t0)) s; last lines of ${logs}/${name}.log:" >&2
    tail -n 40 "${logs}/${name}.log" >&2
    exit 1
  fi
}
if [[ -z "${only}" || "${only}" == demo ]]; then
  run_in_container demo "bash scripts/demo.sh"
  grep -E "docs|replica" "${logs}/demo.log" | tail -n 3 || true
fi
if [[ -z "${only}" || "${only}" == test ]]; then
  run_in_container test "bash scripts/test.sh"
  grep -E "tests passed|tests failed|Skipped|=== \[" "${logs}/test.log" | tail -n 20 || true
fi
step "fresh machine check passed"
