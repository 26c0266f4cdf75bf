#!/usr/bin/env python3
"""Round-trip latency and throughput of the Gym socket bridge on the cost model.

Usage: python3 benchmarks/bridge_latency.py [--seconds S] [--benchmark URI ...] [--clients 1,4,16]
                                            [--vector 1,8]

For each benchmark it prints
  - the C++ env's own step time, in-process (`perfdojo episode --time`, reply encoding included):
    the floor any bridge step sits on;
  - round trips over loopback: `ping` (transport only), `step` through the raw protocol client,
    and `PerfDojoEnv.step` (with decoding into numpy) — median and p90;
  - the same steps as binary frames (docs/bridge.md, "Binary frames");
  - steps/s with 1, 4 and 16 concurrent client processes, each with its own session, and
    env-steps/s of one PerfDojoVectorEnv of 1 and 8 envs.
The workload is one fixed episode (reset, then 30 legal actions drawn from the masks with a
fixed seed), replayed over and over. The server binds 127.0.0.1 only.
"""

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import numpy as np  # noqa: E402

from perfdojo_gym import Client, PerfDojoEnv, PerfDojoVectorEnv, decode_mask  # noqa: E402
from perfdojo_gym import binary  # noqa: E402

STEPS = 30


def start_server(binary, extra=()):
    proc = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", "0", "--json", "--stdin-watch",
                             *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    port = json.loads(proc.stdout.readline())["port"]
    return proc, port


def workload(port, config):
    """The fixed episode: 30 legal actions drawn from the masks with a fixed seed."""
    c = Client("127.0.0.1", port)
    made = c.request("make", config=config)
    s, n = made["session"], made["spaces"]["action_space"]["n"]
    r = c.request("reset", session=s, seed=0)
    rng = random.Random(0)
    actions = []
    for _ in range(STEPS):
        mask = decode_mask(r["info"]["action_mask"], n)
        legal = np.flatnonzero(mask[:-1])
        a = int(rng.choice(legal)) if len(legal) else n - 1
        actions.append(a)
        r = c.request("step", session=s, action=a)
        if r["terminated"] or r["truncated"]:
            break
    c.close()
    return actions


def timed(fn, count):
    out = []
    for _ in range(count):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    return out


def summary(us):
    us = sorted(us)
    q = lambda f: us[int(f * (len(us) - 1))]  # noqa: E731
    return (f"median {statistics.median(us):8.1f} us   p90 {q(0.9):8.1f} us   p99 {q(0.99):8.1f} us"
            f"   (n={len(us)})")


def latency(port, config, actions, seconds):
    c = Client("127.0.0.1", port)
    ping = timed(lambda: c.request("ping"), 2000)
    s = c.request("make", config=config)["session"]
    raw = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        c.request("reset", session=s, seed=0)
        for a in actions:
            t = time.perf_counter()
            c.request("step", session=s, action=a)
            raw.append((time.perf_counter() - t) * 1e6)
    # The same steps as binary frames (one entry each): no JSON on either side.
    sj = c.request("spaces", session=s)
    n, obs_bytes = sj["action_space"]["n"], 4 * sj["observation_spaces"][0]["shape"][0]
    rid, binary_us = 0, []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        c.request("reset", session=s, seed=0)
        for a in actions:
            rid += 1
            t = time.perf_counter()
            binary.decode_batch(c.request_binary(binary.encode(rid, [(s, a, binary.STEP)])), n, obs_bytes)
            binary_us.append((time.perf_counter() - t) * 1e6)
    c.close()
    env = PerfDojoEnv(config["benchmark"], address=f"127.0.0.1:{port}",
                      max_episode_steps=config["max_episode_steps"])
    full = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        env.reset(seed=0)
        for a in actions:
            t = time.perf_counter()
            env.step(a)
            full.append((time.perf_counter() - t) * 1e6)
    env.close()
    return ping, raw, binary_us, full


