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


def test_perfdojo_import_lowers_a_model_file_and_reports_bad_input(tmp_path):
    py = torch_python()
    if py is None:
        pytest.skip("skipped: no interpreter with PyTorch (see the test above)")
    bin_dir = Path(os.environ.get("PERFDOJO_BIN_DIR", ROOT / "build" / "bin"))
    (tmp_path / "block.py").write_text(
        "import torch, torch.nn as nn\n"
        "class Block(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(16, 16)\n"
        "    def forward(self, x):\n"
        "        return torch.relu(self.fc(x)).cumsum(-1)\n")
    env = dict(os.environ, PERFDOJO_PYTHON=str(py))
    run = subprocess.run([str(bin_dir / "perfdojo"), "import", "block.py:Block", "--shapes", "4,16",
                          "--import-only", "--json"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert [k["ops"] for k in report["kernels"]] == [["linear", "relu"]]
    assert [f["node"] for f in report["in_pytorch"]] == ["cumsum"]
    # the weight goes in transposed (both front ends name it by its qualified name)
    ir = next(iter(report["kernel_ir"].values()))
    assert "input fc_weight_t: f32[D16, D16]" in ir and "_acc[{0},{1}] += x[{0},{2}] * fc_weight_t[{2},{1}]" in ir, ir
    # a shape the model refuses, and a name the file lacks: exit 1 with the reason
    bad = subprocess.run([str(bin_dir / "perfdojo"), "import", "block.py:Block", "--shapes", "4,15",
                          "--import-only"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert bad.returncode == 1 and "do not run through Block" in bad.stderr, bad.stderr[-2000:]
    missing = subprocess.run([str(bin_dir / "perfdojo"), "import", "block.py:Nope", "--shapes", "4,16",
                              "--import-only"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert missing.returncode == 1 and "has no 'Nope'" in missing.stderr, missing.stderr[-2000:]
    usage = subprocess.run([str(bin_dir / "perfdojo"), "import", "block.py:Block"], capture_output=True,
                           text=True, env=env, cwd=tmp_path, timeout=60)
    assert usage.returncode == 2 and "--shapes" in usage.stderr
