#!/usr/bin/env python3
"""Checks every quoted #include under src/ against the folder map.

The map is the "May include" column of the Folders table in
docs/architecture.md, so the document is what the build holds us to: a row
for `src/X/` allows the `src/` folders and headers it names in backticks
(`core/`, `worker/worker_spec.h`); "generated protos" allows the generated
.pb.h folders; "any `src/` folder but `torch/`" allows every folder but
those named after "but". A folder under src/ without a row fails too.

  scripts/check_layers.py [ROOT]      exit 0: clean; 1: a list of violations
"""
import os
import re
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
src = os.path.join(root, "src")
# Folders of generated protobuf headers (proto/).
PROTO_FOLDERS = {"jina", "docarray", "kserve", "grpc", "google", "opentelemetry"}

folders = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
rules = {}
with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as doc:
    for line in doc:
        m = re.match(r"\|\s*`src/([\w_]+)/`\s*\|.*\|\s*(.*?)\s*\|\s*$", line)
        if not m:
            continue
        folder, may = m.group(1), m.group(2)
        allowed_folders, allowed_headers = {folder}, set()
        names = re.findall(r"`([^`]+)`", may)
        if "any `src/` folder" in may:
            but = may.split(" but ", 1)[1] if " but " in may else ""
            excluded = {n.rstrip("/") for n in re.findall(r"`([^`]+)`", but)}
            allowed_folders |= {f for f in folders if f not in excluded}
        for name in names:
            if name.endswith("/") and name != "src/":
                allowed_folders.add(name.rstrip("/"))
            elif name.endswith(".h"):
                allowed_headers.add(name)
        if "generated protos" in may:
            allowed_folders |= PROTO_FOLDERS
        rules[folder] = (allowed_folders, allowed_headers)

problems = []
for folder in folders:
    if folder not in rules:
        problems.append(f"src/{folder}/: no row in docs/architecture.md's folder map")
        continue
    allowed_folders, allowed_headers = rules[folder]
    for dirpath, _, files in os.walk(os.path.join(src, folder)):
        for name in sorted(files):
            if not name.endswith((".h", ".cc", ".in")):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                for number, text in enumerate(f, 1):
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', text)
                    if not m:
                        continue
                    target = m.group(1)
                    top = target.split("/", 1)[0] if "/" in target else folder
                    if top in allowed_folders or target in allowed_headers:
                        continue
                    rel = os.path.relpath(path, root)
                    problems.append(f"{rel}:{number}: includes \"{target}\", which src/{folder}/ may not "
                                    f"(docs/architecture.md, Folders)")

for p in problems:
    print(p)
if problems:
    print(f"check_layers: {len(problems)} include(s) against the folder map", file=sys.stderr)
    sys.exit(1)
print(f"check_layers: {len(folders)} folders under src/ keep to the folder map")
