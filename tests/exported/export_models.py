#!/usr/bin/env python3
"""Writes the test fixtures for Gantry's exported-model executor: small
PyTorch models as AOTInductor packages (.pt2, torch.export + AOTInductor)
and TorchScript (.pt), with their inputs and eager float32 outputs.
Run in the project venv (scripts/setup.sh + scripts/parity_setup.sh);
tests/exported/exported_models.sh runs it once per cache key. Gantry itself
never runs Python.

  export_models.py --out DIR [--models mlp,cnn,ragged,minilm,broken]
                   [--minilm MODEL_DIR] [--device cpu|cuda]

For each model NAME it writes into DIR:
  NAME.pt2                   torch.export.export with a dynamic batch dim
                             (minilm: and a dynamic sequence dim), then
                             torch._inductor.aoti_compile_and_package; on
                             --device it was compiled for
  NAME.pt                    TorchScript, always CPU (the loader moves it)
  NAME.expected.safetensors  float32/int64 CPU tensors: the test inputs as
                             "input.<input name>", the eager float32 outputs as
                             "output.<output name>" (minilm also has
                             output.pooled, output.cls, output.sentence_embedding)
  NAME.json                  the declared signature, see write_json below:
                             {"inputs": [{"name", "dtype", "shape"}], "outputs":
                             [...], "documents": N, ...}; "shape" is the shape
                             of one document, without the batch dim, -1 where
                             dynamic; the order of "inputs" is the positional
                             order of the model's arguments.
"ragged" sums its input over a dynamic axis (seq [-1, 8] -> total [8]), so
that zero padding leaves its answers exact: the padding tests compute the
expected sums themselves (no expected file). "doubler.pt" (TorchScript only)
doubles seq [-1], so that its output keeps the length it was padded to. And for "broken": truncated.pt2, corrupt.pt2, cuda_claimed.pt2, throws.pt,
throws.expected.safetensors and broken.json (see export_broken).

Dynamic shapes: Dim("batch", min=1, max=1024) and Dim("seq", min=1, max=512)
are accepted by torch.export (2.15) as long as the *example* inputs have at
least 2 rows / 2 tokens (an example size of 0 or 1 is specialised and the
export fails). Inductor still generates code under the assumption size >= 2
(the 0/1 specialisation): the package's own input checks, which run only when
the process has AOTI_RUNTIME_CHECK_INPUTS=1 in its environment, would reject a
batch of 1 ("dim value is too small at 0, expected it to be >= 2, but got:
1"). We compile with aot_inductor.check_lowerbound=False, so those checks
accept [1, 1024], and verify here that a batch of 1 (and, for minilm, one
token) equals eager. Without AOTI_RUNTIME_CHECK_INPUTS the package checks
nothing: 1025 rows run (the upper bound is not enforced at run time), so a
caller must split batches itself.
"""
import argparse
import hashlib
import json
import os
import random
import struct
import sys
import time
import zipfile
import zlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

kSeed = 20261126
kMaxBatch = 1024
kMaxSeq = 512
kMinilmMaxLength = 256  # sentence_bert_config.json's max_seq_length
# The export's own error bound (.pt2 vs eager on the same device and input).
# minilm: over the real tokens (attention_mask 1); the hidden states of padding
# positions are meaningless and differ more (about 1.5e-4 on CPU).
kAotiTolerance = {"mlp": 1e-5, "cnn": 1e-5, "ragged": 1e-5, "minilm": 1e-4}
# (Older torch has no such option: then the defaults.)
kInductorConfigs = ({"aot_inductor.check_lowerbound": False}
                    if hasattr(torch._inductor.config.aot_inductor, "check_lowerbound") else {})


def log(msg):
    print(f"export_models: {msg}", file=sys.stderr, flush=True)


def spec(name, dtype, shape):
    return {"name": name, "dtype": dtype, "shape": list(shape)}


def max_abs_diff(a, b):
    a = a.detach().float().cpu()
    b = b.detach().float().cpu()
    if a.shape != b.shape:
        raise RuntimeError(f"shape mismatch {tuple(a.shape)} vs {tuple(b.shape)}")
    return 0.0 if a.numel() == 0 else (a - b).abs().max().item()


