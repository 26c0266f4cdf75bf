#!/usr/bin/env python3
"""Re-time what `perfdojo optimize` returned, from its C source, in a fresh process.

Usage:
  taskset -c 1 benchmarks/retime.py OUT_DIR [OUT_DIR ...] [--reps N] [--tolerance 0.10] [--json]

Each OUT_DIR is what `perfdojo optimize FILE --out OUT_DIR` wrote. For each one this script
  1. compiles the returned `kernel.c` and the original kernel's C (`perfdojo codegen FILE`, the
     same compiler and flags the optimiser used) into shared objects;
  2. loads both into this process with ctypes on the same input arrays, checks that their outputs
     agree, and times them interleaved on the cores this process may use (a batch of calls of
     one, then of the other, in alternating order, warm, at least 10 rounds, about a millisecond
     or more per batch); min and median of each;
  3. compares the speed-up it measured (median of the original / median of the returned kernel)
     with the report's, and says whether the two agree within the tolerance.

Exit status: 0 when every report agrees, 1 when one does not (or its kernels disagree), 2 on a
usage error. Nothing here trusts the optimiser: the sources are compiled again and timed by a
process that never saw the search. Pin it to one idle core (`taskset -c 1`); the figures are
this machine's, so run it where the optimiser ran.
"""
import argparse
import ctypes
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DTYPES = {"float": np.float32, "double": np.float64, "int32_t": np.int32}


def perfdojo_bin():
    d = os.environ.get("PERFDOJO_BIN_DIR")
    return str(Path(d) / "perfdojo") if d else str(ROOT / "build" / "bin" / "perfdojo")


def parameters(source):
    """(C type, name, element count) of each parameter of `void kernel(...)` in `source`."""
    m = re.search(r"void\s+kernel\s*\(([^)]*)\)", source)
    if not m:
        raise ValueError("no `void kernel(...)` in the source")
    params = []
    for part in m.group(1).split(","):
        part = re.sub(r"/\*.*?\*/", "", part).replace("restrict", "").replace("const", "")
        tokens = part.replace("*", " * ").split()
        ctype, name = tokens[0], tokens[-1]
        params.append((ctype, name))
    return params


def shapes_from_header(header):
    """{name: element count} from kernel.h's `/* input 1024x1024, row-major */` comments."""
    out = {}
    for name, dims in re.findall(r"\*\s*(\w+)\s*/\*\s*\w+\s+([\dx]+)", header):
        n = 1
        for d in dims.split("x"):
            n *= int(d)
        out[name] = n
    return out


def compile_so(source, flags, workdir, tag):
    c = Path(workdir) / f"{tag}.c"
    so = Path(workdir) / f"{tag}.so"
    c.write_text(source)
    cmd = [flags[0], *flags[1:], "-shared", "-fPIC", "-o", str(so), str(c)]
    libs = [f for f in flags if f.startswith("-l")]
    cmd = [x for x in cmd if not x.startswith("-l")] + libs
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"compiling {tag} failed: {r.stderr[-800:]}")
    return str(so)


def compiler_and_flags(report_flags):
    """`cc (version) -O3 ... -lmvec` as the report records it -> [cc, -O3, ..., -lmvec]."""
    text = re.sub(r"\([^)]*\)", " ", report_flags)
    words = shlex.split(text)
    return [words[0]] + [w for w in words[1:] if w.startswith("-")]


class Kernel:
    def __init__(self, so, params, arrays):
        self.lib = ctypes.CDLL(so)
        self.fn = self.lib.kernel
        self.fn.restype = None
        self.fn.argtypes = [ctypes.c_void_p] * len(params)
        self.args = [arrays[name].ctypes.data for _, name in params]

    def __call__(self, n=1):
        f, a = self.fn, self.args
        t0 = time.perf_counter()
        for _ in range(n):
            f(*a)
        return time.perf_counter() - t0


