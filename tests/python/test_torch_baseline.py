"""benchmarks/torch_baseline.py: every kernel it expresses reads only size names its .pdj defines.

The forms are built with a stand-in for torch (no tensor is made, nothing is timed), so this runs
wherever pytest does; a form asking for a size its kernel does not define is what kept gemv out
of kernel_bench's PyTorch column ("not expressed: missing 'N'").
"""
import glob
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_baseline():
    spec = importlib.util.spec_from_file_location("torch_baseline", os.path.join(ROOT, "benchmarks", "torch_baseline.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Stub:
    """Any attribute, call, index (read or written) or arithmetic of torch or a tensor: another
    Stub."""

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self

    def __getitem__(self, key):
        return self

    def __setitem__(self, key, value):
        pass

    def __iter__(self):
        return iter([self, self])

    def _op(self, *args):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _op
    __pow__ = __rpow__ = __neg__ = __matmul__ = __rmatmul__ = __lt__ = __le__ = __gt__ = __ge__ = _op
    __and__ = __rand__ = __or__ = __ror__ = __invert__ = __mod__ = __floordiv__ = _op


KERNELS = sorted(glob.glob(os.path.join(ROOT, "kernels", "*.pdj")) +
                 glob.glob(os.path.join(ROOT, "benchmarks", "unseen", "*.pdj")))


def test_forms_read_only_the_kernels_sizes():
    # Kernels the script does not express (KeyError naming the kernel) are not PyTorch-timed; the
    # others must build their forms from the sizes their own file defines.
    tb = load_baseline()
    expressed, wrong = [], []
    for path in KERNELS:
        name = os.path.splitext(os.path.basename(path))[0]
        try:
            forms = tb.forms(name, tb.sizes_of(path), Stub())
        except KeyError as e:
            if e.args and e.args[0] == name:
                continue
            wrong.append(f"{name} reads size {e}")
            continue
        assert forms and all(callable(fn) for _, fn in forms), name
        expressed.append(name)
    assert not wrong, "; ".join(wrong)
    for name in ["gemv", "matmul-1024", "mlp", "attention", "conv2d-3x3", "syrk", "conv-nhwc", "gemv-batch4",
                 "dgemm", "jacobi2d", "bilinear"]:
        assert name in expressed, name


def test_interleaved_buffers_take_each_declared_type():
    # An f64 kernel reads 8-byte elements: buffers made as f32 would be half its size.
    tb = load_baseline()
    unseen = os.path.join(ROOT, "benchmarks", "unseen")
    assert tb.dtypes_of(os.path.join(unseen, "dgemm.pdj")) == ["f64", "f64", "f64"]
    assert tb.dtypes_of(os.path.join(unseen, "l2norm.pdj")) == ["f32", "f32"]  # the temp is not passed
