"""Proximal Policy Optimisation with the clipped surrogate objective (Schulman et al. 2017)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from pytorchrl.agent.algorithms.base import Algorithm, normalized
from pytorchrl.agent.algorithms.wiring import Wiring, actor_critic_wiring
from pytorchrl.config import Config, PPOConfig


class PPO(Algorithm):
    """PPO-Clip (Schulman et al. 2017, eq. 7) with the usual implementation details
    (Engstrom et al. 2020; Huang et al. 2022): per-minibatch advantage normalisation, optional
    value clipping, entropy bonus, global gradient clipping, linear annealing of the learning rate
    and clip range, and early stopping of a rollout's epochs on a target KL.

    :param actor: an actor with ``evaluate_actions``.
    :param lr: Adam learning rate.
    :param num_epochs: passes over each rollout.
    :param minibatch_size: transitions per gradient step.
    :param clip_range: epsilon of the ratio clip.
    :param clip_range_vf: clip of the value update around the old value (None: off).
    :param ent_coef: entropy bonus coefficient.
    :param vf_coef: value loss coefficient.
    :param max_grad_norm: global gradient-norm clip.
    :param target_kl: stop the rollout's remaining epochs once approx. KL > 1.5 * target_kl.
    :param normalize_advantages: normalise advantages per minibatch.
    :param anneal_lr: decay lr linearly to 0 over training.
    :param anneal_clip_range: decay clip_range linearly to 0 over training.
    """

    config_class = PPOConfig
    recurrent = True
    action_masks = True
    tunable = (*Algorithm.tunable, "clip_range", "clip_range_vf", "ent_coef", "vf_coef", "target_kl", "num_epochs")
    metrics = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance", "lr", "clip_range")

    @classmethod
    def wire(cls, config: Config, observation_space: gym.Space, action_space: gym.Space) -> Wiring:
        return actor_critic_wiring(cls, config, observation_space, action_space)

    def __init__(
        self,
        actor: nn.Module,
        device: str | torch.device = "cpu",
        *,
        lr: float = 3e-4,
        num_epochs: int = 10,
        minibatch_size: int = 64,
        clip_range: float = 0.2,
        clip_range_vf: float | None = None,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float | None = 0.5,
        target_kl: float | None = None,
        normalize_advantages: bool = True,
        anneal_lr: bool = False,
        anneal_clip_range: bool = False,
        adam_eps: float = 1e-5,
    ) -> None:
        super().__init__(actor, device, lr=lr, adam_eps=adam_eps, max_grad_norm=max_grad_norm, anneal_lr=anneal_lr)
        self.num_epochs = num_epochs
        self.minibatch_size = minibatch_size
        self.clip_range = clip_range
        self.initial_clip_range = clip_range
        self.clip_range_vf = clip_range_vf
        self.ent_coef = ent_coef
        self.vf_coef = vf_coef
        self.target_kl = target_kl
        self.normalize_advantages = normalize_advantages
        self.anneal_clip_range = anneal_clip_range

    def set_progress(self, progress: float) -> None:
        super().set_progress(progress)
        if self.anneal_clip_range:
            self.clip_range = self.initial_clip_range * max(0.0, 1.0 - progress)

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, dict[str, float]]:
        log_prob, entropy, value, batch = self.evaluate_transitions(batch)
        advantages = batch["advantages"]
        if self.normalize_advantages:
            advantages = normalized(advantages)
        log_ratio = log_prob - batch["log_probs"]
        ratio = log_ratio.exp()
        clip = self.clip_range
        policy_loss = -torch.min(advantages * ratio, advantages * ratio.clamp(1 - clip, 1 + clip)).mean()
        old_values = batch["values"]
        if self.clip_range_vf is not None:
            value = old_values + (value - old_values).clamp(-self.clip_range_vf, self.clip_range_vf)
        value_loss = F.mse_loss(value, batch["returns"])
        entropy_mean = entropy.mean()
        loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy_mean
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()  # Schulman's k3 estimator
            clip_fraction = ((ratio - 1).abs() > clip).float().mean()
            stats = torch.stack([policy_loss, value_loss, entropy_mean, approx_kl, clip_fraction]).tolist()
        info: dict[str, Any] = dict(zip(("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"), stats))
        info["lr"] = self.lr
        info["clip_range"] = clip
        approx_kl = info["approx_kl"]
        if self.target_kl is not None and approx_kl > 1.5 * self.target_kl:
            self.stop_round = True
            return None, info
        return loss, info
