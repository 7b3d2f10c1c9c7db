"""Q-networks for value-based off-policy algorithms (DQN and the Rainbow components).

:class:`QNetwork` is an MLP with switchable Rainbow parts: dueling heads (Wang et al. 2016),
noisy linear layers (Fortunato et al. 2018) and a distributional C51 output (Bellemare et al.
2017). :class:`OffPolicyActor` holds the online network and its target copy, and acts
epsilon-greedily on the collection path with the same interface as the on-policy actor
(:meth:`OffPolicyActor.draw_noise`, :meth:`OffPolicyActor.act`), so collection workers need no
special case.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pytorchrl.agent.actors.networks.mlp import MLP


class NoisyLinear(nn.Module):
    """A linear layer with factorised Gaussian parameter noise (Fortunato et al. 2018, §3).

    The noise is redrawn by :meth:`reset_noise`; in ``eval()`` mode (deterministic acting,
    evaluation) the mean weights are used.

    :param sigma0: initial noise scale, ``sigma0 / sqrt(in_features)`` per weight.
    """

    eps_in: torch.Tensor
    eps_out: torch.Tensor

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)
        self.reset_noise()

    @staticmethod
    def _scaled(x: torch.Tensor) -> torch.Tensor:
        return x.sign() * x.abs().sqrt()

    def reset_noise(self) -> None:
        self.eps_in.copy_(self._scaled(torch.randn(self.in_features)))
        self.eps_out.copy_(self._scaled(torch.randn(self.out_features)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in)
        return F.linear(x, weight, self.bias_mu + self.bias_sigma * self.eps_out)


class QNetwork(nn.Module):
    """``obs -> Q(obs, .)`` over a Discrete action space, with optional Rainbow parts.

    :param in_features: flattened observation size.
    :param num_actions: number of discrete actions.
    :param hidden_sizes: hidden widths of the MLP torso.
    :param activation: hidden activation name.
    :param dueling: separate value and advantage streams, ``Q = V + A - mean(A)``.
    :param noisy: noisy linear layers in the heads (exploration without epsilon).
    :param num_atoms: atoms of the C51 return distribution (1: plain expected values).
    :param v_min: smallest support value (C51).
    :param v_max: largest support value (C51).
    """

    support: torch.Tensor

    def __init__(
        self, in_features: int, num_actions: int, *, hidden_sizes: tuple[int, ...], activation: str = "relu",
        dueling: bool = False, noisy: bool = False, num_atoms: int = 1, v_min: float = -10.0, v_max: float = 10.0,
    ) -> None:
        super().__init__()
        self.num_actions, self.num_atoms = num_actions, num_atoms
        self.torso = MLP(in_features, tuple(hidden_sizes), activation=activation)
        width = self.torso.out_features
        linear: Callable[[int, int], nn.Module] = NoisyLinear if noisy else nn.Linear
        self.advantage = linear(width, num_actions * num_atoms)
        self.value = linear(width, num_atoms) if dueling else None
        self.register_buffer("support", torch.linspace(v_min, v_max, num_atoms) if num_atoms > 1 else torch.zeros(1))

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        """Per-action outputs ``[batch, actions, atoms]``: values (1 atom) or distribution logits."""
        features = self.torso.forward(obs.flatten(1))
        adv = self.advantage(features).view(-1, self.num_actions, self.num_atoms)
        if self.value is None:
            return adv
        return self.value(features).view(-1, 1, self.num_atoms) + adv - adv.mean(dim=1, keepdim=True)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Expected action values ``[batch, actions]``."""
        out = self.logits(obs)
        if self.num_atoms == 1:
            return out.squeeze(-1)
        return (out.softmax(-1) * self.support).sum(-1)

    def reset_noise(self) -> None:
        for module in self.modules():
            if isinstance(module, NoisyLinear):
                module.reset_noise()


