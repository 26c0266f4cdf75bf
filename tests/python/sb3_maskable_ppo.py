#!/usr/bin/env python3
"""Unmodified sb3-contrib MaskablePPO learns on a shipped kernel through the bridge.

Run with the RL interpreter scripts/bootstrap prepares (.venv-rl/bin/python: Debian's PyTorch,
Stable-Baselines3 2.4 and sb3-contrib 2.4 from PyPI):

    .venv-rl/bin/python tests/python/sb3_maskable_ppo.py [--benchmark URI] [--timesteps N]
        [--seed S] [--reward-space NAME] [--stop-always] [--json]

Prints the greedy episode's return and speed-up next to those of the stop-first policy (return
0, speed-up 1) and of a random legal policy; exits 0 whatever the outcome (the test asserts).
"""

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sb3_contrib import MaskablePPO  # noqa: E402

from perfdojo_gym import PerfDojoEnv, require_spaces  # noqa: E402


def greedy_episode(model, env):
    obs, info = env.reset(seed=0)
    total, steps, first = 0.0, 0, None
    while True:
        action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
        first = int(action) if first is None else first
        obs, r, term, trunc, info = env.step(int(action))
        total += r
        steps += 1
        if term or trunc:
            break
    return {"return": total, "steps": steps, "first_action_is_stop": bool(first == int(env.action_space.n) - 1),
            "speedup": info["initial_time_s"] / info["best_time_s"]}


def random_episodes(env, episodes, seed):
    rng = np.random.default_rng(seed)
    returns = []
    for _ in range(episodes):
        obs, info = env.reset(seed=0)
        total = 0.0
        while True:
            legal = np.flatnonzero(info["action_mask"])
            obs, r, term, trunc, info = env.step(int(rng.choice(legal)))
            total += r
            if term or trunc:
                break
        returns.append(total)
    return float(np.mean(returns))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--benchmark", default="perfdojo://suite/softmax")
    ap.add_argument("--timesteps", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reward-space", default=None, help="default: the env's (log_speedup_best)")
    ap.add_argument("--episode-steps", type=int, default=16)
    ap.add_argument("--stop-always", action="store_true",
                    help="stop legal from the first step (stop_after_progress=false)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    env = PerfDojoEnv(args.benchmark, reward_space=args.reward_space,
                      max_episode_steps=args.episode_steps,
                      stop_after_progress=False if args.stop_always else None)
    require_spaces(env, "sb3")
    t0 = time.perf_counter()
    model = MaskablePPO("MlpPolicy", env, n_steps=512, batch_size=128, seed=args.seed, verbose=0,
                        device="cpu")
    model.learn(total_timesteps=args.timesteps)
    train_s = time.perf_counter() - t0
    out = {"benchmark": args.benchmark, "timesteps": args.timesteps, "seed": args.seed,
           "reward_space": env._spaces_json["reward_space"],
           "stop_after_progress": env._spaces_json["stop_after_progress"], "train_s": round(train_s, 1),
           "greedy": greedy_episode(model, env), "stop_first_return": 0.0,
           "random_mean_return": random_episodes(env, 20, args.seed)}
    env.close()
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
