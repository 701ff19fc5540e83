"""Structured logs and the access log of `gantry deployment`, read back from
the process's stderr (gateway and replicas write to the same stream).

Run by ctest (label `interop`, tests/interop/run_clients_tests.sh). Every
`gantry` process runs on 127.0.0.1 and is always terminated and reaped.

  * `log_format: json` and `access_log: true` in YAML: every line of every
    process is one JSON object; replicas name their deployment and replica;
    the access line of each request carries its request id, endpoint,
    status and duration; a handler's error line carries the request id of
    the request that raised it.
  * The same from `--log-format json --access-log` over a YAML without them;
    a request id that tries to forge a line (newline, non-UTF-8 bytes)
    stays inside its one JSON line; X-Request-Id names an HTTP request and
    comes back in the reply, an unusable one is replaced.
  * Text stays the default and has no access lines unless asked; a bad
    format is refused naming the key, the file and the line.
"""
import json
import os
import re
import subprocess
import tempfile
import unittest
import urllib.request

from gantry_process import GantryProcess, http_post

PLUGIN = os.environ["GANTRY_INTEROP_PLUGIN"]
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def write_yaml(tmp, name, extra):
    path = os.path.join(tmp, name + ".yml")
    with open(path, "w") as f:
        f.write("jtype: Deployment\nwith:\n  name: logged\n  replicas: 2\n" + extra +
                "  uses:\n    jtype: InteropExec\n"
                f"    metas:\n      libs: [{PLUGIN}]\n")
    return path


def post(port, endpoint, texts, request_id=None):
    body = {"data": [{"text": t} for t in texts], "execEndpoint": endpoint}
    if request_id is not None:
        body["header"] = {"requestId": request_id}
    return http_post(port, "/post", body)


def post_with_request_id(port, path, body, request_id):
    """(status, X-Request-Id of the reply or None) of a JSON POST with that header."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Request-Id": request_id})
    with urllib.request.urlopen(request, timeout=60) as reply:
        reply.read()
        return reply.status, reply.headers.get("X-Request-Id")


def stopped_lines(process):
    """Stops the process and returns its log's lines (stdout and stderr)."""
    process.stop()
    with open(process.log_path, encoding="utf-8", errors="strict") as f:
        return [line for line in f.read().splitlines() if line.strip()]


