#!/usr/bin/env bash
# Triton's perf_analyzer (KServe v2 over gRPC and HTTP) beside our own load
# generator (Jina's protocol) against one Gantry Deployment, in one command:
# what each protocol costs on the same gateway, workers and executor.
#
#   bench/kserve/run.sh [--build-dir DIR] [--concurrency 1,4,16] [--window-ms 2000]
#
# The Deployment: 2 replicas of InteropExec (tests/interop: a plugin whose
# embedding is [len(text), scale, offset], so the model costs nothing and
# the figures are the framework's). Each request carries one 32-character
# text and returns its 3-d embedding. perf_analyzer comes from
# scripts/perf_analyzer.sh; gantry_loadgen posts unary process_single_data.
# Prints a table of requests/s and p50/p99 latency per side and level.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${GANTRY_BUILD_DIR:-${root}/build}"
levels="1,4,16"
window=2000
while (($#)); do
  case "$1" in
    --build-dir) build="$2"; shift 2 ;;
    --concurrency) levels="$2"; shift 2 ;;
    --window-ms) window="$2"; shift 2 ;;
    *) echo "usage: $0 [--build-dir DIR] [--concurrency 1,4,16] [--window-ms MS]" >&2; exit 2 ;;
  esac
done
gantry="${build}/bin/gantry"
loadgen="${build}/bin/gantry_loadgen"
plugin="${build}/lib/libgantry_interop_plugin.so"
for f in "${gantry}" "${loadgen}" "${plugin}"; do
  [[ -e "${f}" ]] || { echo "run.sh: ${f} missing (build the default targets in ${build})" >&2; exit 1; }
done
tmp="$(mktemp -d)"
pid=""
cleanup() {
  if [[ -n "${pid}" ]]; then kill "${pid}" 2>/dev/null || true; wait "${pid}" 2>/dev/null || true; fi
  rm -rf "${tmp}"
}
trap cleanup EXIT
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
      libs: [${plugin}]
YML
"${gantry}" deployment --uses "${tmp}/deployment.yml" --port 0 --http-port "${http_port}" \
  --port-file "${tmp}/port" --log-level warning >"${tmp}/gantry.log" 2>&1 &
pid=$!
for _ in $(seq 300); do [[ -s "${tmp}/port" ]] && break; sleep 0.1; done
[[ -s "${tmp}/port" ]] || { cat "${tmp}/gantry.log" >&2; exit 1; }
port="$(cat "${tmp}/port")"

echo "side,concurrency,req_per_s,p50_us,p99_us" > "${tmp}/results.csv"
for c in ${levels//,/ }; do
  for protocol in grpc http; do
    url="127.0.0.1:${port}"
    [[ "${protocol}" == http ]] && url="127.0.0.1:${http_port}"
    "${root}/scripts/perf_analyzer.sh" -m tiny-encoder -i "${protocol}" -u "${url}" \
      --string-length 32 --measurement-interval "${window}" --concurrency-range "${c}" \
      --stability-percentage 25 --max-trials 20 -f "${tmp}/pa.csv" >"${tmp}/pa.log" 2>&1 ||
      { cat "${tmp}/pa.log" >&2; exit 1; }
    python3 - "${tmp}/pa.csv" "perf_analyzer KServe ${protocol}" "${c}" >>"${tmp}/results.csv" <<'PY'
import csv, sys
row = next(csv.DictReader(open(sys.argv[1])))
print(f"{sys.argv[2]},{sys.argv[3]},{float(row['Inferences/Second']):.0f},"
      f"{row.get('p50 latency', '')},{row.get('p99 latency', '')}")
PY
  done
  "${loadgen}" --address "127.0.0.1:${port}" --mode unary --concurrency "${c}" \
    --docs-per-request 1 --endpoint /encode --window-ms "${window}" >"${tmp}/lg.log" 2>&1 ||
    { cat "${tmp}/lg.log" >&2; exit 1; }
  python3 - "${tmp}/lg.log" "${c}" >>"${tmp}/results.csv" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("RESULT "):
        r = json.loads(line[7:])
print(f"gantry_loadgen Jina unary,{sys.argv[2]},{r['req_per_s']:.0f},{r['p50_us']:.0f},"
      f"{r['p99_us']:.0f}")
PY
done
echo "machine: $(nproc) cores, $(uname -m); $( "${root}/scripts/perf_analyzer.sh" --version 2>&1 | head -1)"
column -s, -t < "${tmp}/results.csv"