def vector_rate(port, config, actions, num_envs, seconds):
    """env-steps/s of one PerfDojoVectorEnv: every env replays the fixed episode."""
    vec = PerfDojoVectorEnv(num_envs, config["benchmark"], address=f"127.0.0.1:{port}",
                            max_episode_steps=config["max_episode_steps"])
    steps, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        vec.reset(seed=0)
        for a in actions:
            vec.step([a] * num_envs)
            steps += num_envs
    elapsed = time.monotonic() - start
    vec.close()
    return steps / elapsed


def client_process(port, config, actions, seconds, barrier, out):
    c = Client("127.0.0.1", port)
    s = c.request("make", config=config)["session"]
    barrier.wait()
    steps = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        c.request("reset", session=s, seed=0)
        for a in actions:
            c.request("step", session=s, action=a)
            steps += 1
    out.put(steps)
    c.close()


def throughput(port, config, actions, clients, seconds):
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(clients + 1), ctx.Queue()
    procs = [ctx.Process(target=client_process, args=(port, config, actions, seconds, barrier, out))
             for _ in range(clients)]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.monotonic()
    total = sum(out.get(timeout=seconds + 120) for _ in procs)
    elapsed = time.monotonic() - start
    for p in procs:
        p.join(timeout=30)
    return total / elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="duration of each measurement")
    ap.add_argument("--benchmark", nargs="+", default=["perfdojo://suite/rowsum", "perfdojo://suite/softmax"])
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--vector", default="1,8", help="PerfDojoVectorEnv sizes to time")
    ap.add_argument("--server-args", default="", help="extra perfdojo serve flags, e.g. "
                    "\"--no-inline --poll-us 0\" (with PERFDOJO_POLL_US=0: no polling anywhere)")
    ap.add_argument("--bin-dir", default=os.environ.get("PERFDOJO_BIN_DIR", str(ROOT / "build" / "bin")))
    args = ap.parse_args()
    binary = str(Path(args.bin_dir) / "perfdojo")
    print(f"perfdojo bridge benchmark: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
          f"{args.seconds:g} s per measurement, server flags [{args.server_args}], "
          f"client poll {os.environ.get('PERFDOJO_POLL_US', 'default')} us")
    proc, port = start_server(binary, args.server_args.split())
    try:
        for uri in args.benchmark:
            config = {"benchmark": uri, "max_episode_steps": STEPS + 1}
            actions = workload(port, config)
            local = json.loads(subprocess.run(
                [binary, "episode", "--config", json.dumps(config), "--seed", "0",
                 "--actions", ",".join(map(str, actions)), "--time", "200", "--json"],
                capture_output=True, text=True, check=True).stdout)
            print(f"\n{uri} (cost model, features, {len(actions)} legal actions per episode, "
                  f"{local['reply_bytes_mean']:.0f} reply bytes per step)")
            print(f"  C++ env step, in-process   median {local['step_us_median']:8.1f} us   "
                  f"p90 {local['step_us_p90']:8.1f} us")
            ping, raw, bin_us, full = latency(port, config, actions, args.seconds)
            print(f"  ping round trip            {summary(ping)}")
            print(f"  step round trip (protocol) {summary(raw)}")
            print(f"  step round trip (binary)   {summary(bin_us)}")
            print(f"  PerfDojoEnv.step           {summary(full)}")
            print(f"  bridge overhead per step   {statistics.median(raw) - local['step_us_median']:8.1f} us "
                  "(protocol step median minus in-process step median)")
            for n in [int(x) for x in args.clients.split(",")]:
                rate = throughput(port, config, actions, n, args.seconds)
                print(f"  {n:2d} client(s)              {rate:9.0f} steps/s")
            for n in [int(x) for x in args.vector.split(",")]:
                rate = vector_rate(port, config, actions, n, args.seconds)
                print(f"  PerfDojoVectorEnv({n:2d})      {rate:9.0f} env-steps/s (one client, binary frames)")
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
