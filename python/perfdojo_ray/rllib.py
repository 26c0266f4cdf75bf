"""PerfDojo for RLlib (Ray 2.48, the new API stack): the env registered under a name, the
action-masking RL module, and a documented PPO config.

Each env runner builds its envs itself, and a `PerfDojoEnv` without an address starts a private
`perfdojo serve` in the runner's process, on the runner's node, and stops it when the runner
closes its envs or exits: rollouts scale with the nodes, and no env crosses the network.

    import ray
    from perfdojo_ray.rllib import ppo_config
    ray.init(address="auto")
    algo = ppo_config(benchmark="perfdojo://suite/softmax", num_env_runners=2).build()
    print(algo.train()["env_runners"]["episode_return_mean"])
"""

from __future__ import annotations

import os
from typing import Optional

from perfdojo_gym import PerfDojoEnv

ENV_NAME = "perfdojo"


def make_env(env_config: Optional[dict] = None) -> PerfDojoEnv:
    """The env an RLlib env runner builds: `PerfDojoEnv(**env_config)` with RLlib's masking
    convention (a dict observation {"observations": features, "action_mask": 0/1 floats}) unless
    env_config says `dict_observation=False`."""
    cfg = dict(env_config or {})
    cfg.setdefault("dict_observation", True)
    return PerfDojoEnv(**cfg)


class PerfDojoRLlibEnv(PerfDojoEnv):
    """`make_env` as a class, which RLlib builds with the env config: what `ppo_config` names,
    so that no registry (per Ray job) has to be filled first."""

    def __init__(self, config: Optional[dict] = None):
        cfg = dict(config or {})
        cfg.setdefault("dict_observation", True)
        super().__init__(**cfg)


def register(name: str = ENV_NAME) -> str:
    """Registers `make_env` with Ray Tune's registry under `name` (what PPOConfig.environment
    names); returns the name."""
    from ray.tune.registry import register_env

    register_env(name, make_env)
    return name


def ppo_config(benchmark: str = "perfdojo://suite/softmax", *, num_env_runners: int = 2,
               masked: bool = True, backend: str = "cost_model", max_episode_steps: int = 10,
               rollout_fragment_length: int = 64, train_batch_size: int = 256,
               minibatch_size: int = 64, num_epochs: int = 2, hidden=(64, 64), seed: int = 0,
               env_config: Optional[dict] = None):
    """A PPOConfig for PerfDojo.

    - `num_env_runners`: remote env runners, one CPU each; Ray spreads them over the nodes that
      have CPUs free, and each starts its own `perfdojo serve` there.
    - `masked`: ActionMaskingTorchRLModule (RLlib's example module) with the dict observation,
      so illegal actions are never sampled; False: the plain PPO module on the features, and an
      illegal action is answered by the env's penalty.
    - `backend`: the env's reward backend; "cost_model" (deterministic, fast) or a measured one
      such as "x86_avx2" (each runner then measures on its own machine).
    - the batch sizes are small so an iteration takes seconds on two cores; scale them up for
      real training.
    """
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    cfg = dict(env_config or {}, benchmark=benchmark, backend=backend,
               max_episode_steps=max_episode_steps, dict_observation=masked)
    config = (
        PPOConfig()
        .environment(PerfDojoRLlibEnv, env_config=cfg)
        .env_runners(num_env_runners=num_env_runners, num_envs_per_env_runner=1,
                     num_cpus_per_env_runner=1, rollout_fragment_length=rollout_fragment_length)
        # A runner whose server died is restarted (with a fresh server), not fatal.
        .fault_tolerance(restart_failed_env_runners=True)
        .training(train_batch_size_per_learner=train_batch_size, minibatch_size=minibatch_size,
                  num_epochs=num_epochs, lr=3e-4)
        .debugging(seed=seed)
    )
    model_config = {"fcnet_hiddens": list(hidden), "head_fcnet_hiddens": list(hidden)}
    if masked:
        from ray.rllib.examples.rl_modules.classes.action_masking_rlm import (
            ActionMaskingTorchRLModule)

        config = config.rl_module(rl_module_spec=RLModuleSpec(
            module_class=ActionMaskingTorchRLModule, model_config=model_config))
    else:
        config = config.rl_module(model_config=model_config)
    return config


def runner_info(env_runner) -> dict:
    """Where an env runner runs and which `perfdojo serve` processes it started (for
    `algo.env_runner_group.foreach_env_runner(runner_info)`)."""
    import ray
    from perfdojo_gym import client

    servers = [entry[0] for entry in client._servers.values()]
    return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
            "servers": [{"pid": s.proc.pid, "port": s.port, "alive": s.alive()} for s in servers]}
