#!/usr/bin/env python3
"""Scale-out figures on a Ray cluster of two nodes on this machine (docs/ray.md):

- rollout throughput of RLlib PPO's env runners (cost-model rewards, masked module), with 1 and
  2 env runners: env steps sampled per second, all runners sampling at once;
- the optimiser's measured candidates per minute (`perfdojo optimize --workers ray:...`,
  report.json's `measurements` over the budget) with 1 and 2 measuring actors.

Each farm run gets a cluster of its own with an empty result cache, so nothing is answered from
an earlier run. Prints the ISA and the calibrated FMA peak as the other benchmarks do.

Run under .venv-rl from the repository root:
    PYTHONPATH=python PERFDOJO_BIN_DIR=build/bin .venv-rl/bin/python benchmarks/ray_scaling.py
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import ray

from perfdojo_ray.cluster import LocalCluster


def machine() -> dict:
    bin_dir = os.environ.get("PERFDOJO_BIN_DIR", "build/bin")
    w = subprocess.run([os.path.join(bin_dir, "perfdojo"), "measure-worker"], input="",
                       capture_output=True, text=True, timeout=120)
    return json.loads(w.stdout.splitlines()[0])


def rollouts(address: str, runners: int, steps: int, rounds: int) -> float:
    from perfdojo_ray.rllib import ppo_config

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        algo = ppo_config("perfdojo://suite/softmax", num_env_runners=runners).build()

        def sample(r):
            return sum(len(e) for e in r.sample(num_timesteps=steps))

        group = algo.env_runner_group
        group.foreach_env_runner(sample, local_env_runner=False)  # warm: servers started
        t0 = time.perf_counter()
        total = 0
        for _ in range(rounds):
            total += sum(group.foreach_env_runner(sample, local_env_runner=False))
        rate = total / (time.perf_counter() - t0)
        algo.stop()
        return rate
    finally:
        ray.shutdown()


def farm_run(actors: int, kernel: str, budget: float) -> dict:
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        # A fresh result cache for the actors (their calibrated profiles stay where they are).
        with LocalCluster(nodes=2, cpus_per_node=1, env={"XDG_CACHE_HOME": cache}) as c:
            env = dict(os.environ, PERFDOJO_FARM_PYTHON=sys.executable,
                       PERFDOJO_FARM_MAX_WORKERS=str(actors), XDG_CACHE_HOME=cache)
            bin_dir = os.environ.get("PERFDOJO_BIN_DIR", "build/bin")
            run = subprocess.run([os.path.join(bin_dir, "perfdojo"), "optimize", kernel,
                                  "--timeout", str(budget), "--workers", "ray:" + c.address,
                                  "--no-cache", "--out", out], env=env, capture_output=True,
                                 text=True, timeout=budget + 300)
            if run.returncode != 0:
                raise RuntimeError(run.stderr.replace("\r", "\n")[-2000:])
            report = json.load(open(os.path.join(out, "report.json")))
            return {"measurements": report["measurements"], "speedup": report["speedup"],
                    "per_minute": report["measurements"] / (budget / 60),
                    "workers": report["workers"]["workers"], "nodes": report["workers"]["nodes"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=256, help="env steps each runner samples a round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kernel", default="kernels/softmax.pdj")
    ap.add_argument("--budget", type=float, default=40, help="optimize --timeout of each farm run")
    args = ap.parse_args()
    m = machine()
    print(f"machine: {m['isa']}, {os.cpu_count()} cores, calibrated FMA peak "
          f"{m['peak_gflops']:.1f} GFLOP/s per core ({m['profile']}); cluster: 2 Ray nodes on "
          f"this machine, 1 CPU each", flush=True)
    with LocalCluster(nodes=2, cpus_per_node=1) as c:
        for n in (1, 2):
            rate = rollouts(c.address, n, args.steps, args.rounds)
            print(f"rollouts: {n} env runner(s): {rate:.0f} env steps/s "
                  f"(cost-model rewards, {args.rounds} x {args.steps} steps a runner)", flush=True)
    for k in (1, 2):
        r = farm_run(k, args.kernel, args.budget)
        print(f"farm: {k} measuring actor(s) on {r['nodes']} node(s): {r['measurements']} "
              f"measurements in {args.budget:.0f} s = {r['per_minute']:.0f} per minute "
              f"({os.path.basename(args.kernel)}, speed-up {r['speedup']:.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
