#!/usr/bin/env python3
"""The gateway's memory for one large request body, two builds side by side.

    python3 bench/http/big_body_memory.py --before DIR [--after DIR] [--mb 30]
                                          [--routes tei,openai,jina,kserve]

DIR is a build directory, or a frozen copy of one, as bench/http/run.sh takes:
bin/gantry, bin/gantry-worker (or GANTRY_WORKER_PROGRAM) and
lib/libgantry_interop_plugin.so. --after defaults to ${GANTRY_BUILD_DIR:-build}.

For each route and each build in turn, a fresh Deployment (one replica of
InteropExec, whose embedding is [len(text), scale, offset], so the model costs
nothing and the figures are the framework's, with `models:` so that the TEI
and OpenAI routes exist) gets one POST whose one text is --mb MB of "ab "
words:
  tei     POST /embed {"inputs": TEXT, "normalize": false}
  openai  POST /v1/embeddings {"model": ..., "input": TEXT}
  jina    POST /post {"data": [{"text": TEXT}], "execEndpoint": "/encode"}
  kserve  POST /v2/models/tiny-encoder/infer, one BYTES input [1, 1]
The answer must be a 200 carrying len(TEXT). Then the gateway process's peak
resident memory (VmHWM: what the kernel counted at its highest) and what it
still holds a second after answering (VmRSS) are read from /proc, next to its
idle figure. Prints one row per route and build, and after/before ratios.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROUTES = ("tei", "openai", "jina", "kserve")
MODEL = "tiny-encoder"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def request_for(route, text):
    """(path, JSON body) of one request carrying `text`."""
    if route == "tei":
        return "/embed", {"inputs": text, "normalize": False}
    if route == "openai":
        return "/v1/embeddings", {"model": MODEL, "input": text}
    if route == "jina":
        return "/post", {"data": [{"text": text}], "execEndpoint": "/encode"}
    return f"/v2/models/{MODEL}/infer", {
        "inputs": [{"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": [text]}]
    }


def post(port, path, body, timeout):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def measure(build, route, text, tmp):
    """One fresh Deployment of `build`, one request; its gateway's figures."""
    http_port = free_port()
    yml = os.path.join(tmp, "deployment.yml")
    with open(yml, "w") as f:
        f.write(f"""jtype: Deployment
with:
  name: {MODEL}
  replicas: 1
  models: {{{MODEL}: /encode}}
  uses:
    jtype: InteropExec
    metas:
      libs: [{build}/lib/libgantry_interop_plugin.so]
""")
    port_file = os.path.join(tmp, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    env = dict(os.environ)
    if os.path.exists(f"{build}/bin/gantry-worker"):
        env.setdefault("GANTRY_WORKER_PROGRAM", f"{build}/bin/gantry-worker")
    log = open(os.path.join(tmp, "gantry.log"), "w")
    # Its own process group, so that nothing of it outlives this script.
    proc = subprocess.Popen(
        [f"{build}/bin/gantry", "deployment", "--uses", yml, "--port", "0", "--http-port",
         str(http_port), "--port-file", port_file, "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (os.path.exists(port_file) and os.path.getsize(port_file) > 0):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{build}: the deployment did not become ready; see {log.name}")
            time.sleep(0.1)
        path, body = request_for(route, text)
        payload = json.dumps(body).encode()
        idle_kb = status_kb(proc.pid, "VmHWM")
        started = time.monotonic()
        status, answer = post(http_port, path, payload, timeout=300)
        seconds = time.monotonic() - started
        if status != 200 or str(len(text)).encode() not in answer:
            raise RuntimeError(f"{build} {route}: HTTP {status}: {answer[:300]!r}")
        time.sleep(1)
        return {"idle": idle_kb, "peak": status_kb(proc.pid, "VmHWM"),
                "held": status_kb(proc.pid, "VmRSS"), "seconds": seconds,
                "body": len(payload)}
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        log.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default=os.environ.get("GANTRY_BUILD_DIR", "build"))
    parser.add_argument("--mb", type=int, default=30)
    parser.add_argument("--routes", default=",".join(ROUTES))
    args = parser.parse_args()
    routes = args.routes.split(",")
    if not set(routes) <= set(ROUTES) or not 1 <= args.mb <= 60:
        parser.error(f"--routes from {','.join(ROUTES)}; --mb from 1 to 60")
    builds = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    for build in builds.values():
        for f in ("bin/gantry", "lib/libgantry_interop_plugin.so"):
            if not os.path.exists(os.path.join(build, f)):
                sys.exit(f"big_body_memory.py: {build}/{f} missing")
    text = "ab " * (args.mb * 1000 * 1000 // 3)
    print(f"machine: {os.cpu_count()} cores; one text of {len(text) / 1e6:.0f} MB per request; "
          f"gateway memory in MB (idle, peak VmHWM, still held 1 s after the answer)")
    print(f"{'route':8}{'build':8}{'body_MB':>9}{'idle':>7}{'peak':>7}{'held':>7}"
          f"{'peak-idle':>11}{'seconds':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for i, route in enumerate(routes):
            # Alternate which build goes first, so that drift weighs on both.
            order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
            rows = {name: measure(builds[name], route, text, tmp) for name in order}
            for name in ("before", "after"):
                r = rows[name]
                print(f"{route:8}{name:8}{r['body'] / 1e6:9.1f}{r['idle'] // 1024:7}"
                      f"{r['peak'] // 1024:7}{r['held'] // 1024:7}"
                      f"{(r['peak'] - r['idle']) // 1024:11}{r['seconds']:9.2f}")
            b, a = rows["before"], rows["after"]
            print(f"{route:8}{'a/b':8}{'':9}{'':7}{a['peak'] / b['peak']:7.2f}"
                  f"{a['held'] / b['held']:7.2f}"
                  f"{(a['peak'] - a['idle']) / max(1, b['peak'] - b['idle']):11.2f}")


if __name__ == "__main__":
    main()
