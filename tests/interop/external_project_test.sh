#!/bin/sh
# Installs this build tree into a temporary prefix, then builds and runs, the
# way a user would:
#   1. examples/external_project (find_package(Gantry), Gantry::gantry): its
#      own Deployment program, and its plugin served by the installed worker;
#   2. a `gantry new` scaffold, as generated: program self-check and plugin.
# usage: external_project_test.sh BUILD_DIR EXAMPLE_DIR INTEROP_CLIENT
set -eu
build="$1"
example="$2"
client="$3"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gantry-install-XXXXXX")
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

generator=""
if command -v ninja >/dev/null 2>&1; then generator="-GNinja"; fi

step() { echo "== $*"; }

# Serves a plugin with the installed CLI from directory $1, waits for its
# port (into $port); the caller stops it with stop_server.
serve_plugin() {
  dir="$1"; shift
  rm -f "$tmp/port"
  (cd "$dir" && exec "$prefix/bin/gantry" executor "$@" --port 0 --port-file "$tmp/port") \
    >"$tmp/server.log" 2>&1 &
  pid=$!
  i=0
  while [ ! -s "$tmp/port" ]; do
    i=$((i + 1))
    if [ $i -gt 600 ] || ! kill -0 "$pid" 2>/dev/null; then
      cat "$tmp/server.log"; echo "FAIL: plugin server did not start"; exit 1
    fi
    sleep 0.1
  done
  port=$(cat "$tmp/port")
}
stop_server() { kill "$pid"; wait "$pid" || true; pid=""; }

step "cmake --install $build --prefix $tmp/prefix"
prefix="$tmp/prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
for f in include/gantry/executor.h include/gantry/deployment.h lib/cmake/Gantry/GantryConfig.cmake \
         lib/cmake/Gantry/GantryTargets.cmake bin/gantry bin/gantry-worker; do
  [ -e "$prefix/$f" ] || { echo "FAIL: $f is not installed"; exit 1; }
done

step "external project: configure and build against the installed package"
cmake -S "$example" -B "$tmp/ext" $generator -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/ext.log" 2>&1 || { cat "$tmp/ext.log"; exit 1; }
cmake --build "$tmp/ext" -j2 >>"$tmp/ext.log" 2>&1 || { cat "$tmp/ext.log"; exit 1; }

step "external project: its own Deployment"
out=$("$tmp/ext/word_count_app")
echo "$out"
echo "$out" | grep -q "the quick brown fox: words=4 chars=19" || { echo "FAIL: wrong output"; exit 1; }

step "external project: its plugin in the installed gantry-worker"
serve_plugin "$tmp" --uses WordCount --lib "$tmp/ext/libword_count_plugin.so"
out=$("$client" "127.0.0.1:$port" /count 2)
echo "$out"
echo "$out" | grep -q '"embedding":\[1.0,4.0\]' || { echo "FAIL: wrong plugin output"; exit 1; }
stop_server

step "gantry new HelloExec: generate, build, run"
"$prefix/bin/gantry" new HelloExec --dir "$tmp/hello"
for f in CMakeLists.txt executor.cc main.cc executor.yml Dockerfile README.md; do
  [ -s "$tmp/hello/$f" ] || { echo "FAIL: scaffold lacks $f"; exit 1; }
done
cmake -S "$tmp/hello" -B "$tmp/hello/build" $generator -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/hello.log" 2>&1 || { cat "$tmp/hello.log"; exit 1; }
cmake --build "$tmp/hello/build" -j2 >>"$tmp/hello.log" 2>&1 || { cat "$tmp/hello.log"; exit 1; }
out=$("$tmp/hello/build/hello_exec_server" --check)
echo "$out"
[ "$out" = "hello world" ] || { echo "FAIL: scaffold program said '$out'"; exit 1; }
serve_plugin "$tmp/hello" --uses executor.yml
out=$("$client" "127.0.0.1:$port" /encode 1)
echo "$out"
echo "$out" | grep -q '"text":"hello doc0"' || { echo "FAIL: wrong scaffold plugin output"; exit 1; }
stop_server
echo "PASS"
