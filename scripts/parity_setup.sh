#!/usr/bin/env bash
# Creates the Python venv used only to produce parity expectations
# (tokenizers + sentence-transformers; torch is reused from the system
# interpreter). Gantry itself never runs Python.
#
#   scripts/parity_setup.sh [VENV_DIR]      (default: <repo>/.venv-parity)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${root}/.venv-parity}"
if [[ ! -x "${venv}/bin/python" ]]; then
  python3 -m venv --system-site-packages "${venv}"
fi
"${venv}/bin/python" -m pip install --quiet tokenizers sentence-transformers
"${venv}/bin/python" -c 'import tokenizers, sentence_transformers, torch; print("parity venv ok:", tokenizers.__version__, sentence_transformers.__version__, torch.__version__)'
