"""The machine's ceiling for the seed job: how many docs/s the model's own
matrix products allow on this CPU if everything else (tokenising, softmax,
LayerNorm, GELU, pooling, the framework) took no time at all.

It counts the multiply-adds of one document through the model (from the
model's config.json and the seed text's token count, via the model's own
tokenizer.json) and times the model's matrix products themselves: the six
linear layers of one encoder layer on a batch of 32 documents, with the same
torch, threads and dtype as the benchmark's sides, through both GEMM
libraries torch has on CPU (at::linear's MKL/OpenBLAS, and oneDNN, which
Gantry's SentenceEncoder uses, with plain and with prepacked weights), and
keeps the fastest. No side can beat the
ceiling; a target above it cannot be met by any framework on this machine.

    python ceiling.py --model-path DIR [--dtype float32|bfloat16] [--batch 32]

Prints `key=value` lines; run.sh --ceiling reads `ceiling_docs_per_s`.
"""
import argparse
import json
import os
import time

import torch
from tokenizers import Tokenizer

SEED_TEXT = "Using a GPU allows you to significantly speed up encoding."


def best_seconds(fn, repeats, rounds=5):
    """The fastest of `rounds` timings of `repeats` calls, per call."""
    fn()  # warm-up: oneDNN/BLAS kernel selection, page faults
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    with open(os.path.join(args.model_path, "config.json")) as f:
        config = json.load(f)
    hidden = config["hidden_size"]
    inner = config["intermediate_size"]
    layers = config["num_hidden_layers"]
    tokenizer = Tokenizer.from_file(os.path.join(args.model_path, "tokenizer.json"))
    tokenizer.no_padding()  # the file pads to 128; the sides pad to the batch's longest
    tokens = len(tokenizer.encode(SEED_TEXT).ids)  # [CLS] ... [SEP]

    # Per layer and token: Q, K, V and output projections (4 h*h), the
    # feed-forward pair (2 h*i); per layer and sequence: QK^T and AV (2 t*t*h).
    linear_macs = tokens * layers * (4 * hidden * hidden + 2 * hidden * inner)
    attention_macs = layers * 2 * tokens * tokens * hidden
    flops_per_doc = 2 * (linear_macs + attention_macs)

    dtype = getattr(torch, args.dtype)
    rows = args.batch * tokens
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, hidden, generator=generator).to(dtype)
    weights = [torch.randn(hidden, hidden, generator=generator).to(dtype) for _ in range(4)]
    up = torch.randn(inner, hidden, generator=generator).to(dtype)
    down = torch.randn(hidden, inner, generator=generator).to(dtype)
    mid = torch.randn(rows, inner, generator=generator).to(dtype)

    def aten_layer():
        for w in weights:
            torch.nn.functional.linear(x, w)
        torch.nn.functional.linear(x, up)
        torch.nn.functional.linear(mid, down)

    def onednn_linear(a, w):
        return torch.ops.mkldnn._linear_pointwise(a, w, None, "none", [], "none")

    def onednn_layer():
        for w in weights:
            onednn_linear(x, w)
        onednn_linear(x, up)
        onednn_linear(mid, down)

    # The same with the weights prepacked into oneDNN's layout, as
    # SentenceEncoder does on CPU (bert_model.cc).
    def onednn_packed_layer(packed):
        for w in packed[:4]:
            onednn_linear(x, w)
        onednn_linear(x, packed[4])
        onednn_linear(mid, packed[5])

    square = torch.randn(1024, 1024, generator=generator).to(dtype)
    with torch.inference_mode():
        aten_seconds = best_seconds(aten_layer, repeats=50)
        onednn_seconds = float("inf")
        packed_seconds = float("inf")
        if torch.backends.mkldnn.is_available():
            try:
                onednn_seconds = best_seconds(onednn_layer, repeats=50)
                packed = [
                    torch.ops.mkldnn._reorder_linear_weight(w, rows)
                    for w in weights + [up, down]
                ]
                packed_seconds = best_seconds(lambda: onednn_packed_layer(packed), repeats=50)
            except RuntimeError:  # no oneDNN kernel for this dtype on this CPU
                pass
        layer_seconds = min(aten_seconds, onednn_seconds, packed_seconds)
        square_seconds = best_seconds(lambda: torch.mm(square, square), repeats=10)
    layer_flops = 2 * rows * (4 * hidden * hidden + 2 * hidden * inner)
    model_gemm_rate = layer_flops / layer_seconds
    print(f"torch={torch.__version__} threads={torch.get_num_threads()} dtype={args.dtype}")
    print(f"tokens_per_doc={tokens}")
    print(f"gflop_per_doc={flops_per_doc / 1e9:.4f}")
    print(f"gemm_gflops_model_shapes_aten={layer_flops / aten_seconds / 1e9:.1f}")
    print(f"gemm_gflops_model_shapes_onednn={layer_flops / onednn_seconds / 1e9:.1f}")
    print(f"gemm_gflops_model_shapes_onednn_packed={layer_flops / packed_seconds / 1e9:.1f}")
    print(f"gemm_gflops_model_shapes={model_gemm_rate / 1e9:.1f}")
    print(f"gemm_gflops_1024_square={2 * 1024**3 / square_seconds / 1e9:.1f}")
    print(f"ceiling_docs_per_s={model_gemm_rate / flops_per_doc:.1f}")


if __name__ == "__main__":
    main()
