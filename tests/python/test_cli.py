"""The `perfdojo` command line: exit codes, diagnostics, JSON output and .npy files.

Runs the built binary (build/bin/perfdojo under the repository root, $PERFDOJO_BIN_DIR/perfdojo
or $PERFDOJO_BIN) on the suite's cheapest kernels and on tiny kernels in a temporary folder.
Exit codes under test: 0 ok, 1 invalid input, 2 usage error.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
# scripts/test exports PERFDOJO_BIN_DIR; PERFDOJO_BIN names the binary itself.
BIN = Path(
    os.environ.get("PERFDOJO_BIN")
    or Path(os.environ.get("PERFDOJO_BIN_DIR") or ROOT / "build" / "bin") / "perfdojo"
)
KERNELS = ROOT / "kernels"

DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32}

TINY = """\
# tiny: y = 2 x + 1 and a row sum
N = 3
input x: f32[2, N] in [0.5, 1]
output y: f32[2, N]
output s: f32[2] = 0

2 N y[{0},{1}] = 2 * x[{0},{1}] + 1
| | s[{0}] += x[{0},{1}]
"""

TINY_CANONICAL = """\
# tiny: y = 2 x + 1 and a row sum
N = 3
input x: f32[2, N] in [0.5, 1]
output y: f32[2, N]
output s: f32[2] = 0

2 N y[{0},{1}] = 2 * x[{0},{1}] + 1
| | s[{0}] += x[{0},{1}]
"""

# Valid but written untidily: fmt must produce TINY_CANONICAL from it.
TINY_UNTIDY = """\
# tiny: y = 2 x + 1 and a row sum
N=3
input x : f32[ 2,N ] in [.5, 1.0]
output y: f32[2, N]
output s: f32[2]=0
2   N y[ {0} , {1} ] = (2 * x[{0},{1}]) + 1   # comment
| |s[{0}]+=x[{0},{1}]
"""

BAD = """\
N = 4
input x: f32[N]
output y: f32[N]

N y[{0}] = z[{0}]
N y[{0}] = x[{0}+1]
"""


def perfdojo(*args, check_rc=None):
    """Runs the CLI; returns the CompletedProcess (text mode)."""
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: build the project first (cmake --build build)")
    proc = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=120)
    if check_rc is not None:
        assert proc.returncode == check_rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def json_out(proc):
    """The single JSON document a --json command prints on stdout."""
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


def declared(path):
    """Sizes and output declarations read straight from a kernel's text: {name: (dtype, shape)}."""
    sizes, outputs = {}, {}
    for line in Path(path).read_text().splitlines():
        code = line.split("#", 1)[0].strip()
        if m := re.fullmatch(r"([A-Za-z_]\w*)\s*=\s*(\d+)", code):
            sizes[m[1]] = int(m[2])
        elif m := re.match(r"output\s+([A-Za-z_]\w*)\s*:\s*(f32|f64|i32)\s*\[([^\]]*)\]", code):
            dims = [d.strip() for d in m[3].split(",")]
            outputs[m[1]] = (m[2], tuple(int(d) if d.isdigit() else sizes[d] for d in dims))
    return outputs


def estimated_work(path):
    """Statement executions the interpreter performs: the sum over statements of the product of
    their enclosing extents. Used to pick the kernels that run fastest."""
    sizes, open_extents, work = {}, [], 0
    for line in Path(path).read_text().splitlines():
        code = line.split("#", 1)[0].strip()
        if not code:
            continue
        if m := re.fullmatch(r"([A-Za-z_]\w*)\s*=\s*(\d+)", code):
            sizes[m[1]] = int(m[2])
            continue
        if re.match(r"(input|output|temp)\s", code):
            continue
        bars = 0
        while code.startswith("|"):
            bars += 1
            code = code[1:].lstrip()
        extents = open_extents[:bars]
        for tok in code.split():
            if "[" in tok:
                break
            name = tok.split(":")[0].split("(")[0]  # "N(..{0}+1):vec": a bounded scope's extent
            extents.append(int(name) if name.isdigit() else sizes[name])
        open_extents = extents
        work += int(np.prod(extents)) if extents else 1
    return work


def suite():
    return sorted(KERNELS.glob("*.pdj"))


