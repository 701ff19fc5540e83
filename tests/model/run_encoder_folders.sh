#!/usr/bin/env bash
# ctest driver for test_encoder_folders.py (SentenceEncoder against
# sentence-transformers) and test_rerank.py (CrossEncoder against its
# CrossEncoder), on model folders the tests make. Needs the parity
# venv (scripts/parity_setup.sh); a missing venv skips (exit 77) outside CI
# and fails in CI (tests/peer_policy.sh).
#   run_encoder_folders.sh [encoder_folders|rerank]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "${root}/tests/peer_policy.sh"
venv="${GANTRY_PARITY_VENV:-${GANTRY_VENV:-${root}/.venv}}"
test_name="${1:-encoder_folders}"
if ! "${venv}/bin/python" -c "import sentence_transformers, transformers, torch, jsonschema" 2>/dev/null; then
  skip_or_fail "parity venv at ${venv} cannot import sentence_transformers (run scripts/parity_setup.sh or set GANTRY_PARITY_VENV)"
fi
exec "${venv}/bin/python" "${root}/tests/model/test_${test_name}.py"
