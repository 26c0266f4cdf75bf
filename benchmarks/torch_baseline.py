#!/usr/bin/python3
"""PyTorch single-threaded times for the shipped kernels it expresses.

Run by Debian's interpreter (`/usr/bin/python3`, which has the `python3-torch` package), usually
from `optimizer_bench`, which compares the optimiser's kernels with these times:

    /usr/bin/python3 benchmarks/torch_baseline.py kernels/softmax.pdj kernels/mlp.pdj --json

Sizes come from each kernel file's size lines (`N = 1024`), so a resized kernel is timed at its
own size. Each kernel is written the way a PyTorch user would (the fused library call where one
exists: `F.softmax`, `F.layer_norm`, `F.conv2d`, `torch.addmm`), in float32, on one thread, with
warm-up runs and the median of timed repetitions (at least 0.5 s or 10 runs). A kernel PyTorch
cannot express here is reported with `"error"`.
"""
import argparse
import json
import os
import re
import sys
import time


def sizes_of(path):
    """The `NAME = INTEGER` size lines of a .pdj file."""
    sizes = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(\d+)\s*(#.*)?$", line)
            if m:
                sizes[m.group(1)] = int(m.group(2))
    return sizes


def build(name, s, torch):
    """(description, zero-argument callable) for kernel `name` with sizes `s`."""
    F = torch.nn.functional
    r = lambda *shape: torch.rand(*shape, dtype=torch.float32) * 2 - 1  # noqa: E731
    if name.startswith("matmul") or name == "gemv":
        if name == "gemv":
            a, x = r(s["M"], s["N"]), r(s["N"])
            return "torch.mv(A, x)", lambda: torch.mv(a, x)
        a, b = r(s["M"], s["K"]), r(s["K"], s["N"])
        return "torch.mm(A, B)", lambda: torch.mm(a, b)
    if name == "softmax":
        x = r(s["B"], s["N"])
        return "F.softmax(s, dim=1)", lambda: F.softmax(x, dim=1)
    if name == "layernorm":
        x, g, b = r(s["R"], s["N"]), r(s["N"]), r(s["N"])
        return "F.layer_norm(x, (N,), g, b, 1e-5)", lambda: F.layer_norm(x, (s["N"],), g, b, 1e-5)
    if name == "rmsnorm":
        x, g = r(s["R"], s["N"]), r(s["N"])
        # PyTorch 1.13 has no fused RMSNorm: the usual three-op form.
        return ("x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g",
                lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * g)
    if name == "attention":
        q, k, v = r(s["L"], s["D"]), r(s["L"], s["D"]), r(s["L"], s["D"])
        scale = 1.0 / (s["D"] ** 0.5)
        return ("F.softmax(Q @ K.T * scale, dim=1) @ V",
                lambda: F.softmax(torch.mm(q, k.t()) * scale, dim=1).mm(v))
    if name == "mlp":
        x, w, b = r(s["M"], s["K"]), r(s["K"], s["N"]), r(s["N"])
        return "torch.relu(torch.addmm(b, X, W))", lambda: torch.relu(torch.addmm(b, x, w))
    if name.startswith("conv2d"):
        stride = 2 if name.endswith("s2") else 1
        x = r(s["N"], s["C"], s["HI"], s["WI"])
        w = r(s["K"], s["C"], s["KH"], s["KW"])
        return (f"F.conv2d(x, w, stride={stride})", lambda: F.conv2d(x, w, stride=stride))
    raise KeyError(name)


def median_time(fn, min_seconds=0.5, min_reps=10):
    for _ in range(3):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 1000:
            break
    times.sort()
    return times[len(times) // 2], len(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels", nargs="+", help=".pdj files")
    ap.add_argument("--json", action="store_true", help="one JSON object per kernel per line")
    ap.add_argument("--seconds", type=float, default=0.5, help="timed seconds per kernel")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        msg = "PyTorch is not importable by %s (Debian package python3-torch)" % sys.executable
        for path in args.kernels:
            name = os.path.splitext(os.path.basename(path))[0]
            print(json.dumps({"kernel": name, "error": msg}) if args.json else f"{name}: {msg}")
        return 0
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for path in args.kernels:
        name = os.path.splitext(os.path.basename(path))[0]
        rec = {"kernel": name, "torch": torch.__version__, "threads": torch.get_num_threads()}
        try:
            what, fn = build(name, sizes_of(path), torch)
            with torch.no_grad():
                rec["median_s"], rec["reps"] = median_time(fn, args.seconds)
            rec["expression"] = what
        except KeyError as e:
            rec["error"] = f"not expressed in this script (missing {e})"
        if args.json:
            print(json.dumps(rec), flush=True)
        elif "error" in rec:
            print(f"{name}: {rec['error']}")
        else:
            print(f"{name:<14} {rec['median_s'] * 1e3:10.3f} ms   {rec['expression']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
