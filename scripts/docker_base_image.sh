#!/usr/bin/env bash
# Makes sure a Docker engine answers and the base image exists: installs
# docker.io and debootstrap with apt when missing, starts dockerd when none
# runs, and builds `gantry-base:bookworm` from the Debian mirror apt uses
# (debootstrap --variant=minbase; no image registry is needed). Every Gantry
# image starts FROM it (docker/Dockerfile, scripts/fresh_machine_check.sh).
#
#   scripts/docker_base_image.sh          (root; idempotent)
#   GANTRY_DOCKER_LOG_DIR=DIR             where dockerd's and debootstrap's logs go
set -euo pipefail
readonly image="gantry-base:bookworm"
logs="${GANTRY_DOCKER_LOG_DIR:-/tmp/gantry-docker}"
mkdir -p "${logs}"

if [[ $(id -u) -ne 0 ]]; then
  echo "docker_base_image: run as root (apt, debootstrap and dockerd need it)" >&2
  exit 2
fi
need=()
# The daemon, not the client: a machine may have a docker CLI alone.
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
  echo "docker_base_image: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if ! docker info >/dev/null 2>&1; then
  echo "docker_base_image: starting dockerd (log: ${logs}/dockerd.log)"
  (setsid dockerd >"${logs}/dockerd.log" 2>&1 &)
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { echo "docker_base_image: dockerd did not start" >&2; exit 1; }
fi

# Bumped when the way the image is made changes, so that an older one is made anew.
readonly revision="2"
if [[ "$(docker image inspect -f '{{index .Config.Labels "gantry.base-revision"}}' "${image}" \
  2>/dev/null)" != "${revision}" ]]; then
  mirror="$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    grep -oE '^(URIs:|deb) +https?://[^ ]+/debian/?' | head -n 1 | awk '{print $2}' || true)"
  mirror="${mirror:-http://deb.debian.org/debian}"
  rootfs="$(mktemp -d /tmp/gantry-rootfs.XXXXXX)"
  trap 'rm -rf "${rootfs}"' EXIT
  echo "docker_base_image: debootstrap --variant=minbase bookworm from ${mirror}"
  debootstrap --variant=minbase bookworm "${rootfs}" "${mirror}" >"${logs}/debootstrap.log" 2>&1
  # The .debs debootstrap fetched and its package lists (80 MB) are no use
  # in an image: every image runs apt-get update before it installs.
  rm -rf "${rootfs}"/var/cache/apt/archives/*.deb "${rootfs}"/var/cache/apt/*.bin \
    "${rootfs}"/var/lib/apt/lists/*
  tar -C "${rootfs}" -c . |
    docker import --change "LABEL gantry.base-revision=${revision}" - "${image}" >/dev/null
fi
echo "docker_base_image: ${image} ($(docker image inspect -f '{{.Size}}' "${image}") bytes)"
