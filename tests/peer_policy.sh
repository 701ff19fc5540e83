# Sourced by the ctest drivers whose tests need a peer that may be missing
# (the Jina venv, the model folder, the parity venv). Outside CI a missing
# peer skips the test (exit 77, ctest "Skipped") with the reason; in CI
# (CI=true, which CI runners set, or GANTRY_REQUIRE_PEERS=1) it fails it
# (exit 1) with the same reason: a CI run that cannot test must not pass.
# Only tests labelled `gpu` may skip in CI, and they do not use this.

# True when a missing peer must fail the test.
peers_required() {
  [ "${CI:-}" = "true" ] || [ "${GANTRY_REQUIRE_PEERS:-}" = "1" ]
}

# skip_or_fail REASON: exits 77 with "SKIPPED: REASON", or 1 with
# "FAILED: REASON" when peers_required.
skip_or_fail() {
  if peers_required; then
    echo "FAILED: $1 (a missing peer fails the test when CI=true or GANTRY_REQUIRE_PEERS=1)" >&2
    exit 1
  fi
  echo "SKIPPED: $1 (set GANTRY_REQUIRE_PEERS=1 to make this a failure)" >&2
  exit 77
}

# run_checked COMMAND [ARGS...]: runs a gtest binary (or any command) and
# exits with its status, except that a run that passed only because tests
# called GTEST_SKIP (ctest would show it as "Passed") goes through
# skip_or_fail too: the binary's own "peer missing" skips are not silent.
run_checked() {
  out="$(mktemp)"
  "$@" >"$out" 2>&1
  rc=$?
  cat "$out"
  skipped="$(grep -c '^\[  SKIPPED \]' "$out" || true)"
  rm -f "$out"
  if [ "$rc" -eq 0 ] && [ "${skipped:-0}" -gt 0 ]; then
    skip_or_fail "$1 skipped tests (GTEST_SKIP; reason in its output above)"
  fi
  exit "$rc"
}
