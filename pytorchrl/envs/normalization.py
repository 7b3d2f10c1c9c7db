"""Running statistics for observation normalisation and reward scaling.

Both keep float64 running moments merged batch by batch with the parallel algorithm of
Chan, Golub & LeVeque (1979), so that the result does not depend on how steps are batched.
Each also keeps the moments it had when it last reported (``reported``): what it took in since
is the difference (:meth:`RunningMeanStd.since`, the same formula backwards), which a remote
collection worker sends with each rollout, so that its set merges every worker's into one set
of statistics (:meth:`RunningMeanStd.merge`) and hands that back to all of them. Nothing is
added per step. A set's merge reports in turn, the same way, to the update worker, which merges
the remote gradient workers' sets (:class:`MergedStatistics`).
"""

from __future__ import annotations

from typing import Any, Protocol

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

    def __call__(self, reward: np.ndarray, done: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Scale one step's rewards. ``valid`` (default: all) names the steps that are
        transitions: the reset steps of next-step autoreset are none (reward 0), so they add no
        sample of the return, as a same-step reset has none to add (Stable-Baselines3's
        ``VecNormalize``)."""
        self.returns = self.returns * self.gamma + reward
        samples = self.returns if valid is None or valid.all() else self.returns[valid]  # a copy only on reset steps
        if samples.size:
            self.rms.update(samples)
        self.returns[done] = 0.0
        out = reward / np.sqrt(self.rms.var + self.epsilon)
        return np.clip(out, -self.clip, self.clip).astype(np.float32)


class Reporting(Protocol):
    """Running moments that report what they took in since they last did: a normaliser, or a
    :class:`MergedStatistics`' entry."""

    rms: RunningMeanStd
    reported: dict[str, Any]


def take_since(normalizer: Reporting) -> dict[str, Any]:
    """The moments ``normalizer`` took in since it last reported, which it now has."""
    since = normalizer.rms.since(normalizer.reported)
    normalizer.reported = normalizer.rms.state_dict()
    return since


def set_statistics(normalizer: Reporting, state: dict[str, Any], *, reported: dict[str, Any] | None = None) -> None:
    """Normalise with ``state`` from here on, ``reported`` (default: all of it) as what was
    reported of it."""
    normalizer.rms.load_state_dict(state)
    if reported is None:
        normalizer.reported = normalizer.rms.state_dict()
    else:  # as a state_dict holds it (a checkpoint's holds tensors)
        earlier = RunningMeanStd()
        earlier.load_state_dict(reported)
        normalizer.reported = earlier.state_dict()


def rebase(normalizer: Reporting, merged: dict[str, Any]) -> None:
    """Go on from ``merged`` (a merge of every reporter's statistics, which holds what this one
    reported) plus what ``normalizer`` took in since it last reported, which it does not hold yet."""
    since = normalizer.rms.since(normalizer.reported)
    set_statistics(normalizer, merged)
    normalizer.rms.merge(since)


class _Entry:
    """One key's merged moments and what of them was last reported up (:class:`Reporting`)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.rms = RunningMeanStd(shape)
        self.reported = self.rms.state_dict()  # the prior: nothing merged is reported yet


class MergedStatistics:
    """Normaliser statistics merged from the reports of several reporters, keyed as
    :meth:`VecEnv.running_statistics <pytorchrl.envs.vec_env.VecEnv.running_statistics>`
    (``obs_rms``, ``ret_rms``; empty until a report comes in).

    A collection set merges its remote workers' reports (:meth:`merge`) and sends the merge
    (:meth:`state`) with each rollout it asks for. A set that belongs to a remote gradient worker
    is itself a reporter to the update worker: it reports what it merged since it last reported
    (:meth:`take_new`) and goes on from the update worker's merge of every replica's
    (:meth:`rebase`), as a normaliser does with its set's."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __bool__(self) -> bool:
        return bool(self._entries)

    def _entry(self, key: str, state: dict[str, Any]) -> _Entry:
        if key not in self._entries:  # the first report: merged into the prior a normaliser starts from
            self._entries[key] = _Entry(np.shape(as_numpy(state["mean"])))
        return self._entries[key]

    def merge(self, new: dict[str, Any]) -> None:
        """Merge a reporter's new moments (keyed ``{key: RunningMeanStd.state_dict()}``)."""
        for key, moments in new.items():
            self._entry(key, moments).rms.merge(moments)

    def set(self, statistics: dict[str, Any], reported: dict[str, Any] | None = None) -> None:
        """Make ``statistics`` the merge: a checkpoint's, with what of it was reported up
        (``reported``, keyed alike, :meth:`reported`; None: all of it, as a checkpoint from before
        that key holds), or a surviving worker's statistics given to a replacement (all of it)."""
        self._entries = {}
        for key, state in statistics.items():
            set_statistics(self._entry(key, state), state, reported=None if reported is None else reported.get(key))

    def state(self, *reports: dict[str, Any]) -> dict[str, Any]:
        """The merge, keyed ``{key: RunningMeanStd.state_dict()}`` (empty before any report);
        with ``reports`` not taken in yet (a checkpoint's calls under way) merged into a copy,
        this merge unchanged."""
        if reports:
            copy = MergedStatistics()
            copy.set(self.state(), self.reported())
            for new in reports:
                copy.merge(new)
            return copy.state()
        return {key: entry.rms.state_dict() for key, entry in self._entries.items()}

    def reported(self) -> dict[str, Any]:
        """What of the merge was last reported up, keyed as :meth:`state` (a checkpoint keeps it
        beside the merge, so that what was not reported yet is reported after the load)."""
        return {key: dict(entry.reported) for key, entry in self._entries.items()}

    def take_new(self) -> dict[str, Any]:
        """What was merged since the last call, keyed as :meth:`merge` takes it."""
        return {key: take_since(entry) for key, entry in self._entries.items()}

    def rebase(self, merged: dict[str, Any]) -> None:
        """Go on from ``merged`` (the merge of every reporter's reports, this one's among them)
        plus what this merged since it last reported (:func:`rebase`)."""
        for key, state in merged.items():
            rebase(self._entry(key, state), state)
