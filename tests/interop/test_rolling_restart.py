"""Rolling restarts of `gantry deployment` on SIGHUP, under load.

Run by ctest (label `interop`, tests/interop/run_jina_tests.sh). Every `gantry`
process runs on 127.0.0.1 and is always terminated and reaped.

While client threads post without pause over HTTP for
GANTRY_ROLLING_LOAD_SECONDS (default 120), the YAML is edited and SIGHUP sent:
  * a new `uses_with` rolls both replicas over (new processes, the new
    setting in the replies);
  * a YAML that does not load, one that changes the gateway's `port`, and one
    whose executor cannot start are each refused, saying why, and the running
    replicas keep serving;
  * a last good edit rolls over again.
Not one request fails or is lost. A Deployment of one replica, and a Flow's
steps (its own `with:` refused), roll over under load without a failed
request too.
"""
import os
import re
import signal
import tempfile
import threading
import time
import unittest

from gantry_process import GantryProcess, http_post

PLUGIN = os.environ["GANTRY_INTEROP_PLUGIN"]
LOAD_SECONDS = float(os.environ.get("GANTRY_ROLLING_LOAD_SECONDS", "120"))


def yaml_text(scale, replicas=2, extra="", uses="InteropExec"):
    return ("jtype: Deployment\nwith:\n  name: rolling\n"
            f"  replicas: {replicas}\n{extra}"
            f"  uses: {uses}\n  uses_with: {{scale: {scale}}}\n"
            f"  uses_metas: {{libs: [{PLUGIN}]}}\n")


class Load:
    """Threads that post 4 documents to /post without pause, recording every
    reply's status and the scale its embeddings carry."""

    def __init__(self, port, threads=4):
        self.port = port
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.failures = []
        self.scales = []  # (time, scale) of each reply
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(threads)]
        for t in self.threads:
            t.start()

    def run(self, worker):
        n = 0
        while not self.stop.is_set():
            texts = [f"w{worker}-{n}-{i}" for i in range(4)]
            n += 1
            try:
                status, reply = http_post(
                    self.port, "/post",
                    {"data": [{"text": t} for t in texts], "execEndpoint": "/encode"}, timeout=60)
            except Exception as e:  # a connection reset counts as a failure too
                with self.lock:
                    self.failures.append(repr(e))
                continue
            with self.lock:
                if status != 200 or len(reply.get("data", [])) != 4:
                    self.failures.append((status, str(reply)[:300]))
                    continue
                got = [d["text"] for d in reply["data"]]
                if got != texts:
                    self.failures.append(("lost or reordered documents", got, texts))
                    continue
                self.ok += 1
                self.scales.append((time.monotonic(), reply["data"][0]["embedding"][1]))

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)

    def scales_since(self, t0):
        with self.lock:
            return {s for t, s in self.scales if t >= t0}


