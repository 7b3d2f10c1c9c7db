"""Action distribution heads, written out by hand.

``torch.distributions`` validates arguments and builds objects on every call; on the acting
path of a 64-env CartPole worker that costs more than the env step itself. These heads do
the same math with plain tensor ops.
"""

from __future__ import annotations

import math

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def categorical_sample(log_probs: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample (or take the mode of) categoricals given normalised log-probabilities, one row each."""
    if deterministic:
        action = log_probs.argmax(dim=-1)
    else:
        # Gumbel-max: argmax(log p + G) ~ softmax(log p) for Gumbel G = -log E, E ~ Exp(1).
        action = (log_probs - torch.empty_like(log_probs).exponential_().log_()).argmax(dim=-1)
    return action, log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)


def categorical_log_prob_entropy(log_probs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of ``actions`` and entropy of categoricals given normalised log-probabilities."""
    log_prob = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return log_prob, -(log_probs.exp() * log_probs).sum(-1)


class ActionHead(nn.Module):
    """Maps features to a distribution; samples, scores and measures its entropy."""

    def sample(self, params: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(action, log_prob)``."""
        raise NotImplementedError

    def log_prob_entropy(self, params: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(log_prob(actions), entropy)``, one value per row."""
        raise NotImplementedError


class CategoricalHead(ActionHead):
    """Categorical over ``n`` actions (Discrete spaces)."""

    def __init__(self, in_features: int, n: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, n)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(F.linear(features, self.linear.weight, self.linear.bias), dim=-1)

    def sample(self, params: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return categorical_sample(params, deterministic)

    def log_prob_entropy(self, params: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return categorical_log_prob_entropy(params, actions)


class MultiCategoricalHead(ActionHead):
    """Independent categoricals, one per dimension (MultiDiscrete spaces)."""

    def __init__(self, in_features: int, nvec: list[int]) -> None:
        super().__init__()
        self.nvec = [int(n) for n in nvec]
        self.linear = nn.Linear(in_features, sum(self.nvec))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return F.linear(features, self.linear.weight, self.linear.bias)

    def _split(self, params: torch.Tensor) -> list[torch.Tensor]:
        return [torch.log_softmax(p, dim=-1) for p in params.split(self.nvec, dim=-1)]

    def sample(self, params: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        actions, log_probs = zip(*(categorical_sample(p, deterministic) for p in self._split(params)))
        return torch.stack(actions, dim=-1), torch.stack(log_probs, dim=-1).sum(-1)

    def log_prob_entropy(self, params: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [categorical_log_prob_entropy(p, actions[..., i]) for i, p in enumerate(self._split(params))]
        return torch.stack([lp for lp, _ in parts], -1).sum(-1), torch.stack([e for _, e in parts], -1).sum(-1)


class DiagGaussianHead(ActionHead):
    """Diagonal Gaussian with a state-independent, learned log std (Box spaces)."""

    def __init__(self, in_features: int, action_dim: int, *, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, action_dim)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(log_std_init)))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return F.linear(features, self.linear.weight, self.linear.bias)

    def sample(self, params: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        if deterministic:
            action = params
        else:
            action = params + torch.randn_like(params) * self.log_std.exp()
        return action, self.log_prob_entropy(params, action)[0]

    def log_prob_entropy(self, params: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = (actions - params) * torch.exp(-self.log_std)
        log_prob = (-0.5 * z.pow(2) - self.log_std - LOG_SQRT_2PI).sum(-1)
        entropy = (0.5 + LOG_SQRT_2PI + self.log_std).sum().expand(params.shape[0])
        return log_prob, entropy


def make_action_head(in_features: int, action_space: gym.Space, *, log_std_init: float = 0.0) -> ActionHead:
    """The head for ``action_space``."""
    if isinstance(action_space, gym.spaces.Discrete):
        return CategoricalHead(in_features, int(action_space.n))
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return MultiCategoricalHead(in_features, list(action_space.nvec))
    if isinstance(action_space, gym.spaces.Box):
        return DiagGaussianHead(in_features, int(action_space.shape[0]), log_std_init=log_std_init)
    raise ValueError(f"unsupported action space {action_space}")
