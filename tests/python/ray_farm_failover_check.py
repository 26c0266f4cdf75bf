"""Runs under .venv-rl (Ray 2.48): the measurement farm's serve loop with stand-in actors on a
one-node Ray started here, to see it survive its workers. One actor dies on its first request,
one never answers (the request deadline is shortened for the check), one answers. Every
request must still get exactly one reply, from the live worker, and the two bad workers must be
dropped; with no worker left, a request gets an error reply and serve returns 1. Prints one JSON
line; tests/python/test_ray.py asserts on it."""

import io
import json
import os
import sys
import time

import ray

from perfdojo_ray import farm as farm_module


class StandIn:
    """A measuring worker as the farm sees one: `dies` ends its process on a request (as a
    crashed node would), `stalls` never answers, `answers` replies with a verified result."""

    def __init__(self, kind):
        self.kind = kind

    def info(self):
        return {"ready": True, "node": self.kind[:4] * 8, "host": self.kind, "isa": "x86_avx2"}

    def request(self, line):
        if self.kind == "dies":
            os._exit(1)
        if self.kind == "stalls":
            time.sleep(3600)
        r = json.loads(line)
        return json.dumps({"id": r["id"], "ok": True,
                           "results": [{"median_s": 1e-3, "verified": True} for _ in r["programs"]]})

    def stop(self):
        pass


def farm_of(kinds):
    f = farm_module.Farm.__new__(farm_module.Farm)
    handles = [ray.remote(StandIn).options(num_cpus=0, max_restarts=0).remote(k) for k in kinds]
    f.workers = [(h, ray.get(h.info.remote())) for h in handles]
    f.cache, f.hits, f.per_node = {}, 0, {}
    f._busy = {id(h): 0 for h, _ in f.workers}
    return f


def request(i, verify):
    return json.dumps({"id": i, "op": "measure", "backend": "x86_avx2", "hashes": [i],
                       "programs": ["..."], "options": {"verify": verify, "timeout_s": 1}})


def main() -> int:
    farm_module.request_deadline_s = lambda request: 5.0  # a stall shows within seconds here
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    out = {}
    try:
        # Verified requests go to the primary (the first worker), which dies, then to the
        # next, which stalls; both are dropped and the live one answers.
        f = farm_of(["dies", "stalls", "answers"])
        inp = io.StringIO(request(1, True) + "\n" + request(2, False) + "\n" + request(1, True) + "\n")
        sink = io.StringIO()
        t0 = time.monotonic()
        out["rc"] = f.serve(inp, sink)
        out["seconds"] = time.monotonic() - t0
        out["replies"] = [json.loads(line) for line in sink.getvalue().splitlines()]
        out["left"] = [info["host"] for _, info in f.workers]
        out["hits"] = f.hits
        # No worker left: an error reply for the request, and serve says so.
        g = farm_of(["dies"])
        sink = io.StringIO()
        out["alone_rc"] = g.serve(io.StringIO(request(3, True) + "\n"), sink)
        out["alone_replies"] = [json.loads(line) for line in sink.getvalue().splitlines()]
    except Exception as e:  # noqa: BLE001 -- reported to the test
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        ray.shutdown()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
