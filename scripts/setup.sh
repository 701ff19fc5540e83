#!/usr/bin/env bash
# Installs what Gantry needs on a fresh Debian 12 machine: the Debian build
# dependencies and libtorch 2.x from the PyPI `torch` wheel. Idempotent:
# skips what is already there.
#
#   scripts/setup.sh
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git python3-venv
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libutf8proc-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev
  clang-format
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

python=${PYTHON:-python3}
if ! "$python" -c 'import torch, sys; sys.exit(0 if int(torch.__version__.split(".")[0]) >= 2 else 1)' 2>/dev/null; then
  echo "setup: installing libtorch 2.x (the PyPI torch wheel) for $("$python" --version)"
  "$python" -m pip install --quiet 'torch>=2.4' numpy
fi
echo "setup: ok (torch $("$python" -c 'import torch; print(torch.__version__)'))"
