"""The collection half of the replay storages, in numpy: what a collection worker of a replay
algorithm fills (no torch: a central-inference worker records with it, ARCHITECTURE.md decision
48). :class:`~pytorchrl.agent.storages.off_policy.replay_storage.ReplayStorage` is the same
recorder seen through tensors, with the replay buffer on the gradient side."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pytorchrl.agent.storages.on_policy.recorder import RolloutRecorder
from pytorchrl.utils.arrays import is_tensor


class ReplayRecorder(RolloutRecorder):
    """A rollout of ``num_steps`` steps (no scoring: replayed transitions need no behaviour
    log-probabilities or values), sent tagged with its stream (``stream_id``, set by the
    collection worker, and a chunk index), so that the buffer stores each observation once
    across consecutive rollouts.

    :param gamma: discount (of actor-side priorities).
    :param actor_priorities: score each rollout's one-step TD errors (:meth:`score`), which
        become the new transitions' priorities (Ape-X).
    :param rollout: :class:`~pytorchrl.agent.storages.on_policy.recorder.RolloutRecorder`'s arguments.
    """

    #: replayed transitions need no behaviour log-probabilities or values (scoring is only for actor-side priorities)
    needs_scoring = False

    def __init__(self, *, gamma: float = 0.99, actor_priorities: bool = False, **rollout: Any) -> None:
        super().__init__(**rollout)
        self.needs_scoring = actor_priorities
        self._gamma = gamma
        self._priorities: Any = None
        self.stream_id = 0  # set by the collection worker: who this rollout's envs are
        self._chunk = 0

    def score(self, fn: Callable[..., tuple[Any, Any]], chunk_steps: int = 256, from_step: int = 0) -> None:
        """Actor-side priorities: ``|r + gamma * max_a Q_target(s') - Q(s, a)|`` per step (a truncated
        step bootstraps from its final observation; a terminated one does not; reset steps get 0).

        :param fn: ``fn(obs, actions) -> (Q(obs, actions), max_a Q_target(obs, a))`` on flat batches.
        :param chunk_steps: unused: one batch (rollouts of replay algorithms are short).
        :param from_step: must be 0 (Q-network actors never score while acting).
        """
        assert from_step == 0
        t, n = self.step, self.num_envs
        obs, actions, rewards, terminated, valid = (self._view(k) for k in ("obs", "actions", "rewards", "terminated", "valid"))
        q, bootstrap = fn(obs[: t + 1].reshape(-1, *obs.shape[2:]), actions[: t + 1].reshape(-1, *actions.shape[2:]))
        q, bootstrap = q.reshape(t + 1, n)[:t], bootstrap.reshape(t + 1, n)[1:]
        # float32 throughout, as torch computes it (a Python float times a numpy bool array is float64)
        gamma = self._gamma if is_tensor(rewards) else np.float32(self._gamma)
        target = rewards[:t] + gamma * (~terminated[:t]) * bootstrap
        self._priorities = abs(target - q) * valid[:t]

    def get_data(self) -> dict[str, Any]:
        data = super().get_data()
        if self._priorities is not None:
            data["priorities"], self._priorities = self._priorities, None
        data["stream_id"] = np.array(self.stream_id, dtype=np.int64)
        data["chunk_index"] = np.array(self._chunk, dtype=np.int64)
        self._chunk += 1
        return data

    def state_dict(self) -> dict[str, Any]:
        """Where the next rollout starts, and which chunk of the stream it is."""
        return {**super().state_dict(), "chunk": self._chunk}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._chunk = int(state.get("chunk", 0))
