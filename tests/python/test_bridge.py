"""The Gym socket bridge: `perfdojo serve` driven through perfdojo_gym and through raw sockets.

Checks that the Gymnasium contract holds (check_env), that an episode over the bridge gives
exactly what the C++ env gives directly (`perfdojo episode`, the reference), that masks agree,
that every kind of bad input gets a typed error or a closed connection without harming other
clients, and that 32 concurrent clients get correct results. Every server binds 127.0.0.1 and
every loop is bounded.
"""

import base64
import json
import os
import pickle
import random
import socket
import struct
import subprocess
import threading
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import perfdojo_gym
from perfdojo_gym import BridgeError, Client, InvalidActionError, PerfDojoEnv, decode_mask
from perfdojo_gym.client import LocalServer

ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("PERFDOJO_BIN_DIR", ROOT / "build" / "bin"))
BIN = BIN_DIR / "perfdojo"
HOST = "127.0.0.1"

ALL_SPACES = ["features", "tokens", "ir_text", "graph"]


def require_binary():
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: build the project first (scripts/bootstrap)")


@pytest.fixture(autouse=True)
def _bin_dir(monkeypatch):
    require_binary()
    monkeypatch.setenv("PERFDOJO_BIN_DIR", str(BIN_DIR))
    monkeypatch.delenv("PERFDOJO_BRIDGE_ADDRESS", raising=False)
    monkeypatch.delenv("PERFDOJO_BRIDGE_TOKEN", raising=False)


