"""The suite's kernels from current models, checked against numpy written from each kernel's
formula (its header comment), never from our interpreter. Sizes are scaled down (the size
lines replaced) so the reference interpreter runs in a moment; the formulas do not change."""

import re
from pathlib import Path

import numpy as np
import pytest

import perfdojo

KERNELS = Path(__file__).resolve().parents[2] / "kernels"


def scaled(name: str, sizes: dict) -> perfdojo.Program:
    text = (KERNELS / f"{name}.pdj").read_text()
    for size, value in sizes.items():
        text, n = re.subn(rf"^{size} = \d+$", f"{size} = {value}", text, flags=re.M)
        assert n == 1, f"{name}: no size line '{size} = ...'"
    return perfdojo.parse(text, f"{name}.pdj")


def run(name, sizes, inputs):
    p = scaled(name, sizes)
    return p.interpret({k: v for k, v in inputs.items()})


def rand(rng, *shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32).astype(np.float64)


def softmax(z, axis=-1):
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def gelu_tanh(a):
    return 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))


def close(got, want, rtol=2e-4, atol=2e-5):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_swiglu_mlp(rng):
    T, D, H = 5, 16, 24
    X, W1, W3, W2 = rand(rng, T, D), rand(rng, D, H), rand(rng, D, H), rand(rng, H, D)
    out = run("swiglu-mlp", {"T": T, "D": D, "H": H}, {"X": X, "W1": W1, "W3": W3, "W2": W2})
    a = X @ W1
    close(out["Y"], ((a / (1 + np.exp(-a))) * (X @ W3)) @ W2)


def test_geglu_mlp(rng):
    T, D, H = 5, 16, 24
    X, W1, W3, W2 = rand(rng, T, D), rand(rng, D, H), rand(rng, D, H), rand(rng, H, D)
    out = run("geglu-mlp", {"T": T, "D": D, "H": H}, {"X": X, "W1": W1, "W3": W3, "W2": W2})
    close(out["Y"], (gelu_tanh(X @ W1) * (X @ W3)) @ W2)


def test_add_rmsnorm(rng):
    T, D = 6, 40
    x, res, g = rand(rng, T, D), rand(rng, T, D), rand(rng, D)
    out = run("add-rmsnorm", {"T": T, "D": D}, {"x": x, "res": res, "g": g})
    r = x + res
    close(out["r"], r)
    close(out["y"], r / np.sqrt((r * r).mean(axis=1, keepdims=True) + 1e-6) * g)


def test_rope(rng):
    T, NH, P = 7, 3, 4
    q = rand(rng, T, NH, 2 * P)
    theta = 10000.0 ** (-np.arange(P) / P)
    angle = np.arange(T)[:, None] * theta[None, :]
    cos, sin = np.cos(angle), np.sin(angle)
    out = run("rope", {"T": T, "NH": NH, "D": 2 * P, "P": P}, {"q": q, "cos": cos, "sin": sin})
    close(out["o"], rotate_pairs(q, angle))


def rotate_pairs(q, angle):
    """RoPE: each pair (q[2i], q[2i+1]) turned by angle[t, i], as complex numbers."""
    z = (q[..., 0::2] + 1j * q[..., 1::2]) * np.exp(1j * angle)[:, None, :]
    want = np.empty_like(q)
    want[..., 0::2], want[..., 1::2] = z.real, z.imag
    return want


def test_attention_with_a_causal_mask(rng):
    L, D = 9, 8
    Q, K, V = rand(rng, L, D), rand(rng, L, D), rand(rng, L, D)
    B = np.where(np.tril(np.ones((L, L))) > 0, 0.0, -np.inf)
    out = run("attention-bias", {"L": L, "D": D}, {"Q": Q, "K": K, "V": V, "B": B})
    close(out["O"], softmax(Q @ K.T * 0.125 + B) @ V)
    assert np.allclose(out["O"][0], V[0], rtol=1e-5)  # the first token sees only itself


def test_gqa_attention(rng):
    KVH, G, L, D = 2, 3, 6, 8
    Q, K, V = rand(rng, KVH, G, L, D), rand(rng, KVH, L, D), rand(rng, KVH, L, D)
    out = run("gqa-attention", {"KVH": KVH, "G": G, "L": L, "D": D}, {"Q": Q, "K": K, "V": V})
    want = np.empty_like(Q)
    for h in range(KVH * G):  # query head h uses key/value head h // G
        kv, g = divmod(h, G)
        want[kv, g] = softmax(Q[kv, g] @ K[kv].T * 0.125) @ V[kv]
    close(out["O"], want)


def test_softmax_with_temperature_and_mask(rng):
    R, N = 4, 50
    s, mask, t = rand(rng, R, N, lo=-5, hi=5), rand(rng, R, N, lo=-8, hi=0), np.array([0.7])
    out = run("softmax-temperature", {"R": R, "N": N}, {"s": s, "mask": mask, "t": t})
    close(out["y"], softmax((s + mask) / 0.7))