def smallest_kernels(count=3):
    return sorted(suite(), key=estimated_work)[:count]


SMALLEST = smallest_kernels()


def sequential_sum(a):
    """The sum in the CLI's order: element by element in C order, in double precision."""
    flat = np.asarray(a, dtype=np.float64).ravel()
    return float(np.cumsum(flat)[-1]) if flat.size else 0.0


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.pdj"
    path.write_text(TINY)
    return path


@pytest.fixture
def bad(tmp_path):
    path = tmp_path / "bad.pdj"
    path.write_text(BAD)
    return path


# --- usage -------------------------------------------------------------------------------------


def test_help_lists_every_command_and_exits_0():
    out = perfdojo("help", check_rc=0).stdout
    for cmd in ("check", "fmt", "kernels", "run"):
        assert re.search(rf"^\s+{cmd}\b", out, re.M), out


def test_no_arguments_prints_usage_and_exits_2():
    proc = perfdojo(check_rc=2)
    assert "usage: perfdojo" in proc.stdout


def test_an_unknown_command_exits_2_and_names_it():
    proc = perfdojo("frobnicate", check_rc=2)
    assert "unknown command 'frobnicate'" in proc.stderr
    assert proc.stdout == ""


def test_an_unknown_command_with_json_reports_the_error_as_json():
    proc = perfdojo("frobnicate", "--json", check_rc=2)
    doc = json_out(proc)
    assert doc["ok"] is False
    assert "frobnicate" in doc["error"]


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--bogus", "FILE"],
        ["run", "FILE", "--sed", "1"],
        ["fmt", "FILE", "--out", "x"],
        ["kernels", "--seed", "1"],
        ["check"],
        ["check", "FILE", "FILE"],
        ["run", "FILE", "--seed"],
        ["run", "FILE", "--seed", "abc"],
        ["run", "FILE", "--seed", "-1"],
        ["run", "FILE", "--seed", " 5"],
        ["run", "FILE", "--out", "--seed"],
        ["guard", "FILE", "--trajectories", "0"],
        ["guard", "FILE", "--steps", "x"],
        ["guard", "FILE", "--target", "vax"],
        ["optimize", "FILE", "--policy-only"],
        ["estimate", "FILE", "--cores", "0"],
        ["estimate", "FILE", "--cores", "2x"],
    ],
)
def test_bad_arguments_are_usage_errors_with_exit_2(tiny, args):
    args = [str(tiny) if a == "FILE" else a for a in args]
    proc = perfdojo(*args, check_rc=2)
    assert proc.stderr.startswith("perfdojo: "), proc.stderr
    assert proc.stdout == ""
    # --json right after the command, so no option can take it as its value.
    json_proc = perfdojo(args[0], "--json", *args[1:], check_rc=2)
    assert json_out(json_proc)["ok"] is False
    assert json_proc.stderr == ""


# --- check -------------------------------------------------------------------------------------


def test_check_accepts_a_valid_kernel_and_counts_its_statements_and_scopes(tiny):
    proc = perfdojo("check", tiny, check_rc=0)
    assert proc.stdout == f"{tiny}: ok (2 statements, 2 scopes)\n"
    assert proc.stderr == ""
    doc = json_out(perfdojo("check", tiny, "--json", check_rc=0))
    assert doc["ok"] is True
    assert doc["file"] == str(tiny)
    assert (doc["statements"], doc["scopes"]) == (2, 2)
    assert isinstance(doc["hash"], int)


def test_check_hash_ignores_formatting_but_not_content(tmp_path, tiny):
    untidy = tmp_path / "untidy.pdj"
    untidy.write_text(TINY_UNTIDY)
    changed = tmp_path / "changed.pdj"
    changed.write_text(TINY.replace("2 * x", "3 * x"))
    h = [json_out(perfdojo("check", p, "--json", check_rc=0))["hash"] for p in (tiny, untidy, changed)]
    assert h[0] == h[1]
    assert h[0] != h[2]


@pytest.mark.parametrize("kernel", SMALLEST, ids=lambda p: p.stem)
def test_check_accepts_the_cheapest_suite_kernels(kernel):
    assert perfdojo("check", kernel, check_rc=0).stdout.startswith(f"{kernel}: ok (")
    assert json_out(perfdojo("check", kernel, "--json", check_rc=0))["ok"] is True


