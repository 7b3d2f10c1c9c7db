"""What the recurrent replay losses share (R2D2's DQN, recurrent SAC): n-step returns within a
replayed window, and window priorities (Kapturowski et al. 2019)."""

from __future__ import annotations

import torch


def window_returns(
    rewards: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, *, gamma: float, n_step: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n-step returns within ``[T, B]`` windows whose observations are ``obs[0..T]``.

    From step ``t`` the return adds ``gamma^k r_{t+k}`` for ``k < m`` and bootstraps from
    ``obs[t + m]`` with discount ``gamma^m``, where ``m = n_step`` unless the chain stops first:
    at a terminated step (``m = k + 1``, discount 0), a truncated step (``m = k + 1``: its next
    observation is the episode's final one) or the window's end (``m = T - t``).

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
