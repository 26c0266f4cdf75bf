"""perfdojo.from_torch and perfdojo.compile on small blocks written as models write them
(docs/models.md). Run by test_torch_import.py under an interpreter with PyTorch; prints one JSON
line, and raises (exit status 1) on the first failed check."""

import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import perfdojo  # noqa: E402


class PreNormMLP(nn.Module):
    """GPT-2's MLP sub-block, plus a cumulative sum (no IR form) and an exact GELU (erf, which the
    lowering writes as a polynomial)."""

    def __init__(self, d=32, h=64):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, h)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(h, d)

    def forward(self, x):
        y = x + self.fc2(self.act(self.fc1(self.ln(x))))
        return F.gelu(y) + torch.cumsum(y, dim=-1) * 0.5


class Attention(nn.Module):
    def __init__(self, d=32, heads=2):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d, bias=False)
        self.heads = heads

    def forward(self, x):
        b, t, c = x.size(0), x.size(1), x.size(2)  # PyTorch 1.13's torch.fx cannot unpack x.shape
        qkv = self.qkv(x)  # sliced, not split: PyTorch 1.13's torch.fx cannot unpack a split
        q, k, v = qkv[:, :, :c], qkv[:, :, c:2 * c], qkv[:, :, 2 * c:]
        q = q.reshape(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.reshape(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.reshape(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = torch.softmax((q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5), dim=-1)
        return x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))


class RMSNormSwiGLU(nn.Module):
    def __init__(self, d=32, h=48):
        super().__init__()
        self.w = nn.Parameter(torch.rand(d) + 0.5)
        self.gate = nn.Linear(d, h, bias=False)
        self.up = nn.Linear(d, h, bias=False)
        self.down = nn.Linear(h, d, bias=False)

    def forward(self, x):
        h = self.w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class ConvBlock(nn.Module):
    """A ResNet basic block (3x3 convolutions with padding 1, inference batch norm, residual add),
    then a depthwise 3x3 convolution with stride 2 and a bias."""

    def __init__(self, c=8):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
        self.dw = nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c)  # depthwise, strided

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return self.dw(torch.relu(self.bn2(self.conv2(y)) + x))


class InPlaceThroughView(nn.Module):
    def forward(self, x):
        h = x * 2
        h.view(-1).relu_()  # overwrites h through a view
        return h + 1


