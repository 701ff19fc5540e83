"""OpenTelemetry tracing of `gantry deployment` and `gantry flow`, read back by
an OTLP/gRPC receiver this test starts (grpcio with opentelemetry-proto's
own generated classes, so the spans are checked as any OTLP collector would
parse them).

Run by ctest (label `interop`, tests/interop/run_jina_tests.sh: the Jina venv
has jina, grpcio and opentelemetry-proto). Every `gantry` process runs on
127.0.0.1 and is always terminated and reaped.

  * The stock Jina client with its own tracing on posts over gRPC: the
    gateway's span is a child of the client's span (W3C `traceparent` in the
    gRPC metadata), each replica's `executor` span a child of the gateway's,
    and `queue` and `handler` spans children of the replica's; the
    resource's service.name names the gateway and the replica.
  * KServe v2's gRPC ModelInfer with a `traceparent` in its metadata joins
    the client's trace as well.
  * HTTP with a `traceparent` header joins the client's trace; without one
    the gateway's span starts a trace; a handler's exception marks the
    replica's and the gateway's spans as errors.
  * A Flow of two steps: each step's spans hang from the Flow gateway's span.
  * A collector that is down costs spans, never requests.
  * A bad `traces_exporter_host` or `traces_exporter_port` is refused naming
    the key, the file and the line.
"""
import json
import os
import secrets
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from gantry_process import GantryProcess, free_port, http_post

PLUGIN = os.environ["GANTRY_INTEROP_PLUGIN"]
SERVER, INTERNAL = 2, 1  # Span.SpanKind
STATUS_ERROR = 2


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver on 127.0.0.1: keeps every span with its
    resource's service.name."""

    def __init__(self):
        self.lock = threading.Lock()
        self.spans = []  # (service name, Span)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def Export(self, request, context):
        with self.lock:
            for resource_spans in request.resource_spans:
                service = ""
                for kv in resource_spans.resource.attributes:
                    if kv.key == "service.name":
                        service = kv.value.string_value
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append((service, span))
        return trace_service_pb2.ExportTraceServiceResponse()

    def stop(self):
        self.server.stop(grace=None)

    def gateway_span(self, request_id, timeout=20):
        """The gateway's span of the request with this id, or None (bounded wait)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for service, span in self.spans:
                    if service.endswith("/gateway") and span.name.startswith("gateway") and \
                            attributes(span).get("gantry.request_id") == request_id:
                        return span
            time.sleep(0.1)
        return None

    def trace(self, trace_id, want, timeout=20):
        """The spans of one trace, once `want(spans)` holds (bounded wait)."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = [(s, span) for s, span in self.spans if span.trace_id == trace_id]
            if want(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.1)


def attributes(span):
    out = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = value.string_value if value.HasField("string_value") else value.int_value
    return out


def named(spans, prefix):
    return [(s, span) for s, span in spans if span.name.startswith(prefix)]


def write(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def deployment_yaml(tmp, receiver_port, host="127.0.0.1", extra=""):
    return write(tmp, "traced.yml",
                 "jtype: Deployment\nwith:\n  name: traced\n  replicas: 2\n"
                 "  tracing: true\n"
                 f"  traces_exporter_host: {host}\n"
                 f"  traces_exporter_port: {receiver_port}\n" + extra +
                 "  uses_dynamic_batching:\n    /encode:\n      preferred_batch_size: 4\n"
                 "      timeout: 20\n"
                 "  uses:\n    jtype: InteropExec\n"
                 f"    metas:\n      libs: [{PLUGIN}]\n")


def post_traced(port, endpoint, parent_id, sampled=True):
    """POSTs one document to /post with a traceparent of a new trace whose
    parent span is `parent_id`: (HTTP status, the trace id's bytes)."""
    trace_id = secrets.token_hex(16)
    status = post_with_traceparent(
        port, "/post", {"data": [{"text": "x"}], "execEndpoint": endpoint},
        f"00-{trace_id}-{parent_id}-{'01' if sampled else '00'}")
    return status, bytes.fromhex(trace_id)


def post_with_traceparent(port, path, body, traceparent):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "traceparent": traceparent})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status
    except urllib.error.HTTPError as e:
        return e.code


def kserve_infer_request(model, text):
    """KServe v2's ModelInferRequest (model_name = 1, inputs = 5) of one BYTES
    input "text" of shape [1, 1], encoded by hand: this venv has grpcio but
    not the KServe stubs. InferInputTensor: name 1, datatype 2, shape 3
    (packed), contents 5; InferTensorContents: bytes_contents 8."""
    def varint(n):
        out = b""
        while n >= 0x80:
            out += bytes([n & 0x7F | 0x80])
            n >>= 7
        return out + bytes([n])

    def field(number, payload):  # length-delimited
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    tensor = (field(1, b"text") + field(2, b"BYTES") + field(3, varint(1) + varint(1))
              + field(5, field(8, text.encode())))
    return field(1, model.encode()) + field(5, tensor)


