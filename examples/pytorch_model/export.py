#!/usr/bin/env python3
"""Exports a small image classifier for Gantry's TorchModel executor.

    .venv/bin/python examples/pytorch_model/export.py [--device cpu|cuda] [--out DIR]

writes, next to this script unless --out says otherwise:

    classifier.pt2  an AOTInductor package: torch.export with a dynamic batch
                    dimension, compiled by torch._inductor.aoti_compile_and_package
                    for --device (a cuda package needs a CUDA replica)
    classifier.pt   the same model as TorchScript (torch.jit.trace), which
                    loads on any device

The model takes `image` float32 [batch, 3, 32, 32] and returns `logits`
float32 [batch, 10]. Its weights are random (seeded), as this example is
about serving, not training: load your own state_dict instead.
"""
import argparse
import os
import time

import torch


class Classifier(torch.nn.Module):
    """32x32 RGB images -> 10 class logits."""

    def __init__(self, classes=10):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
        self.head = torch.nn.Linear(64, classes)

    def forward(self, image):
        return self.head(self.features(image))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="the device the .pt2 is compiled for (default: cpu)")
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                        help="folder to write into (default: this script's)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(0)
    model = Classifier().eval().to(args.device)
    # Two example rows: torch.export specialises a dimension whose example
    # size is 0 or 1, so a batch of one would not stay dynamic.
    example = torch.randn(2, 3, 32, 32, device=args.device)

    start = time.monotonic()
    batch = torch.export.Dim("batch", min=1, max=1024)
    with torch.no_grad():
        program = torch.export.export(model, (example,), dynamic_shapes={"image": {0: batch}})
        pt2 = torch._inductor.aoti_compile_and_package(
            program, package_path=os.path.join(args.out, "classifier.pt2"))
    print(f"wrote {os.path.relpath(pt2)} ({time.monotonic() - start:.1f} s)")

    start = time.monotonic()
    pt = os.path.join(args.out, "classifier.pt")
    with torch.no_grad():
        torch.jit.trace(model, example).save(pt)
    print(f"wrote {os.path.relpath(pt)} ({time.monotonic() - start:.1f} s)")

    # What the served model should answer for the image of all 0.5s.
    with torch.no_grad():
        logits = model(torch.full((1, 3, 32, 32), 0.5, device=args.device))
    print("eager logits for an image of 0.5s:", [round(v, 4) for v in logits[0].tolist()])


if __name__ == "__main__":
    main()