def to_cpu_contiguous(tensors):
    return {k: v.detach().cpu().contiguous() for k, v in tensors.items()}


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def compile_pt2(module, example, dynamic_shapes, path):
    """torch.export + AOTInductor; returns (export_s, compile_s)."""
    # Each stage logged first: a crash inside torch names its stage.
    log(f"{os.path.basename(path)}: torch.export")
    t0 = time.monotonic()
    ep = torch.export.export(module, example, dynamic_shapes=dynamic_shapes)
    t1 = time.monotonic()
    log(f"{os.path.basename(path)}: AOTInductor compile")
    torch._inductor.aoti_compile_and_package(
        ep, package_path=path, inductor_configs=kInductorConfigs)
    t2 = time.monotonic()
    return t1 - t0, t2 - t1


def run_pt2(path, args):
    log(f"{os.path.basename(path)}: load and run")
    compiled = torch._inductor.aoti_load_package(path)
    with torch.inference_mode():
        out = compiled(*args)
    if isinstance(out, (list, tuple)):
        if len(out) != 1:
            raise RuntimeError(f"{path}: expected one output, got {len(out)}")
        out = out[0]
    return out


# --- mlp and cnn -------------------------------------------------------------

class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 64)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(64, 4)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
        self.classifier = torch.nn.Linear(16, 10)

    def forward(self, image):
        return self.classifier(self.features(image))


kSmallModels = {
    # name: (class, input name, per-document input shape, output name, output dim, rows)
    "mlp": (Mlp, "x", (16,), "logits", 4, 37),
    "cnn": (Cnn, "image", (3, 32, 32), "logits", 10, 21),
}


def export_small(name, out_dir, device):
    cls, in_name, in_shape, out_name, out_dim, rows = kSmallModels[name]
    torch.manual_seed(kSeed)
    model = cls().float().eval()
    x = torch.randn(rows, *in_shape, dtype=torch.float32)
    with torch.inference_mode():
        y = model(x)  # the CPU eager reference
    timings = {}

    t0 = time.monotonic()
    scripted = torch.jit.script(model)
    scripted.save(os.path.join(out_dir, f"{name}.pt"))
    timings["torchscript_s"] = time.monotonic() - t0
    with torch.inference_mode():
        ts_diff = max_abs_diff(torch.jit.load(os.path.join(out_dir, f"{name}.pt"))(x), y)

    dev_model = model.to(device)
    dev_x = x.to(device)
    batch = torch.export.Dim("batch", min=1, max=kMaxBatch)
    pt2 = os.path.join(out_dir, f"{name}.pt2")
    timings["export_s"], timings["aoti_compile_s"] = compile_pt2(
        dev_model, (dev_x,), {in_name: {0: batch}}, pt2)

    with torch.inference_mode():
        y_dev = dev_model(dev_x)
        y_dev1 = dev_model(dev_x[:1])
    aoti_diff = max_abs_diff(run_pt2(pt2, (dev_x,)), y_dev)
    aoti_diff_1 = max_abs_diff(run_pt2(pt2, (dev_x[:1],)), y_dev1)
    check_tolerance(name, max(aoti_diff, aoti_diff_1))

    save_file(to_cpu_contiguous({f"input.{in_name}": x, f"output.{out_name}": y}),
              os.path.join(out_dir, f"{name}.expected.safetensors"))
    info = {
        "inputs": [spec(in_name, "float32", in_shape)],
        "outputs": [spec(out_name, "float32", (out_dim,))],
        "documents": rows,
        "aoti_max_abs_diff": aoti_diff,
        "aoti_batch1_max_abs_diff": aoti_diff_1,
        "torchscript_max_abs_diff": ts_diff,
        "dynamic_dims": {"batch": [1, kMaxBatch]},
    }
    info.update(common_info(name, device, timings))
    if device != "cpu":
        info["device_eager_vs_cpu_eager_max_abs_diff"] = max_abs_diff(y_dev, y)
    write_json(os.path.join(out_dir, f"{name}.json"), info)
    return timings