class Tracing(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.receiver = Receiver()
        self.addCleanup(self.receiver.stop)

    def start(self, args, name, **kwargs):
        process = GantryProcess(args, self.tmp.name, name, **kwargs)
        self.addCleanup(process.stop)
        return process

    def assert_replica_spans(self, spans, gateway_span, endpoint):
        """One replica's executor span under `gateway_span`, with its queue and
        handler spans under it; returns the executor span."""
        executors = [(s, span) for s, span in named(spans, "executor " + endpoint)
                     if span.parent_span_id == gateway_span.span_id]
        self.assertEqual(len(executors), 1, [(s, x.name) for s, x in spans])
        service, executor = executors[0]
        self.assertRegex(service, r"^traced/rep-[01]$")
        self.assertEqual(executor.kind, SERVER)
        self.assertEqual(attributes(executor)["gantry.endpoint"], endpoint)
        self.assertEqual(attributes(executor)["gantry.replica"], service)
        children = [span for _, span in spans if span.parent_span_id == executor.span_id]
        self.assertEqual(sorted(span.name.split(" ")[0] for span in children),
                         ["handler", "queue"], children)
        for child in children:
            self.assertEqual(child.kind, INTERNAL)
            self.assertGreaterEqual(child.start_time_unix_nano, executor.start_time_unix_nano)
            self.assertLessEqual(child.end_time_unix_nano, executor.end_time_unix_nano)
        return executor

    def assert_joined_the_trace(self, trace_id, parent_id):
        """The trace `trace_id` holds one gateway /encode span, the gateway's,
        whose parent is the client's span `parent_id`, with one replica's
        spans under it."""
        spans = self.receiver.trace(trace_id, lambda spans: len(spans) >= 4)
        gateways = named(spans, "gateway /encode")
        self.assertEqual(len(gateways), 1, [x.name for _, x in spans])
        service, gateway = gateways[0]
        self.assertEqual(service, "traced/gateway")
        self.assertEqual(gateway.parent_span_id, bytes.fromhex(parent_id))
        self.assert_replica_spans(spans, gateway, "/encode")

    def test_the_jina_clients_trace_reaches_every_part(self):
        yaml = deployment_yaml(self.tmp.name, self.receiver.port, host="http://127.0.0.1")
        gantry = self.start(["deployment", "--uses", yaml], "deployment")
        from jina import Client, Document, DocumentArray
        client = Client(host="127.0.0.1", port=gantry.port, protocol="grpc", tracing=True,
                        traces_exporter_host="http://127.0.0.1",
                        traces_exporter_port=self.receiver.port)
        reply = client.post("/encode", inputs=DocumentArray([Document(text="a b c")]),
                            request_size=1, return_responses=True)
        self.assertEqual(len(reply), 1)
        request_id = reply[0].header.request_id
        # The client's SDK batches its own spans: wait for the gateway's first.
        gateway = self.receiver.gateway_span(request_id)
        self.assertIsNotNone(gateway, "no gateway span for request " + request_id)
        self.assertEqual(gateway.name, "gateway /encode")
        self.assertEqual(gateway.kind, SERVER)
        spans = self.receiver.trace(
            gateway.trace_id,
            lambda spans: len(named(spans, "executor")) >= 1 and len(named(spans, "handler")) >= 1
            and any(span.span_id == gateway.parent_span_id for _, span in spans))
        # The gateway's parent is a span the Jina client itself sent.
        parents = [(s, span) for s, span in spans if span.span_id == gateway.parent_span_id]
        self.assertEqual(len(parents), 1, "the gateway span's parent is not among the client's")
        self.assertNotIn(parents[0][0], ("traced/gateway", "traced/rep-0", "traced/rep-1"))
        self.assert_replica_spans(spans, gateway, "/encode")
        queue = [span for _, span in named(spans, "queue")][0]
        self.assertEqual(attributes(queue)["gantry.batched"], "true")

    def test_http_traceparent_joins_the_trace_and_errors_mark_the_spans(self):
        yaml = deployment_yaml(self.tmp.name, self.receiver.port)
        gantry = self.start(["deployment", "--uses", yaml], "deployment", http=True)
        parent_id = secrets.token_hex(8)
        status, trace_id = post_traced(gantry.http_port, "/encode", parent_id)
        self.assertEqual(status, 200)
        self.assert_joined_the_trace(trace_id, parent_id)

        # A handler that throws: the replica's and the gateway's spans say so.
        status, trace_id = post_traced(gantry.http_port, "/fail", parent_id)
        self.assertNotEqual(status, 200)
        spans = self.receiver.trace(trace_id, lambda spans: len(spans) >= 4)
        gateway = named(spans, "gateway /fail")[0][1]
        executor = self.assert_replica_spans(spans, gateway, "/fail")
        self.assertEqual(executor.status.code, STATUS_ERROR)
        self.assertIn("interop failure requested", executor.status.message)
        self.assertEqual(gateway.status.code, STATUS_ERROR)

        # No traceparent: the gateway's span starts a trace of its own.
        status, _ = http_post(gantry.http_port, "/post",
                              {"data": [{"text": "y"}], "execEndpoint": "/encode",
                               "header": {"requestId": "no-parent-1"}})
        self.assertEqual(status, 200)
        root = self.receiver.gateway_span("no-parent-1")
        self.assertIsNotNone(root)
        self.assertEqual(root.parent_span_id, b"")
        spans = self.receiver.trace(root.trace_id, lambda spans: len(spans) >= 4)
        self.assert_replica_spans(spans, root, "/encode")

        # A traceparent with the sampled flag off: nothing is recorded, and the
        # request is served.
        status, trace_id = post_traced(gantry.http_port, "/encode", parent_id, sampled=False)
        self.assertEqual(status, 200)
        time.sleep(1.5)  # two of the exporters' flush intervals
        self.assertEqual(self.receiver.trace(trace_id, lambda s: False, timeout=0), [])

    def test_kserve_grpc_traceparent_joins_the_trace(self):
        yaml = deployment_yaml(self.tmp.name, self.receiver.port)
        gantry = self.start(["deployment", "--uses", yaml], "deployment")
        parent_id = secrets.token_hex(8)
        trace_id = secrets.token_hex(16)
        with grpc.insecure_channel(f"127.0.0.1:{gantry.port}") as channel:
            infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
            reply = infer(kserve_infer_request("traced", "a b c"), timeout=60,
                          metadata=[("traceparent", f"00-{trace_id}-{parent_id}-01")])
        self.assertGreater(len(reply), 0)
        self.assert_joined_the_trace(bytes.fromhex(trace_id), parent_id)

    def test_a_flows_steps_hang_from_the_flow_gateway(self):
        flow = write(self.tmp.name, "flow.yml",
                     "jtype: Flow\nwith:\n  name: traced_flow\n  tracing: true\n"
                     "  traces_exporter_host: 127.0.0.1\n"
                     f"  traces_exporter_port: {self.receiver.port}\n"
                     "executors:\n"
                     f"  - {{name: first, uses: InteropExec, uses_metas: {{libs: [{PLUGIN}]}}}}\n"
                     f"  - {{name: second, uses: InteropExec, uses_metas: {{libs: [{PLUGIN}]}}}}\n")
        gantry = self.start(["flow", "--uses", flow], "flow", http=True)
        parent_id = secrets.token_hex(8)
        status, trace_id = post_traced(gantry.http_port, "/encode", parent_id)
        self.assertEqual(status, 200)
        # Each process exports on its own schedule: wait for all of them (the
        # flow gateway's span ends last, after the reply).
        services = ("traced_flow/gateway", "first/gateway", "second/gateway")
        spans = self.receiver.trace(
            trace_id, lambda spans: all(any(s == service for s, _ in spans) for service in services)
            and len(named(spans, "executor /encode")) >= 2)
        flow_gateway = [span for service, span in spans if service == "traced_flow/gateway"]
        self.assertEqual(len(flow_gateway), 1, [(s, x.name) for s, x in spans])
        self.assertEqual(flow_gateway[0].parent_span_id, bytes.fromhex(parent_id))
        for step in ("first", "second"):
            step_gateways = [span for service, span in spans if service == step + "/gateway"]
            self.assertEqual(len(step_gateways), 1, step)
            self.assertEqual(step_gateways[0].parent_span_id, flow_gateway[0].span_id)
            executors = [span for service, span in spans
                         if service == step + "/rep-0" and span.name == "executor /encode"]
            self.assertEqual(len(executors), 1, step)
            self.assertEqual(executors[0].parent_span_id, step_gateways[0].span_id)

    def test_a_collector_that_is_down_costs_spans_not_requests(self):
        yaml = deployment_yaml(self.tmp.name, free_port())
        gantry = self.start(["deployment", "--uses", yaml], "deployment", http=True)
        for i in range(20):
            status, reply = http_post(gantry.http_port, "/post",
                                      {"data": [{"text": f"d{i}"}], "execEndpoint": "/encode"})
            self.assertEqual(status, 200, reply)
        gantry.stop()
        with open(gantry.log_path) as f:
            log = f.read()
        self.assertIn("spans are dropped until it does", log)

    def test_bad_exporter_settings_are_refused_by_key_and_line(self):
        for key, value, words in [("traces_exporter_port", "0", "1 to 65535"),
                                  ("traces_exporter_host", "collector:4317", "has a port"),
                                  ("traces_exporter_host", "http://c/v1/traces", "no path")]:
            with self.subTest(key=key, value=value):
                path = write(self.tmp.name, "bad.yml",
                             "jtype: Deployment\nwith:\n  name: bad\n  tracing: true\n"
                             f"  {key}: {value}\n  uses: InteropExec\n")
                run = subprocess.run([os.environ["GANTRY_CLI"], "deployment", "--uses", path],
                                     capture_output=True, text=True, timeout=60)
                self.assertNotEqual(run.returncode, 0)
                self.assertIn("bad.yml:5", run.stderr)
                self.assertIn(key, run.stderr)
                self.assertIn(words, run.stderr)


if __name__ == "__main__":
    unittest.main()