class RollingRestart(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.yaml = os.path.join(self.tmp.name, "rolling.yml")

    def write(self, text):
        with open(self.yaml, "w") as f:
            f.write(text)

    def log(self, gantry):
        with open(gantry.log_path, errors="replace") as f:
            return f.read()

    def hup_and_wait(self, gantry, pattern, timeout=120):
        """Sends SIGHUP and waits for one more log line matching `pattern`."""
        before = len(re.findall(pattern, self.log(gantry)))
        gantry.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = re.findall(pattern, self.log(gantry))
            if len(lines) > before:
                return lines[-1]
            time.sleep(0.1)
        self.fail(f"no '{pattern}' within {timeout} s:\n" + self.log(gantry)[-4000:])

    def start(self, replicas):
        self.write(yaml_text(1, replicas))
        gantry = GantryProcess(["deployment", "--uses", self.yaml], self.tmp.name, "rolling",
                               http=True)
        self.addCleanup(gantry.stop)
        load = Load(gantry.http_port)
        self.addCleanup(load.finish)
        return gantry, load

    def assert_rolled(self, gantry, load, scale, replicas):
        done = self.hup_and_wait(gantry, r"rolling restart: done, (\d+) replicas replaced in (\d+) ms")
        t0 = time.monotonic()
        time.sleep(1)
        self.assertEqual(load.scales_since(t0), {float(scale)}, "replies after the rollover")
        moved = re.findall(r"rolling/rep-\d+ \(pid (\d+)\) in rotation in place of pid (\d+)",
                           self.log(gantry))
        self.assertGreaterEqual(len(moved), replicas)
        for new, old in moved[-replicas:]:
            self.assertNotEqual(new, old)
            with self.assertRaises(ProcessLookupError, msg=f"the old replica {old} still runs"):
                os.kill(int(old), 0)
        return done

    def test_sighup_rolls_two_replicas_over_under_load_and_refuses_bad_edits(self):
        gantry, load = self.start(replicas=2)
        started = time.monotonic()
        time.sleep(2)

        self.write(yaml_text(2))
        self.assert_rolled(gantry, load, 2, replicas=2)

        self.write("jtype: Deployment\nwith:\n  name: rolling\n  replica: 2\n")
        refused = self.hup_and_wait(gantry, r"SIGHUP: .*; the running replicas stay")
        self.assertIn("with.replica: unknown key", refused)

        self.write(yaml_text(3, extra="  port: 1\n"))
        refused = self.hup_and_wait(gantry, r"SIGHUP: .*; the running replicas stay")
        self.assertIn("`port` changed", refused)

        self.write(yaml_text(3, uses="NoSuchExecutor"))
        refused = self.hup_and_wait(gantry, r"SIGHUP: .*; the running replicas stay")
        self.assertIn("NoSuchExecutor", refused)
        self.assertIn("every replica still runs the old settings", refused)
        t0 = time.monotonic()
        time.sleep(1)
        self.assertEqual(load.scales_since(t0), {2.0}, "the old replicas keep serving")

        self.write(yaml_text(4))
        self.assert_rolled(gantry, load, 4, replicas=2)

        # The rest of the load's time, then not one request may have failed.
        time.sleep(max(0.0, LOAD_SECONDS - (time.monotonic() - started)))
        load.finish()
        self.assertEqual(load.failures, [])
        self.assertGreater(load.ok, 100)
        log = self.log(gantry)
        rollovers = re.findall(r"replicas replaced in (\d+) ms", log)
        retried = log.count("retrying on another replica")
        print(f"{load.ok} requests of 4 documents in {time.monotonic() - started:.0f} s, "
              "none failed, across 2 rolling restarts and 3 refused ones; rollovers took "
              f"{rollovers} ms; tries retried on another replica: {retried}")

    def test_one_replica_rolls_over_without_a_failed_request(self):
        gantry, load = self.start(replicas=1)
        time.sleep(1)
        self.write(yaml_text(5, replicas=1))
        self.assert_rolled(gantry, load, 5, replicas=1)
        time.sleep(1)
        load.finish()
        self.assertEqual(load.failures, [])
        self.assertGreater(load.ok, 10)


    def test_sighup_rolls_a_flows_steps_over(self):
        def flow_text(scale, extra=""):
            return ("jtype: Flow\nwith:\n  name: rolling_flow\n" + extra + "executors:\n"
                    f"  - {{name: first, uses: InteropExec, replicas: 2, uses_with: {{scale: {scale}}}, "
                    f"uses_metas: {{libs: [{PLUGIN}]}}}}\n"
                    f"  - {{name: second, uses: InteropExec, uses_with: {{scale: {scale}}}, "
                    f"uses_metas: {{libs: [{PLUGIN}]}}}}\n")
        self.write(flow_text(1))
        gantry = GantryProcess(["flow", "--uses", self.yaml], self.tmp.name, "flow", http=True)
        self.addCleanup(gantry.stop)
        load = Load(gantry.http_port)
        self.addCleanup(load.finish)
        time.sleep(1)
        self.write(flow_text(1, extra="  port: 1\n"))
        refused = self.hup_and_wait(gantry, r"SIGHUP: .*; the running replicas stay")
        self.assertIn("`with.port` changed", refused)
        self.write(flow_text(6))
        self.hup_and_wait(gantry, r"rolling restart: done, every step rolled over")
        t0 = time.monotonic()
        time.sleep(1)
        self.assertEqual(load.scales_since(t0), {6.0})
        load.finish()
        self.assertEqual(load.failures, [])
        self.assertGreater(load.ok, 10)


if __name__ == "__main__":
    unittest.main()
