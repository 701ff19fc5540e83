"""The bench's bare gRPC relays (`gantry_grpc_floor --forward`, on the
callback and on the async API) pass their caller's deadline to the upstream
call, as a gateway must: an upstream that never answers is released when the
caller's deadline passes, not held until the relay stops. And a relay that
stops cancels the upstream calls it still holds, so that it exits.

Run by ctest (label `interop`, tests/interop/run_jina_tests.sh: the Jina venv
has grpcio). The upstream is a grpcio server in this process; the relay runs
as its own process on 127.0.0.1 and is always terminated and reaped.
"""
import os
import subprocess
import threading
import time
import unittest
from concurrent import futures

import grpc

from gantry_process import free_port

FLOOR = os.environ["GANTRY_GRPC_FLOOR"]
METHOD = "/jina.JinaSingleDataRequestRPC/process_single_data"
HANG = b"hang"  # a request with these bytes is never answered


class Upstream(grpc.GenericRpcHandler):
    """Echoes every request's bytes, except HANG: that call is held until it
    stops being active (its deadline passed or it was cancelled) or 30 s,
    and what it saw is recorded."""

    def __init__(self):
        self.hung = threading.Event()
        self.remaining_s = None  # the deadline the hung call arrived with
        self.held_s = None  # how long it stayed active
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((self,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def service(self, handler_call_details):
        return grpc.unary_unary_rpc_method_handler(self.call)

    def call(self, request, context):
        if request != HANG:
            return request
        self.remaining_s = context.time_remaining()
        start = time.monotonic()
        while context.is_active() and time.monotonic() - start < 30:
            time.sleep(0.01)
        self.held_s = time.monotonic() - start
        self.hung.set()
        return b""


class RelayDeadlineTest(unittest.TestCase):
    API = "callback"  # the gRPC API the relay forwards on

    def setUp(self):
        self.upstream = Upstream()
        self.addCleanup(self.upstream.server.stop, 0)
        # free_port's port may be taken before the relay binds it: then the
        # relay exits at once, and another port is tried.
        for _ in range(3):
            port = free_port()
            self.relay = subprocess.Popen(
                [FLOOR, "--port", str(port), "--forward", f"127.0.0.1:{self.upstream.port}",
                 "--api", self.API],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            self.addCleanup(self.stop_relay, self.relay)
            self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            self.addCleanup(self.channel.close)
            ready = grpc.channel_ready_future(self.channel)
            deadline = time.monotonic() + 30
            while not ready.done() and self.relay.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if ready.done():
                break
            ready.cancel()
            if self.relay.poll() is None:
                self.fail(f"the relay did not listen on 127.0.0.1:{port} within 30 s")
        else:
            self.fail(f"the relay did not start: {self.relay.stdout.read().decode(errors='replace')}")
        self.call = self.channel.unary_unary(METHOD)

    @staticmethod
    def stop_relay(relay):
        relay.terminate()
        try:
            relay.wait(timeout=10)
        except subprocess.TimeoutExpired:
            relay.kill()
            relay.wait()
        relay.stdout.close()

    def test_the_callers_deadline_releases_a_hung_upstream_call(self):
        self.assertEqual(self.call(b"before", timeout=10), b"before")
        start = time.monotonic()
        with self.assertRaises(grpc.RpcError) as raised:
            self.call(HANG, timeout=2.0)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - start, 5)
        self.assertTrue(self.upstream.hung.wait(10), "the upstream never saw the hung call end")
        # grpc-timeout travels rounded up to its unit, so a few ms over 2 s.
        self.assertIsNotNone(self.upstream.remaining_s, "the upstream call had no deadline")
        self.assertLess(self.upstream.remaining_s, 2.1)
        self.assertGreater(self.upstream.remaining_s, 1.0)
        self.assertLess(self.upstream.held_s, 4, "the upstream call outlived the caller's deadline")
        # The relay keeps serving.
        self.assertEqual(self.call(b"after", timeout=10), b"after")

    def test_a_stopping_relay_ends_a_hung_call_that_has_no_deadline(self):
        pending = self.call.future(HANG)  # no deadline: only the stop can end it
        time.sleep(0.5)
        start = time.monotonic()
        self.relay.terminate()
        try:
            code = self.relay.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.fail("the relay did not stop within 10 s of SIGTERM with a call held upstream")
        self.assertEqual(code, 0)
        # The server's 2 s grace, then its cancellation reaches the upstream call.
        self.assertLess(time.monotonic() - start, 6)
        self.assertTrue(self.upstream.hung.wait(10), "the upstream call was never cancelled")
        self.assertLess(self.upstream.held_s, 8)
        with self.assertRaises(grpc.RpcError):
            pending.result(timeout=10)


class AsyncRelayDeadlineTest(RelayDeadlineTest):
    API = "async"


if __name__ == "__main__":
    unittest.main()