class OffPolicyActor(nn.Module):
    """An online :class:`QNetwork`, its target copy, and epsilon-greedy acting.

    ``epsilon`` is a buffer: it travels to collection workers with the weights, so the learner's
    schedule is what every worker acts with; a worker may scale it (``epsilon_power``, Ape-X's
    per-worker exploration) without the weights overwriting that.

    :param observation_space: a Box space (flattened).
    :param action_space: a Discrete space.
    :param apex_alpha: Ape-X exploration (Horgan et al. 2018): collector ``i`` of
        ``num_collectors`` acts with ``epsilon ** (1 + apex_alpha * i / (num_collectors - 1))``
        (None: every collector uses ``epsilon``).
    :param num_collectors: collection workers in the scheme (for ``apex_alpha``).
    :param kwargs: :class:`QNetwork` options.
    """

    is_recurrent = False
    epsilon: torch.Tensor

    def __init__(
        self, observation_space: gym.Space, action_space: gym.Space, *, apex_alpha: float | None = None, num_collectors: int = 1, **kwargs: Any
    ) -> None:
        super().__init__()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"Q-networks need a Discrete action space, got {action_space}")
        assert observation_space.shape is not None
        self.observation_space, self.action_space = observation_space, action_space
        self.num_actions = int(action_space.n)
        self.q_net = QNetwork(int(np.prod(observation_space.shape)), self.num_actions, **kwargs)
        self.target_q_net = copy.deepcopy(self.q_net).requires_grad_(False)
        self.register_buffer("epsilon", torch.tensor(1.0))
        self.epsilon_power = 1.0  # per collection worker, never sent: epsilon ** power
        self.apex_alpha, self.num_collectors = apex_alpha, num_collectors
        self.continuous = False

    @classmethod
    def create_factory(cls, observation_space: gym.Space, action_space: gym.Space, **kwargs: Any) -> Callable[..., OffPolicyActor]:
        """A picklable ``factory(device="cpu") -> OffPolicyActor``."""
        return functools.partial(_build_actor, cls, observation_space, action_space, **kwargs)

    # ------------------------------------------------------------------------ acting

    def get_action(
        self, obs: torch.Tensor, rhs: Any = None, done: torch.Tensor | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], Any]:
        """Greedy actions (``deterministic``, the evaluation path) or epsilon-greedy ones."""
        noise = self.draw_noise(1, obs.shape[0])[0]
        if deterministic:
            noise[..., 0] = 1.0  # never explore
        action = torch.empty(obs.shape[0], dtype=torch.long, device=obs.device)
        self.act(obs, noise, action, greedy=deterministic)
        return action, {}, rhs

    def draw_noise(self, num_steps: int, num_envs: int) -> torch.Tensor:
        """Per step and env: a uniform draw (explore when below epsilon) and a random action.

        Noisy nets get fresh parameter noise once per rollout here.
        """
        self.q_net.reset_noise()
        uniform = torch.rand(num_steps, num_envs, 1)
        random_action = torch.randint(self.num_actions, (num_steps, num_envs, 1)).float()
        return torch.cat([uniform, random_action], dim=-1)

    def act(self, obs: torch.Tensor, noise: torch.Tensor, out: torch.Tensor, *, greedy: bool = False) -> None:
        """Epsilon-greedy actions for a batch of observations into ``out`` (see :meth:`draw_noise`)."""
        self.q_net.train(not greedy)  # noisy layers use their mean weights when acting greedily
        q = self.q_net.forward(obs)
        self.q_net.train(True)
        epsilon = float(self.epsilon) ** self.epsilon_power
        out.copy_(torch.where(noise[..., 0] < epsilon, noise[..., 1].long(), q.argmax(-1)))

    def set_collector(self, index: int) -> None:
        """Act as collector ``index`` (0-based): its own exploration rate under Ape-X."""
        if self.apex_alpha is not None and self.num_collectors > 1:
            self.epsilon_power = 1.0 + self.apex_alpha * index / (self.num_collectors - 1)

    def score(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``Q(obs, actions)`` and ``max_a Q_target(obs, a)`` (the bootstrap value, for actor-side
        priorities: Ape-X's collection workers score their own transitions)."""
        q = self.q_net.forward(obs)
        taken = q.gather(-1, actions.long().view(-1, 1)).squeeze(-1)
        return taken, self.target_q_net.forward(obs).max(-1).values

    @torch.no_grad()
    def update_target(self, tau: float) -> None:
        """Move the target network towards the online one: ``target += tau * (online - target)`` (1: copy)."""
        online: list[torch.Tensor] = list(self.q_net.parameters())
        target: list[torch.Tensor] = list(self.target_q_net.parameters())
        if tau >= 1.0:
            torch._foreach_copy_(target, online)
        else:
            torch._foreach_lerp_(target, online, tau)


def _build_actor(cls: type[OffPolicyActor], observation_space: gym.Space, action_space: gym.Space, device: str | torch.device = "cpu", **kwargs: Any) -> OffPolicyActor:
    return cls(observation_space, action_space, **kwargs).to(device)
