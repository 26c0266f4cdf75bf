"""A Ray cluster of several nodes on this one machine, for tests and benchmarks: `ray start
--head`, then more nodes joining it, each with its own CPUs and a custom resource naming it
(node0, node1, ...), in a temporary folder of their own. Stopping ends every process whose
command line names that folder (Ray's own processes and its workers), and nothing else: another
Ray on the machine is left alone.

    with LocalCluster(nodes=2, cpus_per_node=1) as c:
        ray.init(address=c.address)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_executable() -> str:
    """The `ray` command of the interpreter running this (its virtualenv's bin/)."""
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else (shutil.which("ray") or "ray")


class LocalCluster:
    def __init__(self, nodes: int = 2, cpus_per_node: float = 1, object_store_mb: int = 100,
                 env: dict | None = None):
        self.nodes, self.cpus = nodes, cpus_per_node
        self.object_store = object_store_mb * 1024 * 1024
        self.env = dict(os.environ, **(env or {}))
        self.env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self.env.setdefault("OMP_NUM_THREADS", "1")  # two cores: torch must not take both
        # Short path: Ray's socket names under it must fit in 107 bytes.
        self.tmp = tempfile.mkdtemp(prefix="pdray-", dir="/tmp")
        self.port = free_port()
        self.client_port = free_port()
        # Every process of the cluster inherits this, so stop() finds them all, whichever node.
        self.env["PERFDOJO_RAY_CLUSTER"] = self.tmp
        self.address = f"127.0.0.1:{self.port}"
        self.client_address = f"ray://127.0.0.1:{self.client_port}"

    def _ray(self, *args: str, timeout: float = 120) -> None:
        run = subprocess.run([ray_executable(), *args], env=self.env, capture_output=True,
                             text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if run.returncode != 0:
            raise RuntimeError(f"ray {' '.join(args)} failed (exit {run.returncode}):\n"
                               f"{run.stdout[-2000:]}\n{run.stderr[-2000:]}")

    def start(self) -> "LocalCluster":
        common = [f"--num-cpus={self.cpus}", f"--object-store-memory={self.object_store}",
                  "--disable-usage-stats"]
        try:
            self._ray("start", "--head", "--node-ip-address=127.0.0.1", f"--port={self.port}",
                      f"--ray-client-server-port={self.client_port}", "--include-dashboard=false",
                      f"--temp-dir={self.tmp}", '--resources={"node0": 1}', *common)
            for k in range(1, self.nodes):
                self._ray("start", f"--address={self.address}", "--node-ip-address=127.0.0.1",
                          f'--resources={{"node{k}": 1}}', *common)
        except BaseException:
            self.stop()
            raise
        return self

    def processes(self) -> list[int]:
        """Pids of the processes that belong to this cluster (their command line or environment
        names its folder)."""
        pids = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == os.getpid():
                continue
            try:
                cmd = (d / "cmdline").read_bytes()
                envb = (d / "environ").read_bytes()
            except OSError:
                continue
            if self.tmp.encode() in cmd or self.tmp.encode() in envb:
                pids.append(int(d.name))
        return pids

    def stop(self, grace_s: float = 10) -> list[int]:
        """Ends the cluster's processes (TERM, then KILL after `grace_s`); returns those still
        there afterwards (none, unless the kernel refused)."""
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5)):
            for pid in self.processes():
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            deadline = time.monotonic() + wait
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.2)
        left = self.processes()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return left

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
