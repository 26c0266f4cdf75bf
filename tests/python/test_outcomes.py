"""One outcome, one exit code (docs/optimizer.md, "Outcomes"): `perfdojo measure` and `perfdojo
optimize` say verified / unchanged / not_verifiable / wrong / failed in `--json` and exit with
the code that outcome has, whatever the kernel.

A wrong result is made by a sabotaging C compiler first in PATH (the backends run `cc`): it
compiles each generated kernel with its literal 2.0f turned into 3.0f, so the code runs and
computes something else, as a code-generator bug would.
"""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("PERFDOJO_BIN_DIR") or ROOT / "build" / "bin")
PERFDOJO = BIN_DIR / "perfdojo"

SMALL = "N = 64\ninput x: f32[N]\noutput y: f32[N]\n\nN y[{0}] = x[{0}] * 2 + 1\n"

EXIT = {"verified": 0, "unchanged": 0, "unchecked": 0, "not_verifiable": 3, "wrong": 4, "failed": 5}

SABOTAGE = """#!{python}
import os, shutil, subprocess, sys
args = []
for a in sys.argv[1:]:
    if a.endswith(".c") and os.path.exists(a):
        text = open(a).read().replace("2.0f", "3.0f")
        a = a[:-2] + ".sabotaged.c"
        open(a, "w").write(text)
    args.append(a)
real = [p for p in os.environ["PATH"].split(os.pathsep) if p != os.path.dirname(__file__)]
sys.exit(subprocess.call([shutil.which("cc", path=os.pathsep.join(real))] + args))
"""

BROKEN = "#!/bin/sh\ncase \"$1\" in --version) echo broken-cc 1.0; exit 0;; esac\necho 'broken-cc: internal error' >&2\nexit 1\n"


def tool_dir(tmp_path, script):
    d = tmp_path / "bin"
    d.mkdir()
    cc = d / "cc"
    cc.write_text(script)
    cc.chmod(cc.stat().st_mode | stat.S_IEXEC)
    return d


def run(cmd, path_first=None, timeout=300):
    env = dict(os.environ, PERFDOJO_CACHE_DIR="")
    if path_first:
        env["PATH"] = f"{path_first}{os.pathsep}{env['PATH']}"
    return subprocess.run([str(PERFDOJO), *map(str, cmd)], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture
def small(tmp_path):
    p = tmp_path / "small.pdj"
    p.write_text(SMALL)
    return p


def outcome_of(r):
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.returncode == EXIT[doc["outcome"]], (r.returncode, doc, r.stderr[-2000:])
    return doc


def test_measure_verified_is_exit_0(small):
    doc = outcome_of(run(["measure", small, "--no-cache", "--json"]))
    assert doc["outcome"] == "verified" and doc["ok"] is True
    assert doc["verification"] == "exact"  # plain code keeps the IR's rounding


def test_measure_wrong_result_is_exit_4_and_names_the_element(tmp_path, small):
    r = run(["measure", small, "--no-cache", "--json"], tool_dir(tmp_path, SABOTAGE.format(python=sys.executable)))
    doc = outcome_of(r)
    assert doc["outcome"] == "wrong" and doc["ok"] is False
    assert "output 'y' element [0]" in doc["error"]


def test_measure_that_cannot_compile_is_exit_5(tmp_path, small):
    doc = outcome_of(run(["measure", small, "--no-cache", "--json"], tool_dir(tmp_path, BROKEN)))
    assert doc["outcome"] == "failed"
    assert "compile failed" in doc["error"]


def test_optimize_reports_one_outcome_with_its_exit_code(small):
    r = run(["optimize", small, "--timeout", "4", "--no-cache", "--json"])
    doc = outcome_of(r)
    rep = doc["report"]
    assert rep["outcome"] in ("verified", "unchanged")
    assert rep["exit_code"] == 0 and doc["ok"] is True
    assert rep["verified"] is True
    assert rep["original_flops"] == 2 * 64
    assert 0 < rep["flops"] <= 2 * 64 and rep["peak_fraction"] <= 1


def test_optimize_of_a_kernel_whose_code_is_wrong_is_exit_4_not_unchanged(tmp_path, small):
    r = run(["optimize", small, "--timeout", "4", "--no-cache", "--json"],
            tool_dir(tmp_path, SABOTAGE.format(python=sys.executable)))
    doc = outcome_of(r)
    assert doc["outcome"] == "wrong" and doc["ok"] is False
    assert "wrong result" in doc["report"]["outcome_why"]


def test_optimize_that_cannot_compile_is_exit_5(tmp_path, small):
    r = run(["optimize", small, "--timeout", "4", "--no-cache", "--json"], tool_dir(tmp_path, BROKEN))
    doc = outcome_of(r)
    assert doc["outcome"] == "failed"
    assert "compile failed" in doc["report"]["outcome_why"]


MATMUL = ("M = 64\nN = 64\nK = 64\ninput A: f32[M, K]\ninput B: f32[K, N]\n"
          "output C: f32[M, N] = 0\n\nM N K C[{0},{1}] += A[{0},{2}] * B[{2},{1}]\n")


def test_a_modelled_run_with_fixed_model_work_repeats_its_decisions_exactly(tmp_path):
    import shutil
    if not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")):
        pytest.skip("no aarch64 cross-compiler or qemu-aarch64 (scripts/bootstrap --cross)")
    k = tmp_path / "mm.pdj"
    k.write_text(MATMUL)
    # The evaluations bound the search (about 2 s a run); the time limit is far above it, so that
    # no phase's share of it runs out first on a loaded machine (a 20 s limit did, once in CI,
    # beside the other pytest worker and qemu: one step of the trace differed).
    runs = [outcome_of(run(["optimize", k, "--arch", "aarch64_neon", "--timeout", "120",
                            "--evaluations", "2000", "--json"])) for _ in range(2)]
    a, b = (r["report"] for r in runs)
    assert a["outcome"] == b["outcome"] == "verified"
    assert a["trace"] == b["trace"] and len(a["trace"]) > 0
    assert runs[0]["text"] == runs[1]["text"]
    assert a["speedup"] == b["speedup"] and a["evaluations"] == b["evaluations"]


def test_two_measured_runs_with_one_seed_and_budget_end_in_the_same_outcome(tmp_path):
    # Measured times differ run to run, so the path may (docs/optimizer.md, "Repeatability");
    # the outcome, its exit code and the returned kernel's semantics may not.
    k = tmp_path / "mm.pdj"
    k.write_text(MATMUL)
    runs = [outcome_of(run(["optimize", k, "--timeout", "6", "--evaluations", "2000", "--json"]))
            for _ in range(2)]
    assert {r["outcome"] for r in runs} <= {"verified", "unchanged"}
    assert all(r["ok"] and r["report"]["verified"] for r in runs)
    assert runs[0]["report"]["seed"] == runs[1]["report"]["seed"]
