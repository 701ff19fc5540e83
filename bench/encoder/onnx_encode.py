#!/usr/bin/env python3
"""Sides g-j of bench/encoder/run.sh: all-MiniLM-L6-v2 in ONNX Runtime or
OpenVINO, float32 or int8, the way their own documentation serves a BERT
encoder on a CPU, with Hugging Face `tokenizers` in front and mean pooling
plus L2 normalisation after (what sentence-transformers does), N copies of
the tutorial sentence in batches of 32, in one process (no server).

  g  ONNX Runtime, float32: torch.onnx.export of the same safetensors the
     other sides load, then ONNX Runtime's BERT graph optimiser
     (onnxruntime.transformers.optimizer: attention, LayerNorm, GELU fused)
  h  ONNX Runtime, int8: that optimised graph through quantize_dynamic
     (int8 weights per output channel, activations quantised at run time)
  i  OpenVINO, float32: the exported ONNX file compiled for the CPU
  j  OpenVINO, int8: NNCF's int8 weight compression of that model, which
     OpenVINO's CPU plugin runs with activations quantised at run time
  m  OpenVINO, bfloat16: side i's model with INFERENCE_PRECISION_HINT=bf16,
     what OpenVINO runs by default on a CPU with AMX or AVX512-BF16 (on a
     CPU with neither it runs float32)

Every session gets `--threads` intra-op threads (run.sh passes its own
setting) and one inter-op thread. The exported and quantised files are made
once per model, torch and runtime version into --cache. Prints a line in
encode_10k's format:
  docs_per_s=<v> n=<N> seconds=<encode time> startup_seconds=<v> ...
With --check FILE.json (scripts/parity_expectations.py's output), instead
prints how far each string's embedding is from sentence-transformers'
float32 one (min and mean cosine) and how often each string's 10 nearest
neighbours among the others stay the same: what the precision costs.

  onnx_encode.py --side g|h|i|j|m --model-path DIR --cache DIR [--docs N]
                 [--threads T] [--check FILE.json]
"""
import argparse
import hashlib
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SENTENCE = "Using a GPU allows you to significantly speed up encoding."
SIDES = {"g": ("onnxruntime", "float32"), "h": ("onnxruntime", "int8"),
         "i": ("openvino", "float32"), "j": ("openvino", "int8"),
         "m": ("openvino", "bfloat16")}


def export_onnx(model_dir, path):
    """last_hidden_state from input_ids and attention_mask, batch and
    sequence dynamic, float32, by torch's own exporter."""
    import torch
    import transformers

    model = transformers.AutoModel.from_pretrained(model_dir, torch_dtype=torch.float32).eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    # Two tensors: the same one twice would be exported as one input.
    ids = torch.randint(1000, 2000, (2, 16), dtype=torch.int64)
    mask = torch.ones(2, 16, dtype=torch.int64)
    batch, seq = torch.export.Dim("batch", max=1024), torch.export.Dim("seq", max=512)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    torch.onnx.export(LastHiddenState(model), (ids, mask), path, dynamo=True,
                      input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"], dynamic_shapes=shapes,
                      opset_version=18, external_data=False)


def prepare(side, model_dir, cache):
    """The side's model file, made when missing."""
    import onnxruntime
    import openvino
    import torch

    runtime, precision = SIDES[side]
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
        weights = hashlib.sha256(f.read()).hexdigest()[:12]
    with open(os.path.abspath(__file__), "rb") as f:
        script = hashlib.sha256(f.read()).hexdigest()[:12]
    stem = os.path.join(cache, f"minilm-{weights}-{script}-torch{torch.__version__}")
    os.makedirs(cache, exist_ok=True)

    def once(path, make):
        if not os.path.exists(path):
            tmp = path + f".tmp{os.getpid()}"
            make(tmp)
            os.replace(tmp, path)
        return path

    exported = once(stem + ".onnx", lambda out: export_onnx(model_dir, out))
    if runtime == "openvino":
        if precision in ("float32", "bfloat16"):
            return exported
        def compress(out_dir):
            import nncf
            core = openvino.Core()
            compressed = nncf.compress_weights(core.read_model(exported),
                                               mode=nncf.CompressWeightsMode.INT8_ASYM)
            os.makedirs(out_dir)
            openvino.save_model(compressed, os.path.join(out_dir, "model.xml"))

        ov = once(f"{stem}-ov{openvino.__version__.split('-')[0]}-int8", compress)
        return os.path.join(ov, "model.xml")

    ort = f"{stem}-ort{onnxruntime.__version__}"

    def optimize(out):
        from onnxruntime.transformers import optimizer
        config = json.load(open(os.path.join(model_dir, "config.json")))
        optimized = optimizer.optimize_model(exported, model_type="bert",
                                             num_heads=config["num_attention_heads"],
                                             hidden_size=config["hidden_size"])
        optimized.save_model_to_file(out)

    optimized = once(ort + "-opt.onnx", optimize)
    if precision == "float32":
        return optimized

    def quantize(out):
        from onnxruntime.quantization import QuantType, quantize_dynamic
        quantize_dynamic(optimized, out, per_channel=True, weight_type=QuantType.QInt8)

    return once(ort + "-opt-int8.onnx", quantize)


