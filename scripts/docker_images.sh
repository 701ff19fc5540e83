#!/usr/bin/env bash
# Builds Gantry's container images from docker/Dockerfile, FROM the base
# image that scripts/docker_base_image.sh makes from the Debian mirror:
#   gantry:cpu    gantry and gantry-worker with libtorch's CPU libraries only
#   gantry:dev    the CPU build's compilers, Gantry's headers, libraries and
#                 CMake package under /opt/gantry: what `gantry new` projects
#                 build their plugin in, to serve it FROM gantry:cpu
#   gantry:cuda   the same linked with libtorch_cuda and the torch wheel's
#                 nvidia-* libraries (run it with --gpus)
# then lints the Dockerfile with hadolint and prints each image's size.
#
#   scripts/docker_images.sh [--cpu-only]   (cpu and dev only; root: dockerd, debootstrap)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
targets=(cpu dev cuda)
while (($#)); do
  case "$1" in
    --cpu-only) targets=(cpu dev); shift ;;
    *) echo "docker_images: unknown argument $1" >&2; exit 2 ;;
  esac
done
start=$(date +%s)
step() { echo "=== [$(($(date +%s) - start))s] $*"; }

step "docker engine and base image"
bash "${root}/scripts/docker_base_image.sh"

step "hadolint docker/Dockerfile"
bash "${root}/scripts/clients_venv.sh" >/dev/null
"${root}/.venv-clients/bin/hadolint" --version
"${root}/.venv-clients/bin/hadolint" --config "${root}/.hadolint.yaml" "${root}/docker/Dockerfile"

# The build stages trust the host's own CAs (a network that intercepts
# HTTPS to PyPI needs them); the run stages never see them.
cas="${root}/docker/extra-ca-certificates"
find "${cas}" -name '*.crt' -delete
for f in /usr/local/share/ca-certificates/*.crt; do
  [[ -f "${f}" ]] && cp "${f}" "${cas}/"
done

for target in "${targets[@]}"; do
  step "docker build --target ${target} -t gantry:${target}"
  # The host network: the build reaches the apt mirror and PyPI as this
  # machine does.
  docker build --network host -f "${root}/docker/Dockerfile" --target "${target}" \
    -t "gantry:${target}" "${root}"
done
step "images"
for target in "${targets[@]}"; do
  size=$(docker image inspect -f '{{.Size}}' "gantry:${target}")
  echo "gantry:${target}  $((size / 1000000)) MB"
done
