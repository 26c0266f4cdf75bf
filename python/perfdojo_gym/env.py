"""PerfDojoEnv: a gymnasium.Env whose dynamics run in C++ behind `perfdojo serve`."""

from __future__ import annotations

import base64
import dataclasses
import os
import string
import threading
from typing import Any, Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from .client import (BridgeConnectionError, BridgeError, Client, acquire_local_server,
                     parse_address, release_local_server)

# Backends whose times are reproducible bit for bit; every other backend measures real time.
# Backends whose times are a function of the program: the models, and the targets they time
# (cross targets and cuda compile and verify, the time is their core's model).
DETERMINISTIC_BACKENDS = frozenset({
    "cost_model", "interpreter", "cost_model:neoverse-n1", "cost_model:neoverse-v1",
    "cost_model:snitch", "cost_model:a100", "cost_model:zen3", "aarch64_neon", "aarch64_sve",
    "riscv64_rvv", "cuda", "x86_memcheck"})
# ir_text observations: printable ASCII (the canonical printer's alphabet). Other characters,
# which can only come from comments in a user's kernel, are replaced by "?".
IR_TEXT_CHARSET = string.printable
IR_TEXT_MAX_LENGTH = 1 << 20
# The C++ env's largest episode limit: what an env made by gym.make runs with, so that
# Gymnasium's TimeLimit wrapper alone decides when an episode is truncated.
MAX_EPISODE_STEPS = 1_000_000


class InvalidActionError(ValueError):
    """An action index outside the action space; the episode is unchanged."""


def decode_mask(text: str, n: int) -> np.ndarray:
    """The bridge's base64 bit-packed mask (numpy.packbits order) as int8 0/1 of length n."""
    packed = np.frombuffer(base64.b64decode(text), dtype=np.uint8)
    return np.unpackbits(packed, count=n).astype(np.int8)


class _Connection:
    """A client plus (for local servers) the server it keeps alive; shared by forks."""

    def __init__(self, address, token, server_args):
        self.server = None
        if address is None:
            self.server = acquire_local_server(tuple(server_args))
            host, port, token = self.server.host, self.server.port, self.server.token
        else:
            host, port = parse_address(address)
        try:
            self.client = Client(host, port, token=token)
        except BaseException:
            if self.server is not None:
                release_local_server(self.server)
            raise
        self.refs = 1
        self.pid = os.getpid()
        self.lock = threading.Lock()

    def acquire(self) -> "_Connection":
        with self.lock:
            self.refs += 1
        return self

    def release(self) -> None:
        with self.lock:
            self.refs -= 1
            last = self.refs == 0
        if last:
            self.client.close()
            if self.server is not None:
                release_local_server(self.server)
                self.server = None


class LazySpaces:
    """action_space and observation_space built from the spaces JSON at first use (a subclass
    gives `_spaces_now()` and `_dict_observation`); both may be replaced by assignment."""

    _action_space = None
    _observation_space = None

    @property
    def action_space(self) -> spaces.Discrete:
        if self._action_space is None:
            self._action_space, _ = spaces_of(self._spaces_now(), self._dict_observation)
        return self._action_space

    @action_space.setter
    def action_space(self, value) -> None:
        self._action_space = value

    @property
    def observation_space(self) -> spaces.Space:
        if self._observation_space is None:
            _, self._observation_space = spaces_of(self._spaces_now(), self._dict_observation)
        return self._observation_space

    @observation_space.setter
    def observation_space(self, value) -> None:
        self._observation_space = value


# The ops whose replies carry an observation ask for numeric observations as the base64 of
# their little-endian bytes where the server offers it (docs/bridge.md, OBS): one b64decode and
# one frombuffer instead of parsing ~400 decimals, which took most of a JSON step's client time.
_OBSERVING_OPS = ("reset", "step", "restore")


def _numbers(v, wire: str, dtype) -> np.ndarray:
    """A numeric observation from the wire: base64 of little-endian values, or a JSON list."""
    if isinstance(v, str):
        return np.frombuffer(base64.b64decode(v), dtype=wire).astype(dtype)
    return np.asarray(v, dtype=dtype)


