#!/bin/sh
# Installs this build tree into a temporary prefix, then builds and runs, the
# way a user would:
#   1. examples/external_project (find_package(Gantry), Gantry::gantry): its
#      own Deployment program, and its plugin served by the installed worker;
#      with libtorch (GANTRY_WITH_TORCH), the same for TorchScale, which uses
#      Gantry::torch in its program and the worker's copy in its plugin;
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

if grep -q '^GANTRY_WITH_TORCH:BOOL=ON' "$build/CMakeCache.txt"; then
  step "external project: TorchScale (libtorch, Gantry::torch) in its own Deployment"
  [ -e "$tmp/ext/libtorch_scale_plugin.so" ] || { cat "$tmp/ext.log"; echo "FAIL: no TorchScale plugin"; exit 1; }
  out=$("$tmp/ext/torch_scale_app")
  echo "$out"
  echo "$out" | grep -q 'x: scaled=\[3, 6, 10.5\]' || { echo "FAIL: wrong TorchScale output"; exit 1; }
  # gantry_link_model_malloc gives it the installed gantry-worker's malloc.
  if readelf -d "$prefix/bin/gantry-worker" | grep -q 'NEEDED.*libtcmalloc_minimal'; then
    readelf -d "$tmp/ext/torch_scale_app" | grep -q 'NEEDED.*libtcmalloc_minimal' \
      || { echo "FAIL: torch_scale_app is not linked with tcmalloc as gantry-worker is"; exit 1; }
    echo "$out" | grep -qx 'malloc: tcmalloc' \
      || { echo "FAIL: torch_scale_app does not run on tcmalloc"; exit 1; }

    step "gantry_link_model_malloc on a machine without tcmalloc: a clear error, and the way out"
    # No find_library call may find anything once the package is found, as
    # on a machine without libtcmalloc-minimal4.
    mkdir -p "$tmp/no_tcmalloc"
    cat >"$tmp/no_tcmalloc/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.23)
project(no_tcmalloc LANGUAGES CXX)
find_package(Gantry REQUIRED)
set(CMAKE_IGNORE_PREFIX_PATH "/;/usr;/usr/local")
set(CMAKE_IGNORE_PATH "/lib;/usr/lib;/lib/${CMAKE_LIBRARY_ARCHITECTURE};/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}")
file(WRITE "${PROJECT_BINARY_DIR}/main.cc" "int main() { return 0; }\n")
add_executable(app "${PROJECT_BINARY_DIR}/main.cc")
gantry_link_model_malloc(app)
CMAKE
    if cmake -S "$tmp/no_tcmalloc" -B "$tmp/no_tcmalloc/b1" $generator \
         -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/no_tcmalloc.log" 2>&1; then
      cat "$tmp/no_tcmalloc.log"; echo "FAIL: configure passed without tcmalloc"; exit 1
    fi
    tr -s ' \n' ' ' <"$tmp/no_tcmalloc.log" | grep -q \
      "gantry_link_model_malloc(app): tcmalloc not found .*install Debian's libtcmalloc-minimal4" \
      || { cat "$tmp/no_tcmalloc.log"; echo "FAIL: the error does not name the package"; exit 1; }
    cmake -S "$tmp/no_tcmalloc" -B "$tmp/no_tcmalloc/b2" $generator -DGANTRY_WITH_TCMALLOC=OFF \
      -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/no_tcmalloc.log" 2>&1 \
      || { cat "$tmp/no_tcmalloc.log"; echo "FAIL: -DGANTRY_WITH_TCMALLOC=OFF did not configure"; exit 1; }
  fi

  step "external project: TorchScale plugin in the installed gantry-worker"
  # The plugin carries no gantry code: ToTorch and the device-check
  # registration resolve to the worker's own, which exports them.
  for sym in 'gantry::ToTorch(' 'gantry::RegisterTensorsForDeviceCheck('; do
    nm -DC --undefined-only "$tmp/ext/libtorch_scale_plugin.so" | grep -qF "$sym" \
      || { echo "FAIL: the plugin does not import $sym"; exit 1; }
    nm -DC --defined-only "$prefix/bin/gantry-worker" | grep -qF "$sym" \
      || { echo "FAIL: gantry-worker does not export $sym"; exit 1; }
  done
  # DT_RPATH, which also serves libraries dlopen'ed later (AOTInductor models).
  readelf -d "$prefix/bin/gantry-worker" | grep -q '(RPATH)' \
    || { readelf -d "$prefix/bin/gantry-worker" | grep -i path; echo "FAIL: gantry-worker has no DT_RPATH"; exit 1; }
  serve_plugin "$tmp" --uses TorchScale --uses-with '{"factor": 2.5}' \
    --lib "$tmp/ext/libtorch_scale_plugin.so"
  out=$("$client" "127.0.0.1:$port" /scale 2)
  echo "$out"
  echo "$out" | grep -q '"embedding":\[0.0,1.25\]' || { echo "FAIL: wrong TorchScale plugin output"; exit 1; }
  echo "$out" | grep -q '"embedding":\[2.5,1.25\]' || { echo "FAIL: wrong TorchScale plugin output"; exit 1; }
  # Its registration reached the worker's registry: the worker counted it.
  grep -q 'tensors_on_device=1' "$tmp/server.log" \
    || { cat "$tmp/server.log"; echo "FAIL: the worker did not see TorchScale's tensor"; exit 1; }
  stop_server
fi

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
