"""`perfdojo optimize`: the report, the written files, and a trained policy proposing first.

Runs the built binaries (build/bin or $PERFDOJO_BIN_DIR) for real: the x86 backend compiles and
times every candidate, and `--agent` runs `evaluate_agent --propose` on a checkpoint that
`train_agent` writes here. The `--agent` tests are skipped in a build without the agents
(PERFDOJO_BUILD_AGENTS=OFF).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("PERFDOJO_BIN_DIR") or ROOT / "build" / "bin")
PERFDOJO = BIN_DIR / "perfdojo"
KERNELS = ROOT / "kernels"

SOFTMAX = """\
B = 16
N = 64
input s: f32[B, N]
output d: f32[B, N]
temp m: f32[B] = -inf
temp e: f32[B, N]
temp a: f32[B] = 0

B N m[{0}] = max(s[{0},{1}])
| N e[{0},{1}] = exp(s[{0},{1}] - m[{0}])
| | a[{0}] += e[{0},{1}]
| N d[{0},{1}] = e[{0},{1}] / a[{0}]
"""


def optimize(*args, timeout=120):
    return subprocess.run([str(PERFDOJO), "optimize", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def softmax(tmp_path):
    p = tmp_path / "softmax.pdj"
    p.write_text(SOFTMAX)
    return p


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    if not (BIN_DIR / "train_agent").exists() or not (BIN_DIR / "evaluate_agent").exists():
        pytest.skip("built without the agents")
    out = tmp_path_factory.mktemp("agent")
    r = subprocess.run([str(BIN_DIR / "train_agent"), "--steps", "200", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return out / "agent.ckpt"


def test_optimize_writes_a_verified_kernel_its_trace_source_header_and_report(tmp_path, softmax):
    out = tmp_path / "out"
    r = optimize(softmax, "--timeout", 8, "--threads", 1, "--no-cache", "--out", out, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)["report"]
    assert report["verified"] is True
    assert report["verified_on"] == "scaled-down instance, interpreter"  # a small kernel: the interpreter
    assert report["threads"] == 1
    assert report["final_s"] <= report["baseline_s"]
    assert report["profile"]
    # The report's two times come from one interleaved re-timing at the end (A B A B ...).
    assert report["timing"] == "interleaved"
    assert report["final_reps"] >= 5
    assert report["baseline_min_s"] <= report["baseline_s"]
    assert report["final_min_s"] <= report["final_s"]
    # Anytime: the curve carries the measured best, which only ever improves.
    measured = [p["best_measured_s"] for p in report["curve"]]
    assert measured and all(b <= a for a, b in zip(measured, measured[1:]))
    assert 0 < report["first_measured_s"] < 8 or report["trace"] == []
    for name in ("softmax.pdj", "trace.txt", "kernel.c", "kernel.h", "report.json"):
        assert (out / name).exists(), name
    # The trace replays to the written program.
    replayed = subprocess.run([str(PERFDOJO), "apply", str(softmax), "--trace", str(out / "trace.txt")],
                              capture_output=True, text=True, timeout=60)
    assert replayed.returncode == 0, replayed.stderr
    fmt = subprocess.run([str(PERFDOJO), "fmt", str(out / "softmax.pdj")], capture_output=True,
                         text=True, timeout=60)
    assert fmt.stdout.split("\n\n", 1)[-1] == replayed.stdout.split("\n\n", 1)[-1]
    assert ":par" not in (out / "softmax.pdj").read_text()  # --threads 1


@pytest.mark.parametrize("args", [["--threads", "0"], ["--threads", "x"], ["--timeout", "-1"],
                                  ["--mode", "reckless"]])
def test_bad_options_are_usage_errors(softmax, args):
    r = optimize(softmax, *args)
    assert r.returncode == 2, r.stderr


def test_agent_proposals_are_searched_and_verified(softmax, checkpoint):
    # --timeout 40 gives the policy 10 s (a quarter): LibTorch's start and its playouts took more
    # than 5 s on a loaded 2-core machine.
    r = optimize(softmax, "--timeout", 40, "--threads", 1, "--no-cache", "--agent", checkpoint,
                 "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)["report"]
    assert report["agent"] == str(checkpoint)
    assert report["agent_proposals"].startswith("agent: ")  # what the policy proposed
    assert report["verified"] is True


def test_policy_only_with_the_shipped_agent_measures_its_trace_and_nothing_else(softmax):
    r = optimize(softmax, "--timeout", 20, "--threads", 1, "--no-cache", "--agent", "default", "--policy-only",
                 "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)["report"]
    assert report["policy_only"] is True
    assert report["agent_proposals"].startswith("policy: ")
    assert report["sketches_used"] == 0  # no proposal of the optimiser's own
    assert report["evaluations"] <= 2  # the original and the policy's program: no search
    assert report["verified"] is True
    if report["arch"] == "x86_avx512":  # the built-in AVX-512 model the agent trained on
        assert report["agent_proposals"].endswith(" on cost_model"), report["agent_proposals"]


def test_policy_only_on_avx2_proposes_on_the_avx2_model(softmax):
    # A 16-lane move is none on an AVX2 core: the policy plays on the Zen 3 model there.
    r = optimize(softmax, "--arch", "x86_avx2", "--timeout", 20, "--threads", 1, "--no-cache", "--agent",
                 "default", "--policy-only", "--json")
    if r.returncode != 0 and "not available here" in r.stdout + r.stderr:
        pytest.skip("this CPU does not run x86_avx2 code")
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)["report"]
    assert report["arch"] == "x86_avx2"
    assert report["agent_proposals"].startswith("policy: ")
    assert report["agent_proposals"].endswith(" on cost_model:zen3"), report["agent_proposals"]
    assert report["verified"] is True


def test_propose_names_each_search_in_its_text_form(softmax, checkpoint):
    # The text form is what a person reads; each search's line starts with its name.
    r = subprocess.run([str(BIN_DIR / "evaluate_agent"), "--checkpoint", str(checkpoint),
                        "--propose", str(softmax), "--budget", "5"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    heads = [line.split(":")[0] for line in r.stdout.splitlines() if not line.startswith(" ")]
    assert heads == ["agent", "agent-rollout", "agent-greedy", "agent-probe"], r.stdout


def test_propose_policy_only_gives_the_policy_alone(softmax, checkpoint):
    r = subprocess.run([str(BIN_DIR / "evaluate_agent"), "--checkpoint", str(checkpoint),
                        "--propose", str(softmax), "--policy-only", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    proposals = json.loads(r.stdout.strip().splitlines()[-1])["proposals"]
    assert [p["method"] for p in proposals] == ["policy"]
    assert proposals[0]["speedup"] >= 1.0


def test_propose_starts_no_search_past_its_seconds_and_counts_the_rest(softmax, checkpoint):
    def propose(*extra):
        r = subprocess.run([str(BIN_DIR / "evaluate_agent"), "--checkpoint", str(checkpoint),
                            "--propose", str(softmax), "--budget", "5", "--json", *extra],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout.strip().splitlines()[-1])
    # The first search always runs; a microsecond later the deadline has passed.
    late = propose("--seconds", "0.000001")
    assert [p["method"] for p in late["proposals"]] == ["agent"]
    assert late["skipped_after_deadline"] == 3
    free = propose()
    assert len(free["proposals"]) == 4 and free["skipped_after_deadline"] == 0


def test_a_corrupt_checkpoint_is_an_error_before_any_search(tmp_path, softmax, checkpoint):
    bad = tmp_path / "bad.ckpt"
    data = checkpoint.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    r = optimize(softmax, "--timeout", 30, "--agent", bad)
    assert r.returncode == 1
    assert f"{bad}: error:" in r.stderr
    assert "checkpoint" in r.stderr


def test_a_missing_checkpoint_is_an_error(tmp_path, softmax):
    r = optimize(softmax, "--timeout", 5, "--agent", tmp_path / "none.ckpt", "--json")
    assert r.returncode == 1
    assert "cannot read checkpoint" in json.loads(r.stdout)["errors"][0]["message"]


def test_retime_recompiles_the_returned_kernel_and_times_it_against_the_original(tmp_path, softmax):
    out = tmp_path / "out"
    r = optimize(softmax, "--timeout", 6, "--threads", 1, "--no-cache", "--out", out)
    assert r.returncode == 0, r.stderr[-2000:]
    env = dict(os.environ, PERFDOJO_BIN_DIR=str(BIN_DIR))
    # The tolerance is wide: this checks the script's work (compile, run, compare outputs, time),
    # not a speed; benchmarks/ holds the speed claims.
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "retime.py"), str(out),
                           "--reps", "10", "--tolerance", "100", "--json"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rec["agrees"] is True
    assert rec["reps"] == 10
    assert 0 < rec["returned_min_s"] <= rec["returned_median_s"]
    assert 0 < rec["original_min_s"] <= rec["original_median_s"]
    report = json.loads((out / "report.json").read_text())
    assert rec["report_speedup"] == report["speedup"]
    # A returned kernel that computes something else is caught, not timed.
    src = (out / "kernel.c").read_text()
    end = src.rindex("}", 0, src.index("void perfdojo_entry"))  # kernel()'s closing brace
    (out / "kernel.c").write_text(src[:end] + "  d[0] += 1.0f;\n" + src[end:])
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "retime.py"), str(out),
                           "--reps", "10", "--json"], capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 1
    assert "differs" in json.loads(proc.stdout.strip().splitlines()[-1])["error"]


def test_optimize_on_a_cross_target_reports_modelled_times_and_verifies_under_qemu(tmp_path):
    if not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")):
        pytest.skip("no aarch64 cross-compiler or qemu-aarch64 (scripts/bootstrap --cross)")
    src = tmp_path / "softmax.pdj"
    src.write_text(SOFTMAX)
    proc = optimize(src, "--arch", "aarch64_neon", "--timeout", "10", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)["report"]
    assert report["timing"] == "modelled"
    assert report["verified"] is True and report["device_unrun"] is False
    assert report["profile"].startswith("builtin-neoverse-n1")
    if report["trace"]:
        assert "verified under emulation" in report["note"]


def test_evaluate_agent_prints_methods_by_budgets_and_writes_csv_json_and_a_plot(tmp_path, checkpoint):
    out = tmp_path / "eval"
    r = subprocess.run([str(BIN_DIR / "evaluate_agent"), "--checkpoint", str(checkpoint), "--kernels", "softmax",
                        "--budgets", "5,20", "--seeds", "1", "--baselines", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    # The summary: one row per method, one column per budget.
    summary = r.stdout[r.stdout.index("geomean best speed-up over 1 kernels"):].splitlines()
    assert summary[1].split() == ["method", "budget", "5", "budget", "20"]
    rows = {line.split()[0]: line.split()[1:] for line in summary[2:11]}
    assert set(rows) == {"policy", "agent", "agent-rollout", "agent-greedy", "agent-probe", "random", "greedy",
                         "beam", "eager"}
    assert all(len(v) == 2 and all(x.endswith("x") and float(x[:-1]) >= 1.0 for x in v) for v in rows.values())
    assert f"plot: {out}/eval.png" in r.stdout
    assert (out / "eval.png").stat().st_size > 1000
    assert (out / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((out / "eval.json").read_text())
    assert doc["budgets"] == [5, 20] and set(doc["geomean"]) == set(rows)
    assert (out / "eval.csv").read_text().startswith("kernel,method,budget,seed,speedup,evaluations\n")
    # --methods keeps a subset; a method the flags did not choose is refused with the reason.
    sub = subprocess.run([str(BIN_DIR / "evaluate_agent"), "--checkpoint", str(checkpoint), "--kernels", "softmax",
                          "--budgets", "5", "--seeds", "1", "--methods", "agent-probe,agent-greedy", "--out",
                          str(tmp_path / "sub"), "--json"], capture_output=True, text=True, timeout=300)
    assert sub.returncode == 0, sub.stderr[-2000:]
    assert set(json.loads(sub.stdout)["geomean"]) == {"agent-probe", "agent-greedy"}
    # On the deterministic cost model the Q-ordered searches run once per kernel and every seed
    # gets that result; random search draws per seed.
    seeded = subprocess.run([str(BIN_DIR / "evaluate_agent"), "--checkpoint", str(checkpoint), "--kernels", "softmax",
                             "--budgets", "5", "--seeds", "3", "--baselines", "--methods", "agent-greedy,random",
                             "--out", str(tmp_path / "seeded"), "--json"], capture_output=True, text=True, timeout=300)
    assert seeded.returncode == 0, seeded.stderr[-2000:]
    assert "x 3 seeds (4 searches)" in seeded.stderr
    lines = (tmp_path / "seeded" / "eval.csv").read_text().splitlines()[1:]  # kernel,method,budget,seed,...
    greedy_rows = [line.split(",")[4] for line in lines if line.split(",")[:2] == ["softmax", "agent-greedy"]]
    assert len(greedy_rows) == 3 and len(set(greedy_rows)) == 1
    bad = subprocess.run([str(BIN_DIR / "evaluate_agent"), "--checkpoint", str(checkpoint), "--kernels", "softmax",
                          "--methods", "greedy", "--out", str(tmp_path / "bad")], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 2 and "--methods: 'greedy'" in bad.stderr and "--baselines" in bad.stderr
    for value in ("-1", "many"):  # a kind penalty out of range or not a number
        bad = subprocess.run([str(BIN_DIR / "evaluate_agent"), "--checkpoint", str(checkpoint), "--kernels",
                              "softmax", "--kind-penalty", value], capture_output=True, text=True, timeout=300)
        assert bad.returncode == 2 and "--kind-penalty" in bad.stderr, bad.stderr
