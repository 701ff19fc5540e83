#!/usr/bin/env bash
# Creates .venv-bench-infinity: Infinity (PyPI infinity-emb, its server and
# the torch engine's sentence-transformers), for the Infinity side of the
# encoder benchmark. As bench/encoder/venv.sh does, a .pth file makes the
# project venv's packages visible, so Infinity runs on the same torch wheel
# Gantry's libtorch comes from and no second torch is downloaded.
# Idempotent; prints the venv on the last line.
#
#   bench/encoder/infinity_venv.sh [VENV_DIR]   (default: <repo>/.venv-bench-infinity)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-${root}/.venv-bench-infinity}"
. "$(dirname "${BASH_SOURCE[0]}")/overlay_venv.sh"
MakeOverlayVenv "${venv}"
if ! "${venv}/bin/python" -c 'import infinity_emb, sentence_transformers, torch, fastapi, uvicorn' 2>/dev/null; then
  "${venv}/bin/python" -m pip install --quiet --upgrade pip
  # Without dependencies, then theirs by name (the pins of infinity-emb
  # 0.0.78's `server` and `torch` extras), so that pip installs no torch.
  "${venv}/bin/python" -m pip install --quiet --no-deps 'infinity-emb==0.0.78' \
    'sentence-transformers>=3.0.1,<4'
  "${venv}/bin/python" -m pip install --quiet 'numpy<2' 'huggingface_hub>=0.32' \
    'click>=8.0.0,<8.2' 'fastapi>=0.103.2' 'orjson>=3.9.8,!=3.10.0' posthog \
    'prometheus-fastapi-instrumentator>=6.1.0' 'pydantic>=2.4.0,<3' 'rich>=13,<14' \
    'typer>=0.12.5,<0.13.0' 'uvicorn[standard]>=0.32.0,<0.33.0' \
    'transformers>=4.41,<5' tokenizers safetensors scipy scikit-learn tqdm Pillow
fi
"${venv}/bin/python" -c 'import infinity_emb, sentence_transformers, torch; print("bench-infinity venv ok: infinity-emb", infinity_emb.__version__, "sentence-transformers", sentence_transformers.__version__, "torch", torch.__version__, "from", torch.__file__)' >&2
if [[ -d "$(echo "${venv}"/lib/python3*/site-packages/torch)" ]]; then
  echo "infinity_venv.sh: warning: ${venv} has its own torch, not the project venv one Gantry links" >&2
fi
echo "${venv}"
