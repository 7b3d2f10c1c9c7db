"""Proximal Policy Optimisation with the clipped surrogate objective (Schulman et al. 2017)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from pytorchrl.agent.actors.rnd import RND_METRICS, add_intrinsic_rewards, predictor_loss, rewarded_observations
from pytorchrl.agent.algorithms.base import Algorithm, normalized
from pytorchrl.agent.algorithms.families import OnPolicyConfig, actor_critic_wiring
from pytorchrl.agent.algorithms.wiring import Wiring
from pytorchrl.config import Config, param


@dataclass(frozen=True)
class PPOConfig(OnPolicyConfig):
    """Proximal Policy Optimisation (Schulman et al. 2017), clipped objective."""

    takes_rnd = True

    name: str = param("ppo", "The algorithm.")
    num_epochs: int = param(10, "Passes over each rollout.", min=1, max=10_000)
    minibatch_size: int = param(64, "Transitions per gradient step.", min=1, max=10_000_000)
    clip_range: float = param(0.2, "Clip range of the probability ratio.", min=0, min_exclusive=True)
    anneal_clip_range: bool = param(False, "Decay clip_range linearly towards 0 over run.target_steps, once a round, as anneal_lr.")
    clip_range_vf: float | None = param(None, "Clip the value update around the old value (null: off).", min=0, min_exclusive=True)
    value_loss: str = param(
        "sb3", "The value term: sb3, vf_coef * mean((V - R)^2) of the clipped V where clip_range_vf is set (Stable-Baselines3); "
        "cleanrl, vf_coef * 0.5 * mean(max((V - R)^2, (V_clipped - R)^2)) (CleanRL: half the weight, and an unclipped error "
        "larger than the clipped one keeps its gradient).", choices=("sb3", "cleanrl"),
    )
    target_kl: float | None = param(None, "Stop a rollout's epochs early once the approximate KL exceeds this.", min=0, min_exclusive=True)


class PPO(Algorithm):
    """PPO-Clip (Schulman et al. 2017, eq. 7) with the usual implementation details
    (Engstrom et al. 2020; Huang et al. 2022): per-minibatch advantage normalisation, optional
    value clipping, entropy bonus, global gradient clipping, linear annealing of the learning rate
    and clip range, and early stopping of a rollout's epochs on a target KL.

    Its actor has ``evaluate_actions``; its hyper-parameters are :class:`PPOConfig`'s
    (``target_kl`` stops a rollout's remaining epochs once the approximate KL exceeds 1.5 times it).
    """

    config_class = PPOConfig
    actor_kind = "OnPolicyActor"
    storage_kind = "GAEBuffer"
    config: PPOConfig
    recurrent = True
    action_masks = True
    tunable = (*Algorithm.tunable, "clip_range", "clip_range_vf", "ent_coef", "vf_coef", "target_kl", "num_epochs")
    metrics: tuple[str, ...] = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance", "lr", "clip_range")

    @classmethod
    def wire(cls, config: Config, observation_space: gym.Space, action_space: gym.Space) -> Wiring:
        return actor_critic_wiring(cls, config, observation_space, action_space)

    def __init__(self, actor: nn.Module, device: str | torch.device = "cpu", config: PPOConfig | None = None, **overrides: Any) -> None:
        super().__init__(actor, device, config, **overrides)
        self.initial_clip_range = self.config.clip_range
        if self.config.rnd.enabled:
            self.metrics = (*self.metrics, *RND_METRICS)

    def prepare_round(self, storage: Any) -> None:
        """With RND: the round's intrinsic rewards and their advantages (:func:`add_intrinsic_rewards`)."""
        if self.config.rnd.enabled:
            self._intrinsic_reward = add_intrinsic_rewards(self, storage)

    def set_progress(self, progress: float) -> None:
        super().set_progress(progress)
        if self.config.anneal_clip_range:
            self.update_algorithm_parameter("clip_range", self.initial_clip_range * max(0.0, 1.0 - progress))

    def _value_loss(self, value: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
        """The value term before ``vf_coef`` (``value_loss``: SB3's or CleanRL's form)."""
        bound = self.config.clip_range_vf
        clipped = value if bound is None else old_values + (value - old_values).clamp(-bound, bound)
        if self.config.value_loss == "sb3":
            return F.mse_loss(clipped, returns)
        squared = (value - returns).square()
        if bound is not None:
            squared = torch.maximum(squared, (clipped - returns).square())
        return 0.5 * squared.mean()

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, dict[str, float]]:
        log_prob, entropy, value, batch = self.evaluate_transitions(batch)
        advantages = batch["advantages"]
        if self.config.normalize_advantages:
            advantages = normalized(advantages)
        log_ratio = log_prob - batch["log_probs"]
        ratio = log_ratio.exp()
        clip = self.config.clip_range
        policy_loss = -torch.min(advantages * ratio, advantages * ratio.clamp(1 - clip, 1 + clip)).mean()
        value_loss = self._value_loss(value, batch["values"], batch["returns"])
        entropy_mean = entropy.mean()
        loss = policy_loss + self.config.vf_coef * value_loss - self.config.ent_coef * entropy_mean
        rnd_info: dict[str, float] = {}
        if self.config.rnd.enabled:
            rnd_loss, rnd_info = predictor_loss(self, rewarded_observations(batch))
            loss = loss + rnd_loss
            rnd_info["intrinsic_reward"] = self._intrinsic_reward
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()  # Schulman's k3 estimator
            clip_fraction = ((ratio - 1).abs() > clip).float().mean()
            stats = torch.stack([policy_loss, value_loss, entropy_mean, approx_kl, clip_fraction]).tolist()
        info: dict[str, Any] = dict(zip(("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"), stats))
        info["lr"] = self.lr
        info["clip_range"] = clip
        info.update(rnd_info)
        approx_kl = info["approx_kl"]
        if self.config.target_kl is not None and approx_kl > 1.5 * self.config.target_kl:
            self.stop_round = True
            return None, info
        return loss, info
