"""Stock `tritonclient` (gRPC and HTTP) and `perf_analyzer` against a
TorchModel deployment: an exported CNN served from YAML, no C++ written.

Run by ctest (label `interop`, tests/interop/run_clients_tests.sh) with the
venv of scripts/clients_venv.sh. The models come from
tests/exported/exported_models.sh (exported once per torch version and
cached; GANTRY_EXPORTED_MODELS names the folder instead when set). Every
`gantry deployment` runs on 127.0.0.1 and is always terminated and reaped.

  * cnn.pt2 (AOTInductor) behind two replicas with dynamic batching: the
    declared signature in ModelMetadata and ModelConfig, the 21 expected
    rows equal to eager PyTorch's over gRPC and HTTP (binary and JSON), one
    row per request from 8 threads (for the dynamic batcher), a wrong datatype
    or shape refused naming the input, perf_analyzer with no shape or data
    flags of its own, and the deployment serving afterwards.
  * cnn.pt (TorchScript): the same metadata and rows.
"""
import functools
import json
import os
import re
import subprocess
import tempfile
import unittest
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from gantry_process import GantryProcess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
PERF_ANALYZER = os.path.join(ROOT, "scripts", "perf_analyzer.sh")
EXPORTED_MODELS_SCRIPT = os.environ.get("GANTRY_EXPORTED_MODELS_SCRIPT") or os.path.join(
    ROOT, "tests", "exported", "exported_models.sh")
# As test_kserve_api.py: these runs prove the exchange, not a figure.
ANY_STABILITY = ["--stability-percentage", "1000", "--max-trials", "20"]
# Eager PyTorch against the compiled package on the same CPU.
TOLERANCE = 1e-5

SAFETENSORS_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                      "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


@functools.lru_cache(maxsize=None)
def exported_models():
    """The folder of exported test models: $GANTRY_EXPORTED_MODELS, else the
    last stdout line of exported_models.sh (instant once cached)."""
    folder = os.environ.get("GANTRY_EXPORTED_MODELS")
    if not folder:
        result = subprocess.run(["bash", EXPORTED_MODELS_SCRIPT], capture_output=True,
                                text=True, timeout=1800)
        lines = result.stdout.strip().splitlines()
        if result.returncode != 0 or not lines:
            raise RuntimeError(
                f"cannot find the exported test models: `bash {EXPORTED_MODELS_SCRIPT}` exited "
                f"{result.returncode}:\n{result.stderr[-3000:]}\n(it needs the project venv "
                "with torch and the all-MiniLM-L6-v2 folder: scripts/setup.sh, "
                "scripts/parity_setup.sh, scripts/fetch_model.sh; or set "
                "GANTRY_EXPORTED_MODELS to a folder it made)")
        folder = lines[-1]
    for name in ("cnn.pt2", "cnn.pt", "cnn.expected.safetensors"):
        if not os.path.isfile(os.path.join(folder, name)):
            raise RuntimeError(f"the exported test models folder '{folder}' has no {name}")
    return folder


def read_safetensors(path):
    """{name: array} of a safetensors file: an 8-byte little-endian header
    length, that many bytes of JSON, then the tensors' raw bytes."""
    with open(path, "rb") as f:
        blob = f.read()
    size = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + size])
    data = blob[8 + size:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype=SAFETENSORS_DTYPES[info["dtype"]]
                                      ).reshape(info["shape"])
    return tensors


def deployment_yaml(model):
    # `model:` is relative to the YAML's folder.
    return ("jtype: Deployment\nwith:\n  name: cnn\n  replicas: 2\n"
            "  uses_dynamic_batching: {Infer: {preferred_batch_size: 16, timeout: 2}}\n"
            "  uses:\n    jtype: TorchModel\n    with:\n"
            f"      model: {model}\n      device: cpu\n"
            "      inputs: [{name: image, dtype: float32, shape: [3, 32, 32], field: tensor}]\n"
            "      outputs: [{name: logits, dtype: float32, shape: [10], field: embedding}]\n")


def start(tmp, model):
    """`gantry deployment` of the CNN in `tmp`, the models folder linked into
    it as `models/`."""
    os.symlink(exported_models(), os.path.join(tmp, "models"))
    path = os.path.join(tmp, "deployment.yml")
    with open(path, "w") as f:
        f.write(deployment_yaml(model))
    return GantryProcess(["deployment", "--uses", path, "--port", "0"], tmp, "deployment",
                         http=True)