class Ragged(torch.nn.Module):
    def forward(self, seq):
        return seq.sum(dim=1)


class Doubler(torch.nn.Module):
    def forward(self, seq):
        return seq * 2


def export_ragged(out_dir, device):
    """seq [B, S, 8] -> total [B, 8], B and S dynamic."""
    model = Ragged().eval()
    x = torch.randn(3, 5, 8, dtype=torch.float32)
    timings = {}
    t0 = time.monotonic()
    torch.jit.script(model).save(os.path.join(out_dir, "ragged.pt"))
    # Its output keeps the padded length: what a request gets back shows
    # whether another request's documents padded its own.
    torch.jit.script(Doubler().eval()).save(os.path.join(out_dir, "doubler.pt"))
    timings["torchscript_s"] = time.monotonic() - t0
    batch = torch.export.Dim("batch", min=1, max=kMaxBatch)
    seq = torch.export.Dim("seq", min=1, max=kMaxSeq)
    pt2 = os.path.join(out_dir, "ragged.pt2")
    timings["export_s"], timings["aoti_compile_s"] = compile_pt2(
        model.to(device), (x.to(device),), {"seq": {0: batch, 1: seq}}, pt2)
    for rows, length in ((1, 1), (4, 7)):
        probe = torch.randn(rows, length, 8, device=device)
        check_tolerance("ragged", max_abs_diff(run_pt2(pt2, (probe,)), probe.sum(dim=1)))
    info = {"inputs": [spec("seq", "float32", (-1, 8))],
            "outputs": [spec("total", "float32", (8,))],
            "dynamic_dims": {"batch": [1, kMaxBatch], "seq": [1, kMaxSeq]}}
    info.update(common_info("ragged", device, timings))
    write_json(os.path.join(out_dir, "ragged.json"), info)
    return timings


def check_tolerance(name, diff):
    if not diff <= kAotiTolerance[name]:
        raise RuntimeError(f"{name}: .pt2 differs from eager by {diff} "
                           f"(> {kAotiTolerance[name]})")


def common_info(name, device, timings):
    return {
        "pt2": f"{name}.pt2",
        "torchscript": f"{name}.pt",
        "expected": f"{name}.expected.safetensors",
        "pt2_device": device,
        "torch_version": torch.__version__,
        "seed": kSeed,
        "seconds": {k: round(v, 2) for k, v in timings.items()},
    }


# --- minilm ------------------------------------------------------------------

kLongA = (
    "The history of natural language processing generally started in the 1950s, although "
    "work can be found from earlier periods. In 1950, Alan Turing published an article "
    "titled Computing Machinery and Intelligence which proposed what is now called the "
    "Turing test as a criterion of intelligence. The Georgetown experiment in 1954 involved "
    "fully automatic translation of more than sixty Russian sentences into English. The "
    "authors claimed that within three or five years, machine translation would be a solved "
    "problem. However, real progress was much slower, and after the ALPAC report in 1966, "
    "which found that ten years of research had failed to fulfill the expectations, funding "
    "for machine translation was dramatically reduced. Little further research in machine "
    "translation was conducted until the late 1980s, when the first statistical machine "
    "translation systems were developed.")
kLongB = " ".join(
    f"Sentence number {i} talks about serving models as microservices with gRPC, batching "
    f"requests and measuring latency percentiles carefully." for i in range(1, 16))
kLongC = ("Überprüfung der Straßenverkehrsordnung: Fußgänger müssen Zebrastreifen benutzen, "
          "während Radfahrer auf dem Radweg fahren. ") * 6
kLongD = "東京都は日本の首都であり、世界有数の大都市です。人口は約千四百万人で、多くの企業の本社があります。" * 4

