#!/usr/bin/env bash
# Triton's perf_analyzer, the KServe v2 load generator, run against Gantry:
#   scripts/perf_analyzer.sh -m MODEL -i grpc -u 127.0.0.1:PORT [perf_analyzer options]
# PyPI's `perf-analyzer` is a placeholder; the binary last shipped inside the
# tritonclient 2.41.0 wheel. The first run unpacks it (and the CUDA runtime
# it links, from PyPI's nvidia-cuda-runtime-cu12; it runs without a GPU)
# into <repo>/.venv-clients/perf_analyzer/ (git-ignored). Needs libb64-0d
# (scripts/setup.sh installs it) and the clients venv (scripts/clients_venv.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${GANTRY_CLIENTS_VENV:-${root}/.venv-clients}"
dir="${venv}/perf_analyzer"
binary="${dir}/bin/perf_analyzer"
if [[ ! -x "${binary}" ]]; then
  [[ -x "${venv}/bin/python" ]] || "${root}/scripts/clients_venv.sh" >&2
  tmp="$(mktemp -d)"
  # Removed by hand below too: the exec at the end skips an EXIT trap.
  trap 'rm -rf "${tmp}"' EXIT
  "${venv}/bin/python" -m pip download --quiet --no-deps --only-binary=:all: -d "${tmp}" \
    'tritonclient==2.41.0' 'nvidia-cuda-runtime-cu12==12.9.79' >&2
  mkdir -p "${dir}/bin" "${dir}/lib"
  (cd "${tmp}" && "${venv}/bin/python" -m zipfile -e tritonclient-2.41.0-*.whl tc &&
    "${venv}/bin/python" -m zipfile -e nvidia_cuda_runtime_cu12-*.whl cu)
  cp "${tmp}/tc/tritonclient-2.41.0.data/data/bin/perf_analyzer" "${binary}.tmp"
  cp "${tmp}"/cu/nvidia/cuda_runtime/lib/libcudart.so.12 "${dir}/lib/"
  chmod +x "${binary}.tmp"
  mv "${binary}.tmp" "${binary}"
  rm -rf "${tmp}"
  trap - EXIT
fi
export LD_LIBRARY_PATH="${dir}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
exec "${binary}" "$@"
