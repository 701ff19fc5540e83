#!/usr/bin/env python3
"""Exports all-MiniLM-L6-v2 (last_hidden_state from input_ids and
attention_mask, batch and sequence dynamic) as an AOTInductor package in a
given dtype, for side (f) of bench/encoder/run.sh: TorchModel serving the
compiled model. The wrapper and the compile step are the test fixtures'
(tests/exported/export_models.py), so the bench serves what the tests check.

  export_minilm.py --model DIR --dtype float32|bfloat16|float16 --out FILE.pt2
                   [--device cpu|cuda]
"""
import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "exported"))
import torch  # noqa: E402
import transformers  # noqa: E402
from export_models import LastHiddenState, compile_pt2, kMaxBatch, kMaxSeq  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    bert = transformers.AutoModel.from_pretrained(args.model)
    model = LastHiddenState(bert).to(dtype).eval().to(args.device)
    ids = torch.tensor([[101, 2023, 2003, 102], [101, 7592, 102, 0]], device=args.device)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], device=args.device)
    batch = torch.export.Dim("batch", min=1, max=kMaxBatch)
    seq = torch.export.Dim("seq", min=1, max=kMaxSeq)
    start = time.monotonic()
    with torch.inference_mode():
        export_s, compile_s = compile_pt2(model, (ids, mask), {
            "input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}, args.out)
    print(f"export_minilm: {args.dtype} on {args.device}: export {export_s:.1f} s, "
          f"compile {compile_s:.1f} s, total {time.monotonic() - start:.1f} s -> {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
