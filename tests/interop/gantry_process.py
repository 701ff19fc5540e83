"""Shared by the Python protocol tests: a `gantry` CLI process that is
always terminated and reaped, and a free port for servers without a port
file. Standard library only, so every test venv can import it."""
import os
import re
import socket
import subprocess
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GantryProcess:
    """`gantry ARGS --port-file F`: waits for the port, always reaped."""

    def __init__(self, args, tmp, name):
        self.port_file = os.path.join(tmp, name + ".port")
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [os.environ["GANTRY_CLI"]] + args + ["--port-file", self.port_file],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(self.port_file):
                text = open(self.port_file).read().strip()
                if text:
                    self.port = int(text)
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"gantry {args} did not start:\n" + open(self.log_path).read())

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
