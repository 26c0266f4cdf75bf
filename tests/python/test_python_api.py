"""The in-process Python package `perfdojo` (docs/python.md): the paper's two lines, the IR as
objects, and Gymnasium envs that match the bridge's step for step."""

import os
import signal
import threading
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import perfdojo
from perfdojo import IllegalActionError, InProcessEnv, InProcessVectorEnv, IRError, Program
from perfdojo_gym import PerfDojoEnv

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "kernels"
BENCH = "perfdojo://gen/softmax?seed=1"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    bin_dir = Path(os.environ.get("PERFDOJO_BIN_DIR", ROOT / "build" / "bin"))
    monkeypatch.setenv("PERFDOJO_BIN_DIR", str(bin_dir))
    monkeypatch.delenv("PERFDOJO_BRIDGE_ADDRESS", raising=False)


# ---------------------------------------------------------------- the paper's two lines


def test_the_papers_two_lines_run_as_written():
    from perfdojo import PerfDojo
    original_ir = (KERNELS / "rowsum.pdj").read_text()
    optimizer = PerfDojo(arch=perfdojo.this_isa(), mode='aggressive')   # or balanced / conservative
    optimized_kernel = optimizer.transform(original_ir, timeout=8)   # seconds
    r = optimized_kernel.report
    assert optimized_kernel.verified and r["arch"] == perfdojo.this_isa() and r["mode"] == "aggressive"
    assert r["speedup"] >= 1.0 and r["baseline_s"] > 0 and r["final_s"] > 0
    assert 0 < r["peak_fraction"] < 1.5 and r["budget_s"] == 8
    # The returned kernel is a checked program computing what the original computes.
    original = perfdojo.parse(original_ir)
    a, b = original.interpret(seed=3), optimized_kernel.program.interpret(seed=3)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=2e-4, atol=1e-5)
    assert "kernel" in optimized_kernel.c_source and "kernel" in optimized_kernel.c_header
    replayed = original
    for action in optimized_kernel.trace:
        replayed = replayed.apply(action)
    assert replayed == optimized_kernel.program


def test_ctrl_c_returns_the_best_kernel_so_far():
    optimizer = perfdojo.PerfDojo(arch=perfdojo.this_isa(), mode="balanced")
    # Ctrl-C as an interactive Python gets it. A process started in the background by a shell
    # without job control inherits SIGINT ignored, and Python then leaves it ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(3.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        result = optimizer.transform(KERNELS / "matmul-256.pdj", timeout=60, progress=False)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    took = time.monotonic() - start
    assert took < 40, took
    assert result.report["interrupted"] and "Ctrl-C" in result.report["note"]
    assert result.verified  # the original at worst, verified


def test_bad_arguments_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="unknown mode"):
        perfdojo.PerfDojo(arch=perfdojo.this_isa(), mode="fast")
    with pytest.raises(ValueError, match="cache_flush must be auto, on or off"):
        perfdojo.PerfDojo(arch=perfdojo.this_isa(), cache_flush="sometimes")
    with pytest.raises(ValueError, match="timeout"):
        perfdojo.PerfDojo(arch=perfdojo.this_isa()).transform(KERNELS / "rowsum.pdj", timeout=0)
    with pytest.raises(TypeError, match="IR text, a path"):
        perfdojo.load(42)


# ---------------------------------------------------------------- the IR as objects


def test_parse_print_check_interpret_apply():
    text = (KERNELS / "softmax.pdj").read_text()
    p = perfdojo.parse(text, "softmax.pdj")
    assert perfdojo.parse(p.text) == p and p.check() == []
    assert [b["role"] for b in p.buffers][:2] == ["input", "output"]
    out = p.interpret(seed=0)
    assert set(out) == {"d"} and out["d"].dtype == np.float32
    np.testing.assert_allclose(out["d"].sum(axis=1), 1.0, rtol=1e-5)
    s = np.random.default_rng(0).standard_normal((256, 1024))
    mine = p.interpret({"s": s})["d"]
    ref = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(mine, ref / ref.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-7)
    legal = p.legal_actions()
    assert legal and all(isinstance(a, str) for a in legal)
    q = p.apply(legal[0])
    assert q != p
    np.testing.assert_allclose(q.interpret(seed=0)["d"], out["d"], rtol=1e-5, atol=1e-7)
    with pytest.raises(IllegalActionError) as e:
        p.apply("vectorize 7.7.7 0")
    assert e.value.reason == "no_such_location"
    with pytest.raises(ValueError, match="dimension 1 is 3"):
        p.interpret({"s": np.zeros((256, 3))})


def test_ir_errors_carry_file_line_and_column():
    with pytest.raises(IRError) as e:
        perfdojo.parse("N = 4\ninput x: f32[N]\noutput y: f32[N]\n\nN y[{0}] = z[{0}]\n", "bad.pdj")
    d = e.value.diagnostics[0]
    assert d.file == "bad.pdj" and d.line == 5 and d.col > 1 and "z" in d.message
    assert str(d).startswith(f"bad.pdj:5:{d.col}: error: ")
    with pytest.raises(IRError):
        perfdojo.load("perfdojo://suite/no-such-kernel")


