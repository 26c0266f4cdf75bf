"""Gymnasium envs over the C++ env in this process (no socket): the same spaces, masks and info
as the bridge's PerfDojoEnv (perfdojo_gym), the GIL released while C++ works."""

from __future__ import annotations

import json
import string
from typing import Any, Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from perfdojo_gym.env import MAX_EPISODE_STEPS, LazySpaces, config_from_kwargs, spaces_of
from perfdojo_gym.vector import _NEXT_STEP, autoreset_mode_of

from . import _native
from .optimizer import _profile_dir

_NUMERIC = {"features": np.float32, "tokens": np.int32}


def _text(v: str) -> str:
    # The bridge's rule: characters outside printable ASCII (only comments hold them) become "?".
    return v if v.isascii() else "".join(c if c.isascii() else "?" for c in v)


def _observation(raw: dict, spaces_json: dict):
    out = {}
    for s in spaces_json["observation_spaces"]:
        name = s["name"]
        v = raw[name]
        if name in _NUMERIC:
            out[name] = np.frombuffer(v, dtype=_NUMERIC[name]).copy()
        elif name == "ir_text":
            out[name] = _text(v)
        elif name == "graph":
            nf = int(s.get("node_features", 12))
            nodes = np.frombuffer(v["node_features"], dtype=np.float32).reshape(int(v["num_nodes"]), nf).copy()
            src = np.frombuffer(v["edge_src"], dtype=np.int32).astype(np.int64)
            dst = np.frombuffer(v["edge_dst"], dtype=np.int32).astype(np.int64)
            out[name] = spaces.GraphInstance(nodes=nodes, edges=np.frombuffer(v["edge_type"], dtype=np.int32).astype(np.int64),
                                             edge_links=np.stack([src, dst], axis=1).reshape(-1, 2))
    return out


def _info(raw: dict) -> dict:
    raw["action_mask"] = np.frombuffer(raw["action_mask"], dtype=np.int8).copy()
    return raw


