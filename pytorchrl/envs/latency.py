"""An env that stands in for a slow simulator or game engine: each step sleeps.

Scale tests need many env workers on a small machine. A real simulator spends its step time on
a CPU the worker owns; ``pytorchrl/Latency-v0`` spends it asleep, so dozens of workers share two
cores while their steps still take as long as a game's would, and what is measured is the cost of
everything around the env (acting, inference requests, storage), as a cluster whose nodes bring
their own cores would see it.

Observations default to Atari's shape after the usual preprocessing (4 stacked 84x84 frames,
``uint8``, channels first), so a Nature CNN acts on them; they cycle through a few fixed frames,
which costs no CPU. The reward is 1 when the action equals the index of the frame shown modulo
the number of actions, so a policy can learn it, but the env is for measuring, not learning.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

#: distinct frames an episode cycles through
_FRAMES = 8


class LatencyEnv(gym.Env):
    """Each :meth:`step` sleeps ``step_ms`` milliseconds, then returns one of a few fixed frames.

    :param step_ms: the sleep of one step (a game's frame time: 20 ms is 50 steps/s).
    :param obs_shape: the observation's shape (``uint8``).
    :param num_actions: the size of the ``Discrete`` action space.
    :param episode_steps: steps per episode (then ``terminated``).
    """

    def __init__(self, step_ms: float = 20.0, obs_shape: tuple[int, ...] = (4, 84, 84), num_actions: int = 6, episode_steps: int = 1000) -> None:
        if step_ms < 0 or episode_steps < 1 or num_actions < 1:
            raise ValueError(f"LatencyEnv: step_ms >= 0, episode_steps >= 1 and num_actions >= 1, got {step_ms}, {episode_steps}, {num_actions}")
        self.step_s, self.episode_steps = step_ms / 1000.0, episode_steps
        shape = tuple(int(n) for n in obs_shape)
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.num_actions = num_actions
        self.action_space = gym.spaces.Discrete(num_actions)
        rng = np.random.default_rng(0)
        self._frames = rng.integers(0, 256, (_FRAMES, *shape), dtype=np.uint8)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(_FRAMES))  # where in the cycle this episode starts
        self._steps = 0
        return self._frames[self.t % _FRAMES], {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.step_s:
            time.sleep(self.step_s)
        reward = float(int(action) == self.t % self.num_actions)
        self.t += 1
        self._steps += 1
        return self._frames[self.t % _FRAMES], reward, self._steps >= self.episode_steps, False, {}
