"""Algorithms: batches in, gradients out. They never touch an environment.

:data:`ALGORITHMS` is the registry ``build_scheme`` reads: ``algorithm.name`` to the class,
which declares its own config class, spaces and wiring (:mod:`~pytorchrl.agent.algorithms.wiring`).
"""

from pytorchrl.agent.algorithms.a2c import A2C
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.dqn import DQN
from pytorchrl.agent.algorithms.impala import APPO, IMPALA
from pytorchrl.agent.algorithms.ppo import PPO
from pytorchrl.agent.algorithms.sac import DDPG, SAC, TD3
from pytorchrl.agent.algorithms.wiring import Wiring, wire

ALGORITHMS: dict[str, type[Algorithm]] = {"ppo": PPO, "a2c": A2C, "impala": IMPALA, "appo": APPO, "dqn": DQN, "sac": SAC, "td3": TD3, "ddpg": DDPG}

__all__ = ["A2C", "ALGORITHMS", "APPO", "DDPG", "DQN", "IMPALA", "PPO", "SAC", "TD3", "Algorithm", "Wiring", "wire"]
