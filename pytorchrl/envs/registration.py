"""pytorchrl's own registered envs (test envs; fault-injection envs come with fault tolerance)."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class SlowCartPoleEnv(CartPoleEnv):
    """CartPole that sleeps ``step_sleep_s`` per step: a stand-in for an expensive simulator."""

    def __init__(self, step_sleep_s: float = 0.001, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_sleep_s = step_sleep_s

    def step(self, action: Any) -> Any:
        time.sleep(self.step_sleep_s)
        return super().step(action)


if "pytorchrl/SlowCartPole-v1" not in gym.registry:
    gym.register(
        id="pytorchrl/SlowCartPole-v1",
        entry_point="pytorchrl.envs.registration:SlowCartPoleEnv",
        max_episode_steps=500,
        reward_threshold=475.0,
    )
