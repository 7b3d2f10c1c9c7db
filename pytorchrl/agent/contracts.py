"""The contracts that workers rely on, in one file.

A collection worker steps its envs with an :class:`ActingPolicy` and fills a
:class:`CollectionStorage`; it never sees an algorithm. :class:`~pytorchrl.agent.policy.LocalPolicy`
acts with a copy of the actor in the worker's own process; a central inference server (SEED
mode) can stand behind the same protocol, so the worker's loop does not change with where the
policy runs.

The per-step path writes into the storage's preallocated rows (:class:`ActionSlots`) instead of
returning new tensors: on small networks the cost of RL is per-op overhead, and an allocation
per step is measurable (ARCHITECTURE.md, decision 5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

import torch


class ActionSlots(NamedTuple):
    """Where one step's outputs go: rows of the storage, written in place.

    :param action: ``[num_envs, *action_shape]``, the actions.
    :param log_prob: ``[num_envs]``, their log-probabilities, when the policy scores while it acts
        (:attr:`ActingPolicy.scores_while_acting` and a storage that needs scores); else None and
        the storage asks for them after the rollout (:meth:`CollectionStorage.score`).
    :param value: ``[num_envs]``, the observations' values, beside ``log_prob``.
    :param given: ``[num_envs]`` bool, or None: rows whose action is already in ``action`` (a
        replayed one, PPOD's): the policy keeps it, and scores it with the weights it acts with.
    """

    action: torch.Tensor
    log_prob: torch.Tensor | None = None
    value: torch.Tensor | None = None
    given: torch.Tensor | None = None


class Acted(NamedTuple):
    """What :meth:`ActingPolicy.act` returns besides the slots it filled.

    :param state: a recurrent policy's state after this step (None: memoryless).
    :param version: the version of the weights that chose these actions (policy lag is counted
        from it).
    """

    state: torch.Tensor | None
    version: int


class ActingPolicy(Protocol):
    """A policy that acts for a collection worker.

    Observations in (action masks travel inside them: a Dict key or an info-derived key, see
    :mod:`pytorchrl.envs.masking`), with a recurrent policy's state and the rollout's pre-drawn
    noise; actions, the scores the storage needs, the next state and the weights' version out.
    Sampling noise is drawn by the worker from its own seeded stream (:meth:`draw_noise`), so
    actions depend on the observation, the weights and that stream only, wherever the policy runs.
    """

    #: the policy keeps a state per env (its :meth:`act` takes and returns one)
    is_recurrent: bool
    #: :meth:`act` can fill log-probabilities and values too (one encoder pass instead of two)
    scores_while_acting: bool

    @property
    def version(self) -> int:
        """The version of the weights the next action is chosen with."""
        ...

    def draw_noise(self, num_steps: int, num_envs: int) -> torch.Tensor:
        """The sampling noise of a rollout, one row per step, from the active random stream."""
        ...

    def act(self, obs: torch.Tensor, noise: torch.Tensor, slots: ActionSlots, state: torch.Tensor | None = None) -> Acted:
        """Choose actions for a batch of observations into ``slots``.

        :param state: a recurrent policy's state for these observations (zero where an episode
            starts); None for a memoryless one.
        """
        ...

    def score(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``log_prob(actions), value`` of flat batches (a rollout scored after it was collected)."""
        ...

    def score_sequence(
        self, obs: torch.Tensor, actions: torch.Tensor, state: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`score` of a recurrent policy over ``[T, B]`` steps from ``state``."""
        ...

    def evaluation_step(
        self, obs: torch.Tensor, state: Any, starts: torch.Tensor | None, deterministic: bool
    ) -> tuple[torch.Tensor, Any]:
        """``action, next_state`` for test episodes (``starts``: a new episode starts at ``obs``)."""
        ...

    def set_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Act with ``weights`` (the acting ones or all of them) of policy ``version`` from now on."""
        ...

    def get_weights(self) -> dict[str, torch.Tensor]:
        """The policy's weights, copies on the CPU."""
        ...


class CollectionStorage(Protocol):
    """The collection side of a storage: a preallocated rollout the worker fills step by step.

    On-policy storages (:class:`~pytorchrl.agent.storages.on_policy.rollout.RolloutStorage`) and
    replay storages (:class:`~pytorchrl.agent.storages.off_policy.replay_storage.ReplayStorage`)
    both implement it; the receiving side (``add_data``, ``generate_batches``) is the gradient
    worker's business.
    """

    #: steps per env in one rollout
    num_steps: int
    #: the step the next :meth:`insert` fills
    step: int
    #: rollouts need the acting policy's log-probabilities and values (:meth:`score`)
    needs_scoring: bool

    @property
    def full(self) -> bool:
        """Whether the rollout holds ``num_steps`` steps."""
        ...

    def reset(self, obs: torch.Tensor) -> None:
        """Start from the envs' first observations."""
        ...

    def acting_slots(self) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """``(step, obs, action row)`` for each step left; :meth:`insert` advances."""
        ...

    def scoring_rows(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``(log_prob, value)`` rows of ``step``."""
        ...

    def recurrent_state(self, step: int) -> torch.Tensor:
        """The state a recurrent policy acts on at ``step``."""
        ...

    def insert(self, **step: Any) -> None:
        """Record one env step (``reward``, ``terminated``, ``truncated``, ``valid``, ``next_obs``,
        ``next_state``) and advance."""
        ...

    def score(self, fn: Callable[..., tuple[torch.Tensor, torch.Tensor]], chunk_steps: int = ..., from_step: int = 0) -> None:
        """Fill the scores of the steps from ``from_step`` on (and the bootstrap value) with ``fn``."""
        ...

    def get_data(self) -> dict[str, torch.Tensor]:
        """The rollout, ready to send; the next one starts."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
