"""The binary hot path, the vector env, a shared server for worker processes, and what a new
Gymnasium user tries first (gym.make kwargs, render_mode="ansi", finite bounds, clear errors)."""

import os
import struct
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import perfdojo_gym
from perfdojo_gym import (BridgeError, Client, InvalidActionError, PerfDojoEnv, PerfDojoVectorEnv,
                          SharedServer, require_spaces)
from perfdojo_gym import binary

ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("PERFDOJO_BIN_DIR", ROOT / "build" / "bin"))
BENCH = "perfdojo://gen/softmax?seed=1"


@pytest.fixture(autouse=True)
def _bin_dir(monkeypatch):
    if not (BIN_DIR / "perfdojo").exists():
        pytest.fail(f"{BIN_DIR / 'perfdojo'} is missing: build the project first (scripts/bootstrap)")
    monkeypatch.setenv("PERFDOJO_BIN_DIR", str(BIN_DIR))
    monkeypatch.delenv("PERFDOJO_BRIDGE_ADDRESS", raising=False)
    monkeypatch.delenv("PERFDOJO_BRIDGE_TOKEN", raising=False)


@pytest.fixture(scope="module")
def shared():
    with SharedServer() as s:
        yield s


def legal_actions(mask, rng):
    legal = np.flatnonzero(mask[:-1])
    return int(rng.choice(legal)) if len(legal) else len(mask) - 1


# ---------------------------------------------------------------- the vector env


def test_the_vector_env_gives_what_json_envs_give_for_the_same_seeds_and_actions(shared):
    n = 3
    vec = PerfDojoVectorEnv(n, BENCH, observation_spaces=["features", "tokens"], max_episode_steps=6,
                            seed=10)
    singles = [PerfDojoEnv(BENCH, observation_spaces=["features", "tokens"], max_episode_steps=6,
                           seed=10 + i) for i in range(n)]
    obs, info = vec.reset(seed=5)
    assert obs in vec.observation_space
    rng = np.random.default_rng(0)
    for i, e in enumerate(singles):
        o, inf = e.reset(seed=5 + i)
        np.testing.assert_array_equal(obs["features"][i], o["features"])
        np.testing.assert_array_equal(obs["tokens"][i], o["tokens"])
        np.testing.assert_array_equal(info["action_mask"][i], inf["action_mask"])
    ended = np.zeros(n, bool)
    for _ in range(6):
        actions = np.array([legal_actions(info["action_mask"][i], rng) for i in range(n)])
        obs, rew, term, trunc, info = vec.step(actions)
        for i, e in enumerate(singles):
            o, r, te, tr, inf = e.step(int(actions[i]))
            np.testing.assert_array_equal(obs["features"][i], o["features"])
            assert rew[i] == r and term[i] == te and trunc[i] == tr
            np.testing.assert_array_equal(info["action_mask"][i], inf["action_mask"])
            assert info["time_s"][i] == inf["time_s"] and info["best_time_s"][i] == inf["best_time_s"]
            assert info["illegal_action"][i] == inf["illegal_action"]
            ended[i] |= te or tr
        assert all(info["_" + k].all() for k in ("time_s", "action_mask"))
    assert ended.all()  # max_episode_steps=6 truncated every env
    vec.close()
    for e in singles:
        e.close()


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_autoreset_modes(shared, mode):
    vec = PerfDojoVectorEnv(2, BENCH, max_episode_steps=2, autoreset_mode=mode, stop_after_progress=False)
    obs, info = vec.reset(seed=0)
    first = obs.copy()
    stop = vec.single_action_space.n - 1
    obs, rew, term, trunc, info = vec.step([stop, 0 if info["action_mask"][1][0] else stop])
    assert term[0]
    if mode == "same_step":
        # Reset within the step: the observation is the new episode's, the last one in final_obs.
        np.testing.assert_array_equal(obs[0], first[0])
        assert info["_final_obs"][0] and "final_obs" in info
        assert info["step"][0] == 0
    else:
        obs, rew, term, trunc, info = vec.step([0, 0])
        assert rew[0] == 0 and not term[0] and info["step"][0] == 0  # the action was ignored
        np.testing.assert_array_equal(obs[0], first[0])
    vec.close()


def test_the_vector_env_refuses_what_it_cannot_carry(shared):
    with pytest.raises(ValueError, match="numeric observations only"):
        PerfDojoVectorEnv(2, BENCH, observation_spaces=["features", "ir_text"])
    vec = PerfDojoVectorEnv(2, BENCH)
    vec.reset(seed=0)
    with pytest.raises(InvalidActionError, match="out of range"):
        vec.step([0, vec.single_action_space.n])
    with pytest.raises(ValueError, match="2 envs"):
        vec.step([0])
    vec.close()


