#!/usr/bin/env python3
"""Does the learner keep up? Env steps per second of `train_agent` with learning against without.

Three runs of `train_agent --minutes M` on the cost model, one after another, each from a fresh
start with the same seed and settings:

  no learning   --learning_starts beyond reach: the actors alone (acting needs a forward pass)
  sync          --learner sync: step the actors, then make the updates owed (updates_per_step
                per transition), in turn
  async         --learner async: the learner on its own thread beside the actors

For each: env steps/s, updates/s, updates per step, and the geomean of the best speed-ups the
run found on its training kernels; steps/s with learning is also given as a share of steps/s
without. The figures depend on the machine and its load; run it pinned and otherwise idle.

    python3 benchmarks/learner_throughput.py --minutes 1 [--out runs/throughput.csv] [-- EXTRA FLAGS]
"""
import argparse
import csv
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("PERFDOJO_BIN_DIR", os.path.join(HERE, "..", "build", "bin"))


def train(minutes, flags, out_dir):
    cmd = [os.path.join(BIN, "train_agent"), "--minutes", str(minutes), "--no-progress", "--quiet",
           "--json", "--out", out_dir] + flags
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=1.0, help="budget of each run")
    ap.add_argument("--work", default="runs/learner_throughput", help="folder for the runs")
    ap.add_argument("--out", help="CSV of the table")
    ap.add_argument("extra", nargs="*", help="more train_agent flags (after --)")
    a = ap.parse_args()
    modes = [("no learning", ["--learning_starts", "1000000000", "--learner", "sync"]),
             ("sync", ["--learner", "sync"]),
             ("async", ["--learner", "async"])]
    rows = []
    for i, (name, flags) in enumerate(modes):
        print(f"[{i + 1}/{len(modes)}] {name}: {a.minutes} min ...", file=sys.stderr, flush=True)
        s = train(a.minutes, flags + a.extra, os.path.join(a.work, name.replace(" ", "_")))
        t = max(s["elapsed_s"], 1e-9)
        rows.append({"mode": name, "steps": s["global_step"], "updates": s["updates"],
                     "steps_per_s": s["global_step"] / t, "updates_per_s": s["updates"] / t,
                     "updates_per_step": s["updates"] / max(1, s["global_step"]),
                     "geomean_best_speedup": s["geomean_speedup"]})
    base = rows[0]["steps_per_s"]
    print(f"{'mode':<12} {'steps/s':>9} {'share':>6} {'updates/s':>10} {'upd/step':>9} {'best (geomean)':>15}")
    for r in rows:
        r["share_of_no_learning"] = r["steps_per_s"] / base
        print(f"{r['mode']:<12} {r['steps_per_s']:>9.0f} {r['share_of_no_learning']:>6.2f} "
              f"{r['updates_per_s']:>10.1f} {r['updates_per_step']:>9.3f} {r['geomean_best_speedup']:>15.2f}")
    if a.out:
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
