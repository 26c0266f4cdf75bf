"""From a PyTorch module to PerfDojo kernels, and back into PyTorch (docs/models.md).

    imported = perfdojo.from_torch(module, example_inputs)    # the kernels and the report
    fast = perfdojo.compile(module, example_inputs, timeout=120)
    y = fast(*example_inputs)                                  # the same function, our kernels

`from_torch` traces the module (torch.export where PyTorch has it, else torch.fx), records every
value's shape on the example inputs,
and lowers each run of operators that fuse into one IR kernel: an optional elementwise prologue,
at most one anchor (a GEMM: linear, matmul, bmm; or a reduction along the last dimension:
layer_norm, softmax, mean, sum) and an elementwise epilogue (bias, activation, scaling, residual
add). Weights stay tensors: a kernel takes them as inputs. Every other operator stays in PyTorch
and the report says why.

`compile` optimises the kernels under one budget, split by each kernel's share of the eager
model's time, keeps every optimised kernel in a cache keyed by its IR text (shapes included),
target, mode, threads and machine, builds them into one shared library with a header, and returns
a module that runs them (a torch.library custom op per kernel where PyTorch has torch.library,
2.4 and later) and checks itself against eager PyTorch on the example inputs.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import math
import operator
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from . import _native
from .ir import parse

# Bump when the lowering or the library layout changes: it is part of every cache key.
_FORMAT = "pdj-torch-2"


class ModelImportError(ValueError):
    """The module cannot be traced, or its example inputs do not run through it."""


class ShapeError(ValueError):
    """A compiled model was called with inputs whose shapes or types differ from the traced ones."""


class _Unsupported(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# ------------------------------------------------------------------------------ the operators


def _torch():
    import torch  # imported lazily: `import perfdojo` must not need PyTorch
    return torch


@dataclass
class _Op:
    """One operator as the lowering sees it."""
    kind: str          # "ew" (elementwise), "gemm" or "reduce"
    name: str          # what the report calls it: linear, gelu, layer_norm...
    args: list         # operands: fx nodes, _Param, or Python numbers
    attrs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Param:
    """A tensor the module holds (a weight, a bias), by its qualified name."""
    qualname: str


def _classify(gm, node) -> _Op:
    """What `node` computes, or _Unsupported with the reason it stays in PyTorch."""
    torch = _torch()
    F = torch.nn.functional
    nn = torch.nn
    meta = node.meta.get("tensor_meta")
    if meta is None or not hasattr(meta, "shape"):
        raise _Unsupported("its result is not one tensor")
    if meta.dtype != torch.float32:
        raise _Unsupported(f"its result is {meta.dtype}; the lowering takes float32 only")
    if len(meta.shape) == 0:
        raise _Unsupported("a 0-dimensional result")

    def kw(name, pos, default=None):
        if name in node.kwargs:
            return node.kwargs[name]
        return node.args[pos] if len(node.args) > pos else default

    if node.op == "call_module":
        m = gm.get_submodule(node.target)
        x = node.args[0]
        if isinstance(m, nn.Linear):
            args = [x, _Param(f"{node.target}.weight")]
            if m.bias is not None:
                args.append(_Param(f"{node.target}.bias"))
            return _Op("gemm", "linear", args)
        if isinstance(m, nn.LayerNorm):
            if len(m.normalized_shape) != 1:
                raise _Unsupported("layer_norm over more than the last dimension")
            args = [x]
            if m.elementwise_affine:
                args.append(_Param(f"{node.target}.weight"))
                args.append(_Param(f"{node.target}.bias") if m.bias is not None else None)
            return _Op("reduce", "layer_norm", args, {"eps": float(m.eps)})
        if isinstance(m, nn.Conv2d):
            if m.padding_mode != "zeros":
                raise _Unsupported(f"padding_mode='{m.padding_mode}'")
            args = _conv_op(node, x, _Param(f"{node.target}.weight"),
                            _Param(f"{node.target}.bias") if m.bias is not None else None,
                            list(m.stride), list(m.padding), list(m.dilation), m.groups)
            return args
        if isinstance(m, nn.BatchNorm2d):
            if m.training or m.running_mean is None:
                raise _Unsupported("batch_norm in training mode (batch statistics)")
            pre = node.target
            return _Op("ew", "batch_norm", [x, _Param(f"{pre}.weight") if m.affine else None,
                                            _Param(f"{pre}.bias") if m.affine else None,
                                            _Param(f"{pre}.running_mean"), _Param(f"{pre}.running_var")],
                       {"eps": float(m.eps)})
        if isinstance(m, nn.ReLU):
            return _Op("ew", "relu", [x])
        if isinstance(m, nn.GELU):
            if m.approximate != "tanh":
                return _Op("ew", "gelu_erf", [x])
            return _Op("ew", "gelu_tanh", [x])
        if isinstance(m, nn.SiLU):
            return _Op("ew", "silu", [x])
        if isinstance(m, nn.Sigmoid):
            return _Op("ew", "sigmoid", [x])
        if isinstance(m, nn.Tanh):
            return _Op("ew", "tanh", [x])
        if isinstance(m, nn.Softmax):
            return _softmax_op(node, x, m.dim)
        if isinstance(m, (nn.Dropout, nn.Identity)):
            if isinstance(m, nn.Dropout) and m.training and m.p > 0:
                raise _Unsupported("dropout in training mode is random")
            return _Op("ew", "identity", [x])
        raise _Unsupported(f"module {type(m).__name__} has no IR lowering")

    if node.op == "call_function" and hasattr(node.target, "_schema"):
        return _classify_aten(node, node.target._schema.name.split("::")[-1], kw)

    if node.op == "call_function":
        t = node.target
        if t in (F.linear,):
            w = kw("weight", 1)
            b = kw("bias", 2)
            return _Op("gemm", "linear", [node.args[0], w] + ([b] if b is not None else []))
        if t in (torch.matmul, operator.matmul, torch.bmm, torch.mm):
            return _Op("gemm", "matmul", [node.args[0], node.args[1]])
        if t in (operator.add, torch.add, operator.iadd):
            if kw("alpha", 2, 1) != 1:
                raise _Unsupported("add with alpha")
            return _Op("ew", "add", [node.args[0], node.args[1]])
        if t in (operator.sub, torch.sub):
            return _Op("ew", "sub", [node.args[0], node.args[1]])
        if t in (operator.mul, torch.mul, operator.imul):
            return _Op("ew", "mul", [node.args[0], node.args[1]])
        if t in (operator.truediv, torch.div):
            if kw("rounding_mode", 2) is not None:
                raise _Unsupported("div with a rounding mode")
            return _Op("ew", "div", [node.args[0], node.args[1]])
        if t in (operator.neg, torch.neg):
            return _Op("ew", "neg", [node.args[0]])
        if t in (F.relu, torch.relu):
            return _Op("ew", "relu", [node.args[0]])
        if t is F.gelu:
            if kw("approximate", 1, "none") != "tanh":
                return _Op("ew", "gelu_erf", [node.args[0]])
            return _Op("ew", "gelu_tanh", [node.args[0]])
        if t in (F.silu,):
            return _Op("ew", "silu", [node.args[0]])
        if t in (torch.sigmoid, F.sigmoid):
            return _Op("ew", "sigmoid", [node.args[0]])
        if t in (torch.tanh, F.tanh):
            return _Op("ew", "tanh", [node.args[0]])
        if t in (torch.exp, torch.sin, torch.cos, torch.log, torch.abs):
            return _Op("ew", t.__name__, [node.args[0]])
        if t is torch.rsqrt:
            return _Op("ew", "rsqrt", [node.args[0]])
        if t is torch.sqrt:
            return _Op("ew", "sqrt", [node.args[0]])
        if t in (torch.pow, operator.pow):
            return _pow_op(node.args[0], node.args[1])
        if t in (F.softmax, torch.softmax):
            return _softmax_op(node, node.args[0], kw("dim", 1))
        if t is F.layer_norm:
            shape = kw("normalized_shape", 1)
            if len(shape) != 1:
                raise _Unsupported("layer_norm over more than the last dimension")
            return _Op("reduce", "layer_norm", [node.args[0], kw("weight", 2), kw("bias", 3)],
                       {"eps": float(kw("eps", 4, 1e-5))})
        if t in (torch.mean, torch.sum):
            return _reduce_op(node, "mean" if t is torch.mean else "sum", node.args[0], kw("dim", 1),
                              kw("keepdim", 2, False))
        if getattr(t, "__name__", "") in _LAYOUT or t is operator.getitem:
            raise _Unsupported(f"a layout operation ({getattr(t, '__name__', t)}): PyTorch makes it a view, no kernel computes it")
        raise _Unsupported(f"{getattr(t, '__name__', t)} has no IR lowering")

    if node.op == "call_method":
        t = node.target
        self_ = node.args[0]
        if t in ("add", "sub", "mul", "div") and len(node.args) == 2 and not node.kwargs:
            return _Op("ew", t, [self_, node.args[1]])
        if t in ("relu", "sigmoid", "tanh", "exp", "rsqrt", "sqrt", "neg", "sin", "cos", "log", "abs") and \
                len(node.args) == 1:
            return _Op("ew", t, [self_])
        if t == "softmax":
            return _softmax_op(node, self_, kw("dim", 1))
        if t == "pow":
            return _pow_op(self_, node.args[1])
        if t in ("mean", "sum"):
            return _reduce_op(node, t, self_, kw("dim", 1), kw("keepdim", 2, False))
        if t in ("float", "contiguous") or (t == "to" and _to_is_identity(node)):
            src = self_.meta.get("tensor_meta") if hasattr(self_, "meta") else None
            if src is not None and getattr(src, "dtype", None) == torch.float32:
                return _Op("ew", "identity", [self_])
        if t in _LAYOUT:
            raise _Unsupported(f"a layout operation (.{t}()): PyTorch makes it a view, no kernel computes it")
        raise _Unsupported(f"method .{t}() has no IR lowering")
    raise _Unsupported(f"{node.op} has no IR lowering")


_LAYOUT = {"view", "reshape", "transpose", "permute", "split", "chunk", "expand", "unsqueeze", "squeeze",
           "flatten", "t", "narrow", "unflatten"}

_RESHAPES = {"view", "reshape", "_unsafe_view", "flatten", "unflatten", "squeeze", "unsqueeze"}
_IDENTITIES = {"contiguous", "clone", "alias", "lift_fresh_copy", "detach"}
_ATEN_UNARY = {"relu", "silu", "sigmoid", "tanh", "exp", "rsqrt", "sqrt", "neg", "sin", "cos", "log", "abs"}
_ATEN_BINARY = {"add", "sub", "mul", "div"}


def _classify_aten(node, op: str, kw) -> _Op:
    """An ATen operator (torch.export's graphs)."""
    a = node.args
    if op.endswith("_") and not op.startswith("_"):
        # In place (relu_, add_): the functional form computes the same value; safe when nothing
        # else reads the tensor it overwrites and that tensor is not the caller's or a weight.
        t = a[0]
        if not hasattr(t, "op") or t.op in ("placeholder", "get_attr") or len(t.users) != 1 or _may_alias(t):
            raise _Unsupported(f"aten.{op} overwrites a tensor that is read elsewhere, may share storage "
                               "with one, or is the caller's")
        op = op[:-1]
    if op in ("conv2d", "convolution"):
        if op == "convolution" and (kw("transposed", 6, False) or any(kw("output_padding", 7, [0, 0]))):
            raise _Unsupported("a transposed convolution")
        return _conv_op(node, a[0], a[1], kw("bias", 2), kw("stride", 3, [1, 1]), kw("padding", 4, [0, 0]),
                        kw("dilation", 5, [1, 1]), kw("groups", 8 if op == "convolution" else 6, 1))
    if op == "batch_norm":
        if kw("training", 5, False):
            raise _Unsupported("batch_norm in training mode (batch statistics)")
        return _Op("ew", "batch_norm", [a[0], kw("weight", 1), kw("bias", 2), kw("running_mean", 3),
                                        kw("running_var", 4)], {"eps": float(kw("eps", 7, 1e-5))})
    if op in ("linear",):
        return _Op("gemm", "linear", [a[0], a[1]] + ([kw("bias", 2)] if kw("bias", 2) is not None else []))
    if op == "addmm":
        if kw("beta", 3, 1) != 1 or kw("alpha", 4, 1) != 1:
            raise _Unsupported("addmm with beta or alpha")
        return _Op("gemm", "matmul", [a[1], a[2]], {"bias": a[0]})
    if op in ("matmul", "mm", "bmm"):
        return _Op("gemm", "matmul", [a[0], a[1]])
    if op in _ATEN_BINARY:
        if kw("alpha", 2, 1) != 1:
            raise _Unsupported(f"{op} with alpha")
        if op == "div" and kw("rounding_mode", 2) is not None:
            raise _Unsupported("div with a rounding mode")
        return _Op("ew", op, [a[0], a[1]])
    if op == "rsub":
        if kw("alpha", 2, 1) != 1:
            raise _Unsupported("rsub with alpha")
        return _Op("ew", "sub", [a[1], a[0]])
    if op in _ATEN_UNARY:
        return _Op("ew", op, [a[0]])
    if op == "gelu":
        if kw("approximate", 1, "none") != "tanh":
            return _Op("ew", "gelu_erf", [a[0]])
        return _Op("ew", "gelu_tanh", [a[0]])
    if op == "pow":
        return _pow_op(a[0], a[1])
    if op in ("softmax", "_softmax"):
        return _softmax_op(node, a[0], kw("dim", 1))
    if op == "layer_norm":
        shape = kw("normalized_shape", 1)
        if len(shape) != 1:
            raise _Unsupported("layer_norm over more than the last dimension")
        return _Op("reduce", "layer_norm", [a[0], kw("weight", 2), kw("bias", 3)], {"eps": float(kw("eps", 4, 1e-5))})
    if op in ("mean", "sum"):
        if op == "sum" and len(a) < 2:
            raise _Unsupported("a sum over every dimension")
        return _reduce_op(node, op, a[0], kw("dim", 1), kw("keepdim", 2, False))
    if op == "dropout":
        if kw("train", 2, False) and kw("p", 1, 0.0) > 0:
            raise _Unsupported("dropout in training mode is random")
        return _Op("ew", "identity", [a[0]])
    if op in ("to", "_to_copy"):
        if _to_is_identity(node):
            return _Op("ew", "identity", [a[0]])
        raise _Unsupported("a conversion to another type or device")
    if op in _IDENTITIES:
        return _Op("ew", "identity", [a[0]])
    if op in _RESHAPES:
        return _Op("ew", "reshape", [a[0]])
    if op in _LAYOUT or op in ("slice", "select", "expand", "permute", "split_with_sizes"):
        raise _Unsupported(f"a layout operation (aten.{op}): PyTorch makes it a view, no kernel computes it")
    raise _Unsupported(f"aten.{op} has no IR lowering")


def _to_is_identity(node) -> bool:
    torch = _torch()
    rest = list(node.args[1:]) + [v for k, v in node.kwargs.items() if k in ("dtype",)]
    return all(a == torch.float32 or isinstance(a, bool) or a is None for a in rest)


def _may_alias(node) -> bool:
    """Whether `node`'s tensor may share storage with another value (a view, an identity, an
    item of a tuple): overwriting it in place would change that value too."""
    if node.op != "call_function" or node.target is operator.getitem:
        return True
    name = getattr(getattr(node.target, "_schema", None), "name", "").split("::")[-1]
    return (not name or name in _RESHAPES or name in _IDENTITIES or name in _LAYOUT
            or name in ("slice", "select", "expand", "permute", "t", "as_strided", "to", "_to_copy",
                        "split_with_sizes", "diagonal", "view_as", "expand_as", "unbind", "narrow"))


def _conv_op(node, x, w, b, stride, padding, dilation, groups) -> _Op:
    xs = tuple(x.meta["tensor_meta"].shape)
    if len(xs) != 4:
        raise _Unsupported("a convolution that is not 2-D over NCHW")
    if isinstance(padding, str):
        raise _Unsupported(f"padding='{padding}'")
    stride = list(stride) * (2 if len(stride) == 1 else 1)
    padding = list(padding) * (2 if len(padding) == 1 else 1)
    dilation = list(dilation) * (2 if len(dilation) == 1 else 1)
    if any(d != 1 for d in dilation):
        raise _Unsupported("a dilated convolution")
    cout = int(node.meta["tensor_meta"].shape[1])
    if groups != 1 and not (groups == xs[1] == cout):
        raise _Unsupported("a grouped convolution other than depthwise")
    args = [x, w] + ([b] if b is not None else [])
    return _Op("gemm", "conv2d", args, {"stride": stride, "padding": padding, "groups": int(groups)})


def _softmax_op(node, x, dim) -> _Op:
    rank = len(node.meta["tensor_meta"].shape)
    if dim is None or dim not in (-1, rank - 1):
        raise _Unsupported("softmax over a dimension other than the last")
    return _Op("reduce", "softmax", [x])


def _reduce_op(node, name, x, dim, keepdim) -> _Op:
    src = x.meta["tensor_meta"].shape
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    if dim not in (-1, len(src) - 1):
        raise _Unsupported(f"{name} over a dimension other than the last")
    if not keepdim and len(src) > 2:
        raise _Unsupported(f"{name} without keepdim over a tensor of more than two dimensions")
    return _Op("reduce", name, [x], {"keepdim": bool(keepdim)})


def _pow_op(x, e) -> _Op:
    if e == 2 or e == 2.0:
        return _Op("ew", "square", [x])
    if e == 3 or e == 3.0:
        return _Op("ew", "cube", [x])
    if e == 0.5:
        return _Op("ew", "sqrt", [x])
    if e == -0.5:
        return _Op("ew", "rsqrt", [x])
    raise _Unsupported(f"pow with exponent {e!r} (2, 3, 0.5 and -0.5 lower)")


# ------------------------------------------------------------------------------ the kernels

_KEYWORDS = {"input", "output", "temp", "f32", "f64", "i32", "in", "exp", "log", "sqrt", "rsqrt", "tanh",
             "abs", "max", "min", "inf", "sin", "cos", "fma", "select", "where", "bf16", "f16", "i8", "u8"}


def _num(v: float) -> str:
    if isinstance(v, bool):
        v = int(v)
    if math.isinf(v):
        return "inf" if v > 0 else "(-inf)"
    r = repr(float(v))
    return f"({r})" if r.startswith("-") else r


def _gelu_erf(x: str) -> str:
    """0.5 x (1 + erf(x / sqrt 2)), erf by Abramowitz and Stegun 7.1.26 (absolute error at most
    1.5e-7, about one float32 ulp of 1): the IR has no erf. The C compiler shares the repeated
    t = 1 / (1 + p |z|)."""
    z = f"(abs({x}) * 0.7071067811865476)"
    t = f"(1 / (1 + 0.3275911 * {z}))"
    poly = (f"({t} * (0.254829592 + {t} * (-0.284496736 + {t} * (1.421413741 + {t} * "
            f"(-1.453152027 + {t} * 1.061405429)))))")
    y = f"(1 - {poly} * exp(-({z} * {z})))"
    return f"(0.5 * {x} * (1 + (({x} >= 0) ? 1 : -1) * {y}))"


@dataclass
class Kernel:
    """One IR kernel of an imported model."""
    name: str
    ir: str                    # the kernel's IR text, shapes included
    ops: list                  # the operators it computes (report names)
    nodes: list                # their fx node names
    inputs: list               # external values: ("node", name) or ("param", qualified name)
    input_shapes: list         # the traced torch shapes of the inputs
    outputs: list              # fx node names whose values leave the kernel
    output_shapes: list
    eager_s: float = 0.0       # its operators' eager time on the example inputs (min of runs)


class _Emitter:
    """Writes one group of operators as one IR kernel."""

    def __init__(self, gm, group, ops, users_outside, layout, consts):
        self.gm, self.group, self.ops = gm, group, ops
        self.consts = consts               # node name -> its Python number (shape arithmetic)
        self.users_outside = users_outside
        # "2d": collapse to [rows, cols]; "3d": to [batch, rows, cols] (a group with a batched
        # matmul); "full": no collapse (a group with a convolution: per-channel broadcasts)
        self.layout = layout
        self.decls: list[str] = []         # buffer declarations, in order
        self.stmts: list[str] = []
        self.names: set[str] = set()
        self.inputs: list = []             # external values, in declaration order
        self.input_shapes: list = []
        self.outputs: list = []
        self.output_shapes: list = []
        self.value: dict = {}              # node name -> ("buf", name, shape) | ("expr", text, shape)
        self.external: dict = {}           # external key -> buffer name
        self.sizes: dict = {}              # extent -> size name

    # shapes
    def canon(self, shape) -> tuple:
        shape = tuple(int(d) for d in shape)
        if len(shape) <= 1 or self.layout == "full":
            return shape
        if self.layout == "3d" and len(shape) >= 3:
            return (math.prod(shape[:-2]), shape[-2], shape[-1])
        return (math.prod(shape[:-1]), shape[-1])

    def fresh(self, base: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in base) or "t"
        if not base[0].isalpha():
            base = "v" + base
        if base in _KEYWORDS:
            base = base + "_"
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def size(self, v: int, tag: str = "D") -> str:
        """The size name of extent `v`: named sizes let the optimiser verify on a scaled-down
        instance (docs/optimizer.md); equal extents share a name, 1 stays a number. A padded
        extent (tag "P") gets a name of its own, apart from an equal extent of another role."""
        v = int(v)
        if v == 1:
            return "1"
        if (v, tag) not in self.sizes:
            self.sizes[(v, tag)] = f"{tag}{v}"
            self.names.add(self.sizes[(v, tag)])
        return self.sizes[(v, tag)]

    def declare(self, role: str, name: str, shape: tuple, init: Optional[str] = None, tags=None):
        tags = tags or ["D"] * len(shape)
        dims = ", ".join(self.size(d, t) for d, t in zip(shape, tags)) if shape else "1"
        self.decls.append(f"{role} {name}: f32[{dims}]" + (f" = {init}" if init is not None else ""))

    def _param_tensor(self, qual):
        torch = _torch()
        t = self.gm.get_parameter(qual) if _is_parameter(self.gm, qual) else self.gm.get_buffer(qual)
        if t.dtype != torch.float32:
            raise _Unsupported(f"{qual} is {t.dtype}; the lowering takes float32 only")
        return t

    # operands
    def operand(self, a) -> tuple:
        """("buf", name, canonical shape) or ("expr", ...) or ("num", value)."""
        torch = _torch()
        if a is None:
            return ("none",)
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            return ("num", float(a))
        if isinstance(a, _Param):
            key = ("param", a.qualname)
            shape = tuple(self._param_tensor(a.qualname).shape)
        elif hasattr(a, "op"):
            if a.name in self.value:
                return self.value[a.name]
            if a.name in self.consts:
                return ("num", float(self.consts[a.name]))
            if a.op == "get_attr":
                key = ("param", a.target)
            else:
                key = ("node", a.name)
            meta = a.meta.get("tensor_meta")
            if meta is None or not hasattr(meta, "shape"):
                raise _Unsupported(f"operand {a.name} is not a tensor")
            if meta.dtype != torch.float32:
                raise _Unsupported(f"operand {a.name} is {meta.dtype}; the lowering takes float32 only")
            shape = tuple(meta.shape)
        else:
            raise _Unsupported(f"operand {a!r} is neither a tensor nor a number")
        if len(shape) == 0:
            raise _Unsupported("a 0-dimensional tensor operand")
        if key not in self.external:
            name = self.fresh(key[1].replace(".", "_"))
            self.external[key] = name
            self.inputs.append(key)
            self.input_shapes.append(shape)
            self.declare("input", name, self.canon(shape))
        return ("buf", self.external[key], self.canon(shape), shape)

    def read(self, v, out_shape: tuple, orig_out=None, orig_in=None) -> str:
        """`v` read at each point of a statement over `out_shape` (iterators {0}..)."""
        if v[0] == "num":
            return _num(v[1])
        if v[0] == "expr":
            if v[2] != out_shape:
                raise _Unsupported("an intermediate broadcast inside a fused group")
            return v[1]
        _, name, shape = v[0], v[1], v[2]
        r = len(out_shape)
        if len(shape) > r:
            raise _Unsupported("an operand with more dimensions than the result")
        if orig_in is not None and orig_out is not None and tuple(orig_in) != tuple(orig_out):
            # Broadcasting: pad the operand's torch shape on the left, collapse it as the result's
            # is, and accept it only when each collapsed run is either all equal or all ones.
            pad = (1,) * (len(orig_out) - len(orig_in)) + tuple(orig_in)
            shape = self.canon_like(pad, tuple(orig_out))
        off = r - len(shape)
        idx = []
        for i, d in enumerate(shape):
            o = out_shape[off + i]
            if d == o:
                idx.append(f"{{{off + i}}}")
            elif d == 1:
                idx.append("0")
            else:
                raise _Unsupported(f"a broadcast of {tuple(orig_in or shape)} to {tuple(orig_out or out_shape)} the collapsed layout cannot express")
        if len(shape) != len(v[2]):
            # the padded shape has more dimensions than the buffer: drop the leading ones
            drop = len(shape) - len(v[2])
            if any(x != "0" for x in idx[:drop]) or any(s != 1 for s in shape[:drop]):
                raise _Unsupported("a broadcast the collapsed layout cannot express")
            idx = idx[drop:]
        return f"{name}[{','.join(idx)}]"

    def canon_like(self, padded: tuple, out: tuple) -> tuple:
        """`padded` collapsed along the runs the result's layout collapses."""
        if len(out) <= 1 or self.layout == "full":
            return padded
        if self.layout == "3d" and len(out) >= 3:
            runs = [padded[:-2], padded[-2:-1], padded[-1:]]
            oruns = [out[:-2], out[-2:-1], out[-1:]]
        else:
            runs = [padded[:-1], padded[-1:]]
            oruns = [out[:-1], out[-1:]]
        res = []
        for run, orun in zip(runs, oruns):
            if tuple(run) == tuple(orun):
                res.append(math.prod(run))
            elif all(x == 1 for x in run):
                res.append(1)
            else:
                raise _Unsupported(f"a broadcast of {padded} to {out} the collapsed layout cannot express")
        return tuple(res)

    @staticmethod
    def torch_shape(a, v):
        """The torch shape of operand `a` (operand() value `v`), None for a number: external
        buffers carry it, group values have their node's."""
        if v[0] == "buf" and len(v) > 3:
            return v[3]
        return tuple(a.meta["tensor_meta"].shape) if v[0] in ("buf", "expr") else None

    def materialize(self, node_name: str, v, out_role=None) -> tuple:
        if v[0] == "buf":
            return v
        shape = v[2]
        name = self.fresh(node_name)
        self.declare(out_role or "temp", name, shape)
        self.stmt(shape, f"{name}[{self.iters(len(shape))}] = {v[1]}")
        return ("buf", name, shape)

    @staticmethod
    def iters(r: int) -> str:
        return ",".join(f"{{{i}}}" for i in range(r))

    def stmt(self, scopes, body: str):
        self.stmts.append(" ".join(self.size(d) for d in scopes) + " " + body)

    def store(self, a, v) -> tuple:
        """Stores the group value of node `a` (an expression) in a temp, once."""
        v = self.materialize(a.name, v)
        self.value[a.name] = v
        return v

    def buffer_operand(self, node_name: str, a) -> tuple:
        v = self.operand(a)
        if v[0] == "expr":
            v = self.store(a, v)
        if v[0] != "buf":
            raise _Unsupported("a GEMM or reduction operand that is not a tensor")
        return v

    # operators
    def lower(self, node, op: _Op):
        out_orig = tuple(node.meta["tensor_meta"].shape)
        out = self.canon(out_orig)
        if op.name == "batch_norm":
            self.value[node.name] = self.lower_batch_norm(node, op, out)
        elif op.kind == "ew":
            self.value[node.name] = self.lower_ew(node, op, out, out_orig)
        elif op.name == "linear":
            self.value[node.name] = self.lower_linear(node, op, out)
        elif op.name == "matmul":
            self.value[node.name] = self.lower_matmul(node, op, out, out_orig)
        elif op.name == "conv2d":
            self.value[node.name] = self.lower_conv(node, op, out)
        elif op.name == "layer_norm":
            self.value[node.name] = self.lower_layer_norm(node, op, out)
        elif op.name == "softmax":
            self.value[node.name] = self.lower_softmax(node, op, out)
        elif op.name in ("mean", "sum"):
            self.value[node.name] = self.lower_reduce(node, op, out, out_orig)
        else:
            raise _Unsupported(f"{op.name} has no lowering")

    def lower_ew(self, node, op, out, out_orig):
        vals = []
        n_uses = {"gelu_tanh": 4, "gelu_erf": 3, "silu": 2, "square": 2, "cube": 3}.get(op.name, 1)
        if op.name == "reshape":
            # a reshape of row-major data is the identity where both shapes collapse alike
            src = tuple(op.args[0].meta["tensor_meta"].shape)
            if self.canon(src) != out:
                raise _Unsupported(f"a reshape from {src} to {out_orig} that the collapsed layout does not keep")
            v = self.operand(op.args[0])
            if v[0] == "buf" and tuple(v[2]) == tuple(out):
                return ("buf", v[1], out)
            return ("expr", self.read(v, out), out) if v[0] != "num" else v
        for a in op.args:
            v = self.operand(a)
            # an intermediate read more than once, or broadcast, is stored first
            if v[0] == "expr" and (n_uses > 1 or v[2] != out):
                v = self.store(a, v)
            vals.append((v, self.torch_shape(a, v)))
        r = [self.read(v, out, out_orig, orig) for v, orig in vals]
        f = {
            "identity": lambda: r[0],
            "add": lambda: f"({r[0]} + {r[1]})",
            "sub": lambda: f"({r[0]} - {r[1]})",
            "mul": lambda: f"({r[0]} * {r[1]})",
            "div": lambda: f"({r[0]} / {r[1]})",
            "neg": lambda: f"(-{r[0]})",
            "relu": lambda: f"max({r[0]}, 0)",
            "gelu_tanh": lambda: (f"(0.5 * {r[0]} * (1 + tanh(0.7978845608028654 * ({r[0]} + 0.044715 * "
                                  f"{r[0]} * {r[0]} * {r[0]}))))"),
            "gelu_erf": lambda: _gelu_erf(r[0]),
            "silu": lambda: f"({r[0]} / (1 + exp(-{r[0]})))",
            "sigmoid": lambda: f"(1 / (1 + exp(-{r[0]})))",
            "tanh": lambda: f"tanh({r[0]})",
            "exp": lambda: f"exp({r[0]})",
            "sin": lambda: f"sin({r[0]})",
            "cos": lambda: f"cos({r[0]})",
            "log": lambda: f"log({r[0]})",
            "abs": lambda: f"abs({r[0]})",
            "rsqrt": lambda: f"rsqrt({r[0]})",
            "sqrt": lambda: f"sqrt({r[0]})",
            "square": lambda: f"({r[0]} * {r[0]})",
            "cube": lambda: f"({r[0]} * {r[0]} * {r[0]})",
        }[op.name]
        if op.name in ("add", "sub", "mul", "div") and all(v[0] == "num" for v, _ in vals):
            raise _Unsupported("arithmetic on numbers only")
        return ("expr", f(), out)

    def lower_linear(self, node, op, out):
        x = self.buffer_operand(node.name, op.args[0])
        wa = op.args[1]
        qual = wa.qualname if isinstance(wa, _Param) else (wa.target if getattr(wa, "op", "") == "get_attr" else None)
        r = len(out)
        if qual is not None:
            # A weight (constant across calls) is passed transposed, [K, N], made once when the
            # model is compiled: the GEMM then reads B with unit stride along N, as the
            # micro-kernel's panels want (128 x 768 x 3072 on a Zen 3 core: 0.69 of peak
            # against 0.58 with the weight as nn.Linear stores it, [N, K]).
            t = self._param_tensor(qual)
            if t.dim() != 2:
                raise _Unsupported("a linear weight that is not a matrix")
            n, k = (int(d) for d in t.shape)
            key = ("param_t", qual)
            if key not in self.external:
                self.external[key] = self.fresh(qual.replace(".", "_") + "_t")
                self.inputs.append(key)
                self.input_shapes.append((k, n))
                self.declare("input", self.external[key], (k, n))
            w_at = f"{self.external[key]}[{{{r}}},{{{r - 1}}}]"
        else:
            w = self.buffer_operand(node.name, wa)
            if len(w[2]) != 2:
                raise _Unsupported("a linear weight that is not a matrix")
            n, k = w[2]
            w_at = f"{w[1]}[{{{r - 1}}},{{{r}}}]"
        if x[2][-1] != k or out[-1] != n:
            raise _Unsupported("linear shapes that do not match")
        h = self.fresh(node.name + "_acc")
        self.declare("temp", h, out, "0")
        lead = self.iters(r - 1)
        lead_c = (lead + ",") if lead else ""
        self.stmt(list(out) + [k], f"{h}[{self.iters(r)}] += {x[1]}[{lead_c}{{{r}}}] * {w_at}")
        e = f"{h}[{self.iters(r)}]"
        if len(op.args) > 2 and op.args[2] is not None:
            b = self.buffer_operand(node.name, op.args[2])
            if b[2] != (n,):
                raise _Unsupported("a linear bias that is not a vector")
            e = f"({e} + {b[1]}[{{{r - 1}}}])"
        return ("expr", e, out)

    def lower_matmul(self, node, op, out, out_orig):
        a = self.buffer_operand(node.name, op.args[0])
        b = self.buffer_operand(node.name, op.args[1])
        ao = tuple(op.args[0].meta["tensor_meta"].shape)
        bo = tuple(op.args[1].meta["tensor_meta"].shape)
        if len(ao) < 2 or len(bo) < 2:
            raise _Unsupported("matmul with a vector operand")
        k = ao[-1]
        if bo[-2] != k:
            raise _Unsupported("matmul shapes that do not match")
        h = self.fresh(node.name + "_acc")
        self.declare("temp", h, out, "0")
        # batch dimensions first, then rows, columns and the reduction: {B}, {B+1}, {B+2}
        nb = len(out) - 2

        def index(shape, tail, orig):
            if len(shape) - 2 > nb:
                raise _Unsupported("a matmul operand with more batch dimensions than its result")
            if self.layout != "full" and len(orig) > 3 and len(shape) > 2 and \
                    tuple(orig[:-2]) != tuple(out_orig[:-2]) and math.prod(orig[:-2]) != 1:
                raise _Unsupported("a matmul broadcast the collapsed layout cannot express")
            off = nb - (len(shape) - 2)
            idx = []
            for i, d in enumerate(shape[:-2]):
                if d == out[off + i]:
                    idx.append(f"{{{off + i}}}")
                elif d == 1:
                    idx.append("0")
                else:
                    raise _Unsupported("a matmul broadcast the layout cannot express")
            return ",".join(idx + tail)

        ai = index(a[2], [f"{{{nb}}}", f"{{{nb + 2}}}"], ao)
        bi = index(b[2], [f"{{{nb + 2}}}", f"{{{nb + 1}}}"], bo)
        self.stmt(list(out) + [k], f"{h}[{self.iters(len(out))}] += {a[1]}[{ai}] * {b[1]}[{bi}]")
        if op.attrs.get("bias") is not None:
            bias = self.operand(op.attrs["bias"])
            borig = self.torch_shape(op.attrs["bias"], bias)
            return ("expr", f"({h}[{self.iters(len(out))}] + {self.read(bias, out, out_orig, borig)})", out)
        return ("buf", h, out)

    def lower_conv(self, node, op, out):
        x = self.buffer_operand(node.name, op.args[0])
        w = self.buffer_operand(node.name, op.args[1])
        n, c, h, wd = x[2]
        co, ci, kh, kw = w[2]
        (sh, sw), (ph, pw) = op.attrs["stride"], op.attrs["padding"]
        src = x[1]
        if ph or pw:
            # zero padding as a padded copy: every read then stays inside its buffer
            src = self.fresh(node.name + "_pad")
            self.declare("temp", src, (n, c, h + 2 * ph, wd + 2 * pw), "0", ["D", "D", "P" if ph else "D", "P" if pw else "D"])
            self.stmt([n, c, h, wd], f"{src}[{{0}},{{1}},{{2}}+{ph},{{3}}+{pw}] = {x[1]}[{{0}},{{1}},{{2}},{{3}}]")
        acc = self.fresh(node.name + "_acc")
        self.declare("temp", acc, out, "0")
        row = lambda i, s_, k: f"{{{i}}}*{s_}+{{{k}}}" if s_ != 1 else f"{{{i}}}+{{{k}}}"  # noqa: E731
        if op.attrs["groups"] == 1:
            self.stmt(list(out) + [ci, kh, kw], f"{acc}[{{0}},{{1}},{{2}},{{3}}] += {src}[{{0}},{{4}},{row(2, sh, 5)},"
                      f"{row(3, sw, 6)}] * {w[1]}[{{1}},{{4}},{{5}},{{6}}]")
        else:  # depthwise
            self.stmt(list(out) + [kh, kw], f"{acc}[{{0}},{{1}},{{2}},{{3}}] += {src}[{{0}},{{1}},{row(2, sh, 4)},"
                      f"{row(3, sw, 5)}] * {w[1]}[{{1}},0,{{4}},{{5}}]")
        e = f"{acc}[{{0}},{{1}},{{2}},{{3}}]"
        if len(op.args) > 2 and op.args[2] is not None:
            b = self.buffer_operand(node.name, op.args[2])
            e = f"({e} + {b[1]}[{{1}}])"
        return ("expr", e, out)

    def lower_batch_norm(self, node, op, out):
        """Inference batch norm over dimension 1 (channels)."""
        if len(out) < 2:
            raise _Unsupported("batch_norm of a tensor without channels")
        v = self.operand(op.args[0])
        if v[0] in ("expr", "buf") and tuple(v[2]) != tuple(out):
            raise _Unsupported("batch_norm of a broadcast value")
        x = self.read(v, out)
        ch = lambda a: f"{self.buffer_operand(node.name, a)[1]}[{{1}}]"  # noqa: E731
        e = f"({x} - {ch(op.args[3])}) * rsqrt({ch(op.args[4])} + {_num(op.attrs['eps'])})"
        if op.args[1] is not None:
            e = f"{e} * {ch(op.args[1])}"
        if op.args[2] is not None:
            e = f"{e} + {ch(op.args[2])}"
        return ("expr", f"({e})", out)

    def rows(self, out):
        """A last-dimension reduction over `out`: its outer scopes, the shape of its per-row
        temps ([1] for a vector) and their index text."""
        outer = list(out[:-1])
        return outer, tuple(outer) or (1,), self.iters(len(outer)) or "0"

    def lower_layer_norm(self, node, op, out):
        x = self.buffer_operand(node.name, op.args[0])
        n = out[-1]
        outer, sh, oi = self.rows(out)
        r = len(out) - 1
        s, mu, c, v, rs = (self.fresh(f"{node.name}_{k}") for k in ("sum", "mean", "c", "var", "rstd"))
        self.declare("temp", s, sh, "0")
        self.declare("temp", mu, sh)
        self.declare("temp", c, out)
        self.declare("temp", v, sh, "0")
        self.declare("temp", rs, sh)
        x_at = f"{x[1]}[{self.iters(r + 1)}]"
        self.stmt(outer + [n], f"{s}[{oi}] += {x_at}")
        self.stmt(outer or [1], f"{mu}[{oi}] = {s}[{oi}] / {self.size(n)}")
        self.stmt(outer + [n], f"{c}[{self.iters(r + 1)}] = {x_at} - {mu}[{oi}]")
        self.stmt(outer + [n], f"{v}[{oi}] += {c}[{self.iters(r + 1)}] * {c}[{self.iters(r + 1)}]")
        self.stmt(outer or [1], f"{rs}[{oi}] = rsqrt({v}[{oi}] / {self.size(n)} + {_num(op.attrs['eps'])})")
        e = f"{c}[{self.iters(r + 1)}] * {rs}[{oi}]"
        if len(op.args) > 1 and op.args[1] is not None:
            g = self.buffer_operand(node.name, op.args[1])
            e = f"{e} * {g[1]}[{{{r}}}]"
        if len(op.args) > 2 and op.args[2] is not None:
            b = self.buffer_operand(node.name, op.args[2])
            e = f"{e} + {b[1]}[{{{r}}}]"
        return ("expr", f"({e})", out)

    def lower_softmax(self, node, op, out):
        x = self.buffer_operand(node.name, op.args[0])
        outer, sh, oi = self.rows(out)
        r = len(out) - 1
        m, e, a, i = (self.fresh(f"{node.name}_{k}") for k in ("max", "exp", "sum", "inv"))
        self.declare("temp", m, sh, "-inf")
        self.declare("temp", e, out)
        self.declare("temp", a, sh, "0")
        self.declare("temp", i, sh)
        full = self.iters(r + 1)
        self.stmt(list(out), f"{m}[{oi}] = max({x[1]}[{full}])")
        self.stmt(list(out), f"{e}[{full}] = exp({x[1]}[{full}] - {m}[{oi}])")
        self.stmt(list(out), f"{a}[{oi}] += {e}[{full}]")
        self.stmt(outer or [1], f"{i}[{oi}] = 1 / {a}[{oi}]")
        return ("expr", f"({e}[{full}] * {i}[{oi}])", out)

    def lower_reduce(self, node, op, out, out_orig):
        x = self.buffer_operand(node.name, op.args[0])
        xs = x[2]
        s = self.fresh(node.name + "_sum")
        rows = xs[:-1]
        n = xs[-1]
        self.declare("temp", s, tuple(rows) or (1,), "0")
        oi = self.iters(len(rows)) or "0"
        self.stmt(list(rows) + [n], f"{s}[{oi}] += {x[1]}[{self.iters(len(xs))}]")
        val = f"{s}[{oi}]" if op.name == "sum" else f"({s}[{oi}] / {self.size(n)})"
        # the result's canonical shape: rows then a 1 (keepdim) or rows alone
        # (with keepdim the trailing 1's iterator indexes nothing: s[{0}] over [rows, 1])
        if out != tuple(rows) + ((1,) if op.attrs["keepdim"] else ()):
            raise _Unsupported(f"{op.name}'s result layout")
        return ("expr", val, out)

    def finish(self):
        """Makes the group's outputs output buffers; returns the kernel's text."""
        for node in self.group:
            if node.name not in self.users_outside:
                continue
            v = self.value[node.name]
            shape_orig = tuple(node.meta["tensor_meta"].shape)
            if v[0] == "buf" and v[1] in set(self.external.values()):
                v = ("expr", f"{v[1]}[{self.iters(len(v[2]))}]", v[2])
            if v[0] == "buf":
                # a temp that leaves the kernel: declare it as an output instead
                for i, d in enumerate(self.decls):
                    if d.startswith(f"temp {v[1]}:"):
                        self.decls[i] = "output" + d[len("temp"):]
                        break
            else:
                v = self.materialize(node.name, v, out_role="output")
            self.value[node.name] = v
            self.outputs.append(node.name)
            self.output_shapes.append(shape_orig)
        # The generated kernel() takes its inputs and outputs in declaration order, and the
        # library passes inputs then outputs: declare them in that order, the temps after.
        def name_of(d):
            return d.split(" ", 1)[1].split(":", 1)[0]
        ins = [d for d in self.decls if d.startswith("input ")]
        by_name = {name_of(d): d for d in self.decls if d.startswith("output ")}
        outs = [by_name[self.value[n][1]] for n in self.outputs]
        if len(set(self.value[n][1] for n in self.outputs)) != len(outs) or len(outs) != len(by_name):
            raise _Unsupported("two results of the group share a buffer")
        temps = [d for d in self.decls if d.startswith("temp ")]
        return ins + outs + temps, self.stmts


def _is_parameter(gm, qualname) -> bool:
    try:
        gm.get_parameter(qualname)
        return True
    except AttributeError:
        return False


@dataclass
class Fallback:
    """An operator left in PyTorch, with the reason."""
    node: str
    op: str
    reason: str


@dataclass
class Imported:
    """What from_torch found: the traced graph, its kernels and the operators left in PyTorch."""
    graph_module: Any
    kernels: list
    fallbacks: list
    groups: list                           # per kernel, the fx nodes it replaces
    eager_total_s: float = 0.0

    def report(self) -> dict:
        covered = sum(len(k.ops) for k in self.kernels)
        return {
            "kernels": [{"name": k.name, "ops": k.ops, "nodes": k.nodes, "eager_s": k.eager_s,
                         "inputs": [list(i) for i in k.inputs], "outputs": k.outputs} for k in self.kernels],
            "in_pytorch": [{"node": f.node, "op": f.op, "reason": f.reason} for f in self.fallbacks],
            "operators_in_kernels": covered,
            "operators_in_pytorch": len(self.fallbacks),
            "eager_s": self.eager_total_s,
        }

    def summary(self) -> str:
        lines = [f"{len(self.kernels)} kernels cover {sum(len(k.ops) for k in self.kernels)} operators; "
                 f"{len(self.fallbacks)} stay in PyTorch"]
        for k in self.kernels:
            lines.append(f"  {k.name}: {' + '.join(k.ops)}  ({k.eager_s * 1e3:.3f} ms eager)")
        for f in self.fallbacks:
            lines.append(f"  in PyTorch: {f.node} ({f.op}): {f.reason}")
        return "\n".join(lines)


def _op_label(gm, node) -> str:
    if node.op == "call_module":
        return type(gm.get_submodule(node.target)).__name__
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    return f".{node.target}()"


def _trace(module, example_inputs, frontend: str = "auto"):
    """The module as an fx graph with every value's shape recorded. frontend "export":
    torch.export (PyTorch 2.x: ATen operators, and it traces real models' Python: Hugging Face
    blocks); "fx": torch.fx.symbolic_trace (torch.nn-level calls); "auto": export where PyTorch
    has it, else fx. A GraphModule passed in is taken as it is."""
    torch = _torch()
    from torch.fx.passes.shape_prop import ShapeProp
    if not isinstance(module, torch.nn.Module):
        raise ModelImportError("from_torch takes a torch.nn.Module")
    if frontend not in ("auto", "export", "fx"):
        raise ValueError("frontend must be 'auto', 'export' or 'fx'")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    gm = module if isinstance(module, torch.fx.GraphModule) else None
    name = type(module).__name__
    try:  # inputs the module itself refuses: say so before any tracer does, in its words
        with torch.no_grad():
            module(*example_inputs)
    except Exception as e:
        raise ModelImportError(f"the example inputs do not run through {name}: "
                               f"{type(e).__name__}: {e}") from None
    if gm is None and frontend in ("auto", "export") and hasattr(torch, "export"):
        try:
            with torch.no_grad():
                gm = torch.export.export(module, example_inputs).module()
        except Exception as e:  # torch.export raises many kinds
            if frontend == "export":
                raise ModelImportError(f"torch.export cannot trace {name}: {type(e).__name__}: {e}") from None
            gm = None
    if gm is None:
        if frontend == "export":
            raise ModelImportError("this PyTorch has no torch.export (PyTorch 2.1 and later): use frontend='fx'")
        try:
            gm = torch.fx.symbolic_trace(module)
        except Exception as e:  # torch.fx raises many kinds
            raise ModelImportError(f"torch.fx cannot trace {name}: {type(e).__name__}: {e}") from None
    # torch.export's dtype and device assertions: the kernels take float32 CPU tensors and check
    # that themselves; left in, they would keep every value they assert on alive in PyTorch
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and getattr(getattr(n.target, "_schema", None), "name", "") == \
                "aten::_assert_tensor_metadata" and not n.users:
            gm.graph.erase_node(n)
    gm.recompile()
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(*example_inputs)
    except Exception as e:
        raise ModelImportError(f"the example inputs do not run through {name}: "
                               f"{type(e).__name__}: {e}") from None
    return gm, example_inputs


def _users_outside(group_names, group) -> set:
    out = set()
    for node in group:
        for u in node.users:
            if u.name not in group_names:
                out.add(node.name)
    return out


def _emit(gm, group, ops, name, consts, layout=None) -> Kernel:
    names = {n.name for n in group}
    outside = _users_outside(names, group)
    em = _Emitter(gm, group, ops, outside, layout or _layout(group, ops), consts)
    for node, op in zip(group, ops):
        em.lower(node, op)
    return _kernel_of(em, group, ops, name)


def _emit_any(gm, group, ops, name, consts) -> Kernel:
    """_emit in the group's layout, else with every dimension kept: a broadcast the collapsed
    layout cannot express (rotary's cos and sin over the heads) may be expressible then."""
    try:
        return _emit(gm, group, ops, name, consts)
    except _Unsupported:
        if _layout(group, ops) == "full":
            raise
        return _emit(gm, group, ops, name, consts, "full")


def _layout(group, ops) -> str:
    layout = "2d"
    if any(op.name == "matmul" and len(n.meta["tensor_meta"].shape) >= 3 for n, op in zip(group, ops)):
        layout = "3d"
    if any(op.name in ("conv2d", "batch_norm") for op in ops):
        layout = "full"
    return layout


def _kernel_of(em, group, ops, name) -> Kernel:
    decls, stmts = em.finish()
    desc = " + ".join(op.name for op in ops)
    sizes = "".join(f"{size} = {v}\n" for (v, _), size in em.sizes.items())
    text = (f"# {desc}, imported from PyTorch ({', '.join(n.name for n in group)})\n" + sizes
            + "\n".join(decls) + "\n\n" + "\n".join(stmts) + "\n")
    parse(text, f"{name}.pdj")  # raises IRError: a lowering bug, not the user's
    return Kernel(name=name, ir=text, ops=[op.name for op in ops], nodes=[n.name for n in group],
                  inputs=list(em.inputs), input_shapes=list(em.input_shapes), outputs=list(em.outputs),
                  output_shapes=list(em.output_shapes))


def _time_nodes(gm, example_inputs, consts: dict, repeats=5) -> dict:
    """Each node's eager time on the example inputs: the minimum over warm runs. Nodes whose
    value is a Python number (shape arithmetic) go into `consts`: the compiled model refuses
    other shapes, so they are constants of its kernels."""
    torch = _torch()
    times: dict = {}

    class Timer(torch.fx.Interpreter):
        def run_node(self, n):
            t0 = time.perf_counter()
            r = super().run_node(n)
            dt = time.perf_counter() - t0
            times[n.name] = min(times.get(n.name, dt), dt)
            if isinstance(r, (int, float)) and not isinstance(r, bool):
                consts[n.name] = r
            return r

    with torch.no_grad():
        for _ in range(repeats):
            Timer(gm).run(*example_inputs)
    return times


def from_torch(module, example_inputs, *, frontend: str = "auto") -> Imported:
    """Traces `module` on `example_inputs` and lowers what fuses into IR kernels (module doc).
    `frontend`: "auto" (torch.export where PyTorch has it, else torch.fx), "export" or "fx"."""
    gm, example_inputs = _trace(module, example_inputs, frontend)
    consts: dict = {}
    times = _time_nodes(gm, example_inputs, consts)
    nodes = list(gm.graph.nodes)
    classified: list = []
    fallbacks: list = []
    for n in nodes:
        if n.op in ("placeholder", "output", "get_attr"):
            classified.append((n, None, None))
            continue
        meta = n.meta.get("tensor_meta")
        if n.name in consts or meta is None:
            classified.append((n, "python", None))  # shape arithmetic, guards: not operators
            continue
        if not hasattr(meta, "shape"):
            classified.append((n, None, "its result is several tensors (a split, a tuple): left to PyTorch"))
            continue
        try:
            classified.append((n, _classify(gm, n), None))
        except _Unsupported as e:
            classified.append((n, None, e.reason))

    # Runs of operators: [elementwise*] [one GEMM or reduction] [elementwise*]; anything left in
    # PyTorch ends a run.
    runs: list = []
    cur: list = []
    anchored = False
    for n, op, reason in classified:
        if n.op in ("placeholder", "get_attr") or op == "python":
            continue
        if op is None:
            if cur:
                runs.append(cur)
            cur, anchored = [], False
            if reason is not None:
                fallbacks.append(Fallback(n.name, _op_label(gm, n), reason))
            continue
        if op.kind != "ew" and anchored:
            runs.append(cur)
            cur, anchored = [], False
        cur.append((n, op))
        anchored = anchored or op.kind != "ew"
    if cur:
        runs.append(cur)

    kernels: list = []
    groups: list = []
    pending = list(runs)
    while pending:
        run = pending.pop(0)
        # a run that is only identities computes nothing worth a kernel
        if all(op.name in ("identity", "reshape") for _, op in run):
            for n, _ in run:
                fallbacks.append(Fallback(n.name, _op_label(gm, n), "a no-op or a copy, left to PyTorch"))
            continue
        name = f"k{len(kernels)}_{'_'.join(dict.fromkeys(op.name for _, op in run if op.name not in ('identity', 'reshape')))}"
        try:
            k = _emit_any(gm, [n for n, _ in run], [op for _, op in run], name, consts)
        except _Unsupported as e:
            if len(run) == 1:
                n = run[0][0]
                fallbacks.append(Fallback(n.name, _op_label(gm, n), e.reason))
                continue
            # split: the longest prefix that lowers, then the rest
            for cut in range(len(run) - 1, 0, -1):
                try:
                    _emit_any(gm, [n for n, _ in run[:cut]], [op for _, op in run[:cut]], "probe", consts)
                except _Unsupported:
                    continue
                pending[:0] = [run[:cut], run[cut:]]
                break
            else:
                pending[:0] = [run[:1], run[1:]]
            continue
        k.eager_s = sum(times.get(n, 0.0) for n in k.nodes)
        kernels.append(k)
        groups.append([n for n, _ in run])
    total = sum(times.get(n.name, 0.0) for n in nodes if n.op not in ("placeholder", "output"))
    return Imported(gm, kernels, fallbacks, groups, total)


# ------------------------------------------------------------------------------ compile


def _cache_root(cache_dir) -> Path:
    if cache_dir:
        return Path(cache_dir)
    if os.environ.get("PERFDOJO_CACHE_DIR"):
        return Path(os.environ["PERFDOJO_CACHE_DIR"])
    return Path(os.environ.get("HOME", tempfile.gettempdir())) / ".cache" / "perfdojo" / "models"


@functools.lru_cache(maxsize=None)
def _machine_id(arch: str) -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}|{model or platform.processor()}|{arch}"