kMinilmTexts = [
    "This is an example sentence",
    "Each sentence is converted",
    "",
    "a",
    "Hello, world!",
    "HeLLo WoRLD, MiXeD cAsE",
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is riding a horse.",
    "Two dogs are playing in the snow.",
    "How do I serve a PyTorch model over gRPC?",
    "Gantry serves libtorch models as microservices.",
    "Café crème à la française",
    "naïve résumé, déjà vu, façade",
    "¿Dónde está la biblioteca? ¡Muy bien!",
    "Größenordnung der Straße ist übergroß",
    "Ελληνικά: καλημέρα κόσμε",
    "Привет, как дела?",
    "你好，世界",
    "机器学习是人工智能的一个分支。",
    "東京は日本の首都です。",
    "안녕하세요, 만나서 반갑습니다",
    "mixed 日本語 and English text",
    "I love pizza 🍕 and coffee ☕",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\nin text",
    "Numbers: 3.14159, 2,718, 1e-9 and 42%",
    "https://example.com/path?query=value&other=1",
    "def f(x): return x * 2  # code",
    "user@example.com wrote: <b>bold</b> & [brackets]",
    "unaffable antidisestablishmentarianism",
    "repeat repeat repeat repeat repeat repeat repeat repeat",
    "!!! ??? ... ---",
    "The cat sat on the mat.",
    "The cat did not sit on the mat.",
    kLongA,
    kLongB,
    kLongC,
    kLongD,
    "Short one after the long ones.",
]


class LastHiddenState(torch.nn.Module):
    """forward(input_ids, attention_mask) -> last_hidden_state [B, S, 384].

    The [B, S] mask is handed to BertModel as a boolean [B, 1, 1, S] mask,
    which transformers (5.x) uses as it is. Given the 2D mask, its mask
    builder makes tensors with the example's device written in (arange(...,
    device=cpu), mask.to(cpu)), which torch.jit.trace records as constants: a
    TorchScript file that fails once moved to CUDA. The outputs are bitwise
    equal to those of the 2D mask (checked on CPU)."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.to(torch.bool)[:, None, None, :]
        return self.bert(input_ids=input_ids, attention_mask=mask).last_hidden_state


def devices_in_torchscript(module):
    """The devices a TorchScript module's code names (torch.device("..."))."""
    found = set()
    for _, sub in module.named_modules():
        code = getattr(sub, "code", "") or ""
        for part in code.split('torch.device("')[1:]:
            found.add(part.split('"')[0])
    return found


def mean_pool(hidden, mask):
    m = mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * m).sum(dim=1)
    return summed / m.sum(dim=1).clamp(min=1e-9)


def l2(x):
    return torch.nn.functional.normalize(x, p=2, dim=1)


