#!/usr/bin/env bash
# Configures and builds Gantry into build/ (or $GANTRY_BUILD_DIR).
#
#   scripts/build.sh [extra cmake -D options...]
#
# GANTRY_BUILD_TARGETS="a b": build only those targets (the main job builds
# the two programs it runs, not the test suite).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${GANTRY_BUILD_DIR:-$root/build}"
jobs="${GANTRY_JOBS:-$(nproc)}"
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere
# (CI's) reuses what an earlier build compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-${root}}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
targets=()
if [[ -n "${GANTRY_BUILD_TARGETS:-}" ]]; then
  read -r -a names <<<"${GANTRY_BUILD_TARGETS}"
  targets=(--target "${names[@]}")
fi
cmake --build "$build" -j "$jobs" "${targets[@]}"