# ---------------------------------------------------------------- the in-process envs


@pytest.mark.parametrize("kwargs", [
    {"observation_spaces": ["features"]},
    {"observation_spaces": ["features", "tokens", "ir_text", "graph"]},
    {"observation_spaces": ["features"], "dict_observation": True},
])
def test_check_env_passes_in_process(kwargs):
    from gymnasium.utils.env_checker import check_env
    env = gym.make("PerfDojoInProcess-v0", benchmark=BENCH, max_episode_steps=10, **kwargs)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*infinity.*")  # the graph space's node features
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("config", [
    {"benchmark": "perfdojo://suite/softmax", "observation_spaces": ["features", "tokens", "ir_text", "graph"]},
    {"benchmark": "perfdojo://gen/matmul?seed=2", "observation_spaces": ["features"],
     "reward_space": "log_speedup_step", "stop_after_progress": False},
    {"benchmark": "perfdojo://suite/layernorm", "observation_spaces": ["features"], "action_space": "cursor"},
])
def test_in_process_and_bridge_envs_agree_step_for_step(config):
    cfg = dict(config)
    bench = cfg.pop("benchmark")
    mine, theirs = InProcessEnv(bench, max_episode_steps=14, **cfg), PerfDojoEnv(bench, max_episode_steps=14, **cfg)
    assert mine.observation_space == theirs.observation_space and mine.action_space == theirs.action_space
    rng = np.random.default_rng(5)

    def same(a, b):
        if isinstance(a, dict):
            assert set(a) == set(b)
            for k in a:
                same(a[k], b[k])
        elif isinstance(a, gym.spaces.GraphInstance):
            np.testing.assert_array_equal(a.nodes, b.nodes)
            np.testing.assert_array_equal(a.edges, b.edges)
            np.testing.assert_array_equal(a.edge_links, b.edge_links)
        elif isinstance(a, np.ndarray):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b

    o1, i1 = mine.reset(seed=4)
    o2, i2 = theirs.reset(seed=4)
    same(o1, o2)
    same(i1, i2)
    for _ in range(14):
        legal = np.flatnonzero(i1["action_mask"])
        a = int(rng.choice(legal))
        s1, s2 = mine.step(a), theirs.step(a)
        same(s1[0], s2[0])
        assert s1[1:4] == s2[1:4]
        same(s1[4], s2[4])
        i1 = s1[4]
        if s1[2] or s1[3]:
            break
    theirs.close()


def test_the_in_process_vector_env_matches_single_envs():
    vec = InProcessVectorEnv(3, BENCH, max_episode_steps=5, seed=7)
    singles = [InProcessEnv(BENCH, max_episode_steps=5, seed=7 + i) for i in range(3)]
    obs, info = vec.reset(seed=2)
    for i, e in enumerate(singles):
        o, inf = e.reset(seed=2 + i)
        np.testing.assert_array_equal(obs[i], o)
        np.testing.assert_array_equal(info["action_mask"][i], inf["action_mask"])
    rng = np.random.default_rng(1)
    for _ in range(5):
        actions = np.array([int(rng.choice(np.flatnonzero(info["action_mask"][i][:-1]))) for i in range(3)])
        obs, rew, term, trunc, info = vec.step(actions)
        for i, e in enumerate(singles):
            o, r, te, tr, inf = e.step(int(actions[i]))
            np.testing.assert_array_equal(obs[i], o)
            assert rew[i] == r and term[i] == te and trunc[i] == tr
            np.testing.assert_array_equal(info["action_mask"][i], inf["action_mask"])
    with pytest.raises(ValueError, match="out of range"):
        vec.step([0, 0, vec.single_action_space.n])
    vec2 = gym.make_vec("PerfDojoInProcess-v0", num_envs=2, vectorization_mode="vector_entry_point", benchmark=BENCH)
    assert vec2.reset(seed=0)[0].shape == (2, 1262)
    with pytest.raises(ValueError, match="numeric observations only"):
        InProcessVectorEnv(2, BENCH, observation_spaces=["ir_text"])


def test_in_process_env_render_fork_and_errors():
    env = InProcessEnv(BENCH, render_mode="ansi")
    env.reset(seed=0)
    assert "output" in env.render()
    twin = env.fork()
    a = int(np.flatnonzero(env.action_masks()[:-1])[0])
    env.step(a)
    assert twin.save_state()["trace"] == [] and len(env.save_state()["trace"]) == 1
    with pytest.raises(ValueError, match="invalid_action"):
        env.step(10 ** 6)
    with pytest.raises(ValueError, match="config_error"):
        InProcessEnv(BENCH, reward_space="nope").reset()


def test_the_optimiser_on_a_cross_target_says_its_times_are_modelled():
    import shutil
    if not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")):
        pytest.skip("no aarch64 cross-compiler or qemu-aarch64 (scripts/bootstrap --cross)")
    result = perfdojo.PerfDojo(arch="aarch64_neon").transform(KERNELS / "rowsum.pdj", timeout=5,
                                                             progress=False)
    assert result.report["timing"] == "modelled"
    assert result.report["device_unrun"] is False
    assert result.report["verified_on"].startswith("scaled-down instance")
