#!/usr/bin/env python3
"""Steps/s of the in-process Python env next to the C++ env and the bridge.

Usage: python3 benchmarks/inprocess_bench.py [--seconds S] [--rounds R] [--kernel NAME ...]

The workload is env_bench's BM_Step: the cost model, the flat action space, the mask and the
features, a random legal action every step, 30-step episodes. Per kernel and round, interleaved:
  - C++:          build/bin/env_bench --benchmark_filter=BM_Step/KERNEL$ on one core;
  - in-process:   perfdojo.InProcessEnv on one core (the same core);
  - bridge:       perfdojo_gym.PerfDojoEnv (client and server on that core too);
  - vector of 8:  perfdojo.InProcessVectorEnv(8) on every core the process may use, next to
                  the C++ rate times that many cores and (softmax) env_bench's BM_VectorStep/8.
Each Python measurement runs in a fresh process pinned with os.sched_setaffinity. Prints medians
over the rounds, and the in-process rates as fractions of the C++ one (the goal of issue #26:
at least 0.7). A Python process uses glibc's malloc unless tcmalloc is preloaded
(LD_PRELOAD=libtcmalloc_minimal.so.4, as the C++ programs link it); --tcmalloc does that.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("PERFDOJO_BIN_DIR", ROOT / "build" / "bin"))


def worker(mode: str, kernel: str, seconds: float) -> float:
    sys.path.insert(0, str(ROOT / "python"))
    import numpy as np
    rng = np.random.default_rng(0)
    uri = f"perfdojo://suite/{kernel}"
    if mode == "vector":
        import perfdojo
        n = 8
        env = perfdojo.InProcessVectorEnv(n, uri)
        obs, info = env.reset(seed=0)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            masks = info["action_mask"][:, :-1]
            keys = rng.random(masks.shape) * masks  # a random legal action per env
            actions = keys.argmax(axis=1)
            actions[masks.sum(axis=1) == 0] = env.single_action_space.n - 1
            obs, r, term, trunc, info = env.step(actions)
            steps += n
        return steps / (time.perf_counter() - start)
    if mode == "inprocess":
        import perfdojo
        env = perfdojo.InProcessEnv(uri)
    else:
        from perfdojo_gym import PerfDojoEnv
        env = PerfDojoEnv(uri)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs, info = env.reset(seed=0)
        for _ in range(30):
            legal = np.flatnonzero(info["action_mask"][:-1])
            a = int(legal[int(rng.random() * len(legal))]) if len(legal) else env.action_space.n - 1
            obs, r, term, trunc, info = env.step(a)
            steps += 1
            if term or trunc:
                break
    env.close()
    return steps / (time.perf_counter() - start)


def run_worker(mode, kernel, seconds, cores, tcmalloc):
    env = dict(os.environ, PERFDOJO_BIN_DIR=str(BIN))
    if tcmalloc:
        env["LD_PRELOAD"] = "libtcmalloc_minimal.so.4"
    code = (f"import os, sys; os.sched_setaffinity(0, {sorted(cores)!r}); sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); "
            f"import inprocess_bench as b; print(b.worker({mode!r}, {kernel!r}, {seconds}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def cpp_rate(kernel, seconds, core):
    out = subprocess.run(["taskset", "-c", str(core), str(BIN / "env_bench"),
                          f"--benchmark_filter=BM_Step/{kernel}$", f"--benchmark_min_time={seconds}",
                          "--benchmark_format=json"], capture_output=True, text=True, check=True)
    b = json.loads(out.stdout)["benchmarks"][0]
    return b["items_per_second"]


def cpp_vector_rate(seconds):
    """env_bench's BM_VectorStep/8 (softmax: the C++ VectorEnv of 8 on every allowed core)."""
    out = subprocess.run([str(BIN / "env_bench"), "--benchmark_filter=BM_VectorStep/8",
                          f"--benchmark_min_time={seconds}", "--benchmark_format=json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["benchmarks"][0]["items_per_second"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kernel", nargs="+", default=["softmax", "attention"])
    ap.add_argument("--tcmalloc", action="store_true", help="preload tcmalloc into the Python processes")
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    one = cores[-1]
    print(f"in-process benchmark: cores {cores} (single-env runs on core {one}), {args.seconds:g} s x "
          f"{args.rounds} rounds, interleaved; Python malloc: {'tcmalloc' if args.tcmalloc else 'glibc'}")
    for kernel in args.kernel:
        rows = {k: [] for k in ("cpp", "inprocess", "bridge", "vector", "cpp_vector")}
        for _ in range(args.rounds):
            rows["cpp"].append(cpp_rate(kernel, args.seconds, one))
            rows["inprocess"].append(run_worker("inprocess", kernel, args.seconds, [one], args.tcmalloc))
            rows["bridge"].append(run_worker("bridge", kernel, args.seconds, [one], args.tcmalloc))
            rows["vector"].append(run_worker("vector", kernel, args.seconds, cores, args.tcmalloc))
            if kernel == "softmax":
                rows["cpp_vector"].append(cpp_vector_rate(args.seconds))
        med = {k: statistics.median(v) for k, v in rows.items() if v}
        c = med["cpp"]
        print(f"\n{kernel}")
        print(f"  C++ env_bench BM_Step, one core        {c:9.0f} steps/s")
        print(f"  InProcessEnv, one core                 {med['inprocess']:9.0f} steps/s   {med['inprocess'] / c:5.2f} of C++")
        print(f"  PerfDojoEnv over the bridge, one core  {med['bridge']:9.0f} steps/s   {med['bridge'] / c:5.2f} of C++")
        print(f"  InProcessVectorEnv(8), {len(cores)} cores        {med['vector']:9.0f} env-steps/s "
              f"{med['vector'] / (c * len(cores)):5.2f} of C++ x {len(cores)} cores")
        if "cpp_vector" in med:
            print(f"  C++ VectorEnv(8) (BM_VectorStep/8)     {med['cpp_vector']:9.0f} env-steps/s "
                  f"(in-process vector: {med['vector'] / med['cpp_vector']:4.2f} of it)")


if __name__ == "__main__":
    main()
