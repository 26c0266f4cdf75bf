#!/usr/bin/env python3
"""Whole blocks of models through perfdojo.compile, against eager PyTorch and torch.compile
(Inductor), timed interleaved in one process (docs/models.md).

    .venv-bench/bin/python3 benchmarks/models.py --timeout 240 --threads 1 --json out.json --plot out.png

Each block is compiled once (its kernels optimised within --timeout seconds in all, cached in
~/.cache/perfdojo/models: a second run optimises nothing), checked against eager on its example
inputs, then eager, Inductor and PerfDojo run round-robin --reps times; min and median per form.
Run it pinned to one core (taskset -c 1) for one-thread figures.

The blocks are Hugging Face transformers' GPT-2 block, BERT layer and Llama decoder layer, built
from their configs with random weights (no download; attention through PyTorch's
scaled_dot_product_attention, eager's fastest form, which stays in PyTorch), and torchvision's
ResNet-50 bottleneck (256 channels at 56 x 56). ONNX Runtime runs each block exported with
torch.onnx (all graph optimisations, the same thread count).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import perfdojo  # noqa: E402


def hf_blocks(tokens: int) -> dict:
    """Hugging Face transformers blocks built from their configs with random weights (no
    download), and torchvision's ResNet-50 bottleneck: real code nobody here wrote."""
    from transformers import BertConfig, GPT2Config, LlamaConfig
    from transformers.models.bert.modeling_bert import BertLayer
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    from torchvision.models.resnet import Bottleneck

    def configured(cfg):
        cfg._attn_implementation = "sdpa"  # eager PyTorch's fastest attention
        return cfg

    class Llama(nn.Module):
        """A Llama decoder layer (RMSNorm, rotary, grouped-query attention, SwiGLU) and the
        rotary table it is called with."""

        def __init__(self, cfg):
            super().__init__()
            self.layer = LlamaDecoderLayer(cfg, 0)
            self.rope = LlamaRotaryEmbedding(cfg)

        def forward(self, x):
            pos = torch.arange(x.shape[1]).unsqueeze(0)
            out = self.layer(x, position_embeddings=self.rope(x, pos), position_ids=pos)
            return out[0] if isinstance(out, tuple) else out

    class Single(nn.Module):
        """The block's first output (GPT-2 and BERT blocks return tuples in some versions)."""

        def __init__(self, block):
            super().__init__()
            self.block = block

        def forward(self, x):
            out = self.block(x)
            return out[0] if isinstance(out, tuple) else out

    def bottleneck():
        m = Bottleneck(256, 64)
        g = torch.Generator().manual_seed(1)
        for mod in m.modules():  # inference statistics that are not the identity
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5, generator=g)
                mod.running_var.uniform_(0.5, 2.0, generator=g)
        return m

    return {
        "gpt2-block": (lambda: Single(GPT2Block(configured(GPT2Config(n_embd=768, n_head=12)))), (1, tokens, 768)),
        "bert-layer": (lambda: Single(BertLayer(configured(BertConfig(hidden_size=768, num_attention_heads=12,
                                                                      intermediate_size=3072)))), (1, tokens, 768)),
        "llama-layer": (lambda: Llama(configured(LlamaConfig(hidden_size=512, intermediate_size=1408,
                                                             num_attention_heads=8, num_key_value_heads=2))),
                        (1, tokens, 512)),
        "resnet50-bottleneck": (bottleneck, (1, 256, 56, 56)),
    }


MODEL_NAMES = ["gpt2-block", "bert-layer", "llama-layer", "resnet50-bottleneck"]


def onnx_runtime(model, x, threads: int, folder: Path):
    """The model exported to ONNX and run by ONNX Runtime (all graph optimisations), or the
    reason it could not be."""
    try:
        import onnxruntime as ort
        path = folder / "model.onnx"
        torch.onnx.export(model, (x,), str(path), input_names=["x"], dynamo=False)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        xn = x.numpy()
        ref = model(x)
        got = torch.from_numpy(sess.run(None, {"x": xn})[0])
        err = float((ref - got).abs().max())
        return (lambda: sess.run(None, {"x": xn})), err, None
    except Exception as e:  # a model the exporter or the runtime refuses
        return None, None, f"{type(e).__name__}: {str(e)[:300]}"


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
    ap.add_argument("--models", default=",".join(MODEL_NAMES), help="comma-separated: " + ", ".join(MODEL_NAMES))
    ap.add_argument("--tokens", type=int, default=128, help="sequence length (batch 1)")
    ap.add_argument("--timeout", type=float, default=120, help="optimisation seconds per model, all kernels")
    ap.add_argument("--mode", default="balanced")
    ap.add_argument("--threads", default="1", help="1, or 'all' (the process's CPUs)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--no-onnx", action="store_true")
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
    blocks = hf_blocks(a.tokens)
    import tempfile
    work = Path(tempfile.mkdtemp(prefix="perfdojo-models-"))
    for name in a.models.split(","):
        make, shape = blocks[name]
        torch.manual_seed(0)
        model = make().eval()
        x = torch.randn(*shape)
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
        ort_note = None
        if not a.no_onnx:
            with torch.no_grad():
                run_ort, ort_err, ort_note = onnx_runtime(model, x, threads, work)
            if run_ort:
                fns["onnxruntime"] = run_ort
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
        if "onnxruntime" in t:
            row["speedup_vs_onnxruntime"] = t["onnxruntime"]["min_s"] / t["perfdojo"]["min_s"]
            row["onnxruntime_max_error"] = ort_err
        if ort_note:
            row["onnxruntime_note"] = ort_note
        out["models"][name] = row
        line = "  ".join(f"{k} {v['min_s'] * 1e3:.3f} ms (median {v['median_s'] * 1e3:.3f})" for k, v in t.items())
        print(f"{name}: {line}; x{row['speedup_vs_eager']:.2f} eager"
              + (f", x{row['speedup_vs_inductor']:.2f} Inductor" if "inductor" in t else "")
              + (f", x{row['speedup_vs_onnxruntime']:.2f} ONNX Runtime" if "onnxruntime" in t else "")
              + (f" (ONNX Runtime: {ort_note})" if ort_note else "")
              + f"; {row['kernels']} kernels, {len(row['in_pytorch'])} operators in PyTorch; compile {compile_s:.0f} s",
              flush=True)
    ratios = [m["speedup_vs_eager"] for m in out["models"].values()]
    out["geomean_vs_eager"] = statistics.geometric_mean(ratios) if ratios else None
    for base in ("inductor", "onnxruntime"):
        vals = [m[f"speedup_vs_{base}"] for m in out["models"].values() if f"speedup_vs_{base}" in m]
        if vals:
            out[f"geomean_vs_{base}"] = statistics.geometric_mean(vals)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = list(out["models"])
        forms = []
        for n in names:
            forms += [f for f in out["models"][n]["times"] if f not in forms]
        fig, ax = plt.subplots(figsize=(2.0 + 2.0 * len(names), 3.8))
        w = 0.8 / max(1, len(forms))
        for i, f in enumerate(forms):
            ys = [out["models"][n]["times"]["eager"]["min_s"] / out["models"][n]["times"][f]["min_s"]
                  if f in out["models"][n]["times"] else 0.0 for n in names]
            ax.bar([j + i * w for j in range(len(names))], ys, w, label=f)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks([j + w * (len(forms) - 1) / 2 for j in range(len(names))], names)
        ax.set_ylabel("speed-up over eager (min time)")
        ax.set_title(f"{out['cpu']} ({isa}), {threads} thread(s), {a.tokens} tokens", fontsize=9)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
