#!/usr/bin/env bash
# Gantry next to Jina, same machine, same run, same load generator.
#
#   bash bench/peer/run.sh [--quick] [--no-jina] [--build-dir DIR] [--out DIR]
#                          [--worker PROGRAM] [--starts N] [--torch-worker PROGRAM]
#                          [--encoder-model DIR]
#
# Workloads (docs/benchmarks.md): NoOpExec behind a 1-replica Deployment on
# 127.0.0.1; cold start (spawn -> first successful reply), unary and stream
# throughput/latency at concurrency 1/4/16 with 1-doc requests, the seed job
# (10,000 docs, request_size 32), the same load straight at the worker (no
# gateway), and RSS of gateway and worker idle and after load. Then the
# floor: bare gRPC servers of the same protocol (bench/grpc_floor: an echo
# and a byte relay in front of it) under the same unary load, and each of
# Gantry's two servers paired with the bare other. Writes results.jsonl,
# report.md and throughput.png into the output folder.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build-bench"
OUT=""
QUICK=0
WITH_JINA=1
STARTS=""
WORKER=""
TORCH_WORKER=""
ENCODER_MODEL=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --no-jina) WITH_JINA=0 ;;
    --build-dir) BUILD="$2"; shift ;;
    --out) OUT="$2"; shift ;;
    --worker) WORKER="$2"; shift ;;
    --torch-worker) TORCH_WORKER="$2"; shift ;;
    --encoder-model) ENCODER_MODEL="$2"; shift ;;
    --starts) STARTS="$2"; shift ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
OUT="${OUT:-$BUILD/bench-peer}"
JINA_PY="${JINA_PY:-$ROOT/.venv-jina/bin/python}"
LOADGEN="$BUILD/bin/gantry_loadgen"
GANTRY="$BUILD/bin/gantry"
FLOOR="$BUILD/bin/gantry_grpc_floor"
# The real gantry-worker (links libtorch and every executor) when it was
# built; otherwise the torch-free NoOpExec worker of bench/noop_worker.
if [[ -z "$WORKER" ]]; then
  if [[ -x "$BUILD/bin/gantry-worker" ]] &&
     GANTRY_WORKER_PROGRAM="$BUILD/bin/gantry-worker" timeout 60 "$GANTRY" executors 2>/dev/null |
     grep -q NoOpExec; then
    WORKER="$BUILD/bin/gantry-worker"
  else
    WORKER="$BUILD/bin/gantry_bench_worker"
  fi
fi
for f in "$LOADGEN" "$GANTRY" "$WORKER" "$FLOOR"; do
  [[ -x "$f" ]] || { echo "run.sh: $f is missing; build it first (docs/benchmarks.md)" >&2; exit 2; }
done
if [[ $WITH_JINA == 1 && ! -x "$JINA_PY" ]]; then
  echo "run.sh: $JINA_PY missing (run scripts/jina_venv.sh, or pass --no-jina)" >&2
  exit 2
fi
export GANTRY_WORKER_PROGRAM="$WORKER"

if [[ $QUICK == 1 ]]; then
  LG_TIMING=(--window-ms 300 --warmup-ms 200 --max-windows 3 --stable 2 --stable-pct 25)
  POST_TIMING=(--window-ms 1000 --max-windows 1)
  STARTS="${STARTS:-1}"
  LEVELS="1,4,16"
else
  LG_TIMING=(--window-ms 2000 --warmup-ms 1000 --max-windows 10 --stable 3 --stable-pct 10)
  POST_TIMING=(--window-ms 3000 --max-windows 5)
  STARTS="${STARTS:-5}"
  LEVELS="1,2,4,8,16"
fi
rm -rf "$OUT"
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"

