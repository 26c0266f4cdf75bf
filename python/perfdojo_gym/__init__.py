"""Gymnasium client for PerfDojo: `PerfDojoEnv` talks to `perfdojo serve` (docs/bridge.md).

Importing the package registers "PerfDojo-v0"; `gymnasium.make("perfdojo_gym:PerfDojo-v0")`
imports it by itself.
"""

from gymnasium.envs.registration import register, registry

from .client import (PROTOCOL_VERSION, BridgeConnectionError, BridgeError, Client, LocalServer,
                     find_binary)
from .env import InvalidActionError, PerfDojoEnv, decode_mask

__all__ = [
    "PROTOCOL_VERSION", "BridgeConnectionError", "BridgeError", "Client", "InvalidActionError",
    "LocalServer", "PerfDojoEnv", "decode_mask", "find_binary",
]

# The default backend (cost_model) is deterministic; a measuring backend's env reports
# nondeterministic=True through its spec whatever the registration says (PerfDojoEnv.spec).
# No max_episode_steps here: the C++ env truncates by itself (config max_episode_steps).
if "PerfDojo-v0" not in registry:
    register(id="PerfDojo-v0", entry_point="perfdojo_gym:PerfDojoEnv", nondeterministic=False)
