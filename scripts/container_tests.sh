#!/usr/bin/env bash
# Runs the tests that need a Docker engine (ctest label `docker`), which CI
# skips where none answers: starts dockerd when none runs, builds gantry:cpu
# from this checkout (scripts/docker_images.sh --cpu-only), builds the tests,
# and runs them with the model mounted. Fails if any of them skipped.
#
#   scripts/container_tests.sh [--no-image-build]      (root: dockerd)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_image=1
while (($#)); do
  case "$1" in
    --no-image-build) build_image=0; shift ;;
    *) echo "container_tests: unknown argument $1" >&2; exit 2 ;;
  esac
done
cd "${root}"
if ((build_image)); then
  bash scripts/docker_images.sh --cpu-only
else
  bash scripts/docker_base_image.sh
fi
scripts/setup.sh >/dev/null
scripts/jina_venv.sh >/dev/null
scripts/clients_venv.sh >/dev/null
GANTRY_MODEL_PATH="${GANTRY_MODEL_PATH:-$(scripts/fetch_model.sh | tail -n 1)}"
export GANTRY_MODEL_PATH
GANTRY_BUILD_DIR="${root}/build" scripts/build.sh >/dev/null
log="$(mktemp /tmp/gantry-container-tests.XXXXXX)"
trap 'rm -f "${log}"' EXIT
ctest --test-dir "${root}/build" -L docker --output-on-failure --timeout 900 --no-tests=error |
  tee "${log}"
if grep -q "Skipped" "${log}"; then
  echo "container_tests: a docker test skipped here, where it must run" >&2
  exit 1
fi
