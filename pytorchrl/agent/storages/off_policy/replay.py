"""Replay storage for off-policy algorithms: a ring of observations stored once, n-step
returns, and a sampler (uniform, or prioritized after Schaul et al. 2016) composed in.

Layout. The buffer is one ring of ``capacity`` rows, written in order (FIFO). A row holds the
observation of one (step, env) and the transition taken from it: action, reward,
``terminated``, ``truncated``, whether the transition can be sampled (``ready``: filled and
valid) and ``next_row``, the row holding the next observation of the same env. Rollouts arrive
in the collection side's format (see :mod:`pytorchrl.agent.storages.on_policy.rollout`):
``obs [T + 1, N, ...]`` and ``[T, N]`` step fields. A chunk of ``T`` steps writes ``obs[1..T]``
(or ``obs[0..T]``) time-major; its last ``N`` rows, ``obs[T]``, are the stream's *pending* rows:
no transition yet, never sampled.

Observations are stored once. When a chunk continues a stream (the same ``stream_id``,
``chunk_index`` one more than the last, and the stream's pending rows still alive), its
``obs[0]`` is already in the pending rows: they receive step 0's transition and point at the
new rows, and only ``T * N`` rows are written. Any other chunk writes ``(T + 1) * N`` rows; the
previous pending rows of its stream then stay transition-less until overwritten (an n-step
chain that reaches them bootstraps from their observation). Rows are written in ring order, so
a row's ``next_row`` is always newer: while a row is alive, so is its next row, and the ring
position alone says whether a row written at a given sequence number has been overwritten
(``seq >= written - capacity``), which is all the stream table needs.

Episode ends follow gymnasium's next-step autoreset (see :mod:`pytorchrl.envs.vec_env`): the
reset step after an episode end has ``valid = False`` and is never a transition.

n-step returns. From a sampled row ``t`` the chain follows ``next_row`` for up to ``n`` steps and
returns ``G = sum_{k<m} gamma^k r_{t+k}`` with the observation to bootstrap from and its
discount: ``m = n`` (bootstrap from ``s_{t+n}``, discount ``gamma^n``) unless the chain stops
early, at a terminated step (``m = k + 1``, discount 0), at a truncated step (``m = k + 1``,
bootstrap from that step's next observation, the true final one) or at a row with no
transition yet or an invalid step (``m = k``, bootstrap from that row's observation).

Hindsight relabelling (HER, :mod:`~pytorchrl.agent.storages.off_policy.her`) is a third part
beside the ring and the sampler: given one, :meth:`ReplayBuffer.sample` hands it each drawn batch
to rewrite (goals, rewards, discounts) before it leaves the buffer.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from pytorchrl.agent.storages.off_policy.her import HindsightRelabeller
from pytorchrl.agent.storages.off_policy.sum_tree import SumTree
from pytorchrl.utils.arrays import as_numpy

STEP_KEYS = ("actions", "rewards", "terminated", "truncated")


class Sampler:
    """How rows are drawn: the interface :class:`ReplayBuffer` calls.

    A sampler is configuration until :meth:`bind` gives it its buffer's capacity; the buffer
    keeps its own copy, so one sampler object can configure any number of buffers.
    """

    def bind(self, capacity: int) -> None:
        """Allocate what the sampler keeps per row."""

    def added(self, rows: np.ndarray, ready: np.ndarray, priorities: np.ndarray | None) -> None:
        """Rows just (re)written: ``ready`` marks those with a sampleable transition.

        :param priorities: actor-side priorities (absolute TD errors), one per row, or None.
        """

    def sample(
        self, batch_size: int, generator: torch.Generator | None, ready: np.ndarray, size: int, num_ready: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """``batch_size`` rows among the ``ready`` rows of ``[0, size)`` (``num_ready`` > 0 of
        them), drawn with replacement, and their float32 importance weights (None: all 1)."""
        raise NotImplementedError

    #: whether :meth:`update_priorities` does anything (the buffer skips the call otherwise)
    uses_priorities = False

    def update_priorities(self, rows: np.ndarray, td_errors: np.ndarray) -> None:
        """New TD errors of sampled rows (ignored by samplers without priorities)."""

    def set_progress(self, progress: float) -> None:
        """Training progress in ``[0, 1]`` (ignored by samplers that anneal nothing)."""

    @property
    def nbytes(self) -> int:
        return 0

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (nothing, for a stateless sampler)."""


