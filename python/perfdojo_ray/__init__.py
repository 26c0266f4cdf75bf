"""PerfDojo on a Ray cluster (docs/ray.md).

- `perfdojo_ray.rllib`: the env registered for RLlib, the action-masking module and a PPO config
  whose env runners each start and stop a `perfdojo serve` on their own node.
- `perfdojo_ray.farm`: the measurement farm behind `perfdojo optimize --workers ray://ADDRESS`,
  one measuring actor per node (each with its own calibrated profile), results cached by program
  hash and machine profile.

Ray is imported by the submodules only, so `import perfdojo_ray` works without it.
"""
