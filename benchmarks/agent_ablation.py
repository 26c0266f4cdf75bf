#!/usr/bin/env python3
"""Max-Q against the standard DQN target, and the flat Q-head against the factored one: the same
agent trained with each, several seeds, evaluated on held-out kernels.

For each target (`maxq`, `sum`), head (`--heads`) and training seed, `train_agent --steps N --seed
S --target T --head H` on the cost model, then `evaluate_agent --budgets 10,100,1000 --seeds E --baselines` on the test
split. Prints, per method and budget, the geomean best speed-up over the test kernels as the mean
± standard deviation over training seeds (the baselines do not depend on the training run; they
are shown once per seed set as a reference), and writes the rows as CSV.

    python3 benchmarks/agent_ablation.py --steps 20000 --train-seeds 1,2,3 --out runs/ablation

Everything runs on the cost model, so with --steps the figures are deterministic for a given
build: the checkpoints of identical runs are identical bytes.

Held-out families instead of the test split, on a wall-clock budget (asynchronous learner):

    python3 benchmarks/agent_ablation.py --minutes 10 --targets maxq --heads flat,factored \
        --train-kernels except:conv,norm --eval-kernels family:conv,norm
"""
import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("PERFDOJO_BIN_DIR", os.path.join(HERE, "..", "build", "bin"))


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20000, help="training env steps per run")
    ap.add_argument("--minutes", type=float, default=0,
                    help="wall-clock training budget per run instead of --steps (learner async by default)")
    ap.add_argument("--train-kernels", default="train", help="train_agent --kernels")
    ap.add_argument("--eval-kernels", default="test", help="evaluate_agent --kernels")
    ap.add_argument("--learner", default="auto", help="train_agent --learner: auto, sync or async")
    ap.add_argument("--train-seeds", default="1,2,3")
    ap.add_argument("--eval-seeds", type=int, default=3)
    ap.add_argument("--budgets", default="10,100,1000")
    ap.add_argument("--targets", default="maxq,sum")
    ap.add_argument("--heads", default="factored", help="train_agent --head values: flat, factored")
    ap.add_argument("--out", default="runs/ablation")
    args = ap.parse_args()
    seeds = [int(s) for s in args.train_seeds.split(",")]
    targets = args.targets.split(",")
    heads = args.heads.split(",")
    # One configuration per (target, head), named by what varies.
    configs = [(t, h) for t in targets for h in heads]
    def name(t, h):
        return "/".join(x for x, many in ((t, len(targets) > 1), (h, len(heads) > 1)) if many) or t
    budgets = [int(b) for b in args.budgets.split(",")]
    os.makedirs(args.out, exist_ok=True)
    rows = []  # (configuration, seed, method, budget, geomean)
    total = len(seeds) * len(configs)
    t0 = time.time()
    done = 0
    for target, head in configs:
        for seed in seeds:
            out = os.path.join(args.out, f"{target}-{head}-{seed}")
            budget = ["--minutes", str(args.minutes)] if args.minutes > 0 else ["--steps", str(args.steps)]
            run([os.path.join(BIN, "train_agent"), *budget, "--seed", str(seed), "--target", target,
                 "--head", head, "--kernels", args.train_kernels, "--learner", args.learner, "--out", out, "--quiet"])
            ev = json.loads(run([os.path.join(BIN, "evaluate_agent"), "--checkpoint",
                                 os.path.join(out, "agent.ckpt"), "--kernels", args.eval_kernels,
                                 "--budgets", args.budgets, "--seeds", str(args.eval_seeds), "--baselines",
                                 "--json"]))
            by = {}
            for r in ev["results"]:
                by.setdefault((r["method"], r["budget"]), []).append(r["speedup"])
            for (method, budget), xs in by.items():
                rows.append((name(target, head), seed, method, budget, geomean(xs)))
            done += 1
            rate = done / (time.time() - t0)
            print(f"[{done}/{total}] {target} {head} seed {seed}  {rate * 60:.1f} runs/min  "
                  f"ETA {(total - done) / rate:.0f} s", file=sys.stderr, flush=True)
    with open(os.path.join(args.out, "ablation.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["configuration", "train_seed", "method", "budget", "geomean_speedup"])
        w.writerows(rows)
    methods = ["agent", "agent-rollout", "agent-greedy", "agent-probe", "random", "greedy", "beam", "eager"]
    length = f"{args.minutes} min" if args.minutes > 0 else f"{args.steps} steps"
    print(f"geomean best speed-up on {args.eval_kernels} (trained on {args.train_kernels}), mean ± sd over "
          f"training seeds {args.train_seeds} ({length} each, learner {args.learner}, {args.eval_seeds} evaluation seeds)")
    print("| configuration | method | " + " | ".join(f"budget {b}" for b in budgets) + " |")
    print("|---|---|" + "---|" * len(budgets))
    for config in [name(t, h) for t, h in configs]:
        for method in methods:
            cells = []
            for b in budgets:
                xs = [g for (t, s, m, bb, g) in rows if t == config and m == method and bb == b]
                if not xs:
                    cells.append("-")
                    continue
                sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
                cells.append(f"{statistics.mean(xs):.2f} ± {sd:.2f}")
            print(f"| {config} | {method} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
