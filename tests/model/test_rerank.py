"""CrossEncoder against sentence-transformers' CrossEncoder, through real
processes: small random BertForSequenceClassification folders (fixed seeds,
saved by transformers) served by `gantry deployment` and posted to over
HTTP, on Jina's /rerank route and on text-embeddings-inference's POST
/rerank. Scores must be within 1e-5 of CrossEncoder.predict's and rank the
texts in the same order; pairs over the model's limit are cut as Hugging
Face's "longest_first" cuts them, or refused with 413 naming the document.
TEI's replies and errors are checked against its published schemas
(tests/interop/fixtures/tei_openapi_rerank.json), and the server keeps
serving after each bad request.

Needs the parity venv (torch, transformers, sentence-transformers,
jsonschema) and GANTRY_CLI; run by tests/model/run_encoder_folders.sh rerank."""
import json
import os
import sys
import tempfile
import unittest

import numpy as np
import torch
from sentence_transformers import CrossEncoder
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "interop"))
from gantry_process import GantryProcess, http_get, http_post as post  # noqa: E402
from tei_schema import check_schema as check_against, load_spec  # noqa: E402

WORDS = ["the", "cat", "sat", "on", "mat", "query", "passage", "how", "many", "people",
         "live", "in", "berlin", "what", "is", "a", "dog", "runs", "fast", "slow"]
QUERY = "how many people live in berlin"
TEXTS = ["berlin is a city", "the cat sat on the mat", "a dog runs fast",
         "how many people live in the city", "x", "Berlin, the CAT!",
         # Past max_seq_length (24 tokens with the query): cut, longest first.
         "the slow dog is on a mat in berlin and the cat runs fast " * 3]
MAX_LENGTH = 24

SPEC = load_spec("rerank")
INFO_SPEC = load_spec("tokenize_info")


def check_schema(body, name, spec=SPEC):
    check_against(body, name, spec)


def make_cross_encoder(folder, num_labels, seed):
    """A random 2-layer BERT with a classification head and a WordPiece
    vocabulary, in Hugging Face layout, as cross-encoders on the hub are."""
    torch.manual_seed(seed)
    vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ":", ",", "!"] + WORDS
             + [chr(c) for c in range(ord("a"), ord("z") + 1)]
             + ["##" + chr(c) for c in range(ord("a"), ord("z") + 1)])
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                        num_labels=num_labels, architectures=["BertForSequenceClassification"])
    model = BertForSequenceClassification(config).eval()
    # Larger weights than the initialiser's, so that scores spread out.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    BertTokenizerFast(os.path.join(folder, "vocab.txt"), do_lower_case=True,
                      model_max_length=MAX_LENGTH).save_pretrained(folder)
    return CrossEncoder(folder, device="cpu")


def serve(tmp, name, folder, extra=""):
    path = os.path.join(tmp, name + ".yml")
    with open(path, "w") as f:
        f.write(f"jtype: Deployment\nwith:\n  name: {name}\n  uses: CrossEncoder\n"
                f"  models: {{{name}: /rerank}}\n"
                f"  uses_with:\n    model_path: {folder}\n    dtype: float32\n{extra}")
    return GantryProcess(["deployment", "--uses", path, "--port", "0"], tmp, name, http=True)