# ---- process bookkeeping: every server is its own process group, killed
# and reaped on any exit path.
GROUPS_ALIVE=()
stop_group() {
  local pgid="$1" i
  kill -TERM -- "-$pgid" 2>/dev/null || true
  for i in $(seq 1 100); do  # 10 s at most
    kill -0 -- "-$pgid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL -- "-$pgid" 2>/dev/null || true
  wait "$pgid" 2>/dev/null || true
}
cleanup() {
  local pgid
  for pgid in "${GROUPS_ALIVE[@]}"; do
    stop_group "$pgid"
  done
  GROUPS_ALIVE=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_server LOGFILE CMD...: runs CMD in a new session; sets SERVER_PID.
start_server() {
  local log="$1"; shift
  setsid "$@" > "$log" 2>&1 &
  SERVER_PID=$!
  GROUPS_ALIVE+=("$SERVER_PID")
}
stop_server() {
  local pgid="$1" keep=() g
  stop_group "$pgid"
  for g in "${GROUPS_ALIVE[@]}"; do [[ "$g" == "$pgid" ]] || keep+=("$g"); done
  GROUPS_ALIVE=("${keep[@]+"${keep[@]}"}")
}

now_ns() { date +%s%N; }

# probe LABEL PORT T0: waits (bounded) for the first successful reply.
probe() {
  "$LOADGEN" --mode probe --address "127.0.0.1:$2" --since-ns "$3" --timeout-ms 120000 \
    --label "$1" --json "$RESULTS" 2>>"$OUT/loadgen.log" >/dev/null
}

# Process roles by listening port: the process listening on the public port
# is the gateway; other listeners in the group are workers; the rest (Jina's
# orchestrating main process) is "main".
pid_listening_on() {
  ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2
}
group_pids() { ps -o pid= -g "$1" | tr -d ' '; }
listens() { ss -ltnpH 2>/dev/null | grep -q "pid=$1,"; }
kb() { awk -v k="$2:" '$1==k {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# find_worker PGID PORT: the first listening process that is not the gateway.
find_worker() {
  local gw pid
  gw="$(pid_listening_on "$2")"
  for pid in $(group_pids "$1"); do
    if [[ "$pid" != "$gw" ]] && listens "$pid"; then echo "$pid"; return 0; fi
  done
  return 0
}

# memory LABEL PHASE PGID PORT: one JSON line per process of the group.
memory() {
  local label="$1" phase="$2" pgid="$3" port="$4" gw pid role
  gw="$(pid_listening_on "$port")"
  for pid in $(group_pids "$pgid"); do
    if [[ "$pid" == "$gw" ]]; then role=gateway
    elif listens "$pid"; then role=worker
    else role=main; fi
    # RssFile is mostly shared-library pages, shared with every other
    # process mapping the same libraries; RssAnon is the process's own heap.
    printf '{"label":"%s","mode":"memory","phase":"%s","role":"%s","pid":%s,"rss_kb":%s,"hwm_kb":%s,"anon_kb":%s,"file_kb":%s,"threads":%s}\n' \
      "$label" "$phase" "$role" "$pid" "$(kb "$pid" VmRSS)" "$(kb "$pid" VmHWM)" \
      "$(kb "$pid" RssAnon)" "$(kb "$pid" RssFile)" "$(kb "$pid" Threads)" >> "$RESULTS"
  done
}

loadgen() {
  "$LOADGEN" "$@" --json "$RESULTS" 2>>"$OUT/loadgen.log" >/dev/null
}

# bench_system LABEL START_FN
bench_system() {
  local label="$1" start_fn="$2" i port t0 pgid
  echo "== $label: $STARTS cold start(s)" >&2
  for i in $(seq 1 "$STARTS"); do
    port="$(free_port)"
    t0="$(now_ns)"
    "$start_fn" "$port" "$OUT/$label-server-$i.log"
    pgid="$SERVER_PID"
    if ! probe "$label" "$port" "$t0"; then
      echo "run.sh: $label did not answer; see $OUT/$label-server-$i.log" >&2
      tail -20 "$OUT/$label-server-$i.log" >&2
      return 1
    fi
    if [[ $i -lt $STARTS ]]; then stop_server "$pgid"; fi
  done
  sleep 2  # let start-up allocations settle before the idle reading
  memory "$label" idle "$pgid" "$port"
  echo "== $label: unary, stream and seed-job load on 127.0.0.1:$port" >&2
  loadgen --address "127.0.0.1:$port" --label "$label" --mode unary --concurrency "$LEVELS" "${LG_TIMING[@]}"
  loadgen --address "127.0.0.1:$port" --label "$label" --mode stream --concurrency "$LEVELS" "${LG_TIMING[@]}"
  loadgen --address "127.0.0.1:$port" --label "$label" --mode post --total-docs 10000 --request-size 32 "${POST_TIMING[@]}"
  if [[ $WITH_JINA == 1 ]]; then
    # Jina's own Python client on the seed job, against this server.
    timeout 300 "$JINA_PY" "$ROOT/bench/peer/jina_client_post.py" --port "$port" --label "$label" \
      --jobs "$([[ $QUICK == 1 ]] && echo 1 || echo 3)" >> "$RESULTS" 2>>"$OUT/loadgen.log" ||
      echo "run.sh: Jina client post against $label failed (see loadgen.log)" >&2
  fi
  # The same load straight at the deployment's own worker (it listens on
  # 127.0.0.1 too), which isolates the gateway hop.
  local worker_pid worker_port
  worker_pid="$(find_worker "$pgid" "$port")"
  worker_port=""
  if [[ -n "$worker_pid" ]]; then
    worker_port="$(ss -ltnpH 2>/dev/null | grep "pid=$worker_pid," | awk '{print $4}' | sed 's/.*://' | head -1 || true)"
  fi
  if [[ -n "$worker_port" ]]; then
    echo "== $label-direct: worker pid $worker_pid on 127.0.0.1:$worker_port, no gateway" >&2
    loadgen --address "127.0.0.1:$worker_port" --label "$label-direct" --mode unary --concurrency "1,16" "${LG_TIMING[@]}"
    if [[ $label == gantry ]]; then
      # The bare relay in place of Gantry's gateway, in front of the same worker.
      floor_pair relay-gantry-worker "$FLOOR" --forward "127.0.0.1:$worker_port"
    fi
  else
    echo "run.sh: no worker port found for $label; skipping the direct run" >&2
  fi
  sleep 1
  memory "$label" after_load "$pgid" "$port"
  stop_server "$pgid"
}

start_gantry() {
  start_server "$2" "$GANTRY" deployment --uses "$ROOT/bench/peer/noop_deployment.yml" \
    --port "$1" --log-level warning
}
start_jina() {
  start_server "$2" env JINA_LOG_LEVEL=WARNING "$JINA_PY" "$ROOT/bench/peer/jina_serve.py" --port "$1"
}

# How an idle CPU waits for its next wake-up sets most of the latency at
# concurrency 1: in a VM, a virtual CPU that halts costs an exit to the host and
# back on every wake-up, unless the guest polls first (the haltpoll driver's
# guest_halt_poll_ns, 200000 by default; some hosts boot their guests with 0).
cpuidle_driver="$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none)"
halt_poll_ns="$(cat /sys/module/haltpoll/parameters/guest_halt_poll_ns 2>/dev/null || echo '')"
{
  printf '{"mode":"machine","cores":%s,"cpu":"%s","kernel":"%s","load1":"%s","quick":%s,"worker":"%s","cpuidle":"%s","guest_halt_poll_ns":"%s"}\n' \
    "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//; s/"//g')" \
    "$(uname -r)" "$(cut -d' ' -f1 /proc/loadavg)" "$QUICK" "$(basename "$WORKER")" \
    "$cpuidle_driver" "$halt_poll_ns"
} >> "$RESULTS"

# floor_pair LABEL CMD...: starts CMD (with --port P appended) in front of
# what it names, waits for its first reply and runs the unary load at it.
floor_pair() {
  local label="$1" port pgid; shift
  port="$(free_port)"
  start_server "$OUT/$label.log" "$@" --port "$port"
  pgid="$SERVER_PID"
  if probe "$label" "$port" "$(now_ns)"; then
    echo "== $label: unary load on 127.0.0.1:$port" >&2
    loadgen --address "127.0.0.1:$port" --label "$label" --mode unary --concurrency "1,16" \
      "${LG_TIMING[@]}" || echo "run.sh: $label: the load generator failed (see loadgen.log)" >&2
  else
    echo "run.sh: $label did not answer; see $OUT/$label.log" >&2
    tail -20 "$OUT/$label.log" >&2
  fi
  stop_server "$pgid"
}

# The floor: what gRPC itself costs on this machine, with the same client.
# floor-sync is one hop on the sync API (the worker's shape), floor-callback
# one hop on the callback API without protobuf, floor-relay two hops (the
# relay on the callback API with a generic stub, the gateway's shape), and
# floor-relay-async the same relay on the async API, one polling thread.
bench_floor() {
  local echo_port echo_pgid
  floor_pair floor-sync "$FLOOR" --echo sync
  floor_pair floor-callback "$FLOOR" --echo callback
  echo_port="$(free_port)"
  start_server "$OUT/floor-echo.log" "$FLOOR" --echo sync --port "$echo_port"
  echo_pgid="$SERVER_PID"
  if probe floor-echo "$echo_port" "$(now_ns)"; then
    floor_pair floor-relay "$FLOOR" --forward "127.0.0.1:$echo_port"
    floor_pair floor-relay-async "$FLOOR" --forward "127.0.0.1:$echo_port" --api async
    # Gantry's gateway in front of the bare echo.
    floor_pair gantry-gateway-echo "$GANTRY" gateway --replica-addresses "127.0.0.1:$echo_port" \
      --log-level warning
  else
    echo "run.sh: the bare echo did not answer; see $OUT/floor-echo.log" >&2
  fi
  stop_server "$echo_pgid"
}

bench_system gantry start_gantry
bench_floor
if [[ $WITH_JINA == 1 ]]; then
  bench_system jina start_jina
fi

# Optional: cold start and idle RSS of a libtorch-linked gantry-worker
# (MyGPUExec on CPU, no model), next to the torch-free NoOpExec worker.
if [[ -n "$TORCH_WORKER" ]]; then
  echo "== gantry-torch: $TORCH_WORKER" >&2
  for i in $(seq 1 "$STARTS"); do
    port="$(free_port)"
    t0="$(now_ns)"
    GANTRY_WORKER_PROGRAM="$TORCH_WORKER" start_server "$OUT/gantry-torch-$i.log" "$GANTRY" deployment \
      --uses "$ROOT/bench/peer/torch_deployment.yml" --port "$port" --log-level warning
    pgid="$SERVER_PID"
    "$LOADGEN" --mode probe --endpoint /encode --address "127.0.0.1:$port" --since-ns "$t0" \
      --timeout-ms 120000 --label gantry-torch --json "$RESULTS" 2>>"$OUT/loadgen.log" >/dev/null ||
      echo "run.sh: gantry-torch did not answer (see $OUT/gantry-torch-$i.log)" >&2
    if [[ $i -eq $STARTS ]]; then sleep 2; memory gantry-torch idle "$pgid" "$port"; fi
    stop_server "$pgid"
  done
fi

# Optional: idle RSS of a SentenceEncoder replica on the CPU (float32, the
# sentence-transformers folder DIR), served by the libtorch-linked worker,
# once it has answered one request.
if [[ -n "$ENCODER_MODEL" ]]; then
  encoder_worker="${TORCH_WORKER:-$WORKER}"
  echo "== gantry-encoder: $encoder_worker, $ENCODER_MODEL" >&2
  port="$(free_port)"
  t0="$(now_ns)"
  GANTRY_MODEL_PATH="$ENCODER_MODEL" GANTRY_WORKER_PROGRAM="$encoder_worker" \
    start_server "$OUT/gantry-encoder.log" "$GANTRY" deployment \
    --uses "$ROOT/bench/peer/encoder_deployment.yml" --port "$port" --log-level warning
  pgid="$SERVER_PID"
  if "$LOADGEN" --mode probe --endpoint /encode --address "127.0.0.1:$port" --since-ns "$t0" \
      --timeout-ms 120000 --label gantry-encoder --json "$RESULTS" 2>>"$OUT/loadgen.log" >/dev/null; then
    sleep 2
    memory gantry-encoder idle "$pgid" "$port"
  else
    echo "run.sh: gantry-encoder did not answer (see $OUT/gantry-encoder.log)" >&2
  fi
  stop_server "$pgid"
fi

PLOT_PY="$JINA_PY"
[[ -x "$PLOT_PY" ]] || PLOT_PY=python3
"$PLOT_PY" "$ROOT/bench/peer/report.py" "$RESULTS" "$OUT"
echo "run.sh: results in $OUT (report.md, throughput.png, results.jsonl)" >&2
