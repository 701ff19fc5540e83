#!/usr/bin/env bash
# Soak test: a 2-replica `gantry deployment` of SoakExec (bench/soak, a
# torch-free plugin) under mixed load for SECONDS: good requests, bad ones,
# and every FAULT_EVERY seconds a fault, in turn: SIGKILL of replica rep-1,
# SIGSTOP of it (hung: the liveness probe must replace it), a poison request
# (crashes the replica serving it), SIGHUP (a rolling restart of both
# replicas) (bench/soak/soak.cc). Reports requests served, errors by code,
# repair times and the RSS of every process at start, every 30 s and at the
# end; then stops the deployment with SIGTERM and checks that it exits 0
# with no worker left behind.
#
#   scripts/soak.sh [SECONDS=600] [FAULT_EVERY=20] [THREADS=4] [FAULTS=kill,stall,poison,rolling]
#
# THREADS: client threads posting good requests (each keeps one in flight).
#
# Needs a build with bin/gantry, bin/gantry-worker, bin/gantry_soak and
# lib/libgantry_soak_plugin.so (cmake --build build --target gantry_cli
# gantry_worker gantry_soak gantry_soak_plugin); GANTRY_BUILD_DIR picks the
# build (default build/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${GANTRY_BUILD_DIR:-${root}/build}"
seconds="${1:-600}"
fault_every="${2:-20}"
threads="${3:-4}"
faults="${4:-kill,stall,poison,rolling}"
plugin="${build}/lib/libgantry_soak_plugin.so"
for program in "${build}/bin/gantry" "${build}/bin/gantry-worker" "${build}/bin/gantry_soak" \
  "${plugin}"; do
  if [[ ! -e "${program}" ]]; then
    echo "soak: ${program} is missing; build it first" >&2
    exit 2
  fi
done

work="$(mktemp -d)"
cli_pid=""
cleanup() {
  if [[ -n "${cli_pid}" ]] && kill -0 "${cli_pid}" 2>/dev/null; then
    kill -KILL "${cli_pid}" 2>/dev/null || true  # its workers exit with it (lifeline pipe)
    wait "${cli_pid}" 2>/dev/null || true
  fi
  rm -rf "${work}"
}
trap cleanup EXIT

cat >"${work}/deployment.yml" <<EOF
jtype: Deployment
with:
  uses: SoakExec
  uses_metas: {libs: [${plugin}]}
  name: soak
  replicas: 2
  port: 0
  max_message_bytes: 1048576
  restart_backoff_initial: 100
  restart_backoff_max: 5000
  max_init_failures: 3
  timeout_drain: 10000
  liveness_period: 1000
  liveness_timeout: 1000
  liveness_failure_threshold: 3
  log_level: warning
EOF

GANTRY_WORKER_PROGRAM="${build}/bin/gantry-worker" \
  "${build}/bin/gantry" deployment --uses "${work}/deployment.yml" \
  --port-file "${work}/port" >"${work}/deployment.log" 2>&1 &
cli_pid=$!
for _ in $(seq 1 600); do
  [[ -s "${work}/port" ]] && break
  kill -0 "${cli_pid}" 2>/dev/null || break
  sleep 0.1
done
if [[ ! -s "${work}/port" ]]; then
  echo "soak: the deployment did not start:" >&2
  cat "${work}/deployment.log" >&2
  exit 1
fi
port="$(cat "${work}/port")"

status=0
started_at="$(date +%H:%M:%S)"
echo "soak started at ${started_at}"
"${build}/bin/gantry_soak" --address "127.0.0.1:${port}" --gateway-pid "${cli_pid}" \
  --seconds "${seconds}" --fault-every "${fault_every}" --faults "${faults}" \
  --threads "${threads}" || status=$?

workers="$(pgrep -P "${cli_pid}" || true)"
start_ns=$(date +%s%N)
kill -TERM "${cli_pid}"
exit_code=0
# Bounded: the drain (10 s) plus the workers' stop (SIGKILL after 8 s).
for _ in $(seq 1 300); do
  kill -0 "${cli_pid}" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "${cli_pid}" 2>/dev/null; then
  echo "soak: the deployment did not stop within 30 s of SIGTERM" >&2
  status=1
else
  wait "${cli_pid}" || exit_code=$?
  cli_pid=""
  echo "SIGTERM -> exit ${exit_code} after $((($(date +%s%N) - start_ns) / 1000000)) ms"
  [[ "${exit_code}" == 0 ]] || status=1
fi
for pid in ${workers}; do
  if kill -0 "${pid}" 2>/dev/null; then
    echo "soak: worker ${pid} outlived the deployment" >&2
    status=1
  fi
done
echo "deployment log (warnings and errors, by kind: times, pids and ports left out):"
grep -E "^(warning|error)" "${work}/deployment.log" |
  sed -E 's/\[[0-9:.]+\] //; s/@[0-9]+/@PID/g; s/pid [0-9]+/pid N/g; s/127\.0\.0\.1:[0-9]+/127.0.0.1:PORT/g' |
  sort | uniq -c | sort -rn | head -25 || true
echo "rolling restarts that did not finish (SIGHUP lines at warning or error):"
grep -E "^(warning|error).*SIGHUP" "${work}/deployment.log" | head -20 || true
if [[ "${status}" != 0 ]]; then
  # The whole log, for the faults above (its lines carry the wall-clock time;
  # the soak started at ${started_at}).
  kept="${SOAK_LOG_DIR:-/tmp}/soak-deployment-$(date +%Y%m%d-%H%M%S).log"
  cp "${work}/deployment.log" "${kept}"
  echo "the deployment's whole log: ${kept}"
fi
exit "${status}"
