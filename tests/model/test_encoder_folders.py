"""SentenceEncoder against sentence-transformers on model folders made here:
small random BERTs (fixed seeds) saved by sentence-transformers itself, one
per pooling setup (cls, max, mean_sqrt_len_tokens, weightedmean, lasttoken,
two modes concatenated, the legacy config format, prompts left out of the
pooling), each served by a real `gantry deployment` and posted to over HTTP;
and truncation (right, left, refused with 413) through the same processes.
Every embedding must be within cosine 0.9999 (and 1e-4 per component) of
what SentenceTransformer.encode returns for the same text and prompt.

Needs the parity venv (torch, transformers, sentence-transformers) and
GANTRY_CLI; run by tests/model/run_encoder_folders.sh."""
import json
import os
import sys
import tempfile
import threading
import unittest
import urllib.request

import numpy as np
import torch
from sentence_transformers import SentenceTransformer, models
from transformers import BertConfig, BertModel, BertTokenizerFast

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
from gantry_process import GantryProcess, http_get, http_post  # noqa: E402

WORDS = ["the", "cat", "sat", "on", "mat", "query", "passage", "how", "many", "people",
         "live", "in", "berlin", "what", "is", "a", "dog", "runs", "fast", "slow"]
TEXTS = ["the cat sat on the mat", "how many people live in berlin", "a dog",
         "what is the fastest dog", "Berlin, the CAT!", "x", "runs runs runs runs runs runs",
         "the slow dog is on a mat in berlin and the cat runs fast",
         # Past max_seq_length (24 tokens, from the tokenizer's config): cut there.
         "the cat sat on the mat " * 6]
PROMPTS = {"query": "query: ", "passage": "passage: "}


def make_base(folder):
    """A random 2-layer BERT with a WordPiece vocabulary, in Hugging Face layout."""
    torch.manual_seed(7)
    vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ":", ",", "!"] + WORDS
             + [chr(c) for c in range(ord("a"), ord("z") + 1)]
             + ["##" + chr(c) for c in range(ord("a"), ord("z") + 1)])
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    model = BertModel(config).eval()
    # Larger weights than the initialiser's, so that pooling modes differ clearly.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.3)
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    BertTokenizerFast(os.path.join(folder, "vocab.txt"), do_lower_case=True).save_pretrained(folder)


def make_st(base, out, pooling_mode, normalize, prompts=None, default_prompt=None,
            include_prompt=True, max_seq_length=24):
    transformer = models.Transformer(base, max_seq_length=max_seq_length)
    pooling = models.Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling_mode,
                             include_prompt=include_prompt)
    modules = [transformer, pooling] + ([models.Normalize()] if normalize else [])
    model = SentenceTransformer(modules=modules, prompts=prompts or {},
                                default_prompt_name=default_prompt, device="cpu")
    model.save(out)
    return SentenceTransformer(out, device="cpu")


def to_legacy(folder):
    """Rewrites a folder as sentence-transformers 2.x wrote it: module types
    under sentence_transformers.models and pooling_mode_* flags."""
    path = os.path.join(folder, "modules.json")
    with open(path) as f:
        modules = json.load(f)
    for m in modules:
        m["type"] = "sentence_transformers.models." + m["type"].rsplit(".", 1)[1]
    with open(path, "w") as f:
        json.dump(modules, f)
    pooling_path = os.path.join(folder, "1_Pooling", "config.json")
    with open(pooling_path) as f:
        pooling = json.load(f)
    modes = pooling.pop("pooling_mode")
    modes = [modes] if isinstance(modes, str) else modes
    legacy = {"word_embedding_dimension": pooling.pop("embedding_dimension")}
    for flag, mode in [("pooling_mode_cls_token", "cls"), ("pooling_mode_mean_tokens", "mean"),
                       ("pooling_mode_max_tokens", "max"),
                       ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
                       ("pooling_mode_weightedmean_tokens", "weightedmean"),
                       ("pooling_mode_lasttoken", "lasttoken")]:
        legacy[flag] = mode in modes
    with open(pooling_path, "w") as f:
        json.dump(legacy, f)


