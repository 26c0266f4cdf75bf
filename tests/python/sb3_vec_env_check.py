#!/usr/bin/env python3
"""PerfDojoSB3VecEnv against SB3's own DummyVecEnv of PerfDojoEnvs, and sb3-contrib's
MaskablePPO training on it. Run with the RL interpreter (.venv-rl/bin/python); prints one JSON
line of what it compared and found (tests/python/test_sb3.py asserts on it)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sb3_contrib import MaskablePPO  # noqa: E402
from sb3_contrib.common.maskable.utils import get_action_masks  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor  # noqa: E402

from perfdojo_gym import PerfDojoEnv, SharedServer  # noqa: E402
from perfdojo_gym.sb3 import PerfDojoSB3VecEnv  # noqa: E402

BENCH = "perfdojo://suite/softmax"
N, EPISODE, STEPS = 3, 4, 14


def same(x, y):
    """Equal observations: arrays, or dicts of arrays (several observation spaces)."""
    if isinstance(x, dict) or isinstance(y, dict):
        return (isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys()
                and all(np.array_equal(x[k], y[k]) for k in x))
    return np.array_equal(x, y)


def compare(spaces):
    """Both vector envs, seeded alike, stepped with the same legal actions across episode ends:
    every observation, reward, done, mask and end-of-episode info must agree."""
    ours = PerfDojoSB3VecEnv(N, BENCH, max_episode_steps=EPISODE, observation_spaces=spaces)
    theirs = DummyVecEnv([lambda i=i: PerfDojoEnv(BENCH, max_episode_steps=EPISODE, seed=i,
                                                  observation_spaces=spaces)
                          for i in range(N)])
    ours.seed(7)
    theirs.seed(7)
    a, b = ours.reset(), theirs.reset()
    mismatches, ends = [], 0
    if not same(a, b):
        mismatches.append("reset observation")
    rng = np.random.default_rng(0)
    for t in range(STEPS):
        ma, mb = get_action_masks(ours), get_action_masks(theirs)
        if not np.array_equal(ma, mb):
            mismatches.append(f"step {t}: masks")
        actions = np.array([rng.choice(np.flatnonzero(m[:-1])) for m in ma])
        oa, ra, da, ia = ours.step(actions)
        ob, rb, db, ib = theirs.step(actions)
        for name, x, y in (("observation", oa, ob), ("reward", ra, rb), ("done", da, db)):
            if not same(x, y):
                mismatches.append(f"step {t}: {name}")
        for i in range(N):
            if db[i]:
                ends += 1
                if not same(ia[i]["terminal_observation"], ib[i]["terminal_observation"]):
                    mismatches.append(f"step {t} env {i}: terminal_observation")
                if ia[i]["TimeLimit.truncated"] != ib[i]["TimeLimit.truncated"]:
                    mismatches.append(f"step {t} env {i}: TimeLimit.truncated")
            if not db[i] and ia[i]["best_time_s"] != ib[i]["best_time_s"]:
                mismatches.append(f"step {t} env {i}: best_time_s")
    ours.close()
    theirs.close()
    return {"mismatches": mismatches, "episode_ends": ends, "steps": STEPS * N}


def train():
    env = VecMonitor(PerfDojoSB3VecEnv(4, BENCH, max_episode_steps=8))
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=64, seed=0, verbose=0, device="cpu")
    model.learn(total_timesteps=512)
    obs = env.reset()
    masks = get_action_masks(env)
    actions, _ = model.predict(obs, action_masks=masks, deterministic=True)
    legal = bool(all(masks[i][a] for i, a in enumerate(actions)))
    episodes = len(model.ep_info_buffer)
    env.close()
    return {"timesteps": int(model.num_timesteps), "episodes_logged": episodes, "masks_shape": list(masks.shape),
            "predicted_legal": legal}


def refusals():
    """What the adapter refuses, each with the error it raises (None: not refused)."""
    out = {}
    try:
        PerfDojoSB3VecEnv(2, BENCH, autoreset_mode="next_step")
        out["autoreset_mode"] = None
    except ValueError as e:
        out["autoreset_mode"] = str(e)
    env = PerfDojoSB3VecEnv(2, BENCH)
    env.reset()
    try:
        env.step_wait()
        out["step_wait_first"] = None
    except RuntimeError as e:
        out["step_wait_first"] = str(e)
    env.close()
    return out


def main():
    torch.set_num_threads(1)
    with SharedServer():  # one server for both vector envs (they read its address)
        out = {"compare": compare(["features"]), "compare_dict": compare(["features", "tokens"]),
               "train": train(), "refusals": refusals()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
