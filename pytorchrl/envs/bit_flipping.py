"""The bit-flipping task of Hindsight Experience Replay (Andrychowicz et al. 2017, section 3.1):
``pytorchrl/BitFlipping-v0``.

The state is ``n_bits`` bits and so is the goal, both drawn uniformly at reset; an action flips
one bit. The reward is -1 until the state equals the goal (then 0 and the episode terminates),
and an episode is truncated after ``n_bits`` steps. With 15 or more bits a random walk almost
never meets its goal, so a learner that only sees -1 rewards learns nothing: the task HER was
made for. The observation is a goal-env Dict (the gymnasium-robotics ``GoalEnv`` API) with
``observation`` equal to ``achieved_goal``, and :meth:`BitFlippingEnv.compute_reward` /
:meth:`~BitFlippingEnv.compute_terminated` are vectorised over leading dimensions, as a replay
buffer that relabels goals needs (:mod:`pytorchrl.agent.storages.off_policy.her`).

``continuous=True`` gives Box actions in ``[-1, 1]^n_bits`` that flip every bit whose action is
positive (SB3's ``BitFlippingEnv`` convention), so that TD3 and SAC can run it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class BitFlippingEnv(gym.Env):
    """Flip bits until they equal the goal.

    :param n_bits: bits of the state and the goal.
    :param continuous: Box actions (flip the bits whose action is > 0) instead of Discrete(n_bits).
    :param max_steps: steps before truncation (None: ``n_bits``, enough to reach any goal).
    """

    def __init__(self, n_bits: int = 15, continuous: bool = False, max_steps: int | None = None) -> None:
        if n_bits < 1:
            raise ValueError(f"n_bits = {n_bits} is out of range: must be >= 1")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps = {max_steps} is out of range: must be >= 1 (or None: n_bits)")
        self.n_bits, self.continuous = n_bits, continuous
        self.max_steps = n_bits if max_steps is None else max_steps
        bits = gym.spaces.Box(0.0, 1.0, (n_bits,), np.float32)
        self.observation_space = gym.spaces.Dict({"observation": bits, "achieved_goal": bits, "desired_goal": bits})
        self.action_space: gym.Space = gym.spaces.Box(-1.0, 1.0, (n_bits,), np.float32) if continuous else gym.spaces.Discrete(n_bits)
        self.state = np.zeros(n_bits, np.float32)
        self.goal = np.zeros(n_bits, np.float32)
        self.t = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"observation": self.state.copy(), "achieved_goal": self.state.copy(), "desired_goal": self.goal.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        self.state = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self.goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        return self._obs(), {"is_success": bool(np.array_equal(self.state, self.goal))}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.continuous:
            flip = np.asarray(action, dtype=np.float32).reshape(self.n_bits) > 0
            self.state = np.where(flip, 1.0 - self.state, self.state).astype(np.float32)
        else:
            bit = int(action)
            self.state[bit] = 1.0 - self.state[bit]
        self.t += 1
        obs = self._obs()
        info = {"is_success": bool(np.array_equal(self.state, self.goal))}
        reward = float(self.compute_reward(obs["achieved_goal"], obs["desired_goal"], info))
        terminated = bool(self.compute_terminated(obs["achieved_goal"], obs["desired_goal"], info))
        return obs, reward, terminated, self.t >= self.max_steps and not terminated, info

    @staticmethod
    def compute_reward(achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any) -> np.ndarray:
        """0 where every bit matches, else -1, over the last axis of ``[..., n_bits]`` arrays."""
        del info  # the reward depends on the goals alone
        return np.where(np.all(np.asarray(achieved_goal) == np.asarray(desired_goal), axis=-1), 0.0, -1.0).astype(np.float32)

    @staticmethod
    def compute_terminated(achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any) -> np.ndarray:
        """Whether every bit matches (the episode ends on success), over ``[..., n_bits]`` arrays."""
        del info
        return np.all(np.asarray(achieved_goal) == np.asarray(desired_goal), axis=-1)

    def compute_truncated(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, info: Any) -> np.ndarray:
        """Never from the goals: truncation is the time limit's (the GoalEnv API asks for it)."""
        del info
        return np.zeros(np.broadcast_shapes(np.shape(achieved_goal), np.shape(desired_goal))[:-1], dtype=bool)


if "pytorchrl/BitFlipping-v0" not in gym.registry:
    gym.register(id="pytorchrl/BitFlipping-v0", entry_point=f"{__name__}:BitFlippingEnv")
