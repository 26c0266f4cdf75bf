#!/usr/bin/python3
"""PyTorch times (one thread unless --threads N) for the shipped kernels it expresses.

Run by Debian's interpreter (`/usr/bin/python3`, which has the `python3-torch` package), usually
from `kernel_bench` (with `--interleave`); alone it prints each kernel's PyTorch time:

    /usr/bin/python3 benchmarks/torch_baseline.py kernels/softmax.pdj kernels/mlp.pdj --json

Sizes come from each kernel file's size lines (`N = 1024`), so a resized kernel is timed at its
own size. Each kernel is written the way a PyTorch user would (the fused library call where one
exists: `F.softmax`, `F.layer_norm`, `F.conv2d`, `torch.addmm`, `torch.bmm`), in float32, on one thread (or --threads N), with
warm-up runs and the median of timed repetitions (at least 0.5 s or 10 runs). Where a user has
several reasonable forms (a preallocated `out=`, an in-place epilogue, nn.Linear's weight
layout, channels_last), each is timed briefly and the fastest is the baseline; the record names
it (`expression`) and gives every form's time (`forms`). A kernel PyTorch cannot express here is
reported with `"error"`.

PyTorch gets its best process: Debian's OpenBLAS told the right core for this CPU (see
openblas_core), and the process keeps its freed memory (glibc's mmap off, its trim threshold raised, see ALLOCATOR_ENV):
without that, PyTorch's multi-op forms pay page faults for fresh temporaries on every call.

With `--interleave MANIFEST` (written by `kernel_bench`), each kernel's shared object is loaded
with ctypes and our kernel and PyTorch's form are timed interleaved in this one process, a call
of each in turn, warm, `reps` times; min and median of both are printed as JSON lines.
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


def dtypes_of(path):
    """The element types of the inputs and outputs `path` declares, in order (the entry's buffers)."""
    out = []
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*(input|output)\s+\w+\s*:\s*(f32|f64|i32|bf16|f16|u8|i8)\s*\[", line)
            if m:
                out.append(m.group(2))
    return out


def ranges_of(path):
    """The declared value ranges of the inputs and outputs `path` declares, in order (None where
    a buffer declares none): (LO, HI, sorted) for an index buffer's `in [0, V)`, sizes
    resolved, sorted when it is declared `sorted` (a CSR row pointer)."""
    sizes = sizes_of(path)
    out = []
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*(input|output)\s+\w+\s*:[^#]*?(?:\bin\s*\[\s*([\w.+-]+)\s*,\s*([\w.+-]+)\s*[\])])?(\s+sorted)?\s*(#.*)?$", line)
            if m:
                lo, hi = m.group(2), m.group(3)
                out.append(None if lo is None else
                           tuple(sizes[v] if v in sizes else float(v) for v in (lo, hi))
                           + (m.group(4) is not None,))
    return out


def csr_forms(name, s, torch):
    """A CSR matrix (M x N, NNZ non-zeros, rows of random lengths, columns uniform) times a
    vector or a dense K-column matrix, as users run it: PyTorch's CSR tensor (torch.mv,
    torch.sparse.mm, A @ B; MKL's sparse BLAS where PyTorch has it) and scipy.sparse where it is
    installed. The structure has the same distribution as ours (sorted uniform row pointers)."""
    m, n, nnz = s["M"], s["N"], s["NNZ"]
    rowptr = torch.sort(torch.randint(0, nnz + 1, (m + 1,)))[0]
    rowptr[0], rowptr[-1] = 0, nnz
    col = torch.randint(0, n, (nnz,))
    val = torch.rand(nnz) * 2 - 1
    a = torch.sparse_csr_tensor(rowptr, col, val, (m, n))
    out = []
    try:
        import numpy as np
        import scipy.sparse as sp
    except ImportError:
        sp = None  # no scipy in this interpreter: PyTorch's forms only
    an = None
    if sp is not None and isinstance(torch.Tensor, type) and isinstance(val, torch.Tensor):
        an = sp.csr_matrix((val.numpy(), col.numpy().astype(np.int32), rowptr.numpy().astype(np.int32)),
                           shape=(m, n))
    if name == "csr-spmv":
        x = torch.rand(n) * 2 - 1
        out += [("torch.mv(A_csr, x)", lambda: torch.mv(a, x)), ("A_csr @ x", lambda: a @ x)]
        if an is not None:
            xn = x.numpy()
            out.append(("scipy.sparse csr_matrix @ x", lambda: an @ xn))
        return out
    b = torch.rand(n, s["K"]) * 2 - 1
    out += [("torch.sparse.mm(A_csr, B)", lambda: torch.sparse.mm(a, b)), ("A_csr @ B", lambda: a @ b)]
    if an is not None:
        bn = b.numpy()
        out.append(("scipy.sparse csr_matrix @ B", lambda: an @ bn))
    return out


def embedding_forms(name, s, torch):
    """Gathers of table rows (kernels/embedding*.pdj), as users write them: F.embedding_bag on
    fixed-length bags (a 2-D index, PyTorch's fused kernel, FBGEMM's where it is built in), the
    gather then the reduction, and index_select; indices uniform over the table, as ours."""
    F = torch.nn.functional
    w = torch.rand(s["V"], s["D"]) * 2 - 1
    if name == "embedding":
        idx = torch.randint(0, s["V"], (s["N"],))
        y = torch.empty(s["N"], s["D"])
        return [("F.embedding(idx, W)", lambda: F.embedding(idx, w)),
                ("torch.index_select(W, 0, idx, out=y)", lambda: torch.index_select(w, 0, idx, out=y))]
    mode = "mean" if name.endswith("mean") else "sum"
    idx = torch.randint(0, s["V"], (s["B"], s["L"]))
    flat, offsets = idx.reshape(-1), torch.arange(0, s["B"] * s["L"], s["L"])
    reduce = torch.mean if mode == "mean" else torch.sum
    bag = torch.nn.EmbeddingBag.from_pretrained(w, mode=mode)
    return [(f"F.embedding_bag(idx[B, L], W, mode='{mode}')",
             lambda: F.embedding_bag(idx, w, mode=mode)),
            (f"F.embedding_bag(flat idx, W, offsets, mode='{mode}')",
             lambda: F.embedding_bag(flat, w, offsets, mode=mode)),
            (f"nn.EmbeddingBag(mode='{mode}')", lambda: bag(idx)),
            (f"F.embedding(idx, W).{mode}(1)", lambda: reduce(F.embedding(idx, w), 1))]


def structured_sparse_forms(name, s, torch):
    """Block-sparse (16 x 16 BSR) and 2:4 structured-sparse matrices times a dense one: PyTorch's
    BSR and CSR tensors where its CPU build multiplies them, and the dense GEMM of the same shape
    (torch.mm on the expanded matrix: what the sparsity must beat, issue 64)."""
    out = []
    if name == "bsr-spmm":
        mb, nb, n, nnzb = s["MB"], s["NB"], s["N"], s["NNZB"]
        crow = torch.sort(torch.randint(0, nnzb + 1, (mb + 1,)))[0]
        crow[0], crow[-1] = 0, nnzb
        col = torch.randint(0, nb, (nnzb,))
        val = torch.rand(nnzb, 16, 16) * 2 - 1
        a = torch.sparse_bsr_tensor(crow, col, val, (mb * 16, nb * 16))
        b = torch.rand(nb * 16, n) * 2 - 1
        dense = a.to_dense()
        csr = dense.to_sparse_csr()
        for what, fn in (("A_bsr @ B", lambda: a @ b),
                         ("torch.sparse.mm(A_csr, B) (the blocks' entries as CSR)", lambda: torch.sparse.mm(csr, b))):
            try:
                fn()
                out.append((what, fn))
            except (RuntimeError, NotImplementedError):
                pass  # not in this CPU build
        out.append(("torch.mm(A dense, B) (the dense GEMM of the same shape)", lambda: torch.mm(dense, b)))
        return out
    m, g, n = s["M"], s["G"], s["N"]
    dense = torch.rand(m, g * 4) * 2 - 1
    keep = torch.rand(m, g, 4).argsort(dim=2)[:, :, :2]  # 2 of each 4, as 2:4 pruning keeps
    mask = torch.zeros(m, g, 4).scatter_(2, keep, 1.0).reshape(m, g * 4)
    a = dense * mask
    b = torch.rand(g * 4, n) * 2 - 1
    out.append(("torch.mm(A dense, B) (the dense GEMM of the same shape; PyTorch's 2:4 kernels are "
                "CUDA-only)", lambda: torch.mm(a, b)))
    csr = a.to_sparse_csr()
    out.append(("torch.sparse.mm(A_csr, B) (the 2:4 matrix as CSR)", lambda: torch.sparse.mm(csr, b)))
    return out


def forms(name, s, torch):
    """[(description, zero-argument callable)]: the reasonable ways a PyTorch user writes kernel
    `name` with sizes `s` (library calls, preallocated outputs, in-place epilogues, the layout a
    module would hold its weights in). The fastest one here is the baseline (see best_form)."""
    F = torch.nn.functional
    r = lambda *shape: torch.rand(*shape, dtype=torch.float32) * 2 - 1  # noqa: E731
    if name.startswith("embedding"):  # row gathers through an index buffer
        return embedding_forms(name, s, torch)
    if name.startswith("csr-"):  # CSR sparse times dense
        return csr_forms(name, s, torch)
    if name in ("bsr-spmm", "sparse24-gemm"):  # block and 2:4 structured sparsity
        return structured_sparse_forms(name, s, torch)
    if name.startswith("gemm-u8i8"):  # int8 GEMM, u8 x i8 -> i32 (benchmarks/unseen/gemm-u8i8-*)
        return int8_gemm_forms(s, torch)
    if name.startswith("linear-int8"):  # f32(X u8 W^T i8) * scale + bias (benchmarks/unseen)
        return int8_linear_forms(s, torch)
    if name == "gemv":
        a, x = r(s["M"], s["K"]), r(s["K"])  # kernels/gemv.pdj: y[M] = A[M, K] x[K]
        y = torch.empty(s["M"])
        return [("torch.mv(A, x)", lambda: torch.mv(a, x)),
                ("torch.mv(A, x, out=y)", lambda: torch.mv(a, x, out=y))]
    if name.startswith("matmul-bf16"):  # bf16 in and out, summed in f32 (benchmarks/unseen)
        a = r(s["M"], s["K"]).to(torch.bfloat16)
        b = r(s["K"], s["N"]).to(torch.bfloat16)
        c = torch.empty(s["M"], s["N"], dtype=torch.bfloat16)
        return [("torch.mm(A, B) on bf16 (oneDNN)", lambda: torch.mm(a, b)),
                ("torch.mm(A, B, out=C) on bf16", lambda: torch.mm(a, b, out=c)),
                ("torch.matmul(A, B) on bf16", lambda: torch.matmul(a, b))]
    if name.startswith("matmul") and name != "matmul-at":  # A^T B has its form below
        a, b = r(s["M"], s["K"]), r(s["K"], s["N"])
        c = torch.empty(s["M"], s["N"])
        return [("torch.mm(A, B)", lambda: torch.mm(a, b)),
                ("torch.mm(A, B, out=C)", lambda: torch.mm(a, b, out=c))]
    if name == "syrk":  # C = A A^T (benchmarks/unseen/syrk.pdj): a user writes the full GEMM
        a = r(s["M"], s["K"])
        c = torch.empty(s["M"], s["M"])
        return [("torch.mm(A, A.t())", lambda: torch.mm(a, a.t())),
                ("torch.mm(A, A.t(), out=C)", lambda: torch.mm(a, a.t(), out=c))]
    if name == "msq":  # C = A A (benchmarks/unseen/msq.pdj)
        a = r(s["N"], s["N"])
        c = torch.empty(s["N"], s["N"])
        return [("torch.mm(A, A)", lambda: torch.mm(a, a)),
                ("torch.mm(A, A, out=C)", lambda: torch.mm(a, a, out=c))]
    if name == "bmm-nt":  # C[b] = A[b] B[b]^T (benchmarks/unseen/bmm-nt.pdj)
        a, b = r(s["BATCH"], s["M"], s["K"]), r(s["BATCH"], s["N"], s["K"])
        c = torch.empty(s["BATCH"], s["M"], s["N"])
        return [("torch.bmm(A, B.transpose(1, 2))", lambda: torch.bmm(a, b.transpose(1, 2))),
                ("torch.bmm(A, B.transpose(1, 2), out=C)", lambda: torch.bmm(a, b.transpose(1, 2), out=c)),
                ("torch.matmul(A, B.mT)", lambda: torch.matmul(a, b.mT))]
    if name == "colsoftmax":  # softmax down the columns (benchmarks/unseen/colsoftmax.pdj)
        x = r(s["B"], s["N"])
        y = torch.empty(s["B"], s["N"])
        return [("F.softmax(x, dim=0)", lambda: F.softmax(x, dim=0)),
                ("torch.softmax(x, 0, out=y)", lambda: torch._softmax(x, 0, False, out=y)),
                ("F.softmax(x.t(), dim=1).t()", lambda: F.softmax(x.t(), dim=1).t())]
    if name == "conv-nhwc":  # channels-last conv2d 3x3 (benchmarks/unseen/conv-nhwc.pdj)
        x = r(s["N"], s["C"], s["HI"], s["WI"])
        w = r(s["K"], s["C"], s["R"], s["S"])
        xl, wl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        return [("F.conv2d, channels_last", lambda: F.conv2d(xl, wl)),
                ("F.conv2d, NCHW", lambda: F.conv2d(x, w))]
    if name == "linear-nt":  # Y = X W^T, nn.Linear's layout (benchmarks/unseen/linear-nt.pdj)
        x, w = r(s["M"], s["K"]), r(s["N"], s["K"])
        y = torch.empty(s["M"], s["N"])
        return [("F.linear(X, W)", lambda: F.linear(x, w)),
                ("torch.mm(X, W.t(), out=Y)", lambda: torch.mm(x, w.t(), out=y))]
    if name == "small-bmm":  # many 32 x 32 x 32 products (benchmarks/unseen/small-bmm.pdj)
        a, b = r(s["BATCH"], s["M"], s["K"]), r(s["BATCH"], s["K"], s["N"])
        c = torch.empty(s["BATCH"], s["M"], s["N"])
        return [("torch.bmm(A, B)", lambda: torch.bmm(a, b)),
                ("torch.bmm(A, B, out=C)", lambda: torch.bmm(a, b, out=c))]
    if name == "dwconv-nhwc":  # depthwise 3x3, channels last (benchmarks/unseen/dwconv-nhwc.pdj)
        x = r(s["N"], s["C"], s["HI"], s["WI"])
        w = r(s["C"], 1, s["R"], s["S"])
        xl, wl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        return [("F.conv2d(groups=C), channels_last", lambda: F.conv2d(xl, wl, groups=s["C"])),
                ("F.conv2d(groups=C), NCHW", lambda: F.conv2d(x, w, groups=s["C"]))]
    if name == "sym":  # (x + x^T) / 2 (benchmarks/unseen/sym.pdj)
        x = r(s["N"], s["N"])
        y = torch.empty(s["N"], s["N"])
        return [("(x + x.t()) * 0.5", lambda: (x + x.t()) * 0.5),
                ("torch.add(x, x.t(), out=y).mul_(0.5)", lambda: torch.add(x, x.t(), out=y).mul_(0.5))]
    if name == "seqmean":  # mean over the sequence (benchmarks/unseen/seqmean.pdj)
        x = r(s["B"], s["L"], s["D"])
        y = torch.empty(s["B"], s["D"])
        return [("x.mean(1)", lambda: x.mean(1)),
                ("torch.mean(x, 1, out=y)", lambda: torch.mean(x, 1, out=y))]
    if name == "attn-d128":  # attention, head dimension 128 (benchmarks/unseen/attn-d128.pdj)
        q, k, v = r(s["L"], s["D"]), r(s["L"], s["D"]), r(s["L"], s["D"])
        scale = 1.0 / s["D"] ** 0.5
        sdpa = getattr(F, "scaled_dot_product_attention", None)
        out = [("softmax(Q K^T * scale) V", lambda: torch.mm(F.softmax(torch.mm(q, k.t()) * scale, dim=1), v))]
        if sdpa:
            out.append(("F.scaled_dot_product_attention", lambda: sdpa(q[None], k[None], v[None])))
        return out
    if name == "linear-res":  # relu(X W + b) + R (benchmarks/unseen/linear-res.pdj)
        x, w, b, res = r(s["M"], s["K"]), r(s["K"], s["N"]), r(s["N"]), r(s["M"], s["N"])
        y = torch.empty(s["M"], s["N"])
        return [("torch.relu(torch.addmm(b, X, W)) + R", lambda: torch.relu(torch.addmm(b, x, w)) + res),
                ("addmm(out=Y), relu_, add_", lambda: torch.addmm(b, x, w, out=y).relu_().add_(res))]
    if name == "gemv-batch4":  # y = x W^T for 4 rows (benchmarks/unseen/gemv-batch4.pdj)
        w, x = r(s["N"], s["K"]), r(s["BATCH"], s["K"])
        y = torch.empty(s["BATCH"], s["N"])
        return [("F.linear(x, W)", lambda: F.linear(x, w)),
                ("torch.mm(x, W.t(), out=y)", lambda: torch.mm(x, w.t(), out=y))]
    if name == "pw-nhwc":  # 1x1 conv, channels last (benchmarks/unseen/pw-nhwc.pdj)
        x = r(s["N"], s["C"], s["H"], s["W"])
        w = r(s["K"], s["C"], 1, 1)
        xl, wl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        x2 = r(s["N"] * s["H"] * s["W"], s["C"])
        w2 = r(s["C"], s["K"])
        return [("F.conv2d 1x1, channels_last", lambda: F.conv2d(xl, wl)),
                ("torch.mm over the pixels", lambda: torch.mm(x2, w2))]
    if name == "softmax-77":  # softmax over rows of 77 (benchmarks/unseen/softmax-77.pdj)
        x = r(s["B"], s["N"])
        return [("F.softmax(x, dim=1)", lambda: F.softmax(x, dim=1))]
    if name == "tconv1d":  # transposed conv1d, stride 2 (benchmarks/unseen/tconv1d.pdj)
        x = r(1, s["C1"], s["T"])
        w = r(s["C1"], s["C2"], s["R"])
        return [("F.conv_transpose1d(x, w, stride=2)", lambda: F.conv_transpose1d(x, w, stride=2))]
    if name == "contract3":  # C[a,b] = sum_{c,d} A[a,c,d] B[c,d,b] (benchmarks/unseen/contract3.pdj)
        a, b = r(s["NA"], s["NC"], s["ND"]), r(s["NC"], s["ND"], s["NB"])
        a2, b2 = a.reshape(s["NA"], -1), b.reshape(-1, s["NB"])
        return [("torch.einsum('acd,cdb->ab')", lambda: torch.einsum("acd,cdb->ab", a, b)),
                ("torch.mm over the flattened (c, d)", lambda: torch.mm(a2, b2))]
    if name == "cumsum":  # running sum along rows (benchmarks/unseen/cumsum.pdj)
        x = r(s["M"], s["N"])
        y = torch.empty(s["M"], s["N"])
        return [("torch.cumsum(x, 1)", lambda: torch.cumsum(x, 1)),
                ("torch.cumsum(x, 1, out=y)", lambda: torch.cumsum(x, 1, out=y))]
    if name == "ln-768":  # layer norm over rows of 768 (benchmarks/unseen/ln-768.pdj)
        x, g, b = r(s["R"], s["N"]), r(s["N"]), r(s["N"])
        return [("F.layer_norm(x, (N,), g, b, 1e-5)", lambda: F.layer_norm(x, (s["N"],), g, b, 1e-5))]
    if name == "maxpool-nhwc":  # 3x3 stride-2 max pooling, channels last (benchmarks/unseen/maxpool-nhwc.pdj)
        x = r(1, s["C"], s["HI"], s["WI"]).contiguous(memory_format=torch.channels_last)
        return [("F.max_pool2d(x, 3, 2), channels_last", lambda: F.max_pool2d(x, 3, 2))]
    if name == "gconv":  # grouped conv2d 3x3 (benchmarks/unseen/gconv.pdj)
        x = r(1, s["G"] * s["CG"], s["HI"], s["WI"])
        w = r(s["G"] * s["KG"], s["CG"], s["R"], s["S"])
        xl, wl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        return [("F.conv2d(groups=G), NCHW", lambda: F.conv2d(x, w, groups=s["G"])),
                ("F.conv2d(groups=G), channels_last", lambda: F.conv2d(xl, wl, groups=s["G"]))]
    if name == "midsoftmax":  # softmax over the middle axis (benchmarks/unseen/midsoftmax.pdj)
        x = r(s["B"], s["L"], s["D"])
        return [("F.softmax(x, dim=1)", lambda: F.softmax(x, dim=1))]
    if name == "chanpool":  # mean and max over channels (benchmarks/unseen/chanpool.pdj)
        x = r(s["C"], s["H"], s["W"])
        return [("x.mean(0), x.amax(0)", lambda: (x.mean(0), x.amax(0))),
                ("torch.mean(x, 0), torch.max(x, 0)", lambda: (torch.mean(x, 0), torch.max(x, 0)))]
    if name == "upsample2x":  # nearest 2x upsampling (benchmarks/unseen/upsample2x.pdj)
        x = r(1, s["C"], s["H"], s["W"])
        return [("F.interpolate(x, scale_factor=2)", lambda: F.interpolate(x, scale_factor=2)),
                ("x.repeat_interleave(2, 2).repeat_interleave(2, 3)", lambda: x.repeat_interleave(2, 2).repeat_interleave(2, 3))]
    if name == "bilinear":  # s[b] = x[b] A y[b] (benchmarks/unseen/bilinear.pdj)
        x, a, y = r(s["B"], s["I"]), r(s["I"], s["J"]), r(s["B"], s["J"])
        t, a3 = torch.empty(s["B"], s["J"]), a.reshape(1, s["I"], s["J"])
        return [("(x @ A * y).sum(1)", lambda: (x @ a * y).sum(1)),
                ("torch.mm(x, A, out=t).mul_(y).sum(1)", lambda: torch.mm(x, a, out=t).mul_(y).sum(1)),
                ("F.bilinear(x, y, A[None])", lambda: F.bilinear(x, y, a3))]
    if name == "bnstats":  # per-channel mean and mean square (benchmarks/unseen/bnstats.pdj)
        x = r(s["N"], s["C"], s["P"])
        return [("x.mean((0, 2)), (x * x).mean((0, 2))", lambda: (x.mean((0, 2)), (x * x).mean((0, 2)))),
                ("torch.var_mean(x, (0, 2))", lambda: torch.var_mean(x, (0, 2)))]
    if name == "conv1d":  # conv1d, kernel 3, no padding (benchmarks/unseen/conv1d.pdj)
        x, w = r(1, s["CI"], s["TI"]), r(s["CO"], s["CI"], s["KW"])
        return [("F.conv1d(x, w)", lambda: F.conv1d(x, w))]
    if name == "conv5x5-s2":  # conv2d 5x5, stride 2 (benchmarks/unseen/conv5x5-s2.pdj)
        x, w = r(s["N"], s["C"], s["HI"], s["WI"]), r(s["K"], s["C"], s["KH"], s["KW"])
        xl, wl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        return [("F.conv2d(x, w, stride=2), NCHW", lambda: F.conv2d(x, w, stride=2)),
                ("F.conv2d(x, w, stride=2), channels_last", lambda: F.conv2d(xl, wl, stride=2))]
    if name == "dwconv-s2":  # depthwise 3x3, stride 2, channels first (benchmarks/unseen/dwconv-s2.pdj)
        x, w = r(1, s["C"], s["HI"], s["WI"]), r(s["C"], 1, s["KH"], s["KW"])
        xl, wl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        return [("F.conv2d(groups=C, stride=2), NCHW", lambda: F.conv2d(x, w, stride=2, groups=s["C"])),
                ("F.conv2d(groups=C, stride=2), channels_last", lambda: F.conv2d(xl, wl, stride=2, groups=s["C"]))]
    if name == "dgemm":  # f64 matrix product (benchmarks/unseen/dgemm.pdj)
        a = torch.rand(s["M"], s["K"], dtype=torch.float64)
        b = torch.rand(s["K"], s["N"], dtype=torch.float64)
        c = torch.empty(s["M"], s["N"], dtype=torch.float64)
        return [("torch.mm(A, B, out=C), f64", lambda: torch.mm(a, b, out=c))]
    if name == "f64-dot":  # f64 row dot products (benchmarks/unseen/f64-dot.pdj)
        x = torch.rand(s["R"], s["N"], dtype=torch.float64)
        y = torch.rand(s["R"], s["N"], dtype=torch.float64)
        return [("(x * y).sum(1), f64", lambda: (x * y).sum(1)),
                ("torch.einsum('rn,rn->r'), f64", lambda: torch.einsum("rn,rn->r", x, y))]
    if name == "gemv-t":  # y = A^T x (benchmarks/unseen/gemv-t.pdj)
        a, x, y = r(s["M"], s["N"]), r(s["M"]), torch.empty(s["N"])
        return [("torch.mv(A.t(), x, out=y)", lambda: torch.mv(a.t(), x, out=y)),
                ("x @ A", lambda: x @ a)]
    if name == "jacobi2d":  # 5-point stencil (benchmarks/unseen/jacobi2d.pdj)
        a = r(s["HP"], s["WP"])
        k = torch.tensor([[[[0.0, 0.2, 0.0], [0.2, 0.2, 0.2], [0.0, 0.2, 0.0]]]])
        a4 = a.reshape(1, 1, s["HP"], s["WP"])
        return [("0.2 * (five shifted slices summed)",
                 lambda: 0.2 * (a[1:-1, 1:-1] + a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])),
                ("F.conv2d with the 3x3 cross", lambda: F.conv2d(a4, k))]
    if name == "l2norm":  # rows scaled to unit norm (benchmarks/unseen/l2norm.pdj)
        x = r(s["R"], s["N"])
        return [("x * rsqrt((x * x).sum(1, keepdim=True) + 1e-6)",
                 lambda: x * torch.rsqrt((x * x).sum(1, keepdim=True) + 1e-6)),
                ("F.normalize(x, dim=1)", lambda: F.normalize(x, dim=1))]
    if name == "logsumexp":  # row log-sum-exp (benchmarks/unseen/logsumexp.pdj)
        x = r(s["R"], s["N"])
        return [("torch.logsumexp(x, 1)", lambda: torch.logsumexp(x, 1))]
    if name == "matmul-at":  # C = A^T B (benchmarks/unseen/matmul-at.pdj)
        a, b, c = r(s["K"], s["M"]), r(s["K"], s["N"]), torch.empty(s["M"], s["N"])
        return [("torch.mm(A.t(), B, out=C)", lambda: torch.mm(a.t(), b, out=c))]
    if name in ("narrow-matmul", "odd-matmul", "odd-matmul-500", "tiny"):  # C = A B, odd shapes
        a, b, c = r(s["M"], s["K"]), r(s["K"], s["N"]), torch.empty(s["M"], s["N"])
        return [("torch.mm(A, B, out=C)", lambda: torch.mm(a, b, out=c))]
    if name == "outer-acc":  # C = sum over t of a[t] c[t]^T (benchmarks/unseen/outer-acc.pdj)
        a, c, out = r(s["BT"], s["M"]), r(s["BT"], s["N"]), torch.empty(s["M"], s["N"])
        return [("torch.mm(a.t(), c, out=C)", lambda: torch.mm(a.t(), c, out=out))]
    if name == "permute3":  # y = x with its last two axes swapped (benchmarks/unseen/permute3.pdj)
        x, y = r(s["A"], s["B"], s["C"]), torch.empty(s["A"], s["C"], s["B"])
        return [("x.transpose(1, 2).contiguous()", lambda: x.transpose(1, 2).contiguous()),
                ("y.copy_(x.transpose(1, 2))", lambda: y.copy_(x.transpose(1, 2)))]
    if name == "silu":  # x * sigmoid(x) (benchmarks/unseen/silu.pdj)
        x, y = r(s["M"], s["N"]), torch.empty(s["M"], s["N"])
        return [("F.silu(x)", lambda: F.silu(x)),
                ("torch.mul(x, torch.sigmoid(x), out=y)", lambda: torch.mul(x, torch.sigmoid(x), out=y))]
    if name == "stencil1d":  # 3-point stencil (benchmarks/unseen/stencil1d.pdj)
        x = r(s["NP"])
        k, x3 = torch.tensor([[[0.25, 0.5, 0.25]]]), x.reshape(1, 1, s["NP"])
        return [("0.25 * x[:-2] + 0.5 * x[1:-1] + 0.25 * x[2:]", lambda: 0.25 * x[:-2] + 0.5 * x[1:-1] + 0.25 * x[2:]),
                ("F.conv1d with (0.25, 0.5, 0.25)", lambda: F.conv1d(x3, k))]
    if name == "bmm":
        a, b = r(s["BATCH"], s["M"], s["K"]), r(s["BATCH"], s["K"], s["N"])
        c = torch.empty(s["BATCH"], s["M"], s["N"])
        return [("torch.bmm(A, B)", lambda: torch.bmm(a, b)),
                ("torch.bmm(A, B, out=C)", lambda: torch.bmm(a, b, out=c))]
    if name == "softmax":
        x = r(s["B"], s["N"])
        return [("F.softmax(s, dim=1)", lambda: F.softmax(x, dim=1))]
    if name == "layernorm":
        x, g, b = r(s["R"], s["N"]), r(s["N"]), r(s["N"])
        return [("F.layer_norm(x, (N,), g, b, 1e-5)",
                 lambda: F.layer_norm(x, (s["N"],), g, b, 1e-5))]
    if name == "rmsnorm":
        x, g = r(s["R"], s["N"]), r(s["N"])
        # PyTorch 1.13 has no fused RMSNorm. The usual three-op form makes two full-size
        # temporaries; a practitioner after speed takes the row norms without one and scales
        # into a preallocated output (two passes over x).
        out, n, eps = torch.empty_like(x), s["N"], 1e-5

        def rms():
            r = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(n).add_(eps).rsqrt_()
            return torch.mul(x, r, out=out).mul_(g)
        return [("x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g",
                 lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g),
                ("vector_norm(x, -1)^2 / N + eps -> rsqrt; mul(x, r, out=y).mul_(g)", rms)]
    if name == "attention-bf16":  # bf16 in and out, computed in f32 (benchmarks/unseen)
        bf = torch.bfloat16
        q, k, v = (r(s["L"], s["D"]).to(bf) for _ in range(3))
        scale = 1.0 / (s["D"] ** 0.5)
        out = [("F.softmax(Q @ K.T * scale, dim=1) @ V on bf16",
                lambda: F.softmax(torch.mm(q, k.t()) * scale, dim=1).mm(v)),
               ("the same in f32 from bf16 inputs, O back to bf16",
                lambda: F.softmax(torch.mm(q.float(), k.float().t()) * scale, dim=1)
                .mm(v.float()).to(bf))]
        if hasattr(F, "scaled_dot_product_attention"):
            out += [("F.scaled_dot_product_attention on bf16",
                     lambda: F.scaled_dot_product_attention(q[None], k[None], v[None])),
                    ("F.scaled_dot_product_attention in f32, O back to bf16",
                     lambda: F.scaled_dot_product_attention(q.float()[None], k.float()[None],
                                                            v.float()[None]).to(bf))]
        return out
    if name == "attention":
        q, k, v = r(s["L"], s["D"]), r(s["L"], s["D"]), r(s["L"], s["D"])
        scale = 1.0 / (s["D"] ** 0.5)
        scores, out = torch.empty(s["L"], s["L"]), torch.empty(s["L"], s["D"])
        return [("F.softmax(Q @ K.T * scale, dim=1) @ V",
                 lambda: F.softmax(torch.mm(q, k.t()) * scale, dim=1).mm(v)),
                ("mm(Q, K.T, out=S).mul_(scale); mm(F.softmax(S, 1), V, out=O)",
                 lambda: torch.mm(F.softmax(torch.mm(q, k.t(), out=scores).mul_(scale), dim=1), v,
                                  out=out))]
    if name == "mlp":
        x, w, b = r(s["M"], s["K"]), r(s["K"], s["N"]), r(s["N"])
        wt = w.t().contiguous()  # how nn.Linear holds its weight: [out, in]
        y = torch.empty(s["M"], s["N"])
        return [("torch.relu(torch.addmm(b, X, W))", lambda: torch.relu(torch.addmm(b, x, w))),
                ("torch.addmm(b, X, W, out=Y).relu_()",
                 lambda: torch.addmm(b, x, w, out=y).relu_()),
                ("F.relu(F.linear(X, W.T, b)) (nn.Linear's weight layout)",
                 lambda: F.relu(F.linear(x, wt, b)))]
    if name.startswith("conv2d"):
        stride = 2 if name.endswith("s2") else 1
        x = r(s["N"], s["C"], s["HI"], s["WI"])
        w = r(s["K"], s["C"], s["KH"], s["KW"])
        xl = x.contiguous(memory_format=torch.channels_last)
        wl = w.contiguous(memory_format=torch.channels_last)
        return [(f"F.conv2d(x, w, stride={stride})", lambda: F.conv2d(x, w, stride=stride)),
                (f"F.conv2d(x, w, stride={stride}), channels_last",
                 lambda: F.conv2d(xl, wl, stride=stride))]
    if name in ("swiglu-mlp", "geglu-mlp"):
        x, w1, w3, w2 = r(s["T"], s["D"]), r(s["D"], s["H"]), r(s["D"], s["H"]), r(s["H"], s["D"])
        w13 = torch.cat([w1, w3], dim=1)  # one GEMM for both projections, as fused FFNs hold them
        act = F.silu if name == "swiglu-mlp" else (lambda a: F.gelu(a, approximate="tanh"))
        what = "F.silu" if name == "swiglu-mlp" else "F.gelu(tanh)"

        def fused():
            a, b = torch.mm(x, w13).split(s["H"], dim=1)
            return torch.mm(act(a).mul_(b), w2)
        return [(f"({what}(X @ W1) * (X @ W3)) @ W2", lambda: torch.mm(act(torch.mm(x, w1)) * torch.mm(x, w3), w2)),
                (f"X @ [W1 W3] split; {what}(a).mul_(b) @ W2", fused)]
    if name == "add-rmsnorm":
        x, res, g = r(s["T"], s["D"]), r(s["T"], s["D"]), r(s["D"])
        rr, y, n, eps = torch.empty_like(x), torch.empty_like(x), s["D"], 1e-6

        def fused():
            torch.add(x, res, out=rr)
            inv = torch.linalg.vector_norm(rr, dim=-1, keepdim=True).square_().div_(n).add_(eps).rsqrt_()
            return torch.mul(rr, inv, out=y).mul_(g)

        def plain():
            t = x + res
            return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) * g
        return [("r = x + res; r * rsqrt(r.pow(2).mean(-1) + eps) * g", plain),
                ("add(out=r); vector_norm^2 / D + eps -> rsqrt; mul(out=y).mul_(g)", fused)]
    if name == "rope":
        T, NH, P = s["T"], s["NH"], s["P"]
        q = r(T, NH, 2 * P)
        ang = torch.rand(T, P) * 6.28
        cos, sin = torch.cos(ang), torch.sin(ang)
        fc = torch.polar(torch.ones(T, P), ang)[:, None, :]  # the freqs_cis of LLaMA's code
        out = torch.empty_like(q)

        def real():
            q0, q1 = q[..., 0::2], q[..., 1::2]
            c, sn = cos[:, None, :], sin[:, None, :]
            out[..., 0::2] = q0 * c - q1 * sn
            out[..., 1::2] = q0 * sn + q1 * c
            return out
        return [("view_as_real(view_as_complex(q) * freqs_cis) (LLaMA)",
                 lambda: torch.view_as_real(torch.view_as_complex(q.view(T, NH, P, 2)) * fc).flatten(2)),
                ("q0 cos - q1 sin, q0 sin + q1 cos into out[..., 0::2], out[..., 1::2]", real)]
    if name == "attention-bias":
        q, k, v, bias = r(s["L"], s["D"]), r(s["L"], s["D"]), r(s["L"], s["D"]), r(s["L"], s["L"])
        scale = 1.0 / (s["D"] ** 0.5)
        out = torch.empty(s["L"], s["D"])
        return [("F.softmax(Q @ K.T * scale + B, 1) @ V",
                 lambda: F.softmax(torch.mm(q, k.t()) * scale + bias, dim=1).mm(v)),
                ("mm(F.softmax(addmm(B, Q, K.T, alpha=scale), 1), V, out=O)",
                 lambda: torch.mm(F.softmax(torch.addmm(bias, q, k.t(), alpha=scale), dim=1), v, out=out))]
    if name == "gqa-attention":
        KVH, G, L, D = s["KVH"], s["G"], s["L"], s["D"]
        q, k, v = r(KVH, G, L, D), r(KVH, L, D), r(KVH, L, D)
        scale = 1.0 / (D ** 0.5)

        def repeat_kv():  # LLaMA's code: repeat each key/value head for its query heads
            kk = k[:, None].expand(KVH, G, L, D).reshape(KVH * G, L, D)
            vv = v[:, None].expand(KVH, G, L, D).reshape(KVH * G, L, D)
            p = F.softmax(torch.bmm(q.reshape(KVH * G, L, D), kk.transpose(1, 2)) * scale, dim=-1)
            return torch.bmm(p, vv)

        def grouped():  # the group's queries stacked against one K: no copies of K and V
            qs = q.reshape(KVH, G * L, D)
            p = F.softmax(torch.bmm(qs, k.transpose(1, 2)).mul_(scale), dim=-1)
            return torch.bmm(p, v)
        return [("repeat_kv(K, V); softmax(bmm(Q, K^T) * scale) @ V", repeat_kv),
                ("Q as [KVH, G*L, D]; softmax(bmm(Q, K^T)) @ V", grouped)]
    if name == "softmax-temperature":
        x, mask, t = r(s["R"], s["N"]), r(s["R"], s["N"]), torch.tensor(0.7)
        z = torch.empty_like(x)
        return [("F.softmax((s + mask) / t, dim=1)", lambda: F.softmax((x + mask) / t, dim=1)),
                ("add(s, mask, out=z).div_(t); F.softmax(z, 1)",
                 lambda: F.softmax(torch.add(x, mask, out=z).div_(t), dim=1))]
    if name == "group-norm":
        G, CG, HW = s["G"], s["CG"], s["HW"]
        x, gamma, beta = r(1, G * CG, HW), r(G * CG), r(G * CG)
        return [("F.group_norm(x, G, gamma, beta, 1e-5)", lambda: F.group_norm(x, G, gamma, beta, 1e-5))]
    if name == "pointwise-conv":
        CI, CO, P = s["CI"], s["CO"], s["P"]
        side = int(round(P ** 0.5))
        x, w, b = r(CI, P), r(CO, CI), r(CO)
        x4, w4 = x.view(1, CI, side, side), w.view(CO, CI, 1, 1)
        y = torch.empty(CO, P)
        return [("F.conv2d(x, w 1x1, b)", lambda: F.conv2d(x4, w4, b)),
                ("torch.addmm(b[:, None], W, X, out=Y)", lambda: torch.addmm(b[:, None], w, x, out=y))]
    if name == "mqa-decode":
        NH, L, D = s["NH"], s["L"], s["D"]
        q, k, v = r(NH, D), r(L, D), r(L, D)
        scale = 1.0 / (D ** 0.5)
        return [("F.softmax(q @ K.T * scale, 1) @ V", lambda: F.softmax(torch.mm(q, k.t()) * scale, dim=1).mm(v))]
    if name in ("causal-attention", "sliding-window-attention", "causal-attention-bounded",
                "sliding-window-attention-bounded"):
        # Model code builds the mask once (a registered buffer), outside the timed call. The
        # bounded kernels compute the same (their scopes skip the masked part): same forms.
        L, D = s["L"], s["D"]
        q, k, v = r(L, D), r(L, D), r(L, D)
        scale = 1.0 / (D ** 0.5)
        i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
        keep = j <= i
        window = name.startswith("sliding-window")
        if window:
            keep = keep & (j > i - s["W"])
        hidden = ~keep
        bias = torch.zeros(L, L).masked_fill(hidden, float("-inf"))
        out = torch.empty(L, D)
        out_forms = [("F.softmax((Q @ K.T * scale).masked_fill(~mask, -inf), 1) @ V",
                      lambda: F.softmax((torch.mm(q, k.t()) * scale).masked_fill(hidden, float("-inf")), dim=1).mm(v)),
                     ("mm(F.softmax(addmm(mask_bias, Q, K.T, alpha=scale), 1), V, out=O)",
                      lambda: torch.mm(F.softmax(torch.addmm(bias, q, k.t(), alpha=scale), dim=1), v, out=out))]
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch's fused attention (2.0 on)
            q3, k3, v3 = q[None], k[None], v[None]
            if window:
                out_forms.append(("F.scaled_dot_product_attention(Q, K, V, attn_mask=window)",
                                  lambda: F.scaled_dot_product_attention(q3, k3, v3, attn_mask=keep[None])))
            else:
                out_forms.append(("F.scaled_dot_product_attention(Q, K, V, is_causal=True)",
                                  lambda: F.scaled_dot_product_attention(q3, k3, v3, is_causal=True)))
        return out_forms
    if name in ("trmm", "syrk-lower", "trsv-lower", "trsv-lower-bounded", "cholesky",
                "cholesky-bounded", "lu", "lu-bounded"):
        return linalg_forms(name, s, torch, r)
    if name in ("alibi-attention", "alibi-attention-bounded"):
        # BLOOM's form: the ALiBi bias and the causal mask built once, then baddbmm.
        NH, L, D = s["NH"], s["L"], s["D"]
        q, k, v = r(NH, L, D), r(NH, L, D), r(NH, L, D)
        scale = 1.0 / (D ** 0.5)
        slopes = 2.0 ** (-8.0 * (torch.arange(NH) + 1) / NH)
        i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
        bias = (-slopes[:, None, None] * (i - j)[None].float()).masked_fill((j > i)[None], float("-inf"))
        out = torch.empty(NH, L, D)
        return [("bmm(F.softmax(baddbmm(alibi_causal, Q, K^T, alpha=scale), -1), V) (BLOOM)",
                 lambda: torch.bmm(F.softmax(torch.baddbmm(bias, q, k.transpose(1, 2), alpha=scale), dim=-1), v)),
                ("bmm(..., out=O)",
                 lambda: torch.bmm(F.softmax(torch.baddbmm(bias, q, k.transpose(1, 2), alpha=scale), dim=-1), v, out=out))]
    if name == "rope-inline":
        # The same work as the kernel: angles, cos and sin for every position, then the rotation
        # (Hugging Face's rotary embedding recomputes cos/sin from the positions on every call).
        T, NH, P = s["T"], s["NH"], s["P"]
        q = r(T, NH, 2 * P)
        inv_freq = 10000.0 ** (-torch.arange(P, dtype=torch.float64) * 2 / (2 * P))
        pos = torch.arange(T, dtype=torch.float64)
        out = torch.empty_like(q)

        def real():
            ang = torch.outer(pos, inv_freq)
            c, sn = torch.cos(ang).float()[:, None, :], torch.sin(ang).float()[:, None, :]
            q0, q1 = q[..., 0::2], q[..., 1::2]
            out[..., 0::2] = q0 * c - q1 * sn
            out[..., 1::2] = q0 * sn + q1 * c
            return out

        def complex_form():
            fc = torch.polar(torch.ones(T, P), torch.outer(pos, inv_freq).float())[:, None, :]
            return torch.view_as_real(torch.view_as_complex(q.reshape(T, NH, P, 2)) * fc).flatten(2)
        return [("cos/sin of outer(t, inv_freq), then the pairs rotated", real),
                ("view_as_real(view_as_complex(q) * polar(1, angles)) (LLaMA)", complex_form)]
    if name == "sinusoidal-position":
        # The same work as the kernel: the encoding computed from the positions, then added.
        T, P = s["T"], s["P"]
        x = r(T, 2 * P)
        div = torch.exp(torch.arange(P, dtype=torch.float64) * (-2 * 9.210340371976184 / (2 * P)))
        pos = torch.arange(T, dtype=torch.float64)
        out = torch.empty_like(x)

        def halves():
            ang = torch.outer(pos, div)
            torch.add(x[:, :P], torch.sin(ang).float(), out=out[:, :P])
            torch.add(x[:, P:], torch.cos(ang).float(), out=out[:, P:])
            return out

        def concatenated():
            ang = torch.outer(pos, div)
            return x + torch.cat([torch.sin(ang), torch.cos(ang)], dim=1).float()
        return [("x + cat([sin, cos](outer(t, div_term)), 1) (tensor2tensor)", concatenated),
                ("add(x halves, sin / cos halves, out=y)", halves)]
    if name == "argmax":
        x = r(s["R"], s["N"])
        idx = torch.empty(s["R"], dtype=torch.int64)
        return [("torch.argmax(x, dim=1)", lambda: torch.argmax(x, dim=1)),
                ("torch.argmax(x, dim=1, out=i)", lambda: torch.argmax(x, dim=1, out=idx))]
    raise KeyError(name)


def int8_gemm_forms(s, torch):
    """An int8 GEMM's forms, u8 activations times i8 weights summed in i32, as users run it: ONNX
    Runtime's MatMulInteger (the same operation), PyTorch's quantised linear on each of its CPU
    engines (fbgemm, oneDNN, x86: quint8 x qint8, the result requantised to quint8, which the
    i32 output here leaves out), and torch._int_mm (i8 x i8 -> i32: the same arithmetic with
    signed activations). One thread each."""
    m, n, k = s["M"], s["N"], s["K"]
    out = []
    try:
        import numpy as np
        import onnxruntime as ort
        from onnx import TensorProto, helper
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "int8_gemm",
            [helper.make_tensor_value_info("A", TensorProto.UINT8, [m, k]),
             helper.make_tensor_value_info("B", TensorProto.INT8, [k, n])],
            [helper.make_tensor_value_info("Y", TensorProto.INT32, [m, n])])
        session = ort_session(graph)
        rng = np.random.default_rng(0)
        feeds = {"A": rng.integers(0, 256, (m, k), dtype=np.uint8),
                 "B": rng.integers(-128, 128, (k, n), dtype=np.int8)}
        binding = session.io_binding()
        for key, value in feeds.items():
            binding.bind_cpu_input(key, value)
        binding.bind_output("Y")
        out.append((f"onnxruntime {ort.__version__} MatMulInteger(A u8, B i8)",
                    lambda: session.run_with_iobinding(binding)))
    except ImportError:
        pass  # no ONNX Runtime in this interpreter: PyTorch's forms only
    x = torch.quantize_per_tensor(torch.rand(m, k), 1 / 255, 0, torch.quint8)
    engines = [e for e in ("fbgemm", "onednn", "x86") if e in torch.backends.quantized.supported_engines]
    for engine in engines:
        torch.backends.quantized.engine = engine  # the weights are packed for the engine
        w = torch.quantize_per_tensor(torch.rand(n, k) * 2 - 1, 1 / 127, 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(w, None)

        def run(engine=engine, packed=packed):
            torch.backends.quantized.engine = engine
            return torch.ops.quantized.linear(x, packed, 0.05, 128)
        out.append((f"torch.ops.quantized.linear ({engine}: quint8 x qint8, requantised)", run))
    a8 = torch.randint(-128, 128, (m, k), dtype=torch.int8)
    b8 = torch.randint(-128, 128, (k, n), dtype=torch.int8)
    out.append(("torch._int_mm(A i8, B i8)", lambda: torch._int_mm(a8, b8)))
    return out


def ort_session(graph):
    """An ONNX Runtime session on `graph` at the asked threads, or None without ONNX Runtime."""
    try:
        import onnxruntime as ort
        from onnx import helper
    except ImportError:
        return None
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads_asked()
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def int8_linear_forms(s, torch):
    """A quantised linear layer, Y = f32(X W^T) * scale + bias with X u8, W i8 [N, K] and a scale
    per output channel, as users run it: ONNX Runtime's MatMulInteger with the dequantising Mul
    and Add (W^T held as an initializer), PyTorch's quantised linear on each engine with
    per-channel weights and the bias, dequantised (its output is requantised to quint8 first,
    which ours leaves out), and torch._int_mm with the epilogue in place. One thread each."""
    m, n, k = s["M"], s["N"], s["K"]
    out = []
    try:
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper
        rng = np.random.default_rng(0)
        wt = rng.integers(-128, 128, (k, n), dtype=np.int8)
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["X", "WT"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "scale"], ["scaled"]),
             helper.make_node("Add", ["scaled", "bias"], ["Y"])], "int8_linear",
            [helper.make_tensor_value_info("X", TensorProto.UINT8, [m, k])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])],
            initializer=[numpy_helper.from_array(wt, "WT"),
                         numpy_helper.from_array(rng.random(n, dtype=np.float32) * 1e-3, "scale"),
                         numpy_helper.from_array(rng.random(n, dtype=np.float32), "bias")])
        session = ort_session(graph)
        if session is not None:
            import onnxruntime as ort
            binding = session.io_binding()
            binding.bind_cpu_input("X", rng.integers(0, 256, (m, k), dtype=np.uint8))
            binding.bind_output("Y")
            out.append((f"onnxruntime {ort.__version__} MatMulInteger + Cast + Mul + Add",
                        lambda: session.run_with_iobinding(binding)))
    except ImportError:
        pass  # no ONNX Runtime or numpy in this interpreter: PyTorch's forms only
    x = torch.quantize_per_tensor(torch.rand(m, k), 1 / 255, 0, torch.quint8)
    bias = torch.rand(n)
    engines = [e for e in ("fbgemm", "onednn", "x86") if e in torch.backends.quantized.supported_engines]
    for engine in engines:
        torch.backends.quantized.engine = engine
        w = torch.quantize_per_channel(torch.rand(n, k) * 2 - 1, torch.rand(n) * 1e-2 + 1e-3,
                                       torch.zeros(n, dtype=torch.long), 0, torch.qint8)
        try:
            packed = torch.ops.quantized.linear_prepack(w, bias)
        except RuntimeError:
            continue  # this engine takes no per-channel weights here

        def run(engine=engine, packed=packed):
            torch.backends.quantized.engine = engine
            return torch.ops.quantized.linear(x, packed, 0.05, 128).dequantize()
        out.append((f"torch.ops.quantized.linear ({engine}, per-channel) + dequantize()", run))
    a8 = torch.randint(-128, 128, (m, k), dtype=torch.int8)
    w8t = torch.randint(-128, 128, (n, k), dtype=torch.int8).t()
    scale = torch.rand(n) * 1e-3
    y = torch.empty(m, n)

    def int_mm():
        torch.mul(torch._int_mm(a8, w8t), scale, out=y)
        return y.add_(bias)
    out.append(("torch._int_mm(X i8, W^T i8) * scale + bias (in place)", int_mm))
    return out