def _kernel_key(k: Kernel, arch, mode, threads) -> str:
    h = hashlib.sha256("\n".join([_FORMAT, k.ir, arch, mode, str(threads), _machine_id(arch)]).encode())
    return h.hexdigest()[:20]


@dataclass
class _Built:
    key: str
    c_source: str
    c_header: str
    report: dict
    cached: bool


def _cached(d: Path) -> bool:
    """Whether the kernel cache entry `d` is complete (kernel.c is written last)."""
    return (d / "kernel.c").exists() and (d / "report.json").exists()


def _optimise(kernels, keys, shares, arch, mode, threads, root: Path, progress) -> list:
    from .optimizer import PerfDojo
    out = []
    opt = None
    for i, (k, key, share) in enumerate(zip(kernels, keys, shares)):
        d = root / "kernels" / key
        if _cached(d):
            out.append(_Built(key, (d / "kernel.c").read_text(), (d / "kernel.h").read_text(),
                              json.loads((d / "report.json").read_text()), True))
            continue
        if opt is None:
            opt = PerfDojo(arch=arch, mode=mode, threads=threads)
        if progress:
            sys.stderr.write(f"[{i + 1}/{len(kernels)}] {k.name} ({' + '.join(k.ops)}): {share:.1f} s\n")
        r = opt.transform(k.ir, timeout=max(share, 0.5), progress=bool(progress))
        report = dict(r.report)
        report["timeout_s"] = share
        d.mkdir(parents=True, exist_ok=True)
        (d / "kernel.pdj").write_text(r.ir)
        (d / "original.pdj").write_text(k.ir)
        (d / "trace.txt").write_text("\n".join(r.trace) + "\n")
        (d / "kernel.h").write_text(r.c_header)
        (d / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
        (d / "kernel.c").write_text(r.c_source)  # last: its presence marks the entry complete
        out.append(_Built(key, r.c_source, r.c_header, report, False))
    return out


def _build_library(built: list, arch: str, root: Path) -> tuple:
    """Compiles every kernel into one shared library and writes its header; cached by content."""
    flags, libs = _native.build_flags(arch)
    cc = os.environ.get("CC", "cc")
    lib_key = hashlib.sha256("\n".join([_FORMAT, cc, " ".join(flags)] + [b.key + b.c_source for b in built]).encode()).hexdigest()[:20]
    d = root / "libs" / lib_key
    so = d / "libperfdojo_model.so"
    header = d / "perfdojo_model.h"
    if so.exists():
        return so, header, True
    d.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=d))

    def one(b):
        src = work / f"k_{b.key}.c"
        src.write_text(b.c_source)
        obj = work / f"k_{b.key}.o"
        cmd = [cc, *flags, "-fPIC", "-c", f"-Dkernel=pd_k_{b.key}", f"-Dperfdojo_entry=pd_k_{b.key}_entry",
               str(src), "-o", str(obj)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"cannot compile kernel {b.key}: {r.stderr[-2000:]}")
        return str(obj)

    with ThreadPoolExecutor(max_workers=max(1, min(len(built), os.cpu_count() or 1))) as pool:
        objs = list(pool.map(one, built))
    tmp_so = work / "lib.so"
    r = subprocess.run([cc, "-shared", "-fopenmp", *objs, "-o", str(tmp_so), *libs], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"cannot link the model library: {r.stderr[-2000:]}")
    decls = []
    for b in built:
        body = [ln for ln in b.c_header.splitlines() if ln.startswith("void kernel(")]
        decls += [ln.replace("void kernel(", f"void pd_k_{b.key}(", 1) for ln in body]
        decls.append(f"void pd_k_{b.key}_entry(void* const* buffers); /* inputs then outputs, in order */")
    header.write_text("/* Generated by PerfDojo: the kernels of one imported model. */\n#pragma once\n"
                      "#ifdef __cplusplus\nextern \"C\" {\n#endif\n" + "\n".join(decls) +
                      "\n#ifdef __cplusplus\n}\n#endif\n")
    os.replace(tmp_so, so)
    for p in work.iterdir():
        p.unlink()
    work.rmdir()
    return so, header, False


