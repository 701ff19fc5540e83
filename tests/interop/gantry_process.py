"""Shared by the Python protocol tests: a `gantry` CLI process that is
always terminated and reaped, and a free port for peers (Jina, Prometheus)
that cannot report the port they bound. Standard library only, so every test
venv can import it."""
import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request


def free_port():
    """A port that was free a moment ago: another process may take it before
    the caller binds it, so callers retry (gantry itself binds port 0 and
    reports the port in a file instead)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_port(path):
    """The port in a file gantry wrote (atomically, by rename), or None."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read().strip()
    return int(text) if text else None


def http_post(port, path, body, timeout=60):
    """POSTs `body` as JSON to 127.0.0.1:PORT/PATH: (status, parsed reply),
    error statuses included."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def http_get(port, path, timeout=60):
    """GETs 127.0.0.1:PORT/PATH and parses the JSON reply."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as reply:
        return json.loads(reply.read())


class GantryProcess:
    """`gantry ARGS --port-file F`: waits for the port, always reaped. With
    http=True it also serves HTTP on a port of the kernel's choosing
    (`--http-port 0`, over any in the YAML), found in `http_port`. `env` is
    added to this process's environment for it."""

    def __init__(self, args, tmp, name, http=False, env=None):
        self.port_file = os.path.join(tmp, name + ".port")
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "w")
        self.http_port = None
        extra = ["--port-file", self.port_file]
        http_port_file = os.path.join(tmp, name + ".http-port")
        if http:
            extra += ["--http-port", "0", "--http-port-file", http_port_file]
        self.proc = subprocess.Popen(
            [os.environ["GANTRY_CLI"]] + args + extra,
            stdout=self.log, stderr=subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            port = read_port(self.port_file)
            if port is not None:
                self.port = port
                # Written before the port file.
                self.http_port = read_port(http_port_file) if http else None
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        with open(self.log_path) as f:
            raise RuntimeError(f"gantry {args} did not start:\n" + f.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def doc_blocks(page):
    """The first ```yaml, ```sh and ```python blocks of docs/PAGE, whose
    examples the protocol tests run as written."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", page)
    blocks = {}
    with open(path) as f:
        for lang, body in re.findall(r"```(\w+)\n(.*?)```", f.read(), re.S):
            blocks.setdefault(lang, body)
    return blocks
