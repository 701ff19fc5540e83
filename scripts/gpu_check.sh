#!/usr/bin/env bash
# The GPU checks in one go, for a machine with a CUDA device and PyTorch
# (python3 -c 'import torch' works) but none of Gantry's other build
# dependencies and no network, such as a lent GPU machine:
#
#   here:   bash scripts/gpu_check.sh --bundle          # once: .deps.tar.xz (~12 MB)
#   there:  bash scripts/gpu_check.sh [OUT_DIR]         # build, export, test
#
# --bundle packs Debian's gRPC, Protobuf, yaml-cpp, spdlog, ... into
# .deps.tar.xz (shared/tools/offline-bundle.sh; git-ignored). On the GPU
# machine the script unpacks it, builds gantry-worker and the test programs
# against that machine's torch (GANTRY_PYTHON, default python3) with all its
# cores, exports the test models on cuda (tests/exported/exported_models.sh;
# all-MiniLM-L6-v2 only where $GANTRY_MODEL_PATH has it) and runs the ctest
# label `gpu`. Everything it prints, the device, and each test's log go to
# OUT_DIR (default: $OUT, else gpu-check-out); the figures to quote are the
# lines "... max abs diff ..." in OUT_DIR/ctest.log.
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
libb64-0d" bash "${bundler}" "${tmp}/deps" >&2
  # The bundler drops static archives, and GoogleTest ships only those.
  for lib in libgtest.a libgtest_main.a libgmock.a libgmock_main.a libbenchmark_main.a; do
    cp "/usr/lib/x86_64-linux-gnu/${lib}" "${tmp}/deps/usr/lib/x86_64-linux-gnu/"
  done
  # Headers and libraries only: documentation and Debian's metadata stay.
  tar -C "${tmp}" -cJf "${root}/.deps.tar.xz" deps
  ls -l "${root}/.deps.tar.xz"
  exit 0
fi

out="${1:-${OUT:-${root}/gpu-check-out}}"
mkdir -p "${out}"
exec > >(tee "${out}/gpu_check.log") 2>&1
start=${SECONDS}
step() { echo; echo "=== [$((SECONDS - start))s] $*"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python="${GANTRY_PYTHON:-$(command -v python3)}"
"${python}" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.version.cuda)'
nproc

if [[ -f "${root}/.deps.tar.xz" ]]; then
  step "build dependencies from .deps.tar.xz"
  mkdir -p /tmp/gantry-deps
  tar -C /tmp/gantry-deps -xJf "${root}/.deps.tar.xz"
  # prometheus-cpp's CMake package asks for civetweb's, whose targets name
  # the civetweb program, which nothing here runs.
  # Likewise its push library, which Gantry does not link.
  for f in usr/bin/civetweb usr/lib/x86_64-linux-gnu/libprometheus-cpp-push.so.1.0.1; do
    [[ -e "/tmp/gantry-deps/deps/${f}" ]] || touch "/tmp/gantry-deps/deps/${f}"
  done
  # shellcheck disable=SC1091
  source /tmp/gantry-deps/deps/env.sh
fi

step "build (gantry-worker, gantry, torch_model_test, the torch tests)"
build="${GANTRY_GPU_BUILD_DIR:-${root}/build-gpu}"
# The wheel's libraries directly (as on a machine without the CUDA toolkit):
# the path the project's own builds take. Warnings are not errors here: the
# compiler is that machine's, not the one CI holds the code to.
cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGANTRY_PYTHON="${python}" -DGANTRY_TORCH_CMAKE_PACKAGE=OFF -DGANTRY_WERROR=OFF \
  -DGANTRY_BUILD_BENCH=OFF >"${out}/cmake.log" 2>&1 || { tail -n 40 "${out}/cmake.log"; exit 1; }
cmake --build "${build}" -j "$(nproc)" --target gantry_worker gantry_cli torch_model_test \
  gantry_torch_tests >"${out}/build.log" 2>&1 || { grep -n -A5 "error" "${out}/build.log" | head -n 60; exit 1; }

step "export the test models on cuda"
GANTRY_PYTHON="${python}" GANTRY_CACHE_DIR="${out}/cache" \
  bash tests/exported/exported_models.sh --device cuda | tail -n 1

step "ctest -L gpu"
GANTRY_PYTHON="${python}" GANTRY_CACHE_DIR="${out}/cache" \
  ctest --test-dir "${build}" -L gpu -V --timeout 600 -j 4 \
  2>&1 | tee "${out}/ctest.log" || true
grep -h "max abs diff" "${out}/ctest.log" || true
# The exported packages are large; keep their description only.
find "${out}/cache" -name '*.json' -exec cp {} "${out}/" \; 2>/dev/null || true
rm -rf "${out}/cache"
step "done"
