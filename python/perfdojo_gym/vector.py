"""PerfDojoVectorEnv: N server-side envs stepped in one round trip (binary frames).

The server runs the N sessions of one frame in parallel on its workers, so one Python process
drives every core of the machine without a worker process per env.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from . import binary
from .client import BridgeError
from .env import InvalidActionError, _Connection, _user_error, config_from_kwargs, spaces_of

try:  # Gymnasium >= 1.1
    from gymnasium.vector import AutoresetMode
    _NEXT_STEP, _SAME_STEP = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP
except ImportError:  # Gymnasium 1.0 names the modes by string
    _NEXT_STEP, _SAME_STEP = "NextStep", "SameStep"

_NUMERIC = {"features": np.float32, "tokens": np.int32}


def autoreset_mode_of(value) -> tuple[bool, object]:
    """(same_step, the metadata's autoreset_mode) for "next_step" or "same_step" (or an
    AutoresetMode); ValueError otherwise."""
    mode = str(getattr(value, "value", value)).lower().replace("_", "")
    if mode not in ("nextstep", "samestep"):
        raise ValueError(f"autoreset_mode must be 'next_step' or 'same_step', not {value!r}")
    return mode == "samestep", (_SAME_STEP if mode == "samestep" else _NEXT_STEP)


class PerfDojoVectorEnv(gym.vector.VectorEnv):
    """`num_envs` PerfDojo envs behind one bridge connection.

    Args:
        num_envs: how many envs; env i's config seed is `seed + i` (seed default 0).
        benchmark and the other keyword arguments: as PerfDojoEnv (observation spaces must be
            numeric: features and/or tokens).
        autoreset_mode: "next_step" (Gymnasium's default: the step after an episode ends resets
            that env and ignores its action) or "same_step" (the env is reset within the step
            that ended it; info["final_obs"] and info["final_info"] hold the last ones).

    info holds arrays over the envs: action_mask (num_envs x n, int8), time_s, initial_time_s,
    best_time_s, step, illegal_action, action_had_no_effect, and message (info.error, or why an
    action was illegal; "" otherwise), each with its Gymnasium "_name" presence array.
    """

    metadata = {"render_modes": [], "autoreset_mode": _NEXT_STEP}

    def __init__(self, num_envs: int, benchmark: str = "perfdojo://suite/softmax", *,
                 autoreset_mode: str = "next_step", address: Optional[str] = None,
                 token: Optional[str] = None, server_args: Sequence[str] = (), **kwargs: Any):
        if int(num_envs) < 1:
            raise ValueError("num_envs must be at least 1")
        self.num_envs = int(num_envs)
        self._same_step, mode = autoreset_mode_of(autoreset_mode)
        self.metadata = dict(self.metadata, autoreset_mode=mode)
        cfg = config_from_kwargs(benchmark, kwargs)
        for name in cfg["observation_spaces"]:
            if name not in _NUMERIC:
                raise ValueError(f"PerfDojoVectorEnv carries numeric observations only (features, "
                                 f"tokens); {name!r} needs the JSON path: use PerfDojoEnv")
        self._spaces_names = list(cfg["observation_spaces"])
        address = address if address is not None else os.environ.get("PERFDOJO_BRIDGE_ADDRESS")
        token = token if token is not None else os.environ.get("PERFDOJO_BRIDGE_TOKEN")
        self._conn = None
        self._client = None
        self._sessions: list[int] = []
        try:
            self._conn = _Connection(address, token, tuple(server_args))
            self._client = self._conn.client
            base_seed = int(cfg.get("seed", 0))
            for i in range(self.num_envs):
                made = self._client.request("make", config=dict(cfg, seed=base_seed + i))
                self._sessions.append(int(made["session"]))
        except BridgeError as e:
            self.close()
            raise _user_error(e) from None
        except BaseException:
            self.close()
            raise
        sj = made["spaces"]
        self.spaces_json = sj
        self._n = int(sj["action_space"]["n"])
        self.single_action_space, self.single_observation_space = spaces_of(sj)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self._shapes = {s["name"]: tuple(s["shape"]) for s in sj["observation_spaces"]}
        self._obs_bytes = sum(int(np.prod(self._shapes[n])) * 4 for n in self._spaces_names)
        self._request_id = 0
        self._needs_reset = np.zeros(self.num_envs, dtype=bool)
        self._masks = np.zeros((self.num_envs, self._n), dtype=np.int8)
        self._last_obs = None

    # ------------------------------------------------------------ wire

    def _roundtrip(self, entries: list[tuple[int, int, int]]) -> binary.Batch:
        self._request_id = (self._request_id + 1) & 0xFFFFFFFF
        body = self._client.request_binary(binary.encode(self._request_id, entries))
        rid, batch = binary.decode_batch(body, self._n, self._obs_bytes)
        if rid != self._request_id:
            raise BridgeError("internal", f"reply id {rid} for request {self._request_id}")
        if not batch.ok.all():
            kind, _, msg = batch.message[int(np.flatnonzero(~batch.ok)[0])].partition(": ")
            raise _user_error(BridgeError(kind, msg))
        return batch

    def _split(self, batch: binary.Batch) -> dict:
        """The observation arrays of a batch, one per space (views, no copy)."""
        out, pos = {}, 0
        for name in self._spaces_names:
            shape = self._shapes[name]
            width = int(np.prod(shape)) * 4
            out[name] = batch.observation[:, pos:pos + width].view(_NUMERIC[name]).reshape(
                (-1,) + shape)
            pos += width
        return out

    _INFO_KEYS = ("time_s", "initial_time_s", "best_time_s", "step", "illegal_action",
                  "action_had_no_effect")

    def _info(self, batch: binary.Batch) -> dict:
        info = {k: getattr(batch, k) for k in self._INFO_KEYS}
        info["message"] = np.array(batch.message, dtype=object)
        return info

    def _finish(self, obs: dict, info: dict):
        info["action_mask"] = self._masks.copy()
        for key in list(info):
            if not key.startswith("_") and key not in ("final_obs", "final_info"):
                info["_" + key] = np.ones(self.num_envs, dtype=bool)
        out = obs[self._spaces_names[0]] if len(self._spaces_names) == 1 else obs
        self._last_obs = out
        return out, info

    # ------------------------------------------------------------ Gymnasium API

    def reset(self, *, seed: Optional[int | Sequence[int]] = None, options: Optional[dict] = None):
        if options:
            raise ValueError("PerfDojoVectorEnv.reset takes no options (set the benchmark when "
                             "making it)")
        if seed is None:
            seeds = [None] * self.num_envs
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"{len(seeds)} seeds for {self.num_envs} envs")
        entries = [(s, 0, binary.RESET) if sd is None else (s, int(sd), binary.RESET_SEED)
                   for s, sd in zip(self._sessions, seeds)]
        batch = self._roundtrip(entries)
        self._masks = batch.mask
        self._needs_reset[:] = False
        return self._finish(self._split(batch), self._info(batch))

    def step(self, actions):
        actions = np.asarray(actions).reshape(-1)
        if actions.shape[0] != self.num_envs:
            raise ValueError(f"{actions.shape[0]} actions for {self.num_envs} envs")
        bad = (actions < 0) | (actions >= self._n)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidActionError(f"action {int(actions[i])} of env {i} is out of range "
                                     f"[0, {self._n}); no env was stepped")
        entries = [(s, 0, binary.RESET) if self._needs_reset[i] else (s, int(actions[i]), binary.STEP)
                   for i, s in enumerate(self._sessions)]
        batch = self._roundtrip(entries)
        obs, info = self._split(batch), self._info(batch)
        self._masks = batch.mask
        rewards, terminated, truncated = batch.reward, batch.terminated, batch.truncated
        done = terminated | truncated
        if self._same_step and done.any():
            rows = np.flatnonzero(done)
            final_obs, final_info = self._finish({k: v.copy() for k, v in obs.items()}, dict(info))
            fresh = self._roundtrip([(self._sessions[i], 0, binary.RESET) for i in rows])
            obs = {k: v.copy() for k, v in obs.items()}
            for name, arr in self._split(fresh).items():
                obs[name][rows] = arr
            fresh_info = self._info(fresh)
            info = {k: v.copy() for k, v in info.items()}
            for k, v in fresh_info.items():
                info[k][rows] = v
            self._masks = self._masks.copy()
            self._masks[rows] = fresh.mask
            info["final_obs"] = final_obs
            info["final_info"] = {k: v for k, v in final_info.items() if not k.startswith("_")}
            info["_final_obs"] = done.copy()
            info["_final_info"] = done.copy()
            self._needs_reset[:] = False
        else:
            self._needs_reset = done
        out, info = self._finish(obs, info)
        return out, rewards, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """(num_envs, n) bools: the legal actions of every env now."""
        return self._masks.astype(bool)

    def close_extras(self, **kwargs: Any) -> None:
        conn, self._conn, self._client = self._conn, None, None
        if conn is not None:
            for s in self._sessions:
                try:
                    conn.client.request("close", session=s)
                except Exception:
                    break
            conn.release()  # closes the client and lets go of a local server
        self._sessions = []

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
