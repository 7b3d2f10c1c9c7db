"""Actor-critic network for on-policy algorithms."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from pytorchrl.agent.actors.distributions import ActionHead, DiagGaussianHead, make_action_head
from pytorchrl.agent.actors.networks.encoders import EncoderSpec, ImpalaResNet, NatureCNN
from pytorchrl.agent.actors.networks.mlp import HIDDEN_GAIN, orthogonal_init


class OnPolicyActor(nn.Module):
    """A policy head and a value head over encoder features (shared or separate).

    :param observation_space: any space :class:`EncoderSpec` takes (Box, image, Discrete, Dict).
    :param action_space: Discrete, Box or MultiDiscrete.
    :param encoder: the feature extractor (MLP by default).
    :param shared_network: one encoder for both heads instead of two.
    :param log_std_init: initial log std of Gaussian policies.
    :param ortho_init: orthogonal initialisation with the usual PPO gains.
    """

    is_recurrent = False

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        encoder: EncoderSpec = EncoderSpec(),
        shared_network: bool = False,
        log_std_init: float = 0.0,
        ortho_init: bool = True,
    ) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space
        self.policy_net = encoder.build(observation_space)
        self.value_net = None if shared_network else encoder.build(observation_space)
        width = self.policy_net.out_features
        self.action_head: ActionHead = make_action_head(width, action_space, log_std_init=log_std_init)
        self.value_head = nn.Linear(width, 1)
        if ortho_init:
            orthogonal_init(self.policy_net, HIDDEN_GAIN)
            if self.value_net is not None:
                orthogonal_init(self.value_net, HIDDEN_GAIN)
            orthogonal_init(self.action_head, 0.01)
            orthogonal_init(self.value_head, 1.0)
        self.continuous = isinstance(self.action_head, DiagGaussianHead)
        # a CNN costs the same per row in a batch of 8 as of 4096, so scoring the rollout
        # afterwards would only repeat the forward pass: score while acting instead
        self.scores_while_acting = any(isinstance(m, (NatureCNN, ImpalaResNet)) for m in self.modules())

    @classmethod
    def create_factory(cls, observation_space: gym.Space, action_space: gym.Space, **kwargs: Any) -> Callable[..., OnPolicyActor]:
        """A picklable ``factory(device="cpu") -> OnPolicyActor``."""
        return functools.partial(_build_actor, cls, observation_space, action_space, **kwargs)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Distribution parameters and state values (shape ``[batch]``)."""
        features = self.policy_net.forward(obs)
        value_features = features if self.value_net is None else self.value_net.forward(obs)
        return self.action_head.forward(features), self._value(value_features)

    def _value(self, features: torch.Tensor) -> torch.Tensor:
        return F.linear(features, self.value_head.weight, self.value_head.bias).squeeze(-1)

    def get_action(
        self, obs: torch.Tensor, rhs: Any = None, done: torch.Tensor | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], Any]:
        """Act on a batch of observations.

        :return: ``action, {"log_prob", "value"}, rhs`` (rhs: recurrent state, None here).
        """
        params, value = self.forward(obs)
        action, log_prob = self.action_head.sample(params, deterministic)
        return action, {"log_prob": log_prob, "value": value}, rhs

    def get_value(self, obs: torch.Tensor, rhs: Any = None, done: torch.Tensor | None = None) -> torch.Tensor:
        """State values only."""
        net = self.policy_net if self.value_net is None else self.value_net
        return self._value(net.forward(obs))

    def draw_noise(self, num_steps: int, num_envs: int) -> torch.Tensor:
        """The sampling noise of a whole rollout, for :meth:`act` (one row per step)."""
        return self.action_head.draw_noise((num_steps, num_envs))

    def act(self, obs: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        """Sample actions for a batch of observations into ``out``: the collection path.

        Only the policy half runs per step; log-probabilities and values are computed for the
        whole rollout afterwards by :meth:`score`, in large batches (five times cheaper per row).
        """
        self.action_head.act(self.policy_net.forward(obs), noise, out)

    def act_scored(self, obs: torch.Tensor, noise: torch.Tensor, out: torch.Tensor, log_prob_out: torch.Tensor, value_out: torch.Tensor) -> None:
        """:meth:`act`, also writing the actions' log-probabilities and the observations' values
        (what :meth:`score` would give): one pass of the encoder instead of two."""
        features = self.policy_net.forward(obs)
        self.action_head.act(features, noise, out)
        log_prob_out.copy_(self.action_head.log_prob(self.action_head.forward(features), out))
        value_out.copy_(self._value(features if self.value_net is None else self.value_net.forward(obs)))

    def score(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``log_prob(actions), value`` of a batch of observations (see :meth:`act`)."""
        params, value = self.forward(obs)
        return self.action_head.log_prob(params, actions), value

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor, rhs: Any = None, done: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``log_prob(actions), entropy, value`` under the current parameters (for the losses)."""
        params, value = self.forward(obs)
        log_prob, entropy = self.action_head.log_prob_entropy(params, actions)
        return log_prob, entropy, value


def _build_actor(cls: type[OnPolicyActor], observation_space: gym.Space, action_space: gym.Space, device: str | torch.device = "cpu", **kwargs: Any) -> OnPolicyActor:
    return cls(observation_space, action_space, **kwargs).to(device)
