"""The plotting scripts draw what the benchmark programs write (synthetic runs, no timing)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def kernel_row(name, ours, blas, torch):
    return {"kernel": name, "how": "optimiser", "flops": 2e9, "verified": True,
            "ours_min_s": ours, "ours_median_s": ours, "openblas_min_s": blas,
            "openblas_median_s": blas, "ours_in_torch_process_min_s": ours,
            "ours_in_torch_process_median_s": ours, "torch_min_s": torch, "torch_median_s": torch,
            "torch_note": "", "trace": []}


def test_plot_kernel_bench_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    run = {"arch": "x86_avx512", "budget_s": 300, "reps": 30, "peak_gflops_per_core": 175.9,
           "openblas_core": "SkylakeX",
           "kernels": [kernel_row("matmul-1024", 0.0144, 0.0142, 0.0145),
                       kernel_row("softmax", 0.001, 0, 0.0003)]}  # no BLAS form: a missing bar
    src = tmp_path / "run.json"
    src.write_text(json.dumps(run))
    out = tmp_path / "plot.png"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_kernel_bench.py"),
                        str(src), "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_kernel_bench_refuses_an_empty_run(tmp_path):
    pytest.importorskip("matplotlib")
    src = tmp_path / "run.json"
    src.write_text(json.dumps({"arch": "x86_avx2", "budget_s": 0, "peak_gflops_per_core": 90,
                               "kernels": []}))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_kernel_bench.py"),
                        str(src), "--out", str(tmp_path / "x.png")], capture_output=True, text=True)
    assert r.returncode == 1
    assert "no kernels" in r.stderr


def search_report(final_s, points, budget=100):
    return {"file": "kernels/matmul-1024.pdj", "baseline_s": 1.0, "final_s": final_s,
            "speedup": 1.0 / final_s, "budget_s": budget,
            "curve": [{"elapsed_s": t, "evaluations": 0, "best_estimate_s": 0,
                       "best_measured_s": m} for t, m in points]}


def test_plot_search_curve_finds_when_90_percent_was_reached_and_the_spread(tmp_path):
    pytest.importorskip("matplotlib")
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    # Run a: 0.1 s at 5 s, 0.02 at 20 s, 0.0105 at 60 s (90% of 0.0105's speed: <= 0.01167).
    a.write_text(json.dumps(search_report(0.0105, [(0, 1.0), (5, 0.1), (20, 0.02), (60, 0.0105)])))
    b.write_text(json.dumps(search_report(0.0100, [(0, 1.0), (2, 0.0100)])))
    out = tmp_path / "curve.png"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_search_curve.py"),
                        str(a), str(b), "--out", str(out), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [run["t90_s"] for run in doc["runs"]] == [60, 2]
    assert doc["runs"][0]["t90_fraction"] == pytest.approx(0.6)
    assert doc["final_spread"] == pytest.approx(0.05)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