class InProcessEnv(LazySpaces, gym.Env):
    """PerfDojo as a Gymnasium env in this process. Arguments as perfdojo_gym.PerfDojoEnv's
    (benchmark, backend, observation_spaces, reward_space, ..., config, dict_observation,
    render_mode, any further EnvConfig field), without the connection ones."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, benchmark: str = "perfdojo://suite/softmax", *, dict_observation: bool = False,
                 render_mode: Optional[str] = None, **kwargs: Any):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; InProcessEnv renders "
                             f"'ansi' (the current IR text) or nothing")
        self._config = config_from_kwargs(benchmark, kwargs)
        self._dict_observation = bool(dict_observation)
        self.render_mode = render_mode
        self._env = None
        self._spaces_json = None
        self._mask = None

    # Built at first use, as the bridge env connects at first use: gym.make's spec comes first.
    def _ensure(self) -> None:
        if self._env is not None:
            return
        if "max_episode_steps" not in self._config and self.spec is not None:
            self._config["max_episode_steps"] = MAX_EPISODE_STEPS  # TimeLimit alone truncates
        try:
            self._env = _native.Env.make(json.dumps(self._config), True, _profile_dir())
        except ValueError as e:
            raise ValueError(str(e)) from None
        self._spaces_json = json.loads(self._env.spaces_json())

    def _spaces_now(self) -> dict:
        self._ensure()
        return self._spaces_json

    def _obs(self, raw: dict):
        out = _observation(raw, self._spaces_json)
        obs = next(iter(out.values())) if len(out) == 1 else out
        if self._dict_observation:
            obs = {"observations": obs, "action_mask": self._mask.astype(np.float32)}
        return obs

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._ensure()
        options = dict(options or {})
        benchmark = options.pop("benchmark", None)
        if options:
            raise ValueError(f"bad_request: unknown reset option(s) {sorted(options)}; expected benchmark")
        raw_obs, raw_info = self._env.reset(None if seed is None else int(seed), benchmark)
        info = _info(raw_info)
        self._mask = info["action_mask"]
        return self._obs(raw_obs), info

    def step(self, action):
        self._ensure()
        raw_obs, reward, term, trunc, raw_info = self._env.step(int(action))
        info = _info(raw_info)
        self._mask = info["action_mask"]
        return self._obs(raw_obs), float(reward), bool(term), bool(trunc), info

    def step_text(self, action: str):
        """Applies an action given as registry text ("tile_scope 0 8")."""
        self._ensure()
        raw_obs, reward, term, trunc, raw_info = self._env.step_text(str(action))
        info = _info(raw_info)
        self._mask = info["action_mask"]
        return self._obs(raw_obs), float(reward), bool(term), bool(trunc), info

    def action_masks(self) -> np.ndarray:
        """Legal actions now, as bools (sb3-contrib's MaskablePPO calls this)."""
        self._ensure()
        if self._mask is None:
            self._mask = np.frombuffer(self._env.action_mask(), dtype=np.int8).copy()
        return self._mask.astype(bool)

    def render(self):
        if self.render_mode != "ansi":
            return None
        self._ensure()
        return self._env.program_text()

    def save_state(self) -> dict:
        """The episode so far (docs/env.md, "State"), as the bridge's JSON state."""
        self._ensure()
        return json.loads(self._env.state_json())

    def fork(self) -> "InProcessEnv":
        """An independent env in the same state."""
        self._ensure()
        other = InProcessEnv.__new__(InProcessEnv)
        other.__dict__.update(self.__dict__)
        other._env = self._env.fork()
        other._mask = None if self._mask is None else self._mask.copy()
        return other

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_env"], d["_mask"] = None, None  # the config travels; the episode does not
        return d


class InProcessVectorEnv(gym.vector.VectorEnv):
    """`num_envs` in-process envs stepped together on the C++ VectorEnv's thread pool (oneTBB),
    the GIL released meanwhile. Numeric observations only (features, tokens). info as
    perfdojo_gym.PerfDojoVectorEnv's: arrays over the envs with their "_name" arrays."""

    metadata = {"render_modes": [], "autoreset_mode": _NEXT_STEP}

    def __init__(self, num_envs: int, benchmark: str = "perfdojo://suite/softmax", *,
                 autoreset_mode: str = "next_step", **kwargs: Any):
        self._same_step, mode = autoreset_mode_of(autoreset_mode)
        self.metadata = dict(self.metadata, autoreset_mode=mode)
        cfg = config_from_kwargs(benchmark, kwargs)
        self.num_envs = int(num_envs)
        try:
            self._venv = _native.VectorEnv.make(json.dumps(cfg), self.num_envs, self._same_step, True,
                                                _profile_dir())
        except ValueError as e:
            raise ValueError(str(e)) from None
        self.spaces_json = json.loads(self._venv.spaces_json())
        self._n = int(self._venv.n_actions)
        self._names = [s["name"] for s in self.spaces_json["observation_spaces"]]
        self._shapes = {s["name"]: tuple(s["shape"]) for s in self.spaces_json["observation_spaces"]}
        self.single_action_space, self.single_observation_space = spaces_of(self.spaces_json)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self._masks = np.zeros((self.num_envs, self._n), dtype=np.int8)

    def _unpack(self, raw_obs: dict, raw_info: dict):
        n = self.num_envs
        obs = {name: np.frombuffer(raw_obs[name], dtype=_NUMERIC[name]).reshape((n,) + self._shapes[name])
               for name in self._names}
        info = {"time_s": np.frombuffer(raw_info["time_s"], dtype=np.float64),
                "initial_time_s": np.frombuffer(raw_info["initial_time_s"], dtype=np.float64),
                "best_time_s": np.frombuffer(raw_info["best_time_s"], dtype=np.float64),
                "step": np.frombuffer(raw_info["step"], dtype=np.int32),
                "illegal_action": np.frombuffer(raw_info["illegal_action"], dtype=np.uint8).astype(bool),
                "action_had_no_effect": np.frombuffer(raw_info["action_had_no_effect"], dtype=np.uint8).astype(bool),
                "message": np.array(raw_info["message"], dtype=object)}
        self._masks = np.frombuffer(raw_info["action_mask"], dtype=np.int8).reshape(n, self._n)
        info["action_mask"] = self._masks
        for key in list(info):
            info["_" + key] = np.ones(n, dtype=bool)
        out = obs[self._names[0]] if len(self._names) == 1 else obs
        return out, info

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        if options:
            raise ValueError("InProcessVectorEnv.reset takes no options")
        if seed is not None and not isinstance(seed, (int, np.integer)):
            raise ValueError("InProcessVectorEnv.reset takes one int seed (env i gets seed + i)")
        raw_obs, raw_info = self._venv.reset(None if seed is None else int(seed))
        return self._unpack(raw_obs, raw_info)

    def step(self, actions):
        a = np.ascontiguousarray(np.asarray(actions).reshape(-1), dtype=np.int64)
        if a.shape[0] != self.num_envs:
            raise ValueError(f"{a.shape[0]} actions for {self.num_envs} envs")
        raw_obs, reward, term, trunc, raw_info, final_obs, final_info = self._venv.step(a.tobytes())
        obs, info = self._unpack(raw_obs, raw_info)
        info["autoreset_ignored_action"] = np.frombuffer(raw_info["autoreset_ignored_action"], dtype=np.uint8).astype(bool)
        if final_obs:
            has = np.array([o is not None for o in final_obs])
            info["final_obs"] = np.array([None if o is None else _observation(o, self.spaces_json)[self._names[0]]
                                          if len(self._names) == 1 else _observation(o, self.spaces_json)
                                          for o in final_obs], dtype=object)
            info["final_info"] = np.array([None if i is None else _info(i) for i in final_info], dtype=object)
            info["_final_obs"] = has
            info["_final_info"] = has.copy()
        return (obs, np.frombuffer(reward, dtype=np.float64).copy(),
                np.frombuffer(term, dtype=np.uint8).astype(bool),
                np.frombuffer(trunc, dtype=np.uint8).astype(bool), info)

    def action_masks(self) -> np.ndarray:
        return self._masks.astype(bool)
