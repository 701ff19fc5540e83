"""A real Prometheus server (Debian's `prometheus`) scraping a running Gantry
Deployment: the counters it reads back through its HTTP query API equal the
requests and documents this test posted.

Run by ctest (label `interop`, tests/interop/run_clients_tests.sh). The
Deployment (`gantry deployment`, InteropExec behind two replicas, monitoring
on) writes its scrape targets to a file that Prometheus reads through
`file_sd_configs`, so the test never hard-codes a port; killing a replica
then shows Prometheus following the restarted one to its new port. Every
process is terminated and reaped, also when a test fails.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from gantry_process import GantryProcess, free_port

PLUGIN = os.environ["GANTRY_INTEROP_PLUGIN"]
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

REQUESTS_ENCODE = 7
DOCS_PER_REQUEST = 3
REQUESTS_FAIL = 2


def http_json(url, body=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait_until(what, condition, timeout=60):
    """Polls `condition` (returns a value or None) until it is not None."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except (OSError, ValueError) as e:
            last = e
        else:
            if last is not None:
                return last
        time.sleep(0.25)
    raise AssertionError(f"{what}: not reached within {timeout} s (last: {last!r})")


class PrometheusServer:
    """`prometheus` on 127.0.0.1, scraping every second; always reaped.
    Prometheus cannot report a port it picked, so a port taken between
    free_port() and its bind is retried on another."""

    ATTEMPTS = 3

    def __init__(self, tmp, targets_file):
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: gantry\n    file_sd_configs:\n"
                    f"      - files: ['{targets_file}']\n        refresh_interval: 1s\n")
        self.log_path = os.path.join(tmp, "prometheus.log")
        for attempt in range(1, self.ATTEMPTS + 1):
            self.port = free_port()
            self.log = open(self.log_path, "w")
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={config}",
                 f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=self.log, stderr=subprocess.STDOUT)
            try:
                wait_until("prometheus ready", lambda: self._ready())
                return
            except Exception:
                self.stop()
                with open(self.log_path) as f:
                    port_taken = "address already in use" in f.read()
                if not port_taken or attempt == self.ATTEMPTS:
                    raise

    def _ready(self):
        if self.proc.poll() is not None:
            raise AssertionError("prometheus exited:\n" + open(self.log_path).read())
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=5) as r:
            return True if r.status == 200 else None

    def query(self, expression):
        """The value of an instant query that returns one sample, or None."""
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": expression}))
        status, body = http_json(url)
        if status != 200 or body["status"] != "success":
            raise AssertionError(f"query {expression!r}: HTTP {status} {body}")
        result = body["data"]["result"]
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class PrometheusScrapesADeployment(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(PROMETHEUS):
            raise AssertionError(f"no prometheus at {PROMETHEUS} (scripts/setup.sh installs "
                                 "Debian's `prometheus`)")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.targets = os.path.join(cls.tmp.name, "targets.json")
        path = os.path.join(cls.tmp.name, "deployment.yml")
        with open(path, "w") as f:
            f.write("jtype: Deployment\nwith:\n  name: metered\n  replicas: 2\n"
                    "  monitoring: true\n  port_monitoring: 0\n"
                    f"  monitoring_targets_file: {cls.targets}\n"
                    "  restart_backoff_initial: 50\n"
                    "  uses:\n    jtype: InteropExec\n"
                    f"    metas:\n      libs: [{PLUGIN}]\n")
        cls.gantry = GantryProcess(["deployment", "--uses", path, "--port", "0"],
                                   cls.tmp.name, "deployment", http=True)
        cls.http_port = cls.gantry.http_port
        try:
            cls.prometheus = PrometheusServer(cls.tmp.name, cls.targets)
        except Exception:
            cls.gantry.stop()
            raise
        cls.post_load()

    @classmethod
    def tearDownClass(cls):
        cls.prometheus.stop()
        cls.gantry.stop()
        cls.tmp.cleanup()

    @classmethod
    def post(cls, endpoint, texts):
        return http_json(f"http://127.0.0.1:{cls.http_port}/post",
                         {"data": [{"text": t} for t in texts], "execEndpoint": endpoint})

    @classmethod
    def post_load(cls):
        for i in range(REQUESTS_ENCODE):
            status, body = cls.post("/encode", [f"r{i}d{k}" for k in range(DOCS_PER_REQUEST)])
            assert status == 200, (status, body)
        for _ in range(REQUESTS_FAIL):
            status, body = cls.post("/fail", ["x"])
            assert status != 200 or body["header"]["status"]["code"] != 0, body

    def settled(self, expression, expected, timeout=60):
        """Waits until `expression` evaluates to `expected` (scrapes lag)."""
        def check():
            value = self.prometheus.query(expression)
            return value if value == expected else None
        try:
            value = wait_until(expression, check, timeout)
            print(f"prometheus: {expression} = {value:g}", flush=True)
        except AssertionError:
            self.fail(f"{expression} = {self.prometheus.query(expression)}, expected {expected}")

    def test_every_target_is_up(self):
        self.settled('count(up{job="gantry"} == 1)', 3)
        self.settled('count(up{gantry_role="worker", deployment="metered"} == 1)', 2)

    def test_counters_equal_what_was_posted(self):
        docs = REQUESTS_ENCODE * DOCS_PER_REQUEST
        for expression, expected in [
            ('sum(gantry_gateway_request_success_total{endpoint="/encode"})', REQUESTS_ENCODE),
            ('sum(gantry_gateway_request_failure_total{endpoint="/fail",code="EXECUTOR_ERROR"})',
             REQUESTS_FAIL),
            ('sum(gantry_gateway_request_duration_seconds_count{endpoint="/encode"})',
             REQUESTS_ENCODE),
            ('sum(gantry_request_success_total{endpoint="/encode"})', REQUESTS_ENCODE),
            ('sum(gantry_request_failure_total{endpoint="/fail",reason="handler"})',
             REQUESTS_FAIL),
            ('sum(gantry_inference_count_total{endpoint="/encode"})', docs),
            ('sum(gantry_inference_exec_count_total{endpoint="/encode"})', REQUESTS_ENCODE),
            ('sum(gantry_compute_duration_seconds_count{endpoint="/encode"})', REQUESTS_ENCODE),
            ('sum(gantry_queue_duration_seconds_count{endpoint="/encode"})', REQUESTS_ENCODE),
            ('sum(gantry_gateway_pending_requests)', 0),
            ('sum(gantry_pending_requests)', 0),
        ]:
            with self.subTest(expression=expression):
                self.settled(expression, expected)
        # The average batch, as docs/metrics.md reads it off.
        self.settled('sum(gantry_inference_count_total{endpoint="/encode"}) / '
                     'sum(gantry_inference_exec_count_total{endpoint="/encode"})',
                     DOCS_PER_REQUEST)

    def test_grafana_dashboards_queries_are_valid_promql(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                            "grafana-dashboard.json")
        with open(path) as f:
            panels = json.load(f)["panels"]
        self.assertGreater(len(panels), 5)
        for panel in panels:
            for target in panel["targets"]:
                with self.subTest(panel=panel["title"], expr=target["expr"]):
                    url = (f"http://127.0.0.1:{self.prometheus.port}/api/v1/query?"
                           + urllib.parse.urlencode({"query": target["expr"]}))
                    status, body = http_json(url)
                    self.assertEqual((status, body["status"]), (200, "success"), body)

    def test_zz_prometheus_follows_a_restarted_replica(self):
        # Named to run last: it replaces a replica.
        self.settled('count(up{gantry_role="worker"} == 1)', 2)
        with open(self.targets) as f:
            before = {g["labels"].get("replica"): g["targets"][0] for g in json.load(f)}
        pid = int(subprocess.check_output(
            ["pgrep", "-P", str(self.gantry.proc.pid), "-f", "metered/rep-1"]).split()[0])
        os.kill(pid, signal.SIGKILL)
        self.settled('sum(gantry_replica_restarts_total{replica="metered/rep-1"})', 1)

        def moved():
            with open(self.targets) as f:
                now = {g["labels"].get("replica"): g["targets"][0] for g in json.load(f)}
            return now if now["metered/rep-1"] != before["metered/rep-1"] else None
        after = wait_until("targets file rewritten", moved)
        address = after["metered/rep-1"]
        self.settled(f'up{{instance="{address}"}}', 1)
        # The gateway's counters outlive the replica; the new replica's
        # series are scraped from its new port.
        for _ in range(4):
            status, body = self.post("/encode", ["again"])
            self.assertEqual(status, 200, body)
        self.settled('sum(gantry_gateway_request_success_total{endpoint="/encode"})',
                     REQUESTS_ENCODE + 4)
        wait_until(f"series of {address}", lambda: self.prometheus.query(
            f'sum(gantry_request_duration_seconds_count{{instance="{address}"}})'))

if __name__ == "__main__":
    unittest.main()
