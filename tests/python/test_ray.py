"""PerfDojo on a Ray cluster of two nodes on this machine (docs/ray.md): RLlib PPO with one env
runner on each node, each talking to its own `perfdojo serve`, and `perfdojo optimize --workers
ray://...` whose measurements go to actors on both nodes. Runs tests/python/ray_cluster_check.py
under .venv-rl, where scripts/bootstrap installs Ray 2.48 with RLlib on Debian's PyTorch."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RL_PYTHON = ROOT / ".venv-rl" / "bin" / "python"
BIN_DIR = Path(os.environ.get("PERFDOJO_BIN_DIR", ROOT / "build" / "bin"))


def rl_python_with_ray() -> Path:
    if not RL_PYTHON.exists():
        cache = ROOT / "build" / "CMakeCache.txt"
        if cache.exists() and "PERFDOJO_BUILD_AGENTS:BOOL=OFF" in cache.read_text():
            pytest.skip("skipped: built without the agents, so scripts/bootstrap prepared no "
                        ".venv-rl (Ray and RLlib on Debian's PyTorch)")
        pytest.fail(f"{RL_PYTHON} is missing: run scripts/bootstrap")
    probe = subprocess.run([str(RL_PYTHON), "-c", "import ray, ray.rllib"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        pytest.fail(f"Ray is not importable in .venv-rl (run scripts/bootstrap): {probe.stderr[-500:]}")
    return RL_PYTHON


@pytest.mark.slow
def test_ppo_runners_and_measurement_actors_spread_over_two_nodes():
    python = rl_python_with_ray()
    env = dict(os.environ, PERFDOJO_BIN_DIR=str(BIN_DIR),
               PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
    env.pop("PERFDOJO_BRIDGE_ADDRESS", None)
    run = subprocess.run([str(python), str(ROOT / "tests" / "python" / "ray_cluster_check.py")],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=420)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    # Whatever else happened, the cluster is gone: no process of it is left.
    assert out["left_processes"] == [], out
    assert "error" not in out, out
    assert len(out["nodes"]) == 2, out

    # Two PPO iterations, each sampling a full batch from the two runners.
    assert [i["steps"] for i in out["iterations"]] == [256, 256], out["iterations"]
    runners = out["runners"]
    assert len(runners) == 2
    assert {r["node"] for r in runners} == set(out["nodes"]), "one env runner on each node"
    for r in runners:  # each runner started a server of its own, alive while it sampled
        assert len(r["servers"]) == 1 and r["servers"][0]["alive"], r
    assert runners[0]["servers"][0]["pid"] != runners[1]["servers"][0]["pid"]

    # The optimiser's measurements went to actors on both nodes, and its result is verified.
    assert out["optimize_rc"] == 0, out["optimize_stderr_tail"]
    report = out["report"]
    # What this checks is where the measurements ran and that the result is verified; the
    # speed-up is a speed goal (benchmarks/): softmax gains 7x when the machine is idle, but one
    # loaded Zen 3 run (pytest -n 2) returned the original unchanged after 23 measurements.
    assert report["verified"] is True and report["speedup"] >= 1, report
    assert report["workers"]["workers"] == 2 and report["workers"]["nodes"] == 2, report
    per_node = out["per_node"]
    assert sorted(per_node) == sorted(n[:12] for n in out["nodes"]), per_node
    assert all(count >= 1 for count in per_node.values()), per_node


def test_the_farm_survives_a_worker_that_dies_and_one_that_stalls():
    """The farm's failover, with stand-in actors on a one-node Ray (ray_farm_failover_check.py):
    every request is answered once, by the live worker; the dead and the silent one are dropped;
    with none left a request gets an error reply and the farm exits 1."""
    python = rl_python_with_ray()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([str(python), str(ROOT / "tests" / "python" / "ray_farm_failover_check.py")],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert "error" not in out, out
    assert out["rc"] == 0
    assert sorted(r["id"] for r in out["replies"]) == [1, 1, 2], out["replies"]
    assert all(r["ok"] and r["worker"] == "answanswansw" for r in out["replies"]), out["replies"]
    assert out["left"] == ["answers"], out
    assert out["alone_rc"] == 1
    assert len(out["alone_replies"]) == 1 and not out["alone_replies"][0]["ok"]
    assert "no measuring worker left" in out["alone_replies"][0]["error"]
