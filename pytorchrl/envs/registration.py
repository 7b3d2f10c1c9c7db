"""pytorchrl's own registered envs: CartPole and Pendulum without their velocities
(``pytorchrl/CartPoleNoVelocity-v1``, ``pytorchrl/PendulumNoVelocity-v1``), which only a policy
with memory can solve, ``pytorchrl/Latency-v0`` (:mod:`pytorchrl.envs.latency`), a slow
simulator's stand-in, and HER's bit-flipping goal env (``pytorchrl/BitFlipping-v0``, in
:mod:`pytorchrl.envs.bit_flipping`). The instrumented envs of the benchmarks and tests (a slow
and a crashing CartPole, tiny image and Dict tasks) live in a checkout's ``benchmarks/envs.py``
and ``tests/envs_for_tests.py``, not in the library."""

from __future__ import annotations

from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.classic_control.pendulum import PendulumEnv


class CartPoleNoVelocityEnv(CartPoleEnv):
    """CartPole observing only the cart position and the pole angle: the velocities must be
    inferred from consecutive observations, so a memoryless policy cannot balance for long
    (the partially observable CartPole of the recurrent-RL literature, e.g. Meng et al. 2021)."""

    #: what is kept of CartPole's state (x, x_dot, theta, theta_dot)
    KEPT = (0, 2)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        high = np.asarray(cast(gym.spaces.Box, self.observation_space).high, dtype=np.float32)[list(self.KEPT)]
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        return obs[list(self.KEPT)], info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs[list(self.KEPT)], reward, terminated, truncated, info


class PendulumNoVelocityEnv(PendulumEnv):
    """Pendulum observing only ``cos`` and ``sin`` of its angle: the angular velocity must be
    inferred from consecutive observations (a continuous-action task for recurrent SAC)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        return obs[:2], info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs[:2], reward, terminated, truncated, info


if "pytorchrl/PendulumNoVelocity-v1" not in gym.registry:
    gym.register(id="pytorchrl/PendulumNoVelocity-v1", entry_point=f"{__name__}:PendulumNoVelocityEnv", max_episode_steps=200)

# CartPole's registration, under pytorchrl's name
if "pytorchrl/CartPoleNoVelocity-v1" not in gym.registry:
    gym.register(id="pytorchrl/CartPoleNoVelocity-v1", entry_point=f"{__name__}:CartPoleNoVelocityEnv", max_episode_steps=500, reward_threshold=475.0)

if "pytorchrl/Latency-v0" not in gym.registry:  # a slow simulator's stand-in for scale tests
    gym.register(id="pytorchrl/Latency-v0", entry_point="pytorchrl.envs.latency:LatencyEnv")

from pytorchrl.envs import bit_flipping as _bit_flipping  # noqa: E402, F401  (registers pytorchrl/BitFlipping-v0)