@pytest.mark.parametrize("kernel", SMALLEST, ids=lambda p: p.stem)
def test_check_streamed_and_check_tree_say_the_same(kernel, bad):
    # The default streams the file through the checker; --tree loads the whole tree first, as
    # the optimiser does. Same counts, hash and diagnostics.
    for path in (kernel, bad):
        streamed = perfdojo("check", path, "--json")
        tree = perfdojo("check", path, "--json", "--tree")
        assert streamed.returncode == tree.returncode
        assert json_out(streamed) == json_out(tree)


# Runs a command from a fresh, small Python and prints the command's peak RSS in KiB (wait4): a
# child forked from pytest itself would start with pytest's resident size as its peak.
PEAK_RSS = """
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(p.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def test_check_streams_a_large_kernel_without_holding_it(tmp_path):
    # 200,000 statements (about 8 MB): as a tree they take about 400 MB (check --tree); streamed,
    # the check's peak stays near the process's own size.
    path = tmp_path / "large.pdj"
    with open(path, "w") as f:
        f.write("N = 64\ninput x: f32[N]\noutput y: f32[N]\n\n")
        f.write("N y[{0}] = x[{0}] * 2.5 + exp(-x[{0}])\n" * 200_000)
    out = subprocess.run([sys.executable, "-c", PEAK_RSS, str(BIN), "check", "--json", str(path)],
                         capture_output=True, text=True, check=True).stdout.split()
    rc, peak_kib = int(out[0]), int(out[1])
    assert rc == 0
    assert peak_kib < 100 * 1024, f"peak RSS {peak_kib} KiB"
    assert json_out(perfdojo("check", path, "--json", check_rc=0))["statements"] == 200_000


def test_check_rejects_an_invalid_file_with_every_error_as_file_line_col_on_stderr(bad):
    proc = perfdojo("check", bad, check_rc=1)
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"{bad}:5:12: error: undeclared buffer 'z'",
        f"{bad}:6:12: error: index 0 of 'x[{{0}}+1]' ranges over [1, 4] but the dimension has "
        "extent 4 (valid 0..3)",
    ]


def test_check_json_reports_errors_as_data_on_stdout(bad):
    proc = perfdojo("check", bad, "--json", check_rc=1)
    doc = json_out(proc)
    assert doc["ok"] is False
    assert doc["file"] == str(bad)
    assert [(e["line"], e["col"]) for e in doc["errors"]] == [(5, 12), (6, 12)]
    first = doc["errors"][0]
    assert first["file"] == str(bad)
    assert first["message"] == "undeclared buffer 'z'"
    assert first["text"] == f"{bad}:5:12: error: undeclared buffer 'z'"


def test_check_of_a_missing_file_is_invalid_input_not_a_crash(tmp_path):
    missing = tmp_path / "nope.pdj"
    proc = perfdojo("check", missing, check_rc=1)
    assert proc.stderr == f"{missing}: error: cannot read file\n"


def test_a_syntax_error_message_points_at_the_offending_column(tmp_path):
    path = tmp_path / "syntax.pdj"
    path.write_text("output y: f32[4]\n\n4 y[{0}] = 1 @\n")
    proc = perfdojo("check", path, check_rc=1)
    assert proc.stderr == f"{path}:3:14: error: unexpected '@', expected end of line\n"


# --- fmt ---------------------------------------------------------------------------------------


def test_fmt_rewrites_untidy_text_into_canonical_form(tmp_path):
    untidy = tmp_path / "untidy.pdj"
    untidy.write_text(TINY_UNTIDY)
    proc = perfdojo("fmt", untidy, check_rc=0)
    assert proc.stdout == TINY_CANONICAL
    doc = json_out(perfdojo("fmt", untidy, "--json", check_rc=0))
    assert doc["ok"] is True
    assert doc["text"] == TINY_CANONICAL


@pytest.mark.parametrize("kernel", suite(), ids=lambda p: p.stem)
def test_fmt_output_is_a_fixed_point_for_every_suite_kernel(tmp_path, kernel):
    once = perfdojo("fmt", kernel, check_rc=0).stdout
    path = tmp_path / kernel.name
    path.write_text(once)
    assert perfdojo("fmt", path, check_rc=0).stdout == once
    assert (
        json_out(perfdojo("check", path, "--json", check_rc=0))["hash"]
        == json_out(perfdojo("check", kernel, "--json", check_rc=0))["hash"]
    )


def test_fmt_of_an_invalid_file_exits_1_and_prints_nothing_on_stdout(bad):
    proc = perfdojo("fmt", bad, check_rc=1)
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"{bad}:5:12: error: ")


# --- kernels -----------------------------------------------------------------------------------


def test_kernels_lists_every_suite_file_with_its_description():
    names = [p.stem for p in suite()]
    assert names, "the suite folder is empty"
    lines = perfdojo("kernels", check_rc=0).stdout.splitlines()
    assert [line.split()[0] for line in lines] == names
    doc = json_out(perfdojo("kernels", "--json", check_rc=0))
    assert doc["ok"] is True
    assert [k["name"] for k in doc["kernels"]] == names
    for k, path in zip(doc["kernels"], suite()):
        assert k["valid"] is True, k
        assert k["uri"] == f"perfdojo://suite/{path.stem}"
        first_line = next(line.strip() for line in path.read_text().splitlines() if line.strip())
        assert first_line.startswith("#"), f"{path.name} has no description comment"
        description = first_line[1:]
        description = description[1:] if description.startswith(" ") else description
        assert k["description"] == description.rstrip()


def test_kernels_dir_lists_another_folder_and_flags_invalid_files(tmp_path):
    (tmp_path / "b-tiny.pdj").write_text(TINY)
    (tmp_path / "a-bad.pdj").write_text(BAD)
    (tmp_path / "notes.txt").write_text("not a kernel")
    doc = json_out(perfdojo("kernels", "--dir", tmp_path, "--json", check_rc=0))
    kernels = doc["kernels"]
    assert [k["name"] for k in kernels] == ["a-bad", "b-tiny"]
    assert kernels[0]["valid"] is False
    assert "undeclared buffer 'z'" in kernels[0]["description"]
    assert kernels[1]["valid"] is True
    assert kernels[1]["description"] == "tiny: y = 2 x + 1 and a row sum"


# --- run ---------------------------------------------------------------------------------------


def check_npy_outputs(kernel, out_dir, outputs_json):
    """Every declared output has a .npy with its shape and dtype whose statistics match JSON."""
    decls = declared(kernel)
    assert decls, f"{kernel} declares no outputs"
    assert [o["name"] for o in outputs_json] == list(decls)
    for o in outputs_json:
        dtype, shape = decls[o["name"]]
        assert o["dtype"] == dtype
        assert tuple(o["shape"]) == shape
        arr = np.load(out_dir / f"{o['name']}.npy")
        assert arr.shape == shape
        assert arr.dtype == DTYPES[dtype]
        assert Path(o["file"]) == out_dir / f"{o['name']}.npy"
        assert np.isfinite(arr).all(), o["name"]
        assert o["sum"] == pytest.approx(sequential_sum(arr), rel=1e-12, abs=1e-12)
        assert o["min"] == float(arr.min())
        assert o["max"] == float(arr.max())


@pytest.mark.parametrize("kernel", SMALLEST, ids=lambda p: p.stem)
def test_run_writes_each_output_as_npy_matching_the_json_summary(tmp_path, kernel):
    out = tmp_path / "out"
    doc = json_out(perfdojo("run", kernel, "--seed", "1", "--out", out, "--json", check_rc=0))
    assert doc["ok"] is True
    assert doc["seed"] == 1
    check_npy_outputs(kernel, out, doc["outputs"])
    # The text mode writes the same files and names them.
    text_out = tmp_path / "text"
    proc = perfdojo("run", kernel, "--seed", "1", "--out", text_out, check_rc=0)
    for name in declared(kernel):
        assert f"-> {text_out / (name + '.npy')}" in proc.stdout
        assert (text_out / f"{name}.npy").read_bytes() == (out / f"{name}.npy").read_bytes()


@pytest.mark.parametrize("kernel", SMALLEST[:1], ids=lambda p: p.stem)
def test_run_is_deterministic_per_seed(tmp_path, kernel):
    runs = {}
    for tag, seed in (("a", 1), ("b", 1), ("c", 2)):
        perfdojo("run", kernel, "--seed", seed, "--out", tmp_path / tag, check_rc=0)
        runs[tag] = {p.name: p.read_bytes() for p in sorted((tmp_path / tag).glob("*.npy"))}
    assert runs["a"] and runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]


def test_run_computes_the_tiny_kernel_exactly(tmp_path, tiny):
    out = tmp_path / "out"
    doc = json_out(perfdojo("run", tiny, "--seed", "1", "--out", out, "--json", check_rc=0))
    check_npy_outputs(tiny, out, doc["outputs"])
    y = np.load(out / "y.npy")
    s = np.load(out / "s.npy")
    # x is in [0.5, 1), so y = 2x + 1 lies in [2, 3) and x is recoverable exactly.
    x = (y.astype(np.float64) - 1) / 2
    assert ((y >= 2) & (y < 3)).all()
    expected_s = np.zeros(2, dtype=np.float32)
    for j in range(3):
        expected_s += x[:, j].astype(np.float32)
    np.testing.assert_array_equal(s, expected_s)


def test_run_text_mode_summarises_each_output(tmp_path):
    path = tmp_path / "const.pdj"
    path.write_text("output y: f32[2, 3] = 1\n\n2 3 y[{0},{1}] += 2\n")
    proc = perfdojo("run", path, "--out", tmp_path / "o", check_rc=0)
    assert proc.stdout == f"y: f32[2,3] sum=18 min=3 max=3  -> {tmp_path / 'o' / 'y.npy'}\n"
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "y.npy"), np.full((2, 3), 3, np.float32))


def test_run_without_out_writes_no_files(tmp_path, tiny):
    doc = json_out(perfdojo("run", tiny, "--json", check_rc=0))
    assert all("file" not in o for o in doc["outputs"])
    assert list(tmp_path.glob("*.npy")) == []


def test_run_of_an_invalid_file_exits_1_with_the_location(bad, tmp_path):
    proc = perfdojo("run", bad, "--out", tmp_path / "o", check_rc=1)
    assert proc.stderr.startswith(f"{bad}:5:12: error: undeclared buffer 'z'")
    assert not (tmp_path / "o").exists()
    assert json_out(perfdojo("run", bad, "--json", check_rc=1))["errors"][0]["line"] == 5


# --- guard -------------------------------------------------------------------------------------

# Passes the checker (t is written), but reads t[2] and t[3], which nothing writes.
UNREAD = """\
N = 4
input x: f32[N]
output y: f32[N]
temp t: f32[N]

