#!/usr/bin/env bash
# Side (a) of bench/encoder/run.sh with --replicas R > 1: R encoder_bare
# processes at once, each encoding N/R documents on OMP_NUM_THREADS threads
# (run.sh sets it), the bare counterpart of R single-process replicas. Prints
# one line in encoder_bare's format, docs/s counted over the slowest process:
#   docs_per_s=<N / slowest seconds> n=<N> seconds=<slowest> processes=<R>
#
#   bash bare_processes.sh R N ENCODER_BARE [encoder_bare options but --n]
set -euo pipefail
if ! [[ $# -ge 3 && "$1" =~ ^[1-9][0-9]?$ && "$2" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: bare_processes.sh R N ENCODER_BARE [options]  (R: 1..99 processes, N: documents)" >&2
  exit 2
fi
processes="$1"
docs="$2"
binary="$3"
shift 3
args=("$@")
work="$(mktemp -d)"
pids=()
Cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "${pid}" 2>/dev/null || true; done
  rm -rf "${work}"
}
trap Cleanup EXIT
per_process=$(( (docs + processes - 1) / processes ))
for ((i = 0; i < processes; i++)); do
  "${binary}" "${args[@]}" --n "${per_process}" >"${work}/${i}.log" 2>&1 &
  pids+=("$!")
done
for i in "${!pids[@]}"; do
  if ! wait "${pids[${i}]}"; then
    echo "bare_processes.sh: process ${i} failed:" >&2
    tail -n 20 "${work}/${i}.log" >&2
    exit 1
  fi
done
slowest="$(cat "${work}"/*.log | grep -o 'seconds=[0-9.]*' | cut -d= -f2 | sort -g | tail -n 1)"
total=$((per_process * processes))
awk -v n="${total}" -v s="${slowest}" -v r="${processes}" \
  'BEGIN { printf "docs_per_s=%.1f n=%d seconds=%.3f processes=%d\n", n / s, n, s, r }'
