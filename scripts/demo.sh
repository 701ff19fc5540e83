#!/usr/bin/env bash
# The main job: set up, build, then start a Deployment of the example
# executor (MyGPUExec, 2 replicas) and post 1,000 documents to /encode with a
# progress bar.
#
#   scripts/demo.sh [DEVICE] [NUM_DOCS]     DEVICE: cpu (default), cuda, cuda:N
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
exec "${GANTRY_BUILD_DIR:-$root/build}/bin/seed_example" "${1:-cpu}" "${2:-1000}"
