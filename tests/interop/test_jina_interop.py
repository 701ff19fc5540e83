"""Stock Jina (Python) against Gantry, and Gantry against stock Jina.

Run by ctest (label `interop`, tests/interop/run_jina_tests.sh) with the venv
of scripts/jina_venv.sh. Gantry processes run on 127.0.0.1 with ports read
from --port-file, and are always terminated and reaped.

  * Jina's Client -> a Gantry Flow of two steps (`gantry flow`, Jina's YAML)
  * Jina's Client -> Gantry gateway (text, tensors of several dtypes and
    shapes, nested docs, tags, parameters; errors, and on the unary call the
    `is-error: true` trailer; is_flow_ready; stream=False)
  * grpcio-reflection (what grpcurl does) -> Gantry gateway: list, describe, call
  * Jina's own gateway (a Flow with an external executor) -> Gantry worker
  * Gantry's C++ client -> a Jina Deployment serving a Python executor
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Optional

import grpc
import numpy as np
from docarray import BaseDoc, DocList
from docarray.documents.legacy import LegacyDocument
from docarray.typing import NdArray
from google.protobuf import descriptor_pool, empty_pb2, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from jina import Client, Deployment, Executor, Flow, requests

from gantry_process import GantryProcess, free_port

CLI = os.environ["GANTRY_CLI"]
PLUGIN = os.environ["GANTRY_INTEROP_PLUGIN"]
CPP_CLIENT = os.environ["GANTRY_INTEROP_CLIENT"]


class ChunkDoc(BaseDoc):
    text: str = ""


class MyDoc(BaseDoc):
    text: str = ""
    tensor: Optional[NdArray] = None
    embedding: Optional[NdArray] = None
    tags: dict = {}
    chunks: Optional[DocList[ChunkDoc]] = None


def deployment_yaml(tmp, replicas=2):
    path = os.path.join(tmp, "deployment.yml")
    with open(path, "w") as f:
        f.write(
            "jtype: Deployment\nwith:\n  name: interop\n"
            f"  replicas: {replicas}\n  uses:\n    jtype: InteropExec\n"
            "    with: {scale: 2.0}\n"
            f"    metas:\n      libs: [{PLUGIN}]\n")
    return path


def single_data_call(port, endpoint, texts):
    """jina.JinaSingleDataRequestRPC/process_single_data (unary) through the
    stub generated in Jina's own jina.proto (whose serializer takes Jina's
    DataRequest); returns (reply DataRequestProto, trailing metadata as a
    dict)."""
    from jina.proto import jina_pb2, jina_pb2_grpc
    from jina.types.request.data import DataRequest
    request = jina_pb2.DataRequestProto()
    request.header.request_id = "unary-1"
    request.header.exec_endpoint = endpoint
    request.data.docs.CopyFrom(
        DocList[LegacyDocument]([LegacyDocument(text=t) for t in texts]).to_protobuf())
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = jina_pb2_grpc.JinaSingleDataRequestRPCStub(channel)
        reply, call = stub.process_single_data.with_call(DataRequest(request), timeout=30)
        return reply.proto, dict(call.trailing_metadata() or ())
    finally:
        channel.close()


class JinaClientToGantryGateway(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.gantry = GantryProcess(
            ["deployment", "--uses", deployment_yaml(cls.tmp.name), "--port", "0"],
            cls.tmp.name, "deployment")
        cls.client = Client(host="127.0.0.1", port=cls.gantry.port, protocol="grpc")

    @classmethod
    def tearDownClass(cls):
        cls.gantry.stop()
        cls.tmp.cleanup()

    def make_docs(self):
        tensors = [
            np.arange(6, dtype=np.float32).reshape(2, 3),
            np.array([1, -2, 3, 2**40], dtype=np.int64),
            np.array([0.5, 1.5, -2.0], dtype=np.float16),
            np.arange(8, dtype=np.uint8).reshape(2, 2, 2),
            np.array([[3.25]], dtype=np.float64),
            np.array([True, False]),
        ]
        docs = []
        for i in range(13):
            docs.append(MyDoc(
                text="x" * i,
                tensor=tensors[i % len(tensors)],
                tags={"i": i, "name": f"doc{i}", "nested": {"list": [1, "a", None], "ok": True}},
                chunks=DocList[ChunkDoc]([ChunkDoc(text=f"c{i}.{j}") for j in range(i % 3)]),
            ))
        return DocList[MyDoc](docs)

    def test_post_text_tensors_nested_tags_and_parameters(self):
        docs = self.make_docs()
        out = self.client.post(
            "/encode", docs, return_type=DocList[MyDoc], request_size=4,
            parameters={"tag": "py", "offset": 1.5})
        self.assertEqual(len(out), len(docs))
        by_id = {d.id: d for d in out}
        for sent in docs:
            got = by_id[sent.id]
            self.assertEqual(got.text, sent.text)
            np.testing.assert_array_equal(
                np.asarray(got.embedding), np.array([len(sent.text), 2.0, 1.5], np.float32))
            self.assertEqual(got.embedding.dtype, np.float32)
            self.assertEqual(got.tensor.dtype, sent.tensor.dtype)
            self.assertEqual(got.tensor.shape, sent.tensor.shape)
            np.testing.assert_array_equal(got.tensor, sent.tensor)
            self.assertEqual(got.tags["param"], "py")
            self.assertEqual(got.tags["seen_by"], "gantry")
            self.assertEqual(got.tags["name"], sent.tags["name"])
            self.assertEqual(got.tags["i"], sent.tags["i"])
            self.assertEqual(got.tags["nested"], sent.tags["nested"])
            self.assertEqual(got.tags["tensor_dtype"], sent.tensor.dtype.str)
            self.assertEqual([c.text for c in (got.chunks or [])],
                             ["chunk:" + c.text for c in sent.chunks])

    def test_unary_requests_keep_order(self):
        docs = DocList[MyDoc]([MyDoc(text=str(i) * (i + 1)) for i in range(7)])
        out = self.client.post("/encode", docs, return_type=DocList[MyDoc], request_size=2,
                               stream=False, results_in_order=True)
        self.assertEqual([d.text for d in out], [d.text for d in docs])

    def test_default_endpoint(self):
        out = self.client.post("/unbound", DocList[MyDoc]([MyDoc(text="a")]),
                               return_type=DocList[MyDoc])
        self.assertTrue(out[0].tags["default"])

    def test_executor_error_reaches_python_client(self):
        with self.assertRaises(Exception) as caught:
            self.client.post("/fail", DocList[MyDoc]([MyDoc(text="a")]),
                             return_type=DocList[MyDoc])
        self.assertIn("interop failure requested for 1 documents", str(caught.exception))

    def test_unary_executor_error_has_is_error_trailer(self):
        # Jina's unary path (process_single_data, what Client(stream=False)
        # calls) flags an executor error with trailing `is-error: true`.
        from jina.proto import jina_pb2
        reply, trailers = single_data_call(self.gantry.port, "/fail", ["a", "b"])
        self.assertEqual(trailers.get("is-error"), "true", trailers)
        self.assertEqual(reply.header.status.code, jina_pb2.StatusProto.ERROR)
        self.assertIn("interop failure requested for 2 documents",
                      reply.header.status.description)
        # A good unary reply carries no such trailer.
        reply, trailers = single_data_call(self.gantry.port, "/encode", ["a"])
        self.assertNotIn("is-error", trailers)
        self.assertEqual(reply.header.status.code, jina_pb2.StatusProto.SUCCESS)

    def test_unary_executor_error_reaches_stock_client(self):
        with self.assertRaises(Exception) as caught:
            self.client.post("/fail", DocList[MyDoc]([MyDoc(text="a")]),
                             return_type=DocList[MyDoc], stream=False)
        self.assertIn("interop failure requested for 1 documents", str(caught.exception))

    def test_is_flow_ready(self):
        self.assertTrue(self.client.is_flow_ready())

    def test_reflection_like_grpcurl(self):
        channel = grpc.insecure_channel(f"127.0.0.1:{self.gantry.port}")
        db = ProtoReflectionDescriptorDatabase(channel)
        services = db.get_services()
        for name in ["jina.JinaRPC", "jina.JinaSingleDataRequestRPC", "jina.JinaGatewayDryRunRPC",
                     "jina.JinaInfoRPC", "grpc.health.v1.Health"]:
            self.assertIn(name, services)
        # describe: build the service and its messages from reflection alone.
        pool = descriptor_pool.DescriptorPool(db)
        service = pool.FindServiceByName("jina.JinaRPC")
        call = service.FindMethodByName("Call")
        self.assertEqual(call.input_type.full_name, "jina.DataRequestProto")
        self.assertTrue(call.client_streaming and call.server_streaming)
        # call jina.JinaRPC/Call with messages made from the reflected types.
        request_cls = message_factory.GetMessageClass(call.input_type)
        request = request_cls()
        request.header.request_id = "grpcurl-1"
        request.header.exec_endpoint = "/encode"
        doc = request.data.docs.docs.add()
        doc.data["text"].text = "reflected"
        stub = channel.stream_stream(
            "/jina.JinaRPC/Call", request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=request_cls.FromString)
        replies = list(stub(iter([request]), timeout=30))
        self.assertEqual(len(replies), 1)
        tags = replies[0].data.docs.docs[0].data["tags"].dict.data
        self.assertEqual(tags["seen_by"].text, "gantry")
        channel.close()


def flow_yaml(tmp):
    """A Flow YAML in Jina's own schema (jtype: Flow, with: protocol/port,
    executors with name, uses, replicas, needs)."""
    path = os.path.join(tmp, "flow.yml")
    uses = ("    uses:\n      jtype: InteropExec\n      with: {{scale: {scale}}}\n"
            f"      metas:\n        libs: [{PLUGIN}]\n")
    with open(path, "w") as f:
        f.write("jtype: Flow\nversion: '1'\nwith:\n  protocol: grpc\n  port: 0\nexecutors:\n"
                "  - name: first\n" + uses.format(scale=2.0) +
                "  - name: second\n    replicas: 2\n    needs: first\n" + uses.format(scale=3.0))
    return path


class JinaClientWithAnApiKey(unittest.TestCase):
    """The stock Jina client sends the key as gRPC metadata (its `metadata`
    argument); without it the call fails with UNAUTHENTICATED."""

    def test_key_in_metadata(self):
        with tempfile.TemporaryDirectory() as tmp:
            gantry = GantryProcess(
                ["deployment", "--uses", deployment_yaml(tmp, replicas=1), "--port", "0",
                 "--api-key", "j-789"], tmp, "deployment")
            try:
                client = Client(host="127.0.0.1", port=gantry.port, protocol="grpc")
                docs = DocList[MyDoc]([MyDoc(text="abc")])
                out = client.post("/encode", docs, return_type=DocList[MyDoc],
                                  metadata=(("authorization", "Bearer j-789"),))
                self.assertEqual(float(out[0].embedding[0]), 3.0)
                # Repeated, and with several requests in one stream: the refusal
                # must reach the asyncio client as UNAUTHENTICATED every time, not
                # as the INTERNAL it reports when its writes race the status.
                many = DocList[MyDoc]([MyDoc(text=str(i)) for i in range(5)])
                for attempt in range(20):
                    with self.assertRaises(Exception, msg=f"attempt {attempt}") as caught:
                        client.post("/encode", many if attempt % 2 else docs,
                                    return_type=DocList[MyDoc], max_attempts=1, request_size=1)
                    self.assertIn("API key", str(caught.exception), f"attempt {attempt}")
            finally:
                gantry.stop()


class JinaClientToGantryFlow(unittest.TestCase):
    """The stock Jina client posting to `gantry flow`: two steps chained."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.gantry = GantryProcess(["flow", "--uses", flow_yaml(cls.tmp.name), "--port", "0"],
                                   cls.tmp.name, "flow")
        cls.client = Client(host="127.0.0.1", port=cls.gantry.port, protocol="grpc")

    @classmethod
    def tearDownClass(cls):
        cls.gantry.stop()
        cls.tmp.cleanup()

    def test_documents_pass_both_steps(self):
        docs = DocList[MyDoc]([MyDoc(text="x" * i, tags={"i": i}) for i in range(9)])
        for stream in (True, False):
            out = self.client.post("/encode", docs, return_type=DocList[MyDoc], request_size=2,
                                   parameters={"tag": "flow", "offset": 0.5}, stream=stream)
            self.assertEqual(len(out), len(docs))
            by_id = {d.id: d for d in out}
            for sent in docs:
                got = by_id[sent.id]
                # The last step's embedding ([len, its scale, offset]).
                np.testing.assert_array_equal(
                    np.asarray(got.embedding), np.array([len(sent.text), 3.0, 0.5], np.float32))
                self.assertEqual(got.tags["param"], "flow")
                self.assertEqual(got.tags["i"], sent.tags["i"])

    def test_executor_error_names_the_step(self):
        with self.assertRaises(Exception) as caught:
            self.client.post("/fail", DocList[MyDoc]([MyDoc(text="a")]),
                             return_type=DocList[MyDoc])
        self.assertIn("interop failure requested for 1 documents", str(caught.exception))
        self.assertIn("first/rep-0", str(caught.exception))

    def test_is_flow_ready(self):
        self.assertTrue(self.client.is_flow_ready())

    def test_jina_reads_the_same_graph_from_these_files(self):
        # Jina's own loader takes the same YAML (without starting anything).
        example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                               "examples", "flow", "flow.yml")
        for path, expected in [
                (flow_yaml(self.tmp.name), {"first": ({"gateway"}, 1), "second": ({"first"}, 2)}),
                (example, {"encoder": ({"gateway"}, 2), "passthrough": ({"encoder"}, 1)})]:
            nodes = Flow.load_config(path)._deployment_nodes
            self.assertEqual({name: (set(d.needs), d.args.replicas) for name, d in nodes.items()},
                             expected)


