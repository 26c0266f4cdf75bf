"""Stable-Baselines3's VecEnv over PerfDojoVectorEnv: N server-side envs in one round trip.

SB3 does not take a Gymnasium VectorEnv; its own vector envs step one Python env after another
(DummyVecEnv: one JSON round trip per env) or one process per env (SubprocVecEnv). This adapter
gives SB3 and sb3-contrib the bridge's binary frames instead: one round trip steps every env,
and the server runs them in parallel on its workers.

    from perfdojo_gym.sb3 import PerfDojoSB3VecEnv
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import VecMonitor

    env = VecMonitor(PerfDojoSB3VecEnv(8, "perfdojo://suite/softmax", max_episode_steps=16))
    MaskablePPO("MlpPolicy", env, n_steps=64).learn(4096)

Episodes reset within the step that ends them (SB3's convention): the returned observation is
the new episode's, and infos[i]["terminal_observation"] the last one of the old; infos[i]
["TimeLimit.truncated"] says a truncation that was not a termination. `env_method("action_masks")`
(what MaskablePPO calls) gives each env's legal actions as bools. Importing this module needs
stable_baselines3; the rest of perfdojo_gym does not.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from .vector import PerfDojoVectorEnv


class _EnvView:
    """What SB3's get_attr / env_method / set_attr reach for one env: its spaces, its mask."""

    def __init__(self, owner: "PerfDojoSB3VecEnv", index: int):
        self._owner, self._index = owner, index
        self.render_mode = None
        self.observation_space = owner.observation_space
        self.action_space = owner.action_space

    def action_masks(self) -> np.ndarray:
        return self._owner.action_masks()[self._index]


class PerfDojoSB3VecEnv(VecEnv):
    """`num_envs` PerfDojo envs as one SB3 VecEnv; keyword arguments as PerfDojoVectorEnv's
    (benchmark, max_episode_steps, address, ...). The observation is the numeric space alone
    (features by default), as SB3's MlpPolicy takes it."""

    def __init__(self, num_envs: int, benchmark: str = "perfdojo://suite/softmax", **kwargs: Any):
        if "autoreset_mode" in kwargs:
            raise ValueError("PerfDojoSB3VecEnv resets within the step that ends an episode (SB3's "
                             "convention); autoreset_mode is not an option")
        self.venv = PerfDojoVectorEnv(num_envs, benchmark, autoreset_mode="same_step", **kwargs)
        self._views: list[_EnvView] = []
        self._actions: Optional[np.ndarray] = None
        self._bool_masks: Optional[np.ndarray] = None  # this step's, made on first request
        super().__init__(num_envs, self.venv.single_observation_space, self.venv.single_action_space)
        self._views = [_EnvView(self, i) for i in range(num_envs)]

    # ------------------------------------------------------------ stepping

    def reset(self):
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        obs, info = self.venv.reset(seed=seeds)
        self._bool_masks = None
        self.reset_infos = [self._env_info(info, i) for i in range(self.num_envs)]
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(-1)

    def step_wait(self):
        if self._actions is None:
            raise RuntimeError("step_wait() without step_async()")
        actions, self._actions = self._actions, None
        obs, rewards, terminated, truncated, info = self.venv.step(actions)
        self._bool_masks = None
        dones = terminated | truncated
        infos = []
        for i in range(self.num_envs):
            if dones[i]:
                env_info = self._env_info(info["final_info"], i)
                final = info["final_obs"]
                env_info["terminal_observation"] = ({k: v[i] for k, v in final.items()}
                                                    if isinstance(final, dict) else final[i])
                env_info["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            else:
                env_info = self._env_info(info, i)
            infos.append(env_info)
        return obs, rewards.astype(np.float32), dones, infos

    @staticmethod
    def _env_info(info: dict, i: int) -> dict:
        out = {k: info[k][i].item() for k in PerfDojoVectorEnv._INFO_KEYS if k in info}
        message = info.get("message")
        if message is not None and message[i]:
            out["message"] = str(message[i])
        return out

    def action_masks(self) -> np.ndarray:
        """Every env's legal actions (num_envs x n, bool)."""
        if self._bool_masks is None:
            self._bool_masks = self.venv.action_masks()
        return self._bool_masks

    def close(self) -> None:
        self.venv.close()

    # ------------------------------------------------------------ SB3's per-env access

    def get_attr(self, attr_name: str, indices=None) -> list:
        if not self._views:  # SB3's constructor asks for render_mode before the views exist
            if attr_name == "render_mode":
                return [None for _ in self._get_indices(indices)]
            raise AttributeError(attr_name)
        return [getattr(self._views[i], attr_name) for i in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        for i in self._get_indices(indices):
            setattr(self._views[i], attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list:
        return [getattr(self._views[i], method_name)(*method_args, **method_kwargs)
                for i in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class, indices=None) -> list:
        return [False for _ in self._get_indices(indices)]