def make_runner(side, path, threads):
    """A function from (input_ids, attention_mask) int64 arrays to the last
    hidden state, float32 [B, L, 384]."""
    runtime, _ = SIDES[side]
    if runtime == "onnxruntime":
        import onnxruntime
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        return lambda ids, mask: session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    import openvino
    core = openvino.Core()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads}
    if SIDES[side][1] == "float32":
        # float32 means float32: OpenVINO would otherwise run bfloat16 on a
        # CPU that has it. Its int8 side keeps that default.
        config["INFERENCE_PRECISION_HINT"] = "f32"
    elif SIDES[side][1] == "bfloat16":
        config["INFERENCE_PRECISION_HINT"] = "bf16"
    compiled = core.compile_model(core.read_model(path), "CPU", config)
    request = compiled.create_infer_request()

    def run(ids, mask):
        request.infer({"input_ids": ids, "attention_mask": mask})
        return request.get_output_tensor(0).data.copy()
    return run


def embed(tokenizer, run, texts, np):
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    hidden = run(ids, mask)
    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def top10_overlap(got, want, np):
    """Each string a query over the others: the share of its 10 nearest
    neighbours under `want` that are also nearest under `got`, averaged."""
    def nearest(e):
        similarity = e @ e.T
        np.fill_diagonal(similarity, -np.inf)
        return np.argsort(-similarity, axis=1, kind="stable")[:, :10]
    return float(np.mean([len(set(a) & set(b)) / 10
                          for a, b in zip(nearest(got), nearest(want))]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", required=True, choices=sorted(SIDES))
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--docs", type=int, default=10000)
    parser.add_argument("--threads", type=int, default=0, help="0: one per core")
    parser.add_argument("--check", help="parity expectations JSON: print cosines instead")
    args = parser.parse_args()

    import numpy as np
    from tokenizers import Tokenizer

    start = time.perf_counter()
    path = prepare(args.side, args.model_path, args.cache)
    prepare_seconds = time.perf_counter() - start
    threads = args.threads or os.cpu_count()
    start = time.perf_counter()
    tokenizer = Tokenizer.from_file(os.path.join(args.model_path, "tokenizer.json"))
    # sentence-transformers' max_seq_length for this model.
    with open(os.path.join(args.model_path, "sentence_bert_config.json")) as f:
        max_length = json.load(f).get("max_seq_length", 256)
    tokenizer.enable_truncation(max_length)
    tokenizer.enable_padding()
    run = make_runner(args.side, path, threads)
    embed(tokenizer, run, [SENTENCE] * 32, np)  # warm, as a server's would be
    startup = time.perf_counter() - start

    runtime, precision = SIDES[args.side]
    if args.check:
        cases = json.load(open(args.check))["cases"]
        got, want = [], []
        for i in range(0, len(cases), 32):
            batch = cases[i:i + 32]
            got.append(embed(tokenizer, run, [c["text"] for c in batch], np))
            want.append(np.array([c["embedding"] for c in batch], dtype=np.float32))
        got, want = np.concatenate(got), np.concatenate(want)
        want /= np.linalg.norm(want, axis=1, keepdims=True)
        cosines = (got * want).sum(axis=1)
        print(f"{runtime} {precision}: {len(cosines)} strings, cosine to sentence-transformers "
              f"float32: min {cosines.min():.5f} mean {cosines.mean():.5f}; "
              f"top-10 overlap {top10_overlap(got, want, np):.4f}")
        return 0

    texts = [SENTENCE] * args.docs
    start = time.perf_counter()
    done = 0
    for i in range(0, args.docs, 32):
        done += embed(tokenizer, run, texts[i:i + 32], np).shape[0]
    seconds = time.perf_counter() - start
    if done != args.docs:
        print(f"onnx_encode: {done} embeddings for {args.docs} documents", file=sys.stderr)
        return 1
    print(f"docs_per_s={args.docs / seconds:.1f} n={args.docs} seconds={seconds:.3f} "
          f"startup_seconds={startup:.3f} prepare_seconds={prepare_seconds:.1f} "
          f"runtime={runtime} precision={precision} threads={threads}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
