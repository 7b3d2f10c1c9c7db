"""Advantage Actor-Critic, synchronous (Mnih et al. 2016, A2C variant)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F

from pytorchrl.agent.actors.rnd import RND_METRICS, add_intrinsic_rewards, predictor_loss, rewarded_observations
from pytorchrl.agent.algorithms.base import Algorithm, normalized
from pytorchrl.agent.algorithms.families import OnPolicyConfig, actor_critic_wiring
from pytorchrl.agent.algorithms.wiring import Wiring
from pytorchrl.config import Config, param


@dataclass(frozen=True)
class A2CConfig(OnPolicyConfig):
    """Advantage Actor-Critic (Mnih et al. 2016), synchronous, one gradient step per rollout."""

    takes_rnd = True

    name: str = param("a2c", "The algorithm.")
    lr: float = param(7e-4, "Adam learning rate.", min=0, min_exclusive=True)
    gae_lambda: float = param(1.0, "GAE lambda; 1 gives the n-step returns of the original A2C.", min=0, max=1)
    normalize_advantages: bool = param(False, "Normalise advantages to zero mean, unit std.")


class A2C(Algorithm):
    """One gradient step per rollout on ``-A * log pi + vf_coef * (V - R)^2 - ent_coef * H``.

    Its actor has ``evaluate_actions``; its hyper-parameters are :class:`A2CConfig`'s; the
    whole rollout is one minibatch.
    """

    config_class = A2CConfig
    actor_kind = "OnPolicyActor"
    storage_kind = "GAEBuffer"
    config: A2CConfig
    recurrent = True
    action_masks = True
    tunable = (*Algorithm.tunable, "ent_coef", "vf_coef")
    metrics: tuple[str, ...] = ("policy_loss", "value_loss", "entropy", "explained_variance", "lr")

    def __init__(self, actor: Any, device: str | torch.device = "cpu", config: A2CConfig | None = None, **overrides: Any) -> None:
        super().__init__(actor, device, config, **overrides)
        if self.config.rnd.enabled:
            self.metrics = (*self.metrics, *RND_METRICS)

    def prepare_round(self, storage: Any) -> None:
        """With RND: the round's intrinsic rewards and their advantages (:func:`add_intrinsic_rewards`)."""
        if self.config.rnd.enabled:
            self._intrinsic_reward = add_intrinsic_rewards(self, storage)

    @classmethod
    def wire(cls, config: Config, observation_space: gym.Space, action_space: gym.Space) -> Wiring:
        return actor_critic_wiring(cls, config, observation_space, action_space)

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, dict[str, float]]:
        log_prob, entropy, value, batch = self.evaluate_transitions(batch)
        advantages = batch["advantages"]
        if self.config.normalize_advantages:
            advantages = normalized(advantages)
        policy_loss = -(advantages * log_prob).mean()
        value_loss = F.mse_loss(value, batch["returns"])
        entropy_mean = entropy.mean()
        loss = policy_loss + self.config.vf_coef * value_loss - self.config.ent_coef * entropy_mean
        stats = torch.stack([policy_loss, value_loss, entropy_mean]).detach().tolist()
        info: dict[str, Any] = dict(zip(("policy_loss", "value_loss", "entropy"), stats))
        info["lr"] = self.lr
        if self.config.rnd.enabled:
            rnd_loss, rnd_info = predictor_loss(self, rewarded_observations(batch))
            loss = loss + rnd_loss
            info.update(rnd_info, intrinsic_reward=self._intrinsic_reward)
        return loss, info
