#!/usr/bin/env python3
"""The agent against the optimiser, on measured time: per kernel, the original, `perfdojo optimize
--timeout T` (sketch and search), the policy alone (`--agent CKPT --policy-only`) and, with
--with-agent, `optimize --agent CKPT --timeout T`, their returned kernels compiled again and
timed interleaved in this one process (docs/agents.md, "Measured").

Usage:
  taskset -c 1 benchmarks/agent_vs_optimizer.py --agent default --timeout 60 \\
      perfdojo://suite/conv2d-3x3 kernels/rmsnorm.pdj ... [--with-agent] [--arch x86_avx2]
      [--also-bin old=/tmp/old-bin] [--reps 15] [--json]

Kernels are .pdj paths or perfdojo:// URIs (written to a temporary .pdj first). Each method's
`optimize` runs in its own process with the same --timeout; then every returned kernel.c and
the original's C are compiled with the flags the optimiser used, loaded with ctypes on the same
inputs, checked to agree, and timed in rotating order (warm batches of about a millisecond, at
least 10 rounds): min and median of each. Ratios are medians against the original timed in the
same rounds. Pin it to one idle core: the optimiser measures on the cores this process may use.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import retime  # noqa: E402  (the same compile-and-time pieces)


def kernel_file(spec, work):
    """A .pdj path for a path or a perfdojo:// URI."""
    if not spec.startswith("perfdojo://"):
        return Path(spec)
    if spec.startswith("perfdojo://suite/"):
        return retime.ROOT / "kernels" / (spec.split("/")[-1] + ".pdj")
    out = subprocess.run([retime.perfdojo_bin(), "episode", "--benchmark", spec, "--config",
                          '{"observation_spaces": ["ir_text"]}', "--json"], capture_output=True, text=True, check=True)
    text = json.loads(out.stdout.strip().splitlines()[0])["reset"]["observation"]["ir_text"]
    name = re.sub(r"[^A-Za-z0-9]+", "-", spec.split("://", 1)[1]).strip("-")
    path = Path(work) / f"{name}.pdj"
    path.write_text(text)
    return path


def optimize(pdj, out, timeout, extra, binary=None):
    cmd = [binary or retime.perfdojo_bin(), "optimize", str(pdj), "--timeout", str(timeout), "--out", str(out),
           *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if not (Path(out) / "report.json").exists():
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr[-600:]}")
    return json.loads((Path(out) / "report.json").read_text())


