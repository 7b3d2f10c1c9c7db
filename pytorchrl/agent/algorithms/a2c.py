"""Advantage Actor-Critic, synchronous (Mnih et al. 2016, A2C variant)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from pytorchrl.agent.algorithms.base import Algorithm, normalized
from pytorchrl.agent.algorithms.wiring import Wiring, actor_critic_wiring
from pytorchrl.config import A2CConfig, Config


class A2C(Algorithm):
    """One gradient step per rollout on ``-A * log pi + vf_coef * (V - R)^2 - ent_coef * H``.

    :param actor: an actor with ``evaluate_actions``.
    :param lr: Adam learning rate.
    :param ent_coef: entropy bonus coefficient.
    :param vf_coef: value loss coefficient.
    :param max_grad_norm: global gradient-norm clip.
    :param normalize_advantages: normalise advantages over the rollout.
    :param anneal_lr: decay lr linearly to 0 over training.
    """

    config_class = A2CConfig
    recurrent = True
    action_masks = True
    tunable = (*Algorithm.tunable, "ent_coef", "vf_coef")
    metrics = ("policy_loss", "value_loss", "entropy", "explained_variance", "lr")

    @classmethod
    def wire(cls, config: Config, observation_space: gym.Space, action_space: gym.Space) -> Wiring:
        return actor_critic_wiring(cls, config, observation_space, action_space)

    def __init__(
        self,
        actor: nn.Module,
        device: str | torch.device = "cpu",
        *,
        lr: float = 7e-4,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float | None = 0.5,
        normalize_advantages: bool = False,
        anneal_lr: bool = False,
        adam_eps: float = 1e-5,
    ) -> None:
        super().__init__(actor, device, lr=lr, adam_eps=adam_eps, max_grad_norm=max_grad_norm, anneal_lr=anneal_lr)
        self.ent_coef = ent_coef
        self.vf_coef = vf_coef
        self.normalize_advantages = normalize_advantages
        self.minibatch_size = None  # the whole rollout, one step

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, dict[str, float]]:
        log_prob, entropy, value, batch = self.evaluate_transitions(batch)
        advantages = batch["advantages"]
        if self.normalize_advantages:
            advantages = normalized(advantages)
        policy_loss = -(advantages * log_prob).mean()
        value_loss = F.mse_loss(value, batch["returns"])
        entropy_mean = entropy.mean()
        loss = policy_loss + self.vf_coef * value_loss - self.ent_coef * entropy_mean
        stats = torch.stack([policy_loss, value_loss, entropy_mean]).detach().tolist()
        info: dict[str, Any] = dict(zip(("policy_loss", "value_loss", "entropy"), stats))
        info["lr"] = self.lr
        return loss, info
