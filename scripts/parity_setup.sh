#!/usr/bin/env bash
# Adds tokenizers, sentence-transformers and jsonschema (the rerank test
# checks TEI's schemas) to the project venv of
# scripts/setup.sh (which holds torch), used only to produce parity
# expectations. Gantry itself never runs Python. Idempotent.
#
#   scripts/parity_setup.sh [VENV_DIR]      (default: $GANTRY_VENV or <repo>/.venv)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${GANTRY_VENV:-${root}/.venv}}"
if [[ ! -x "${venv}/bin/python" ]]; then
  echo "parity_setup: error: no venv at ${venv} (run scripts/setup.sh first)" >&2
  exit 1
fi
if ! "${venv}/bin/python" -c 'import tokenizers, sentence_transformers, jsonschema' 2>/dev/null; then
  "${venv}/bin/python" -m pip install --quiet tokenizers sentence-transformers jsonschema
fi
"${venv}/bin/python" -c 'import tokenizers, sentence_transformers, torch; print("parity venv ok:", tokenizers.__version__, sentence_transformers.__version__, torch.__version__)'