def test_group_norm(rng):
    G, CG, HW = 3, 4, 10
    x, gamma, beta = rand(rng, G, CG, HW, lo=-3, hi=3), rand(rng, G, CG), rand(rng, G, CG)
    out = run("group-norm", {"G": G, "CG": CG, "HW": HW}, {"x": x, "gamma": gamma, "beta": beta})
    mean = x.mean(axis=(1, 2), keepdims=True)
    var = x.var(axis=(1, 2), keepdims=True)
    close(out["y"], (x - mean) / np.sqrt(var + 1e-5) * gamma[..., None] + beta[..., None])


def test_pointwise_conv(rng):
    CI, CO, P = 6, 5, 12
    x, w, b = rand(rng, CI, P), rand(rng, CO, CI), rand(rng, CO)
    out = run("pointwise-conv", {"CI": CI, "CO": CO, "P": P}, {"x": x, "w": w, "b": b})
    # A 1x1 convolution is a convolution with a 1x1 kernel: sum over input channels per pixel.
    want = np.einsum("oi,ip->op", w, x) + b[:, None]
    close(out["y"], want)


def test_mqa_decode(rng):
    NH, L, D = 3, 20, 8
    q, K, V = rand(rng, NH, D), rand(rng, L, D), rand(rng, L, D)
    out = run("mqa-decode", {"NH": NH, "L": L, "D": D}, {"q": q, "K": K, "V": V})
    close(out["o"], softmax(q @ K.T * 0.125) @ V)


def test_every_model_kernel_says_its_formula_and_sizes():
    for name in ["swiglu-mlp", "geglu-mlp", "add-rmsnorm", "rope", "attention-bias", "gqa-attention",
                 "softmax-temperature", "group-norm", "pointwise-conv", "mqa-decode", "causal-attention",
                 "alibi-attention", "sliding-window-attention", "rope-inline", "sinusoidal-position",
                 "argmax"]:
        p = perfdojo.load(KERNELS / f"{name}.pdj")
        first = (KERNELS / f"{name}.pdj").read_text().splitlines()[0]
        assert first.startswith("# ") and "=" in first, name
        assert p.check() == []


# Kernels that compute from positions (iterator values in expressions): masks, biases and
# angles come from the formula, not from an input table.


def causal(L):
    return np.tril(np.ones((L, L), dtype=bool))


def test_causal_attention(rng):
    L, D = 9, 8
    Q, K, V = rand(rng, L, D), rand(rng, L, D), rand(rng, L, D)
    out = run("causal-attention", {"L": L, "D": D}, {"Q": Q, "K": K, "V": V})
    close(out["O"], softmax(np.where(causal(L), Q @ K.T * 0.125, -np.inf)) @ V)
    close(out["O"][0], V[0])  # the first token sees only itself


def test_alibi_attention(rng):
    NH, L, D = 3, 7, 8
    Q, K, V = rand(rng, NH, L, D), rand(rng, NH, L, D), rand(rng, NH, L, D)
    out = run("alibi-attention", {"NH": NH, "L": L, "D": D}, {"Q": Q, "K": K, "V": V})
    slopes = 2.0 ** (-8.0 * (np.arange(NH) + 1) / NH)  # the ALiBi paper's geometric sequence
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    bias = -slopes[:, None, None] * (i - j)[None]
    S = np.einsum("hid,hjd->hij", Q, K) * 0.125 + bias
    want = np.einsum("hij,hjd->hid", softmax(np.where(causal(L)[None], S, -np.inf)), V)
    close(out["O"], want)


def test_sliding_window_attention(rng):
    L, D, W = 11, 8, 3
    Q, K, V = rand(rng, L, D), rand(rng, L, D), rand(rng, L, D)
    out = run("sliding-window-attention", {"L": L, "D": D, "W": W}, {"Q": Q, "K": K, "V": V})
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    band = (j <= i) & (j > i - W)
    close(out["O"], softmax(np.where(band, Q @ K.T * 0.125, -np.inf)) @ V)


def test_rope_inline(rng):
    T, NH, P = 7, 3, 4
    q = rand(rng, T, NH, 2 * P)
    out = run("rope-inline", {"T": T, "NH": NH, "D": 2 * P, "P": P}, {"q": q})
    angle = np.arange(T)[:, None] * 10000.0 ** (-2 * np.arange(P) / (2 * P))[None, :]
    close(out["o"], rotate_pairs(q, angle))


def test_sinusoidal_position(rng):
    T, P = 50, 6
    x = rand(rng, T, 2 * P)
    out = run("sinusoidal-position", {"T": T, "D": 2 * P, "P": P}, {"x": x})
    angle = np.arange(T)[:, None] / 10000.0 ** (2 * np.arange(P) / (2 * P))[None, :]
    close(out["y"], x + np.concatenate([np.sin(angle), np.cos(angle)], axis=1))