class PerfDojoEnv(LazySpaces, gym.Env):
    """Kernel optimisation as a Gymnasium environment.

    Args:
        benchmark: a URI (perfdojo://suite/NAME, perfdojo://gen/FAMILY?seed=S) or a .pdj path.
        backend, observation_spaces, reward_space, action_space, max_episode_steps, seed,
        illegal_action_penalty: the C++ EnvConfig fields of the same names.
        config: further EnvConfig fields as a dict ("flat", "measure", ...); see docs/bridge.md.
        address: "host:port" of a running `perfdojo serve`; None starts a private local server
            (or uses $PERFDOJO_BRIDGE_ADDRESS when set).
        token: the server's shared secret ($PERFDOJO_BRIDGE_TOKEN when unset).
        dict_observation: observations become {"observations": ..., "action_mask": ...}
            (RLlib's action-masking convention; the mask as float32 0/1).
        server_args: extra `perfdojo serve` flags for a local server.

    Nothing connects until the env is first used, so constructing and pickling it is cheap and
    safe inside worker processes. Masks: info["action_mask"] (np.int8), action_masks() (bools,
    for sb3-contrib's MaskablePPO) and, with dict_observation, inside the observation.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, benchmark: str = "perfdojo://suite/softmax", *, backend: str = "cost_model",
                 observation_spaces: Sequence[str] | str = ("features",),
                 reward_space: Optional[str] = None, action_space: Optional[str] = None,
                 max_episode_steps: Optional[int] = None, seed: Optional[int] = None,
                 illegal_action_penalty: Optional[float] = None, config: Optional[dict] = None,
                 address: Optional[str] = None, token: Optional[str] = None,
                 dict_observation: bool = False, server_args: Sequence[str] = (),
                 render_mode: Optional[str] = None, **config_fields: Any):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; PerfDojoEnv renders "
                             f"'ansi' (the current IR text) or nothing")
        self._config = config_from_kwargs(benchmark, dict(
            config_fields, backend=backend, observation_spaces=observation_spaces,
            reward_space=reward_space, action_space=action_space,
            max_episode_steps=max_episode_steps, seed=seed,
            illegal_action_penalty=illegal_action_penalty, config=config))
        self._address = address if address is not None else os.environ.get("PERFDOJO_BRIDGE_ADDRESS")
        self._token = token if token is not None else os.environ.get("PERFDOJO_BRIDGE_TOKEN")
        self._dict_observation = bool(dict_observation)
        self._server_args = tuple(server_args)
        self.render_mode = render_mode
        self._measured = self._config["backend"] not in DETERMINISTIC_BACKENDS
        self._conn: Optional[_Connection] = None
        self._session: Optional[int] = None
        self._spaces_json: Optional[dict] = None
        self._mask: Optional[np.ndarray] = None
        self._last_obs = None
        self._spec: Optional[EnvSpec] = None

    # ------------------------------------------------------------ spec and spaces

    @property
    def spec(self) -> Optional[EnvSpec]:
        """The registration spec; nondeterministic whenever the backend measures real time."""
        if self._spec is None and self._measured:
            return EnvSpec("PerfDojo-v0", entry_point="perfdojo_gym:PerfDojoEnv",
                           nondeterministic=True, kwargs={"backend": self._config["backend"]})
        return self._spec

    @spec.setter
    def spec(self, value: Optional[EnvSpec]) -> None:
        if value is not None and self._measured and not value.nondeterministic:
            value = dataclasses.replace(value, nondeterministic=True)
        self._spec = value

    @property
    def nondeterministic(self) -> bool:
        """Whether the same seed and actions may give different rewards (measured time)."""
        if self._spaces_json is not None:
            return not self._spaces_json["deterministic"]
        return self._measured

    def _spaces_now(self) -> dict:
        if self._spaces_json is None:
            self._connect()
        return self._spaces_json

    # ------------------------------------------------------------ connection

    def _connect(self) -> None:
        """Opens the connection and the session (again, after a fork() of the process or a
        lost connection)."""
        if self._conn is not None and self._conn.pid == os.getpid() and not self._conn.client.closed:
            return
        self._drop_connection()
        if "max_episode_steps" not in self._config and self._spec is not None:
            # Made by gym.make: Gymnasium's TimeLimit wrapper (max_episode_steps of gym.make or of
            # the registration, 30) ends episodes; the C++ env must not end them earlier.
            self._config["max_episode_steps"] = MAX_EPISODE_STEPS
        conn = _Connection(self._address, self._token, self._server_args)
        try:
            made = conn.client.request("make", config=self._config)
        except BridgeError as e:
            conn.release()
            raise _user_error(e) from None
        except BaseException:
            conn.release()
            raise
        self._conn, self._session = conn, made["session"]
        self._spaces_json = made["spaces"]
        self._mask = None

    def _drop_connection(self) -> None:
        conn, self._conn, self._session = self._conn, None, None
        if conn is not None and conn.pid == os.getpid():
            conn.release()

    def _request(self, op: str, **fields: Any) -> Any:
        self._connect()
        if op in _OBSERVING_OPS and self._conn.client.supports("observation_format"):
            fields["observation_format"] = "base64"
        return self._conn.client.request(op, session=self._session, **fields)

    # ------------------------------------------------------------ decoding

    def _decode_obs(self, obs_json: dict):
        out = {}
        for s in self._spaces_json["observation_spaces"]:
            name = s["name"]
            v = obs_json[name]
            if name == "features":
                out[name] = _numbers(v, "<f4", np.float32)
            elif name == "tokens":
                out[name] = _numbers(v, "<i4", np.int32)
            elif name == "ir_text":
                out[name] = v if v.isascii() else "".join(c if c.isascii() else "?" for c in v)
            elif name == "graph":
                nf = int(s.get("node_features", 12))
                nodes = np.asarray(v["node_features"], dtype=np.float32).reshape(int(v["num_nodes"]), nf)
                links = np.stack([np.asarray(v["edge_src"], dtype=np.int64),
                                  np.asarray(v["edge_dst"], dtype=np.int64)], axis=1).reshape(-1, 2)
                out[name] = spaces.GraphInstance(nodes=nodes, edges=np.asarray(v["edge_type"], dtype=np.int64),
                                                 edge_links=links)
            else:
                out[name] = v
        obs = next(iter(out.values())) if len(out) == 1 else out
        if self._dict_observation:
            obs = {"observations": obs, "action_mask": self._mask.astype(np.float32)}
        return obs

    def _decode_info(self, info: dict) -> dict:
        n = int(self._spaces_json["action_space"]["n"])
        self._mask = decode_mask(info["action_mask"], n)
        info["action_mask"] = self._mask
        return info

    # ------------------------------------------------------------ Gymnasium API

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        fields: dict = {}
        if seed is not None:
            fields["seed"] = int(seed)
        if options:
            fields["options"] = dict(options)
        try:
            result = self._request("reset", **fields)
        except BridgeConnectionError:
            # The server or the connection went away: a reset may start afresh elsewhere.
            self._drop_connection()
            result = self._request("reset", **fields)
        except BridgeError as e:
            raise _user_error(e) from None
        info = self._decode_info(result["info"])
        obs = self._decode_obs(result["observation"])
        self._last_obs = obs
        return obs, info

    def step(self, action):
        try:
            result = self._request("step", action=int(action))
        except BridgeConnectionError as e:
            # Failures are data: end the episode with the error rather than kill a long run.
            self._drop_connection()
            n = self.action_space.n
            self._mask = np.zeros(n, dtype=np.int8)
            info = {"error": f"connection to the PerfDojo server lost: {e}", "action_mask": self._mask}
            return self._last_obs, 0.0, True, False, info
        except BridgeError as e:
            raise _user_error(e) from None
        return self._unpack_step(result)

    def _unpack_step(self, result: dict):
        info = self._decode_info(result["info"])
        obs = self._decode_obs(result["observation"])
        self._last_obs = obs
        return obs, float(result["reward"]), bool(result["terminated"]), bool(result["truncated"]), info

    def multistep(self, actions: Sequence[int], timed: bool = True):
        """Applies several actions in one round trip; the reward is their sum. With
        ``timed=False`` only the program where the list ends is timed (one backend
        evaluation; the moves before it pay 0)."""
        fields = {"actions": [int(a) for a in actions]}
        if not timed:
            fields["timed"] = False
        try:
            result = self._request("step", **fields)
        except BridgeError as e:
            raise _user_error(e) from None
        return self._unpack_step(result)

    def step_untimed(self, action):
        """Applies an action without timing the new program (no backend call): the move pays 0
        and info["time_s"] stays that of the last program timed. For searches that follow a
        policy for several moves and time only where they end."""
        try:
            result = self._request("step", action=int(action), timed=False)
        except BridgeError as e:
            raise _user_error(e) from None
        return self._unpack_step(result)

    def step_text(self, action: str):
        """Applies an action given as registry text ("tile_scope 0 8")."""
        try:
            result = self._request("step", action=str(action))
        except BridgeError as e:
            raise _user_error(e) from None
        return self._unpack_step(result)

    def action_masks(self) -> np.ndarray:
        """Legal actions now, as bools (sb3-contrib's MaskablePPO calls this)."""
        if self._mask is None:
            result = self._request("action_mask")
            self._mask = decode_mask(result["mask"], int(result["n"]))
        return self._mask.astype(bool)

    def render(self):
        """render_mode="ansi": the current program's IR text; otherwise None."""
        if self.render_mode != "ansi":
            return None
        return self._request("program")["ir_text"]

    def close(self) -> None:
        if self._conn is not None and self._conn.pid == os.getpid() and self._session is not None:
            try:
                self._conn.client.request("close", session=self._session)
            except (BridgeError, BridgeConnectionError):
                pass
        self._drop_connection()
        super().close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------ PerfDojo extras

    def fork(self) -> "PerfDojoEnv":
        """An independent env in the same state; it lives on after this one is closed."""
        made = self._request("fork")
        other = PerfDojoEnv.__new__(PerfDojoEnv)
        other.__dict__.update(self._picklable_state())
        other._conn = self._conn.acquire()
        other._session = made["session"]
        other._spaces_json = made["spaces"]
        other._mask = None if self._mask is None else self._mask.copy()
        other._last_obs = self._last_obs
        return other

    def save_state(self, format: str = "json"):
        """The episode so far: a dict (format="json") or base64 text ("binary")."""
        return self._request("save", format=format)["state"]

    def restore_state(self, state, format: str = "json"):
        """Replays a saved episode; returns (observation, info). A bad state changes nothing."""
        try:
            result = self._request("restore", state=state, format=format)
        except BridgeError as e:
            raise _user_error(e) from None
        info = self._decode_info(result["info"])
        obs = self._decode_obs(result["observation"])
        self._last_obs = obs
        return obs, info

    def validate(self, state=None, format: str = "json") -> dict:
        """Replays `state` (default: this episode) and checks legality, reward and semantics."""
        return self._request("validate", state=state, format=format if state is not None else None)

    def benchmarks(self) -> dict:
        """The suite, its train/test split and the generator families."""
        self._connect()
        return self._conn.client.request("list_benchmarks")

    # ------------------------------------------------------------ pickling

    def _picklable_state(self) -> dict:
        d = dict(self.__dict__)
        for k in ("_conn", "_session", "_mask", "_last_obs"):
            d[k] = None
        return d

    def __getstate__(self):
        # Configuration and spaces travel; the connection does not (the copy reconnects lazily
        # and starts a fresh session: use save_state/restore_state to move an episode).
        return self._picklable_state()

    def __setstate__(self, state):
        self.__dict__.update(state)


def spaces_of(sj: dict, dict_observation: bool = False):
    """(Discrete action space, observation space) of a spaces JSON (docs/bridge.md, SPACES): one
    space as itself, several as a Dict; with dict_observation, {"observations", "action_mask"}."""
    n = int(sj["action_space"]["n"])
    inner = {s["name"]: _space_of(s) for s in sj["observation_spaces"]}
    obs = next(iter(inner.values())) if len(inner) == 1 else spaces.Dict(inner)
    if dict_observation:
        obs = spaces.Dict({"observations": obs,
                           "action_mask": spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32)})
    return spaces.Discrete(n), obs


