"""The IR as Python objects: parse, print, check, interpret, apply an action (docs/ir.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from . import _native

_DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32}


@dataclass(frozen=True)
class Diagnostic:
    """One error in the input, at file:line:col."""
    file: str
    line: int
    col: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: error: {self.message}"


def _diagnostics(raw) -> list[Diagnostic]:
    return [Diagnostic(d["file"], int(d["line"]), int(d["col"]), d["message"]) for d in raw]


class IRError(ValueError):
    """IR text that does not parse or check; `diagnostics` says where and why."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = diagnostics
        super().__init__("\n".join(str(d) for d in diagnostics))


class IllegalActionError(ValueError):
    """An action the program refuses: `reason` ("dependence", "not_divisible", ...) and why."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


class Program:
    """A checked kernel. Immutable: apply() returns a new Program."""

    def __init__(self, native: "_native.Program"):
        self._p = native

    @classmethod
    def parse(cls, text: str, file: str = "<string>") -> "Program":
        return parse(text, file)

    @property
    def text(self) -> str:
        """The canonical IR text."""
        return self._p.text()

    def __str__(self) -> str:
        return self._p.text()

    def __repr__(self) -> str:
        first = next((ln for ln in self.text.splitlines() if ln and not ln.startswith("#")), "")
        return f"<perfdojo.Program {first!r}...>"

    def __eq__(self, other) -> bool:
        return isinstance(other, Program) and self._p.equals(other._p)

    def __hash__(self) -> int:
        return int(self._p.hash())

    @property
    def buffers(self) -> list[dict]:
        """[{"name", "role" (input/output/temp), "dtype", "shape"}] in declaration order."""
        return self._p.buffers()

    def check(self) -> list[Diagnostic]:
        """The checker's findings (empty for a program that parsed: parse() checks too)."""
        return _diagnostics(self._p.check())

    def interpret(self, inputs: Optional[dict] = None, seed: int = 0, *, all_buffers: bool = False,
                  strict: bool = False) -> dict[str, np.ndarray]:
        """Runs the reference interpreter. `inputs` maps input names to arrays of the declared
        shapes (missing inputs get the seeded data every backend uses); returns the outputs
        (every buffer with all_buffers). strict: refuse reads of never-written elements."""
        given = None
        if inputs:
            given = {}
            for name, value in inputs.items():
                a = np.ascontiguousarray(value, dtype=np.float64)
                given[str(name)] = (tuple(int(d) for d in a.shape), a.tobytes())
        out, error = self._p.interpret(given, int(seed), bool(all_buffers), bool(strict))
        if out is None:
            raise ValueError(error)
        return {name: np.frombuffer(b, dtype=_DTYPES[dt]).reshape(shape).copy()
                for name, (dt, shape, b) in out.items()}

    def apply(self, action: str, target: Optional[str] = None) -> "Program":
        """The program after `action` (registry text, e.g. "tile_scope 0 8"), checked first;
        raises IllegalActionError with the reason when it is refused."""
        from . import this_isa
        nxt, reason, message = self._p.apply(str(action), target or this_isa())
        if nxt is None:
            raise IllegalActionError(reason, message)
        return Program(nxt)

    def legal_actions(self, target: Optional[str] = None) -> list[str]:
        """Every legal action on this program for `target` (default: this machine's ISA)."""
        from . import this_isa
        return self._p.legal_actions(target or this_isa())


def parse(text: str, file: str = "<string>") -> Program:
    """Parses and checks IR text; raises IRError (file:line:col) when it is not a kernel."""
    p, diags = _native.parse(text, file)
    if p is None:
        raise IRError(_diagnostics(diags))
    return Program(p)


def load(source) -> Program:
    """A Program from a Program, a path to a .pdj file, a benchmark URI (perfdojo://suite/...,
    perfdojo://gen/...), or IR text."""
    if isinstance(source, Program):
        return source
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source
                                           and source.endswith(".pdj")):
        path = os.fspath(source)
        with open(path, encoding="utf-8") as f:
            return parse(f.read(), path)
    if isinstance(source, str) and source.startswith("perfdojo://"):
        p, diags = _native.load_benchmark(source)
        if p is None:
            raise IRError(_diagnostics(diags))
        return Program(p)
    if isinstance(source, str):
        return parse(source)
    raise TypeError(f"expected IR text, a path, a benchmark URI or a Program, not {type(source).__name__}")
