#!/usr/bin/env python3
"""What int8 would cost all-MiniLM-L6-v2 in quality, before any int8 kernel
is written: the model in plain torch (float32) with chosen linear layers
fake-quantised (weights int8 per output channel; activations int8 per
tensor, as ONNX Runtime's quantize_dynamic does, or per token, one scale a
row), over the parity strings. Prints, per layout, the min and mean cosine
to sentence-transformers' float32 embeddings and the top-10 overlap (each
string a query over the others), against the gate int8 must pass: mean
cosine >= 0.995 and top-10 overlap >= 0.95.

  int8_study.py MODEL_DIR PARITY_EXPECTATIONS.json

(run in the project venv after scripts/parity_setup.sh; the JSON is the one
the parity test writes beside the build, or scripts/parity_expectations.py's)
"""
import json
import sys

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

LINEARS = ("qkv", "attention_out", "intermediate", "output")


def fake_quantise_weight(w):
    scale = w.abs().amax(1, keepdim=True).clamp(min=1e-8) / 127
    return torch.round(w / scale).clamp(-127, 127) * scale


def fake_quantise_activation(x, per):
    """Asymmetric uint8: one (scale, zero point) for the whole tensor or per row."""
    if per == "tensor":
        lo, hi = x.min().clamp(max=0), x.max().clamp(min=0)
    else:
        lo, hi = x.amin(-1, keepdim=True).clamp(max=0), x.amax(-1, keepdim=True).clamp(min=0)
    scale = ((hi - lo) / 255).clamp(min=1e-12)
    zero = torch.round(-lo / scale)
    return (torch.clamp(torch.round(x / scale) + zero, 0, 255) - zero) * scale


def embed(weights, config, ids, mask, layout):
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    eps = config.get("layer_norm_eps", 1e-12)
    ln = torch.nn.functional.layer_norm

    def linear(x, name, w, b):
        if name in layout:
            x, w = fake_quantise_activation(x, layout[name]), fake_quantise_weight(w)
        return torch.nn.functional.linear(x, w, b)

    def wb(prefix):
        return weights[prefix + ".weight"], weights[prefix + ".bias"]

    batch, length = ids.shape
    x = (weights["embeddings.word_embeddings.weight"][ids] +
         weights["embeddings.position_embeddings.weight"][:length] +
         weights["embeddings.token_type_embeddings.weight"][0])
    x = ln(x, (hidden,), *wb("embeddings.LayerNorm"), eps)
    keep = mask.bool().view(batch, 1, 1, length)
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        parts = [wb(p + f"attention.self.{n}") for n in ("query", "key", "value")]
        qkv = linear(x, "qkv", torch.cat([w for w, _ in parts]), torch.cat([b for _, b in parts]))
        q, k, v = qkv.view(batch, length, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
        context = torch.nn.functional.scaled_dot_product_attention(q, k, v, keep)
        context = context.transpose(1, 2).reshape(batch, length, hidden)
        a = ln(linear(context, "attention_out", *wb(p + "attention.output.dense")) + x, (hidden,),
               *wb(p + "attention.output.LayerNorm"), eps)
        inner = torch.nn.functional.gelu(linear(a, "intermediate", *wb(p + "intermediate.dense")))
        x = ln(linear(inner, "output", *wb(p + "output.dense")) + a, (hidden,),
               *wb(p + "output.LayerNorm"), eps)
    m = mask.unsqueeze(-1).float()
    return torch.nn.functional.normalize((x * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)


def top10_overlap(got, want):
    def nearest(e):
        similarity = e @ e.T
        similarity.fill_diagonal_(-float("inf"))
        return similarity.topk(10, dim=1).indices.tolist()
    pairs = zip(nearest(got), nearest(want))
    return sum(len(set(a) & set(b)) / 10 for a, b in pairs) / len(got)


def main(model_dir, expectations):
    torch.set_num_threads(2)
    weights = {k.removeprefix("bert."): v.float()
               for k, v in load_file(model_dir + "/model.safetensors").items()}
    config = json.load(open(model_dir + "/config.json"))
    cases = json.load(open(expectations))["cases"]
    tokenizer = Tokenizer.from_file(model_dir + "/tokenizer.json")
    tokenizer.enable_truncation(json.load(open(expectations)).get("max_seq_length", 256))
    tokenizer.enable_padding()
    want = torch.nn.functional.normalize(torch.tensor([c["embedding"] for c in cases]), dim=-1)
    layouts = [("float32 (none quantised)", {})]
    layouts += [(f"all four, activations per {per}", {n: per for n in LINEARS})
                for per in ("tensor", "token")]
    layouts += [(f"{n} only, per tensor", {n: "tensor"}) for n in LINEARS]
    layouts += [("all but output, per tensor", {n: "tensor" for n in LINEARS[:3]})]
    print(f"{len(cases)} parity strings; gate: mean cosine >= 0.995, top-10 overlap >= 0.95")
    for label, layout in layouts:
        got = []
        with torch.inference_mode():
            for i in range(0, len(cases), 32):
                encodings = tokenizer.encode_batch([c["text"] for c in cases[i:i + 32]])
                ids = torch.tensor([e.ids for e in encodings])
                mask = torch.tensor([e.attention_mask for e in encodings])
                got.append(embed(weights, config, ids, mask, layout))
        got = torch.cat(got)
        cosine = (got * want).sum(-1)
        overlap = top10_overlap(got, want)
        verdict = "passes" if cosine.mean() >= 0.995 and overlap >= 0.95 else "fails"
        print(f"  {label:<36} cosine min {cosine.min():.5f} mean {cosine.mean():.5f}  "
              f"top-10 overlap {overlap:.4f}  {verdict}", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
