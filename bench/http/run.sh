#!/usr/bin/env bash
# HTTP throughput of two Gantry builds side by side, in one command: what a
# change to the gateway's HTTP server (or anything under it) did to requests/s
# and latency, before against after, on the same machine in the same run.
#
#   bench/http/run.sh --before DIR [--after DIR] [--concurrency 1,16,256]
#                     [--window-ms 2000] [--csv FILE] [--loadgen FILE]
#
# DIR is a build directory, or a frozen copy of one: bin/gantry and
# lib/libgantry_interop_plugin.so (bin/gantry_loadgen is only needed in the
# after build). --after defaults to ${GANTRY_BUILD_DIR:-<repo>/build}.
#
# For each concurrency level, each build in turn (before first on the 1st,
# 3rd, ... level, after first on the others, so that drift on the machine
# weighs on both alike) starts its own Deployment as bench/kserve/run.sh
# does: 2 replicas of InteropExec (tests/interop: a plugin whose embedding is
# [len(text), scale, offset], so the model costs nothing and the figures are
# the framework's) with --http-port. Two routes are then measured over
# HTTP/1.1 keep-alive, each request carrying one 32-character text:
#   jina    POST /post {"data":[{"text":...}],"execEndpoint":"/encode"}
#   kserve  POST /v2/models/tiny-encoder/infer, one BYTES input "text" [1,1]
#           (what perf_analyzer sends in bench/kserve/run.sh)
# The client is gantry_loadgen --mode http (one keep-alive cpp-httplib client
# per thread, windows repeated until 3 agree within 10%), the same binary for
# both builds: the after build's, or --loadgen FILE. Any answer but a 200
# with the expected embedding, or a connection error, fails the run.
# Prints a table of requests/s, after/before and p50/p99 latency per route
# and level; --csv FILE writes the same rows as CSV.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
before=""
after="${GANTRY_BUILD_DIR:-${root}/build}"
levels="1,16,256"
window=2000
csv=""
loadgen=""
usage="usage: $0 --before DIR [--after DIR] [--concurrency 1,16,256] [--window-ms MS] [--csv FILE] [--loadgen FILE]"
while (($#)); do
  case "$1" in
    --before) before="$2"; shift 2 ;;
    --after) after="$2"; shift 2 ;;
    --concurrency) levels="$2"; shift 2 ;;
    --window-ms) window="$2"; shift 2 ;;
    --csv) csv="$2"; shift 2 ;;
    --loadgen) loadgen="$2"; shift 2 ;;
    *) echo "${usage}" >&2; exit 2 ;;
  esac
done
[[ -n "${before}" ]] || { echo "${usage}" >&2; exit 2; }
[[ "${levels}" =~ ^[0-9]+(,[0-9]+)*$ && "${window}" =~ ^[0-9]+$ ]] || { echo "${usage}" >&2; exit 2; }
before="$(cd "${before}" 2>/dev/null && pwd)" || { echo "run.sh: --before: no such directory" >&2; exit 1; }
after="$(cd "${after}" 2>/dev/null && pwd)" || { echo "run.sh: --after: no such directory" >&2; exit 1; }
loadgen="${loadgen:-${after}/bin/gantry_loadgen}"
for dir in "${before}" "${after}"; do
  for f in "${dir}/bin/gantry" "${dir}/lib/libgantry_interop_plugin.so"; do
    [[ -e "${f}" ]] || { echo "run.sh: ${f} missing (build the default targets in ${dir})" >&2; exit 1; }
  done
done
[[ -x "${loadgen}" ]] || { echo "run.sh: ${loadgen} missing (build gantry_loadgen, or pass --loadgen FILE)" >&2; exit 1; }
# (its usage text, exit status 2; not piped into grep -q, whose early exit
# would fail the pipe)
if [[ "$(timeout 10 "${loadgen}" --help 2>&1 || true)" != *--http-path* ]]; then
  echo "run.sh: ${loadgen} has no --mode http (built before bench/loadgen gained it):" \
    "rebuild gantry_loadgen, or pass --loadgen FILE" >&2
  exit 1
