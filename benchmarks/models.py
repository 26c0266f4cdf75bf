#!/usr/bin/env python3
"""Whole blocks of models through perfdojo.compile, against eager PyTorch and torch.compile
(Inductor), timed interleaved in one process (docs/models.md).

    .venv-bench/bin/python3 benchmarks/models.py --timeout 240 --threads 1 --json out.json --plot out.png

Each block is compiled once (its kernels optimised within --timeout seconds in all, cached in
~/.cache/perfdojo/models: a second run optimises nothing), checked against eager on its example
inputs, then eager, Inductor and PerfDojo run round-robin --reps times; min and median per form.
Run it pinned to one core (taskset -c 1) for one-thread figures.

The blocks are written here in torch.nn, the way GPT-2, Llama and BERT write them (pre-norm MLP
with the tanh GELU; RMSNorm and SwiGLU; post-norm feed-forward; causal self-attention with
PyTorch's scaled_dot_product_attention, which stays in PyTorch).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import perfdojo  # noqa: E402


class GPT2MLP(nn.Module):
    """x + c_proj(gelu_tanh(c_fc(ln_2(x)))): GPT-2's MLP sub-block."""

    def __init__(self, d=768):
        super().__init__()
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.c_proj(self.act(self.c_fc(self.ln_2(x))))


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class LlamaMLP(nn.Module):
    """x + down(silu(gate(h)) * up(h)), h = rmsnorm(x): Llama's MLP sub-block."""

    def __init__(self, d=512, h=1408):
        super().__init__()
        self.norm = RMSNorm(d)
        self.gate = nn.Linear(d, h, bias=False)
        self.up = nn.Linear(d, h, bias=False)
        self.down = nn.Linear(h, d, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class BertFFN(nn.Module):
    """LayerNorm(x + out(gelu_tanh(inter(x)))): BERT's post-norm feed-forward (tanh GELU)."""

    def __init__(self, d=768):
        super().__init__()
        self.inter = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.norm = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x):
        return self.norm(x + self.out(F.gelu(self.inter(x), approximate="tanh")))


class GPT2Attention(nn.Module):
    """x + c_proj(sdpa(q, k, v, causal)), [q k v] = c_attn(ln_1(x)): GPT-2's attention sub-block."""

    def __init__(self, d=768, heads=12):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))


MODELS = {
    "gpt2-mlp": (GPT2MLP, 768),
    "gpt2-attention": (GPT2Attention, 768),
    "llama-mlp": (LlamaMLP, 512),
    "bert-ffn": (BertFFN, 768),
}


def time_interleaved(fns: dict, reps: int) -> dict:
    times = {k: [] for k in fns}
    with torch.no_grad():
        for f in fns.values():  # warm: allocator, caches, Inductor's first call
            for _ in range(3):
                f()
        for _ in range(reps):
            for k, f in fns.items():
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
    return {k: {"min_s": min(v), "median_s": statistics.median(v)} for k, v in times.items()}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--tokens", type=int, default=128, help="sequence length (batch 1)")
    ap.add_argument("--timeout", type=float, default=120, help="optimisation seconds per model, all kernels")
    ap.add_argument("--mode", default="balanced")
    ap.add_argument("--threads", default="1", help="1, or 'all' (the process's CPUs)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--plot", help="write a bar chart (matplotlib) here")
    a = ap.parse_args()

    threads = len(os.sched_getaffinity(0)) if a.threads == "all" else int(a.threads)
    torch.set_num_threads(threads)
    isa = perfdojo.this_isa()
    try:
        from torch._inductor import cpu_vec_isa
        inductor_isa = str(cpu_vec_isa.pick_vec_isa())
    except Exception as e:  # older PyTorch
        inductor_isa = f"unknown ({type(e).__name__})"
    out = {"cpu": cpu_name(), "isa": isa, "torch": torch.__version__, "threads": threads,
           "inductor_vec_isa": inductor_isa, "tokens": a.tokens, "timeout_s": a.timeout, "models": {}}
    print(f"{out['cpu']} ({isa}), PyTorch {torch.__version__}, {threads} thread(s), Inductor's vector ISA: "
          f"{inductor_isa}", file=sys.stderr)
    for name in a.models.split(","):
        cls, d = MODELS[name]
        torch.manual_seed(0)
        model = cls().eval()
        x = torch.randn(1, a.tokens, d)
        t0 = time.perf_counter()
        fast = perfdojo.compile(model, (x,), timeout=a.timeout, mode=a.mode, threads=threads,
                                progress=sys.stderr.isatty())
        compile_s = time.perf_counter() - t0
        fns = {"eager": lambda: model(x), "perfdojo": lambda: fast(x)}
        if not a.no_inductor:
            ind = torch.compile(model)
            with torch.no_grad():
                ind(x)
            fns["inductor"] = lambda: ind(x)
        t = time_interleaved(fns, a.reps)
        rep = fast.report
        row = {"times": t, "compile_s": compile_s, "kernels": len(rep["kernels"]),
               "operators_in_kernels": rep["operators_in_kernels"], "in_pytorch": rep["in_pytorch"],
               "max_scaled_error": rep["max_scaled_error"],
               "speedup_vs_eager": t["eager"]["min_s"] / t["perfdojo"]["min_s"],
               "kernel_reports": [{k: e.get(k) for k in ("name", "ops", "eager_s", "speedup", "verified", "cached")}
                                  for e in rep["kernels"]]}
        if "inductor" in t:
            row["speedup_vs_inductor"] = t["inductor"]["min_s"] / t["perfdojo"]["min_s"]
        out["models"][name] = row
        line = "  ".join(f"{k} {v['min_s'] * 1e3:.3f} ms (median {v['median_s'] * 1e3:.3f})" for k, v in t.items())
        print(f"{name}: {line}; x{row['speedup_vs_eager']:.2f} eager"
              + (f", x{row['speedup_vs_inductor']:.2f} Inductor" if "inductor" in t else "")
              + f"; {row['kernels']} kernels, {len(row['in_pytorch'])} operators in PyTorch; compile {compile_s:.0f} s",
              flush=True)
    ratios = [m["speedup_vs_eager"] for m in out["models"].values()]
    out["geomean_vs_eager"] = statistics.geometric_mean(ratios) if ratios else None
    if all("speedup_vs_inductor" in m for m in out["models"].values()) and out["models"]:
        out["geomean_vs_inductor"] = statistics.geometric_mean([m["speedup_vs_inductor"] for m in out["models"].values()])
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = list(out["models"])
        forms = list(next(iter(out["models"].values()))["times"]) if names else []
        fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(names), 3.6))
        w = 0.8 / max(1, len(forms))
        for i, f in enumerate(forms):
            ys = [out["models"][n]["times"]["eager"]["min_s"] / out["models"][n]["times"][f]["min_s"] for n in names]
            ax.bar([j + i * w for j in range(len(names))], ys, w, label=f)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks([j + w * (len(forms) - 1) / 2 for j in range(len(names))], names)
        ax.set_ylabel("speed-up over eager (min time)")
        ax.set_title(f"{out['cpu']} ({isa}), {threads} thread(s), {a.tokens} tokens", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
