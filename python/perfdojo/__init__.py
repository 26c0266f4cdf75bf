"""PerfDojo in Python, in-process: the C++ libraries bound with pybind11 (docs/python.md).

    import perfdojo
    optimizer = perfdojo.PerfDojo(arch=perfdojo.this_isa(), mode="aggressive")
    optimized_kernel = optimizer.transform(original_ir, timeout=300)

- `PerfDojo(arch, mode).transform(ir, timeout)`: the optimiser (`perfdojo optimize`), a kernel in,
  the fastest verified kernel out.
- `Program`: the IR as an object: parse, print, check, interpret into numpy arrays, apply an action.
- `from_torch(module, example_inputs)` / `compile(module, example_inputs, timeout)`: a PyTorch
  module's operators lowered to IR kernels, optimised, built into one library and run as the
  module (docs/models.md; needs PyTorch).
- `InProcessEnv` / `InProcessVectorEnv`: Gymnasium envs over the C++ env in this process,
  registered as "PerfDojoInProcess-v0" (the socket bridge's "PerfDojo-v0" is perfdojo_gym's).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path


def _native_dirs() -> list[str]:
    """Where the extension module may be: $PERFDOJO_NATIVE_DIR, next to $PERFDOJO_BIN_DIR's
    build tree, then this checkout's build/python/perfdojo."""
    out = []
    if os.environ.get("PERFDOJO_NATIVE_DIR"):
        out.append(os.environ["PERFDOJO_NATIVE_DIR"])
    if os.environ.get("PERFDOJO_BIN_DIR"):
        out.append(str(Path(os.environ["PERFDOJO_BIN_DIR"]).resolve().parent / "python" / "perfdojo"))
    out.append(str(Path(__file__).resolve().parents[2] / "build" / "python" / "perfdojo"))
    return out


for _d in _native_dirs():
    if glob.glob(os.path.join(_d, "_native*.so")):
        __path__.append(_d)  # noqa: F821 (the package's own __path__)
        break
try:
    from . import _native  # noqa: E402
except ImportError as _e:  # pragma: no cover - reported to the user
    raise ImportError(
        "perfdojo's extension module (_native) is not built: run scripts/bootstrap (it needs "
        "pybind11-dev and this Python's headers), or set PERFDOJO_NATIVE_DIR to the folder that "
        f"holds _native*.so; looked in {', '.join(_native_dirs())}") from _e

from .ir import Diagnostic, IllegalActionError, IRError, Program, load, parse  # noqa: E402
from .optimizer import PerfDojo, Transformed  # noqa: E402


def this_isa() -> str:
    """The widest x86 ISA this CPU runs: "x86_avx512", "x86_avx2" or "x86_64"."""
    return _native.this_isa()


from .env import InProcessEnv, InProcessVectorEnv  # noqa: E402
from .torch_import import (CompiledModule, Imported, ModelImportError, ShapeError, compile,  # noqa: E402,A004
                           from_torch)

__all__ = ["CompiledModule", "Imported", "ModelImportError", "ShapeError", "compile", "from_torch", "Diagnostic", "IRError", "IllegalActionError", "InProcessEnv", "InProcessVectorEnv",
           "PerfDojo", "Program", "Transformed", "load", "parse", "this_isa"]

from gymnasium.envs.registration import register, registry  # noqa: E402

# Next to the bridge's "PerfDojo-v0" (perfdojo_gym): the same spaces, masks, info and TimeLimit.
if "PerfDojoInProcess-v0" not in registry:
    register(id="PerfDojoInProcess-v0", entry_point="perfdojo.env:InProcessEnv", nondeterministic=False,
             max_episode_steps=30, vector_entry_point="perfdojo.env:InProcessVectorEnv")
