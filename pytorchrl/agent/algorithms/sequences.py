"""What the recurrent replay losses share (R2D2's DQN, recurrent SAC): n-step returns within a
replayed window, the window's valid steps and bootstrap observations (:class:`Window`), and
window priorities (Kapturowski et al. 2019)."""

from __future__ import annotations

import torch


def window_returns(
    rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, *, gamma: float, n_step: int,
    valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n-step returns within ``[T, B]`` windows whose observations are ``obs[0..T]``.

    From step ``t`` the return adds ``gamma^k r_{t+k}`` for ``k < m`` and bootstraps from
    ``obs[t + m]`` with discount ``gamma^m``, where ``m = n_step`` unless the chain stops first:
    at a terminated step (``m = k + 1``, discount 0), a truncated step (``m = k + 1``: its next
    observation is the episode's final one), before a step that is not ``valid`` (``m = k``: a
    failed env step, restarted, is no transition; its observation is the last good one), or
    at the window's end (``m = T - t``), as the flat replay buffer's n-step returns do.

    :return: ``returns``, ``discounts`` (float, ``[T, B]``) and ``boot`` (long ``[T, B]``: the
        index of each step's bootstrap observation in ``obs``).
    """
    t_len, b = rewards.shape
    device = rewards.device
    index = torch.arange(t_len, device=device).unsqueeze(1).expand(t_len, b)
    returns = torch.zeros(t_len, b, device=device)
    discounts = torch.ones(t_len, b, device=device)
    boot = index.clone()
    going = torch.ones(t_len, b, dtype=torch.bool, device=device)
    cols = torch.arange(b, device=device).expand(t_len, b)
    for k in range(n_step):
        step = index + k
        inside = step < t_len
        going &= inside
        at = step.clamp(max=t_len - 1)
        if valid is not None and k > 0:  # step t itself learns only where it is valid
            going &= valid[at, cols]
        r, term, trunc = rewards[at, cols], terminated[at, cols], truncated[at, cols]
        returns = torch.where(going, returns + discounts * r, returns)
        discounts = torch.where(going, torch.where(term, torch.zeros_like(discounts), discounts * gamma), discounts)
        boot = torch.where(going, step + 1, boot)
        going &= ~(term | trunc)
    return returns, discounts, boot


def window_priorities(td: torch.Tensor, valid: torch.Tensor, eta: float) -> torch.Tensor:
    """R2D2's window priorities: ``eta * max + (1 - eta) * mean`` of each window's absolute TD
    errors (``td``: one per valid step, in the order of ``valid [steps, B]`` flattened)."""
    errors = torch.zeros(valid.numel(), device=td.device)
    errors[valid.reshape(-1)] = td
    errors = errors.view(valid.shape)
    return eta * errors.max(0).values + (1 - eta) * errors.sum(0) / valid.sum(0).clamp(min=1)


class Window:
    """The steps of a batch of replayed windows (time-major, see
    :class:`~pytorchrl.agent.storages.off_policy.sequence_replay.SequenceBuffer`) that a loss
    learns from: those after the burn-in that are valid, each with its n-step return, its
    bootstrap discount and where its bootstrap observation is. A loss computes its network's
    outputs over the window once and reads them at the steps (:meth:`now`) and at their
    bootstrap observations (:meth:`at_boot`), flattened to one row per learning step.

    :param batch: a sampled batch (``rewards``, ``terminated``, ``truncated``, ``valid``, optionally ``weights``).
    :param burn_in: leading steps that only warm the state up.
    """

    def __init__(self, batch: dict[str, torch.Tensor], burn_in: int, *, gamma: float, n_step: int) -> None:
        rewards = batch["rewards"][burn_in:]
        self.steps, b = rewards.shape
        self.valid = batch["valid"][burn_in:]
        returns, discounts, boot = window_returns(
            rewards, batch["terminated"][burn_in:], batch["truncated"][burn_in:], gamma=gamma, n_step=n_step, valid=self.valid
        )
        self._keep = self.valid.reshape(-1)
        self._boot = (boot, torch.arange(b, device=rewards.device).expand(self.steps, b))
        self.returns, self.discounts = self.now(returns), self.now(discounts)
        weights = batch.get("weights")  # one per window: each of its steps gets it
        self.weights = None if weights is None else self.now(weights.unsqueeze(0).expand(self.steps, b))

    def now(self, x: torch.Tensor) -> torch.Tensor:
        """``x [steps (+ 1), B, ...]`` at the learning steps: ``[M, ...]``."""
        return x[: self.steps].reshape(-1, *x.shape[2:])[self._keep]

    def at_boot(self, x: torch.Tensor) -> torch.Tensor:
        """``x [steps + 1, B, ...]`` (one row per observation after the burn-in) at each learning
        step's bootstrap observation: ``[M, ...]``."""
        return self.now(x[self._boot])

    def priorities(self, td: torch.Tensor, eta: float) -> torch.Tensor:
        """Each window's priority from its learning steps' absolute TD errors ``td [M]``."""
        return window_priorities(td, self.valid, eta)