def test_make_vec_builds_the_vector_env(shared):
    vec = gym.make_vec("PerfDojo-v0", num_envs=2, vectorization_mode="vector_entry_point", benchmark=BENCH)
    assert isinstance(vec.unwrapped, PerfDojoVectorEnv)
    obs, info = vec.reset(seed=0)
    assert obs.shape == (2, 1262)
    vec.close()


# ---------------------------------------------------------------- binary frames on the wire


def test_malformed_binary_frames_get_json_errors_and_the_connection_stays(shared):
    c = Client(*perfdojo_gym.client.parse_address(shared.address), token=shared.server.token)
    made = c.request("make", config={"benchmark": BENCH})
    s, n_actions = made["session"], made["spaces"]["action_space"]["n"]
    with pytest.raises(BridgeError) as e:
        c.request_binary(struct.pack("<BBHI", 0xB5, 1, 1, 7) + b"\0" * 5)
    assert e.value.type == "bad_request" and "1 entries make 28 bytes, the frame has 13" in e.value.message
    with pytest.raises(BridgeError, match="version 2"):
        c.request_binary(struct.pack("<BBHI", 0xB5, 2, 1, 7) + b"\0" * 20)
    # Unknown sessions fail their own record only.
    body = c.request_binary(binary.encode(9, [(s, 3, binary.RESET_SEED), (s + 999, 0, binary.STEP)]))
    rid, batch = binary.decode_batch(body, n_actions, 1262 * 4)
    assert rid == 9 and batch.ok[0] and not batch.ok[1]
    assert batch.message[1].startswith("unknown_session: no session")
    assert c.request("ping") == {}
    c.close()


def _record(status, terminated, truncated, flags, step, reals, obs, mask_bytes, message=b""):
    return (struct.pack("<BBBBIddddI", status, terminated, truncated, flags, step, *reals, len(obs)) + obs
            + struct.pack("<I", len(mask_bytes)) + mask_bytes + struct.pack("<I", len(message)) + message)


@pytest.mark.parametrize("failed", [False, True])
def test_decode_batch_reads_every_field_whatever_the_records(failed):
    # Records of one size take the one-view path; a failed entry (no observation, a message)
    # takes the record-by-record path. Both must give the same fields.
    rng = np.random.default_rng(3)
    n, obs_bytes, count = 19, 12, 5
    want, records = [], []
    for i in range(count):
        fail = failed and i == 2
        mask = rng.integers(0, 2, n).astype(np.int8)
        obs = rng.integers(0, 256, obs_bytes, dtype=np.uint8)
        head = (0 if not fail else 4, int(rng.integers(0, 2)), int(rng.integers(0, 2)), int(rng.integers(0, 4)))
        reals = tuple(rng.random(4))
        records.append(_record(*head, 100 + i, reals, b"" if fail else obs.tobytes(),
                               b"" if fail else np.packbits(mask).tobytes(),
                               b"illegal_action: no" if fail else b""))
        want.append((head, reals, None if fail else obs, None if fail else mask))
    body = struct.pack("<BBHI", 0xB5, 1, count, 77) + b"".join(records)
    rid, batch = binary.decode_batch(body, n, obs_bytes)
    assert rid == 77
    for i, (head, reals, obs, mask) in enumerate(want):
        assert batch.ok[i] == (head[0] == 0)
        assert (batch.terminated[i], batch.truncated[i]) == (head[1] != 0, head[2] != 0)
        assert (batch.illegal_action[i], batch.action_had_no_effect[i]) == (bool(head[3] & 1), bool(head[3] & 2))
        assert batch.step[i] == 100 + i and batch.step.dtype == np.int32
        assert (batch.reward[i], batch.time_s[i], batch.initial_time_s[i], batch.best_time_s[i]) == reals
        if obs is None:
            assert batch.message[i] == "illegal_action: no" and not batch.observation[i].any()
        else:
            assert batch.message[i] == ""
            np.testing.assert_array_equal(batch.observation[i], obs)
            np.testing.assert_array_equal(batch.mask[i], mask)
    assert batch.mask.dtype == np.int8 and batch.mask.shape == (count, n)
    assert batch.observation.shape == (count, obs_bytes)
    # Contiguous numeric arrays: torch.as_tensor refuses strides that are not a multiple of the
    # element size (a record's size need not be).
    for name in ("observation", "mask", "step", "reward", "time_s", "best_time_s"):
        assert getattr(batch, name).flags.c_contiguous, name
    batch.observation[0, 0] ^= 1  # the arrays are the caller's to change
    with pytest.raises(ValueError, match="bytes after the last record"):
        binary.decode_batch(body + b"\0", n, obs_bytes)