2 t[{0}] = x[{0}]
N y[{0}] = t[{0}] + x[{0}]
"""

HALO = """\
# a three-point stencil over a halo: NP = N + 2 ties the sizes
N = 4096
NP = 4098
input x: f32[NP]
output y: f32[N]

N y[{0}] = x[{0}] + 2 * x[{0}+1] + x[{0}+2]
"""


def test_estimate_divides_a_parallel_scope_among_the_cores_asked_for(tmp_path):
    # A :par scope over 64 rows of compute-heavy work: on 8 of the profile's cores the estimate
    # falls, and says how many cores it assumed; a program without :par does not change.
    body = "R = 64\nN = 4096\ninput x: f32[R, N]\noutput y: f32[R, N]\n\n{} N y[{{0}},{{1}}] = exp(x[{{0}},{{1}}]) * 3\n"
    times = {}
    for annot in ("R:par", "R"):
        path = tmp_path / f"k{len(times)}.pdj"
        path.write_text(body.format(annot))
        one = json_out(perfdojo("estimate", path, "--cores", "1", "--json", check_rc=0))
        eight = json_out(perfdojo("estimate", path, "--cores", "8", "--json", check_rc=0))
        assert (one["cores"], eight["cores"]) == (1, 8)
        times[annot] = (one["time_s"], eight["time_s"])
    assert times["R:par"][1] < times["R:par"][0] / 2
    assert times["R"][1] == pytest.approx(times["R"][0])


def test_guard_runs_random_legal_trajectories_and_finds_the_kernel_unchanged(tiny):
    doc = json_out(perfdojo("guard", tiny, "--trajectories", "40", "--steps", "12", "--json", check_rc=0))
    assert doc["ok"] is True and doc["scaled"] is False and doc["sizes"] == "N=3"
    assert doc["trajectories"] == 40
    assert doc["actions"] >= 40  # every trajectory takes at least one action on this kernel
    assert sum(doc["kinds"].values()) == doc["actions"]
    assert "failure" not in doc
    text = perfdojo("guard", tiny, "--trajectories", "5", check_rc=0).stdout
    assert "5 trajectories" in text and "every result computes what the original computes" in text


def test_guard_shrinks_a_large_kernel_keeping_sizes_tied_by_its_indices(tmp_path):
    path = tmp_path / "halo.pdj"
    path.write_text(HALO)
    doc = json_out(perfdojo("guard", path, "--trajectories", "10", "--max-work", "1000", "--json", check_rc=0))
    assert doc["scaled"] is True
    sizes = dict(kv.split("=") for kv in doc["sizes"].split())
    n, np_ = int(sizes["N"]), int(sizes["NP"])
    assert np_ == n + 2 and n <= 1000, sizes
    assert doc["ok"] is True


def test_guard_refuses_a_kernel_that_reads_what_it_never_wrote(tmp_path):
    path = tmp_path / "unread.pdj"
    path.write_text(UNREAD)
    doc = json_out(perfdojo("guard", path, "--json", check_rc=1))
    assert doc["ok"] is False
    assert "the original does not run" in doc["error"], doc
    assert ":7:12:" in doc["error"] and "temp 't' element [2]" in doc["error"], doc


# --- sketch ------------------------------------------------------------------------------------


def test_sketch_prints_a_trace_that_apply_replays(tmp_path):
    # Without sizes: the target's first candidate, the tile that takes the 1024 columns whole,
    # row panels outside column panels: the worked trace of docs/microkernel.md.
    out = perfdojo("sketch", KERNELS / "matmul-1024.pdj", check_rc=0).stdout
    assert out.startswith("# micro-kernel sketch at 0: mr=8 nr=32 kc=256 mc=64 lanes=16 rows_outer")
    worked = (ROOT / "tests" / "data" / "traces" / "matmul-microkernel.trace").read_text()
    strip = lambda t: [ln for ln in t.splitlines() if ln and not ln.startswith("#")]  # noqa: E731
    assert strip(out) == strip(worked)
    # With --fit and a tile that does not divide: remainders split off (48 columns: 1008 + 16).
    fitted = perfdojo("sketch", KERNELS / "matmul-1024.pdj", "--mr", "8", "--nr", "48", "--kc", "256",
                      "--mc", "64", "--fit", check_rc=0).stdout
    assert "split_range 0 48" in fitted
    trace = tmp_path / "mk.trace"
    trace.write_text(out)
    applied = perfdojo("apply", KERNELS / "matmul-1024.pdj", "--trace", trace, check_rc=0).stdout
    ir = perfdojo("sketch", KERNELS / "matmul-1024.pdj", "--ir", check_rc=0).stdout
    assert applied == ir
    # With sizes that divide: exactly those, the worked trace of docs/microkernel.md.
    sizes = ["--mr", "8", "--nr", "32", "--kc", "256", "--mc", "64"]
    ir = perfdojo("sketch", KERNELS / "matmul-1024.pdj", *sizes, "--ir", check_rc=0).stdout
    assert "temp B_t0: f32[32, 256, 32]" in ir


def test_sketch_fits_given_sizes_and_transposes_on_request():
    conv = KERNELS / "conv2d-3x3.pdj"
    # Without sizes conv2d's first candidate is transposed: output channels in the vectors, the
    # tile set to y's initial value, y's only access the copy-out.
    ir = perfdojo("sketch", conv, "--ir", check_rc=0).stdout
    assert "y_t0[{4},{5}] = 0" in ir and "16:vec y_t0[" in ir
    # Given sizes that do not divide (56 columns by 48): refused, unless --fit splits them.
    sizes = ["--mr", "8", "--nr", "48", "--kc", "64", "--mc", "64"]
    perfdojo("sketch", conv, *sizes, check_rc=1)
    out = perfdojo("sketch", conv, *sizes, "--fit", check_rc=0).stdout
    assert out.startswith("# micro-kernel sketch at 0: mr=8 nr=48 kc=64 mc=64 lanes=16, fitted to the nest (")  # plain
    assert "split_range" in out
    out = perfdojo("sketch", conv, "--mr", "8", "--nr", "32", "--kc", "64", "--mc", "56", "--transposed",
                   check_rc=0).stdout
    assert "lanes=16 transposed" in out.splitlines()[0]


def test_sketch_json_names_the_nests_and_the_block_sizes_it_would_try():
    doc = json_out(perfdojo("sketch", KERNELS / "bmm.pdj", "--json", "--target", "x86_avx2", check_rc=0))
    assert doc["ok"] is True
    assert doc["nests"] == ["0"]
    assert doc["params"].startswith("mr=6 nr=16")  # 12 of the 16 ymm registers
    assert all("lanes=8" in c for c in doc["candidates"])
    assert doc["candidates"][-1].endswith("lanes=8 transposed")  # plain first on bmm
    assert doc["fitted"] is True  # no sizes given: the first candidate, fitted to the nest
    sizes = ["--mr", "8", "--nr", "32", "--kc", "256", "--mc", "64"]
    exact = json_out(perfdojo("sketch", KERNELS / "matmul-1024.pdj", *sizes, "--json", check_rc=0))
    assert exact["fitted"] is False  # sizes given without --fit: exactly those


def test_sketch_all_takes_every_gemm_nest_and_apply_replays_it(tmp_path):
    # Attention has two GEMM-class nests, Q K^T and P V; the first one's remainder (split off at
    # the top level) must not hide the second from the sketch.
    trace = perfdojo("sketch", KERNELS / "causal-attention.pdj", "--all", check_rc=0).stdout
    ir = perfdojo("sketch", KERNELS / "causal-attention.pdj", "--all", "--ir", check_rc=0).stdout
    # K is read transposed, so it is packed; the P V reduction of 512 is one k block, so V's rows
    # load as vectors where they lie (fitted_kc: no Ko level, nothing to reuse a copy across)
    assert "temp K_t0:" in ir and "temp V_t0:" not in ir, ir
    path = tmp_path / "all.trace"
    path.write_text(trace)
    assert perfdojo("apply", KERNELS / "causal-attention.pdj", "--trace", path, check_rc=0).stdout == ir
    proc = perfdojo("sketch", KERNELS / "softmax.pdj", "--all", check_rc=1)
    assert "no GEMM-class nest took the sketch" in proc.stderr
    perfdojo("sketch", KERNELS / "attention.pdj", "--all", "--path", "0", check_rc=2)


def test_sketch_refuses_what_it_cannot_do_with_a_reason():
    # No GEMM-class nest: invalid input (exit 1), the file named.
    proc = perfdojo("sketch", KERNELS / "softmax.pdj", check_rc=1)
    assert "no GEMM-class nest" in proc.stderr
    # A block size that does not divide: the nest's source location and the size.
    proc = perfdojo("sketch", KERNELS / "matmul-1024.pdj", "--kc", "96", check_rc=1)
    assert re.search(r"matmul-1024\.pdj:\d+:\d+: error: .*kc must divide", proc.stderr)
    # A bad option value is a usage error.
    perfdojo("sketch", KERNELS / "matmul-1024.pdj", "--mr", "eight", check_rc=2)
    perfdojo("sketch", KERNELS / "matmul-1024.pdj", "--path", "0.x", check_rc=2)


# --- measure and calibrate ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """A quick calibration of this machine (the figures are rough; only their source matters)."""
    path = tmp_path_factory.mktemp("profile") / "machine.profile"
    perfdojo("calibrate", "--rounds", "1", "--seconds", "0.01", "--out", path, check_rc=0)
    return path


def test_calibrate_records_the_isa_and_keeps_a_better_profile_unless_forced(tmp_path, profile):
    text = profile.read_text()
    isa = re.search(r"^isa = (\S+)$", text, re.M)[1]
    assert isa in ("x86_avx512", "x86_avx2", "x86_64")
    # A profile there that is far better than any machine: the new calibration is refused...
    better = tmp_path / "better.profile"
    better.write_text(re.sub(r"^(peak_gflops_avx\S+) = .*$", r"\1 = 100000", text, flags=re.M))
    before = better.read_text()
    proc = perfdojo("calibrate", "--rounds", "1", "--seconds", "0.01", "--out", better, "--json",
                    check_rc=1)
    doc = json_out(proc)
    assert doc["ok"] is False and doc["written"] is False
    assert "peak_gflops_avx" in doc["regression"] and "--force" in doc["error"]
    assert better.read_text() == before
    # ...unless forced.
    perfdojo("calibrate", "--rounds", "1", "--seconds", "0.01", "--out", better, "--force",
             check_rc=0)
    assert "100000" not in better.read_text()
    perfdojo("calibrate", "--rounds", "0", check_rc=2)


def test_measure_verifies_a_large_program_on_a_scaled_down_instance_and_uses_the_profile_peak(
        monkeypatch, profile):
    monkeypatch.setenv("PERFDOJO_MACHINE_PROFILE", str(profile))
    # matmul-256 is past the interpreter's full-size limit and has no annotations to compare.
    doc = json_out(perfdojo("measure", KERNELS / "matmul-256.pdj", "--no-cache", "--json",
                            check_rc=0))
    assert doc["verified"] is True
    assert doc["verified_on"] == "scaled-down instance"
    assert doc["isa"] in ("x86_avx512", "x86_avx2", "x86_64")
    assert doc["cores"] == 1
    assert str(profile) in doc["peak_from"]
    peaks = dict(re.findall(r"^(peak_gflops_\w+) = (\S+)", profile.read_text(), re.M))
    key = {"x86_avx512": "peak_gflops_avx512"}.get(doc["backend"], "peak_gflops_avx2")
    assert doc["peak_gflops"] == pytest.approx(float(peaks[key]))
    assert doc["fraction_of_peak"] == pytest.approx(doc["gflops"] / doc["peak_gflops"])


# --- the cross targets and cuda (docs/cross.md, docs/cuda.md) ----------------------------------


def test_measure_on_a_cross_target_verifies_a_large_program_under_qemu_on_a_scaled_down_instance():
    if not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")):
        pytest.skip("no aarch64 cross-compiler or qemu-aarch64 (scripts/bootstrap --cross)")
    doc = json_out(perfdojo("measure", KERNELS / "matmul-1024.pdj", "--backend", "aarch64_neon",
                            "--json", check_rc=0))
    assert doc["verified"] is True
    assert doc["verified_on"] == "scaled-down instance"
    assert "qemu-aarch64" in doc["flags"] and "builtin-neoverse-n1" in doc["flags"]


def test_measure_on_cuda_without_a_gpu_says_it_compiled_but_could_not_run():
    if not (shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists()):
        pytest.skip("no nvcc (the CUDA toolkit)")
    proc = perfdojo("measure", KERNELS / "softmax.pdj", "--backend", "cuda", check_rc=0)
    out = proc.stdout + proc.stderr
    if "not run: CUDA error" in out:  # no GPU here
        assert "NOT verified: compiled, but this machine has no device to run it" in out
    else:
        assert "verified on the full size" in out, out


# --- measure-worker (a measurement farm's worker, docs/ray.md) --------------------------------


def test_measure_worker_answers_bad_requests_with_errors_and_goes_on():
    small = "input x: f32[16]\noutput y: f32[16]\n\n16 y[{0}] = x[{0}] * 2\n"
    lines = ["not json", json.dumps({"op": "measure"}), "x" * ((64 << 20) + 5),
             json.dumps({"id": 3, "op": "fly", "backend": "cost_model", "programs": [small]}),
             json.dumps({"id": 4, "op": "measure", "backend": "cost_model", "programs": ["N y[{0}] ="]}),
             json.dumps({"id": 7, "op": "measure", "backend": "cost_model", "hashes": ["0"],
                         "programs": [small], "options": {"verify": False}})]
    proc = subprocess.run([str(BIN), "measure-worker", "--no-cache"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert replies[0]["ready"] is True and replies[0]["isa"]
    bad, good = replies[1:-1], replies[-1]
    assert [r["ok"] for r in bad] == [False] * 5
    assert "not JSON" in bad[0]["error"] and "integer 'id'" in bad[1]["error"]
    assert "longer than 64 MiB" in bad[2]["error"]  # read to its end and dropped, not kept
    assert bad[3]["id"] == 3 and "'op'" in bad[3]["error"]
    assert bad[4]["id"] == 4 and "program 0" in bad[4]["error"]
    assert good["id"] == 7 and good["ok"] is True and good["results"][0]["median_s"] > 0
