"""Draws the encoder benchmark as grouped bars: one group per run of run.sh
(a dtype and thread count), one bar per side (median docs/s over the
rounds), and the machine's ceiling (run.sh --ceiling) as a line across the
group when the run has one.

    python plot.py OUT.svg "LABEL=FILE.tsv" ["LABEL=FILE.tsv" ...] [--title TITLE]

FILE.tsv is what run.sh --out writes. Needs matplotlib (bench/encoder/venv.sh
installs it in .venv-bench-encoder).
"""
import statistics
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

SIDES = {"a": "bare model", "b": "Gantry Deployment", "c": "Jina + sentence-transformers",
         "d": "Infinity (torch engine)", "e": "sentence-transformers alone",
         "f": "TorchModel (.pt2)", "g": "ONNX Runtime float32", "h": "ONNX Runtime int8",
         "i": "OpenVINO float32", "j": "OpenVINO int8", "k": "bare model, int8",
         "l": "Gantry Deployment, int8", "m": "OpenVINO bfloat16"}
COLOURS = {"a": "#999999", "b": "#1f77b4", "c": "#ff7f0e", "d": "#2ca02c", "e": "#9467bd",
           "f": "#17becf", "g": "#8c564b", "h": "#c49c94", "i": "#e377c2", "j": "#f7b6d2",
           "k": "#bcbd22", "l": "#08306b", "m": "#7f7f7f"}


def read_run(path):
    """Median docs/s per side, and the median ceiling (or None), of one run.sh --out file
    (older files hold one ceiling row, newer ones one a round)."""
    runs, ceilings = {}, []
    with open(path) as f:
        for row in f:
            mode, _, value, _ = row.rstrip("\n").split("\t")
            if mode == "ceiling":
                ceilings.append(float(value))
            elif mode.startswith("ceiling_"):
                continue  # another dtype's ceiling (int8's, for sides k and l): not drawn
            else:
                runs.setdefault(mode, []).append(float(value))
    if not runs:
        raise SystemExit(f"plot.py: {path}: no runs in it")
    ceiling = statistics.median(ceilings) if ceilings else None
    return {m: statistics.median(v) for m, v in runs.items()}, ceiling


def main(argv):
    title = "all-MiniLM-L6-v2, seed job, request_size 32, CPU"
    if "--title" in argv:
        at = argv.index("--title")
        title = argv[at + 1]
        argv = argv[:at] + argv[at + 2:]
    if len(argv) < 3 or any("=" not in a for a in argv[2:]):
        raise SystemExit(__doc__)
    groups = [(label, *read_run(path)) for label, path in (a.split("=", 1) for a in argv[2:])]
    sides = sorted({m for _, medians, _ in groups for m in medians})
    width = 0.8 / len(sides)
    fig, ax = plt.subplots(figsize=(4.2 + 2.2 * len(groups), 4.2))
    for i, side in enumerate(sides):
        xs = [g + (i - (len(sides) - 1) / 2) * width for g in range(len(groups))]
        values = [medians.get(side, 0.0) for _, medians, _ in groups]
        bars = ax.bar(xs, values, width, label=SIDES.get(side, side), color=COLOURS.get(side))
        # A side a run did not have stays unlabelled (no "0" over nothing).
        ax.bar_label(bars, labels=[f"{v:.0f}" if v else "" for v in values], fontsize=7,
                     padding=2)
    for g, (_, _, ceiling) in enumerate(groups):
        if ceiling is not None:
            ax.hlines(ceiling, g - 0.45, g + 0.45, colors="black", linestyles="dashed",
                      label="ceiling (matrix products alone)" if g == 0 else None)
    ax.set_xticks(range(len(groups)), [label for label, _, _ in groups])
    ax.set_ylabel("docs/s (median of the rounds)")
    ax.set_title(title)
    # Beside the axes, where no bar is.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_ylim(0, max(max(max(m.values()), c or 0) for _, m, c in groups) * 1.25)
    fig.tight_layout()
    fig.savefig(argv[1])
    print(f"plot.py: wrote {argv[1]}")


if __name__ == "__main__":
    main(sys.argv)