# ---------------------------------------------------------------- a shared server


def test_worker_processes_share_one_server(shared):
    make = lambda: PerfDojoEnv(BENCH)  # noqa: E731
    vec = gym.vector.AsyncVectorEnv([make, make], context="fork")
    vec.reset(seed=0)
    vec.step(np.array([vec.single_action_space.n - 1] * 2))
    vec.close()
    log = shared.server.stderr_text()
    assert log.count("event=session_start") >= 2, log


# ---------------------------------------------------------------- what a new user tries


def test_gym_make_kwargs_reach_the_env(shared):
    # max_episode_steps goes to Gymnasium's TimeLimit, which alone truncates: 40 > the C++ default 30.
    env = gym.make("PerfDojo-v0", benchmark=BENCH, max_episode_steps=40, sketch_actions=1)
    obs, info = env.reset(seed=0)
    assert env.action_space.n == env.unwrapped._spaces_json["action_space"]["n"]
    rng = np.random.default_rng(1)
    steps, term, trunc = 0, False, False
    while not (term or trunc):
        mask = info["action_mask"].copy()
        mask[-1] = 0  # never stop
        if not mask.any():
            mask[0] = 1
        obs, r, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        steps += 1
    assert steps == 40 and trunc and not term
    env.close()
    with pytest.raises(ValueError, match="config_error"):
        gym.make("PerfDojo-v0", benchmark=BENCH, sketch_actions=99).reset(seed=0)


def test_render_ansi_prints_the_program(shared):
    env = gym.make("PerfDojo-v0", benchmark=BENCH, render_mode="ansi")
    env.reset(seed=0)
    text = env.render()
    assert "input" in text and "output" in text
    with pytest.raises(ValueError, match="render_mode 'human'"):
        PerfDojoEnv(BENCH, render_mode="human")
    env.close()


def test_feature_bounds_are_finite_and_hold(shared):
    env = PerfDojoEnv(BENCH)
    space = env.observation_space
    assert np.isfinite(space.low).all() and np.isfinite(space.high).all()
    from gymnasium.utils.env_checker import check_env
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "infinite bounds" warning any more
        warnings.filterwarnings("ignore", message=".*render.*")
        check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    rng = np.random.default_rng(2)
    for _ in range(20):
        obs, *_rest, info = env.step(legal_actions(info["action_mask"], rng))
        assert obs in space
    env.close()


def test_require_spaces_says_what_a_framework_cannot_take():
    require_spaces(PerfDojoEnv(BENCH), "sb3")
    with pytest.raises(ValueError, match=r"stable-baselines3 cannot take .*'graph'.*Graph space"):
        require_spaces(PerfDojoEnv(BENCH, observation_spaces=["features", "graph"]), "sb3")
    with pytest.raises(ValueError, match="'ir_text'"):
        require_spaces({"observation_spaces": "ir_text"}, "rllib")
    with pytest.raises(ValueError, match="unknown framework"):
        require_spaces(PerfDojoEnv(BENCH), "keras")


def test_the_default_reward_never_punishes_exploring(shared):
    env = PerfDojoEnv(BENCH, max_episode_steps=25)
    obs, info = env.reset(seed=0)
    rng = np.random.default_rng(3)
    total, best = 0.0, info["time_s"]
    for _ in range(25):
        obs, r, term, trunc, info = env.step(legal_actions(info["action_mask"], rng))
        assert r >= 0
        total += r
        best = min(best, info["time_s"])
        if term or trunc:
            break
    assert total == pytest.approx(np.log(info["initial_time_s"] / best))
    env.close()


def test_hand_offs_without_polling_give_the_same_steps():
    # --no-inline and --poll-us 0 (the old path: every step handed to a worker) must not change
    # what a step returns, only when.
    fast = PerfDojoVectorEnv(2, BENCH, max_episode_steps=6)
    plain = PerfDojoVectorEnv(2, BENCH, max_episode_steps=6, server_args=("--no-inline", "--poll-us", "0"))
    o1, i1 = fast.reset(seed=3)
    o2, i2 = plain.reset(seed=3)
    np.testing.assert_array_equal(o1, o2)
    rng = np.random.default_rng(4)
    for _ in range(6):
        a = [legal_actions(i1["action_mask"][k], rng) for k in range(2)]
        s1, s2 = fast.step(a), plain.step(a)
        np.testing.assert_array_equal(s1[0], s2[0])
        np.testing.assert_array_equal(s1[1], s2[1])
        np.testing.assert_array_equal(s1[4]["action_mask"], s2[4]["action_mask"])
        i1 = s1[4]
    fast.close()
    plain.close()