def config_from_kwargs(benchmark: str, kwargs: dict) -> dict:
    """The EnvConfig of docs/bridge.md from PerfDojoEnv's keyword arguments: the named fields,
    `config`, and any further EnvConfig field given by name (sketch_actions=2, flat={...})."""
    kwargs = dict(kwargs)
    cfg = dict(kwargs.pop("config", None) or {})
    spaces_ = kwargs.pop("observation_spaces", None) or ("features",)
    if isinstance(spaces_, str):
        spaces_ = [spaces_]
    cfg.update({"benchmark": benchmark, "backend": kwargs.pop("backend", None) or "cost_model",
                "observation_spaces": list(spaces_)})
    for key, value in kwargs.items():
        if value is not None:
            cfg[key] = value
    return cfg


def _space_of(s: dict) -> spaces.Space:
    name = s["name"]
    if name == "features":
        if "low" in s and "high" in s:  # finite per-entry bounds (docs/env.md)
            return spaces.Box(np.asarray(s["low"], dtype=np.float32),
                              np.asarray(s["high"], dtype=np.float32), dtype=np.float32)
        return spaces.Box(-np.inf, np.inf, shape=tuple(s["shape"]), dtype=np.float32)
    if name == "tokens":
        return spaces.Box(0, int(s["vocabulary_size"]) - 1, shape=tuple(s["shape"]), dtype=np.int32)
    if name == "ir_text":
        return spaces.Text(max_length=IR_TEXT_MAX_LENGTH, min_length=0, charset=IR_TEXT_CHARSET)
    if name == "graph":
        return spaces.Graph(node_space=spaces.Box(-np.inf, np.inf, shape=(int(s["node_features"]),),
                                                  dtype=np.float32),
                            edge_space=spaces.Discrete(int(s["edge_types"])))
    raise ValueError(f"unknown observation space {name!r}")