def _check_signature(c_header: str, k: Kernel) -> None:
    """The generated kernel() takes the library's buffers in the library's order: its inputs then
    its outputs, each with as many elements as the torch tensor passed (the header's comments
    give role and extents). A mismatch would let a kernel write outside a tensor."""
    import re
    params = re.findall(r"/\* (input|output) ([0-9x]+)", c_header)
    want = [("input", math.prod(s)) for s in k.input_shapes] + [("output", math.prod(s)) for s in k.output_shapes]
    got = [(role, math.prod(int(d) for d in dims.split("x"))) for role, dims in params]
    if got != want:
        raise RuntimeError(f"{k.name}: the generated kernel takes {got}, the library would pass {want}")


_REGISTERED: dict = {}


class _KernelCall:
    """Calls one kernel of the library on torch tensors: inputs then freshly allocated outputs."""

    def __init__(self, lib, key, kernel: Kernel):
        torch = _torch()
        self.fn = getattr(lib, f"pd_k_{key}_entry")
        self.fn.restype = None
        self.fn.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        self.key = key
        self.in_shapes = [tuple(s) for s in kernel.input_shapes]
        self.out_shapes = [tuple(s) for s in kernel.output_shapes]
        self.n = len(self.in_shapes) + len(self.out_shapes)
        self.name = kernel.name
        self.torch = torch

    def __call__(self, *xs):
        torch = self.torch
        if len(xs) != len(self.in_shapes):
            raise ShapeError(f"{self.name}: {len(xs)} inputs, expected {len(self.in_shapes)}")
        ins = []
        for i, (x, s) in enumerate(zip(xs, self.in_shapes)):
            if tuple(x.shape) != s or x.dtype != torch.float32 or x.device.type != "cpu":
                raise ShapeError(f"{self.name}: input {i} is {x.dtype}{tuple(x.shape)} on {x.device}, the kernel "
                                 f"was generated for float32{s} on the CPU")
            ins.append(x.contiguous())
        outs = [torch.empty(s, dtype=torch.float32) for s in self.out_shapes]
        ptrs = (ctypes.c_void_p * self.n)(*[t.data_ptr() for t in ins + outs])
        self.fn(ptrs)
        return outs


