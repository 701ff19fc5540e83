#!/bin/sh
# Runs a protocol test with the stock clients' venv (scripts/clients_venv.sh).
# A missing venv or module skips (exit 77, ctest "Skipped") with the reason,
# or fails in CI (CI=true or GANTRY_REQUIRE_PEERS=1; tests/peer_policy.sh).
#   run_clients_tests.sh VENV SCRIPT
venv="$1"
script="$2"
. "$(dirname "$0")/../peer_policy.sh"
if [ ! -x "$venv/bin/python" ]; then
  skip_or_fail "no clients venv at $venv (create it with scripts/clients_venv.sh)"
fi
if ! missing=$("$venv/bin/python" -c '
import importlib, sys
bad = []
for name in ["openai", "tokenizers", "numpy", "jsonschema", "tritonclient.grpc", "tritonclient.http"]:
    try:
        importlib.import_module(name)
    except Exception as e:
        bad.append(f"{name} ({type(e).__name__}: {e})")
print("; ".join(bad))
sys.exit(1 if bad else 0)' 2>&1); then
  skip_or_fail "$venv cannot import: ${missing:-?} (scripts/clients_venv.sh)"
fi
exec "$venv/bin/python" "$script" -v 2>&1