def test_argmax(rng):
    R, N = 6, 40
    x = rand(rng, R, N)
    x[2, [5, 17]] = 3.0  # a tie: the first maximum wins, as in numpy
    out = run("argmax", {"R": R, "N": N}, {"x": x})
    np.testing.assert_array_equal(out["a"], np.argmax(x, axis=1))
    assert out["a"][2] == 5


# Gathers through an index buffer (docs/ir.md, "Indirect indices"), against numpy's fancy
# indexing and a CSR matrix expanded to its dense form.

def test_embedding_bags(rng):
    B, L, D, V = 5, 3, 16, 11
    W = rand(rng, V, D)
    idx = rng.integers(0, V, size=(B, L)).astype(np.float64)
    sizes = {"B": B, "L": L, "D": D, "V": V}
    out = run("embedding-bag-sum", sizes, {"W": W, "idx": idx})
    close(out["out"], W[idx.astype(int)].sum(axis=1))
    out = run("embedding-bag-mean", sizes, {"W": W, "idx": idx})
    close(out["out"], W[idx.astype(int)].mean(axis=1))
    out = run("embedding", {"N": 7, "D": D, "V": V}, {"W": W, "idx": idx.reshape(-1)[:7]})
    close(out["y"], W[idx.reshape(-1)[:7].astype(int)])


def random_csr(rng, m, n, nnz):
    rowptr = np.sort(rng.integers(0, nnz + 1, size=m + 1))
    rowptr[0], rowptr[-1] = 0, nnz
    col = rng.integers(0, n, size=nnz)
    val = rand(rng, nnz)
    dense = np.zeros((m, n))
    for r in range(m):
        for k in range(rowptr[r], rowptr[r + 1]):
            dense[r, col[k]] += val[k]
    return rowptr.astype(np.float64), col.astype(np.float64), val, dense


def test_csr_products(rng):
    M, N, K, NNZ = 6, 9, 16, 14
    rowptr, col, val, A = random_csr(rng, M, N, NNZ)
    sizes = {"M": M, "N": N, "NNZ": NNZ, "M1": M + 1, "NNZ1": NNZ + 1}
    x = rand(rng, N)
    out = run("csr-spmv", sizes, {"rowptr": rowptr, "col": col, "val": val, "x": x})
    close(out["y"], A @ x)
    Bm = rand(rng, N, K)
    out = run("csr-spmm", dict(sizes, K=K), {"rowptr": rowptr, "col": col, "val": val, "B": Bm})
    close(out["C"], A @ Bm)


def test_index_data_outside_its_range_is_a_clear_error(rng):
    W = rand(rng, 11, 16)
    idx = np.array([[0, 3, 11]] * 5, dtype=np.float64)  # 11 is past the table (V = 11)
    with pytest.raises(Exception, match=r"index buffer 'idx' holds 11 at \[0,2\], outside the "
                                        r"range \[0, 11\)"):
        run("embedding-bag-sum", {"B": 5, "L": 3, "D": 16, "V": 11}, {"W": W, "idx": idx})
    rowptr, col, val, _ = random_csr(rng, 6, 9, 14)
    rowptr[3], rowptr[4] = rowptr[4] + 1, rowptr[3]  # out of order where sorted is declared
    with pytest.raises(Exception, match="declared sorted"):
        run("csr-spmv", {"M": 6, "N": 9, "NNZ": 14, "M1": 7, "NNZ1": 15},
            {"rowptr": rowptr, "col": col, "val": val, "x": rand(rng, 9)})


def test_block_and_structured_sparse_products(rng):
    MB, NB, N, NNZB = 3, 4, 8, 5
    browptr, bcol, _, _ = random_csr(rng, MB, NB, NNZB)
    V = rand(rng, NNZB, 16, 16)
    B = rand(rng, NB, 16, N)
    A = np.zeros((MB * 16, NB * 16))
    for r in range(MB):
        for k in range(int(browptr[r]), int(browptr[r + 1])):
            c = int(bcol[k])
            A[r * 16:(r + 1) * 16, c * 16:(c + 1) * 16] += V[k]
    sizes = {"MB": MB, "NB": NB, "N": N, "NNZB": NNZB, "MB1": MB + 1, "NNZB1": NNZB + 1}
    out = run("bsr-spmm", sizes, {"browptr": browptr, "bcol": bcol, "V": V, "B": B})
    close(out["C"].reshape(MB * 16, N), A @ B.reshape(NB * 16, N))
    M, G, N = 5, 3, 8
    Av = rand(rng, M, G, 2)
    Ai = np.stack([np.sort(rng.choice(4, 2, replace=False)) for _ in range(M * G)]).reshape(M, G, 2)
    B = rand(rng, G, 4, N)
    A = np.zeros((M, G, 4))
    for m in range(M):
        for g in range(G):
            for j in range(2):
                A[m, g, Ai[m, g, j]] += Av[m, g, j]
    out = run("sparse24-gemm", {"M": M, "G": G, "N": N}, {"Av": Av, "Ai": Ai.astype(np.float64), "B": B})
    close(out["C"], A.reshape(M, G * 4) @ B.reshape(G * 4, N))
