#!/usr/bin/env bash
# Compiles the usage example at the top of each named public header, so a
# header's example cannot drift from its API. The example is the first run
# of comment lines indented by three spaces ("//   code"); it is placed in a
# function body after the header's own #include.
#
#   header_examples_test.sh CXX SOURCE_DIR BUILD_DIR HEADER...
set -euo pipefail
cxx="$1" source_dir="$2" build_dir="$3"
shift 3
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
status=0
for header in "$@"; do
  snippet="$(awk '/^\/\/   /{found=1; sub(/^\/\/   /, ""); print; next} found{exit}' \
    "${source_dir}/include/gantry/${header}")"
  if [[ -z "${snippet}" ]]; then
    echo "header_examples: include/gantry/${header} has no example (\"//   code\" lines)" >&2
    status=1
    continue
  fi
  file="${work}/${header%.h}_example.cc"
  {
    echo "#include <gantry/${header}>"
    echo "#include <cstdio>"
    echo "void Example() {"
    echo "${snippet}"
    echo "}"
  } >"${file}"
  if "${cxx}" -std=c++20 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-variable \
    -I"${source_dir}/include" -I"${build_dir}/include" "${file}"; then
    echo "include/gantry/${header}: example compiles"
  else
    echo "header_examples: include/gantry/${header}: its example does not compile:" >&2
    cat -n "${file}" >&2
    status=1
  fi
done
exit "${status}"
