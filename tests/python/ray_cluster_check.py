"""Runs under .venv-rl (Ray 2.48 with RLlib): a Ray cluster of two nodes on this machine, PPO
for two iterations with two env runners (one per node, each with its own `perfdojo serve`), then
`perfdojo optimize --workers ray:HEAD:PORT` whose measurements go to actors on both nodes. Prints one
JSON line of what it saw; tests/python/test_ray.py asserts on it. Every process of the cluster is
ended on the way out, whatever happened."""

import json
import os
import subprocess
import sys
import tempfile
import time

import ray

from perfdojo_ray.cluster import LocalCluster


def main() -> int:
    out = {}
    t0 = time.monotonic()
    cluster = LocalCluster(nodes=2, cpus_per_node=1)
    try:
        cluster.start()
        out["start_s"] = time.monotonic() - t0
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        out["nodes"] = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        from perfdojo_ray.rllib import ppo_config, runner_info

        algo = ppo_config("perfdojo://suite/softmax", num_env_runners=2).build()
        out["iterations"] = []
        for _ in range(2):
            r = algo.train()["env_runners"]
            out["iterations"].append({"steps": r.get("num_env_steps_sampled"),
                                      "return_mean": r.get("episode_return_mean")})
        out["runners"] = algo.env_runner_group.foreach_env_runner(runner_info, local_env_runner=False)
        algo.stop()
        ray.shutdown()
        out["ppo_s"] = time.monotonic() - t0
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, PERFDOJO_FARM_PYTHON=sys.executable)
            bin_dir = os.environ.get("PERFDOJO_BIN_DIR", "build/bin")
            run = subprocess.run([os.path.join(bin_dir, "perfdojo"), "optimize", "kernels/softmax.pdj",
                                  "--timeout", "20", "--workers", "ray:" + cluster.address,
                                  "--out", d], env=env, capture_output=True, text=True, timeout=240)
            out["optimize_rc"] = run.returncode
            farm_lines = [l for l in run.stderr.replace("\r", "\n").splitlines() if l.startswith("[farm]")]
            out["farm_log"] = farm_lines
            out["optimize_stderr_tail"] = run.stderr.replace("\r", "\n")[-1500:]
            for line in farm_lines:
                if "measured per node:" in line:
                    out["per_node"] = json.loads(line.split("measured per node:")[1].split(";")[0])
            if os.path.exists(os.path.join(d, "report.json")):
                report = json.load(open(os.path.join(d, "report.json")))
                out["report"] = {k: report.get(k) for k in ("speedup", "verified", "measurements", "workers")}
        out["total_s"] = time.monotonic() - t0
    except Exception as e:  # noqa: BLE001 -- reported in the JSON line, asserted by the test
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        out["left_processes"] = cluster.stop()
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
