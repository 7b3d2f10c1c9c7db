"""Algorithms: batches in, gradients out. They never touch an environment."""

from pytorchrl.agent.algorithms.a2c import A2C
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.dqn import DQN
from pytorchrl.agent.algorithms.impala import APPO, IMPALA
from pytorchrl.agent.algorithms.ppo import PPO
from pytorchrl.agent.algorithms.sac import SAC, TD3

ALGORITHMS: dict[str, type[Algorithm]] = {"ppo": PPO, "a2c": A2C, "impala": IMPALA, "appo": APPO, "dqn": DQN, "sac": SAC, "td3": TD3, "ddpg": TD3}

#: algorithms that learn from time-major sequences (V-trace) instead of shuffled transitions
SEQUENCE_ALGORITHMS = ("impala", "appo")

__all__ = ["A2C", "ALGORITHMS", "APPO", "DQN", "IMPALA", "PPO", "SAC", "SEQUENCE_ALGORITHMS", "TD3", "Algorithm"]
