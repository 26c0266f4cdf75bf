"""Gymnasium client for PerfDojo: `PerfDojoEnv` talks to `perfdojo serve` (docs/bridge.md).

Importing the package registers "PerfDojo-v0"; `gymnasium.make("perfdojo_gym:PerfDojo-v0")`
imports it by itself.
"""

from gymnasium.envs.registration import register, registry

from .client import (PROTOCOL_VERSION, BridgeConnectionError, BridgeError, Client, LocalServer,
                     SharedServer, find_binary)
from .env import InvalidActionError, PerfDojoEnv, decode_mask, require_spaces
from .vector import PerfDojoVectorEnv

__all__ = [
    "PROTOCOL_VERSION", "BridgeConnectionError", "BridgeError", "Client", "InvalidActionError",
    "LocalServer", "PerfDojoEnv", "PerfDojoVectorEnv", "SharedServer", "decode_mask", "find_binary",
    "require_spaces",
]

# The default backend (cost_model) is deterministic; a measuring backend's env reports
# nondeterministic=True through its spec whatever the registration says (PerfDojoEnv.spec).
# gym.make applies Gymnasium's TimeLimit (30 steps unless max_episode_steps says otherwise) and
# the env then leaves truncation to it; PerfDojoEnv made directly truncates in C++ (its config's
# max_episode_steps, 30 by default). make_vec with vectorization_mode="vector_entry_point" gives
# PerfDojoVectorEnv: N envs stepped in one round trip.
if "PerfDojo-v0" not in registry:
    register(id="PerfDojo-v0", entry_point="perfdojo_gym:PerfDojoEnv", nondeterministic=False,
             max_episode_steps=30, vector_entry_point="perfdojo_gym:PerfDojoVectorEnv")
