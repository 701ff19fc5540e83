#!/bin/sh
# Runs a `gantry export` test with the stock clients' venv
# (scripts/clients_venv.sh, which installs kubernetes-validate). A missing
# venv or module skips (exit 77, ctest "Skipped") with the reason, or fails
# in CI (CI=true or GANTRY_REQUIRE_PEERS=1; tests/peer_policy.sh).
#   run_export_tests.sh VENV SCRIPT
venv="$1"
script="$2"
. "$(dirname "$0")/../peer_policy.sh"
if [ ! -x "$venv/bin/python" ]; then
  skip_or_fail "no clients venv at $venv (create it with scripts/clients_venv.sh)"
fi
if ! missing=$("$venv/bin/python" -c 'import kubernetes_validate' 2>&1); then
  skip_or_fail "$venv cannot import kubernetes_validate: ${missing:-?} (scripts/clients_venv.sh)"
fi
exec "$venv/bin/python" "$script" -v 2>&1