def export_minilm(out_dir, device, model_dir):
    import transformers
    import sentence_transformers

    if len(set(kMinilmTexts)) != len(kMinilmTexts):
        raise RuntimeError("minilm texts are not distinct")
    timings = {}
    torch.manual_seed(kSeed)
    t0 = time.monotonic()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    bert = transformers.AutoModel.from_pretrained(model_dir, dtype=torch.float32)
    model = LastHiddenState(bert).float().eval()
    enc = tokenizer(kMinilmTexts, padding="longest", truncation=True,
                    max_length=kMinilmMaxLength, return_tensors="pt")
    ids = enc["input_ids"].to(torch.int64)
    mask = enc["attention_mask"].to(torch.int64)
    with torch.inference_mode():
        hidden = model(ids, mask)  # the CPU eager reference
    pooled = l2(mean_pool(hidden, mask))
    cls = l2(hidden[:, 0])
    st = sentence_transformers.SentenceTransformer(model_dir, device="cpu")
    sentence = torch.from_numpy(
        st.encode(kMinilmTexts, normalize_embeddings=True, convert_to_numpy=True)).float()
    timings["load_and_eager_s"] = time.monotonic() - t0

    # TorchScript by tracing (BertModel is not scriptable). The example has
    # padding (attention_mask zeros) and more than one row and token, so the
    # trace records the general masked path and no size is baked in.
    t0 = time.monotonic()
    example = tokenizer(["Tracing example.", "A longer tracing example sentence, with padding."],
                        padding="longest", return_tensors="pt")
    ex_ids = example["input_ids"].to(torch.int64)
    ex_mask = example["attention_mask"].to(torch.int64)
    traced = torch.jit.trace(model, (ex_ids, ex_mask))
    traced.save(os.path.join(out_dir, "minilm.pt"))
    timings["torchscript_s"] = time.monotonic() - t0
    ts_devices = sorted(devices_in_torchscript(traced))
    if ts_devices:
        log(f"minilm: warning: minilm.pt has devices written in: {ts_devices}")
    with torch.inference_mode():
        two_d_diff = max_abs_diff(
            bert(input_ids=ids, attention_mask=mask).last_hidden_state, hidden)
    loaded = torch.jit.load(os.path.join(out_dir, "minilm.pt"))
    with torch.inference_mode():
        ts_diff = max_abs_diff(loaded(ids, mask), hidden)
        ts_diff_1 = max_abs_diff(loaded(ids[:1, :1], mask[:1, :1]), model(ids[:1, :1], mask[:1, :1]))

    dev_model = model.to(device)
    d_ids, d_mask = ex_ids.to(device), ex_mask.to(device)
    batch = torch.export.Dim("batch", min=1, max=kMaxBatch)
    seq = torch.export.Dim("seq", min=1, max=kMaxSeq)
    pt2 = os.path.join(out_dir, "minilm.pt2")
    timings["export_s"], timings["aoti_compile_s"] = compile_pt2(
        dev_model, (d_ids, d_mask),
        {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}, pt2)

    d_ids, d_mask = ids.to(device), mask.to(device)
    with torch.inference_mode():
        hidden_dev = dev_model(d_ids, d_mask)
        hidden_dev1 = dev_model(d_ids[:1, :1], d_mask[:1, :1])
    aoti_hidden = run_pt2(pt2, (d_ids, d_mask))
    aoti_diff = max_abs_diff(aoti_hidden, hidden_dev)
    real = d_mask.bool()
    aoti_diff_real = max_abs_diff(aoti_hidden[real], hidden_dev[real])
    aoti_diff_1 = max_abs_diff(run_pt2(pt2, (d_ids[:1, :1], d_mask[:1, :1])), hidden_dev1)
    aoti_pooled = l2(mean_pool(aoti_hidden.float().cpu(), mask))
    check_tolerance("minilm", max(aoti_diff_real, aoti_diff_1))

    save_file(to_cpu_contiguous({
        "input.input_ids": ids,
        "input.attention_mask": mask,
        "output.token_embeddings": hidden,
        "output.pooled": pooled,
        "output.cls": cls,
        "output.sentence_embedding": sentence,
    }), os.path.join(out_dir, "minilm.expected.safetensors"))
    info = {
        "inputs": [spec("input_ids", "int64", (-1,)), spec("attention_mask", "int64", (-1,))],
        "outputs": [spec("token_embeddings", "float32", (-1, 384))],
        "documents": len(kMinilmTexts),
        "aoti_max_abs_diff": aoti_diff,
        "aoti_max_abs_diff_real_tokens": aoti_diff_real,
        "aoti_batch1_max_abs_diff": aoti_diff_1,
        "aoti_pooled_vs_pooled_max_abs_diff": max_abs_diff(aoti_pooled, pooled),
        "torchscript_max_abs_diff": ts_diff,
        "torchscript_batch1_max_abs_diff": ts_diff_1,
        "torchscript_devices_in_code": ts_devices,
        "wrapper_vs_bert_2d_mask_max_abs_diff": two_d_diff,
        "compare_token_embeddings": "where attention_mask is 1 (padding positions are "
                                    "meaningless; aoti_max_abs_diff includes them)",
        "pooled_vs_sentence_embedding_max_abs_diff": max_abs_diff(pooled, sentence),
        "dynamic_dims": {"batch": [1, kMaxBatch], "seq": [1, kMaxSeq]},
        "texts": kMinilmTexts,
        "tokenizer": {"max_length": kMinilmMaxLength, "truncation": True,
                      "padding": "longest", "sequence_length": int(ids.shape[1]),
                      "tokens_per_text": [int(n) for n in mask.sum(dim=1)]},
        "derived_outputs": [
            {"name": "pooled", "dtype": "float32", "shape": [384],
             "how": "eager token_embeddings, mean over attention_mask, L2-normalised"},
            {"name": "cls", "dtype": "float32", "shape": [384],
             "how": "eager token_embeddings of the first ([CLS]) token, L2-normalised"},
            {"name": "sentence_embedding", "dtype": "float32", "shape": [384],
             "how": "sentence_transformers.SentenceTransformer(model, device='cpu')"
                    ".encode(texts, normalize_embeddings=True)"},
        ],
        "model_safetensors_sha256": sha256_file(os.path.join(model_dir, "model.safetensors")),
    }
    info.update(common_info("minilm", device, timings))
    if device != "cpu":
        info["device_eager_vs_cpu_eager_max_abs_diff"] = max_abs_diff(hidden_dev, hidden)
    write_json(os.path.join(out_dir, "minilm.json"), info)
    return timings


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- broken ------------------------------------------------------------------
#
# What a .pt2 is (torch 2.15, seen in mlp.pt2): a zip archive, every entry
# stored uncompressed, all under one top folder named after the package file's
# stem (mlp.pt2 -> "mlp/"):
#   mlp/data/aotinductor/model/<hash>.wrapper.cpp            generated host C++
#   mlp/data/aotinductor/model/<hash>.kernel.cpp             generated kernels
#   mlp/data/aotinductor/model/<hash>.wrapper_metadata.json
#   mlp/data/aotinductor/model/<hash>.kernel_metadata.json
#   mlp/data/aotinductor/model/<hash>.wrapper.so             what the loader dlopens
#   mlp/archive_format ("pt2"), mlp/archive_version ("0"), mlp/.data/version
#   ("6\n"), mlp/byteorder ("little"), mlp/.data/serialization_id
# ("model" is the model name inside the package; small models keep their
# weights inside the .so, so there is no separate weights entry.) Both
# *_metadata.json files hold the same flat JSON object of strings:
#   {"AOTI_DEVICE_KEY": "cpu", "AOTI_PLATFORM": "linux", "AOTI_MACHINE":
#    "x86_64", "AOTI_CPU_ISA": "AVX2", "AOTI_COMPUTE_CAPABILITY": ""}
# AOTIModelPackageLoader (C++, and Python's aoti_load_package through it) reads
# AOTI_DEVICE_KEY to choose the device; with "cuda" in a process without CUDA
# it refuses: "Cannot load AOTInductor package for device 'cuda' because CUDA
# is not available in this process. ...". cuda_claimed.pt2 is mlp.pt2 with
# that value rewritten, standing in for a package built on a GPU machine. Its
# .so is still CPU code: never load it where CUDA is available. torch writes
# the entries 64-byte aligned (padding in each local header's extra field) with
# data descriptors (flag bit 3); the rewritten JSON is padded with spaces to
# its old length and patched in place, so every byte but the value and the
# CRC-32s stays where it was.