def linalg_forms(name, s, torch, r):
    """The triangular and factorisation kernels: PyTorch's calls, and LAPACK/BLAS through scipy
    where it is installed (the routines a numerical user calls: strmm, ssyrk, spotrf, sgetrf)."""
    N = s["N"]
    try:
        import scipy.linalg as sl
        import scipy.linalg.blas as sb
    except ImportError:
        sl = sb = None
    out = []
    if name == "trmm":
        a, b = r(N, N).tril(), r(N, N)
        c = torch.empty(N, N)
        out += [("torch.mm(L, B, out=C) (a full GEMM: PyTorch has no trmm)",
                 lambda: torch.mm(a, b, out=c))]
        if sb is not None:
            an, bn = a.numpy(), b.numpy()
            out.append(("scipy.linalg.blas.strmm(1, L, B, lower=1)",
                        lambda: sb.strmm(1.0, an, bn, lower=1)))
    elif name == "syrk-lower":
        a = r(N, s["K"])
        c = torch.empty(N, N)
        out += [("torch.mm(A, A.t(), out=C) (both triangles)", lambda: torch.mm(a, a.t(), out=c))]
        if sb is not None:
            an = a.numpy()
            out.append(("scipy.linalg.blas.ssyrk(1, A, lower=1)", lambda: sb.ssyrk(1.0, an, lower=1)))
    elif name.startswith("trsv-lower"):
        # The kernel's system: strictly lower L (entries ~1/N) with d on the diagonal, built once.
        t = (r(N, N) * 0.001).tril(-1) + torch.diag(torch.rand(N) + 1)
        b = r(N, 1)
        out.append(("torch.linalg.solve_triangular(T, b, upper=False)",
                    lambda: torch.linalg.solve_triangular(t, b, upper=False)))
        if sl is not None:
            tn, bn = t.numpy(), b.numpy()
            out.append(("scipy.linalg.solve_triangular(T, b, lower=True)",
                        lambda: sl.solve_triangular(tn, bn, lower=True, check_finite=False)))
    elif name.startswith("cholesky"):
        a = r(N, N)
        eye = torch.eye(N) * (2 * N)
        out.append(("torch.linalg.cholesky(A + A.T + 2N I)",
                    lambda: torch.linalg.cholesky(a + a.t() + eye)))
        if sl is not None:
            sn = (a + a.t() + eye).numpy()
            out.append(("scipy.linalg.cholesky(S, lower=True) (LAPACK spotrf; S built once)",
                        lambda: sl.cholesky(sn, lower=True, check_finite=False)))
    elif name.startswith("lu"):
        a = r(N, N) + torch.eye(N) * N
        out.append(("torch.linalg.lu_factor(A + N I) (partial pivoting: LAPACK has no unpivoted LU)",
                    lambda: torch.linalg.lu_factor(a)))
        if sl is not None:
            an = a.numpy()
            out.append(("scipy.linalg.lu_factor(A + N I) (LAPACK sgetrf)",
                        lambda: sl.lu_factor(an, check_finite=False)))
    return out


