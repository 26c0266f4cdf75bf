"""perfdojo.from_torch / perfdojo.compile (docs/models.md): runs torch_import_check.py under an
interpreter with PyTorch: .venv-bench (the newest PyPI PyTorch) when scripts/bootstrap --bench
made it, else .venv-rl (Debian's PyTorch 1.13, which scripts/bootstrap prepares for the agents)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def torch_python():
    for venv in (".venv-bench", ".venv-rl"):
        py = ROOT / venv / "bin" / "python"
        if py.exists() and subprocess.run([str(py), "-c", "import torch, torch.fx, gymnasium"],
                                          capture_output=True).returncode == 0:
            return py
    return None


def test_a_model_imports_compiles_and_computes_what_eager_computes(tmp_path):
    py = torch_python()
    if py is None:
        cache = ROOT / "build" / "CMakeCache.txt"
        if cache.exists() and "PERFDOJO_BUILD_AGENTS:BOOL=OFF" in cache.read_text():
            pytest.skip("skipped: no interpreter with PyTorch (.venv-rl is made only with the agents)")
        pytest.fail("no .venv-bench or .venv-rl with PyTorch: run scripts/bootstrap")
    env = dict(os.environ)
    run = subprocess.run([str(py), str(ROOT / "tests" / "python" / "torch_import_check.py")],
                         capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["ok"]
    assert out["warm_compile_s"] < 10
    assert out["mlp_error"] < 1e-3