def rewrite_device_key(src, dst, new_key):
    """Copies src to dst with AOTI_DEVICE_KEY = new_key in every
    data/aotinductor/**/*_metadata.json, patching the bytes in place (same
    length, CRC-32s fixed) so that every entry keeps its offset and its
    alignment; returns [(entry, old key)]."""
    buf = bytearray(open(src, "rb").read())
    found = []
    with zipfile.ZipFile(src) as z:
        for info in z.infolist():
            if not ("/data/aotinductor/" in info.filename
                    and info.filename.endswith("_metadata.json")):
                continue
            data = z.read(info)
            meta = json.loads(data)
            if "AOTI_DEVICE_KEY" not in meta:
                continue
            found.append((info.filename, meta["AOTI_DEVICE_KEY"]))
            meta["AOTI_DEVICE_KEY"] = new_key
            new = json.dumps(meta).encode()
            if len(new) > len(data):
                new = json.dumps(meta, separators=(",", ":")).encode()
            if len(new) > len(data):
                raise RuntimeError(f"{src}: {info.filename}: no room for the new key")
            patch_stored_entry(buf, z, info, new + b" " * (len(data) - len(new)))
    if not found:
        raise RuntimeError(f"{src}: no AOTI_DEVICE_KEY in data/aotinductor/*_metadata.json")
    with open(dst, "wb") as f:
        f.write(buf)
    with zipfile.ZipFile(dst) as z:
        bad = z.testzip()
        if bad is not None:
            raise RuntimeError(f"{dst}: CRC mismatch in {bad}")
    return found


