"""Algorithms: batches in, gradients out. They never touch an environment.

:data:`ALGORITHMS` is the registry, the only list of algorithm names: ``algorithm.name`` to the
class, which declares its own config class (in its module, with its defaults, checks and what
the memory estimate needs), spaces, metrics and wiring (:mod:`~pytorchrl.agent.algorithms.wiring`).
The config loader and ``build_scheme`` resolve ``algorithm.name`` through it.
"""

from pytorchrl.agent.algorithms.a2c import A2C, A2CConfig
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.dqn import DQN, DQNConfig
from pytorchrl.agent.algorithms.families import OnPolicyConfig, ReplayConfig
from pytorchrl.agent.algorithms.impala import APPO, IMPALA, APPOConfig, IMPALAConfig
from pytorchrl.agent.algorithms.mpc import MPC, MPCConfig
from pytorchrl.agent.algorithms.mpo import MPO, MPOConfig
from pytorchrl.agent.algorithms.ppo import PPO, PPOConfig
from pytorchrl.agent.algorithms.sac import DDPG, SAC, TD3, DDPGConfig, SACConfig, TD3Config
from pytorchrl.agent.algorithms.wiring import Wiring, wire

ALGORITHMS: dict[str, type[Algorithm]] = {
    "ppo": PPO, "a2c": A2C, "impala": IMPALA, "appo": APPO, "dqn": DQN, "sac": SAC, "td3": TD3, "ddpg": DDPG, "mpo": MPO, "mpc": MPC,
}

__all__ = [
    "A2C",
    "ALGORITHMS",
    "APPO",
    "DDPG",
    "DQN",
    "IMPALA",
    "MPC",
    "MPO",
    "PPO",
    "SAC",
    "TD3",
    "A2CConfig",
    "APPOConfig",
    "Algorithm",
    "DDPGConfig",
    "DQNConfig",
    "IMPALAConfig",
    "MPCConfig",
    "MPOConfig",
    "OnPolicyConfig",
    "PPOConfig",
    "ReplayConfig",
    "SACConfig",
    "TD3Config",
    "Wiring",
    "wire",
]