def best_form(name, s, torch):
    """(description, callable, {description: median seconds}): the fastest of `forms` here."""
    timed = {}
    best = None
    for what, fn in forms(name, s, torch):
        t, _ = median_time(fn, min_seconds=0.2, min_reps=5)
        timed[what] = t
        if best is None or t < timed[best[0]]:
            best = (what, fn)
    return best[0], best[1], timed


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


def interleaved(entry_spec, torch, settle_s=0.0):
    """Times our kernel (ctypes) and PyTorch's form in turn; min and median of each. With
    `settle_s` (several threads) in blocks of 5 timed calls, each after untimed calls for at least
    that long: each library's idle threads spin after a call, on the cores the other needs, so
    call-by-call turns would time each against the other's pool (kernel_bench does the same)."""
    import ctypes
    name = entry_spec["kernel"]
    what, fn, timed = best_form(name, sizes_of(entry_spec["pdj"]), torch)
    lib = ctypes.CDLL(entry_spec["so"])
    entry = lib.perfdojo_entry
    entry.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    entry.restype = None
    # Our buffers, every one in [-1, 1) and of its declared type (an f64 kernel reads 8-byte
    # elements): the kernel initialises its outputs as it declares them.
    kinds = {"f32": torch.float32, "f64": torch.float64, "i32": torch.int32,
             "bf16": torch.bfloat16, "f16": torch.float16}  # the bits the kernel reads
    types = dtypes_of(entry_spec["pdj"])
    if len(types) != len(entry_spec["elements"]):
        raise ValueError(f"{name}: {len(entry_spec['elements'])} buffer sizes for {len(types)} declared "
                         "inputs and outputs")

    ranges = ranges_of(entry_spec["pdj"])

    def buffer(n, t, rng=None):
        if t == "i32" and rng is not None:  # an index buffer: values in the range it declares
            v = torch.randint(int(rng[0]), int(rng[1]), (n,), dtype=torch.int32)
            return torch.sort(v)[0] if rng[2] else v
        if t == "u8":
            return torch.randint(0, 256, (n,), dtype=torch.uint8)
        if t == "i8":
            return torch.randint(-128, 128, (n,), dtype=torch.int8)
        return (torch.rand(n, dtype=torch.float64) * 2 - 1).to(kinds[t])
    bufs = [buffer(n, t, rng) for n, t, rng in zip(entry_spec["elements"], types, ranges)]
    ptrs = (ctypes.c_void_p * len(bufs))(*[b.data_ptr() for b in bufs])

    def ours():
        entry(ptrs)

    reps = max(10, int(entry_spec.get("reps", 30)))
    for _ in range(3):
        ours()
        fn()
    t_ours, t_torch = [], []

    def block(f, n, times):
        start = time.perf_counter()
        while time.perf_counter() - start < settle_s:
            f()
        for _ in range(n):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)

    step = 5 if settle_s else 1
    for done in range(0, reps, step):
        block(ours, min(step, reps - done), t_ours)
        block(fn, min(step, reps - done), t_torch)
    t_ours.sort()
    t_torch.sort()
    return {"kernel": name, "expression": what, "forms": timed, "reps": reps,
            "ours_min_s": t_ours[0], "ours_median_s": t_ours[reps // 2],
            "torch_min_s": t_torch[0], "torch_median_s": t_torch[reps // 2]}


# glibc's malloc maps blocks above its mmap threshold (128 KiB, at most 32 MiB however raised)
# afresh at every call and unmaps them at free: PyTorch's multi-op forms (each op a fresh
# temporary) then spend most of their time in page faults (rmsnorm's 32 MiB temporaries: 50 ms
# per call, 13.9 ms without). A practitioner's process keeps its memory; with mmap off and the
# trim threshold raised glibc reuses its heap. The settings are read when the process starts,
# hence the re-execution.
ALLOCATOR_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(4 << 30),
                 "MALLOC_TOP_PAD_": str(64 << 20)}


def openblas_core():
    """The OpenBLAS core for this CPU (Debian's PyTorch multiplies with Debian's OpenBLAS, whose
    CPUID table calls recent Xeons a generic "Prescott" core, a fifth of the sgemm speed): the
    caller's OPENBLAS_CORETYPE, else SkylakeX with AVX-512, Haswell with AVX2, else none."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return os.environ["OPENBLAS_CORETYPE"]
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    return "SkylakeX" if "avx512f" in flags else "Haswell" if "avx2" in flags else ""


def threads_asked():
    """--threads N from the command line (read before argparse: the process is re-executed with
    its thread pools sized), 1 when absent or malformed (argparse then says so)."""
    argv = sys.argv[1:]
    for i, a in enumerate(argv):
        value = a.split("=", 1)[1] if a.startswith("--threads=") else (
            argv[i + 1] if a == "--threads" and i + 1 < len(argv) else None)
        if value is not None:
            try:
                return max(1, int(value))
            except ValueError:
                return 1
    return 1


def best_process():
    """Re-executes this script once with ALLOCATOR_ENV and the OpenBLAS core set, unless they are."""
    # The threads asked for everywhere: torch.set_num_threads does not reach OpenBLAS's own pool,
    # whose idle workers would spin on the cores the benchmark is pinned to.
    n = str(threads_asked())
    want = dict(ALLOCATOR_ENV, OPENBLAS_NUM_THREADS=n, OMP_NUM_THREADS=n)
    core = openblas_core()
    if core:
        want["OPENBLAS_CORETYPE"] = core
    if all(os.environ.get(k) == v for k, v in want.items()):
        return
    os.execve(sys.executable, [sys.executable] + sys.argv, dict(os.environ, **want))


def main():
    best_process()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels", nargs="*", help=".pdj files")
    ap.add_argument("--interleave", metavar="MANIFEST",
                    help="kernel_bench's manifest: time each shared object against PyTorch in turn")
    ap.add_argument("--json", action="store_true", help="one JSON object per kernel per line")
    ap.add_argument("--seconds", type=float, default=0.5, help="timed seconds per kernel")
    ap.add_argument("--threads", type=int, default=1,
                    help="PyTorch's threads (and OpenBLAS's); our kernels use what they were built for")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        msg = "PyTorch is not importable by %s (Debian package python3-torch)" % sys.executable
        names = [os.path.splitext(os.path.basename(path))[0] for path in args.kernels]
        if args.interleave:
            with open(args.interleave) as f:
                names = [spec.get("kernel", "?") for spec in json.load(f)]
        for name in names:
            print(json.dumps({"kernel": name, "error": msg}) if args.json else f"{name}: {msg}")
        return 0
    torch.set_num_threads(max(1, args.threads))
    torch.manual_seed(0)
    if args.interleave:
        with open(args.interleave) as f:
            specs = json.load(f)
        for spec in specs:
            try:
                with torch.no_grad():
                    rec = interleaved(spec, torch, 0.2 if args.threads > 1 else 0.0)
                rec.update({"torch": torch.__version__, "threads": torch.get_num_threads(),
                            "allocator": "glibc, no mmap, trim threshold 4 GiB",
                            "openblas_core": os.environ.get("OPENBLAS_CORETYPE", "by CPUID")})
            except KeyError as e:
                rec = {"kernel": spec.get("kernel", "?"),
                       "error": f"not expressed in this script (missing {e})"}
            except OSError as e:
                rec = {"kernel": spec.get("kernel", "?"), "error": f"cannot load: {e}"}
            print(json.dumps(rec), flush=True)
        return 0
    for path in args.kernels:
        name = os.path.splitext(os.path.basename(path))[0]
        rec = {"kernel": name, "torch": torch.__version__, "threads": torch.get_num_threads(),
               "allocator": "glibc, no mmap, trim threshold 4 GiB",
               "openblas_core": os.environ.get("OPENBLAS_CORETYPE", "by CPUID")}
        try:
            with torch.no_grad():
                what, fn, rec["forms"] = best_form(name, sizes_of(path), torch)
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
