"""Sequence replay for recurrent Q-learning (R2D2, Kapturowski et al. 2019).

Collection workers send rollouts as for any replay algorithm (tagged with their stream, see
:mod:`.replay_storage`), plus the recurrent state their actor acted on at every step and the
episode-start flags (:mod:`pytorchrl.agent.storages.on_policy.rollout`). On the gradient side,
:class:`SequenceBuffer` cuts each env's stream into windows of ``sequence_length`` steps that
start every ``(sequence_length - burn_in) // 2`` steps, each stored with ``sequence_length + 1`` observations (the last one bootstraps), its step fields,
its episode-start flags and the stored state at its first step. A window's loss is on its steps
after the burn-in, so windows that start every half of that part learn from each step twice (once
more where the half is not whole), as R2D2's burn-in and trace with a period of half the trace
do; a stride of half the window would leave steps that no window learns from once the burn-in
passes half of it. A window may span rollouts of
the same stream (the buffer keeps each stream's unfinished tail) and episodes (the recurrence
resets at ``starts``; returns stop at episode ends; reset steps are masked), so no step is
padded or lost.

Windows are the sampled unit: a prioritized sampler keeps one priority per window, which the
algorithm sets to ``eta * max + (1 - eta) * mean`` of the window's absolute TD errors.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, ClassVar

import numpy as np
import torch

from pytorchrl.agent.storages.off_policy.replay import Sampler, UniformSampler
from pytorchrl.agent.storages.off_policy.replay_storage import ReplayStorage
from pytorchrl.utils.arrays import as_numpy

#: per-step fields of a window (``obs`` and ``starts`` have one row more)
STEP_FIELDS = ("actions", "rewards", "terminated", "truncated", "valid")
#: a stream's tail is dropped when it has not grown for this many add_data calls (a stopped worker)
STALE_ADDS = 1_000


class SequenceBuffer:
    """A ring of overlapping windows of env streams (see the module doc).

    :param capacity: transitions the buffer covers; it holds ``capacity // stride`` windows.
    :param sequence_length: steps per window.
    :param burn_in: its first steps, which only warm up the recurrent state (no loss on them).
    :param sampler: how windows are drawn (default uniform); the buffer keeps its own copy.
    :param device: where sampled batches are placed.
    """

    def __init__(
        self, *, capacity: int, sequence_length: int, burn_in: int = 0, sampler: Sampler | None = None, device: str | torch.device = "cpu",
    ) -> None:
        if sequence_length < 2 or capacity < sequence_length or not 0 <= burn_in < sequence_length:
            raise ValueError(
                f"SequenceBuffer: need sequence_length >= 2, capacity >= sequence_length and 0 <= burn_in < sequence_length; got {sequence_length}, {capacity}, {burn_in}"
            )
        self.length = sequence_length
        self.stride = max(1, (sequence_length - burn_in) // 2)  # each step learned from twice (module doc)
        self.num_slots = max(1, capacity // self.stride)
        self.device = torch.device(device)
        self.sampler = copy.deepcopy(sampler) if sampler is not None else UniformSampler()
        self.sampler.bind(self.num_slots)
        self._arrays: dict[str, np.ndarray] = {}
        self._written = 0  # windows written since the start
        self._num_ready = 0
        self._adds = 0
        # stream_id -> (last chunk_index, add count when it last grew, the unfinished tail)
        self._tails: dict[int, tuple[int, int, dict[str, np.ndarray]]] = {}

    @property
    def size(self) -> int:
        """Windows stored."""
        return min(self._written, self.num_slots)

    @property
    def num_samples(self) -> int:
        """Transitions the sampleable windows cover (``stride`` new steps per window)."""
        return self._num_ready * self.stride

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._arrays.values()) + self.sampler.nbytes

    def _allocate(self, windows: dict[str, np.ndarray]) -> None:
        c = self.num_slots
        self._arrays = {k: np.zeros((c, *v.shape[1:]), dtype=v.dtype) for k, v in windows.items()}
        self._arrays["ready"] = np.zeros(c, dtype=bool)

    # ------------------------------------------------------------------ adding

    def add_data(self, data: dict[str, Any], priorities: Any = None) -> None:
        """Add a recurrent rollout (``obs [T + 1, N]``, step fields ``[T, N]``, ``starts
        [T + 1, N]``, ``states [T, N, S]`` and optionally ``stream_id``/``chunk_index``) and
        store every window it completes. ``priorities`` is not used (windows start at the
        largest priority so far)."""
        del priorities
        self._adds += 1
        new = {"obs": as_numpy(data["obs"]), "starts": as_numpy(data["starts"]), "states": as_numpy(data["states"])}
        new.update({k: as_numpy(data[k]) for k in STEP_FIELDS})
        n = new["rewards"].shape[1]
        stream = (int(data["stream_id"]), int(data["chunk_index"])) if "stream_id" in data else None
        entry = None if stream is None else self._tails.get(stream[0])
        if entry is not None and stream is not None and stream[1] == entry[0] + 1 and entry[2]["rewards"].shape[1] == n:
            tail = entry[2]
            new = {k: np.concatenate([tail[k][:-1] if k in ("obs", "starts") else tail[k], v]) for k, v in new.items()}
        # window starts every stride steps (the combined data starts at one); all of them at once
        starts = np.arange(0, new["rewards"].shape[0] - self.length + 1, self.stride)
        if len(starts):
            steps = starts[:, None] + np.arange(self.length)  # [W, L]
            with_bootstrap = starts[:, None] + np.arange(self.length + 1)

            def cut(x: np.ndarray, rows: np.ndarray) -> np.ndarray:  # [W, L, N, ...] -> [W * N, L, ...]
                return np.swapaxes(x[rows], 1, 2).reshape(len(starts) * n, rows.shape[1], *x.shape[2:])

            windows = {k: cut(new[k], steps) for k in STEP_FIELDS}
            windows.update(obs=cut(new["obs"], with_bootstrap), starts=cut(new["starts"], with_bootstrap))
            windows["states"] = new["states"][starts].reshape(len(starts) * n, -1)
            self._write(windows)
        if stream is not None:
            first = starts[-1] + self.stride if len(starts) else 0  # the next window's start
            tail = {k: v[first:].copy() for k, v in new.items()}
            self._tails[stream[0]] = (stream[1], self._adds, tail)
            self._tails = {s: e for s, e in self._tails.items() if self._adds - e[1] <= STALE_ADDS}

    def _write(self, windows: dict[str, np.ndarray]) -> None:
        """Write ``K`` windows (``[K, ...]`` each) into the ring's next slots."""
        if not self._arrays:
            self._allocate(windows)
        k = len(windows["states"])
        if k > self.num_slots:  # only the newest fit
            windows = {name: v[-self.num_slots :] for name, v in windows.items()}
            self._written += k - self.num_slots
            k = self.num_slots
        slots = (self._written + np.arange(k)) % self.num_slots
        a = self._arrays
        self._num_ready -= int(np.count_nonzero(a["ready"][slots]))
        for name, v in windows.items():
            a[name][slots] = v
        ready = np.asarray(windows["valid"].any(axis=1))
        a["ready"][slots] = ready
        self._num_ready += int(np.count_nonzero(ready))
        self._written += k
        self.sampler.added(slots, ready, None)

    # ------------------------------------------------------------------ sampling

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """``batch_size`` windows, time-major: ``obs``/``starts`` ``[L + 1, B, ...]``, step fields
        ``[L, B]``, ``states [B, S]``, ``indices [B]`` and (prioritized) ``weights [B]``."""
        if self._num_ready == 0:
            raise ValueError("cannot sample from an empty sequence buffer (no window stored yet)")
        a = self._arrays
        rows, weights = self.sampler.sample(batch_size, generator, a["ready"], self.size, self._num_ready)
        batch = {k: np.swapaxes(a[k][rows], 0, 1) for k in ("obs", "starts", *STEP_FIELDS)}
        batch["states"] = a["states"][rows]
        batch["indices"] = rows
        if weights is not None:
            batch["weights"] = weights
        return {k: torch.from_numpy(np.ascontiguousarray(v)).to(self.device) for k, v in batch.items()}

    def update_priorities(self, indices: Any, td_errors: Any) -> None:
        if not self.sampler.uses_priorities:
            return
        rows = as_numpy(indices).astype(np.int64).reshape(-1)
        keep = self._arrays["ready"][rows]
        self.sampler.update_priorities(rows[keep], as_numpy(td_errors).reshape(-1)[keep])

    def set_progress(self, progress: float) -> None:
        self.sampler.set_progress(progress)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to go on identically: windows, tails, counters and the sampler."""
        size = self.size
        return {
            "num_slots": self.num_slots,
            "written": self._written,
            "num_ready": self._num_ready,
            "adds": self._adds,
            "rows": {k: torch.from_numpy(v[:size].copy()) for k, v in self._arrays.items()},
            "tails": {s: {"chunk": e[0], "grew": e[1], "data": {k: torch.from_numpy(v.copy()) for k, v in e[2].items()}} for s, e in self._tails.items()},
            "sampler": self.sampler.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["num_slots"] != self.num_slots:
            raise ValueError(f"sequence replay state has {state['num_slots']} windows, this buffer {self.num_slots}")
        rows = {k: v.numpy() for k, v in state["rows"].items()}
        self._arrays = {}
        if rows:
            self._arrays = {k: np.zeros((self.num_slots, *v.shape[1:]), dtype=v.dtype) for k, v in rows.items()}
            for k, v in rows.items():
                self._arrays[k][: len(v)] = v
        self._written, self._num_ready, self._adds = int(state["written"]), int(state["num_ready"]), int(state["adds"])
        self._tails = {int(s): (int(e["chunk"]), int(e["grew"]), {k: v.numpy().copy() for k, v in e["data"].items()}) for s, e in state["tails"].items()}
        self.sampler.load_state_dict(state["sampler"])


class SequenceReplayStorage(ReplayStorage):
    """:class:`ReplayStorage` whose gradient side is a :class:`SequenceBuffer`: rollouts with
    per-step recurrent states in, time-major windows out (``minibatch_size`` windows each).

    :param sequence_length: steps per replayed window.
    :param burn_in: the window's first steps that only warm up the state (they set how often windows start).
    :param kwargs: :class:`ReplayStorage` arguments (``n_step`` and ``gamma`` are the
        algorithm's business here: returns are computed within each window by the loss).
    """

    return_settings: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, sequence_length: int, burn_in: int = 0, **kwargs: Any) -> None:
        kwargs["state_stride"] = 1  # the state at every step: any of them may start a window
        super().__init__(**kwargs)
        self._make_buffer = functools.partial(
            SequenceBuffer, capacity=kwargs["capacity"], sequence_length=sequence_length, burn_in=burn_in, sampler=self._sampler,
            device=kwargs.get("device", "cpu"),
        )
