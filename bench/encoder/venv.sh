#!/usr/bin/env bash
# Creates .venv-bench-encoder: Jina (the same pin as scripts/jina_venv.sh) plus
# sentence-transformers, for the Jina side of the encoder benchmark, and
# matplotlib for its plot (plot.py). A .pth
# file makes the project venv's packages (scripts/setup.sh: the torch that
# Gantry's libtorch comes from) visible in it, so no second torch is
# downloaded. Separate from .venv-jina so that venv stays as the interop
# tests expect it. Idempotent; prints the venv on the last line.
#
#   bench/encoder/venv.sh [VENV_DIR]      (default: <repo>/.venv-bench-encoder)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-${root}/.venv-bench-encoder}"
. "$(dirname "${BASH_SOURCE[0]}")/overlay_venv.sh"
MakeOverlayVenv "${venv}"
if ! "${venv}/bin/python" -c 'import jina, docarray, sentence_transformers, torch, matplotlib' 2>/dev/null; then
  "${venv}/bin/python" -m pip install --quiet --upgrade pip
  constraints=()
  if [[ -x "${root}/.venv-jina/bin/python" ]]; then
    # The exact versions of .venv-jina (scripts/jina_venv.sh): the same Jina
    # as the interop tests, and pip's resolver does not have to search
    # Jina's many opentelemetry pins (it gives up on them otherwise).
    "${root}/.venv-jina/bin/python" -m pip freeze --exclude-editable >"${venv}/jina-constraints.txt"
    constraints=(-c "${venv}/jina-constraints.txt")
  fi
  # setuptools<70: Jina's hubble imports pkg_resources, which newer
  # setuptools (as on the system) no longer ship.
  "${venv}/bin/python" -m pip install --quiet "${constraints[@]}" 'jina==3.34.0' docarray \
    'setuptools<70'
  # sentence-transformers without its torch requirement: pip would
  # otherwise install another torch (plus ~4 GB of CUDA wheels) over the
  # project venv's one that Gantry's libtorch comes from. Its other requirements
  # by name; none of them needs torch.
  "${venv}/bin/python" -m pip install --quiet --no-deps sentence-transformers
  "${venv}/bin/python" -m pip install --quiet transformers huggingface-hub tokenizers safetensors \
    scipy scikit-learn tqdm Pillow typing_extensions matplotlib
  # pip may report conflicts of unrelated system packages (awscli, ...)
  # above; the import check below is what matters here.
fi
"${venv}/bin/python" -c 'import jina, docarray, sentence_transformers, torch; print("bench-encoder venv ok: jina", jina.__version__, "docarray", docarray.__version__, "sentence-transformers", sentence_transformers.__version__, "torch", torch.__version__, "from", torch.__file__)' >&2
if [[ -d "$(echo "${venv}"/lib/python3*/site-packages/torch)" ]]; then
  echo "venv.sh: warning: ${venv} has its own torch, not the project venv one Gantry links" >&2
fi
echo "${venv}"