def retime(out_dir, reps, tolerance):
    out_dir = Path(out_dir)
    report = json.loads((out_dir / "report.json").read_text())
    source = (out_dir / "kernel.c").read_text()
    header = (out_dir / "kernel.h").read_text()
    original = Path(report["file"])
    if not original.is_absolute() and not original.exists():
        original = ROOT / original
    cg = subprocess.run([perfdojo_bin(), "codegen", str(original), "--backend", report["arch"],
                         "--json"], capture_output=True, text=True)
    if cg.returncode != 0:
        raise RuntimeError(f"perfdojo codegen {original} failed: {cg.stdout}{cg.stderr}")
    original_source = json.loads(cg.stdout)["source"]
    flags = compiler_and_flags(report["flags"])
    params = parameters(source)
    if [n for _, n in parameters(original_source)] != [n for _, n in params]:
        raise RuntimeError("the original and the returned kernel take different parameters")
    elements = shapes_from_header(header)
    rng = np.random.default_rng(0)
    inputs = set(re.findall(r"const\s+\w+\s*\*\s*(\w+)", header))
    ours, theirs = {}, {}
    for ctype, name in params:
        n = elements[name]
        dt = DTYPES[ctype]
        if name in inputs:
            a = (rng.standard_normal(n) if dt != np.int32 else rng.integers(0, 8, n)).astype(dt)
            ours[name] = theirs[name] = a
        else:
            ours[name] = np.zeros(n, dt)
            theirs[name] = np.zeros(n, dt)
    with tempfile.TemporaryDirectory(prefix="perfdojo-retime-") as work:
        k_new = Kernel(compile_so(source, flags, work, "returned"), params, ours)
        k_old = Kernel(compile_so(original_source, flags, work, "original"), params, theirs)
        # Same inputs, so the same outputs (up to reassociation in vectorised reductions).
        t_old, t_new = k_old(), k_new()
        for _, name in params:
            if name in inputs:
                continue
            a, b = ours[name].astype(np.float64), theirs[name].astype(np.float64)
            scale = max(1.0, float(np.max(np.abs(b))))
            err = float(np.max(np.abs(a - b))) / scale
            if not err <= 1e-3:
                raise RuntimeError(f"output {name} differs: max error {err:.3g} of its scale")
        # Batches of at least a millisecond; a warm batch of each first.
        b_old = max(1, int(np.ceil(1e-3 / max(k_old(), 1e-9))))
        b_new = max(1, int(np.ceil(1e-3 / max(k_new(), 1e-9))))
        k_old(b_old)
        k_new(b_new)
        old, new = [], []
        for r in range(reps):
            pair = [(k_old, b_old, old), (k_new, b_new, new)]
            if r % 2:
                pair.reverse()
            for k, b, sink in pair:
                sink.append(k(b) / b)
    med_old, med_new = float(np.median(old)), float(np.median(new))
    speedup = med_old / med_new
    agree = abs(speedup / report["speedup"] - 1) <= tolerance
    return {
        "dir": str(out_dir),
        "file": report["file"],
        "arch": report["arch"],
        "original_min_s": min(old), "original_median_s": med_old,
        "returned_min_s": min(new), "returned_median_s": med_new,
        "speedup": speedup,
        "report_speedup": report["speedup"],
        "report_final_s": report["final_s"],
        "ratio_to_report": speedup / report["speedup"],
        "agrees": agree,
        "reps": reps,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="folders written by `perfdojo optimize --out`")
    ap.add_argument("--reps", type=int, default=15, help="interleaved rounds (at least 10)")
    ap.add_argument("--tolerance", type=float, default=0.10,
                    help="largest relative difference from the report's speed-up that agrees")
    ap.add_argument("--json", action="store_true", help="one JSON object per folder")
    args = ap.parse_args()
    if args.reps < 10:
        ap.error("--reps must be at least 10")
    cores = sorted(os.sched_getaffinity(0))
    if not args.json:
        print(f"retime: cores {cores}; {args.reps} interleaved rounds per kernel", file=sys.stderr,
              flush=True)
    ok = True
    for d in args.dirs:
        try:
            rec = retime(d, args.reps, args.tolerance)
        except (OSError, ValueError, RuntimeError, KeyError, json.JSONDecodeError) as e:
            rec = {"dir": d, "error": str(e), "agrees": False}
        ok = ok and rec["agrees"]
        if args.json:
            print(json.dumps(rec))
        elif "error" in rec:
            print(f"{d}: error: {rec['error']}")
        else:
            print(f"{rec['file']} ({d}): original {rec['original_median_s'] * 1e3:.3f} ms "
                  f"(min {rec['original_min_s'] * 1e3:.3f}), returned {rec['returned_median_s'] * 1e3:.3f} ms "
                  f"(min {rec['returned_min_s'] * 1e3:.3f}): x{rec['speedup']:.2f} here vs "
                  f"x{rec['report_speedup']:.2f} in the report ({rec['ratio_to_report']:.2f}): "
                  + ("agrees" if rec["agrees"] else "DISAGREES"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
