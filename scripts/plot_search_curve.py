#!/usr/bin/env python3
"""Plot the optimiser's search curves: the measured best speed-up over the budget.

Usage:
  scripts/plot_search_curve.py REPORT.json [REPORT.json ...] [--out FILE.png] [--json]

Each REPORT.json is the report.json `perfdojo optimize --out DIR` writes. For each run the plot
shows the speed-up of the best verified program so far over the original (the original's time
divided by the curve's best_measured_s) against the fraction of the budget used, and prints per
run: the final time (the interleaved re-timing), when 90% of the final speed was reached
(as a fraction of the budget) and the spread of the final times across runs. The speeds along
the curve are the search's own measurements; the final point is the re-timing, so the two may
differ by the machine's noise. matplotlib comes from scripts/bootstrap.
"""
import argparse
import json
import sys


def summary(report):
    """Per-run figures: final time, budget, when 90% of the final speed was first reached."""
    curve = [p for p in report["curve"] if p.get("best_measured_s", 0) > 0]
    base = report["baseline_s"]
    budget = report.get("budget_s") or max((p["elapsed_s"] for p in report["curve"]), default=0)
    # The search's own figure of its returned program: the last point of the curve.
    last = curve[-1]["best_measured_s"] if curve else report["final_s"]
    reached = next((p["elapsed_s"] for p in curve if p["best_measured_s"] <= last / 0.9), budget)
    return {
        "file": report["file"],
        "final_s": report["final_s"],
        "speedup": report["speedup"],
        "budget_s": budget,
        "t90_s": reached,
        "t90_fraction": reached / budget if budget > 0 else 0,
        "points": [(p["elapsed_s"], base / p["best_measured_s"] if p["best_measured_s"] > 0 else 1)
                   for p in curve],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", help="report.json files from perfdojo optimize --out")
    ap.add_argument("--out", default="search_curve.png")
    ap.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    args = ap.parse_args()
    runs = []
    for path in args.reports:
        with open(path) as f:
            runs.append((path, summary(json.load(f))))
    finals = [s["final_s"] for _, s in runs]
    spread = (max(finals) - min(finals)) / min(finals) if finals and min(finals) > 0 else 0
    doc = {"runs": [dict(s, report=p, points=None) for p, s in runs],
           "final_spread": spread}
    if args.json:
        print(json.dumps(doc))
    else:
        for p, s in runs:
            print(f"{p}: final {s['final_s'] * 1e3:.3f} ms (x{s['speedup']:.2f}); 90% of the final "
                  f"speed at {s['t90_s']:.1f} s = {100 * s['t90_fraction']:.0f}% of the budget")
        print(f"final times across runs: {100 * spread:.1f}% apart (max / min - 1)")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is missing: run scripts/bootstrap", file=sys.stderr)
        return 1
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (path, s) in enumerate(runs):
        xs = [t / s["budget_s"] for t, _ in s["points"]] + [1.0]
        ys = [v for _, v in s["points"]] + [s["speedup"]]
        ax.step(xs, ys, where="post", label=f"run {i + 1}: x{s['speedup']:.1f}, "
                f"90% at {100 * s['t90_fraction']:.0f}%")
    ax.axvline(0.3, color="grey", linestyle=":", linewidth=1)
    ax.set_yscale("log")
    ax.set_xlim(0, 1.02)
    ax.set_xlabel("fraction of the search budget")
    ax.set_ylabel("measured best speed-up over the original")
    name = runs[0][1]["file"] if runs else ""
    ax.set_title(f"perfdojo optimize {name}: anytime search curves")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    if not args.json:
        print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