fi

# Limits: a Deployment gets 30 s to serve both routes and 15 s to stop on
# SIGTERM (then SIGKILL, its process group included); a loadgen run gets its
# warm-up, at most max_windows windows and a request timeout, plus slack.
max_windows=10
request_timeout_ms=30000
lg_limit_s=$(((500 + window * max_windows + request_timeout_ms) / 1000 + 30))
tmp="$(mktemp -d)"
pid=""     # the running `gantry deployment`, leader of its own process group
lg_pid=""  # the running `timeout ... gantry_loadgen`
# Running and not yet a zombie (kill -0 succeeds on an unreaped child).
alive() {
  local state
  state="$(ps -o stat= -p "$1" 2>/dev/null)" && [[ "${state}" != Z* ]]
}
stop_gantry() {
  [[ -n "${pid}" ]] || return 0
  kill -TERM "${pid}" 2>/dev/null || true
  for _ in $(seq 150); do alive "${pid}" || break; sleep 0.1; done
  kill -KILL -- "-${pid}" 2>/dev/null || true  # what is left of it and its workers
  wait "${pid}" 2>/dev/null || true
  pid=""
}
cleanup() {
  if [[ -n "${lg_pid}" ]]; then
    kill -TERM "${lg_pid}" 2>/dev/null || true  # timeout passes it on to the loadgen
    for _ in $(seq 50); do alive "${lg_pid}" || break; sleep 0.1; done
    kill -KILL -- "-${lg_pid}" 2>/dev/null || kill -KILL "${lg_pid}" 2>/dev/null || true
    wait "${lg_pid}" 2>/dev/null || true
  fi
  stop_gantry
  rm -rf "${tmp}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

text="$(printf '%-32.32s' "gantry http bench, 32-char text")"  # no JSON escapes
printf '{"data":[{"text":"%s"}],"execEndpoint":"/encode"}' "${text}" > "${tmp}/jina.json"
printf '{"inputs":[{"name":"text","shape":[1,1],"datatype":"BYTES","data":["%s"]}]}' "${text}" \
  > "${tmp}/kserve.json"
# route name, path, body, what a correct 200 contains (the embedding's first
# value, len(text) = 32)
routes=(
  "jina /post ${tmp}/jina.json \"embedding\":[32"
  "kserve /v2/models/tiny-encoder/infer ${tmp}/kserve.json \"data\":[32"
)

# Starts build $1's Deployment; sets pid and http_port.
start_gantry() {
  local dir="$1"
  http_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  cat > "${tmp}/deployment.yml" <<YML
jtype: Deployment
with:
  name: tiny-encoder
  replicas: 2
  uses:
    jtype: InteropExec
    with: {scale: 2.0}
    metas:
      libs: [${dir}/lib/libgantry_interop_plugin.so]
YML
  rm -f "${tmp}/port"
  # Its own process group, so that nothing of it can outlive this script.
  setsid "${dir}/bin/gantry" deployment --uses "${tmp}/deployment.yml" --port 0 \
    --http-port "${http_port}" --port-file "${tmp}/port" --log-level warning \
    >"${tmp}/gantry.log" 2>&1 &
  pid=$!
  # Ready once its port file is written and both routes answer 200.
  for _ in $(seq 300); do [[ -s "${tmp}/port" ]] && break; alive "${pid}" || break; sleep 0.1; done
  if ! [[ -s "${tmp}/port" ]] || ! python3 - "${http_port}" "${tmp}/jina.json" "${tmp}/kserve.json" <<'PY'
import sys, time, urllib.request
port, jina, kserve = sys.argv[1:]
deadline = time.monotonic() + 30
error = None
for path, body in (("/post", jina), ("/v2/models/tiny-encoder/infer", kserve)):
    while True:
        try:
            request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                             data=open(body, "rb").read(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=5) as reply:
                if reply.status == 200:
                    break
        except Exception as e:
            error = e
        if time.monotonic() > deadline:
            sys.exit(f"run.sh: POST {path} on 127.0.0.1:{port} not answered 200 in 30 s: {error}")
        time.sleep(0.1)
PY
  then
    echo "run.sh: ${dir}/bin/gantry deployment did not become ready; its log:" >&2
    cat "${tmp}/gantry.log" >&2
    exit 1
  fi
}

echo "route,concurrency,side,req_per_s,p50_us,p99_us,stable" > "${tmp}/raw.csv"
index=0
for c in ${levels//,/ }; do
  sides=(before after)
  ((index % 2 == 0)) || sides=(after before)
  index=$((index + 1))
  for side in "${sides[@]}"; do
    dir="${before}"
    [[ "${side}" == after ]] && dir="${after}"
    start_gantry "${dir}"
    for route in "${routes[@]}"; do
      read -r name path body expect <<<"${route}"
      echo "  ${side} ${name} c=${c} (${dir})" >&2
      timeout -k 5 "${lg_limit_s}" "${loadgen}" --address "127.0.0.1:${http_port}" --mode http \
        --http-path "${path}" --http-body-file "${body}" --http-expect "${expect}" \
        --concurrency "${c}" --window-ms "${window}" --max-windows "${max_windows}" \
        --timeout-ms "${request_timeout_ms}" --label "${side} ${name}" >"${tmp}/lg.log" 2>&1 &
      lg_pid=$!
      status=0
      wait "${lg_pid}" || status=$?
      lg_pid=""
      if ((status != 0)); then
        echo "run.sh: ${side} ${name} c=${c} failed (exit ${status}); loadgen output:" >&2
        cat "${tmp}/lg.log" >&2
        echo "gantry log:" >&2
        cat "${tmp}/gantry.log" >&2
        exit 1
      fi
      python3 - "${tmp}/lg.log" "${name}" "${c}" "${side}" >>"${tmp}/raw.csv" <<'PY'
import json, sys
r = None
for line in open(sys.argv[1]):
    if line.startswith("RESULT "):
        r = json.loads(line[7:])
if r is None or r["errors"] or not r["requests"]:
    sys.exit(f"run.sh: no clean result in {sys.argv[1]}")
print(f"{sys.argv[2]},{sys.argv[3]},{sys.argv[4]},{r['req_per_s']:.1f},{r['p50_us']:.0f},"
      f"{r['p99_us']:.0f},{'yes' if r['stable'] else 'no'}")
PY
    done
    stop_gantry
  done
done

python3 - "${tmp}/raw.csv" >"${tmp}/table.csv" <<'PY'
import csv, sys
rows = {}
for r in csv.DictReader(open(sys.argv[1])):
    rows.setdefault((r["route"], int(r["concurrency"])), {})[r["side"]] = r
print("route,concurrency,before_req_s,after_req_s,after/before,before_p50_ms,before_p99_ms,"
      "after_p50_ms,after_p99_ms,stable")
ms = lambda us: f"{float(us) / 1000:.3f}"
for (route, c), s in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    b, a = s["before"], s["after"]
    ratio = float(a["req_per_s"]) / float(b["req_per_s"])
    unstable = [side for side in ("before", "after") if s[side]["stable"] != "yes"]
    stable = "yes" if not unstable else "no (" + "+".join(unstable) + ")"
    print(f"{route},{c},{float(b['req_per_s']):.0f},{float(a['req_per_s']):.0f},{ratio:.2f},"
          f"{ms(b['p50_us'])},{ms(b['p99_us'])},{ms(a['p50_us'])},{ms(a['p99_us'])},{stable}")
PY
describe() {
  local commit=""
  [[ -f "$1/COMMIT" ]] && commit=" (commit $(head -c 12 "$1/COMMIT"))"
  echo "$1${commit}"
}
echo "machine: $(nproc) cores, $(uname -m); window ${window} ms; loadgen ${loadgen}"
echo "before: $(describe "${before}")"
echo "after:  $(describe "${after}")"
column -s, -t < "${tmp}/table.csv"
if [[ -n "${csv}" ]]; then
  cp "${tmp}/table.csv" "${csv}"
fi