class RerankParity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.folder = os.path.join(cls.tmp.name, "ce1")
        cls.reference = make_cross_encoder(cls.folder, 1, seed=11)
        cls.gantry = serve(cls.tmp.name, "reranker", cls.folder)
        cls.port = cls.gantry.http_port

    @classmethod
    def tearDownClass(cls):
        cls.gantry.stop()
        cls.tmp.cleanup()

    def assert_still_serving(self):
        status, reply = post(self.port, "/rerank", {"query": "a", "texts": ["b"]})
        self.assertEqual(status, 200, reply)

    def test_jina_route_scores_match_sentence_transformers(self):
        want = self.reference.predict([(QUERY, t) for t in TEXTS])
        raw = self.reference.predict([(QUERY, t) for t in TEXTS],
                                     activation_fn=torch.nn.Identity())
        for parameters, expected in [({"query": QUERY}, want),
                                     ({"query": QUERY, "raw_scores": True}, raw)]:
            status, reply = post(self.port, "/rerank", {
                "data": [{"text": t} for t in TEXTS], "parameters": parameters})
            self.assertEqual(status, 200, reply)
            got = np.array([d["tags"]["relevance_score"] for d in reply["data"]])
            np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=str(parameters))
            embedding = np.array([d["embedding"] for d in reply["data"]])
            self.assertEqual(embedding.shape, (len(TEXTS), 1))
            np.testing.assert_allclose(embedding[:, 0], expected, atol=1e-5)

    def test_tei_route_ranks_as_sentence_transformers(self):
        want = self.reference.predict([(QUERY, t) for t in TEXTS])
        status, reply = post(self.port, "/rerank",
                             {"query": QUERY, "texts": TEXTS, "return_text": True})
        self.assertEqual(status, 200, reply)
        check_schema(reply, "RerankResponse")
        self.assertEqual([r["index"] for r in reply],
                         list(np.argsort(-want, kind="stable")))
        for rank in reply:
            self.assertAlmostEqual(rank["score"], float(want[rank["index"]]), delta=1e-5)
            self.assertEqual(rank["text"], TEXTS[rank["index"]])
        # sentence-transformers' own rank() agrees on the order.
        ranked = self.reference.rank(QUERY, TEXTS)
        self.assertEqual([r["index"] for r in reply], [r["corpus_id"] for r in ranked])
        # Raw scores: logits, and no text unless asked.
        status, raw = post(self.port, "/rerank",
                           {"query": QUERY, "texts": TEXTS, "raw_scores": True})
        self.assertEqual(status, 200, raw)
        check_schema(raw, "RerankResponse")
        logits = self.reference.predict([(QUERY, t) for t in TEXTS],
                                        activation_fn=torch.nn.Identity())
        for rank in raw:
            self.assertNotIn("text", rank)
            self.assertAlmostEqual(rank["score"], float(logits[rank["index"]]), delta=1e-5)

    def test_info_says_reranker_with_the_labels(self):
        info = http_get(self.port, "/info")
        check_schema(info, "Info", INFO_SPEC)
        self.assertEqual(info["model_id"], "reranker")
        self.assertEqual(info["model_type"],
                         {"reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}})
        self.assertEqual(info["model_dtype"], "float32")
        self.assertEqual(info["max_input_length"], MAX_LENGTH)

    def test_tokenize_lists_the_tokens_of_each_text(self):
        status, reply = post(self.port, "/tokenize", {"inputs": TEXTS[:3]})
        self.assertEqual(status, 200, reply)
        check_schema(reply, "TokenizeResponse", INFO_SPEC)
        for text, tokens in zip(TEXTS[:3], reply):
            encoding = self.reference.tokenizer(text, return_offsets_mapping=True)
            self.assertEqual([t["id"] for t in tokens], encoding["input_ids"])
            self.assertEqual([(t["start"], t["stop"]) for t in tokens if not t["special"]],
                             [tuple(o) for o in encoding["offset_mapping"][1:-1]])

    def test_pairs_over_the_limit_are_cut_longest_first_or_refused(self):
        long_query = " ".join(WORDS)  # 20 tokens
        long_text = " ".join(reversed(WORDS))
        pairs = [(long_query, long_text), (long_query, "a dog"), ("a dog", long_text)]
        for direction in (None, "Left"):
            for query, text in pairs:
                body = {"query": query, "texts": [text]}
                if direction:
                    body["truncation_direction"] = direction
                status, reply = post(self.port, "/rerank", body)
                self.assertEqual(status, 200, reply)
                if direction is None:
                    want = self.reference.predict([(query, text)])[0]
                else:
                    tokenizer = self.reference.tokenizer
                    tokenizer.truncation_side = "left"
                    try:
                        want = self.reference.predict([(query, text)])[0]
                    finally:
                        tokenizer.truncation_side = "right"
                self.assertAlmostEqual(reply[0]["score"], float(want), delta=1e-5,
                                       msg=f"{direction}: {query!r} / {text!r}")
        # Truncation off: 413 naming the document and its token count (the
        # first pair, 20 + 1 + 3 tokens, fits).
        status, error = post(self.port, "/rerank", {"query": long_query,
                                                    "texts": ["a", long_text],
                                                    "truncate": False})
        self.assertEqual(status, 413, error)
        check_schema(error, "ErrorResponse")
        self.assertIn("document 1", error["error"])
        self.assertIn("43 tokens with the query, over the model's limit of 24", error["error"])
        self.assert_still_serving()

    def test_bad_requests_are_tei_errors_and_the_server_keeps_serving(self):
        cases = [
            ({"query": "q", "texts": []}, 422, "cannot be empty"),
            ({"query": "q"}, 422, "\"texts\" is required"),
            ({"texts": ["a"]}, 422, "\"query\" is required"),
            ({"query": "q", "texts": [1, 2]}, 422, "texts[0]"),
            ({"query": "q", "texts": ["a"] * 10000}, 413, "batch size 10000"),
            ({"query": "q", "texts": ["a"], "raw_scores": "yes"}, 422, "raw_scores"),
            ({"query": "q", "texts": ["a"], "model": "other"}, 404, "'reranker'"),
            (["q", "a"], 422, "request body must be a JSON object"),
            ("q", 422, "request body must be a JSON object"),
        ]
        for body, status, want in cases:
            got, error = post(self.port, "/rerank", body)
            self.assertEqual(got, status, (body if len(json.dumps(body)) < 200 else want, error))
            check_schema(error, "ErrorResponse")
            self.assertIn(want, error["error"])
            self.assert_still_serving()
        # A 1 MB query is cut to the model's limit and scored, against 2,048
        # texts too; kept whole, it is refused naming its size.
        huge = "berlin " * 150000
        status, reply = post(self.port, "/rerank", {"query": huge, "texts": ["a", "b"]})
        self.assertEqual(status, 200, reply)
        status, reply = post(self.port, "/rerank", {"query": huge, "texts": ["a"] * 2048})
        self.assertEqual(status, 200, reply)
        self.assertEqual(len(reply), 2048)
        status, error = post(self.port, "/rerank",
                             {"query": huge, "texts": ["a"] * 2048, "truncate": False})
        self.assertEqual(status, 413, error)
        self.assertIn("document 0 has 150004 tokens with the query", error["error"])
        # Jina's route without a query names the parameter, and says what a
        # reranker does; a document without text is named.
        status, error = post(self.port, "/rerank", {"data": [{"text": "a"}]})
        self.assertEqual(status, 400, error)
        self.assertIn("parameter query", error["detail"])
        self.assertIn("it makes no embeddings", error["detail"])
        status, error = post(self.port, "/rerank", {"data": [{"text": "a"}, {"id": "x", "text": 5}],
                                                    "parameters": {"query": "q"}})
        self.assertEqual(status, 400, error)
        self.assertIn("document 1 (id x) has a field 'text' that is not text", error["detail"])
        # A document without text comes back as it came, unscored, as from
        # Jina's rerankers: a Flow's id-only documents pass through.
        status, reply = post(self.port, "/rerank",
                             {"data": [{"id": "a", "text": "a dog"}, {"id": "b"}],
                              "parameters": {"query": "q"}})
        self.assertEqual(status, 200, reply)
        self.assertIn("relevance_score", reply["data"][0]["tags"])
        self.assertEqual(reply["data"][1]["id"], "b")
        self.assertNotIn("relevance_score", reply["data"][1].get("tags") or {})
        self.assertIsNone(reply["data"][1].get("embedding"))
        status, reply = post(self.port, "/rerank",
                             {"data": [{"id": "b"}], "parameters": {"query": "q"}})
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["data"][0]["id"], "b")
        self.assert_still_serving()


class MultiLabelAndStart(unittest.TestCase):
    def test_three_labels_give_every_score_and_tei_rerank_refuses(self):
        with tempfile.TemporaryDirectory() as tmp:
            folder = os.path.join(tmp, "ce3")
            reference = make_cross_encoder(folder, 3, seed=5)
            gantry = serve(tmp, "classifier", folder)
            try:
                want = reference.predict([(QUERY, t) for t in TEXTS])  # Identity for 3 labels
                status, reply = post(gantry.http_port, "/rerank", {
                    "data": [{"text": t} for t in TEXTS], "parameters": {"query": QUERY}})
                self.assertEqual(status, 200, reply)
                got = np.array([d["embedding"] for d in reply["data"]])
                np.testing.assert_allclose(got, want, atol=1e-5)
                self.assertNotIn("relevance_score", reply["data"][0].get("tags") or {})
                status, error = post(gantry.http_port, "/rerank",
                                     {"query": QUERY, "texts": TEXTS})
                self.assertEqual(status, 424, error)
                self.assertIn("relevance_score", error["error"])
            finally:
                gantry.stop()

    def test_a_folder_that_is_not_a_cross_encoder_is_refused_at_start(self):
        with tempfile.TemporaryDirectory() as tmp:
            folder = os.path.join(tmp, "ce")
            make_cross_encoder(folder, 1, seed=3)
            path = os.path.join(folder, "config.json")
            with open(path) as f:
                config = json.load(f)
            config["sentence_transformers"] = {"activation_fn": "torch.nn.modules.activation.Tanh"}
            with open(path, "w") as f:
                json.dump(config, f)
            with self.assertRaises(RuntimeError) as caught:
                serve(tmp, "tanh", folder)
            self.assertIn("activation_fn", str(caught.exception))
            self.assertIn("Tanh", str(caught.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
