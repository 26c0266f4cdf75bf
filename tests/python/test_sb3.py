"""Unmodified sb3-contrib MaskablePPO learns a policy on a shipped kernel that beats stopping at
once (docs/env.md, "Rewards"), and PerfDojoSB3VecEnv behaves as SB3's DummyVecEnv does. Runs
tests/python/sb3_maskable_ppo.py and sb3_vec_env_check.py under .venv-rl, the interpreter
scripts/bootstrap prepares with Stable-Baselines3 on Debian's PyTorch."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RL_PYTHON = ROOT / ".venv-rl" / "bin" / "python"
BIN_DIR = Path(os.environ.get("PERFDOJO_BIN_DIR", ROOT / "build" / "bin"))


def agents_off():
    cache = ROOT / "build" / "CMakeCache.txt"
    return cache.exists() and "PERFDOJO_BUILD_AGENTS:BOOL=OFF" in cache.read_text()


def test_maskable_ppo_learns_to_beat_the_stop_first_policy(tmp_path):
    if not RL_PYTHON.exists():
        if agents_off():
            pytest.skip("skipped: built without the agents, so scripts/bootstrap prepared no .venv-rl "
                        "(Stable-Baselines3 on Debian's PyTorch)")
        pytest.fail(f"{RL_PYTHON} is missing: run scripts/bootstrap")
    # SB3_LOGDIR: SB3's default logger makes a folder in the system's temporary folder per model.
    env = dict(os.environ, PERFDOJO_BIN_DIR=str(BIN_DIR), SB3_LOGDIR=str(tmp_path / "sb3"))
    env.pop("PERFDOJO_BRIDGE_ADDRESS", None)
    run = subprocess.run([str(RL_PYTHON), str(ROOT / "tests" / "python" / "sb3_maskable_ppo.py"),
                          "--json", "--seed", "0", "--timesteps", "4096"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    greedy = out["greedy"]
    # The stop-first policy returns 0 and keeps the kernel as it is (speed-up 1).
    assert not greedy["first_action_is_stop"], out
    assert greedy["return"] > 0.1, out
    assert greedy["speedup"] > 1.1, out
    assert out["reward_space"] == "log_speedup_best" and out["stop_after_progress"] is True


def test_the_sb3_vec_env_matches_dummy_vec_env_and_maskable_ppo_trains_on_it(tmp_path):
    if not RL_PYTHON.exists():
        if agents_off():
            pytest.skip("skipped: built without the agents, so scripts/bootstrap prepared no .venv-rl "
                        "(Stable-Baselines3 on Debian's PyTorch)")
        pytest.fail(f"{RL_PYTHON} is missing: run scripts/bootstrap")
    # Its training logs go under the test's folder, not the system's temporary folder.
    env = dict(os.environ, PERFDOJO_BIN_DIR=str(BIN_DIR), SB3_LOGDIR=str(tmp_path / "sb3"))
    env.pop("PERFDOJO_BRIDGE_ADDRESS", None)
    env.pop("PERFDOJO_BRIDGE_TOKEN", None)
    run = subprocess.run([str(RL_PYTHON), str(ROOT / "tests" / "python" / "sb3_vec_env_check.py")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    # Same seeds and actions as SB3's own DummyVecEnv of PerfDojoEnvs, across episode ends.
    for key in ("compare", "compare_dict"):  # features alone; features and tokens as a dict
        assert out[key]["mismatches"] == [], out
        assert out[key]["episode_ends"] >= 6, out
    train = out["train"]
    assert train["timesteps"] == 512 and train["episodes_logged"] > 0, out
    assert train["masks_shape"][0] == 4 and train["predicted_legal"], out
    assert "autoreset_mode is not an option" in (out["refusals"]["autoreset_mode"] or ""), out
    assert "without step_async" in (out["refusals"]["step_wait_first"] or ""), out