def _as_op(call: _KernelCall):
    """A torch.library custom op for the kernel (PyTorch 2.4 and later), else the Python call."""
    torch = _torch()
    if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
        return lambda *xs: tuple(call(*xs))
    qual = f"perfdojo::k_{call.key}"
    if qual in _REGISTERED:
        return _REGISTERED[qual]
    args = ", ".join(f"Tensor x{i}" for i in range(len(call.in_shapes)))
    rets = ", ".join("Tensor" for _ in call.out_shapes)
    schema = f"({args}) -> ({rets})" if len(call.out_shapes) > 1 else f"({args}) -> Tensor"
    try:
        def impl(*xs):
            outs = call(*xs)
            return tuple(outs) if len(outs) > 1 else outs[0]
        op = torch.library.custom_op(qual, impl, mutates_args=(), schema=schema)

        def fake(*xs):
            outs = [xs[0].new_empty(s) for s in call.out_shapes]
            return tuple(outs) if len(outs) > 1 else outs[0]
        op.register_fake(fake)
        opfn = getattr(torch.ops.perfdojo, f"k_{call.key}")

        def run(*xs):
            r = opfn(*xs)
            return tuple(r) if isinstance(r, (tuple, list)) else (r,)
    except Exception:  # an older torch.library: the plain call computes the same
        def run(*xs):
            return tuple(call(*xs))
    _REGISTERED[qual] = run
    return run


