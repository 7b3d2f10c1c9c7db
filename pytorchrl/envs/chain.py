"""A small hard-exploration env: a chain whose only real reward is at its far end, behind a
distractor (``pytorchrl/Chain-v0``).

The agent stands on one of ``length`` cells, starting at cell 0. In each cell one of the two
actions moves it one cell right and the other sends it back to cell 0 and pays ``distractor``
(a small reward always in reach); which is which differs from cell to cell (a fixed pattern, as
in DeepSea, Osband et al. 2019), so no constant action walks the chain. Reaching the last cell pays 1 and ends the episode; otherwise an episode lasts
30 steps (the registered time limit, twice the default length; set
``env.max_episode_steps`` for a longer chain). A random policy reaches the end with probability about
``length * 2 ** -(length - 1)`` per episode, and policy-gradient methods learn the distractor
long before they see the end; an exploration bonus that values new cells (RND) walks on.
Observations are the one-hot cell (``float32``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np


class ChainEnv(gym.Env):
    """The chain (module doc).

    :param length: cells, the start and the goal included (>= 2).
    :param distractor: reward of action 0 (going back to the start).
    """

    def __init__(self, length: int = 15, distractor: float = 0.01) -> None:
        if length < 2:
            raise ValueError(f"ChainEnv: length must be >= 2, got {length}")
        self.length, self.distractor = int(length), float(distractor)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.length,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        #: the action that moves right, per cell: fixed for a length, the same in every env
        self.right = np.random.default_rng(self.length).integers(0, 2, self.length)
        self.cell = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length, dtype=np.float32)
        obs[self.cell] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.cell = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if int(action) == self.right[self.cell]:
            self.cell += 1
            if self.cell == self.length - 1:
                return self._obs(), 1.0, True, False, {"is_success": True}
            return self._obs(), 0.0, False, False, {}
        self.cell = 0
        return self._obs(), self.distractor, False, False, {}


if "pytorchrl/Chain-v0" not in gym.registry:
    gym.register(id="pytorchrl/Chain-v0", entry_point=f"{__name__}:ChainEnv", max_episode_steps=30)


def write_chain_demos(directory: str | Path, num: int = 5, *, length: int = 15, max_episode_steps: int | None = None) -> list[Path]:
    """``num`` demonstrations of ``pytorchrl/Chain-v0`` (``length`` cells) from a scripted policy,
    as ``directory/demo_NNN.npz`` (:func:`~pytorchrl.agent.storages.on_policy.demos.save_demo`):
    demonstration ``k`` walks right but for one step back to the start at cell ``k`` (``k`` > 0),
    so they differ and each reaches the goal (the time limit must allow ``length + num`` steps).
    """
    from pytorchrl.agent.storages.on_policy.demos import record_scripted, save_demo

    steps = max_episode_steps or 2 * length
    if steps < length + num:
        raise ValueError(f"write_chain_demos: {num} demonstrations of a {length}-cell chain need max_episode_steps >= {length + num}, got {steps}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(num):
        env = gym.make("pytorchrl/Chain-v0", length=length, max_episode_steps=steps)
        chain: Any = env.unwrapped
        detour = [k > 0]  # one step back at cell k, once

        def choose(_env: Any, _obs: np.ndarray, chain: Any = chain, detour: list[bool] = detour, k: int = k) -> int:
            if detour[0] and chain.cell == k:
                detour[0] = False
                return int(1 - chain.right[chain.cell])
            return int(chain.right[chain.cell])

        obs, actions, rewards = record_scripted(env, choose)
        env.close()
        paths.append(save_demo(directory / f"demo_{k:03d}.npz", obs=obs, actions=actions.astype(np.int64), rewards=rewards, env_id="pytorchrl/Chain-v0"))
    return paths
