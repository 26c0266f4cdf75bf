#!/usr/bin/env python3
"""Plot train_agent learning curves and the evaluate_agent baseline comparison.

Usage:
  scripts/plot_training.py RUN_DIR [RUN_DIR ...] [--eval EVAL_JSON ...] [--out FILE.png]

Each RUN_DIR holds a train_agent metrics.csv (step,wall_s,name,value,kernel). Several runs
(e.g. --target maxq vs --target sum) are drawn on the same axes, labelled by folder name. Each
--eval file is an evaluate_agent eval.json; its geomean speed-ups per method and budget are drawn
as grouped bars. matplotlib comes from scripts/bootstrap.
"""
import argparse
import csv
import json
import math
import os
import sys
from collections import defaultdict


def read_metrics(run_dir):
    """{name: [(step, value, kernel)]} from RUN_DIR/metrics.csv."""
    series = defaultdict(list)
    path = os.path.join(run_dir, "metrics.csv")
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                value = float(row["value"])
            except ValueError:  # null: a non-finite value
                continue
            series[row["name"]].append((int(row["step"]), value, row.get("kernel", "")))
    return series


def smooth(xs, ys, window):
    """Running mean over `window` points (keeps curves of noisy episode metrics readable)."""
    out, acc = [], []
    for y in ys:
        acc.append(y)
        if len(acc) > window:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return xs, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", help="train_agent output folders (metrics.csv)")
    ap.add_argument("--eval", action="append", default=[], help="evaluate_agent eval.json")
    ap.add_argument("--out", default="training.png", help="image to write (default training.png)")
    ap.add_argument("--window", type=int, default=50, help="smoothing window in episodes")
    args = ap.parse_args()
    if not args.runs and not args.eval:
        ap.error("give at least one run folder or --eval file")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 4 if args.runs else 0
    panels += len(args.eval)
    cols = 2 if panels > 1 else 1
    rows = max(1, math.ceil(panels / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(12, 4 * rows), squeeze=False)
    axes = [ax for row in axes for ax in row]
    i = 0
    if args.runs:
        ax_speed, ax_loss, ax_q, ax_explore = axes[0:4]
        i = 4
        for run in args.runs:
            label = os.path.basename(os.path.normpath(run))
            m = read_metrics(run)
            ep = m.get("charts/episode_speedup", [])
            if ep:
                xs, ys = smooth([s for s, _, _ in ep], [math.log(max(v, 1e-9)) for _, v, _ in ep], args.window)
                ax_speed.plot(xs, [math.exp(y) for y in ys], label=label)
            for name, ax in (("losses/td_loss", ax_loss), ("losses/q_values", ax_q)):
                pts = m.get(name, [])
                if pts:
                    ax.plot([s for s, _, _ in pts], [v for _, v, _ in pts], label=label)
            eps = m.get("charts/epsilon", [])
            temp = m.get("charts/temperature", [])
            if eps:
                ax_explore.plot([s for s, _, _ in eps], [v for _, v, _ in eps], label=label + " epsilon")
            if temp:
                ax_explore.plot([s for s, _, _ in temp], [v for _, v, _ in temp], "--", label=label + " temperature")
        ax_speed.set_title("episode best speed-up (geometric running mean)")
        ax_loss.set_title("losses/td_loss")
        ax_loss.set_yscale("log")
        ax_q.set_title("losses/q_values")
        ax_explore.set_title("exploration: epsilon / Boltzmann temperature")
        for ax in (ax_speed, ax_loss, ax_q, ax_explore):
            ax.set_xlabel("env steps")
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
    for path in args.eval:
        ax = axes[i]
        i += 1
        with open(path) as f:
            doc = json.load(f)
        budgets = [str(b) for b in doc["budgets"]]
        methods = list(doc["geomean"].keys())
        width = 0.8 / max(1, len(methods))
        for k, method in enumerate(methods):
            vals = [doc["geomean"][method][b] for b in budgets]
            xs = [j + k * width for j in range(len(budgets))]
            ax.bar(xs, vals, width, label=method)
        ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(budgets))])
        ax.set_xticklabels(budgets)
        ax.set_xlabel("budget (backend evaluations)")
        ax.set_ylabel("geomean best speed-up")
        ax.set_title("held-out kernels: " + os.path.basename(os.path.dirname(os.path.abspath(path))))
        ax.axhline(1.0, color="gray", lw=0.5)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[i:]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
