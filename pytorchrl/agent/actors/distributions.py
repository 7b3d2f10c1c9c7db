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

from pytorchrl.agent.actors.noise import NoisePart, draw_parts, gumbel_noise

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
#: the logit of an illegal action (action masking): -inf in effect (its probability is exactly 0),
#: but finite, so that entropies and log-probabilities of the legal actions stay free of NaN
MASKED_LOGIT = torch.finfo(torch.float32).min


def legal_actions(obs: torch.Tensor, where: slice | None) -> torch.Tensor | None:
    """The legal-action mask (bool, True = legal) that sits at ``where`` in each observation row
    (a packed Dict's ``action_mask`` key); None without masking."""
    return None if where is None else obs.flatten(1)[:, where] > 0.5


def categorical_sample(log_probs: torch.Tensor, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample (or take the mode of) categoricals given normalised log-probabilities, one row each."""
    if deterministic:
        action = log_probs.argmax(dim=-1)
    else:
        action = (log_probs + gumbel_noise(log_probs.shape, log_probs.device)).argmax(dim=-1)
    return action, log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)


def categorical_log_prob_entropy(log_probs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of ``actions`` and entropy of categoricals given normalised log-probabilities."""
    log_prob = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return log_prob, -(log_probs.exp() * log_probs).sum(-1)


class ActionHead(nn.Module):
    """Maps features to a distribution; samples, scores and measures its entropy.

    Two ways to sample: :meth:`sample` from distribution parameters (evaluation, tests), and
    :meth:`act`, the collection path, which skips everything but the action: it takes noise
    drawn for a whole rollout at once by :meth:`draw_noise`, and leaves the log-probabilities
    to be scored afterwards in large batches (:meth:`log_prob`).

    That noise is described by :meth:`noise_parts` (what a client of a central inference server
    draws without the network) and drawn by :func:`~pytorchrl.agent.actors.noise.draw_parts`;
    :meth:`scale_noise` is the step that needs the weights, if any.
    """

    #: :meth:`scale_noise` multiplies the drawn noise by ``exp(log_std)`` (else it returns it as it is)
    noise_scaled_by_weights = False

    def noise_parts(self) -> tuple[NoisePart, ...]:
        """What :meth:`draw_noise` draws, in order (before :meth:`scale_noise`)."""
        raise NotImplementedError

    def scale_noise(self, noise: torch.Tensor) -> torch.Tensor:
        """The drawn noise made ready for :meth:`act` with the current weights (in place)."""
        return noise

    def draw_noise(self, num_steps: int, num_envs: int) -> torch.Tensor:
        """Random noise for sampling ``[num_steps, num_envs]`` actions with :meth:`act`, from the
        generator of the head's device."""
        return self.scale_noise(draw_parts(self.noise_parts(), num_steps, num_envs, next(self.parameters()).device))

    def act(self, features: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        """Write actions sampled for a batch of ``features`` with pre-drawn ``noise`` into ``out``."""
        raise NotImplementedError

    def act_params(self, params: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        """:meth:`act` from distribution parameters (:meth:`forward`'s), where they are computed
        anyway (an actor that scores while it acts, or masks actions)."""
        raise NotImplementedError

    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``log_prob(actions)`` under ``params`` (from :meth:`forward`), one value per row."""
        return self.log_prob_entropy(params, actions)[0]

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

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Normalised log-probabilities; ``mask`` (bool, True = legal) gives illegal actions probability 0."""
        logits = F.linear(features, self.linear.weight, self.linear.bias)
        if mask is not None:
            logits = logits.masked_fill(~mask, MASKED_LOGIT)
        return torch.log_softmax(logits, dim=-1)

    def noise_parts(self) -> tuple[NoisePart, ...]:
        return (NoisePart("gumbel", self.linear.out_features),)

    def act(self, features: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        # Gumbel-max on the unnormalised logits: the log-softmax does not move the argmax
        torch.argmax(F.linear(features, self.linear.weight, self.linear.bias).add_(noise), dim=-1, out=out)

    def act_params(self, params: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        torch.argmax(params + noise, dim=-1, out=out)  # a masked action's log-probability stays ~finfo.min

    def log_prob(self, params: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return params.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

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

    def noise_parts(self) -> tuple[NoisePart, ...]:
        return (NoisePart("gumbel", sum(self.nvec)),)

    def act(self, features: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        self.act_params(self.forward(features), noise, out)

    def act_params(self, params: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        for i, part in enumerate((params + noise).split(self.nvec, dim=-1)):
            out[..., i] = part.argmax(dim=-1)

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

    noise_scaled_by_weights = True

    def noise_parts(self) -> tuple[NoisePart, ...]:
        return (NoisePart("normal", int(self.log_std.shape[0])),)

    def scale_noise(self, noise: torch.Tensor) -> torch.Tensor:
        # scaled by the std once per rollout: the weights do not change during one
        return noise.mul_(self.log_std.exp())

    def act(self, features: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        self.act_params(F.linear(features, self.linear.weight, self.linear.bias), noise, out)

    def act_params(self, params: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        torch.add(params, noise, out=out)

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