def time_interleaved(pdj, outs, reps):
    """{label: (min_s, median_s)} for the original and each out dir's kernel, timed in one process."""
    first = json.loads((Path(next(iter(outs.values()))) / "report.json").read_text())
    cg = subprocess.run([retime.perfdojo_bin(), "codegen", str(pdj), "--backend", first["arch"], "--json"],
                        capture_output=True, text=True, check=True)
    sources = {"original": json.loads(cg.stdout)["source"]}
    for label, d in outs.items():
        sources[label] = (Path(d) / "kernel.c").read_text()
    header = (Path(next(iter(outs.values()))) / "kernel.h").read_text()
    flags = retime.compiler_and_flags(first["flags"])
    params = retime.parameters(sources["original"])
    elements = retime.shapes_from_header(header)
    inputs = set(re.findall(r"const\s+\w+\s*\*\s*(\w+)", header))
    rng = np.random.default_rng(0)
    shared = {}
    for ctype, name in params:
        dt = retime.DTYPES[ctype]
        if name in inputs:
            n = elements[name]
            shared[name] = (rng.standard_normal(n) if dt != np.int32 else rng.integers(0, 8, n)).astype(dt)
    kernels, arrays = {}, {}
    with tempfile.TemporaryDirectory(prefix="perfdojo-avo-") as work:
        for label, src in sources.items():
            arr = dict(shared)
            for ctype, name in params:
                if name not in inputs:
                    arr[name] = np.zeros(elements[name], retime.DTYPES[ctype])
            arrays[label] = arr
            kernels[label] = retime.Kernel(retime.compile_so(src, flags, work, label.replace(" ", "_")), params, arr)
        for k in kernels.values():
            k()
        for label in kernels:  # every kernel computes what the original computes
            for ctype, name in params:
                if name in inputs:
                    continue
                a, b = arrays[label][name].astype(np.float64), arrays["original"][name].astype(np.float64)
                err = float(np.max(np.abs(a - b))) / max(1.0, float(np.max(np.abs(b))))
                if not err <= 1e-3:
                    raise RuntimeError(f"{label}: output {name} differs from the original's ({err:.3g})")
        batch = {l: max(1, int(math.ceil(1e-3 / max(k(), 1e-9)))) for l, k in kernels.items()}
        times = {l: [] for l in kernels}
        labels = list(kernels)
        for r in range(reps):
            order = labels[r % len(labels):] + labels[:r % len(labels)]
            for l in order:
                times[l].append(kernels[l](batch[l]) / batch[l])
    return {l: (min(t), float(np.median(t))) for l, t in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels", nargs="+")
    ap.add_argument("--agent", default="default",
                    help="checkpoint, or several comma-separated (training seeds): each played alone "
                    "(default: the shipped agent)")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--with-agent", action="store_true", help="also optimize --agent CKPT at the same timeout")
    ap.add_argument("--arch", help="optimize --arch (default: the widest ISA this CPU runs); x86_avx2 on "
                    "an AVX-512 machine times the AVX2 code a smaller core would run")
    ap.add_argument("--also-bin", action="append", default=[], metavar="LABEL=DIR",
                    help="also play the policy with another build's perfdojo (DIR/perfdojo, its evaluate_agent "
                    "beside it), as 'policy@LABEL': two versions of the code in one interleaved run")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    print(f"agent_vs_optimizer: cores {sorted(os.sched_getaffinity(0))}, timeout {args.timeout:g} s, "
          f"agent {args.agent}" + (f", arch {args.arch}" if args.arch else ""), file=sys.stderr, flush=True)
    arch = ["--arch", args.arch] if args.arch else []
    other_bins = {}
    for spec in args.also_bin:
        label, sep, d = spec.partition("=")
        if not sep or not (Path(d) / "perfdojo").exists():
            ap.error(f"--also-bin {spec}: expected LABEL=DIR with DIR/perfdojo")
        other_bins[label] = str(Path(d) / "perfdojo")
    ratios = {}
    # One checkpoint is "policy"; several (seeds) are "policy:NAME", NAME the file's folder or stem.
    ckpts = [c for c in args.agent.split(",") if c]
    if len(ckpts) == 1:
        agents = {"": ckpts[0]}
    else:
        agents = {}
        for c in ckpts:
            p = Path(c)
            agents[":" + (p.parent.name if p.name == "agent.ckpt" else p.stem)] = c
    with tempfile.TemporaryDirectory(prefix="perfdojo-avo-") as work:
        for i, spec in enumerate(args.kernels):
            pdj = kernel_file(spec, work)
            outs = {}
            methods = {"optimize": (arch, None)}
            for name, ckpt in agents.items():
                methods["policy" + name] = (["--agent", ckpt, "--policy-only", *arch], None)
                for b, binary in other_bins.items():
                    methods[f"policy{name}@{b}"] = (["--agent", ckpt, "--policy-only", *arch], binary)
            if args.with_agent:
                for name, ckpt in agents.items():
                    methods["optimize+agent" + name] = (["--agent", ckpt, *arch], None)
            reports = {}
            for label, (extra, binary) in methods.items():
                print(f"[{i + 1}/{len(args.kernels)}] {spec}: {label}", file=sys.stderr, flush=True)
                outs[label] = Path(work) / f"k{i}-{label.replace('@', '-at-')}"
                reports[label] = optimize(pdj, outs[label], args.timeout, extra, binary)
            t = time_interleaved(pdj, outs, args.reps)
            rec = {"kernel": spec, "arch": reports["optimize"]["arch"],
                   "peak_gflops_per_core": reports["optimize"]["peak_gflops_per_core"],
                   "original_ms": t["original"][1] * 1e3}
            for label in outs:
                rec[f"{label}_ms"] = t[label][1] * 1e3
                rec[f"{label}_min_ms"] = t[label][0] * 1e3
                rec[f"{label}_speedup"] = t["original"][1] / t[label][1]
                rec[f"{label}_peak_fraction"] = reports[label]["peak_fraction"] * reports[label]["final_s"] / t[label][1]
                ratios.setdefault(label, []).append(rec[f"{label}_speedup"])
            for name in agents:
                for suffix in ["", *(f"@{b}" for b in other_bins)]:
                    key = "policy_vs_optimize" + name + suffix
                    rec[key] = t["optimize"][1] / t["policy" + name + suffix][1]
                    ratios.setdefault(key, []).append(rec[key])
            if args.json:
                print(json.dumps(rec), flush=True)
            else:
                print(f"{spec} ({rec['arch']}): original {rec['original_ms']:.3f} ms; " + "; ".join(
                    f"{l} {rec[l + '_ms']:.3f} ms x{rec[l + '_speedup']:.2f} ({100 * rec[l + '_peak_fraction']:.0f}% of peak)"
                    for l in outs) + "".join(f"; policy{n} / optimize {rec['policy_vs_optimize' + n]:.2f}"
                                             for a in agents for n in [a, *(f"{a}@{b}" for b in other_bins)]),
                      flush=True)
    geo = {k: math.exp(sum(map(math.log, v)) / len(v)) for k, v in ratios.items()}
    summary = {"geomean": geo}
    if len(agents) > 1:  # one geomean per checkpoint: their mean and sd over the seeds
        per = [geo["policy_vs_optimize" + n] for n in agents]
        summary["policy_vs_optimize_over_agents"] = {"mean": float(np.mean(per)), "sd": float(np.std(per, ddof=1))}
    print(json.dumps(summary) if args.json else
          "geomean: " + ", ".join(f"{k} {v:.2f}" for k, v in geo.items()) + (
              "\npolicy / optimize over the agents: mean {mean:.2f} sd {sd:.2f}".format(
                  **summary["policy_vs_optimize_over_agents"]) if len(agents) > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