def patch_stored_entry(buf, z, info, data):
    """Overwrites the stored (uncompressed) zip entry `info` of the archive in
    buf with data of the same length, and its CRC-32 in the local header, the
    data descriptor (torch's writer sets flag bit 3) and the central directory."""
    if info.compress_type != zipfile.ZIP_STORED or len(data) != info.file_size:
        raise RuntimeError(f"{info.filename}: not a stored entry of {len(data)} bytes")
    old, new = info.CRC, zlib.crc32(data)
    h = info.header_offset
    name_len, extra_len = struct.unpack_from("<HH", buf, h + 26)
    start = h + 30 + name_len + extra_len
    buf[start:start + len(data)] = data
    if struct.unpack_from("<I", buf, h + 14)[0] == old:
        struct.pack_into("<I", buf, h + 14, new)
    if info.flag_bits & 0x08:
        end = start + info.compress_size
        at = end + 4 if buf[end:end + 4] == b"PK\x07\x08" else end
        if struct.unpack_from("<I", buf, at)[0] != old:
            raise RuntimeError(f"{info.filename}: no data descriptor CRC where expected")
        struct.pack_into("<I", buf, at, new)
    at = z.start_dir
    name = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")
    while buf[at:at + 4] == b"PK\x01\x02":
        n, m, k = struct.unpack_from("<HHH", buf, at + 28)
        if bytes(buf[at + 46:at + 46 + n]) == name:
            struct.pack_into("<I", buf, at + 16, new)
            return
        at += 46 + n + m + k
    raise RuntimeError(f"{info.filename}: not found in the central directory")


class Throws(torch.nn.Module):
    """x [B, 16] -> y = x * 2; raises when any value of x is below -100."""

    def forward(self, x):
        if bool((x < -100.0).any()):
            raise RuntimeError("negative input: a value of x is below -100")
        return x * 2.0


def load_error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - we record whatever the loader says
        return f"{type(e).__name__}: {e}".strip()
    return None