def grpc_image(values, datatype="FP32"):
    tensor = grpcclient.InferInput("image", list(values.shape), datatype)
    tensor.set_data_from_numpy(values)
    return tensor


class CnnDeployment:
    """Mixed into the .pt2 and .pt test cases: one deployment each, of the
    class's `model`."""
    model = None

    @classmethod
    def setUpClass(cls):
        cls.expected = read_safetensors(
            os.path.join(exported_models(), "cnn.expected.safetensors"))
        cls.images = np.ascontiguousarray(cls.expected["input.image"])
        cls.logits = cls.expected["output.logits"]
        cls.tmp = tempfile.TemporaryDirectory()
        cls.addClassCleanup(cls.tmp.cleanup)
        cls.gantry = start(cls.tmp.name, cls.model)
        # Class cleanups run even when the rest of setUpClass fails.
        cls.addClassCleanup(cls.gantry.stop)
        cls.client = grpcclient.InferenceServerClient(f"127.0.0.1:{cls.gantry.port}")
        cls.addClassCleanup(cls.client.close)
        cls.http = httpclient.InferenceServerClient(f"127.0.0.1:{cls.gantry.http_port}",
                                                    concurrency=4)
        cls.addClassCleanup(cls.http.close)

    def server_log(self):
        with open(self.gantry.log_path) as f:
            return "\n--- gantry log ---\n" + f.read()[-6000:]

    def assert_eager(self, got):
        want = self.logits
        self.assertEqual(got.dtype, np.float32)
        self.assertEqual(got.shape, want.shape)
        diff = float(np.max(np.abs(got - want)))
        self.assertLessEqual(diff, TOLERANCE, f"max abs diff {diff}")

    def check_grpc_metadata_and_config(self):
        self.assertTrue(self.client.is_server_ready())
        self.assertTrue(self.client.is_model_ready("cnn"))
        model = self.client.get_model_metadata("cnn", as_json=True)
        self.assertEqual(model["name"], "cnn")
        self.assertEqual(model["inputs"], [{"name": "image", "datatype": "FP32",
                                            "shape": ["-1", "3", "32", "32"]}])
        self.assertEqual(model["outputs"], [{"name": "logits", "datatype": "FP32",
                                             "shape": ["-1", "10"]}])
        config = self.client.get_model_config("cnn", as_json=True)["config"]
        self.assertEqual(config["max_batch_size"], 1024)
        self.assertEqual(len(config["input"]), 1)
        self.assertEqual(config["input"][0]["name"], "image")
        self.assertEqual(config["input"][0]["data_type"], "TYPE_FP32")
        self.assertEqual(config["input"][0]["dims"], ["3", "32", "32"])
        self.assertEqual(len(config["output"]), 1)
        self.assertEqual(config["output"][0]["name"], "logits")
        self.assertEqual(config["output"][0]["data_type"], "TYPE_FP32")
        self.assertEqual(config["output"][0]["dims"], ["10"])

    def check_http_metadata_and_config(self):
        self.assertTrue(self.http.is_model_ready("cnn"))
        model = self.http.get_model_metadata("cnn")
        self.assertEqual(model["inputs"], [{"name": "image", "datatype": "FP32",
                                            "shape": [-1, 3, 32, 32]}])
        self.assertEqual(model["outputs"], [{"name": "logits", "datatype": "FP32",
                                             "shape": [-1, 10]}])
        config = self.http.get_model_config("cnn")
        self.assertEqual(config["max_batch_size"], 1024)
        self.assertEqual([(t["name"], t["data_type"], t["dims"]) for t in config["input"]],
                         [("image", "TYPE_FP32", [3, 32, 32])])
        self.assertEqual([(t["name"], t["data_type"], t["dims"]) for t in config["output"]],
                         [("logits", "TYPE_FP32", [10])])

    def check_grpc_rows(self):
        # No requested output: every declared one comes back.
        result = self.client.infer("cnn", [grpc_image(self.images)])
        self.assert_eager(result.as_numpy("logits"))
        result = self.client.infer("cnn", [grpc_image(self.images)],
                                   outputs=[grpcclient.InferRequestedOutput("logits")])
        self.assert_eager(result.as_numpy("logits"))

    def check_http_rows(self):
        for binary in (True, False):
            with self.subTest(binary=binary):
                tensor = httpclient.InferInput("image", list(self.images.shape), "FP32")
                tensor.set_data_from_numpy(self.images, binary_data=binary)
                result = self.http.infer(
                    "cnn", [tensor],
                    outputs=[httpclient.InferRequestedOutput("logits", binary_data=binary)])
                self.assert_eager(result.as_numpy("logits"))