def _kernel_module(fn, label):
    """An nn.Module whose forward is `fn` (one kernel call), printed as `label`."""
    torch = _torch()

    class KernelModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fn, self.label = fn, label

        def forward(self, *xs):
            return self.fn(*xs)

        def extra_repr(self):
            return self.label

    return KernelModule()


def _rewrite(imported: Imported, calls: list):
    """The traced graph with each kernel's operators replaced by one call of the kernel."""
    gm = imported.graph_module
    graph = gm.graph
    # node name -> node; a kernel's output node is replaced by the getitem of its call
    by_name = {n.name: n for n in graph.nodes}
    for k, group, call in zip(imported.kernels, imported.groups, calls):
        mod_name = f"perfdojo_{k.name}"
        gm.add_submodule(mod_name, _kernel_module(_as_op(call), f"{k.name}: {' + '.join(k.ops)}"))
        # inserting before the node after the group keeps the new nodes in creation order
        with graph.inserting_before(group[-1].next):
            args = []
            for kind, ref in k.inputs:
                if kind == "node":
                    args.append(by_name[ref])
                elif kind == "param_t":
                    attr = "perfdojo_t_" + ref.replace(".", "_")
                    if not hasattr(gm, attr):
                        w = gm.get_parameter(ref) if _is_parameter(gm, ref) else gm.get_buffer(ref)
                        gm.register_buffer(attr, w.detach().t().contiguous())
                    args.append(graph.get_attr(attr))
                else:
                    args.append(graph.get_attr(ref))
            call_node = graph.call_module(mod_name, tuple(args))
            getters = [graph.call_function(operator.getitem, (call_node, i)) for i in range(len(k.outputs))]
        for out_name, g in zip(k.outputs, getters):
            by_name[out_name].replace_all_uses_with(g)
            by_name[out_name] = g
        for n in reversed(group):
            if not n.users:
                graph.erase_node(n)
    graph.lint()
    gm.recompile()
    return gm