def serve(tmp, name, folder, extra="", dtype="float32"):
    path = os.path.join(tmp, name + ".yml")
    with open(path, "w") as f:
        f.write(f"jtype: Deployment\nwith:\n  name: {name}\n  uses: SentenceEncoder\n"
                f"  uses_with:\n    model_path: {folder}\n    dtype: {dtype}\n{extra}")
    return GantryProcess(["deployment", "--uses", path, "--port", "0"], tmp, name, http=True)


def cpu_has_amx_bfloat16():
    """What the kernel reports: AMX tiles with bfloat16 that programs may use."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return {"amx_bf16", "amx_tile"} <= set(line.split(":", 1)[1].split())
    return False


def worker_counter(targets_file, name, endpoint):
    """`name`{endpoint=...} summed over the worker targets of a
    monitoring_targets_file, read from each replica's /metrics."""
    with open(targets_file) as f:
        targets = json.load(f)
    total = 0.0
    for group in targets:
        if group["labels"].get("gantry_role") != "worker":
            continue
        for target in group["targets"]:
            with urllib.request.urlopen(f"http://{target}/metrics", timeout=30) as reply:
                for line in reply.read().decode().splitlines():
                    if line.startswith(name + "{") and f'endpoint="{endpoint}"' in line:
                        total += float(line.rsplit(" ", 1)[1])
    return total


