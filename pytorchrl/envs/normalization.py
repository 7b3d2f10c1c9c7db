"""Running statistics for observation normalisation and reward scaling.

Both keep float64 running moments merged batch by batch with the parallel algorithm of
Chan, Golub & LeVeque (1979), so that the result does not depend on how steps are batched.
Each also keeps the moments it had when it last reported (``reported``): what it took in since
is the difference (:meth:`RunningMeanStd.since`, the same formula backwards), which a remote
collection worker sends with each rollout, so that its set merges every worker's into one set
of statistics (:meth:`RunningMeanStd.merge`) and hands that back to all of them. Nothing is
added per step.
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
        self._combine(batch.mean(axis=0), batch.var(axis=0), batch.shape[0])

    def merge(self, state: dict[str, Any]) -> None:
        """Merge the moments of other samples (another :meth:`state_dict`): the result is what
        updating with those samples would have given, up to rounding."""
        count = float(state["count"])
        if count > 0:
            self._combine(np.asarray(as_numpy(state["mean"]), dtype=np.float64), np.asarray(as_numpy(state["var"]), dtype=np.float64), count)

    def since(self, earlier: dict[str, Any]) -> dict[str, Any]:
        """The moments of the samples merged since this held ``earlier`` (a :meth:`state_dict`
        of it then): :meth:`merge` of them into ``earlier`` gives this, up to rounding."""
        n_before = float(earlier["count"])
        n = self.count - n_before
        if n <= 0:
            return {"mean": np.zeros_like(self.mean), "var": np.ones_like(self.var), "count": 0.0}
        mean_before = np.asarray(as_numpy(earlier["mean"]), dtype=np.float64)
        var_before = np.asarray(as_numpy(earlier["var"]), dtype=np.float64)
        mean = (self.mean * self.count - mean_before * n_before) / n
        m2 = self.var * self.count - var_before * n_before - (mean - mean_before) ** 2 * (n_before * n / self.count)
        return {"mean": mean, "var": np.maximum(m2 / n, 0.0), "count": n}

    def _combine(self, mean: np.ndarray, var: np.ndarray, n: float) -> None:
        delta = mean - self.mean
        total = self.count + n
        self.mean = self.mean + delta * (n / total)
        m2 = self.var * self.count + var * n + delta**2 * (self.count * n / total)
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
        #: :attr:`rms` as it was last reported (:func:`take_since`) or set from outside
        self.reported = self.rms.state_dict()
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
        self.reported = self.rms.state_dict()  # as ObservationNormalizer.reported
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


def take_since(normalizer: ObservationNormalizer | RewardScaler) -> dict[str, Any]:
    """The moments ``normalizer`` took in since it last reported, which it now has."""
    since = normalizer.rms.since(normalizer.reported)
    normalizer.reported = normalizer.rms.state_dict()
    return since


def set_statistics(normalizer: ObservationNormalizer | RewardScaler, state: dict[str, Any], *, reported: dict[str, Any] | None = None) -> None:
    """Normalise with ``state`` from here on, ``reported`` (default: all of it) as what was
    reported of it."""
    normalizer.rms.load_state_dict(state)
    if reported is None:
        normalizer.reported = normalizer.rms.state_dict()
    else:  # as a state_dict holds it (a checkpoint's holds tensors)
        earlier = RunningMeanStd()
        earlier.load_state_dict(reported)
        normalizer.reported = earlier.state_dict()