# Observation spaces each framework's models take; the others need a model of one's own.
_FRAMEWORK_SPACES = {
    "stable-baselines3": ({"features", "tokens"}, "Box, Discrete, MultiDiscrete, MultiBinary and Dict of them"),
    "rllib": ({"features", "tokens"}, "Box, Discrete, MultiDiscrete, Dict and Tuple of them"),
    "cleanrl": ({"features"}, "one flat Box"),
}
_FRAMEWORK_ALIASES = {"sb3": "stable-baselines3", "sb3-contrib": "stable-baselines3",
                      "stable_baselines3": "stable-baselines3", "ray": "rllib"}


def require_spaces(env, framework: str) -> None:
    """Raises ValueError, saying which spaces and why, when `env` (a PerfDojoEnv, a wrapper of
    one, or a config dict) observes a space `framework` cannot take. Frameworks:
    "stable-baselines3" (or "sb3"), "rllib", "cleanrl"."""
    key = _FRAMEWORK_ALIASES.get(framework.lower(), framework.lower())
    if key not in _FRAMEWORK_SPACES:
        raise ValueError(f"unknown framework {framework!r}; expected one of "
                         f"{', '.join(sorted(_FRAMEWORK_SPACES))}")
    allowed, what = _FRAMEWORK_SPACES[key]
    cfg = env if isinstance(env, dict) else getattr(getattr(env, "unwrapped", env), "_config", None)
    if cfg is None:
        raise TypeError("require_spaces takes a PerfDojoEnv, a wrapper of one, or its config dict")
    names = cfg.get("observation_spaces") or ["features"]
    names = [names] if isinstance(names, str) else list(names)
    bad = [n for n in names if n not in allowed]
    if bad:
        kinds = {"ir_text": "a gymnasium Text space", "graph": "a gymnasium Graph space",
                 "tokens": "an integer sequence"}
        raise ValueError(
            f"{key} cannot take the observation space(s) {', '.join(repr(b) for b in bad)} "
            f"({'; '.join(f'{b} is {kinds.get(b, b)}' for b in bad)}); its models take {what}. "
            f"Use observation_spaces={sorted(allowed)!r}, or write a model of your own for them.")


def _user_error(e: BridgeError) -> Exception:
    """Maps error replies that mean the caller erred onto Python's usual exception types."""
    if e.type == "invalid_action":
        return InvalidActionError(e.message)
    if e.type in ("bad_request", "config_error", "invalid_state", "forbidden"):
        return ValueError(f"{e.type}: {e.message}")
    return e
