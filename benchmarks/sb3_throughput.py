#!/usr/bin/env python3
"""Env steps/s of unmodified sb3-contrib MaskablePPO on PerfDojo, by vector env.

Usage: .venv-rl/bin/python benchmarks/sb3_throughput.py [--envs 4] [--timesteps 4096]
                                                        [--benchmark URI]

Trains MaskablePPO (MlpPolicy, n_steps 128 per env, one torch thread, CPU) for the same number
of env steps on three vector envs of `--envs` envs each, all on one shared local server:
  - DummyVecEnv of PerfDojoEnv (SB3's default: one JSON round trip per env and step),
  - SubprocVecEnv of PerfDojoEnv (a worker process per env, all on the shared server),
  - PerfDojoSB3VecEnv (one binary round trip steps every env; the server runs them in parallel),
and prints env steps/s of each: with learning (the rate a user sees; PPO's updates take most of
it) and of rollouts alone (the trained policy's masked predictions and the env steps, the part
a vector env can speed up).
"""

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
from sb3_contrib import MaskablePPO  # noqa: E402
from sb3_contrib.common.maskable.utils import get_action_masks  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecMonitor  # noqa: E402

from perfdojo_gym import PerfDojoEnv, SharedServer  # noqa: E402
from perfdojo_gym.sb3 import PerfDojoSB3VecEnv  # noqa: E402


def rate(make, timesteps):
    """(env steps/s while learning, env steps/s of rollouts alone)."""
    env = VecMonitor(make())
    model = MaskablePPO("MlpPolicy", env, n_steps=128, batch_size=128, seed=0, verbose=0, device="cpu")
    start = time.perf_counter()
    model.learn(total_timesteps=timesteps)
    learning = model.num_timesteps / (time.perf_counter() - start)
    obs, steps = env.reset(), 0
    start = time.perf_counter()
    while steps < timesteps:
        actions, _ = model.predict(obs, action_masks=get_action_masks(env))
        obs, _, _, _ = env.step(actions)
        steps += env.num_envs
    rollout = steps / (time.perf_counter() - start)
    env.close()
    return learning, rollout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--envs", type=int, default=4)
    ap.add_argument("--timesteps", type=int, default=4096)
    ap.add_argument("--benchmark", default="perfdojo://suite/softmax")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    n, bench = args.envs, args.benchmark
    one = lambda: PerfDojoEnv(bench, max_episode_steps=16)  # noqa: E731
    out = {}
    with SharedServer():
        out["DummyVecEnv"] = rate(lambda: DummyVecEnv([one] * n), args.timesteps)
        out["SubprocVecEnv"] = rate(lambda: SubprocVecEnv([one] * n, start_method="fork"), args.timesteps)
        out["PerfDojoSB3VecEnv"] = rate(lambda: PerfDojoSB3VecEnv(n, bench, max_episode_steps=16), args.timesteps)
    if args.json:
        print(json.dumps({"envs": n, "benchmark": bench,
                          "steps_per_s": {k: {"learning": v[0], "rollout": v[1]} for k, v in out.items()}}))
    else:
        print(f"MaskablePPO on {bench}, {n} envs, {args.timesteps} env steps; env steps/s")
        print(f"  {'vector env':18s} {'learning':>9s} {'rollouts':>9s}")
        for k, (learning, rollout) in out.items():
            print(f"  {k:18s} {learning:9.0f} {rollout:9.0f}")


if __name__ == "__main__":
    main()