class JsonLogs(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def parse_all(self, lines):
        records = []
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                self.fail(f"not a JSON line: {line!r}")
            self.assertIsInstance(record, dict, line)
            for key in ("ts", "level", "role", "pid", "msg"):
                self.assertIn(key, record, line)
            self.assertRegex(record["ts"], ISO_UTC)
            self.assertIn(record["level"], ("debug", "info", "warning", "error", "critical"))
            records.append(record)
        return records

    def access(self, records, request_id):
        found = [r for r in records if r.get("event") == "access" and
                 r.get("request_id") == request_id]
        self.assertEqual(len(found), 1, f"access lines for {request_id}: {found}")
        return found[0]

    def test_yaml_json_format_and_access_log(self):
        path = write_yaml(self.tmp.name, "json", "  log_format: json\n  access_log: true\n")
        process = GantryProcess(["deployment", "--uses", path, "--port", "0"], self.tmp.name,
                                "json", http=True)
        self.addCleanup(process.stop)
        status, body = post(process.http_port, "/encode", ["a", "bb", "ccc"], "trace-ok-1")
        self.assertEqual(status, 200, body)
        status, body = post(process.http_port, "/fail", ["x"], "trace-fail-2")
        self.assertNotEqual(body["header"]["status"].get("code", 0), 0, body)
        records = self.parse_all(stopped_lines(process))

        gateway = [r for r in records if r["role"] == "gateway"]
        self.assertTrue(gateway, "no gateway line")
        workers = [r for r in records if r["role"] == "worker"]
        self.assertEqual({r["replica"] for r in workers}, {"rep-0", "rep-1"})
        self.assertEqual({r["deployment"] for r in workers}, {"logged"})
        self.assertEqual(len({r["pid"] for r in workers}), 2)

        ok = self.access(records, "trace-ok-1")
        self.assertEqual(ok["role"], "gateway")
        self.assertEqual(ok["endpoint"], "/encode")
        self.assertEqual(ok["status"], "OK")
        self.assertGreaterEqual(ok["duration_ms"], 0)
        self.assertGreater(ok["request_bytes"], 0)
        failed = self.access(records, "trace-fail-2")
        self.assertEqual(failed["endpoint"], "/fail")
        self.assertEqual(failed["status"], "EXECUTOR_ERROR")
        # The replica's own line about the failure names the same request.
        raised = [r for r in workers if r.get("request_id") == "trace-fail-2"]
        self.assertTrue(raised, "no worker line with the failing request's id")
        self.assertIn("interop failure requested", raised[0]["msg"])
        self.assertEqual(raised[0]["level"], "warning")

    def test_flags_and_a_request_id_that_tries_to_forge_a_line(self):
        path = write_yaml(self.tmp.name, "flags", "")
        process = GantryProcess(["deployment", "--uses", path, "--port", "0", "--log-format",
                                 "json", "--access-log"], self.tmp.name, "flags", http=True)
        self.addCleanup(process.stop)
        forged = 'evil\nINFO   gateway@1 [00:00:00.000] forged "line" \u00e9' + "z" * 300
        status, body = post(process.http_port, "/encode", ["a"], forged)
        self.assertEqual(status, 200, body)
        # The OpenAI route makes a request id of its own.
        status, body = http_post(process.http_port, "/v1/embeddings",
                                 {"model": "logged", "input": ["hello"]})
        self.assertEqual(status, 200, body)
        # X-Request-Id names the request when it is usable, and comes back.
        status, echoed = post_with_request_id(process.http_port, "/v1/embeddings",
                                              {"model": "logged", "input": ["hi"]},
                                              "proxy-id-42")
        self.assertEqual((status, echoed), (200, "proxy-id-42"))
        status, echoed = post_with_request_id(process.http_port, "/post",
                                              {"data": [{"text": "b"}],
                                               "execEndpoint": "/encode"}, "from-header-7")
        self.assertEqual((status, echoed), (200, "from-header-7"))
        status, echoed = post_with_request_id(process.http_port, "/v1/embeddings",
                                              {"model": "logged", "input": ["hi"]},
                                              "has space")
        self.assertEqual((status, echoed), (200, None))
        records = self.parse_all(stopped_lines(process))
        accesses = [r for r in records if r.get("event") == "access"]
        for request_id in ("proxy-id-42", "from-header-7"):
            self.assertEqual(self.access(records, request_id)["status"], "OK")
        self.assertFalse([r for r in accesses if r["request_id"] == "has space"])
        accesses = [r for r in accesses
                    if r["request_id"] not in ("proxy-id-42", "from-header-7")]
        self.assertEqual(len(accesses), 3, accesses)
        evil = [r for r in accesses if r["request_id"].startswith("evil")]
        self.assertEqual(len(evil), 1, accesses)
        # Clipped to 128 bytes, every byte outside printable ASCII a '?'.
        self.assertEqual(evil[0]["request_id"],
                         ('evil?INFO   gateway@1 [00:00:00.000] forged "line" ??' + "z" * 300)[:128]
                         + "...")
        generated = [r for r in accesses if r is not evil[0]]
        self.assertEqual(len(generated), 2, accesses)
        for record in generated:
            self.assertRegex(record["request_id"], r"^[0-9a-f]{32}$")
            self.assertEqual(record["endpoint"], "/encode")
        self.assertFalse(any("forged" in r["msg"] and r.get("event") != "access"
                             for r in records))

    def test_text_is_the_default_without_access_lines(self):
        path = write_yaml(self.tmp.name, "text", "")
        process = GantryProcess(["deployment", "--uses", path, "--port", "0"], self.tmp.name,
                                "text", http=True,
                                env={"GANTRY_LOG_FORMAT": ""})
        self.addCleanup(process.stop)
        status, body = post(process.http_port, "/encode", ["a"], "trace-text")
        self.assertEqual(status, 200, body)
        lines = stopped_lines(process)
        self.assertTrue(any(re.match(r"^info +logged/rep-[01]@\d+ \[", line) for line in lines),
                        lines)
        self.assertFalse(any(line.lstrip().startswith("{") for line in lines), lines)
        self.assertFalse(any("access" in line and "trace-text" in line for line in lines), lines)

    def test_text_access_line(self):
        path = write_yaml(self.tmp.name, "text_access", "  access_log: true\n")
        process = GantryProcess(["deployment", "--uses", path, "--port", "0"], self.tmp.name,
                                "text_access", http=True, env={"GANTRY_LOG_FORMAT": ""})
        self.addCleanup(process.stop)
        status, body = post(process.http_port, "/encode", ["a", "b"], "trace-text-access")
        self.assertEqual(status, 200, body)
        lines = [line for line in stopped_lines(process) if "trace-text-access" in line]
        self.assertEqual(len(lines), 1, lines)
        self.assertRegex(lines[0], r"^info +gateway@\d+ \[[0-9:.]+\] access "
                                   r"request_id=trace-text-access endpoint=/encode status=OK "
                                   r"duration_ms=\d+\.\d request_bytes=\d+$")

    def test_environment_sets_the_format(self):
        path = write_yaml(self.tmp.name, "env", "")
        process = GantryProcess(["deployment", "--uses", path, "--port", "0"], self.tmp.name,
                                "env", env={"GANTRY_LOG_FORMAT": "json"})
        self.addCleanup(process.stop)
        records = self.parse_all(stopped_lines(process))
        self.assertEqual({r["replica"] for r in records if r["role"] == "worker"},
                         {"rep-0", "rep-1"})

    def test_bad_formats_are_refused(self):
        path = write_yaml(self.tmp.name, "bad", "  log_format: xml\n")
        result = subprocess.run([os.environ["GANTRY_CLI"], "deployment", "--uses", path],
                                capture_output=True, text=True, timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("bad.yml:5", result.stderr)
        self.assertIn("log_format", result.stderr)
        self.assertIn('expected text or json; got "xml"', result.stderr)
        result = subprocess.run([os.environ["GANTRY_CLI"], "deployment", "--uses",
                                 write_yaml(self.tmp.name, "good", ""), "--log-format", "xml"],
                                capture_output=True, text=True, timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--log-format", result.stderr)


if __name__ == "__main__":
    unittest.main()
