#!/usr/bin/env bash
# ctest smoke test (label `bench`): gantry_loadgen runs briefly against a
# Gantry deployment of NoOpExec and must report > 0 req/s without errors.
# With FLOOR (gantry_grpc_floor), the same through a bare relay (callback
# API, then async API) in front of a bare echo, and through `gantry gateway`
# in front of that echo; then through `gantry gateway` in front of an echo
# without a health service, after enough liveness checks (one a second, three
# misses take a replica out) that such a replica would have left rotation if
# its UNIMPLEMENTED answers counted as misses.
# Speed is never asserted.
#   smoke.sh GANTRY_CLI WORKER_PROGRAM LOADGEN [FLOOR]
set -euo pipefail
CLI="$1" WORKER="$2" LOADGEN="$3" FLOOR="${4:-}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="$(mktemp -d)"
PID=""
FLOOR_PIDS=()
stop() {
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  local pid
  if [[ -n "$PID" ]]; then stop "$PID"; fi
  for pid in "${FLOOR_PIDS[@]+"${FLOOR_PIDS[@]}"}"; do stop "$pid"; done
  rm -rf "$DIR"
}
trap cleanup EXIT

GANTRY_WORKER_PROGRAM="$WORKER" "$CLI" deployment --uses "$ROOT/bench/peer/noop_deployment.yml" \
  --port 0 --port-file "$DIR/port" --log-level warning > "$DIR/server.log" 2>&1 &
PID=$!
for _ in $(seq 1 600); do  # 60 s at most
  [[ -s "$DIR/port" ]] && break
  kill -0 "$PID" 2>/dev/null || { cat "$DIR/server.log"; exit 1; }
  sleep 0.1
done
[[ -s "$DIR/port" ]] || { echo "deployment not ready in 60 s"; cat "$DIR/server.log"; exit 1; }
PORT="$(tr -d '[:space:]' < "$DIR/port")"

fail=0
for mode in unary stream; do
  line="$(timeout 60 "$LOADGEN" --address "127.0.0.1:$PORT" --mode "$mode" --concurrency 1,2 \
    --window-ms 200 --warmup-ms 100 --max-windows 2 --stable 1 --label smoke | grep '^RESULT ' | tail -1)"
  echo "$mode: $line"
  python3 - "$line" <<'PY' || fail=1
import json, sys
r = json.loads(sys.argv[1][len('RESULT '):])
ok = r['req_per_s'] > 0 and r['errors'] == 0 and r['p50_us'] > 0 and r['p99_us'] >= r['p50_us']
sys.exit(0 if ok else 1)
PY
done
line="$(timeout 60 "$LOADGEN" --address "127.0.0.1:$PORT" --mode post --total-docs 1000 \
  --request-size 32 --max-windows 1 --label smoke | grep '^RESULT ' | tail -1)"
echo "post: $line"
[[ "$line" == *'"docs_per_s"'* ]] || fail=1

# unary_ok LABEL PORT: a short unary run at PORT answers, without errors.
unary_ok() {
  local out
  out="$(timeout 60 "$LOADGEN" --address "127.0.0.1:$2" --mode unary --concurrency 1,2 \
    --window-ms 200 --warmup-ms 100 --max-windows 2 --stable 1 --label "$1" | grep '^RESULT ' | tail -1)"
  echo "$1: $out"
  python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1][len('RESULT '):])
sys.exit(0 if r['req_per_s'] > 0 and r['errors'] == 0 else 1)
PY
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# start_gateway NAME UPSTREAM_PORT: `gantry gateway` in front of the bare
# server at UPSTREAM_PORT; sets GATEWAY_PORT once it listens.
start_gateway() {
  "$CLI" gateway --replica-addresses "127.0.0.1:$2" --port 0 --port-file "$DIR/$1.port" \
    --log-level warning > "$DIR/$1.log" 2>&1 &
  FLOOR_PIDS+=("$!")
  for _ in $(seq 1 600); do  # 60 s at most
    [[ -s "$DIR/$1.port" ]] && break
    sleep 0.1
  done
  [[ -s "$DIR/$1.port" ]] || { echo "$1 not ready in 60 s"; cat "$DIR/$1.log"; exit 1; }
  GATEWAY_PORT="$(tr -d '[:space:]' < "$DIR/$1.port")"
}
if [[ -n "$FLOOR" ]]; then
  echo_port="$(free_port)" relay_port="$(free_port)" async_relay_port="$(free_port)"
  "$FLOOR" --port "$echo_port" --echo sync > "$DIR/echo.log" 2>&1 &
  FLOOR_PIDS+=("$!")
  "$FLOOR" --port "$relay_port" --forward "127.0.0.1:$echo_port" > "$DIR/relay.log" 2>&1 &
  FLOOR_PIDS+=("$!")
  "$FLOOR" --port "$async_relay_port" --forward "127.0.0.1:$echo_port" --api async \
    > "$DIR/async-relay.log" 2>&1 &
  FLOOR_PIDS+=("$!")
  start_gateway gateway "$echo_port"
  # The probe waits (bounded) until each bare server listens.
  for port in "$echo_port" "$relay_port" "$async_relay_port"; do
    timeout 60 "$LOADGEN" --mode probe --address "127.0.0.1:$port" --timeout-ms 30000 > /dev/null ||
      { echo "bare server on $port did not answer"; cat "$DIR/echo.log" "$DIR/relay.log" \
        "$DIR/async-relay.log"; exit 1; }
  done
  unary_ok floor-relay "$relay_port" || fail=1
  unary_ok floor-relay-async "$async_relay_port" || fail=1
  unary_ok gantry-gateway-echo "$GATEWAY_PORT" || fail=1

  bare_port="$(free_port)"
  "$FLOOR" --port "$bare_port" --echo sync --no-health > "$DIR/bare.log" 2>&1 &
  FLOOR_PIDS+=("$!")
  timeout 60 "$LOADGEN" --mode probe --address "127.0.0.1:$bare_port" --timeout-ms 30000 > /dev/null ||
    { echo "echo without health on $bare_port did not answer"; cat "$DIR/bare.log"; exit 1; }
  start_gateway gateway-no-health "$bare_port"
  sleep 4.5  # four liveness checks and a half
  unary_ok gantry-gateway-echo-without-health "$GATEWAY_PORT" ||
    { fail=1; cat "$DIR/gateway-no-health.log"; }
fi
exit "$fail"