class JinaGatewayInFrontOfGantryWorker(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.worker = GantryProcess(
            ["executor", "--host", "127.0.0.1", "--uses", "InteropExec", "--lib", PLUGIN, "--port", "0"],
            cls.tmp.name, "worker")

    @classmethod
    def tearDownClass(cls):
        cls.worker.stop()
        cls.tmp.cleanup()

    def test_worker_reflection_lists_exactly_what_jina_knows(self):
        channel = grpc.insecure_channel(f"127.0.0.1:{self.worker.port}")
        services = ProtoReflectionDescriptorDatabase(channel).get_services()
        channel.close()
        self.assertEqual(sorted(services), sorted([
            "jina.JinaRPC", "jina.JinaSingleDataRequestRPC", "jina.JinaDataRequestRPC",
            "jina.JinaDiscoverEndpointsRPC", "jina.JinaInfoRPC",
            "grpc.reflection.v1alpha.ServerReflection"]))

    def test_worker_unary_executor_error_has_is_error_trailer(self):
        # The same contract one hop down: Jina's gateway reads this trailer
        # from its executors.
        from jina.proto import jina_pb2
        reply, trailers = single_data_call(self.worker.port, "/fail", ["a"])
        self.assertEqual(trailers.get("is-error"), "true", trailers)
        self.assertEqual(reply.header.status.code, jina_pb2.StatusProto.ERROR)
        reply, trailers = single_data_call(self.worker.port, "/encode", ["a"])
        self.assertNotIn("is-error", trailers)

    def test_a_worker_with_an_idle_client_connected_stops_at_once(self):
        # gRPC's own shutdown waits for each connection to close, and an idle
        # Python channel does not read its socket: the worker stopped only at
        # the end of its 5 s grace. It drains its own calls and stops.
        from grpc_health.v1 import health_pb2, health_pb2_grpc
        worker = GantryProcess(
            ["executor", "--host", "127.0.0.1", "--uses", "InteropExec", "--lib", PLUGIN,
             "--port", "0"], self.tmp.name, "idle-worker")
        channel = grpc.insecure_channel(f"127.0.0.1:{worker.port}")
        try:
            health = health_pb2_grpc.HealthStub(channel)
            self.assertEqual(health.Check(health_pb2.HealthCheckRequest(), timeout=10).status,
                             health_pb2.HealthCheckResponse.SERVING)
            start = time.monotonic()
            worker.proc.send_signal(signal.SIGTERM)
            worker.proc.wait(timeout=30)
            took = time.monotonic() - start
            print(f"[ measured ] SIGTERM to exit with an idle client connected: {took:.2f} s")
            self.assertEqual(worker.proc.returncode, 0)
            self.assertLess(took, 2.5)
        finally:
            channel.close()
            worker.stop()

    def test_endpoint_discovery(self):
        from google.protobuf import json_format
        from jina._docarray import LegacyDocumentJina
        from jina.proto import jina_pb2_grpc
        channel = grpc.insecure_channel(f"127.0.0.1:{self.worker.port}")
        reply = jina_pb2_grpc.JinaDiscoverEndpointsRPCStub(channel).endpoint_discovery(
            empty_pb2.Empty(), timeout=10)
        channel.close()
        self.assertEqual(set(reply.endpoints), {"_jina_dry_run_", "/encode", "/double", "/fail",
                                                "/default"})
        schemas = json_format.MessageToDict(reply.schemas)
        # Jina's gateway recognises its own default document by equality.
        self.assertEqual(schemas["/encode"]["input"]["model"], LegacyDocumentJina.schema())

    def test_jina_flow_with_external_gantry_executor(self):
        port = free_port()
        flow = Flow(protocol="grpc", host="127.0.0.1", port=port).add(
            name="gantry", external=True, host="127.0.0.1", port=self.worker.port)
        with flow:
            client = Client(host="127.0.0.1", port=port, protocol="grpc")
            self.assertTrue(client.is_flow_ready())
            docs = DocList[LegacyDocument](
                [LegacyDocument(text="hello", tags={"k": "v"}),
                 LegacyDocument(text="hi there", embedding=np.zeros(2, np.float32))])
            out = client.post("/encode", docs, return_type=DocList[LegacyDocument],
                              parameters={"tag": "via-jina"}, request_size=1)
            self.assertEqual(len(out), 2)
            by_text = {d.text: d for d in out}
            np.testing.assert_array_equal(np.asarray(by_text["hello"].embedding),
                                          np.array([5, 1, 0], np.float32))
            self.assertEqual(by_text["hello"].tags["param"], "via-jina")
            self.assertEqual(by_text["hello"].tags["k"], "v")
            with self.assertRaises(Exception) as caught:
                client.post("/fail", DocList[LegacyDocument]([LegacyDocument(text="a")]))
            self.assertIn("interop failure requested", str(caught.exception))


class PyDoc(BaseDoc):
    text: str = ""
    tensor: Optional[NdArray] = None
    embedding: Optional[NdArray] = None
    tags: dict = {}


class PyEncoder(Executor):
    @requests(on="/encode")
    def encode(self, docs: DocList[PyDoc], parameters, **kwargs) -> DocList[PyDoc]:
        for d in docs:
            d.embedding = np.array([len(d.text), float(np.sum(d.tensor))], dtype=np.float32)
            d.tags["param"] = parameters.get("tag")
            d.text = "py:" + d.text
        return docs


class GantryClientToJinaDeployment(unittest.TestCase):
    def test_cpp_client_posts_to_python_executor(self):
        port = free_port()
        with Deployment(uses=PyEncoder, port=port, host="127.0.0.1", protocol="grpc"):
            result = subprocess.run([CPP_CLIENT, f"127.0.0.1:{port}", "/encode", "5"],
                                    capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        self.assertEqual([d["text"] for d in lines], [f"py:doc{i}" for i in range(5)])
        for i, d in enumerate(lines):
            self.assertEqual(d["embedding"], [4.0, i + 0.5])
            self.assertEqual(d["tags"]["param"], "cpp")
            self.assertEqual(d["tags"]["index"], i)


if __name__ == "__main__":
    unittest.main()
