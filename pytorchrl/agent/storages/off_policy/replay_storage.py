"""The storage an off-policy scheme runs on: a rollout on the collection side, a replay buffer on
the gradient side (the same two-ended design as the on-policy storages).

A collection worker fills ``num_steps`` steps of its envs (no scoring: replayed transitions need
no behaviour log-probabilities or values) and sends them tagged with its stream, so that the
buffer stores each observation once across consecutive rollouts. A gradient worker adds every
received rollout to its :class:`ReplayBuffer`; a round then makes ``updates_per_step`` gradient
steps per transition received (the replay ratio), each on a fresh sample, once the buffer holds
``start_steps`` transitions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import torch

from pytorchrl.agent.storages.off_policy.her import HindsightRelabeller
from pytorchrl.agent.storages.off_policy.recorder import ReplayRecorder
from pytorchrl.agent.storages.off_policy.replay import PrioritizedSampler, ReplayBuffer, Sampler, UniformSampler
from pytorchrl.agent.storages.on_policy.rollout import RolloutStorage


class ReplayStorage(RolloutStorage, ReplayRecorder):
    """Rollouts in, replayed minibatches out: a :class:`~.recorder.ReplayRecorder` seen through
    tensors (its collection side) and a :class:`ReplayBuffer` (its gradient side).

    :param capacity: transitions the replay buffer holds.
    :param n_step: n-step returns.
    :param gamma: discount.
    :param prioritized: prioritized replay (else uniform).
    :param alpha: priority exponent.
    :param beta0: initial importance-sampling exponent (annealed to 1 over training).
    :param updates_per_step: gradient steps per transition received (the replay ratio).
    :param start_steps: transitions in the buffer before the first gradient step.
    :param checkpoint_buffer: include the buffer in checkpoints (:meth:`buffer_state`).
    :param actor_priorities: collection workers score their rollouts' ``n_step`` TD errors, which
        become the new transitions' priorities (Ape-X) instead of the maximum seen so far.
    :param relabeller: hindsight goals for replayed transitions (HER; the buffer applies it).
    :param rollout: :class:`RolloutStorage` arguments (``num_steps``, ``num_envs``, shapes).
    """

    return_settings: ClassVar[tuple[str, ...]] = ("gamma", "n_step")

    def __init__(
        self,
        *,
        capacity: int,
        n_step: int = 1,
        gamma: float = 0.99,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta0: float = 0.4,
        updates_per_step: float = 1.0,
        start_steps: int = 1000,
        checkpoint_buffer: bool = False,
        actor_priorities: bool = False,
        relabeller: HindsightRelabeller | None = None,
        device: str | torch.device = "cpu",
        **rollout: Any,
    ) -> None:
        super().__init__(device=device, gamma=gamma, n_step=n_step, actor_priorities=actor_priorities, **rollout)
        sampler: Sampler = PrioritizedSampler(alpha=alpha, beta0=beta0) if prioritized else UniformSampler()
        self._sampler = sampler
        self._make_buffer: Callable[[], Any] = functools.partial(
            ReplayBuffer, capacity=capacity, n_step=n_step, gamma=gamma, sampler=sampler, device=device, relabeller=relabeller
        )
        self._buffer: ReplayBuffer | None = None  # made on first use: collection workers never need one
        self.n_step = n_step  # of the returns it replays (return_settings)
        self.updates_per_step = updates_per_step
        self.start_steps = start_steps
        self.checkpoint_buffer = checkpoint_buffer
        self._credit = 0.0  # gradient steps owed for transitions received, carried between rounds
        self._round_steps = 0

    @property
    def buffer(self) -> ReplayBuffer:
        if self._buffer is None:
            self._buffer = self._make_buffer()
        return self._buffer

    # -------------------------------------------------------------------- gradient side

    def add_data(self, data: dict[str, torch.Tensor]) -> None:
        self.buffer.add_data(data, priorities=data.get("priorities"))
        valid = data["valid"]
        self._credit += self.updates_per_step * int(valid.sum())

    def before_gradients(self) -> None:
        """Nothing to prepare: every minibatch is a fresh sample."""

    def after_gradients(self) -> None:
        """The buffer keeps everything (the ring overwrites the oldest)."""

    @property
    def num_samples(self) -> int:
        return self.buffer.num_samples

    @property
    def warming_up(self) -> bool:
        """Whether the buffer holds fewer than ``start_steps`` transitions (acting is then uniform, for SAC/TD3)."""
        return self.buffer.num_samples < self.start_steps

    def num_batches(self, minibatch_size: int) -> int:
        """Gradient steps this round: the replay ratio's due, once ``start_steps`` are stored."""
        if self.buffer.num_samples < max(self.start_steps, minibatch_size):
            self._credit = 0.0  # transitions collected before learning starts earn no updates
            self._round_steps = 0
        else:
            self._round_steps = int(self._credit)
            self._credit -= self._round_steps
        return self._round_steps

    def generate_batches(self, *, minibatch_size: int, num_epochs: int = 1, shuffle: bool = True) -> Iterator[dict[str, torch.Tensor]]:
        """The round's minibatches (:meth:`num_batches` of them), each a fresh sample."""
        del shuffle  # replay samples are random by nature
        for _ in range(self._round_steps * num_epochs):
            yield self.buffer.sample(minibatch_size)

    def explained_variance(self) -> float | None:
        return None

    def set_progress(self, progress: float) -> None:
        """Anneal the importance-sampling exponent (prioritized replay)."""
        self.buffer.set_progress(progress)

    @property
    def uses_priorities(self) -> bool:
        """Whether the sampler wants the TD errors of sampled batches (prioritized replay)."""
        return self.buffer.sampler.uses_priorities

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        self.buffer.update_priorities(indices, priorities)

    # ---------------------------------------------------------------------------- state

    def buffer_state(self) -> dict[str, Any] | None:
        """Gradient side, for a checkpoint (with ``checkpoint_buffer``, else None): the replay
        buffer and the gradient steps owed."""
        if not self.checkpoint_buffer:
            return None
        return {"buffer": self.buffer.state_dict(), "credit": self._credit}

    def load_buffer_state(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self._credit = float(state["credit"])
