#!/usr/bin/env bash
# ctest smoke test (label `bench`): gantry_loadgen runs briefly against a
# Gantry deployment of NoOpExec and must report > 0 req/s without errors.
# Speed is never asserted.
#   smoke.sh GANTRY_CLI WORKER_PROGRAM LOADGEN
set -euo pipefail
CLI="$1" WORKER="$2" LOADGEN="$3"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="$(mktemp -d)"
PID=""
cleanup() {
  if [[ -n "$PID" ]]; then
    kill -TERM "$PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
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
exit "$fail"
