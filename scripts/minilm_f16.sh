#!/usr/bin/env bash
# Writes a float16 copy of a sentence-transformers folder of all-MiniLM-L6-v2
# (the loader widens it to the dtype asked for): half the bytes, for what
# travels to a lent GPU machine (scripts/gpu_bundle.sh, gpu_check.sh --bundle).
#
#   scripts/minilm_f16.sh MODEL_DIR OUT_DIR      (the project venv's Python)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="$1"
out="$2"
mkdir -p "${out}"
(cd "${model}" && cp -r config.json config_sentence_transformers.json modules.json 1_Pooling \
  sentence_bert_config.json special_tokens_map.json tokenizer.json tokenizer_config.json \
  vocab.txt "${out}/")
"${GANTRY_VENV:-${root}/.venv}/bin/python" - "${model}/model.safetensors" "${out}/model.safetensors" <<'PY'
import sys
import torch
from safetensors.torch import load_file, save_file
tensors = load_file(sys.argv[1])
save_file({k: v.to(torch.float16) if v.is_floating_point() else v for k, v in tensors.items()},
          sys.argv[2], metadata={"format": "pt"})
PY