class TritonClientsToAotiPackage(CnnDeployment, unittest.TestCase):
    model = "models/cnn.pt2"

    def test_expected_rows_are_the_declared_signature(self):
        self.assertEqual(self.images.shape, (21, 3, 32, 32))
        self.assertEqual(self.images.dtype, np.float32)
        self.assertEqual(self.logits.shape, (21, 10))

    def test_grpc_metadata_and_config_report_the_declared_signature(self):
        self.check_grpc_metadata_and_config()

    def test_http_metadata_and_config_report_the_declared_signature(self):
        self.check_http_metadata_and_config()

    def test_grpc_rows_equal_eager(self):
        self.check_grpc_rows()

    def test_http_rows_binary_and_json_equal_eager(self):
        self.check_http_rows()

    def test_one_row_per_request_in_parallel_is_exact(self):
        def one(i):
            result = self.client.infer("cnn", [grpc_image(self.images[i:i + 1])])
            return result.as_numpy("logits")

        with ThreadPoolExecutor(max_workers=8) as pool:
            rows = list(pool.map(one, range(len(self.images))))
        self.assert_eager(np.concatenate(rows))

    def test_wrong_datatype_or_shape_is_invalid_argument_naming_the_input(self):
        cases = [
            ("FP64", self.images[:1].astype(np.float64), "expected dtype float32, got float64"),
            ("FP32", np.zeros((1, 3, 31, 32), dtype=np.float32), "got [3, 31, 32]"),
        ]
        for datatype, values, needle in cases:
            with self.subTest(transport="grpc", datatype=datatype, shape=values.shape):
                with self.assertRaises(InferenceServerException) as caught:
                    self.client.infer("cnn", [grpc_image(values, datatype)])
                self.assertEqual(caught.exception.status(), "StatusCode.INVALID_ARGUMENT",
                                 caught.exception.message() + self.server_log())
                self.assertIn("input 'image'", caught.exception.message())
                self.assertIn(needle, caught.exception.message())
            with self.subTest(transport="http", datatype=datatype, shape=values.shape):
                tensor = httpclient.InferInput("image", list(values.shape), datatype)
                tensor.set_data_from_numpy(values, binary_data=True)
                with self.assertRaises(InferenceServerException) as caught:
                    self.http.infer("cnn", [tensor])
                self.assertEqual(caught.exception.status(), "400",
                                 caught.exception.message() + self.server_log())
                self.assertIn("input 'image'", caught.exception.message())
                self.assertIn(needle, caught.exception.message())
        # Still serving, exactly.
        self.assert_eager(self.client.infer("cnn", [grpc_image(self.images)]).as_numpy("logits"))

    def test_perf_analyzer_reads_the_signature_and_serves(self):
        # No shape or data flags: perf_analyzer takes [3, 32, 32] FP32 from
        # ModelMetadata/ModelConfig and makes its own data.
        result = subprocess.run(
            [PERF_ANALYZER, "-m", "cnn", "-i", "grpc", "-u", f"127.0.0.1:{self.gantry.port}",
             "--measurement-interval", "500", "--concurrency-range", "2", *ANY_STABILITY],
            capture_output=True, text=True, timeout=180)
        self.assertEqual(result.returncode, 0,
                         result.stdout + result.stderr + self.server_log())
        throughput = re.search(r"Throughput: ([0-9.]+) infer/sec", result.stdout)
        self.assertIsNotNone(throughput, result.stdout)
        self.assertGreater(float(throughput.group(1)), 0)
        self.assertTrue(self.client.is_server_ready())
        self.assert_eager(self.client.infer("cnn", [grpc_image(self.images)]).as_numpy("logits"))


class TritonClientsToTorchScript(CnnDeployment, unittest.TestCase):
    model = "models/cnn.pt"

    def test_metadata_and_rows_equal_eager(self):
        self.check_grpc_metadata_and_config()
        self.check_grpc_rows()
        self.check_http_rows()


if __name__ == "__main__":
    unittest.main()
