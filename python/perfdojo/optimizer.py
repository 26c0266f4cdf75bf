"""The optimiser for performance engineers, as the paper writes it (docs/optimizer.md):

    optimizer = PerfDojo(arch="x86_avx512", mode="aggressive")   # or balanced / conservative
    optimized_kernel = optimizer.transform(original_ir, timeout=300)   # seconds
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from . import _native
from .ir import Program, load


def _profile_dir() -> str:
    """Where the machine profile and measured times are kept: the CLI's folder."""
    home = os.environ.get("HOME")
    return str(Path(home) / ".cache" / "perfdojo") if home else ""


@dataclass
class Transformed:
    """What transform() found. str() is the optimised IR text."""
    program: Program
    trace: list = field(default_factory=list)   # the actions, as registry text
    c_source: str = ""                          # the generated translation unit
    c_header: str = ""                          # kernel()'s C declaration
    report: dict = field(default_factory=dict)  # times, speed-up, fraction of peak, verified...

    @property
    def ir(self) -> str:
        return self.program.text

    @property
    def speedup(self) -> float:
        return float(self.report.get("speedup", 1.0))

    @property
    def verified(self) -> bool:
        return bool(self.report.get("verified", False))

    def __str__(self) -> str:
        return self.program.text

    def save(self, folder) -> None:
        """Writes kernel.pdj, trace.txt, kernel.c, kernel.h and report.json into `folder`."""
        import json
        d = Path(folder)
        d.mkdir(parents=True, exist_ok=True)
        (d / "kernel.pdj").write_text(self.program.text)
        (d / "trace.txt").write_text("\n".join(self.trace) + ("\n" if self.trace else ""))
        (d / "kernel.c").write_text(self.c_source)
        (d / "kernel.h").write_text(self.c_header)
        (d / "report.json").write_text(json.dumps(self.report, indent=1) + "\n")


class _Bar:
    """The CLI's progress line on stderr: a bar, time used, evaluations/s, ETA, best speed-up."""

    def __init__(self, stream):
        self.stream, self.start = stream, time.monotonic()

    def __call__(self, fraction: float, evaluations: int, speedup: float) -> None:
        elapsed = time.monotonic() - self.start
        filled = int(max(0.0, min(1.0, fraction)) * 30)
        rate = evaluations / elapsed if elapsed > 0 else 0
        eta = elapsed * (1 - fraction) / fraction if fraction > 0 else 0
        self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {fraction * 100:3.0f}%  "
                          f"{evaluations} evals  {rate:.0f} evals/s  ETA {eta:.0f}s  best x{speedup:.2f}   ")
        self.stream.flush()


class PerfDojo:
    """An optimiser for one architecture and mode.

    Args:
        arch: "x86_avx512", "x86_avx2" or "x86_64" (perfdojo.this_isa() is this machine's widest).
        mode: "conservative", "balanced" or "aggressive" (docs/optimizer.md).
        threads: cap on the threads the kernel may use (1: one core); None: the CLI's default.
        cache_flush: "auto" (default), "on" or "off": time with the kernel's data evicted from
            the caches before every call; auto does so for memory-bound kernels larger than half
            the last-level cache (docs/optimizer.md, "Measurement protocol"; the report's
            "cache_flushed" says which).
    The first use on a machine calibrates the cost model (a few seconds) and keeps the profile
    in ~/.cache/perfdojo, as `perfdojo optimize` does.
    """

    def __init__(self, arch: str = "x86_avx512", mode: str = "balanced", *, threads: Optional[int] = None,
                 cache_flush: str = "auto"):
        self.arch, self.mode = arch, mode
        try:
            self._opt = _native.Optimizer.make(arch, mode, _profile_dir(), int(threads or 0), str(cache_flush))
        except ValueError as e:
            raise ValueError(str(e)) from None

    def transform(self, ir, timeout: float = 300, *, progress: bool | object = True) -> Transformed:
        """Searches for at most `timeout` seconds and returns the fastest verified kernel found.

        `ir`: IR text, a path to a .pdj file, a benchmark URI, or a Program. `progress`: True
        draws the CLI's progress line on stderr, a callable gets (fraction, evaluations,
        best speed-up), False is silent. Ctrl-C stops the search and returns the best verified
        kernel so far (report["interrupted"] is then True)."""
        if not (timeout and timeout > 0):
            raise ValueError("timeout must be a positive number of seconds")
        program = load(ir)
        callback = _Bar(sys.stderr) if progress is True else (progress or None)
        p, trace, c_source, c_header, report, keyboard = self._opt.transform(program._p, float(timeout), callback)
        if progress is True:
            sys.stderr.write("\n")
        if keyboard:
            report["interrupted"] = True
            report["note"] = ("stopped by Ctrl-C: the best verified kernel so far. " + report.get("note", "")).strip()
        return Transformed(Program(p), list(trace), c_source, c_header, dict(report))
