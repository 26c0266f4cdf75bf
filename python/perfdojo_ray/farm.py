"""The measurement farm: measurements of the optimiser's candidates fanned out to Ray actors.

`perfdojo optimize --workers ray://HOST:PORT` starts `python -m perfdojo_ray.farm --address
ray://HOST:PORT` and speaks the farm protocol (backends/remote_backend.h) with it on stdin and
stdout: a ready line, then one request a line, answered in any order. The farm places one
`MeasureWorker` actor on every node of the cluster (`--actors-per-node` more); each keeps a
`perfdojo measure-worker` running on its node, which measures on that machine with that
machine's own calibrated profile.

Which actor measures what: the times that decide (verified measurements and interleaved
comparisons) all come from one actor, the primary, so the baseline, the best so far and each
challenger are timed on the same machine; the unverified screening runs, which only rank
candidates, are spread over every actor. Results are cached by (program hashes, backend,
options, the actor's machine profile): a candidate asked for again is answered from the cache.

A worker that dies, raises or stays silent past its request's deadline is dropped (killed) and
its request retried on another; when none is left the farm says why on stderr and exits, and
the optimiser measures locally from then on.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from perfdojo_gym.client import find_binary


def log(message: str) -> None:
    print(f"[farm] {message}", file=sys.stderr, flush=True)


class MeasureWorker:
    """One measuring worker: `perfdojo measure-worker` on this actor's node (made a Ray actor by
    `Farm`; plain, it measures in this process's machine)."""

    def __init__(self, binary: Optional[str] = None):
        self._proc = subprocess.Popen([find_binary(binary), "measure-worker"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, bufsize=1)
        line = self._proc.stdout.readline()
        try:
            self._ready = json.loads(line)
            assert self._ready.get("ready") is True
        except (ValueError, AssertionError):
            raise RuntimeError(f"perfdojo measure-worker on {socket.gethostname()} did not start "
                               f"(exit {self._proc.poll()}): {line[:200]!r}") from None
        node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
        self._ready.update(node=node, host=socket.gethostname(), pid=os.getpid())

    def info(self) -> dict:
        """The worker's ready line, with its node id, host name and process id."""
        return self._ready

    def request(self, line: str) -> str:
        """One protocol request line in, its reply line out."""
        self._proc.stdin.write(line.rstrip("\n") + "\n")
        self._proc.stdin.flush()
        reply = self._proc.stdout.readline()
        if not reply:
            raise RuntimeError(f"perfdojo measure-worker on {self._ready['host']} exited "
                               f"(exit {self._proc.wait()})")
        return reply

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()


def request_deadline_s(request: dict) -> float:
    """How long a request may take before its worker counts as stalled: compiles (120 s at most
    each) and the timed runs, with room to spare."""
    o = request.get("options") or {}
    per_program = 120 + 2 * float(o.get("timeout_s", 10)) * min(int(o.get("max_reps", 50)), 10)
    return 30 + per_program * max(1, len(request.get("programs") or []))


class Farm:
    """Measuring actors on the cluster's nodes, a cache, and the loop that serves the protocol."""

    def __init__(self, actors_per_node: int = 1, num_cpus: float = 1, max_workers: int = 0,
                 start_timeout_s: float = 150, binary: Optional[str] = None):
        remote = ray.remote(MeasureWorker)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        handles = []
        for node in nodes:
            for _ in range(actors_per_node):
                if max_workers and len(handles) >= max_workers:
                    break
                strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
                handles.append(remote.options(num_cpus=num_cpus, scheduling_strategy=strategy,
                                              max_restarts=0).remote(binary))
        refs = [h.info.remote() for h in handles]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=start_timeout_s)
        self.workers = []  # [(handle, info)], the primary first
        for h, ref in zip(handles, refs):
            try:
                if ref not in ready:
                    raise TimeoutError(f"did not start within {start_timeout_s:.0f} s (no free "
                                       f"CPU on its node?)")
                self.workers.append((h, ray.get(ref)))
            except Exception as e:  # noqa: BLE001 -- a worker that cannot start is left out, said
                log(f"a measuring worker was left out: {e}")
                ray.kill(h)
        if not self.workers:
            raise RuntimeError(f"no measuring worker started on the {len(nodes)} node(s) of the "
                               f"cluster")
        self.cache: dict = {}
        self.hits = 0
        self.per_node: dict = {}  # node id (12 hex digits) -> requests it measured
        self._busy = {id(h): 0 for h, _ in self.workers}

    def ready_line(self) -> dict:
        infos = [i for _, i in self.workers]
        return {"ready": True, "workers": len(infos), "nodes": len({i["node"] for i in infos}),
                "actors": [{k: i.get(k) for k in ("node", "host", "isa", "profile", "peak_gflops")}
                           for i in infos]}

    @staticmethod
    def _profile_key(info: dict) -> tuple:
        return (info.get("cpu"), info.get("isa"), info.get("profile"), info.get("peak_gflops"))

    def _cache_key(self, request: dict, info: dict):
        if request.get("op") != "measure":
            return None  # interleaved comparisons are timed afresh: they decide
        return (request.get("backend"), tuple(request.get("hashes") or ()),
                json.dumps(request.get("options"), sort_keys=True), self._profile_key(info))

    def _pick(self, request: dict, avoid: set):
        live = [(h, i) for h, i in self.workers if id(h) not in avoid]
        if not live:
            return None
        o = request.get("options") or {}
        if request.get("op") == "compare" or o.get("verify", True):
            return live[0]  # the times that decide come from one machine
        return min(live, key=lambda w: self._busy[id(w[0])])

    def _drop(self, handle, why: str) -> None:
        for k, (h, info) in enumerate(self.workers):
            if h is handle:
                log(f"dropped the worker on {info['host']} (node {info['node'][:12]}): {why}")
                del self.workers[k]
                try:
                    ray.kill(h)
                except Exception:  # noqa: BLE001 -- already gone
                    pass
                return

    def serve(self, inp, out) -> int:
        """Answers requests from `inp` on `out` until EOF; 1 when every worker was lost."""
        lines: queue.Queue = queue.Queue()

        def read():
            for line in inp:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()

        def send(reply: dict) -> None:
            out.write(json.dumps(reply) + "\n")
            out.flush()

        inflight: dict = {}  # ref -> [request, line, handle, info, deadline, tried]
        eof = False

        def dispatch(request: dict, line: str, tried: set) -> bool:
            picked = self._pick(request, tried)
            if picked is None:
                return False
            h, info = picked
            key = self._cache_key(request, info)
            if key is not None and key in self.cache:
                self.hits += 1
                results = [dict(m, cached=True, compile_s=0) for m in self.cache[key]]
                send({"id": request["id"], "ok": True, "results": results,
                      "worker": info["node"][:12]})
                return True
            self._busy[id(h)] += 1
            inflight[h.request.remote(line)] = [request, line, h, info,
                                                time.monotonic() + request_deadline_s(request),
                                                tried | {id(h)}]
            return True

        def lost(entry, why: str) -> None:
            request, line, h, _, _, tried = entry
            self._drop(h, why)
            if not dispatch(request, line, tried):
                send({"id": request["id"], "ok": False,
                      "error": f"no measuring worker left to take it (the last: {why})"})

        while True:
            while True:
                try:
                    line = lines.get_nowait() if inflight else lines.get(timeout=1.0)
                except queue.Empty:
                    break
                if line is None:
                    eof = True
                    break
                if not line.strip():
                    continue
                try:
                    request = json.loads(line)
                    if not isinstance(request, dict) or not isinstance(request.get("id"), int):
                        raise ValueError("a request is a JSON object with an integer 'id'")
                except ValueError as e:
                    send({"id": None, "ok": False, "error": f"not a request: {e}"})
                    continue
                if not dispatch(request, line, set()):
                    send({"id": request["id"], "ok": False, "error": "no measuring worker left"})
            if not self.workers:
                log("every measuring worker was lost; stopping")
                return 1
            if eof and not inflight:
                return 0
            if not inflight:
                continue
            done, _ = ray.wait(list(inflight), num_returns=1, timeout=0.05)
            for ref in done:
                entry = inflight.pop(ref)
                request, _, h, info, _, _ = entry
                self._busy[id(h)] -= 1
                try:
                    reply = json.loads(ray.get(ref))
                except Exception as e:  # noqa: BLE001 -- a dead actor or node, a garbled line
                    lost(entry, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                    continue
                reply["worker"] = info["node"][:12]
                self.per_node[reply["worker"]] = self.per_node.get(reply["worker"], 0) + 1
                if reply.get("ok"):
                    key = self._cache_key(request, info)
                    results = reply.get("results") or []
                    if key is not None and all(not m.get("error") and not m.get("noisy")
                                               for m in results):
                        self.cache[key] = results
                send(reply)
            now = time.monotonic()
            for ref, entry in list(inflight.items()):
                if now > entry[4]:
                    del inflight[ref]
                    self._busy[id(entry[2])] -= 1
                    lost(entry, f"no answer within {request_deadline_s(entry[0]):.0f} s")

    def stop(self) -> None:
        for h, _ in self.workers:
            try:
                ray.get(h.stop.remote(), timeout=15)
            except Exception:  # noqa: BLE001 -- stopping: whatever state it is in
                pass
            ray.kill(h)
        self.workers = []


def main(argv=None) -> int:
    env = os.environ.get
    ap = argparse.ArgumentParser(prog="python -m perfdojo_ray.farm", description=__doc__.split("\n")[0])
    ap.add_argument("--address", required=True,
                    help="ray://HOST:PORT (Ray Client), HOST:PORT of the head's GCS, or auto")
    ap.add_argument("--actors-per-node", type=int, default=int(env("PERFDOJO_FARM_ACTORS_PER_NODE", "1")),
                    help="measuring actors on each node (their timings still take turns on a "
                         "machine; the compiles overlap)")
    ap.add_argument("--max-workers", type=int, default=int(env("PERFDOJO_FARM_MAX_WORKERS", "0")),
                    help="at most this many actors in all (0: no limit)")
    ap.add_argument("--num-cpus", type=float, default=float(env("PERFDOJO_FARM_NUM_CPUS", "1")),
                    help="Ray CPUs each actor holds")
    args = ap.parse_args(argv)
    # The protocol owns stdout; anything else printed (Ray's own messages) goes to stderr.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)
    farm = None
    try:
        farm = Farm(args.actors_per_node, args.num_cpus, args.max_workers)
        ready = farm.ready_line()
        log(f"{ready['workers']} measuring worker(s) on {ready['nodes']} node(s)")
        proto.write(json.dumps(ready) + "\n")
        proto.flush()
        rc = farm.serve(sys.stdin, proto)
        log(f"measured per node: {json.dumps(farm.per_node)}; {farm.hits} answer(s) from the cache")
        return rc
    except RuntimeError as e:
        log(str(e))
        return 1
    finally:
        if farm is not None:
            farm.stop()
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
