"""pytorchrl's own registered envs: a slow CartPole (a stand-in for an expensive simulator), a
crashing one (fault injection, so anyone can reproduce the fault-tolerance runs), and two tiny
sanity envs for the encoders that learn in seconds: an image task a CNN must see
(``pytorchrl/ImageSide-v0``) and a Dict task that needs every key (``pytorchrl/DictTarget-v0``);
and CartPole and Pendulum without their velocities (``pytorchrl/CartPoleNoVelocity-v1``,
``pytorchrl/PendulumNoVelocity-v1``), which only a policy with memory can solve; and HER's bit-flipping
goal env (``pytorchrl/BitFlipping-v0``, in :mod:`pytorchrl.envs.bit_flipping`)."""

from __future__ import annotations

import os
import time
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.classic_control.pendulum import PendulumEnv


class SlowCartPoleEnv(CartPoleEnv):
    """CartPole that sleeps ``step_sleep_s`` per step: a stand-in for an expensive simulator."""

    def __init__(self, step_sleep_s: float = 0.001, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_sleep_s = step_sleep_s

    def step(self, action: Any) -> Any:
        time.sleep(self.step_sleep_s)
        return super().step(action)


class EnvCrash(RuntimeError):
    """The failure ``pytorchrl/CrashingCartPole-v1`` injects with ``crash_mode: exception``."""


class CrashingCartPoleEnv(CartPoleEnv):
    """CartPole that fails at random: each ``step`` crashes with probability ``p_crash`` and
    stalls for ``stall_s`` seconds with probability ``p_stall``.

    The draws come from the env's own generator (seeded by ``reset(seed=...)``), so a seeded run
    crashes at the same steps every time.

    :param p_crash: crash probability per step.
    :param crash_mode: ``exception`` raises :class:`EnvCrash` from ``step``; ``exit`` ends the
        whole process at once (``os._exit``), as a segfault or an OOM kill would: use it in remote
        workers, it ends a local run.
    :param p_stall: probability per step of sleeping ``stall_s`` seconds first (a hung simulator).
    :param stall_s: length of a stall.
    :param crash_after_steps: also crash, for certain, at this step of the env's life (counted
        over episodes): a fault that comes back at the same point in every replacement.
    :param stall_after_steps: also stall, for certain, at this step of the env's life.
    """

    def __init__(
        self,
        p_crash: float = 0.0,
        crash_mode: str = "exception",
        p_stall: float = 0.0,
        stall_s: float = 0.0,
        crash_after_steps: int | None = None,
        stall_after_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        if crash_mode not in ("exception", "exit"):
            raise ValueError(f"crash_mode = {crash_mode!r} is not allowed: must be 'exception' or 'exit'")
        for name, p in (("p_crash", p_crash), ("p_stall", p_stall)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} = {p} is out of range: must be in [0, 1]")
        super().__init__(**kwargs)
        self.p_crash, self.crash_mode, self.p_stall, self.stall_s = p_crash, crash_mode, p_stall, stall_s
        self.crash_after_steps, self.stall_after_steps = crash_after_steps, stall_after_steps
        self.steps_taken = 0

    def step(self, action: Any) -> Any:
        self.steps_taken += 1
        if (self.p_stall and self.np_random.random() < self.p_stall) or self.steps_taken == self.stall_after_steps:
            time.sleep(self.stall_s)
        if (self.p_crash and self.np_random.random() < self.p_crash) or self.steps_taken == self.crash_after_steps:
            if self.crash_mode == "exit":
                os._exit(13)
            raise EnvCrash("pytorchrl/CrashingCartPole-v1 crashed (injected fault)")
        return super().step(action)


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


class ImageSideEnv(gym.Env):
    """A ``uint8`` image with one bright square on the left or the right half; the action must
    name the side (reward 1, else 0). Episodes of ``episode_length`` independent images, so the
    best return is ``episode_length``; a policy that cannot see scores half of it.

    :param size: image height and width.
    :param channels_last: ``(size, size, 1)`` instead of ``(1, size, size)``.
    :param episode_length: images per episode.
    """

    def __init__(self, size: int = 36, channels_last: bool = False, episode_length: int = 8) -> None:
        self.size, self.channels_last, self.episode_length = size, channels_last, episode_length
        shape = (size, size, 1) if channels_last else (1, size, size)
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.side, self.t = 0, 0

    def _obs(self) -> np.ndarray:
        img = np.zeros((self.size, self.size), np.uint8)
        half, block = self.size // 2, max(2, self.size // 6)
        row = int(self.np_random.integers(0, self.size - block))
        col = int(self.np_random.integers(0, half - block)) + half * self.side
        img[row : row + block, col : col + block] = 255
        return img[:, :, None] if self.channels_last else img[None]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t, self.side = 0, int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = float(int(action) == self.side)
        self.t += 1
        self.side = int(self.np_random.integers(2))
        return self._obs(), reward, self.t >= self.episode_length, False, {}


class DictTargetEnv(gym.Env):
    """A Dict observation ``{"target": Discrete(n), "noise": Box(2)}``: the action must equal the
    target (reward 1). Only the Discrete key carries the answer, so solving it needs the Dict
    encoder's one-hot of that key; the Box key is a distraction. ``episode_length`` steps."""

    def __init__(self, n: int = 4, episode_length: int = 8) -> None:
        self.n, self.episode_length = n, episode_length
        self.observation_space = gym.spaces.Dict({"target": gym.spaces.Discrete(n), "noise": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})
        self.action_space = gym.spaces.Discrete(n)
        self.target, self.t = 0, 0

    def _obs(self) -> dict[str, Any]:
        self.target = int(self.np_random.integers(self.n))
        return {"target": self.target, "noise": self.np_random.uniform(-1, 1, 2).astype(np.float32)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        reward = float(int(action) == self.target)
        self.t += 1
        return self._obs(), reward, self.t >= self.episode_length, False, {}


for _name, _toy in (("ImageSide-v0", ImageSideEnv), ("DictTarget-v0", DictTargetEnv)):
    if f"pytorchrl/{_name}" not in gym.registry:
        gym.register(id=f"pytorchrl/{_name}", entry_point=f"{__name__}:{_toy.__name__}")

if "pytorchrl/PendulumNoVelocity-v1" not in gym.registry:
    gym.register(id="pytorchrl/PendulumNoVelocity-v1", entry_point=f"{__name__}:PendulumNoVelocityEnv", max_episode_steps=200)

# CartPole's registration, under pytorchrl's names
for _name, _cls in (("SlowCartPole-v1", SlowCartPoleEnv), ("CrashingCartPole-v1", CrashingCartPoleEnv), ("CartPoleNoVelocity-v1", CartPoleNoVelocityEnv)):
    if f"pytorchrl/{_name}" not in gym.registry:
        gym.register(id=f"pytorchrl/{_name}", entry_point=f"{__name__}:{_cls.__name__}", max_episode_steps=500, reward_threshold=475.0)

if "pytorchrl/Latency-v0" not in gym.registry:  # a slow simulator's stand-in for scale tests
    gym.register(id="pytorchrl/Latency-v0", entry_point="pytorchrl.envs.latency:LatencyEnv")

from pytorchrl.envs import bit_flipping as _bit_flipping  # noqa: E402, F401  (registers pytorchrl/BitFlipping-v0)
