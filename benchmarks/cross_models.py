#!/usr/bin/env python3
"""The optimiser on the cross targets' models: a table of modelled speed-ups per kernel.

For each kernel and each architecture, runs `perfdojo optimize FILE --arch A --timeout T --json`
and records the speed-up, the fraction of the modelled core's FMA peak, whether the returned
kernel was verified (cross-compiled and run under qemu on a scaled-down instance) and a summary
of the moves in its trace (vector width, register-tile unroll, tiles, packing copies, parallel
scopes). Cross targets are modelled (their times are the cost model's on the built-in profile);
an x86 architecture in --arches is measured on this machine, as `perfdojo optimize` always does.

    python3 benchmarks/cross_models.py --timeout 5                     # every kernel, 3 targets
    python3 benchmarks/cross_models.py --arches aarch64_neon,x86_avx512 \\
        --kernels matmul-256,softmax,conv2d-3x3,layernorm,attention --timeout 20
    python3 benchmarks/cross_models.py ... --json out.json --plot out.png

Prints a progress bar (rate, ETA) on stderr and a markdown table on stdout.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kernels_dir():
    return os.path.join(ROOT, "kernels")


def summarise(trace):
    """What a trace does, in a few words: the moves that shape the code on a core."""
    kinds = collections.Counter(line.split()[0] for line in trace)
    widths = sorted({int(line.split()[-1]) for line in trace if line.startswith("vectorize ")})
    unrolls = [int(line.split()[-1]) for line in trace if line.startswith("unroll ")]
    tiles = sorted({int(line.split()[-1]) for line in trace if line.startswith("tile_scope ")})
    parts = []
    if widths:
        parts.append("vec " + "/".join(map(str, widths)))
    if unrolls:
        parts.append("unroll x%d" % len(unrolls) + " (max %d)" % max(unrolls))
    if tiles:
        parts.append("tiles " + ",".join(map(str, tiles)))
    if kinds.get("create_temporary"):
        parts.append("%d copies" % kinds["create_temporary"])
    if kinds.get("parallelize"):
        parts.append("parallel")
    return "; ".join(parts) if parts else "-"


def run_one(binary, kernel, arch, timeout):
    cmd = [binary, "optimize", os.path.join(kernels_dir(), kernel + ".pdj"), "--arch", arch,
           "--timeout", str(timeout), "--json"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout * 4 + 120)
    try:
        rep = json.loads(p.stdout)["report"]
    except (ValueError, KeyError):
        return {"kernel": kernel, "arch": arch, "error": (p.stderr or p.stdout)[-300:]}
    return {"kernel": kernel, "arch": arch, "speedup": rep["speedup"],
            "peak_fraction": rep["peak_fraction"], "verified": rep["verified"],
            "timing": rep["timing"], "profile": rep["profile"],
            "peak_gflops": rep["peak_gflops_per_core"], "trace": rep["trace"],
            "moves": summarise(rep["trace"])}


def bar(done, total, start, label):
    elapsed = time.time() - start
    rate = done / elapsed if elapsed > 0 else 0
    eta = (total - done) / rate if rate > 0 else 0
    filled = int(30 * done / total)
    sys.stderr.write("\r[%s%s] %d/%d  %.2f runs/min  ETA %ds  %-40s" %
                     ("#" * filled, "." * (30 - filled), done, total, rate * 60, eta, label[:40]))
    sys.stderr.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arches", default="aarch64_neon,aarch64_sve,riscv64_rvv")
    ap.add_argument("--kernels", default="", help="comma-separated kernel names (default: all)")
    ap.add_argument("--timeout", type=float, default=5, help="optimiser budget per run, seconds")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "perfdojo"))
    ap.add_argument("--json", default="", help="write every result to this file")
    ap.add_argument("--plot", default="", help="bar chart of the speed-ups (PNG)")
    a = ap.parse_args()
    arches = [x for x in a.arches.split(",") if x]
    kernels = [k for k in a.kernels.split(",") if k] or sorted(
        f[:-4] for f in os.listdir(kernels_dir()) if f.endswith(".pdj"))
    runs = [(k, arch) for k in kernels for arch in arches]
    results, start = [], time.time()
    for i, (k, arch) in enumerate(runs):
        bar(i, len(runs), start, "%s on %s" % (k, arch))
        results.append(run_one(a.bin, k, arch, a.timeout))
    bar(len(runs), len(runs), start, "done")
    sys.stderr.write("\n")

    by = {(r["kernel"], r["arch"]): r for r in results}
    print("| kernel | " + " | ".join(arches) + " |")
    print("|---|" + "---|" * len(arches))
    for k in kernels:
        cells = []
        for arch in arches:
            r = by[(k, arch)]
            if "error" in r:
                cells.append("error")
            else:
                cells.append("x%.2f (%.0f%% peak%s)" % (r["speedup"], 100 * r["peak_fraction"],
                                                       "" if r["verified"] else ", unverified"))
        print("| %s | %s |" % (k, " | ".join(cells)))
    print()
    print("| kernel | " + " | ".join("moves on " + arch for arch in arches) + " |")
    print("|---|" + "---|" * len(arches))
    for k in kernels:
        print("| %s | %s |" % (k, " | ".join(by[(k, arch)].get("moves", "error") for arch in arches)))
    for arch in arches:
        rs = [by[(k, arch)] for k in kernels if "speedup" in by[(k, arch)]]
        if rs:
            g = 1.0
            for r in rs:
                g *= r["speedup"]
            g **= 1.0 / len(rs)
            print("\n%s (%s, %s, peak %.1f GFLOP/s): geomean x%.2f over %d kernels, %d verified" %
                  (arch, rs[0]["profile"], rs[0]["timing"], rs[0]["peak_gflops"], g, len(rs),
                   sum(r["verified"] for r in rs)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"timeout_s": a.timeout, "results": results}, f, indent=1)
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(max(8, len(kernels) * 0.45), 4.5))
        w = 0.8 / len(arches)
        for j, arch in enumerate(arches):
            ys = [by[(k, arch)].get("speedup", 0) for k in kernels]
            ax.bar([i + j * w for i in range(len(kernels))], ys, w, label=arch)
        ax.set_yscale("log")
        ax.set_xticks([i + 0.4 - w / 2 for i in range(len(kernels))])
        ax.set_xticklabels(kernels, rotation=70, ha="right", fontsize=8)
        ax.set_ylabel("speed-up over the kernel as written")
        ax.set_title("perfdojo optimize, %g s per kernel (cross targets: modelled)" % a.timeout)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)
        print("\nplot: " + a.plot)


if __name__ == "__main__":
    main()
