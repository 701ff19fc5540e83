#!/usr/bin/env bash
# Runs clang-tidy (the check list in .clang-tidy) over every C++ file of
# Gantry's own that the build compiles; fails on any finding.
#
#   scripts/check_tidy.sh [BUILD_DIR]     (default: build/, which needs compile_commands.json)
#
# GANTRY_TIDY_SCOPE=code: the product's code only, not the tests (tests/,
# *_test.cc); CI's test suite runs that, to save the half of the time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-${root}/build}"
jobs="${GANTRY_JOBS:-$(nproc)}"
if [[ ! -f "${build}/compile_commands.json" ]]; then
  echo "check_tidy: ${build}/compile_commands.json is missing (run scripts/build.sh first)" >&2
  exit 2
fi
tidy="$(command -v clang-tidy || command -v clang-tidy-14 || true)"
if [[ -z "${tidy}" ]]; then
  echo "check_tidy: clang-tidy is not installed (apt-get install clang-tidy)" >&2
  exit 2
fi
scope="${GANTRY_TIDY_SCOPE:-all}"
if [[ "${scope}" != all && "${scope}" != code ]]; then
  echo "check_tidy: GANTRY_TIDY_SCOPE is '${scope}'; it is 'all' (the default) or 'code'" >&2
  exit 2
fi
mapfile -t files < <(python3 - "${build}/compile_commands.json" "${root}" "${scope}" <<'PY'
import json, os, sys
root = os.path.realpath(sys.argv[2])
code_only = sys.argv[3] == "code"
seen = set()
for entry in json.load(open(sys.argv[1])):
    path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    rel = os.path.relpath(path, root)
    # Ours only: not generated protobuf code, not third-party headers' sources.
    if rel.startswith("..") or rel.split(os.sep)[0].startswith(("build", ".venv")):
        continue
    if code_only and (rel.split(os.sep)[0] == "tests" or rel.endswith("_test.cc")):
        continue
    if path not in seen:
        seen.add(path)
        print(path)
PY
)
log="$(mktemp)"
trap 'rm -f "${log}"' EXIT
# GCC-only warning flags in the compile commands are not clang's business.
status=0
printf '%s\n' "${files[@]}" |
  xargs -P "${jobs}" -n 1 "${tidy}" -p "${build}" --quiet \
    --extra-arg=-Wno-unknown-warning-option >"${log}" 2>&1 || status=$?
if ((status != 0)) || grep -E "(warning|error):" "${log}" >/dev/null; then
  grep -E -A3 "(warning|error):" "${log}" >&2 || tail -n 40 "${log}" >&2
  echo "check_tidy: $(grep -cE "(warning|error):" "${log}" || true) findings in ${#files[@]} files" >&2
  exit 1
fi
echo "tidy: ${#files[@]} files clean"