class CompiledModule:
    """A module computing what the original computes through PerfDojo's kernels (module doc).

    Inputs whose shapes differ from the traced ones raise ShapeError, or run the original module
    when compiled with fallback="eager"."""

    def __init__(self, original, gm, imported, example_shapes, report, library, header, fallback):
        self.original, self.gm, self.imported = original, gm, imported
        self.example_shapes = example_shapes
        self.report, self.library, self.header = report, library, header
        self.fallback = fallback

    def __call__(self, *xs):
        torch = _torch()
        shapes = [(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else None for x in xs]
        if shapes != self.example_shapes:
            if self.fallback == "eager":
                return self.original(*xs)
            raise ShapeError(f"inputs {[s and (str(s[1]), s[0]) for s in shapes]} differ from the traced "
                             f"{[s and (str(s[1]), s[0]) for s in self.example_shapes]}: the kernels are "
                             "generated for the traced shapes (compile again, or fallback='eager')")
        with torch.no_grad():
            return self.gm(*xs)

    forward = __call__


def compile(module, example_inputs, timeout: float = 120, *, arch: Optional[str] = None, mode: str = "balanced",
            threads: int = 1, cache_dir=None, tolerance: float = 1e-3, fallback: str = "error",
            progress: bool = True, frontend: str = "auto") -> CompiledModule:
    """Imports `module`, optimises its kernels within `timeout` seconds in all, builds them into
    one shared library and returns a CompiledModule checked against eager on `example_inputs`:
    max |ours - eager| <= tolerance * max(1, max |eager|) for every output, else ValueError."""
    torch = _torch()
    if fallback not in ("error", "eager"):
        raise ValueError("fallback must be 'error' or 'eager'")
    t_start = time.perf_counter()
    arch = arch or _native.this_isa()
    imported = from_torch(module, example_inputs, frontend=frontend)
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    root = _cache_root(cache_dir)
    keys = [_kernel_key(k, arch, mode, threads) for k in imported.kernels]
    todo = [i for i, key in enumerate(keys) if not _cached(root / "kernels" / key)]
    weights = [max(imported.kernels[i].eager_s, 1e-9) for i in todo]
    # Each kernel to optimise gets a floor (a small kernel still needs its sketches measured),
    # the rest of the budget by its share of the eager time.
    shares = [0.0] * len(keys)
    if todo:
        floor = min(timeout / len(todo), max(2.0, 0.05 * timeout))
        rest = max(0.0, timeout - floor * len(todo))
        for i, w in zip(todo, weights):
            shares[i] = floor + rest * w / sum(weights)
    built = _optimise(imported.kernels, keys, shares, arch, mode, threads, root, progress)
    so, header, lib_cached = _build_library(built, arch, root) if built else (None, None, True)
    lib = ctypes.CDLL(str(so)) if so else None
    for b, k in zip(built, imported.kernels):
        _check_signature(b.c_header, k)
    calls = [_KernelCall(lib, b.key, k) for b, k in zip(built, imported.kernels)]
    # the reference: eager on the example inputs, before the graph is rewritten
    with torch.no_grad():
        ref = module(*example_inputs)
    gm = _rewrite(imported, calls)
    shapes = [(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else None for x in example_inputs]
    report = imported.report()
    for entry, b in zip(report["kernels"], built):
        entry.update({"key": b.key, "cached": b.cached, "speedup": b.report.get("speedup"),
                      "verified": b.report.get("verified"), "baseline_s": b.report.get("baseline_s"),
                      "final_s": b.report.get("final_s")})
    cm = CompiledModule(module, gm, imported, shapes, report, so, header, fallback)
    with torch.no_grad():
        got = cm(*example_inputs)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    gots = got if isinstance(got, (tuple, list)) else (got,)
    worst = 0.0
    for r_, g_ in zip(refs, gots):
        scale = max(1.0, float(r_.abs().max()))
        err = float((r_ - g_).abs().max()) / scale
        worst = max(worst, err)
    report.update({"arch": arch, "mode": mode, "threads": threads, "timeout_s": timeout, "library": str(so),
                   "header": str(header), "library_cached": lib_cached, "max_scaled_error": worst,
                   "tolerance": tolerance, "compile_s": time.perf_counter() - t_start})
    if not worst <= tolerance:
        raise ValueError(f"the compiled model differs from eager PyTorch on the example inputs: max scaled error "
                         f"{worst:.3g} > {tolerance:g} (report: {json.dumps(report)[:2000]})")
    return cm


# ------------------------------------------------------------------------------ command line


def _load_spec(spec: str):
    """`path/to/module.py:Name`: Name (a torch.nn.Module class or a function returning a module)
    called with no arguments."""
    import importlib.util
    path, sep, attr = spec.rpartition(":")
    if not sep or not path or not attr:
        raise ModelImportError(f"'{spec}': expected FILE.py:NAME (a module class or a function returning one)")
    if not os.path.isfile(path):
        raise ModelImportError(f"{path}: no such file")
    mod_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(mod_spec)
    sys.path.insert(0, str(Path(path).resolve().parent))
    try:
        mod_spec.loader.exec_module(module)
    except Exception as e:
        raise ModelImportError(f"{path}: importing it raised {type(e).__name__}: {e}") from None
    if not hasattr(module, attr):
        raise ModelImportError(f"{path} has no '{attr}'")
    try:
        return getattr(module, attr)()
    except Exception as e:
        raise ModelImportError(f"{path}:{attr}(): {type(e).__name__}: {e}") from None


def main(argv=None) -> int:
    """perfdojo import FILE.py:NAME --shape 1,128,768 [...]: import, optimise and build a model."""
    import argparse
    ap = argparse.ArgumentParser(prog="perfdojo import", description=main.__doc__)
    ap.add_argument("spec", help="FILE.py:NAME, a torch.nn.Module class or a function returning a module")
    ap.add_argument("--shape", action="append", required=True,
                    help="an example input's shape, comma-separated (float32, seeded normal values); once per input")
    ap.add_argument("--timeout", type=float, default=120, help="optimisation seconds for all kernels")
    ap.add_argument("--mode", default="balanced")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--frontend", default="auto", choices=["auto", "export", "fx"])
    ap.add_argument("--out", help="copy the library, its header and report.json here")
    ap.add_argument("--import-only", action="store_true", help="lower and report; optimise nothing")
    ap.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    a = ap.parse_args(argv)
    torch = _torch()
    try:
        shapes = [tuple(int(d) for d in s.split(",")) for s in a.shape]
    except ValueError:
        print(f"perfdojo import: --shape takes integers separated by commas, not {a.shape}", file=sys.stderr)
        return 2
    try:
        model = _load_spec(a.spec)
        if not isinstance(model, torch.nn.Module):
            raise ModelImportError(f"{a.spec} gave a {type(model).__name__}, not a torch.nn.Module")
        model.eval()
        g = torch.Generator().manual_seed(0)
        xs = tuple(torch.randn(*s, generator=g) for s in shapes)
        if a.import_only:
            imported = from_torch(model, xs, frontend=a.frontend)
            report = imported.report()
            report["kernel_ir"] = {k.name: k.ir for k in imported.kernels}
            summary = imported.summary()
        else:
            cm = compile(model, xs, timeout=a.timeout, mode=a.mode, threads=a.threads, frontend=a.frontend,
                         progress=not a.json and sys.stderr.isatty())
            report, summary = cm.report, cm.imported.summary()
            if a.out:
                import shutil
                out = Path(a.out)
                out.mkdir(parents=True, exist_ok=True)
                shutil.copy(cm.library, out / "libperfdojo_model.so")
                shutil.copy(cm.header, out / "perfdojo_model.h")
                (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    except (ModelImportError, ShapeError, ValueError) as e:
        if a.json:
            print(json.dumps({"error": str(e)}))
        else:
            print(f"perfdojo import: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(report, default=str))
    else:
        print(summary)
        if not a.import_only:
            print(f"library {report['library']}\nheader {report['header']}\nmax scaled error against eager "
                  f"{report['max_scaled_error']:.3g} (tolerance {report['tolerance']:g}); {report['compile_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
