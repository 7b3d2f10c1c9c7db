"""The collection half of the replay storages, in numpy: what a collection worker of a replay
algorithm fills (no torch: a central-inference worker records with it, ARCHITECTURE.md decision
48). :class:`~pytorchrl.agent.storages.off_policy.replay_storage.ReplayStorage` is the same
recorder seen through tensors, with the replay buffer on the gradient side."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pytorchrl.agent.storages.on_policy.recorder import RolloutRecorder
from pytorchrl.utils.arrays import as_numpy, is_tensor


class ReplayRecorder(RolloutRecorder):
    """A rollout of ``num_steps`` steps (no scoring: replayed transitions need no behaviour
    log-probabilities or values), sent tagged with its stream (``stream_id``, set by the
    collection worker, and a chunk index), so that the buffer stores each observation once
    across consecutive rollouts.

    :param gamma: discount (of actor-side priorities).
    :param n_step: the learner's n-step returns (of actor-side priorities).
    :param actor_priorities: score each rollout's n-step TD errors (:meth:`score`), which
        become the new transitions' priorities (Ape-X).
    :param rollout: :class:`~pytorchrl.agent.storages.on_policy.recorder.RolloutRecorder`'s arguments.
    """

    #: replayed transitions need no behaviour log-probabilities or values (scoring is only for actor-side priorities)
    needs_scoring = False

    def __init__(self, *, gamma: float = 0.99, n_step: int = 1, actor_priorities: bool = False, **rollout: Any) -> None:
        super().__init__(**rollout)
        self.needs_scoring = actor_priorities
        self._gamma = gamma
        self._n_step = n_step
        self._priorities: Any = None
        self.stream_id = 0  # set by the collection worker: who this rollout's envs are
        self._chunk = 0

    def score(self, fn: Callable[..., tuple[Any, Any]], chunk_steps: int = 256, from_step: int = 0) -> None:
        """Actor-side priorities: the ``n_step`` TD error the learner replays a transition with,
        ``|r_t + ... + gamma^(k-1) r_(t+k-1) + gamma^k V(s_(t+k)) - Q(s_t, a_t)|`` per step, where the
        chain stops after ``n_step`` steps, at a termination (no bootstrap), at a truncation (the
        final observation's value) or at the rollout's end (its last observation's value: a
        shorter chain, as an Ape-X actor scores what it holds). ``V`` is the actor's bootstrap
        value (double Q's where the actor has it); reset steps get 0.

        :param fn: ``fn(obs, actions) -> (Q(obs, actions), V(obs))`` on flat batches.
        :param chunk_steps: unused: one batch (rollouts of replay algorithms are short).
        :param from_step: must be 0 (Q-network actors never score while acting).
        """
        assert from_step == 0
        t, n = self.step, self.num_envs
        obs, actions, rewards, terminated, truncated, valid = (
            self._view(k) for k in ("obs", "actions", "rewards", "terminated", "truncated", "valid")
        )
        q, values = fn(obs[: t + 1].reshape(-1, *obs.shape[2:]), actions[: t + 1].reshape(-1, *actions.shape[2:]))
        # in numpy float32 (a rollout is a few steps; the result goes back as the rewards came)
        q, values = as_numpy(q).reshape(t + 1, n)[:t], as_numpy(values).reshape(t + 1, n)
        reward, term, trunc = as_numpy(rewards)[:t], as_numpy(terminated)[:t], as_numpy(truncated)[:t]
        transition = as_numpy(valid)[:t].astype(bool)
        # the chains of ReplayBuffer._n_step_returns, over the rollout's rows: G, the bootstrap's
        # discount and the row of the observation it bootstraps from (obs[t] where the rollout ends)
        gamma, env = np.float32(self._gamma), np.arange(n)
        ended = term | trunc
        returns = reward.astype(np.float32)
        discounts = np.where(term, np.float32(0), gamma)
        boot = np.repeat(np.arange(1, t + 1)[:, None], n, axis=1)
        going = ~ended  # the chain may take the next step
        for k in range(1, self._n_step):
            step = np.minimum(boot, t - 1)  # where not going, any row: selected away
            # the rollout ends first, or the next row is no transition (a failed step restarted, a
            # reset step): bootstrap from that row's observation, as the buffer's ``ready`` cut does
            going &= (boot < t) & transition[step, env]
            returns += gamma**k * np.where(going, reward[step, env], 0)
            discounts = np.where(going, np.where(term[step, env], 0, gamma ** (k + 1)), discounts).astype(np.float32)
            boot = np.where(going, boot + 1, boot)
            going &= ~ended[step, env]
        target = returns + discounts * values[boot, env]
        priorities = np.abs(target - q) * transition
        self._priorities = rewards.new_tensor(priorities) if is_tensor(rewards) else priorities

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
