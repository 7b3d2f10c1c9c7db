"""Rollout storage with Generalised Advantage Estimation.

The collection side is :class:`~.rollout.RolloutStorage`'s. On a gradient worker,
:meth:`GAEBuffer.before_gradients` computes each received rollout's advantages and returns and
joins their valid transitions, and :meth:`GAEBuffer.generate_batches` yields shuffled minibatches.

With next-step autoreset (a step ``t`` ending an episode is followed by a reset step ``t + 1``
with ``valid = False``, whose observation is the final one), GAE (Schulman et al. 2016, eq. 16) is

    delta_t = r_t + gamma * V(obs[t+1]) * (1 - terminated_t) - V(obs[t])
    A_t     = valid_t * (delta_t + gamma * lambda * (1 - terminated_t or truncated_t) * A_{t+1})

so a truncated step bootstraps from the value of its true final observation, a terminated
step does not bootstrap, and reset steps get no advantage and are never sampled.

Recurrent rollouts (they carry ``states`` and ``starts``, see :mod:`.rollout`) are not
shuffled as transitions: each env's rollout is cut into sequences of ``state_stride`` steps
(the whole rollout by default), each with the state stored at its first step, and minibatches
are time-major groups of whole sequences (``[L, B]`` fields, ``states [B, S]``, ``valid``
marking the steps that count; a short last chunk is padded with invalid steps). Advantages are
computed on the whole rollout first, so chunking changes nothing in them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from pytorchrl.agent.storages.on_policy.rollout import RolloutStorage


class GAEBuffer(RolloutStorage):
    """On-policy rollout storage computing GAE(lambda) advantages.

    :param gamma: discount factor.
    :param gae_lambda: GAE lambda.
    :param kwargs: the rollout's shape and device (see :class:`RolloutStorage`).
    """

    return_settings = ("gamma", "gae_lambda")

    def __init__(self, *, gamma: float = 0.99, gae_lambda: float = 0.95, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self._flat: dict[str, torch.Tensor] | None = None
        self._recurrent = False
        self._stream: tuple[Callable[..., tuple[torch.Tensor, torch.Tensor]], float, float, float] | None = None
        self._annotated: set[str] = set()  # this round's annotate() fields, which the minibatches carry

    def before_gradients(self) -> None:
        """Compute every received rollout's advantages and returns and join their valid transitions."""
        if not self._received:
            raise RuntimeError("before_gradients() called with no data added")
        self._recurrent = "states" in self._received[0]
        parts = [self._sequences(d) if self._recurrent else self._flatten(d) for d in self._received]
        dim = 1 if self._recurrent else 0
        self._flat = parts[0] if len(parts) == 1 else {k: torch.cat([p[k] for p in parts], dim=0 if k == "states" else dim) for k in parts[0]}

    def rollouts(self) -> list[dict[str, torch.Tensor]]:
        """This round's rollouts as received (``obs [T + 1, N, ...]``, step fields ``[T, N]``)."""
        return self._received

    def rollout_slots(self) -> list[int]:
        """Which received rollout each of :meth:`rollouts` is (here each is one): what a
        rollout's per-env state kept across rounds (RND's running sums) is keyed by."""
        return list(range(len(self._received)))

    def annotate(self, fn: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> None:
        """Add the fields ``fn(rollout)`` (each ``[T, N, ...]``) to every received rollout; the
        minibatches of the next :meth:`before_gradients` carry them, as
        :meth:`VTraceBuffer.annotate <pytorchrl.agent.storages.on_policy.vtrace_buffer.VTraceBuffer.annotate>`'s do."""
        for rollout in self._received:
            fields = fn(rollout)
            rollout.update(fields)
            self._annotated.update(fields)

    def add_reward_stream(
        self, fn: Callable[[dict[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]], *, gamma: float, extrinsic_coef: float, intrinsic_coef: float
    ) -> None:
        """A second reward stream for this round (RND's intrinsic rewards): ``fn(rollout)``
        gives its rewards ``[T, N]`` and the values of every observation ``[T + 1, N]``. Its
        GAE is non-episodic (episode ends neither stop nor cut its bootstrap; only the reset
        steps, which are no transitions, cut the lambda chain) with discount ``gamma``; the
        advantages become ``extrinsic_coef * A_e + intrinsic_coef * A_i``, and ``values`` and
        ``returns`` get a last dim of 2 (extrinsic, intrinsic) for the two value heads.
        Call after :meth:`before_gradients`, which it repeats."""
        self._stream = (fn, gamma, extrinsic_coef, intrinsic_coef)
        self.before_gradients()

    def _steps(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One rollout's per-step fields ``[T, N, ...]`` with its advantages and returns."""
        advantages, returns = compute_gae(
            data["rewards"], data["values"], data["terminated"], data["truncated"], data["valid"],
            gamma=self.gamma, gae_lambda=self.gae_lambda,
        )
        t = data["rewards"].shape[0]
        values = data["values"][:t]
        if self._stream is not None:
            fn, gamma, extrinsic_coef, intrinsic_coef = self._stream
            rewards, stream_values = fn(data)
            never = torch.zeros_like(data["terminated"])
            stream_advantages, stream_returns = compute_gae(rewards, stream_values, never, never, data["valid"], gamma=gamma, gae_lambda=self.gae_lambda)
            advantages = extrinsic_coef * advantages + intrinsic_coef * stream_advantages
            returns = torch.stack([returns, stream_returns], -1)
            values = torch.stack([values, stream_values[:t]], -1)
        steps = {
            "obs": data["obs"][:t], "actions": data["actions"], "log_probs": data["log_probs"], "values": values,
            "advantages": advantages, "returns": returns,
        }
        steps.update({k: data[k] for k in self._annotated})  # e.g. RND's rewards and the observations they were scored on
        return steps

    def _sequences(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One recurrent rollout as time-major sequences of ``state_stride`` steps (see the module doc)."""
        steps = {**self._steps(data), "valid": data["valid"], "starts": data["starts"][: data["rewards"].shape[0]]}
        out = {k: to_sequences(v, self.state_stride) for k, v in steps.items()}
        out["states"] = data["states"].reshape(-1, data["states"].shape[-1])  # [chunks * N, S], chunk-major like the sequences
        return {k: v.to(self.device) for k, v in out.items()}

    def _flatten(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One rollout's valid transitions with their advantages and returns, flattened."""
        return valid_transitions(self._steps(data), data["valid"], self.device)

    @property
    def num_samples(self) -> int:
        """Valid transitions available for gradients (after :meth:`before_gradients`)."""
        if self._flat is None:
            return 0
        return int(self._flat["valid"].sum()) if self._recurrent else int(self._flat["advantages"].shape[0])

    def explained_variance(self) -> float:
        """How much of the variance of the returns the collected values explain (1 is perfect)."""
        if self._flat is None:
            return float("nan")
        target, predicted = self._flat["returns"], self._flat["values"]
        if target.dim() > (2 if self._recurrent else 1):  # two reward streams: the extrinsic one's
            target, predicted = target[..., 0], predicted[..., 0]
        if self._recurrent:
            keep = self._flat["valid"]
            target, predicted = target[keep], predicted[keep]
        var = target.var(unbiased=False).item()
        return float("nan") if var == 0 else 1.0 - (target - predicted).var(unbiased=False).item() / var

    def num_batches(self, minibatch_size: int | None) -> int:
        """Minibatches per pass: ``round(num_samples / minibatch_size)``, at least one (recurrent:
        groups of ``minibatch_size / state_stride`` sequences); None: one, the whole round (A2C's
        step per rollout, however many of its steps are padding or reset steps)."""
        if minibatch_size is None:
            return 1
        if self._flat is not None and self._recurrent:
            sequences = self._flat["states"].shape[0]
            return max(1, min(sequences, round(sequences / max(1, round(minibatch_size / self.state_stride)))))
        return max(1, round(self.num_samples / minibatch_size))

    def generate_batches(self, *, minibatch_size: int | None, num_epochs: int = 1, shuffle: bool = True) -> Iterator[dict[str, torch.Tensor]]:
        """Yield minibatches of about ``minibatch_size`` valid transitions (None: all of them), ``num_epochs`` passes.

        Each pass splits a fresh permutation into ``round(num_samples / minibatch_size)``
        near-equal parts, so every valid transition is used exactly once per pass.
        """
        if self._flat is None:
            raise RuntimeError("generate_batches() called before before_gradients()")
        yield from minibatches(self._flat, self.num_batches(minibatch_size), num_epochs, shuffle=shuffle, sequences=self._recurrent)

    def after_gradients(self) -> None:
        """Drop the data used for this round of gradients."""
        super().after_gradients()
        self._flat = None
        self._stream = None
        self._annotated = set()


def valid_transitions(steps: dict[str, torch.Tensor], valid: torch.Tensor, device: str | torch.device) -> dict[str, torch.Tensor]:
    """The valid steps of ``[T, N, ...]`` per-step fields as ``[B, ...]`` transitions on ``device``."""
    keep = valid.reshape(-1)
    return {k: v.reshape(-1, *v.shape[2:])[keep.to(v.device)].to(device) for k, v in steps.items()}


def minibatches(
    data: dict[str, torch.Tensor], num_batches: int, num_epochs: int, *, shuffle: bool = True, sequences: bool = False
) -> Iterator[dict[str, torch.Tensor]]:
    """``num_epochs`` passes over ``data``, each a fresh permutation split into ``num_batches``
    near-equal minibatches, so every item is used exactly once per pass. Items are transitions
    (dim 0), or with ``sequences`` the time-major sequences of dim 1 (``states`` on dim 0)."""
    if num_batches == 1:  # one minibatch holds everything: its order cannot matter
        for _ in range(num_epochs):
            yield data
        return
    n = data["states"].shape[0] if sequences else next(iter(data.values())).shape[0]
    device = next(iter(data.values())).device
    for _ in range(num_epochs):
        # drawn on the CPU generator (the worker's stream) whatever the device: a GPU run shuffles
        # as the CPU run with its seed, and a resumed one as the run that went on
        order = torch.randperm(n).to(device) if shuffle else torch.arange(n, device=device)
        for idx in torch.tensor_split(order, num_batches):
            if sequences:
                yield {k: v[idx] if k == "states" else v[:, idx] for k, v in data.items()}
            else:
                yield {k: v[idx] for k, v in data.items()}


def to_sequences(x: torch.Tensor, length: int) -> torch.Tensor:
    """``[T, N, ...]`` steps as ``[length, chunks * N, ...]`` sequences, chunk-major (sequence
    ``c * N + i`` is env ``i``'s steps ``c * length ...``), the last chunk padded with zeros."""
    t, n = x.shape[:2]
    chunks = -(-t // length)
    if chunks * length != t:
        x = torch.cat([x, x.new_zeros((chunks * length - t, *x.shape[1:]))])
    x = x.view(chunks, length, n, *x.shape[2:]).transpose(0, 1)
    return x.reshape(length, chunks * n, *x.shape[3:])


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    valid: torch.Tensor,
    *,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(lambda) advantages and value targets for ``[T, N]`` rollouts (see the module doc).

    :param values: ``[T + 1, N]``: the value of every observation, the last one the bootstrap.
    :return: ``advantages, returns``, both ``[T, N]``; both are 0 / V at reset steps.
    """
    r = rewards.double().numpy()
    v = values.double().numpy()
    not_term = 1.0 - terminated.numpy()
    not_done = 1.0 - (terminated.numpy() | truncated.numpy())
    mask = valid.numpy().astype(np.float64)
    delta = r + gamma * v[1:] * not_term - v[:-1]
    adv = np.zeros_like(r)
    last = np.zeros(r.shape[1])
    for t in range(r.shape[0] - 1, -1, -1):
        last = mask[t] * (delta[t] + gamma * gae_lambda * not_done[t] * last)
        adv[t] = last
    advantages = torch.from_numpy(adv).float()
    return advantages, advantages + values[:-1]
