#!/usr/bin/env bash
# Creates .venv-bench-onnx: ONNX Runtime and OpenVINO (PyPI) with what
# exporting and quantising for them takes (onnx, onnxscript for torch's
# exporter, NNCF for OpenVINO's int8 weights, Hugging Face tokenizers and
# transformers), for sides g-j of the encoder benchmark. As venv.sh does, a
# .pth file makes the project venv's packages visible, so the model is
# exported with the torch wheel Gantry's libtorch comes from and no second
# torch is downloaded. Idempotent; prints the venv on the last line.
#
#   bench/encoder/onnx_venv.sh [VENV_DIR]   (default: <repo>/.venv-bench-onnx)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-${root}/.venv-bench-onnx}"
. "$(dirname "${BASH_SOURCE[0]}")/overlay_venv.sh"
MakeOverlayVenv "${venv}"
if ! "${venv}/bin/python" -c 'import onnxruntime, openvino, onnx, onnxscript, nncf, tokenizers, transformers, torch' 2>/dev/null; then
  "${venv}/bin/python" -m pip install --quiet --upgrade pip
  # NNCF without its dependencies, then theirs by name, so that pip
  # installs no second torch.
  "${venv}/bin/python" -m pip install --quiet onnxruntime openvino onnx onnxscript tokenizers \
    transformers numpy
  "${venv}/bin/python" -m pip install --quiet --no-deps nncf
  "${venv}/bin/python" -m pip install --quiet jsonschema jstyleson natsort networkx ninja pandas \
    psutil pydot pymoo rich safetensors scikit-learn scipy tabulate
fi
"${venv}/bin/python" -c 'import onnxruntime, openvino, torch; print("bench-onnx venv ok: onnxruntime", onnxruntime.__version__, "openvino", openvino.__version__, "torch", torch.__version__, "from", torch.__file__)' >&2
if [[ -d "$(echo "${venv}"/lib/python3*/site-packages/torch)" ]]; then
  echo "onnx_venv.sh: warning: ${venv} has its own torch, not the project venv one Gantry links" >&2
fi
echo "${venv}"
