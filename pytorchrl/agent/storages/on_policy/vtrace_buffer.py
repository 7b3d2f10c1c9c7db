"""Rollout storage for V-trace (Espeholt et al. 2018): time-major sequences, and the V-trace math.

Asynchronous collection hands the learner rollouts collected by older policies. V-trace
corrects for that with truncated importance weights ``rho_t = min(rho_bar, pi/mu)`` and
``c_t = lambda * min(c_bar, pi/mu)`` along each sequence, so it needs whole sequences, not
shuffled transitions: :meth:`VTraceBuffer.generate_batches` yields ``[T, n]`` slices of
rollouts (all steps of a subset of envs), and the algorithm computes the targets with its
current policy in the loss (:func:`compute_vtrace`).

With next-step autoreset (see :mod:`.rollout`), the V-trace recursion is cut at every episode
end, bootstraps from the final observation's value on truncation, and ignores reset steps:

    delta_t = rho_t * (r_t + gamma * (1 - terminated_t) * V(x_{t+1}) - V(x_t))
    vs_t - V(x_t) = valid_t * (delta_t + gamma * c_t * (1 - done_t) * (vs_{t+1} - V(x_{t+1})))
    A_t = r_t + gamma * (1 - terminated_t) * vs_{t+1} - V(x_t)       (policy-gradient advantage)

where ``done_t = terminated_t or truncated_t`` and ``vs_T = V(x_T)``. On-policy (``pi = mu``,
``rho_bar, c_bar >= 1``) ``vs`` equals the GAE(lambda) return, which the tests check.

Rollouts longer than ``state_stride`` (``storage.sequence_length``) are cut into sequences of that
many steps, each with its bootstrap observation (recurrent: and its stored initial state
``states [n, S]``), and yielded like rollouts. Memoryless, that is IMPALA's unroll length apart
from the rollout's: V-trace runs over each sequence, and a minibatch of ``minibatch_size``
transitions holds ``minibatch_size / state_stride`` sequences instead of a few whole rollouts.

An algorithm that computes its targets once per round (``algorithm.targets: round``) stores
them in the sequences first (:meth:`VTraceBuffer.annotate`), then calls
:meth:`VTraceBuffer.use_transitions`: memoryless, the round's minibatches are then shuffled valid
transitions, as PPO's are; recurrent sequences stay sequences (they need their states).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from pytorchrl.agent.storages.on_policy.gae_buffer import compute_gae, minibatches, valid_transitions
from pytorchrl.agent.storages.on_policy.rollout import RolloutStorage


class VTraceBuffer(RolloutStorage):
    """On-policy rollouts kept as time-major sequences for V-trace.

    :param gamma: discount (for the explained-variance diagnostic; the algorithm owns the targets).
    :param kwargs: the rollout's shape and device (see :class:`RolloutStorage`).
    """

    def __init__(self, *, gamma: float = 0.99, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gamma = gamma
        self._rollouts: list[dict[str, torch.Tensor]] = []
        self._flat: dict[str, torch.Tensor] | None = None  # the round's transitions, after use_transitions()
        self._slots: list[int] = []  # the received rollout each sequence of _rollouts was cut from

    def before_gradients(self) -> None:
        """Move the received rollouts to the learner's device, as they are."""
        if not self._received:
            raise RuntimeError("before_gradients() called with no data added")
        cut = [(slot, part) for slot, d in enumerate(self._received) for part in self._chunks(d)]
        self._slots = [slot for slot, _ in cut]
        self._rollouts = [{k: v.to(self.device) for k, v in part.items()} for _, part in cut]

    def _chunks(self, data: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """A rollout as sequences of ``state_stride`` steps (views; one sequence when it is not longer)."""
        t, length = data["rewards"].shape[0], self.state_stride
        out = []
        for c, s in enumerate(range(0, t, length)):
            e = min(s + length, t)
            part = {k: v[s : e + 1] if k in ("obs", "values", "starts") else v[s:e] for k, v in data.items() if k != "states"}
            if "states" in data:
                part["states"] = data["states"][c]
            out.append(part)
        return out

    def rollouts(self) -> list[dict[str, torch.Tensor]]:
        """This round's rollouts as received (or as sequences, when recurrent)."""
        return self._rollouts

    def rollout_slots(self) -> list[int]:
        """Which received rollout each of :meth:`rollouts` was cut from (its sequences share
        it, in time order): what a rollout's per-env state kept across rounds (RND's running
        sums) is keyed by, so a sequence goes on from the one before it."""
        return self._slots

    def annotate(self, fn: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> None:
        """Add the fields ``fn(rollout)`` (each ``[T, n]``) to every received rollout (or sequence);
        the minibatches carry them, sliced like ``rewards``. Call after :meth:`before_gradients`."""
        for rollout in self._rollouts:
            rollout.update(fn(rollout))

    def use_transitions(self) -> None:
        """Yield this round's minibatches as shuffled valid transitions (``[B, ...]`` fields: the
        per-step ones, ``obs`` without its bootstrap row), as PPO's: for targets already computed
        over the whole sequences. Recurrent rollouts keep their sequences."""
        if not self._rollouts or "states" in self._rollouts[0]:
            return
        parts = []
        for r in self._rollouts:
            t = r["rewards"].shape[0]
            parts.append(valid_transitions({k: v[:t] for k, v in r.items()}, r["valid"], self.device))
        self._flat = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

    @property
    def num_samples(self) -> int:
        """Valid transitions in the received rollouts."""
        if self._flat is not None:
            return int(self._flat["valid"].shape[0])
        return int(sum(int(r["valid"].sum()) for r in self._rollouts))

    def explained_variance(self) -> float:
        """How much of the variance of the (lambda = 1) returns the behaviour values explain."""
        if not self._rollouts:
            return float("nan")
        targets, predicted = [], []
        for r in self._rollouts:
            _, returns = compute_gae(r["rewards"].cpu(), r["values"].cpu(), r["terminated"].cpu(), r["truncated"].cpu(), r["valid"].cpu(), gamma=self.gamma, gae_lambda=1.0)
            keep = r["valid"].cpu()
            targets.append(returns[keep])
            predicted.append(r["values"][:-1].cpu()[keep])
        target, pred = torch.cat(targets), torch.cat(predicted)
        var = target.var(unbiased=False).item()
        return float("nan") if var == 0 else 1.0 - (target - pred).var(unbiased=False).item() / var

    def _splits(self, minibatch_size: int | None) -> list[int]:
        """Env-column groups per rollout: each holds about ``minibatch_size`` transitions (None: one group, the rollout)."""
        if minibatch_size is None:
            return [1] * len(self._rollouts)
        return [max(1, min(r["rewards"].shape[1], round(r["rewards"].numel() / minibatch_size))) for r in self._rollouts]

    def num_batches(self, minibatch_size: int | None) -> int:
        """Minibatches per pass over the received rollouts (transitions: ``round(num_samples /
        minibatch_size)``, at least one); None: the whole batch, a minibatch per rollout (whole
        sequences) or one of every transition, however many of its steps are not valid."""
        if self._flat is not None:
            return 1 if minibatch_size is None else max(1, round(self.num_samples / minibatch_size))
        return sum(self._splits(minibatch_size))

    def generate_batches(self, *, minibatch_size: int | None, num_epochs: int = 1, shuffle: bool = True) -> Iterator[dict[str, torch.Tensor]]:
        """Yield time-major minibatches: all steps of a group of envs of one rollout (after
        :meth:`use_transitions`: shuffled transitions).

        Keys: ``obs`` and ``values`` ``[T + 1, n, ...]`` (behaviour values), ``actions``,
        ``log_probs`` (behaviour), ``rewards``, ``terminated``, ``truncated``, ``valid`` ``[T, n]``;
        recurrent: ``starts [T + 1, n]`` and ``states [n, S]``; and the annotated fields.
        """
        if not self._rollouts:
            raise RuntimeError("generate_batches() called before before_gradients()")
        if self._flat is not None:
            yield from minibatches(self._flat, self.num_batches(minibatch_size), num_epochs, shuffle=shuffle)
            return
        splits = self._splits(minibatch_size)
        for _ in range(num_epochs):
            for rollout, parts in zip(self._rollouts, splits, strict=True):
                n = rollout["rewards"].shape[1]
                if parts == 1:
                    yield rollout
                    continue
                order = torch.randperm(n).to(self.device) if shuffle else torch.arange(n, device=self.device)  # on the CPU stream: as gae_buffer's
                for cols in torch.tensor_split(order, parts):
                    yield {k: v[cols] if k == "states" else v[:, cols] for k, v in rollout.items()}

    def after_gradients(self) -> None:
        super().after_gradients()
        self._rollouts = []
        self._flat = None


def compute_vtrace(
    behaviour_log_probs: torch.Tensor,
    target_log_probs: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    valid: torch.Tensor,
    *,
    gamma: float,
    lambda_: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """V-trace targets for ``[T, n]`` sequences (see the module doc); no gradients flow.

    :param values: ``[T + 1, n]`` values of the current policy; the last row bootstraps.
    :return: ``vs`` (value targets), ``advantages`` (policy-gradient advantages, not yet
        weighted by rho) and ``rho`` (the truncated importance weights), all ``[T, n]``.
    """
    device = values.device
    log_rho = (target_log_probs.detach() - behaviour_log_probs.detach()).double().cpu().numpy()
    ratio = np.exp(np.minimum(log_rho, 50.0))
    rho = np.minimum(rho_bar, ratio)
    c = lambda_ * np.minimum(c_bar, ratio)
    v = values.detach().double().cpu().numpy()
    r = rewards.double().cpu().numpy()
    term = terminated.cpu().numpy()
    not_term = 1.0 - term
    not_done = 1.0 - (term | truncated.cpu().numpy())
    mask = valid.cpu().numpy().astype(np.float64)
    delta = rho * (r + gamma * not_term * v[1:] - v[:-1])
    acc = np.zeros_like(v)  # vs - V, with acc[T] = 0
    for t in range(r.shape[0] - 1, -1, -1):
        acc[t] = mask[t] * (delta[t] + gamma * c[t] * not_done[t] * acc[t + 1])
    vs = v + acc
    advantages = r + gamma * not_term * vs[1:] - v[:-1]
    as_tensor = lambda a: torch.from_numpy(a).float().to(device)  # noqa: E731
    return as_tensor(vs[:-1]), as_tensor(advantages * mask), as_tensor(rho * mask)
