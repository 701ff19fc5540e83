#!/bin/sh
# Runs the Jina interop tests with the venv's Python; exit 77 (ctest: skipped)
# with the reason when the venv is missing.
venv="$1"
script="$2"
if [ ! -x "$venv/bin/python" ]; then
  echo "SKIPPED: no Jina venv at $venv (create it with scripts/jina_venv.sh)"
  exit 77
fi
if ! "$venv/bin/python" -c 'import jina, docarray, grpc_reflection' >/dev/null 2>&1; then
  echo "SKIPPED: $venv lacks jina, docarray or grpcio-reflection (scripts/jina_venv.sh)"
  exit 77
fi
export JINA_LOG_LEVEL="${JINA_LOG_LEVEL:-WARNING}"
exec "$venv/bin/python" "$script" -v 2>&1
