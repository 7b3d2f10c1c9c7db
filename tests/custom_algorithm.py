"""An algorithm written outside the package, as a user writes one: REINFORCE with a learned
baseline. Trained by naming it ``algorithm.name: tests.custom_algorithm:Reinforce`` in a config
(tests/test_custom_algorithm.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F

from pytorchrl.agent.algorithms import Algorithm, OnPolicyConfig
from pytorchrl.agent.algorithms.families import actor_critic_wiring
from pytorchrl.agent.algorithms.wiring import Wiring
from pytorchrl.config import Config, param


@dataclass(frozen=True)
class ReinforceConfig(OnPolicyConfig):
    """REINFORCE (Williams 1992) with a value baseline, on Monte-Carlo returns."""

    name: str = param("tests.custom_algorithm:Reinforce", "The algorithm.")
    lr: float = param(1e-3, "Adam learning rate.", min=0, min_exclusive=True)
    gae_lambda: float = param(1.0, "1: Monte-Carlo returns.", min=0, max=1)
    baseline_coef: float = param(0.5, "Weight of the baseline's regression.", min=0)


class Reinforce(Algorithm):
    config_class = ReinforceConfig
    actor_kind = "OnPolicyActor"
    storage_kind = "GAEBuffer"
    config: ReinforceConfig
    tunable = (*Algorithm.tunable, "baseline_coef")
    metrics: tuple[str, ...] = ("policy_loss", "baseline_loss", "lr")

    @classmethod
    def wire(cls, config: Config, observation_space: gym.Space, action_space: gym.Space) -> Wiring:
        return actor_critic_wiring(cls, config, observation_space, action_space)

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, dict[str, Any]]:
        log_prob, entropy, value, batch = self.evaluate_transitions(batch)
        advantages = batch["returns"] - value.detach()
        policy_loss = -(advantages * log_prob).mean()
        baseline_loss = F.mse_loss(value, batch["returns"])
        loss = policy_loss + self.config.baseline_coef * baseline_loss - self.config.ent_coef * entropy.mean()
        return loss, {"policy_loss": policy_loss.detach().item(), "baseline_loss": baseline_loss.detach().item(), "lr": self.lr}


class NotAnAlgorithm:
    """A class that is no Algorithm: refused as ``algorithm.name``."""


class Undecorated(ReinforceConfig):  # no @dataclass: its key is no field
    extra_coef: float = 1.0


class UndecoratedReinforce(Reinforce):
    config_class = Undecorated
