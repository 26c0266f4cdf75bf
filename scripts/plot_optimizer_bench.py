#!/usr/bin/env python3
"""Plot an optimizer_bench run: each kernel's speed relative to PyTorch and OpenBLAS.

Usage:
  scripts/plot_optimizer_bench.py RUN.json [--out FILE.png]

RUN.json is what `build/bin/optimizer_bench --json RUN.json` writes. For every kernel, bars show
the untransformed kernel and the optimiser's kernel as speed relative to single-threaded PyTorch
(1.0 = as fast as PyTorch, log scale), with OpenBLAS's GEMM for the GEMM-shaped kernels on the
same scale. matplotlib comes from scripts/bootstrap.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="optimizer_bench --json output")
    ap.add_argument("--out", default="optimizer_bench.png")
    args = ap.parse_args()
    with open(args.run) as f:
        run = json.load(f)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing: run scripts/bootstrap", file=sys.stderr)
        return 1

    kernels = [k for k in run["kernels"] if k.get("torch_s", 0) > 0]
    if not kernels:
        print("no kernel has a PyTorch time to compare with", file=sys.stderr)
        return 1
    names = [k["kernel"] for k in kernels]
    series = [
        ("untransformed", [k["torch_s"] / k["baseline_s"] for k in kernels], "#bbbbbb"),
        ("optimised", [k["torch_s"] / k["final_s"] for k in kernels], "#1f77b4"),
        ("OpenBLAS GEMM", [k["torch_s"] / k["openblas_s"] if k.get("openblas_s", 0) > 0 else 0
                           for k in kernels], "#ff7f0e"),
    ]
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 4.5))
    width = 0.8 / len(series)
    for i, (label, values, color) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(names))]
        ax.bar(xs, [v if v > 0 else float("nan") for v in values], width, label=label, color=color)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20)
    ax.set_ylabel("speed relative to PyTorch (1 thread)")
    ax.set_title("optimizer_bench: %s, %s, %d thread(s), %.0f s per kernel"
                 % (run["arch"], run["mode"], run["threads"], run["budget_s"]))
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
