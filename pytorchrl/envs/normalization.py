"""Running statistics for observation normalisation and reward scaling.

Both keep float64 running moments merged batch by batch with the parallel algorithm of
Chan, Golub & LeVeque (1979), so that the result does not depend on how steps are batched.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pytorchrl.utils.arrays import as_numpy


class RunningMeanStd:
    """Running mean and variance of a stream of arrays of shape ``shape``."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = epsilon

    def update(self, batch: np.ndarray) -> None:
        """Merge a batch whose first axis indexes samples."""
        batch_mean = batch.mean(axis=0)
        batch_var = batch.var(axis=0)
        n = batch.shape[0]
        delta = batch_mean - self.mean
        total = self.count + n
        self.mean = self.mean + delta * (n / total)
        m2 = self.var * self.count + batch_var * n + delta**2 * (self.count * n / total)
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict[str, Any]:
        return {"mean": np.array(self.mean), "var": np.array(self.var), "count": float(self.count)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean = np.array(as_numpy(state["mean"]), dtype=np.float64)
        self.var = np.array(as_numpy(state["var"]), dtype=np.float64)
        self.count = float(state["count"])


class ObservationNormalizer:
    """``clip((obs - mean) / sqrt(var + eps))`` with running statistics."""

    def __init__(self, shape: tuple[int, ...], *, clip: float, epsilon: float = 1e-8) -> None:
        self.rms = RunningMeanStd(shape)
        self.clip = clip
        self.epsilon = epsilon
        self.frozen = False

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return self.normalize(obs, update=not self.frozen)

    def normalize(self, obs: np.ndarray, *, update: bool) -> np.ndarray:
        """Normalise a batch of observations, first merging it into the statistics if ``update``."""
        if update:
            self.rms.update(obs)
        out = (obs - self.rms.mean) / np.sqrt(self.rms.var + self.epsilon)
        return np.clip(out, -self.clip, self.clip).astype(np.float32)


class RewardScaler:
    """Divide rewards by the running std of the discounted return (Engstrom et al. 2020, §3)."""

    def __init__(self, num_envs: int, *, gamma: float, clip: float, epsilon: float = 1e-8) -> None:
        self.rms = RunningMeanStd(())
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.gamma = gamma
        self.clip = clip
        self.epsilon = epsilon

    def __call__(self, reward: np.ndarray, done: np.ndarray) -> np.ndarray:
        self.returns = self.returns * self.gamma + reward
        self.rms.update(self.returns)
        self.returns[done] = 0.0
        out = reward / np.sqrt(self.rms.var + self.epsilon)
        return np.clip(out, -self.clip, self.clip).astype(np.float32)
