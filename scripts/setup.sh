#!/usr/bin/env bash
# Installs what Gantry needs on a fresh Debian 12 machine: the Debian build
# dependencies with apt, and libtorch 2.x (the PyPI `torch` wheel) and the
# Swagger UI assets (PyPI `swagger-ui-py`) into the
# project's own virtual environment <repo>/.venv (git-ignored), because
# Debian's python3 has no pip and refuses system-wide installs (PEP 668).
# CMake finds libtorch in that venv (cmake/GantryTorch.cmake). Idempotent:
# skips what is already there.
#
#   scripts/setup.sh            GANTRY_VENV=DIR overrides <repo>/.venv
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates curl
  python3 python3-venv
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libutf8proc-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev
  # Boost.Beast and Asio (header-only): the HTTP server under the HTTP ports
  libboost-dev
  libb64-0d
  # tcmalloc: the malloc of the programs that run models (cmake/GantryModelMalloc.cmake)
  libtcmalloc-minimal4
  # Prometheus: the metrics library, and the server the metrics test scrapes with
  prometheus-cpp-dev prometheus
  clang-format clang-tidy
  # libFuzzer (scripts/fuzz.sh): clang and its runtime, only recommended by clang
  clang libclang-rt-dev libssl-dev openssl
  # The round trip of `gantry export docker-compose` (ctest label docker)
  docker-compose
  # Headless browser and its WebDriver: interop.openapi drives the gateway's
  # Swagger UI page (/docs) through selenium
  chromium chromium-driver
)
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Debian's own interpreter, not whatever python3 is first on PATH: the venv
# must work on a stock machine, where /usr/bin/python3 is the only one.
base_python=/usr/bin/python3
[[ -x "${base_python}" ]] || base_python="$(command -v python3)"
venv="${GANTRY_VENV:-${root}/.venv}"
if [[ ! -x "${venv}/bin/python" ]]; then
  echo "setup: creating the project venv ${venv}"
  "${base_python}" -m venv "${venv}"
fi
# swagger-ui-py: the Swagger UI 5 assets (its swagger_ui/static folder) that
# CMake copies for the HTTP gateway's /docs page. Not swagger-ui-bundle: that
# PyPI package ships Swagger UI 4.15, which cannot render the OpenAPI 3.1
# document of /openapi.json; swagger-ui-py ships 5.x.
if ! "${venv}/bin/python" -c 'import torch, swagger_ui, sys; sys.exit(0 if int(torch.__version__.split(".")[0]) >= 2 else 1)' 2>/dev/null; then
  # The torch wheel and the CUDA libraries it depends on take about 6 GiB
  # installed, and pip unpacks each wheel in TMPDIR first: say so up front
  # rather than fail half-way with ENOSPC. GANTRY_SETUP_MIN_FREE_GIB=0 skips.
  need_gib="${GANTRY_SETUP_MIN_FREE_GIB:-8}"
  if [[ ! "${need_gib}" =~ ^[0-9]+$ ]]; then
    echo "setup: GANTRY_SETUP_MIN_FREE_GIB must be a whole number of GiB, got '${need_gib}'" >&2
    exit 2
  fi
  for dir in "${venv}" "${TMPDIR:-/tmp}"; do
    free_gib=$(($(df -k --output=avail "${dir}" | tail -1) / 1048576))
    if ((free_gib < need_gib)); then
      echo "setup: ${dir} has ${free_gib} GiB free; installing libtorch needs about ${need_gib} GiB there" \
        "(GANTRY_SETUP_MIN_FREE_GIB overrides)" >&2
      exit 1
    fi
  done
  echo "setup: installing libtorch 2.x (the PyPI torch wheel) and swagger-ui-py into ${venv}"
  "${venv}/bin/python" -m pip install --quiet --no-cache-dir --upgrade pip
  # No cache: it would keep a second copy of the ~3 GiB of wheels.
  "${venv}/bin/python" -m pip install --quiet --no-cache-dir 'torch>=2.4' numpy 'swagger-ui-py==25.7.1'
fi
echo "setup: ok (torch $("${venv}/bin/python" -c 'import torch; print(torch.__version__)') in ${venv})"