class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: torch.fx cannot trace it
            return x * 2
        return x


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    torch.manual_seed(0)
    cache = Path(tempfile.mkdtemp(prefix="perfdojo-models-"))
    out = {}

    # 1. Import: every operator is in a kernel or listed with a reason.
    mlp = PreNormMLP().eval()
    x = torch.randn(2, 8, 32)
    imp = perfdojo.from_torch(mlp, (x,))
    rep = imp.report()
    listed = {f["node"]: f["reason"] for f in rep["in_pytorch"]}
    check("cumsum" in listed and "no IR lowering" in listed["cumsum"], f"cumsum not reported: {listed}")
    ops = [o for k in imp.kernels for o in k.ops]
    for o in ("layer_norm", "linear", "gelu_tanh", "gelu_erf", "add", "mul"):
        check(o in ops, f"{o} is in no kernel: {ops}")
    for k in imp.kernels:
        perfdojo.parse(k.ir, k.name + ".pdj")
    # the residual add fuses into the second linear's epilogue
    check(any(k.ops[:2] == ["linear", "add"] for k in imp.kernels), [k.ops for k in imp.kernels])
    out["mlp_kernels"] = [k.ops for k in imp.kernels]

    # 2. Compile: the same outputs as eager, through the library's kernels.
    t0 = time.perf_counter()
    fast = perfdojo.compile(mlp, (x,), timeout=3, cache_dir=cache, progress=False)
    first_s = time.perf_counter() - t0
    with torch.no_grad():
        ref = mlp(x)
        got = fast(x)
    err = float((ref - got).abs().max())
    check(err <= 1e-3 * max(1.0, float(ref.abs().max())), f"mlp differs from eager by {err}")
    check(Path(fast.library).exists() and Path(fast.header).exists(), "no library or header")
    header = Path(fast.header).read_text()
    check(header.count("_entry(") == len(imp.kernels), header)
    check(not fast.report["library_cached"], "a fresh cache had the library already")
    # each kernel's optimiser report: the original's and the returned kernel's times
    check(all(k["baseline_s"] > 0 and k["final_s"] > 0 for k in fast.report["kernels"]), fast.report["kernels"])
    # the graph calls the kernels and keeps the two operators PyTorch runs
    code = fast.gm.code
    check(code.count("self.perfdojo_k") == len(imp.kernels) and "cumsum" in code, code)

    # 3. A second compile of the same model optimises nothing.
    t0 = time.perf_counter()
    again = perfdojo.compile(mlp, (x,), timeout=3, cache_dir=cache, progress=False)
    warm_s = time.perf_counter() - t0
    check(all(k["cached"] for k in again.report["kernels"]) and again.report["library_cached"],
          again.report["kernels"])
    check(warm_s < 10, f"warm compile took {warm_s:.1f} s")
    out.update(first_compile_s=first_s, warm_compile_s=warm_s, mlp_error=err)

    # 4. Another shape is refused, or runs eager when asked.
    try:
        fast(torch.randn(2, 9, 32))
        raise AssertionError("a different shape ran")
    except perfdojo.ShapeError as e:
        check("traced" in str(e), str(e))
    lenient = perfdojo.compile(mlp, (x,), timeout=3, cache_dir=cache, progress=False, fallback="eager")
    x9 = torch.randn(2, 9, 32)
    with torch.no_grad():
        check(torch.equal(lenient(x9), mlp(x9)), "fallback='eager' did not run eager")

    # 5. Attention: batched matmuls, scaling and softmax as kernels; views stay in PyTorch.
    att = Attention().eval()
    xa = torch.randn(1, 16, 32)
    fa = perfdojo.compile(att, (xa,), timeout=3, cache_dir=cache, progress=False)
    names = [k["ops"] for k in fa.report["kernels"]]
    check(any("matmul" in k for k in names) and any("softmax" in k for k in names), names)
    check(any("layout" in f["reason"] for f in fa.report["in_pytorch"]), fa.report["in_pytorch"])
    with torch.no_grad():
        e = float((att(xa) - fa(xa)).abs().max())
    check(e <= 1e-3, f"attention differs from eager by {e}")

    # 6. RMSNorm written as operators (pow, mean keepdim, rsqrt: broadcasts) and SwiGLU.
    sw = RMSNormSwiGLU().eval()
    xs = torch.randn(3, 5, 32)
    fs = perfdojo.compile(sw, (xs,), timeout=3, cache_dir=cache, progress=False)
    check(fs.report["operators_in_pytorch"] == 0, fs.report["in_pytorch"])
    with torch.no_grad():
        e = float((sw(xs) - fs(xs)).abs().max())
    check(e <= 1e-3, f"rmsnorm-swiglu differs from eager by {e}")

    # 7. A convolution block with inference batch norm (per-channel broadcasts, zero padding).
    conv = ConvBlock().eval()
    xc = torch.randn(1, 8, 10, 10)
    fc = perfdojo.compile(conv, (xc,), timeout=3, cache_dir=cache, progress=False)
    check(fc.report["operators_in_pytorch"] == 0, fc.report["in_pytorch"])
    check(any("conv2d" in k["ops"] and "batch_norm" in k["ops"] for k in fc.report["kernels"]), fc.report["kernels"])
    with torch.no_grad():
        e = float((conv(xc) - fc(xc)).abs().max())
    check(e <= 1e-3, f"conv block differs from eager by {e}")
    out["frontend"] = "export" if hasattr(torch, "export") else "fx"

    # 8. An in-place operator through a view overwrites the tensor the view shares: it stays in
    # PyTorch, so the later read sees the overwritten values, as in eager.
    alias = InPlaceThroughView().eval()
    xi = torch.randn(4, 8)
    fi = perfdojo.compile(alias, (xi,), timeout=3, cache_dir=cache, progress=False)
    with torch.no_grad():
        check(torch.allclose(fi(xi), alias(xi)), "an in-place update through a view was lost")

    # 9. A module that cannot be traced: a clear error, not a crash.
    try:
        perfdojo.from_torch(Branchy(), (torch.randn(3),), frontend="fx")
        raise AssertionError("an untraceable module imported")
    except perfdojo.ModelImportError as e:
        check("cannot trace" in str(e), str(e))
    # wrong example inputs: a clear error too
    try:
        perfdojo.from_torch(mlp, (torch.randn(2, 8, 31),))
        raise AssertionError("mismatched inputs imported")
    except perfdojo.ModelImportError as e:
        check("do not run through" in str(e), str(e))

    # 10. A kernel whose buffers the library would pass in another order or size is refused
    # before it runs (it could write outside a tensor).
    from perfdojo import torch_import as ti
    k = imp.kernels[0]
    header = "void kernel(" + ", ".join(
        [f"const float* a{i} /* input {'x'.join(map(str, s))}, row-major */" for i, s in enumerate(k.input_shapes)] +
        [f"float* b{i} /* output {'x'.join(map(str, s))}, row-major */" for i, s in enumerate(k.output_shapes)]) + ");"
    ti._check_signature(header, k)  # the right order passes
    swapped = ti.Kernel(k.name, k.ir, k.ops, k.nodes, k.inputs, k.input_shapes[::-1] + [(7,)], k.outputs,
                        k.output_shapes)
    try:
        ti._check_signature(header, swapped)
        raise AssertionError("a mismatched signature passed")
    except RuntimeError as e:
        check("the library would pass" in str(e), str(e))

    out["ok"] = True
    print(json.dumps(out))


if __name__ == "__main__":
    main()