class Server:
    """`perfdojo serve` on 127.0.0.1 with a free port, stopped through its stdin."""

    def __init__(self, *args):
        self.proc = subprocess.Popen(
            [str(BIN), "serve", "--host", HOST, "--port", "0", "--json", "--stdin-watch", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = self.proc.stdout.readline()
        info = json.loads(line)
        assert info["host"] == HOST
        self.port = info["port"]
        self.address = f"{HOST}:{self.port}"

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture(scope="module")
def server():
    require_binary()
    s = Server("--max-frame-bytes", "65536", "--max-sessions", "256")
    yield s
    assert s.alive(), "the server died during the tests"
    s.stop()


@pytest.fixture(scope="module")
def strict_server():
    """Short timeouts, for the slow-client tests."""
    require_binary()
    s = Server("--idle-timeout", "1", "--frame-timeout", "1")
    yield s
    assert s.alive()
    s.stop()


class Raw:
    """A raw socket speaking frames, for sending what no well-behaved client would."""

    def __init__(self, port, hello=True):
        self.sock = socket.create_connection((HOST, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.next_id = 1
        if hello:
            r = self.call({"op": "hello", "version": 1})
            assert r["ok"], r

    def send_bytes(self, data):
        try:
            self.sock.sendall(data)
        except OSError:
            pass  # the server may already have closed; the reply check says what happened

    def send(self, obj):
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_bytes(struct.pack(">I", len(body)) + body)

    def recv(self, timeout=10):
        """The next reply as a dict, or None when the server closed the connection."""
        self.sock.settimeout(timeout)
        try:
            header = self._exact(4)
            if header is None:
                return None
            body = self._exact(struct.unpack(">I", header)[0])
            return None if body is None else json.loads(body)
        except ConnectionResetError:
            return None

    def _exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def call(self, obj):
        if isinstance(obj, dict) and "id" not in obj:
            obj = {"id": self.next_id, **obj}
            self.next_id += 1
        self.send(obj)
        return self.recv()

    def closed_by_server(self, timeout=10):
        """True when the server closes the connection within `timeout` (replies are skipped)."""
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                if not self.sock.recv(65536):
                    return True
            except socket.timeout:
                continue
            except ConnectionResetError:
                return True
        return False

    def close(self):
        self.sock.close()


def error_type(reply):
    assert reply is not None, "no reply: the connection was closed"
    return None if reply["ok"] else reply["error"]["type"]


def reference_episode(config, seed, actions):
    """What the C++ env gives directly (the bridge's encoding, from `perfdojo episode`)."""
    proc = subprocess.run(
        [str(BIN), "episode", "--config", json.dumps(config), "--seed", str(seed),
         "--actions", ",".join(map(str, actions)), "--json"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_obs_equal(obs, ref_obs, spaces_json):
    """`obs` (decoded by PerfDojoEnv) against the reference JSON observation."""
    names = [s["name"] for s in spaces_json["observation_spaces"]]
    if len(names) == 1:
        obs = {names[0]: obs}
    for name in names:
        got, want = obs[name], ref_obs[name]
        if name == "features":
            np.testing.assert_array_equal(got, np.asarray(want, dtype=np.float32))
            assert got.dtype == np.float32
        elif name == "tokens":
            np.testing.assert_array_equal(got, np.asarray(want, dtype=np.int32))
        elif name == "ir_text":
            assert got == want
        elif name == "graph":
            np.testing.assert_array_equal(got.nodes.ravel(), np.asarray(want["node_features"], np.float32))
            np.testing.assert_array_equal(got.edges, want["edge_type"])
            np.testing.assert_array_equal(got.edge_links[:, 0], want["edge_src"])
            np.testing.assert_array_equal(got.edge_links[:, 1], want["edge_dst"])


# ---------------------------------------------------------------- the Gymnasium contract


@pytest.mark.parametrize("kwargs", [
    {"observation_spaces": ["features"]},
    {"observation_spaces": ALL_SPACES},
    {"observation_spaces": ["features", "tokens"], "dict_observation": True},
    {"observation_spaces": ["tokens"], "action_space": "cursor"},
])
def test_check_env_passes_on_the_cost_model(server, kwargs):
    from gymnasium.utils.env_checker import check_env
    env = gym.make("PerfDojo-v0", benchmark="perfdojo://gen/softmax?seed=1", address=server.address,
                   max_episode_steps=10, **kwargs)
    assert env.spec.nondeterministic is False
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*infinity.*")
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_spaces_have_the_declared_types(server):
    env = PerfDojoEnv("perfdojo://suite/softmax", observation_spaces=ALL_SPACES, address=server.address)
    space = env.observation_space
    assert isinstance(env.action_space, gym.spaces.Discrete)
    assert isinstance(space, gym.spaces.Dict)
    assert isinstance(space["features"], gym.spaces.Box) and space["features"].dtype == np.float32
    assert isinstance(space["tokens"], gym.spaces.Box) and space["tokens"].dtype == np.int32
    assert isinstance(space["ir_text"], gym.spaces.Text)
    assert isinstance(space["graph"], gym.spaces.Graph)
    obs, info = env.reset(seed=0)
    assert obs in space
    assert info["action_mask"].dtype == np.int8 and info["action_mask"].shape == (env.action_space.n,)
    env.close()


def test_gymnasium_make_and_a_measuring_backend_is_nondeterministic():
    # Constructing connects nothing, so this needs no server and no compiler.
    env = gym.make("PerfDojo-v0", backend="x86_64", disable_env_checker=True)
    assert env.spec.nondeterministic is True
    assert env.unwrapped.nondeterministic is True
    assert PerfDojoEnv(backend="x86_64").spec.nondeterministic is True
    assert PerfDojoEnv().spec is None  # cost model: deterministic, no spec needed
    assert gym.make("PerfDojo-v0", disable_env_checker=True).spec.nondeterministic is False
    # Modelled targets and the models of other cores are deterministic: their time is the model's.
    for backend in ("cost_model:neoverse-n1", "cost_model:a100", "aarch64_neon", "riscv64_rvv", "cuda"):
        assert PerfDojoEnv(backend=backend).spec is None, backend


# ---------------------------------------------------------------- same results as the C++ env


@pytest.mark.parametrize("config", [
    {"benchmark": "perfdojo://suite/softmax", "observation_spaces": ALL_SPACES, "max_episode_steps": 12},
    {"benchmark": "perfdojo://gen/matmul?seed=2", "observation_spaces": ["features", "tokens"],
     "reward_space": "relative_step", "max_episode_steps": 9},
    {"benchmark": "perfdojo://suite/layernorm", "observation_spaces": ["features", "graph"],
     "action_space": "cursor", "max_episode_steps": 15},
])
def test_an_episode_over_the_bridge_equals_the_cpp_env(server, config):
    cfg = dict(config)
    env = PerfDojoEnv(cfg.pop("benchmark"), observation_spaces=cfg.pop("observation_spaces"),
                      config=cfg, address=server.address)
    seed = 11
    rng = random.Random(5)
    obs0, info0 = env.reset(seed=seed)
    n = env.action_space.n
    observations, rewards, flags, masks, texts, actions = [obs0], [], [], [info0["action_mask"]], [], []
    for k in range(config["max_episode_steps"] + 2):
        mask = masks[-1]
        legal = np.flatnonzero(mask[:-1])
        if k % 4 == 3 or len(legal) == 0:
            a = int(rng.randrange(n - 1))  # anything in range: often illegal
        else:
            a = int(rng.choice(legal))
        obs, r, term, trunc, info = env.step(a)
        actions.append(a)
        observations.append(obs)
        rewards.append(r)
        flags.append((term, trunc))
        masks.append(info["action_mask"])
        texts.append((info["action"], info["illegal_action"], info["legality"], info["error"]))
    ref = reference_episode(config, seed, actions)
    spaces_json = env._spaces_json
    assert spaces_json == ref["spaces"]
    assert_obs_equal(observations[0], ref["reset"]["observation"], spaces_json)
    np.testing.assert_array_equal(masks[0], decode_mask(ref["reset"]["info"]["action_mask"], n))
    for k, step in enumerate(ref["steps"]):
        assert rewards[k] == step["reward"], k
        assert flags[k] == (step["terminated"], step["truncated"]), k
        i = step["info"]
        assert texts[k] == (i["action"], i["illegal_action"], i["legality"], i["error"]), k
        np.testing.assert_array_equal(masks[k + 1], decode_mask(i["action_mask"], n))
        assert_obs_equal(observations[k + 1], step["observation"], spaces_json)
    assert env.save_state() == ref["state"]
    env.close()


def test_against_a_server_without_extensions_observations_come_as_lists(server, monkeypatch):
    # An older server names no extensions in its hello: PerfDojoEnv must not send
    # observation_format (the server would refuse the unknown field) and must read lists.
    sent = []
    request = Client.request

    def spy(self, op, **fields):
        sent.append((op, "observation_format" in fields))
        return request(self, op, **fields)

    monkeypatch.setattr(Client, "request", spy)
    episodes = []
    for old in (False, True):
        env = PerfDojoEnv("perfdojo://suite/softmax", observation_spaces=["features", "tokens"],
                          address=server.address)
        env._connect()
        assert env._conn.client.supports("observation_format")
        if old:  # restored when the test ends
            monkeypatch.delitem(env._conn.client.server_info, "extensions")
            assert not env._conn.client.supports("observation_format")
        sent.clear()
        obs, info0 = env.reset(seed=4)
        observations = [obs]
        for _ in range(5):
            a = int(np.flatnonzero(info0["action_mask"][:-1])[0])
            obs, _, _, _, info0 = env.step(a)
            observations.append(obs)
        asked = [flag for op, flag in sent if op in ("reset", "step")]
        assert asked == [not old] * 6
        episodes.append(observations)
        env.close()
    for new_obs, old_obs in zip(*episodes):
        for name in ("features", "tokens"):
            assert new_obs[name].dtype == old_obs[name].dtype
            np.testing.assert_array_equal(new_obs[name], old_obs[name])


# ---------------------------------------------------------------- masks


def test_masks_agree_with_the_cpp_mask_and_with_what_steps_do(server):
    env = PerfDojoEnv("perfdojo://gen/softmax?seed=4", address=server.address, max_episode_steps=50)
    obs, info = env.reset(seed=3)
    mask = info["action_mask"]
    assert mask.dtype == np.int8
    np.testing.assert_array_equal(env.action_masks(), mask.astype(bool))
    assert env.action_masks().dtype == np.bool_
    listed = env._conn.client.request("action_mask", session=env._session, format="list")
    np.testing.assert_array_equal(np.asarray(listed["mask"], dtype=np.int8), mask)
    ref = reference_episode({"benchmark": "perfdojo://gen/softmax?seed=4"}, 3, [])
    np.testing.assert_array_equal(mask, decode_mask(ref["reset"]["info"]["action_mask"], len(mask)))
    # Discrete.sample honours it.
    env.action_space.seed(0)
    for _ in range(20):
        assert mask[env.action_space.sample(mask=mask)] == 1
    # A masked-in action is legal, a masked-out one is refused (each tried on a fork).
    rng = np.random.default_rng(0)
    legal = np.flatnonzero(mask[:-1])
    illegal = np.flatnonzero(mask[:-1] == 0)
    for a in list(rng.choice(legal, size=min(8, len(legal)), replace=False)) + \
            list(rng.choice(illegal, size=min(8, len(illegal)), replace=False)):
        f = env.fork()
        _, _, _, _, step_info = f.step(int(a))
        assert step_info["illegal_action"] == (mask[a] == 0), (a, step_info["legality"])
        f.close()
    env.close()


def test_dict_observation_carries_the_mask(server):
    env = PerfDojoEnv("perfdojo://suite/softmax", address=server.address, dict_observation=True)
    obs, info = env.reset(seed=1)
    assert set(obs) == {"observations", "action_mask"}
    assert obs["action_mask"].dtype == np.float32
    np.testing.assert_array_equal(obs["action_mask"], info["action_mask"].astype(np.float32))
    assert obs in env.observation_space
    env.close()


# ---------------------------------------------------------------- PerfDojo extras


def test_fork_outlives_its_parent_and_state_round_trips(server):
    env = PerfDojoEnv("perfdojo://suite/softmax", address=server.address, observation_spaces=["ir_text"])
    obs, info = env.reset(seed=2)
    a = int(np.flatnonzero(info["action_mask"][:-1])[0])
    env.step(a)
    child = env.fork()
    env.close()
    obs_c, _, _, _, info_c = child.step(int(np.flatnonzero(child.action_masks()[:-1])[0]))
    assert info_c["error"] is None
    for fmt in ("json", "binary"):
        state = child.save_state(format=fmt)
        other = PerfDojoEnv("perfdojo://suite/softmax", address=server.address, observation_spaces=["ir_text"])
        other.reset()
        obs_o, info_o = other.restore_state(state, format=fmt)
        assert obs_o == obs_c
        assert child.validate()["trace_legal"]
        other.close()
    with pytest.raises(ValueError, match="invalid_state"):
        child.restore_state({"benchmark": "perfdojo://suite/softmax", "trace": ["no_such 1"]})
    child.close()


def test_reset_options_switch_the_benchmark_and_bad_input_raises(server):
    env = PerfDojoEnv("perfdojo://suite/softmax", address=server.address, observation_spaces=["ir_text"])
    a, _ = env.reset(seed=0)
    b, info = env.reset(options={"benchmark": "perfdojo://suite/rowsum"})
    assert a != b and info["benchmark"] == "perfdojo://suite/rowsum"
    with pytest.raises(ValueError, match="bad_request"):
        env.reset(options={"benchmrk": "x"})
    with pytest.raises(InvalidActionError):
        env.step(env.action_space.n)
    with pytest.raises(ValueError, match="config_error"):
        PerfDojoEnv("perfdojo://suite/softmax", address=server.address, reward_space="nope").reset()
    env.close()


def test_an_env_pickles_before_and_after_use_and_connects_lazily(server):
    env = PerfDojoEnv("perfdojo://suite/softmax", address=server.address)
    assert env._conn is None  # nothing connected yet
    clone = pickle.loads(pickle.dumps(env))
    env.reset(seed=0)
    clone2 = pickle.loads(pickle.dumps(env))
    assert clone2._conn is None and clone2.action_space.n == env.action_space.n
    o1, _ = clone.reset(seed=0)
    o2, _ = clone2.reset(seed=0)
    np.testing.assert_array_equal(o1, o2)
    for e in (env, clone, clone2):
        e.close()


def test_a_local_server_is_started_and_stopped_with_the_env():
    env = PerfDojoEnv("perfdojo://suite/softmax")
    env.reset(seed=0)
    server = env._conn.server
    assert server.alive() and server.host == HOST
    env.close()
    assert server.proc.wait(timeout=10) == 0


def test_envs_in_worker_processes_answer_action_masks():
    envs = gym.vector.AsyncVectorEnv(
        [lambda: PerfDojoEnv("perfdojo://suite/softmax"), lambda: PerfDojoEnv("perfdojo://suite/rowsum")])
    try:
        envs.reset(seed=0)
        masks = envs.call("action_masks")
        assert len(masks) == 2 and all(m.dtype == np.bool_ and m.any() for m in masks)
        _, rewards, _, _, _ = envs.step(np.array([m.shape[0] - 1 for m in masks]))  # stop
        assert rewards.shape == (2,)
    finally:
        envs.close()


def test_multistep_step_text_and_list_benchmarks(server):
    env = PerfDojoEnv("perfdojo://suite/softmax", address=server.address, max_episode_steps=20)
    _, info = env.reset(seed=0)
    legal = [int(a) for a in np.flatnonzero(info["action_mask"][:-1])[:2]]
    twin = env.fork()
    _, r_many, _, _, info_many = env.multistep(legal)
    r_one = sum(twin.step(a)[1] for a in legal)
    assert info_many["step"] == 2 and r_many == pytest.approx(r_one)
    text = info_many["best_trace"][0] if info_many["best_trace"] else "tile_scope 0 2"
    _, _, _, _, info_text = twin.step_text(text)
    assert info_text["action"] == text
    with pytest.raises(InvalidActionError):
        twin.step_text("not an action")
    # Untimed: the same programs, one timing where the list ends; a single untimed move keeps
    # the last timed time and pays 0.
    a_env = PerfDojoEnv("perfdojo://suite/softmax", address=server.address, max_episode_steps=20)
    b_env = PerfDojoEnv("perfdojo://suite/softmax", address=server.address, max_episode_steps=20)
    _, i0 = a_env.reset(seed=0)
    b_env.reset(seed=0)
    _, _, _, _, timed_info = a_env.multistep(legal)
    _, _, _, _, end_info = b_env.multistep(legal, timed=False)
    assert end_info["time_s"] == timed_info["time_s"] and end_info["step"] == 2
    _, r_u, _, _, u_info = b_env.step_untimed(int(np.flatnonzero(end_info["action_mask"][:-1])[0]))
    assert r_u == 0 and u_info["time_s"] == end_info["time_s"] and u_info["step"] == 3
    with pytest.raises(BridgeError, match="timed"):
        b_env._request("step", action="tile_scope 0 2", timed=False)
    with pytest.raises(BridgeError, match="timed"):
        b_env._request("step", action=0, timed="no")
    a_env.close()
    b_env.close()
    b = env.benchmarks()
    assert "perfdojo://suite/softmax" in b["suite"] and set(b["test"]) <= set(b["suite"])
    assert "matmul" in b["generators"]
    env.close()
    twin.close()


# ---------------------------------------------------------------- bad input


def test_an_oversized_frame_is_answered_then_closed(server):
    c = Raw(server.port)
    c.send(b" " * 70000)  # the limit is 65536
    assert error_type(c.recv()) == "frame_too_large"
    assert c.closed_by_server()


def test_invalid_json_unknown_ops_and_wrong_types_get_typed_errors(server):
    c = Raw(server.port)
    assert error_type(c.call(b"{not json")) == "invalid_json"
    assert error_type(c.call(b"")) == "invalid_json"
    assert error_type(c.call(b"\xff\xfe")) == "invalid_json"
    assert error_type(c.call(b"[1]")) == "invalid_json"
    assert error_type(c.call({"op": "ping"} | {"id": [1]})) == "bad_request"
    assert error_type(c.call({"op": "frobnicate"})) == "unknown_op"
    assert error_type(c.call({"op": "make", "config": 5})) == "config_error"
    assert error_type(c.call({"op": "make", "config": {"benchmark": "/etc/passwd"}})) == "forbidden"
    made = c.call({"op": "make", "config": {"benchmark": "perfdojo://suite/softmax"}})
    s = made["result"]["session"]
    n = made["result"]["spaces"]["action_space"]["n"]
    assert error_type(c.call({"op": "reset", "session": s, "seed": "x"})) == "bad_request"
    assert error_type(c.call({"op": "reset", "session": str(s)})) == "bad_request"
    assert error_type(c.call({"op": "step", "session": s, "action": [1]})) == "bad_request"
    assert error_type(c.call({"op": "step", "session": s, "action": 1, "actions": [1]})) == "bad_request"
    assert error_type(c.call({"op": "step", "session": s, "action": 1, "extra": 1})) == "bad_request"
    assert error_type(c.call({"op": "step", "session": 987654, "action": 1})) == "unknown_session"
    # Still healthy: the connection stayed open through all of it.
    assert error_type(c.call({"op": "reset", "session": s, "seed": 1})) is None
    assert error_type(c.call({"op": "step", "session": s, "action": n})) == "invalid_action"
    assert error_type(c.call({"op": "step", "session": s, "action": -1})) == "invalid_action"
    r = c.call({"op": "step", "session": s, "action": n - 1})  # stop: the first real step
    assert r["ok"] and r["result"]["info"]["step"] == 1
    c.close()


def test_the_handshake_is_enforced(server):
    c = Raw(server.port, hello=False)
    assert error_type(c.call({"op": "make"})) == "handshake_required"
    assert c.closed_by_server()
    c = Raw(server.port, hello=False)
    assert error_type(c.call({"op": "hello", "version": 99})) == "version_mismatch"
    assert c.closed_by_server()


def test_a_token_server_refuses_a_wrong_token(tmp_path):
    token = tmp_path / "token"
    token.write_text("correct horse\n")
    s = Server("--token-file", str(token))
    try:
        c = Raw(s.port, hello=False)
        assert error_type(c.call({"op": "hello", "version": 1, "token": "wrong"})) == "auth_failed"
        assert c.closed_by_server()
        with pytest.raises(BridgeError, match="auth_failed"):
            Client(HOST, s.port, token="nope")
        client = Client(HOST, s.port, token="correct horse")
        assert client.request("ping") == {}
        client.close()
    finally:
        s.stop()


def test_truncated_frames_and_vanishing_clients_harm_nobody(server):
    keep = Client(HOST, server.port)
    s = keep.request("make", config={"benchmark": "perfdojo://suite/softmax"})["session"]
    first = keep.request("reset", session=s, seed=7)
    for k in range(20):
        c = Raw(server.port)
        made = c.call({"op": "make", "config": {"benchmark": "perfdojo://suite/softmax"}})
        sid = made["result"]["session"]
        c.send({"id": 99, "op": "step", "session": sid, "action": 0})  # leave mid-step
        if k % 2:
            c.send_bytes(struct.pack(">I", 500) + b'{"id":1')  # and mid-frame
        c.close()
    again = keep.request("reset", session=s, seed=7)
    assert again["observation"] == first["observation"]
    keep.close()


def test_random_garbage_never_kills_the_server(server):
    rng = random.Random(1)
    for _ in range(40):
        c = Raw(server.port, hello=rng.random() < 0.5)
        for _ in range(5):
            n = rng.randrange(0, 200)
            if rng.random() < 0.5:
                c.send(bytes(rng.randrange(256) for _ in range(n)))
            else:
                c.send_bytes(bytes(rng.randrange(256) for _ in range(n)))
        c.close()
    client = Client(HOST, server.port)
    assert client.request("ping") == {}
    client.close()


def test_a_slowloris_client_is_cut_off(strict_server):
    import select
    c = Raw(strict_server.port)
    body = json.dumps({"id": 1, "op": "ping"}).encode()
    frame = struct.pack(">I", len(body)) + body
    start = time.monotonic()
    for b in frame:  # one byte every 0.3 s: the whole frame would take ~8 s
        c.send_bytes(bytes([b]))
        readable, _, _ = select.select([c.sock], [], [], 0.3)
        if readable:
            break
    cut_after = time.monotonic() - start
    assert error_type(c.recv(timeout=5)) == "idle_timeout"
    assert c.closed_by_server()
    assert cut_after < 3.0, cut_after  # --frame-timeout 1


def test_an_idle_client_is_closed_and_told_why(strict_server):
    c = Raw(strict_server.port)
    reply = c.recv(timeout=5)
    assert error_type(reply) == "idle_timeout"
    assert c.closed_by_server()
    c2 = Raw(strict_server.port, hello=False)  # no handshake either
    assert error_type(c2.recv(timeout=5)) == "idle_timeout"


# ---------------------------------------------------------------- concurrency


def test_32_concurrent_clients_get_correct_results(server):
    configs = [
        {"benchmark": "perfdojo://suite/softmax", "max_episode_steps": 6},
        {"benchmark": "perfdojo://suite/rowsum", "max_episode_steps": 6},
        {"benchmark": "perfdojo://gen/matmul?seed=1", "max_episode_steps": 6},
        {"benchmark": "perfdojo://gen/layernorm?seed=2", "max_episode_steps": 6},
    ]
    actions = [0, 1, 2, 3, 5, 8]
    refs = [reference_episode(c, 3, actions) for c in configs]
    errors, episodes = [], [0] * 32
    deadline = time.monotonic() + 3.0

    def run(i):
        try:
            client = Client(HOST, server.port, timeout=60)
            cfg = configs[i % len(configs)]
            ref = refs[i % len(configs)]
            s = client.request("make", config=cfg)["session"]
            while time.monotonic() < deadline:
                r = client.request("reset", session=s, seed=3)
                assert r["observation"] == ref["reset"]["observation"]
                for a, want in zip(actions, ref["steps"]):
                    got = client.request("step", session=s, action=a)
                    assert got["reward"] == want["reward"]
                    assert got["observation"] == want["observation"]
                    assert got["info"]["action_mask"] == want["info"]["action_mask"]
                episodes[i] += 1
            client.request("close", session=s)
            client.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"client {i}: {e!r}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[:3]
    assert all(e >= 1 for e in episodes), episodes


def test_a_slow_measurement_does_not_stall_a_cost_model_client():
    # One thread per pool: were measuring and cost-model sessions on one pool, every fast request
    # would wait for the compile-and-time steps of the slow session.
    s = Server("--workers", "1", "--measure-workers", "1")
    try:
        slow = Client(HOST, s.port, timeout=300)
        try:
            ms = slow.request("make", config={"benchmark": "perfdojo://suite/softmax", "backend": "x86_64"})
        except BridgeError as e:
            pytest.skip(f"no measuring backend on this machine: {e.message}")
        fast = Client(HOST, s.port, timeout=60)
        fs = fast.request("make", config={"benchmark": "perfdojo://suite/softmax"})["session"]
        fast.request("reset", session=fs, seed=0)
        started, done = threading.Event(), threading.Event()

        def measure():
            started.set()
            slow.request("reset", session=ms["session"], seed=0)
            for a in (0, 1):
                slow.request("step", session=ms["session"], action=a)
            done.set()

        worker = threading.Thread(target=measure)
        worker.start()
        started.wait()
        latencies = []
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            t = time.monotonic()
            fast.request("action_mask", session=fs)
            latencies.append(time.monotonic() - t)
        worker.join(timeout=120)
        assert done.is_set()
        assert len(latencies) >= 20, latencies
        assert sorted(latencies)[len(latencies) // 2] < 0.05 and max(latencies) < 0.4, max(latencies)
        slow.close()
        fast.close()
    finally:
        s.stop()


def test_unfinished_frames_from_many_unauthenticated_clients_leave_the_server_small():
    # benchmarks/bridge_flood.py at a smaller scale: 300 connections announcing 8 MiB, then
    # 300 announcing a frame just under the handshake limit (which the server must evict to
    # make room); a real client must be served throughout and the RSS stay under 64 MiB.
    import sys
    env = dict(os.environ, PERFDOJO_BIN_DIR=str(BIN_DIR))
    for announce in (8 << 20, 4000):
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bridge_flood.py"),
                               "--connections", "300", "--seconds", "1.5", "--announce",
                               str(announce), "--token", "--json"],
                              capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
        assert doc["ok"] is True
        assert doc["real_clients_served"] == doc["real_clients"] >= 1
        assert doc["rss_peak_mib"] < 64


def test_the_client_reads_frames_however_the_bytes_arrive():
    """The client's receive buffer against a scripted peer: two replies in one segment, a reply
    split mid-header and mid-body, and one larger than the buffer, each answered in order."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((HOST, 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    frame = lambda obj: (lambda b: struct.pack(">I", len(b)) + b)(json.dumps(obj).encode())  # noqa: E731
    big = "x" * 1_500_000  # past the 1 MiB the client keeps

    def peer():
        conn, _ = listener.accept()
        with conn:
            def read_request():
                n = struct.unpack(">I", conn.recv(4, socket.MSG_WAITALL))[0]
                return json.loads(conn.recv(n, socket.MSG_WAITALL))
            hello = read_request()
            conn.sendall(frame({"id": hello["id"], "ok": True, "result": {"server": "scripted"}}))
            a, b = read_request(), read_request()  # two pings, answered in one segment
            conn.sendall(frame({"id": a["id"], "ok": True, "result": 1}) +
                         frame({"id": b["id"], "ok": True, "result": 2}))
            c = read_request()
            data = frame({"id": c["id"], "ok": True, "result": "split"})
            for part in (data[:2], data[2:7], data[7:]):  # mid-header, mid-body, the rest
                conn.sendall(part)
                time.sleep(0.01)
            d = read_request()
            conn.sendall(frame({"id": d["id"], "ok": True, "result": big}))
            e = read_request()
            conn.sendall(frame({"id": e["id"], "ok": True, "result": "after"}))

    t = threading.Thread(target=peer, daemon=True)
    t.start()
    c = Client(HOST, port, timeout=10)
    try:
        # The second ping's reply arrives with the first's and must wait in the buffer.
        with c._lock:
            for rid in (c._next_id, c._next_id + 1):
                body = json.dumps({"id": rid, "op": "ping"}).encode()
                c._sock.sendall(struct.pack(">I", len(body)) + body)
            first, second = json.loads(c._read_frame()), json.loads(c._read_frame())
            c._next_id += 2
        assert (first["result"], second["result"]) == (1, 2)
        assert c.request("ping") == "split"
        assert c.request("ping") == big
        assert c.request("ping") == "after"
        assert len(c._rbuf) == 1 << 16  # the large reply's buffer was let go
    finally:
        c.close()
        t.join(timeout=10)
        listener.close()
