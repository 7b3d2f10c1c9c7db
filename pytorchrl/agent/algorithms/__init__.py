"""Algorithms: batches in, gradients out. They never touch an environment."""

from pytorchrl.agent.algorithms.a2c import A2C
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.ppo import PPO

ALGORITHMS: dict[str, type[Algorithm]] = {"ppo": PPO, "a2c": A2C}

__all__ = ["A2C", "ALGORITHMS", "PPO", "Algorithm"]
