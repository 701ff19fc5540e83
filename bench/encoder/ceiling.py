"""The machine's ceiling for the seed job: how many docs/s the model's own
matrix products allow on this CPU if everything else (tokenising, softmax,
LayerNorm, GELU, pooling, the framework) took no time at all.

It counts the multiply-adds of one document through the model (from the
model's config.json and the seed text's token count, via the model's own
tokenizer.json) and times the model's matrix products themselves: the six
linear layers of one encoder layer on batches of 32, 128 and 256 documents
(256 is the pass width SentenceEncoder takes in bfloat16 on a CPU with AMX;
the fastest is the ceiling), with the same
torch, threads and dtype as the benchmark's sides, through both GEMM
libraries torch has on CPU (at::linear's MKL/OpenBLAS, and oneDNN, which
Gantry's SentenceEncoder uses, with plain and with prepacked weights), and
keeps the fastest, each with query, key and value as three products and as
one (as SentenceEncoder runs them). What one call costs apart from its
product (Python, the dispatcher, oneDNN's primitive cache: timed on a 1 x 16
product through the same path) is taken off each call: on a Xeon with AMX a
layer's bfloat16 products take 0.07-0.27 ms each, and the 13 us a call from
Python cost there put the ceiling below what the model reached from C++. No
side can beat the ceiling; a target above it cannot be met by any framework
on this machine.

With --dtype int8 it times the products SentenceEncoder's dtype int8 runs:
oneDNN's int8 linear (onednn::qlinear_pointwise) of uint8 activations and
prepacked int8 weights, float32 out, query, key and value as one product,
the attention's two products counted as float32's (int8 leaves them in
float). Quantising the activations and everything after each product is
left out, as above.

Each product allocates its output, as in the model: run it with the heap
settings Gantry's processes take (MALLOC_MMAP_THRESHOLD_=33554432
MALLOC_TRIM_THRESHOLD_=67108864, as run.sh does), or glibc hands a
product's megabytes back to the kernel after each call and the ceiling
times page faults (int8 at 128 documents came out at half its speed so).

    python ceiling.py --model-path DIR [--dtype float32|bfloat16|int8] [--batch 32 128 256]

Prints `key=value` lines, each batch's with a `batch<N>_` prefix; run.sh
--ceiling reads `ceiling_docs_per_s`, the fastest batch's.
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
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "int8"], default="float32")
    parser.add_argument("--batch", type=int, nargs="+", default=[32, 128, 256])
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

    shape = (hidden, inner, layers, tokens, flops_per_doc)
    print(f"torch={torch.__version__} threads={torch.get_num_threads()} dtype={args.dtype}")
    print(f"tokens_per_doc={tokens}")
    print(f"gflop_per_doc={flops_per_doc / 1e9:.4f}")
    best = (0.0, 0)
    for batch in args.batch:
        measure = int8_ceiling if args.dtype == "int8" else float_ceiling
        docs_per_s, lines = measure(args.dtype, batch, shape)
        for line in lines:
            print(f"batch{batch}_{line}")
        print(f"batch{batch}_ceiling_docs_per_s={docs_per_s:.1f}")
        best = max(best, (docs_per_s, batch))
    print(f"ceiling_batch={best[1]}")
    print(f"ceiling_docs_per_s={best[0]:.1f}")


def float_ceiling(dtype_name, batch, shape):
    """docs/s that one layer's float32 or bfloat16 products allow at `batch`
    documents a pass, and the lines that say how."""
    hidden, inner, _, tokens, flops_per_doc = shape
    dtype = getattr(torch, dtype_name)
    rows = batch * tokens
    generator = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(dtype)

    x = randn(rows, hidden)
    mid = randn(rows, inner)
    # One layer's products, [(input, weight)], two ways: query, key and
    # value as three products, or as one three times as wide (as
    # SentenceEncoder runs them on CPU, bert_model.cc).
    separate = [(x, randn(hidden, hidden)) for _ in range(4)]
    separate += [(x, randn(inner, hidden)), (mid, randn(hidden, inner))]
    fused = [(x, torch.cat([w for _, w in separate[:3]])), *separate[3:]]

    def onednn_linear(a, w):
        return torch.ops.mkldnn._linear_pointwise(a, w, None, "none", [], "none")

    def aten_linear(a, w):
        return torch.nn.functional.linear(a, w)

    def layer_seconds(linear, products, packed):
        """One layer's products through `linear` (on weights prepacked into
        oneDNN's layout, as SentenceEncoder runs them on CPU, if `packed`),
        less what its calls cost apart from the products (the same path on
        a 1 x 16 product). Returns that and the cost of one call."""
        tiny = [(randn(1, 16), randn(16, 16))] * len(products)
        if packed:
            tiny = [(a, torch.ops.mkldnn._reorder_linear_weight(w, 1)) for a, w in tiny]
            products = [(a, torch.ops.mkldnn._reorder_linear_weight(w, rows)) for a, w in products]
        calls = best_seconds(lambda: [linear(a, w) for a, w in tiny], repeats=200)
        seconds = best_seconds(lambda: [linear(a, w) for a, w in products], repeats=50)
        return seconds - calls, calls / len(products)

    square = randn(1024, 1024)
    timings = {}  # (library, layout) -> (seconds a layer, overhead a call)
    with torch.inference_mode():
        for library, linear, packed in (("aten", aten_linear, False),
                                        ("onednn", onednn_linear, False),
                                        ("onednn_packed", onednn_linear, True)):
            if library != "aten" and not torch.backends.mkldnn.is_available():
                continue
            for layout, products in (("separate_qkv", separate), ("fused_qkv", fused)):
                try:
                    timings[(library, layout)] = layer_seconds(linear, products, packed)
                except RuntimeError:  # no oneDNN kernel for this dtype on this CPU
                    pass
        square_seconds = best_seconds(lambda: torch.mm(square, square), repeats=10)
    layer_flops = 2 * rows * (4 * hidden * hidden + 2 * hidden * inner)
    layer_seconds_best = min(seconds for seconds, _ in timings.values())
    model_gemm_rate = layer_flops / layer_seconds_best
    lines = [f"gemm_gflops_model_shapes_{library}_{layout}={layer_flops / seconds / 1e9:.1f}"
             f" call_overhead_us={call * 1e6:.1f}"
             for (library, layout), (seconds, call) in sorted(timings.items())]
    lines.append(f"gemm_gflops_model_shapes={model_gemm_rate / 1e9:.1f}")
    lines.append(f"gemm_gflops_1024_square={2 * 1024**3 / square_seconds / 1e9:.1f}")
    return model_gemm_rate / flops_per_doc, lines




def int8_ceiling(_, batch, shape):
    """docs/s that one layer's products allow in SentenceEncoder's dtype
    int8 at `batch` documents a pass: its four int8 products (query, key and
    value as one) on oneDNN, as it runs them, plus the attention's two
    products timed in float32 at the same shapes; and the lines that say
    how."""
    hidden, inner, layers, tokens, _ = shape
    rows = batch * tokens
    generator = torch.Generator().manual_seed(0)

    def int8_product(in_features, out_features, row_count):
        x = torch.randint(0, 256, (row_count, in_features), dtype=torch.uint8,
                          generator=generator)
        w = torch.randint(-127, 128, (out_features, in_features), dtype=torch.int8,
                          generator=generator)
        packed = torch.ops.onednn.qlinear_prepack(w, [row_count, in_features])
        scales = torch.rand(out_features, generator=generator) + 0.5
        zeros = torch.zeros(out_features, dtype=torch.long)
        return lambda: torch.ops.onednn.qlinear_pointwise(
            x, 1.0, 128, packed, scales, zeros, None, 1.0, 0, torch.float32, "none", [], "")

    # The attention of one layer in float32: per text and head, the scores
    # and the weighted sum (2 t*t*h multiply-adds a text), batched.
    head_dim = 32
    q = torch.randn(batch * (hidden // head_dim), tokens, head_dim, generator=generator)
    with torch.inference_mode():
        try:
            products = [int8_product(hidden, 3 * hidden, rows),
                        int8_product(hidden, hidden, rows),
                        int8_product(hidden, inner, rows), int8_product(inner, hidden, rows)]
            tiny = [int8_product(16, 16, 1)] * len(products)
            products[0]()
        except (RuntimeError, AttributeError) as e:  # no oneDNN int8 in this torch or CPU
            raise SystemExit(f"ceiling.py: dtype int8: oneDNN's int8 linear is not usable "
                             f"here ({e})") from e
        calls = best_seconds(lambda: [p() for p in tiny], repeats=200)
        seconds = best_seconds(lambda: [p() for p in products], repeats=50) - calls
        attention_seconds = best_seconds(
            lambda: torch.bmm(torch.bmm(q, q.transpose(1, 2)), q), repeats=50)
    linear_ops = 2 * rows * (4 * hidden * hidden + 2 * hidden * inner)
    lines = [f"int8_gops_model_shapes_onednn_fused_qkv={linear_ops / seconds / 1e9:.1f}"
             f" call_overhead_us={calls / len(products) * 1e6:.1f}",
             f"attention_float32_seconds_a_layer={attention_seconds:.6f}"]
    return batch / (layers * (seconds + attention_seconds)), lines

if __name__ == "__main__":
    main()
