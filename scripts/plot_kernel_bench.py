#!/usr/bin/env python3
"""Plot a kernel_bench run: each optimised kernel's speed against OpenBLAS and PyTorch.

Usage:
  scripts/plot_kernel_bench.py RUN.json [--out FILE.png]

RUN.json is what `build/bin/kernel_bench --json RUN.json` writes. Each pair was timed interleaved
in one process, so each bar is a ratio of medians measured side by side: the baseline's time over
ours (above 1: ours is faster). The dashed lines mark each kernel's target from issue #17, the
title the ISA and the FMA peak measured in the run. matplotlib comes from scripts/bootstrap.
"""
import argparse
import json
import sys

TARGETS = {"matmul-1024": ("OpenBLAS", 1.0), "bmm": ("PyTorch", 1.0), "mlp": ("PyTorch", 1.2),
           "attention": ("PyTorch", 1.2), "conv2d-3x3": ("PyTorch", 1.2),
           "softmax": ("PyTorch", 1.5), "layernorm": ("PyTorch", 1.5), "rmsnorm": ("PyTorch", 1.5)}


def ratio(num, den):
    return num / den if num and den and num > 0 and den > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="kernel_bench --json output")
    ap.add_argument("--out", default="kernel_bench.png")
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
    kernels = run["kernels"]
    if not kernels:
        print("the run has no kernels", file=sys.stderr)
        return 1
    names = [k["kernel"] for k in kernels]
    blas = [ratio(k["openblas_median_s"], k["ours_median_s"]) for k in kernels]
    torch = [ratio(k["torch_median_s"], k["ours_in_torch_process_median_s"]) for k in kernels]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(names) + 2), 4.5))
    width = 0.38
    ax.bar([i - width / 2 for i in range(len(names))], blas, width, label="vs OpenBLAS", color="#ff7f0e")
    ax.bar([i + width / 2 for i in range(len(names))], torch, width, label="vs PyTorch (1 thread)",
           color="#1f77b4")
    for i, n in enumerate(names):
        if n in TARGETS:
            who, want = TARGETS[n]
            x = i - width / 2 if who == "OpenBLAS" else i + width / 2
            ax.plot([x - width / 2, x + width / 2], [want, want], color="black", linestyle="--",
                    linewidth=1)
    ax.axhline(1.0, color="grey", linewidth=0.6)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20)
    ax.set_ylabel("baseline median / ours (interleaved)")
    ceiling = run.get("tile_ceiling")
    ax.set_title("kernel_bench: %s, %s\nFMA peak %.0f GFLOP/s per core%s"
                 % (run["arch"],
                    "no search" if run["budget_s"] == 0 else "%.0f s search per kernel" % run["budget_s"],
                    run["peak_gflops_per_core"],
                    "; register tile %.0f with B from L2" % ceiling["l2_gflops"] if ceiling else ""),
                 fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