class PoolingParity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.base = os.path.join(cls.tmp.name, "base")
        make_base(cls.base)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, name, reference, prompt_names=(None,), legacy=False, extra=""):
        folder = os.path.join(self.tmp.name, name)
        if legacy:
            to_legacy(folder)
        gantry = serve(self.tmp.name, name, folder, extra)
        try:
            for prompt_name in prompt_names:
                want = reference.encode(TEXTS, prompt_name=prompt_name, convert_to_numpy=True)
                body = {"data": [{"text": t} for t in TEXTS]}
                if prompt_name is not None:
                    body["parameters"] = {"prompt_name": prompt_name}
                status, reply = http_post(gantry.http_port, "/encode", body)
                self.assertEqual(status, 200, reply)
                got = np.array([d["embedding"] for d in reply["data"]], dtype=np.float32)
                self.assertEqual(got.shape, want.shape, name)
                cosine = (got * want).sum(1) / (np.linalg.norm(got, axis=1)
                                                * np.linalg.norm(want, axis=1))
                where = f"{name}, prompt {prompt_name}"
                self.assertGreaterEqual(cosine.min(), 0.9999, f"{where}: {cosine}")
                np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4, err_msg=where)
            return gantry
        except BaseException:
            gantry.stop()
            raise

    def post_each_at_once(self, gantry, texts):
        """Posts each text to /encode as a request of its own, all at once;
        the (status, reply) of each, in order."""
        replies = [None] * len(texts)

        def post(i):
            replies[i] = http_post(gantry.http_port, "/encode", {"data": [{"text": texts[i]}]})

        threads = [threading.Thread(target=post, args=(i,)) for i in range(len(texts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
            self.assertFalse(thread.is_alive(), "a post did not come back in 60 s")
        return replies

    def test_each_pooling_mode(self):
        for mode, normalize in [("cls", True), ("max", False), ("mean_sqrt_len_tokens", False),
                                ("weightedmean", True), ("lasttoken", True),
                                (("mean", "max"), False)]:
            name = mode if isinstance(mode, str) else "_".join(mode)
            with self.subTest(mode=name):
                reference = make_st(self.base, os.path.join(self.tmp.name, name), mode, normalize)
                self.check(name, reference).stop()

    def test_a_token_budget_splits_passes_and_refuses_what_cannot_fit(self):
        # 30 tokens a pass: the 24-token inputs go one at a time, short ones
        # several together; the vectors do not change.
        reference = make_st(self.base, os.path.join(self.tmp.name, "budget"), "mean", True)
        gantry = self.check("budget", reference, extra="    max_batch_tokens: 30\n")
        try:
            info = http_get(gantry.http_port, "/info")
            self.assertEqual(info["max_batch_tokens"], 30)
            self.assertEqual(info["model_type"], {"embedding": {"pooling": "mean"}})
        finally:
            gantry.stop()
        # Under max_seq_length: an input over it is refused with the numbers
        # (TEI's 413), the server keeps serving.
        gantry = serve(self.tmp.name, "budget10", os.path.join(self.tmp.name, "budget"),
                       "    max_batch_tokens: 10\n")
        try:
            status, error = http_post(gantry.http_port, "/embed",
                                      {"inputs": ["a dog", TEXTS[0] + " " + TEXTS[1]]})
            self.assertEqual(status, 413, error)
            self.assertIn("document 1", error["error"])
            self.assertIn("over max_batch_tokens 10", error["error"])
            status, reply = http_post(gantry.http_port, "/embed", {"inputs": ["a dog", "x"]})
            self.assertEqual(status, 200, reply)
            np.testing.assert_allclose(reply, reference.encode(["a dog", "x"]), atol=1e-4)
        finally:
            gantry.stop()

    def test_batched_requests_share_passes_within_the_token_budget(self):
        # Dynamic batching with max_batch_tokens: concurrent requests are merged
        # only while their padded tokens fit (the worker's batcher counts them
        # before queueing); every caller still gets its own, exact vectors.
        folder = os.path.join(self.tmp.name, "batched")
        reference = make_st(self.base, folder, "mean", True)
        gantry = serve(self.tmp.name, "batched", folder,
                       "    max_batch_tokens: 40\n"
                       "  uses_dynamic_batching:\n"
                       "    /encode: {preferred_batch_size: 64, timeout: 200}\n")
        try:
            texts = TEXTS * 4
            want = reference.encode(texts, convert_to_numpy=True)
            for i, (status, reply) in enumerate(self.post_each_at_once(gantry, texts)):
                self.assertEqual(status, 200, reply)
                got = np.array(reply["data"][0]["embedding"], dtype=np.float32)
                np.testing.assert_allclose(got, want[i], atol=1e-4, rtol=1e-4,
                                           err_msg=texts[i])
        finally:
            gantry.stop()

    def test_bfloat16_on_amx_merges_requests_by_default(self):
        # Without any batching key: in bfloat16 on a CPU with AMX, requests
        # that wait while a pass runs share the next one, up to 256 documents
        # a pass, held to 32 rows' tokens; float32 there, and every dtype
        # elsewhere, runs each request on its own, 32 documents a pass.
        folder = os.path.join(self.tmp.name, "amx")
        reference = make_st(self.base, folder, "mean", True)
        amx = cpu_has_amx_bfloat16()
        texts = TEXTS * 6
        want = reference.encode(texts, convert_to_numpy=True)
        for dtype in ("bfloat16", "float32"):
            with self.subTest(dtype=dtype, amx=amx):
                targets = os.path.join(self.tmp.name, f"amx-{dtype}-targets.json")
                gantry = serve(self.tmp.name, f"amx-{dtype}", folder,
                               "  monitoring: true\n  port_monitoring: 0\n"
                               f"  monitoring_targets_file: {targets}\n", dtype=dtype)
                try:
                    merged = amx and dtype == "bfloat16"
                    info = http_get(gantry.http_port, "/info")
                    self.assertEqual(info["max_batch_requests"], 256 if merged else 32)
                    self.assertEqual(info["max_batch_tokens"], 32 * info["max_input_length"])
                    for i, (status, reply) in enumerate(self.post_each_at_once(gantry, texts)):
                        self.assertEqual(status, 200, reply)
                        got = np.array(reply["data"][0]["embedding"], dtype=np.float32)
                        cosine = got @ want[i] / (np.linalg.norm(got) * np.linalg.norm(want[i]))
                        self.assertGreaterEqual(cosine, 0.999 if dtype == "bfloat16" else 0.9999,
                                                texts[i])
                    docs = worker_counter(targets, "gantry_inference_count_total", "/encode")
                    calls = worker_counter(targets, "gantry_inference_exec_count_total",
                                           "/encode")
                    print(f"{dtype}, AMX {amx}: {len(texts)} concurrent requests, "
                          f"{docs:g} documents in {calls:g} handler calls", flush=True)
                    self.assertEqual(docs, len(texts))
                    if merged:
                        self.assertLess(calls, len(texts))
                    else:
                        self.assertEqual(calls, len(texts))
                finally:
                    gantry.stop()

    def test_legacy_folder_layout(self):
        # An older sentence-transformers folder: flags, not a mode name.
        reference = make_st(self.base, os.path.join(self.tmp.name, "legacy"), ("cls", "mean"),
                            True)
        self.check("legacy", reference, legacy=True).stop()

    def test_prompts_like_e5_and_bge(self):
        # CLS pooling and normalisation (bge) with named prompts and a default
        # (e5's "query: " / "passage: ").
        reference = make_st(self.base, os.path.join(self.tmp.name, "prompts"), "cls", True,
                            prompts=PROMPTS, default_prompt="query")
        gantry = self.check("prompts", reference, prompt_names=(None, "query", "passage"))
        try:
            # The prompt given as text matches the name that holds it.
            status, by_text = http_post(gantry.http_port, "/encode", {
                "data": [{"text": TEXTS[0]}], "parameters": {"prompt": "passage: "}})
            self.assertEqual(status, 200, by_text)
            want = reference.encode([TEXTS[0]], prompt_name="passage")
            np.testing.assert_allclose(by_text["data"][0]["embedding"], want[0], atol=1e-4)
            # A prompt the model does not have is an error naming it and the
            # known ones; the server keeps serving.
            status, error = http_post(gantry.http_port, "/encode", {
                "data": [{"text": "a"}], "parameters": {"prompt_name": "classification"}})
            self.assertGreaterEqual(status, 400, error)
            text = json.dumps(error)
            self.assertIn("classification", text)
            self.assertIn("passage, query", text)
            status, again = http_post(gantry.http_port, "/encode", {"data": [{"text": "a"}]})
            self.assertEqual(status, 200, again)
            # TEI's /tokenize with a prompt: the tokens of prompt + text, with
            # the fast tokenizer's ids and offsets (bytes; ASCII here).
            for prompt_name in ("query", "passage"):
                status, tokens = http_post(gantry.http_port, "/tokenize", {
                    "inputs": TEXTS[4], "prompt_name": prompt_name})
                self.assertEqual(status, 200, tokens)
                encoding = reference.tokenizer(PROMPTS[prompt_name] + TEXTS[4],
                                               return_offsets_mapping=True)
                self.assertEqual([t["id"] for t in tokens[0]], encoding["input_ids"])
                self.assertEqual([(t["start"], t["stop"]) for t in tokens[0][1:-1]],
                                 [tuple(o) for o in encoding["offset_mapping"][1:-1]])
        finally:
            gantry.stop()

    def test_prompt_left_out_of_the_pooling(self):
        # include_prompt false (INSTRUCTOR-style): the prompt steers the
        # encoder but its tokens do not count in the mean.
        reference = make_st(self.base, os.path.join(self.tmp.name, "no_prompt_pool"), "mean",
                            True, prompts=PROMPTS, include_prompt=False)
        self.check("no_prompt_pool", reference, prompt_names=(None, "query")).stop()

    def test_a_folder_we_cannot_serve_exactly_is_refused_at_start(self):
        folder = os.path.join(self.tmp.name, "dense")
        make_st(self.base, folder, "mean", False)
        with open(os.path.join(folder, "modules.json")) as f:
            modules = json.load(f)
        modules.append({"idx": 2, "name": "2", "path": "2_Dense",
                        "type": "sentence_transformers.models.Dense"})
        with open(os.path.join(folder, "modules.json"), "w") as f:
            json.dump(modules, f)
        with self.assertRaises(RuntimeError) as caught:
            serve(self.tmp.name, "dense", folder)
        message = str(caught.exception)
        self.assertIn("modules.json", message)
        self.assertIn("sentence_transformers.models.Dense", message)


class Truncation(unittest.TestCase):
    """Inputs over max_seq_length (24 tokens here): cut on the right by
    default, on the left when asked, refused naming the document and its
    token count when truncation is off (per request, or `auto_truncate:
    false` for the server)."""

    # One token per word: 30 words are 32 tokens with [CLS] and [SEP].
    LONG = " ".join(WORDS + WORDS[:10])
    KEPT = 22  # words that fit in 24 tokens

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        base = os.path.join(cls.tmp.name, "base")
        make_base(base)
        cls.folder = os.path.join(cls.tmp.name, "mean")
        cls.reference = make_st(base, cls.folder, "mean", True)
        cls.strict = serve(cls.tmp.name, "strict", cls.folder, "    auto_truncate: false\n")
        cls.default = serve(cls.tmp.name, "default", cls.folder)
        # Replies of at most 256 KiB: 2,048 embeddings of 32 float32 values.
        cls.capped = serve(cls.tmp.name, "capped", cls.folder,
                           f"  max_message_bytes: {cls.CAP}\n  models: {{tiny: /encode}}\n")

    CAP = 256 * 1024

    @classmethod
    def tearDownClass(cls):
        cls.strict.stop()
        cls.default.stop()
        cls.capped.stop()
        cls.tmp.cleanup()

    def encode(self, port, texts, **parameters):
        body = {"data": [{"text": t} for t in texts]}
        if parameters:
            body["parameters"] = parameters
        return http_post(port, "/encode", body)

    def test_cut_on_the_right_by_default_as_sentence_transformers_does(self):
        status, reply = self.encode(self.default.http_port, [self.LONG])
        self.assertEqual(status, 200, reply)
        want = self.reference.encode([self.LONG])[0]
        np.testing.assert_allclose(reply["data"][0]["embedding"], want, atol=1e-4)
        words = self.LONG.split()
        _, first = self.encode(self.default.http_port, [" ".join(words[:self.KEPT])])
        np.testing.assert_allclose(reply["data"][0]["embedding"],
                                   first["data"][0]["embedding"], atol=1e-5)

    def test_cut_on_the_left_when_asked(self):
        words = self.LONG.split()
        for direction in ("left", "Left"):
            status, reply = self.encode(self.default.http_port, [self.LONG],
                                        truncation_direction=direction)
            self.assertEqual(status, 200, reply)
            want = self.reference.encode([" ".join(words[-self.KEPT:])])[0]
            np.testing.assert_allclose(reply["data"][0]["embedding"], want, atol=1e-4)

    def test_too_long_without_truncation_is_413_naming_the_document(self):
        for port, parameters in [(self.strict.http_port, {}),
                                 (self.default.http_port, {"truncate": False})]:
            status, reply = self.encode(port, ["a dog", self.LONG], **parameters)
            self.assertEqual(status, 413, reply)
            self.assertIn("document 1", reply["detail"])
            self.assertIn("has 32 tokens, over the model's limit of 24", reply["detail"])
        # Over OpenAI's route too, as its error object.
        model = http_get(self.strict.http_port, "/v1/models")["data"][0]["id"]
        status, reply = http_post(self.strict.http_port, "/v1/embeddings",
                                  {"model": model, "input": ["a dog", self.LONG]})
        self.assertEqual(status, 413, reply)
        self.assertIn("32 tokens", reply["error"]["message"])
        # A request may still ask for the cut, and short inputs pass.
        status, reply = self.encode(self.strict.http_port, [self.LONG], truncate=True)
        self.assertEqual(status, 200, reply)
        status, reply = self.encode(self.strict.http_port, ["a dog"])
        self.assertEqual(status, 200, reply)

    def test_bad_truncation_parameters_name_themselves(self):
        for parameters, want in [({"truncate": "yes"}, "parameter truncate"),
                                 ({"truncation_direction": "up"}, "truncation_direction"),
                                 ({"return_token_counts": "x"}, "return_token_counts")]:
            status, reply = self.encode(self.default.http_port, ["a"], **parameters)
            self.assertEqual(status, 400, reply)
            self.assertIn(want, reply["detail"])
        # A document whose text is not text is the client's mistake, named,
        # not the embedding of an empty text.
        for doc, want in [({"text": 5}, "document 1 (id d1) has a field 'text' that is not text"),
                          ({"text": ["a"]}, "document 1 (id d1) has a field 'text'")]:
            body = {"data": [{"id": "d0", "text": "a"}, dict(doc, id="d1")]}
            status, reply = http_post(self.default.http_port, "/encode", body)
            self.assertEqual(status, 400, reply)
            self.assertIn(want, reply["detail"])
        # One without text comes back as it came, as from Jina's encoders: a
        # Flow's id-only documents (/delete) pass through. Its neighbours are
        # encoded as they would be alone.
        _, alone = self.encode(self.default.http_port, ["a", "b c"])
        body = {"data": [{"id": "d0", "text": "a"}, {"id": "d1", "tags": {"k": 1}},
                         {"id": "d2", "text": "b c"}],
                "parameters": {"return_token_counts": True}}
        status, reply = http_post(self.default.http_port, "/encode", body)
        self.assertEqual(status, 200, reply)
        self.assertEqual([d["id"] for d in reply["data"]], ["d0", "d1", "d2"])
        self.assertIsNone(reply["data"][1].get("embedding"))
        self.assertEqual(reply["data"][1]["tags"], {"k": 1})
        for got, want in zip([reply["data"][0], reply["data"][2]], alone["data"]):
            np.testing.assert_allclose(got["embedding"], want["embedding"], atol=1e-5)
            self.assertIn("num_tokens", got["tags"])
        status, reply = http_post(self.default.http_port, "/encode",
                                  {"data": [{"id": "d1"}, {"id": "d2"}]})
        self.assertEqual(status, 200, reply)
        self.assertEqual([d.get("embedding") for d in reply["data"]], [None, None])
        status, reply = self.encode(self.default.http_port, [""])
        self.assertEqual(status, 200, reply)
        status, reply = self.encode(self.default.http_port, ["a"])
        self.assertEqual(status, 200, reply)

    def test_a_reply_that_could_only_be_over_the_cap_is_refused_before_any_work(self):
        # 4,000 documents of one letter fit the cap as a request (about 150
        # KB), but their 4,000 x 32 float32 values alone are 512 KB.
        status, reply = self.encode(self.capped.http_port, ["a"] * 4000)
        self.assertEqual(status, 400, reply)
        self.assertIn("4000 documents make a reply of at least 516000 bytes", reply["detail"])
        self.assertIn(f"over the {self.CAP}-byte message cap (max_message_bytes)",
                      reply["detail"])
        self.assertIn("send fewer documents a request (at most 2032", reply["detail"])
        # TEI's route: its validation error. 2,048 inputs (its batch limit)
        # of one letter: 264,192 bytes at least.
        status, reply = http_post(self.capped.http_port, "/embed", {"inputs": ["a"] * 2048})
        self.assertEqual(status, 422, reply)
        self.assertEqual(reply["error_type"], "Validation")
        self.assertIn("2048 documents make a reply of at least 264192 bytes", reply["error"])
        # OpenAI's: invalid_request_error.
        status, reply = http_post(self.capped.http_port, "/v1/embeddings",
                                  {"model": "tiny", "input": ["a"] * 2048})
        self.assertEqual(status, 400, reply)
        self.assertIn("over the 262144-byte message cap", reply["error"]["message"])
        # A request whose reply fits is served, after the refusal too.
        status, reply = self.encode(self.capped.http_port, ["a"] * 800)
        self.assertEqual(status, 200, reply)
        self.assertEqual(len(reply["data"]), 800)
        self.assertEqual(len(reply["data"][0]["embedding"]), 32)


if __name__ == "__main__":
    unittest.main(verbosity=2)
