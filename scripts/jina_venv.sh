#!/usr/bin/env bash
# Creates the Python virtual environment with Jina and docarray from PyPI,
# used only by the interoperability tests and the peer benchmarks (Gantry
# itself never runs Python). Idempotent.
#
#   scripts/jina_venv.sh [VENV_DIR]      (default: <repo>/.venv-jina)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${root}/.venv-jina}"
if [[ ! -x "${venv}/bin/python" ]]; then
  python3 -m venv "${venv}"
fi
if ! "${venv}/bin/python" -c 'import jina, docarray' 2>/dev/null; then
  "${venv}/bin/python" -m pip install --quiet --upgrade pip
  # Versions pinned so that CI and benchmarks compare against one Jina.
  "${venv}/bin/python" -m pip install --quiet 'jina==3.34.0' 'docarray==0.41.0'
fi
"${venv}/bin/python" -c 'import jina, docarray; print("jina venv ok: jina", jina.__version__, "docarray", docarray.__version__)'
