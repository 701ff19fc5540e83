#!/bin/sh
# Runs the Jina interop tests with the venv's Python. A missing venv or module
# skips (exit 77, ctest "Skipped") with the reason, or fails in CI
# (CI=true or GANTRY_REQUIRE_PEERS=1; see tests/peer_policy.sh).
venv="$1"
script="$2"
. "$(dirname "$0")/../peer_policy.sh"
if [ ! -x "$venv/bin/python" ]; then
  skip_or_fail "no Jina venv at $venv (create it with scripts/jina_venv.sh)"
fi
# Imported, not just found: a broken install is as missing as an absent one.
if ! missing=$("$venv/bin/python" -c '
import importlib, sys
bad = []
for name in ["jina", "docarray", "grpc", "grpc_reflection", "numpy"]:
    try:
        importlib.import_module(name)
    except Exception as e:
        bad.append(f"{name} ({type(e).__name__}: {e})")
print("; ".join(bad))
sys.exit(1 if bad else 0)' 2>&1); then
  skip_or_fail "$venv cannot import: ${missing:-?} (scripts/jina_venv.sh)"
fi
export JINA_LOG_LEVEL="${JINA_LOG_LEVEL:-WARNING}"
exec "$venv/bin/python" "$script" -v 2>&1
