#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) into
# build-fuzz/ ($GANTRY_FUZZ_BUILD_DIR) and runs one of them, or each in
# turn, for SECONDS each.
#
#   scripts/fuzz.sh TARGET|all SECONDS [libFuzzer flags...]
#     TARGET: config, doc_proto, json_docs, protocols, tokenizer
#
# New inputs go to build-fuzz/fuzz-work/TARGET/corpus (the seeds in
# tests/fuzz/corpus/TARGET are read, never written); a crashing input is
# written to build-fuzz/fuzz-work/TARGET/ as crash-<sha1> (or leak-, timeout-,
# oom-) and the script fails. Reproduce one with
#   build-fuzz/fuzz/gantry_fuzz_TARGET FILE
# and add it to the target's corpus with the fix: ctest fuzz_corpus.TARGET
# then replays it in every build. Memory is bounded (-rss_limit_mb, per-target
# -max_len), and so is time per input (-timeout).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${GANTRY_FUZZ_BUILD_DIR:-${root}/build-fuzz}"
if (($# < 2)); then
  sed -n '2,17p' "$0" >&2
  exit 2
fi
which="$1"
seconds="$2"
shift 2
targets=(config doc_proto json_docs protocols tokenizer)
if [[ "${which}" != all ]]; then
  known=0
  for t in "${targets[@]}"; do [[ "$t" == "${which}" ]] && known=1; done
  if ((!known)); then
    echo "fuzz: unknown target '${which}' (known: ${targets[*]}, all)" >&2
    exit 2
  fi
  targets=("${which}")
fi

cc="$(command -v clang || command -v clang-14 || true)"
cxx="$(command -v clang++ || command -v clang++-14 || true)"
if [[ -z "${cxx}" ]]; then
  echo "fuzz: clang++ is not installed (scripts/setup.sh installs it)" >&2
  exit 2
fi
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-${root}}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
# Line tables (-g1) are all a crash's trace needs, at half the compile time.
cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DCMAKE_C_COMPILER="${cc}" -DCMAKE_CXX_COMPILER="${cxx}" -DGANTRY_FUZZ=ON \
  -DGANTRY_WITH_TORCH=OFF -DGANTRY_BUILD_TESTS=OFF -DGANTRY_BUILD_BENCH=OFF >/dev/null
cmake --build "${build}" -j "${GANTRY_JOBS:-$(nproc)}" --target gantry_fuzzers

max_len_of() {
  case "$1" in
    config) echo 8192 ;;
    tokenizer) echo 4096 ;;
    *) echo 16384 ;;
  esac
}

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
for t in "${targets[@]}"; do
  work="${build}/fuzz-work/${t}"
  mkdir -p "${work}/corpus" "${work}/cwd"
  log="${work}/last.log"
  echo "fuzz: ${t} for ${seconds}s (log ${log})"
  # An empty working directory: the config loader reads `uses: x.yml` from it.
  if (cd "${work}/cwd" && "${build}/fuzz/gantry_fuzz_${t}" -max_total_time="${seconds}" \
    -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len="$(max_len_of "$t")" -timeout=10 \
    -print_final_stats=1 -artifact_prefix="${work}/" "$@" \
    "${work}/corpus" "${root}/tests/fuzz/corpus/${t}") >"${log}" 2>&1; then
    runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "${log}" | grep -o '[0-9]*$' || true)"
    echo "fuzz: ${t}: ok, ${runs:-?} executions in ${seconds}s," \
      "corpus $(find "${work}/corpus" -type f | wc -l) inputs"
  else
    status=1
    echo "fuzz: ${t}: FAILED; the end of ${log}:" >&2
    tail -n 40 "${log}" >&2
  fi
done
exit "${status}"