class UniformSampler(Sampler):
    """Every sampleable transition equally likely; no importance weights (all 1)."""

    def sample(
        self, batch_size: int, generator: torch.Generator | None, ready: np.ndarray, size: int, num_ready: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        if num_ready * 4 < size:  # mostly unsampleable: draw among the ready rows directly
            candidates = np.flatnonzero(ready[:size])
            rows = candidates[torch.randint(len(candidates), (batch_size,), generator=generator).numpy()]
        else:  # rejection: every accepted draw is uniform over the ready rows; draw a margin
            # more than the expected misses so that one draw nearly always suffices
            rows = np.empty(0, dtype=np.int64)
            while len(rows) < batch_size:
                count = int((batch_size - len(rows)) * size / num_ready * 1.1) + 8
                drawn = torch.randint(size, (count,), generator=generator).numpy()
                rows = np.concatenate([rows, drawn[ready[drawn]]])
            rows = rows[:batch_size]
        return rows, None


class PrioritizedSampler(Sampler):
    """Proportional prioritized replay (Schaul et al. 2016), stratified over a :class:`SumTree`.

    A row's priority is ``(|td| + eps) ** alpha``; unsampleable rows have priority 0. A new
    transition gets the largest priority seen so far, or its actor-side priority when
    :meth:`ReplayBuffer.add_data` receives one (Ape-X). Importance weights are
    ``w_i = (N P(i)) ** -beta / max_j w_j``, where the max is over every sampleable row, i.e.
    ``w_i = (p_min / p_i) ** beta``; ``beta`` anneals linearly from ``beta0`` to 1.

    :param alpha: how much prioritization is used (0: uniform).
    :param beta0: the importance-sampling exponent at the start.
    :param beta_steps: anneal ``beta`` over this many :meth:`sample` calls; None: by
        :meth:`set_progress` instead.
    :param eps: added to ``|td|`` so that no transition gets priority 0.
    """

    uses_priorities = True

    def __init__(self, alpha: float = 0.6, beta0: float = 0.4, beta_steps: int | None = None, eps: float = 1e-6) -> None:
        if alpha < 0 or not 0 <= beta0 <= 1 or eps < 0 or (beta_steps is not None and beta_steps < 1):
            raise ValueError(f"PrioritizedSampler: need alpha >= 0, 0 <= beta0 <= 1, eps >= 0, beta_steps >= 1; got {alpha}, {beta0}, {eps}, {beta_steps}")
        self.alpha = alpha
        self.beta0 = beta0
        self.beta_steps = beta_steps
        self.eps = eps
        self.max_priority = 1.0  # in tree units, i.e. after ** alpha
        self.progress = 0.0
        self.num_sampled = 0  # sample() calls, for beta_steps
        self.tree: SumTree | None = None

    @property
    def beta(self) -> float:
        progress = self.progress if self.beta_steps is None else min(1.0, self.num_sampled / self.beta_steps)
        return self.beta0 + (1.0 - self.beta0) * progress

    def set_progress(self, progress: float) -> None:
        if self.beta_steps is not None:
            raise RuntimeError("PrioritizedSampler: beta follows sample() calls (beta_steps is set), not set_progress")
        self.progress = min(1.0, max(0.0, float(progress)))

    def bind(self, capacity: int) -> None:
        if self.tree is not None:
            raise RuntimeError("a PrioritizedSampler serves one buffer")
        self.tree = SumTree(capacity)

    def _tree(self) -> SumTree:
        if self.tree is None:
            raise RuntimeError("PrioritizedSampler used before bind()")
        return self.tree

    def _priority(self, td_errors: np.ndarray) -> np.ndarray:
        """Tree priorities of TD errors; a non-finite one (a NaN loss, whose gradient is not
        applied) gets the highest priority so far instead of breaking the tree."""
        values = (np.abs(td_errors.astype(np.float64)) + self.eps) ** self.alpha
        return np.where(np.isfinite(values), values, self.max_priority)

    def added(self, rows: np.ndarray, ready: np.ndarray, priorities: np.ndarray | None) -> None:
        if priorities is None:
            values = np.where(ready, self.max_priority, 0.0)
        else:
            values = np.where(ready, self._priority(priorities), 0.0)
            self.max_priority = max(self.max_priority, float(values.max(initial=0.0)))
        self._tree().update(rows, values)

    def sample(
        self, batch_size: int, generator: torch.Generator | None, ready: np.ndarray, size: int, num_ready: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Stratified: ``[0, total)`` cut into ``batch_size`` equal segments, one draw in each."""
        tree = self._tree()
        u = torch.rand(batch_size, generator=generator, dtype=torch.float64).numpy()
        rows = tree.find((np.arange(batch_size) + u) * (tree.total / batch_size))
        weights = (tree.min / tree.get(rows)) ** self.beta
        self.num_sampled += 1
        return rows, weights.astype(np.float32)

    def update_priorities(self, rows: np.ndarray, td_errors: np.ndarray) -> None:
        values = self._priority(td_errors)
        self._tree().update(rows, values)
        self.max_priority = max(self.max_priority, float(values.max(initial=0.0)))

    @property
    def nbytes(self) -> int:
        return self._tree().nbytes

    def state_dict(self) -> dict[str, Any]:
        return {
            "tree": self._tree().state_dict(),
            "max_priority": self.max_priority,
            "progress": self.progress,
            "num_sampled": self.num_sampled,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._tree().load_state_dict(state["tree"])
        self.max_priority = float(state["max_priority"])
        self.progress = float(state["progress"])
        self.num_sampled = int(state["num_sampled"])


class ReplayBuffer:
    """A FIFO replay buffer of ``capacity`` observations, each stored once, sampled with
    n-step returns (see the module doc).

    :param capacity: rows in the ring (observations, pending ones included).
    :param n_step: steps of the return ``G``.
    :param gamma: discount factor.
    :param sampler: how rows are drawn (default :class:`UniformSampler`); the buffer works on
        its own copy.
    :param device: where sampled batches are placed.
    :param relabeller: hindsight goals for sampled batches (HER; one-step returns only); the
        buffer works on its own copy.
    """

    def __init__(
        self,
        *,
        capacity: int,
        n_step: int = 1,
        gamma: float = 0.99,
        sampler: Sampler | None = None,
        device: str | torch.device = "cpu",
        relabeller: HindsightRelabeller | None = None,
    ) -> None:
        if capacity < 1 or n_step < 1 or not 0.0 <= gamma <= 1.0:
            raise ValueError(f"ReplayBuffer: need capacity >= 1, n_step >= 1, 0 <= gamma <= 1; got {capacity}, {n_step}, {gamma}")
        if relabeller is not None and n_step != 1:
            raise ValueError(f"ReplayBuffer: hindsight relabelling needs n_step = 1 (a new goal changes every reward of the return); got {n_step}")
        self.capacity = capacity
        self.n_step = n_step
        self.gamma = gamma
        self.device = torch.device(device)
        self.sampler = copy.deepcopy(sampler) if sampler is not None else UniformSampler()
        self.sampler.bind(capacity)
        self.relabeller = copy.deepcopy(relabeller)
        if self.relabeller is not None:
            self.relabeller.bind(capacity)
        self._arrays: dict[str, np.ndarray] = {}  # per row; allocated by the first add_data
        self._written = 0  # rows written since the start: the next row's sequence number
        self._num_ready = 0
        # stream_id -> (last chunk_index, sequence number of its first pending row, num_envs)
        self._streams: dict[int, tuple[int, int, int]] = {}

    @classmethod
    def create_factory(cls, **kwargs: Any) -> Callable[..., Any]:
        """A picklable ``factory(device="cpu") -> ReplayBuffer``, its arguments checked here
        (:func:`~pytorchrl.agent.storages.on_policy.recorder.check_storage_arguments`)."""
        from pytorchrl.agent.storages.on_policy.recorder import check_storage_arguments

        check_storage_arguments(cls, kwargs)
        return functools.partial(cls, **kwargs)

    # ------------------------------------------------------------------ sizes

    @property
    def size(self) -> int:
        """Rows in use (observations stored, pending ones included)."""
        return min(self._written, self.capacity)

    @property
    def num_samples(self) -> int:
        """Sampleable transitions."""
        return self._num_ready

    def can_sample(self, batch_size: int) -> bool:
        """Whether there are at least ``batch_size`` transitions (sampling is with replacement,
        so :meth:`sample` accepts any batch size once there is one)."""
        return self._num_ready >= batch_size

    @property
    def nbytes(self) -> int:
        """Bytes of every preallocated array, the sampler's included (0 before the first add)."""
        extra = 0 if self.relabeller is None else self.relabeller.nbytes
        return sum(a.nbytes for a in self._arrays.values()) + self.sampler.nbytes + extra

    @property
    def obs_nbytes(self) -> int:
        """Bytes of the observation ring alone: ``capacity`` observations."""
        return self._arrays["obs"].nbytes if self._arrays else 0

    # ------------------------------------------------------------------ adding

    def _allocate(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        c = self.capacity
        # np.empty leaves pages untouched until written: a big buffer costs what it holds
        self._arrays = {
            "obs": np.empty((c, *obs.shape[2:]), dtype=obs.dtype),
            "actions": np.empty((c, *actions.shape[2:]), dtype=actions.dtype),
            "rewards": np.empty(c, dtype=rewards.dtype),
            # flags zeroed (calloc: as lazy as np.empty): add_data counts the ready rows it
            # overwrites, and a pending row's flags are read, if never used, by the n-step chain
            "terminated": np.zeros(c, dtype=bool),
            "truncated": np.zeros(c, dtype=bool),
            "ready": np.zeros(c, dtype=bool),
            "next_row": np.empty(c, dtype=np.int64),
        }

    def _spans(self, seq: int, length: int) -> Iterator[tuple[slice, slice]]:
        """``(ring rows, offsets in [0, length))`` for ``length`` rows from sequence number ``seq``."""
        start = seq % self.capacity
        first = min(length, self.capacity - start)
        if first > 0:
            yield slice(start, start + first), slice(0, first)
        if first < length:
            yield slice(0, length - first), slice(first, length)

    def _rows(self, seq: int, length: int) -> np.ndarray:
        return (seq + np.arange(length)) % self.capacity

    def _continued(self, stream: tuple[int, int] | None, num_envs: int, new_rows: int) -> int | None:
        """The sequence number of the pending rows this chunk continues, or None."""
        entry = None if stream is None else self._streams.get(stream[0])
        if stream is None or entry is None:
            return None
        last_chunk, pending_seq, n = entry
        # alive after this chunk's rows are written too (they may wrap onto the pending ones)
        alive = pending_seq >= self._written + new_rows - self.capacity
        return pending_seq if stream[1] == last_chunk + 1 and n == num_envs and alive else None

    def add_data(self, data: dict[str, Any], priorities: torch.Tensor | np.ndarray | None = None) -> None:
        """Store a rollout in the collection side's format.

        :param data: ``obs [T + 1, N, ...]``, ``actions [T, N, ...]``, ``rewards``,
            ``terminated``, ``truncated`` and ``valid`` ``[T, N]``, and optionally the scalars
            ``stream_id`` (one collection worker's vector env, for its whole life) and
            ``chunk_index`` (0, 1, 2, ... per stream) that let a continuing chunk reuse the
            stored ``obs[0]``. Other keys are ignored.
        :param priorities: ``[T, N]`` actor-side priorities (absolute TD errors) for a
            prioritized sampler; None: the largest priority so far.
        """
        if ("stream_id" in data) != ("chunk_index" in data):
            raise ValueError("add_data: stream_id and chunk_index come together")
        stream = (int(data["stream_id"]), int(data["chunk_index"])) if "stream_id" in data else None
        obs = as_numpy(data["obs"])
        rewards = as_numpy(data["rewards"])
        t, n = rewards.shape
        if not self._arrays:
            self._allocate(obs, as_numpy(data["actions"]), rewards)
        pending_seq = self._continued(stream, n, t * n)
        if pending_seq is None:
            new_obs = obs.reshape((t + 1) * n, *obs.shape[2:])
            step_segments = [(self._written, t * n)]
            next_offset = n  # step j's next observation is new row j + N
        elif t == 0 and stream is not None:  # nothing new: the stream stays where it was
            self._streams[stream[0]] = (stream[1], pending_seq, n)
            return
        else:
            new_obs = obs[1:].reshape(t * n, *obs.shape[2:])
            step_segments = [(pending_seq, n), (self._written, (t - 1) * n)]
            next_offset = 0  # step j's next observation is new row j
        if len(new_obs) > self.capacity:
            raise ValueError(f"add_data: a chunk of {len(new_obs)} rows does not fit a buffer of capacity {self.capacity}")
        valid = as_numpy(data["valid"]).reshape(t * n).astype(bool)
        flat = {k: as_numpy(data[k]).reshape(t * n, *data[k].shape[2:]) for k in STEP_KEYS}
        flat["ready"] = valid
        flat["next_row"] = self._rows(self._written + next_offset, t * n)
        a, seq, k = self._arrays, self._written, len(new_obs)
        for ring, src in self._spans(seq, k):
            self._num_ready -= int(np.count_nonzero(a["ready"][ring]))  # overwritten transitions
            a["obs"][ring] = new_obs[src]
        offset = 0
        for first, length in step_segments:
            for ring, src in self._spans(first, length):
                part = slice(offset + src.start, offset + src.stop)
                for key, values in flat.items():
                    a[key][ring] = values[part]
            offset += length
        # the chunk's last N rows, obs[T], are the stream's new pending rows: no transition yet
        pending_seq = seq + k - n
        for ring, _ in self._spans(pending_seq, n):
            # cleared, not left as whatever the ring held: a checkpoint of the buffer is then the
            # same bytes in every run
            for key in ("ready", "terminated", "truncated", "rewards", "actions"):
                a[key][ring] = 0
            a["next_row"][ring] = -1
        self._num_ready += int(np.count_nonzero(valid))
        self._written += k
        if stream is not None:
            self._streams[stream[0]] = (stream[1], pending_seq, n)
        # forget streams whose pending rows are gone (workers that stopped or were replaced)
        oldest = self._written - self.capacity
        self._streams = {s: e for s, e in self._streams.items() if e[1] >= oldest}
        rows = np.concatenate([*(self._rows(first, length) for first, length in step_segments), self._rows(pending_seq, n)])
        ready = np.concatenate([valid, np.zeros(n, dtype=bool)])
        prio = None if priorities is None else np.concatenate([as_numpy(priorities).reshape(t * n), np.zeros(n)])
        self.sampler.added(rows, ready, prio)
        if self.relabeller is not None:
            self.relabeller.added(rows, a["next_row"][rows])

    def transitions(self) -> dict[str, np.ndarray]:
        """Every stored transition, one step each: ``obs``, ``actions``, ``rewards`` (one-step)
        and ``next_obs`` of the ready rows, in ring order (copies; empty before the first add).
        What a model-based learner computes its normalisation statistics from."""
        if not self._arrays:
            return {}
        a = self._arrays
        rows = np.flatnonzero(a["ready"][: self.size])
        return {"obs": a["obs"][rows], "actions": a["actions"][rows], "rewards": a["rewards"][rows], "next_obs": a["obs"][a["next_row"][rows]]}

    # ------------------------------------------------------------------ sampling

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """A batch of transitions with n-step returns, drawn with replacement.

        :param generator: the torch generator to draw with; None: torch's global one.
        :return: ``obs``, ``actions``, ``rewards`` (the n-step return ``G``), ``next_obs`` (the
            observation to bootstrap from), ``discounts`` (``gamma ** m``, 0 after a
            termination), ``weights`` (importance weights; left out with uniform sampling, where
            all are 1, so that losses skip the product) and ``indices`` (the rows, for
            :meth:`update_priorities`), on ``device``.
        """
        if self._num_ready == 0:
            raise ValueError("cannot sample from an empty replay buffer (no transition stored yet)")
        a = self._arrays
        rows, weights = self.sampler.sample(batch_size, generator, a["ready"], self.size, self._num_ready)
        returns, discounts, boot = self._n_step_returns(rows)
        batch = {
            "obs": a["obs"][rows],
            "actions": a["actions"][rows],
            "rewards": returns,
            "next_obs": a["obs"][boot],
            "discounts": discounts,
            "indices": rows,
        }
        if weights is not None:
            batch["weights"] = weights
        if self.relabeller is not None:
            self.relabeller.relabel(batch, rows, a, self.gamma, generator)
        return {k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}

    def _n_step_returns(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``G``, the bootstrap discount and the bootstrap row of each sampled (ready) row."""
        a, g = self._arrays, self.gamma
        terminated = a["terminated"][rows]
        returns = a["rewards"][rows].astype(np.float64)
        discounts = np.where(terminated, 0.0, g)
        boot = a["next_row"][rows]  # always a live row: the next observation of a transition
        going = ~(terminated | a["truncated"][rows])  # the chain may take the next step
        for k in range(1, self.n_step):
            going &= a["ready"][boot]  # no transition there (pending, invalid): bootstrap from its obs
            terminated = a["terminated"][boot]
            ended = terminated | a["truncated"][boot]
            # where not going, the row's fields may be unwritten (np.empty): select, never multiply
            returns += g**k * np.where(going, a["rewards"][boot], 0.0)
            discounts = np.where(going, np.where(terminated, 0.0, g ** (k + 1)), discounts)
            boot = np.where(going, a["next_row"][boot], boot)
            going &= ~ended
        return returns.astype(np.float32), discounts.astype(np.float32), boot

    def update_priorities(self, indices: torch.Tensor | np.ndarray, td_errors: torch.Tensor | np.ndarray) -> None:
        """Set the priorities of sampled rows from their new TD errors (no-op for uniform
        sampling). Rows that lost their transition since they were sampled are skipped."""
        if not self.sampler.uses_priorities:
            return
        rows = as_numpy(indices).astype(np.int64).reshape(-1)
        td = as_numpy(td_errors).reshape(-1)
        keep = self._arrays["ready"][rows]
        self.sampler.update_priorities(rows[keep], td[keep])

    def set_progress(self, progress: float) -> None:
        """Training progress in ``[0, 1]``: anneals the sampler's importance-sampling exponent."""
        self.sampler.set_progress(progress)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to go on identically, as tensors and plain data (``weights_only``
        loadable). The row tensors share memory with the buffer (a 1M-frame buffer is not
        copied): save them before the next :meth:`add_data`."""
        size = self.size
        return {
            "capacity": self.capacity,
            "written": self._written,
            "num_ready": self._num_ready,
            "streams": {s: list(e) for s, e in self._streams.items()},
            "rows": {k: torch.from_numpy(v[:size]) for k, v in self._arrays.items()},
            "sampler": self.sampler.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` into a buffer of the same capacity."""
        if state["capacity"] != self.capacity:
            raise ValueError(f"replay state has capacity {state['capacity']}, this buffer {self.capacity}")
        rows = {k: v.numpy() for k, v in state["rows"].items()}
        if rows:
            empty = {k: v[:0].reshape(0, 1, *v.shape[1:]) for k, v in rows.items()}  # dtypes and row shapes
            self._allocate(empty["obs"], empty["actions"], empty["rewards"])
            for k, v in rows.items():
                self._arrays[k][: len(v)] = v
        else:
            self._arrays = {}
        self._written = int(state["written"])
        self._num_ready = int(state["num_ready"])
        self._streams = {int(s): (int(e[0]), int(e[1]), int(e[2])) for s, e in state["streams"].items()}
        self.sampler.load_state_dict(state["sampler"])
        if self.relabeller is not None and self._arrays:
            self.relabeller.restored(self._arrays["next_row"][: self.size])