def export_broken(out_dir, device):
    timings = {}
    mlp = os.path.join(out_dir, "mlp.pt2")
    if not os.path.exists(mlp):
        log("broken: mlp.pt2 is not in --out, exporting mlp first")
        export_small("mlp", out_dir, device)
    t0 = time.monotonic()
    data = open(mlp, "rb").read()
    truncated = os.path.join(out_dir, "truncated.pt2")
    with open(truncated, "wb") as f:
        f.write(data[: len(data) // 2])
    corrupt = os.path.join(out_dir, "corrupt.pt2")
    with open(corrupt, "wb") as f:
        f.write(random.Random(kSeed).randbytes(len(data)))
    cuda_claimed = os.path.join(out_dir, "cuda_claimed.pt2")
    found = rewrite_device_key(mlp, cuda_claimed, "cuda")

    torch.manual_seed(kSeed)
    throws = torch.jit.script(Throws().eval())
    throws_path = os.path.join(out_dir, "throws.pt")
    throws.save(throws_path)
    x = torch.randn(5, 16)
    bad = x.clone()
    bad[3, 7] = -1000.0
    with torch.inference_mode():
        y = throws(x)
    throws_error = load_error(lambda: torch.jit.load(throws_path)(bad))
    if throws_error is None or "negative input" not in throws_error:
        raise RuntimeError(f"throws.pt did not raise as it should: {throws_error}")
    save_file({"input.x": x, "output.y": y, "bad.input.x": bad},
              os.path.join(out_dir, "throws.expected.safetensors"))
    timings["broken_s"] = time.monotonic() - t0

    # What Python's loader (the same C++ AOTIModelPackageLoader) says, for
    # reference; the CPU-code cuda_claimed.pt2 is only tried without CUDA.
    errors = {
        "truncated.pt2": load_error(lambda: torch._inductor.aoti_load_package(truncated)),
        "corrupt.pt2": load_error(lambda: torch._inductor.aoti_load_package(corrupt)),
    }
    if not torch.cuda.is_available():
        errors["cuda_claimed.pt2"] = load_error(
            lambda: torch._inductor.aoti_load_package(cuda_claimed))

    info = {
        "files": {
            "truncated.pt2": {
                "kind": "pt2", "from": "mlp.pt2", "bytes": len(data) // 2,
                "defect": "the first half of mlp.pt2's bytes (no zip central directory)",
                "expect": "loading fails",
                "python_load_error": errors["truncated.pt2"],
            },
            "corrupt.pt2": {
                "kind": "pt2", "from": None, "bytes": len(data),
                "defect": "random bytes, as many as mlp.pt2 has",
                "expect": "loading fails",
                "python_load_error": errors["corrupt.pt2"],
            },
            "cuda_claimed.pt2": {
                "kind": "pt2", "from": "mlp.pt2", "bytes": os.path.getsize(cuda_claimed),
                "defect": "AOTI_DEVICE_KEY rewritten to \"cuda\" in " +
                          ", ".join(n for n, _ in found) + " (the .so is still " +
                          device + " code)",
                "original_device_key": found[0][1],
                "device_key": "cuda",
                "expect": "loading fails where CUDA is not available; do not load it "
                          "where CUDA is available",
                "python_load_error": errors.get("cuda_claimed.pt2"),
            },
            "throws.pt": {
                "kind": "torchscript", "bytes": os.path.getsize(throws_path),
                "inputs": [spec("x", "float32", (16,))],
                "outputs": [spec("y", "float32", (16,))],
                "behaviour": "y = x * 2; raises RuntimeError when any value of x is < -100",
                "error_contains": "negative input",
                "expected": "throws.expected.safetensors",
                "expected_tensors": {
                    "input.x": "5 rows that run", "output.y": "their y",
                    "bad.input.x": "the same 5 rows with x[3][7] = -1000: raises"},
                "python_error": throws_error,
            },
        },
        "pt2_device": device,
        "torch_version": torch.__version__,
        "seconds": {k: round(v, 2) for k, v in timings.items()},
    }
    write_json(os.path.join(out_dir, "broken.json"), info)
    return timings


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="mlp,cnn,ragged,minilm,broken")
    parser.add_argument("--minilm", default=os.environ.get("GANTRY_MODEL_PATH"))
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    known = ["mlp", "cnn", "ragged", "minilm", "broken"]
    for m in models:
        if m not in known:
            parser.error(f"unknown model {m!r} (known: {', '.join(known)})")
    if "minilm" in models and not (args.minilm and os.path.isfile(
            os.path.join(args.minilm, "model.safetensors"))):
        parser.error(f"--minilm: no model.safetensors in {args.minilm!r}")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            parser.error("--device cuda: CUDA is not available")
        # float32 references: no TF32 in eager or in the compiled kernels.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)

    total0 = time.monotonic()
    # Dependencies first: broken reuses mlp.pt2.
    for name in sorted(models, key=known.index):
        t0 = time.monotonic()
        if name in kSmallModels:
            timings = export_small(name, args.out, args.device)
        elif name == "ragged":
            timings = export_ragged(args.out, args.device)
        elif name == "minilm":
            timings = export_minilm(args.out, args.device, args.minilm)
        else:
            timings = export_broken(args.out, args.device)
        detail = ", ".join(f"{k[:-2]} {v:.1f}" for k, v in timings.items())
        log(f"{name}: {time.monotonic() - t0:.1f} s ({detail})")
    log(f"all: {time.monotonic() - total0:.1f} s into {args.out}")


if __name__ == "__main__":
    main()
