"""Two tiny sanity envs for the encoders, which learn in seconds: an image task a CNN must see
(:class:`ImageSideEnv`) and a Dict task that needs every key (:class:`DictTargetEnv`).

Test-only (not in the library): tests name them as ``env.env_id`` in the ``module:function``
form (:data:`IMAGE_SIDE`, :data:`DICT_TARGET`), which remote Ray workers and the CLI's
subprocesses resolve by importing this module.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

#: ``env.env_id`` of the two envs
IMAGE_SIDE = f"{__name__}:ImageSideEnv"
DICT_TARGET = f"{__name__}:DictTargetEnv"


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
