#!/usr/bin/env bash
# Fails if clang-format would change any of Gantry's C++ files.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' | grep -v '^examples/new_executor_template/')
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "clang-format would change: ${bad[*]}" >&2
  echo "fix with: clang-format -i ${bad[*]}" >&2
  exit 1
fi
echo "format: ${#files[@]} files clean"
