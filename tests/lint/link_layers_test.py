#!/usr/bin/env python3
"""Fails when one of Gantry's folder libraries uses a symbol of another that
it does not declare.

The build writes one line per library (src/CMakeLists.txt):
    NAME ARCHIVE [DECLARED ...]
DECLARED are the libraries of ours it may use, chosen along the folder map of
docs/architecture.md. An include across the map fails scripts/check_layers.py;
this catches the calls that need no include of the folder they reach (a
function declared by hand, a public header implemented in another folder).

    link_layers_test.py BUILD_DIR/folder_libraries.txt
"""
import subprocess
import sys


def symbols(archive):
    """(defined, undefined) external symbols of a static library."""
    defined, undefined = set(), set()
    out = subprocess.run(["nm", "-g", archive], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] != "U":
            defined.add(parts[2])
    return defined, undefined - defined


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    libraries = {}
    with open(sys.argv[1], encoding="utf-8") as listing:
        for line in listing:
            fields = line.split()
            if fields:
                libraries[fields[0]] = (fields[1], set(fields[2:]))
    tables = {name: symbols(archive) for name, (archive, _) in libraries.items()}
    failures = []
    for name, (_, declared) in sorted(libraries.items()):
        used = {}
        for symbol in tables[name][1]:
            for other, (defined, _) in tables.items():
                if other != name and symbol in defined:
                    used.setdefault(other, symbol)
        print(f"{name} uses {', '.join(sorted(used)) or 'none of ours'}"
              f" (declares {', '.join(sorted(declared)) or 'none'})")
        for other in sorted(set(used) - declared):
            failures.append(f"{name} uses {other}, which it does not declare "
                            f"(one symbol: {used[other]}); see docs/architecture.md's folder map")
    for failure in failures:
        print("link_layers: " + failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
