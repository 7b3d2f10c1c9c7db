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
import itertools
import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from pytorchrl.agent.actors.distributions import MASKED_LOGIT, legal_actions
from pytorchrl.agent.actors.networks.encoders import EncoderSpec
from pytorchrl.agent.actors.networks.recurrent import RecurrentCore, RecurrentSpec, carried_state, run_core
from pytorchrl.agent.actors.noise import NoisePart, draw_parts


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

    :param observation_space: the observation space (any that :class:`EncoderSpec` takes).
    :param num_actions: number of discrete actions.
    :param encoder: the torso.
    :param dueling: separate value and advantage streams, ``Q = V + A - mean(A)``.
    :param noisy: noisy linear layers in the heads (exploration without epsilon).
    :param head_hidden_sizes: hidden layers (ReLU) of each head stream, before its output layer;
        noisy with ``noisy``. Hessel et al.'s Rainbow network is ``(512,)`` on a CNN without
        its own linear layer (``cnn_features=0``) and no MLP after it (``hidden_sizes=()``): each
        stream then has a noisy 512-unit layer.
    :param num_atoms: atoms of the C51 return distribution (1: plain expected values).
    :param v_min: smallest support value (C51).
    :param v_max: largest support value (C51).
    :param recurrent: a recurrent core between the torso and the heads (R2D2); the
        ``*_step``/``*_sequence`` methods then carry its state.
    """

    support: torch.Tensor

    def __init__(
        self, observation_space: gym.Space, num_actions: int, *, encoder: EncoderSpec = EncoderSpec(activation="relu"),
        dueling: bool = False, noisy: bool = False, num_atoms: int = 1, v_min: float = -10.0, v_max: float = 10.0,
        recurrent: RecurrentSpec | None = None, head_hidden_sizes: tuple[int, ...] = (),
    ) -> None:
        super().__init__()
        self.num_actions, self.num_atoms = num_actions, num_atoms
        self.torso = encoder.build(observation_space)
        width = self.torso.out_features
        self.core: RecurrentCore | None = None if recurrent is None else recurrent.build(width)
        if self.core is not None:
            width = self.core.out_features
        linear: Callable[[int, int], nn.Module] = NoisyLinear if noisy else nn.Linear

        def stream(out_features: int) -> tuple[nn.Module | None, nn.Module]:
            """A head stream's hidden layers (None: none; so a network without them keeps
            its parameter names) and its output layer."""
            widths = (width, *head_hidden_sizes)
            layers = [m for a, b in itertools.pairwise(widths) for m in (linear(a, b), nn.ReLU())]
            return nn.Sequential(*layers) if layers else None, linear(widths[-1], out_features)

        self.advantage_hidden, self.advantage = stream(num_actions * num_atoms)
        self.value_hidden: nn.Module | None
        self.value: nn.Module | None
        self.value_hidden, self.value = stream(num_atoms) if dueling else (None, None)
        self.register_buffer("support", torch.linspace(v_min, v_max, num_atoms) if num_atoms > 1 else torch.zeros(1))

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        """Per-action outputs ``[batch, actions, atoms]``: values (1 atom) or distribution logits."""
        return self.head_logits(self.torso.forward(obs))

    def logits_step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`logits` of one step of a recurrent network, and its next state."""
        assert self.core is not None
        features, state = self.core.step(self.torso.forward(obs), state)
        return self.head_logits(features), state

    def logits_sequence(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor, burn_in: int = 0) -> torch.Tensor:
        """:meth:`logits` of ``[T, B]`` steps from ``state`` (the recurrence reset at ``starts``),
        after ``burn_in`` steps that only warm the state up: ``[T - burn_in, B, actions, atoms]``."""
        assert self.core is not None
        out = run_core(self.core, self.torso.forward, obs, state, starts, burn_in)
        t, b = out.shape[:2]
        return self.head_logits(out.reshape(t * b, -1)).view(t, b, self.num_actions, self.num_atoms)

    def head_logits(self, features: torch.Tensor) -> torch.Tensor:
        """The heads' ``[batch, actions, atoms]`` outputs of torso (or core) features."""
        hidden = self.advantage_hidden
        adv = self.advantage(features if hidden is None else hidden(features)).view(-1, self.num_actions, self.num_atoms)
        if self.value is None:
            return adv
        hidden = self.value_hidden
        value = self.value(features if hidden is None else hidden(features))
        return value.view(-1, 1, self.num_atoms) + adv - adv.mean(dim=1, keepdim=True)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Expected action values ``[batch, actions]``."""
        return self.values(self.logits(obs))

    def values(self, logits: torch.Tensor) -> torch.Tensor:
        """Expected values of :meth:`logits` (so one forward pass serves both)."""
        if self.num_atoms == 1:
            return logits.squeeze(-1)
        return (logits.softmax(-1) * self.support).sum(-1)

    def reset_noise(self) -> None:
        for module in self.modules():
            if isinstance(module, NoisyLinear):
                module.reset_noise()


class OffPolicyActor(nn.Module):
    """An online :class:`QNetwork`, its target copy, and epsilon-greedy acting.

    ``epsilon`` is a buffer: it travels to collection workers with the weights, so the learner's
    schedule is what every worker acts with; a worker may scale it (``epsilon_power``, Ape-X's
    per-worker exploration) without the weights overwriting that.

    :param observation_space: the observation space (any that :class:`EncoderSpec` takes).
    :param action_space: a Discrete space.
    :param apex_alpha: Ape-X exploration (Horgan et al. 2018): collector ``i`` of
        ``num_collectors`` acts with ``epsilon ** (1 + apex_alpha * i / (num_collectors - 1))``
        (None: every collector uses ``epsilon``).
    :param num_collectors: collection workers in the scheme (for ``apex_alpha``).
    :param action_mask: where the legal-action mask sits in an observation row: illegal actions
        are never the greedy choice, never drawn when exploring, never a bootstrap action.
    :param kwargs: :class:`QNetwork` options (``recurrent``: R2D2's core; its state is the
        ``rhs`` of :meth:`get_action` and the ``state`` of :meth:`act_recurrent`).
    """

    is_recurrent = False
    state_size = 0
    #: acting leaves scoring to the rollout's end (Ape-X's priorities; see OnPolicyActor)
    scores_while_acting = False
    epsilon: torch.Tensor

    def __init__(
        self, observation_space: gym.Space, action_space: gym.Space, *, apex_alpha: float | None = None, num_collectors: int = 1,
        action_mask: slice | None = None, double_q: bool = False, **kwargs: Any,
    ) -> None:
        super().__init__()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"Q-networks need a Discrete action space, got {action_space}")
        self.observation_space, self.action_space = observation_space, action_space
        self.num_actions = int(action_space.n)
        self.q_net = QNetwork(observation_space, self.num_actions, **kwargs)
        self.action_mask = action_mask
        if self.q_net.core is not None:
            self.is_recurrent = True
            self.state_size = self.q_net.core.state_size
        self.target_q_net = copy.deepcopy(self.q_net).requires_grad_(False)
        self.register_buffer("epsilon", torch.tensor(1.0))
        self.epsilon_power = 1.0  # per collection worker, never sent: epsilon ** power
        self.apex_alpha, self.num_collectors = apex_alpha, num_collectors
        self.double_q = double_q  # of the bootstrap value it scores with (score), as the learner's targets
        self.continuous = False

    @classmethod
    def create_factory(cls, observation_space: gym.Space, action_space: gym.Space, **kwargs: Any) -> Callable[..., OffPolicyActor]:
        """A picklable ``factory(device="cpu") -> OffPolicyActor``."""
        return functools.partial(build_actor, cls, observation_space, action_space, **kwargs)

    # ------------------------------------------------------------------------ acting

    def get_action(
        self, obs: torch.Tensor, rhs: Any = None, done: torch.Tensor | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], Any]:
        """Greedy actions (``deterministic``, the evaluation path) or epsilon-greedy ones.

        :param rhs: a recurrent network's state (None: fresh episodes); returned advanced.
        :param done: bool per row: a new episode starts at this observation.
        """
        state = carried_state(rhs, done, obs.shape[0], self.state_size, obs.device) if self.is_recurrent else None
        action = torch.empty(obs.shape[0], dtype=torch.long, device=obs.device)
        if deterministic:
            self.q_net.eval()  # noisy layers act with their mean weights
            q, rhs = self._q(obs, state)
            torch.argmax(self.masked(q, obs), dim=-1, out=action)
            self.q_net.train()
            return action, {}, rhs
        noise = self.draw_noise(1, obs.shape[0])[0].to(obs.device)  # the CPU stream's draws, where the actor acts
        if state is None:
            self.act(obs, noise, action)
        else:
            rhs = self.act_recurrent(obs, state, noise, action)
        return action, {}, rhs

    def _q(self, obs: torch.Tensor, state: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Expected action values (and a recurrent network's next state)."""
        if state is None:
            return self.q_net.forward(obs), None
        logits, state = self.q_net.logits_step(obs, state)
        return self.q_net.values(logits), state

    def legal(self, obs: torch.Tensor) -> torch.Tensor | None:
        """The legal actions of each observation row (None without masking)."""
        return legal_actions(obs, self.action_mask)

    def masked(self, values: torch.Tensor, obs: torch.Tensor, legal: torch.Tensor | None = None) -> torch.Tensor:
        """``values [batch, actions]`` with illegal actions at -inf in effect (for argmax and max);
        ``legal``: :meth:`legal` of ``obs``, when the caller has it already."""
        legal = self.legal(obs) if legal is None else legal
        return values if legal is None else values.masked_fill(~legal, MASKED_LOGIT)

    #: epsilon (a buffer) picks between the drawn parts; the noise itself needs no weights
    noise_scaled_by_weights = False

    def noise_parts(self) -> tuple[NoisePart, ...]:
        """What :meth:`draw_noise` draws, in order: a uniform draw (explore when below epsilon)
        and a random action, per step and env."""
        return NoisePart("uniform", 1), NoisePart("integers", 1, self.num_actions)

    def exploration_state(self) -> str | None:
        """Exploration kept in the actor beside its drawn noise, in words: noisy nets' parameter noise."""
        if any(isinstance(m, NoisyLinear) for m in self.modules()):
            return "noisy nets draw their parameter noise per worker and rollout"
        return None

    def draw_noise(self, num_steps: int, num_envs: int) -> torch.Tensor:
        """:meth:`noise_parts`, drawn from the CPU generator (see :meth:`act`).

        Noisy nets get fresh parameter noise once per rollout here, before the parts.
        """
        self.q_net.reset_noise()
        return draw_parts(self.noise_parts(), num_steps, num_envs)

    def act(self, obs: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        """Epsilon-greedy actions for a batch of observations into ``out`` (see :meth:`draw_noise`)."""
        self._epsilon_greedy(self.q_net.forward(obs), obs, noise, out)

    def act_recurrent(self, obs: torch.Tensor, state: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """:meth:`act` of a recurrent network from ``state`` (zeroed where an episode starts);
        returns the next state."""
        logits, state = self.q_net.logits_step(obs, state)
        self._epsilon_greedy(self.q_net.values(logits), obs, noise, out)
        return state

    def _epsilon_greedy(self, q: torch.Tensor, obs: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        epsilon = float(self.epsilon) ** self.epsilon_power
        legal = self.legal(obs)
        if legal is None:
            out.copy_(torch.where(noise[..., 0] < epsilon, noise[..., 1].long(), q.argmax(-1)))
            return
        # exploring: a uniform draw among the legal actions. Given u < epsilon, u / epsilon is
        # uniform in [0, 1): it picks the k-th legal action, k uniform in [0, count)
        count = legal.sum(-1).clamp(min=1)
        rank = torch.minimum((noise[..., 0] / max(epsilon, 1e-12) * count).long(), count - 1).unsqueeze(-1)
        explore = ((legal.cumsum(-1) - 1 == rank) & legal).float().argmax(-1)
        out.copy_(torch.where(noise[..., 0] < epsilon, explore, self.masked(q, obs, legal).argmax(-1)))

    def set_collector(self, index: int) -> None:
        """Act as collector ``index`` (0-based): its own exploration rate under Ape-X. Collectors
        added while training runs (numbered from ``num_collectors`` on) take the rates of the
        configured ones again, in turn: Ape-X's spread, never a rate past its greediest."""
        if self.apex_alpha is not None and self.num_collectors > 1:
            self.epsilon_power = 1.0 + self.apex_alpha * (index % self.num_collectors) / (self.num_collectors - 1)

    def score(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``Q(obs, actions)`` and the bootstrap value of ``obs`` the learner's targets use,
        ``Q_target(obs, argmax_a Q(obs, a))`` with double Q, else ``max_a Q_target(obs, a)``
        (for actor-side priorities: Ape-X's collection workers score their own transitions)."""
        q = self.q_net.forward(obs)
        taken = q.gather(-1, actions.long().view(-1, 1)).squeeze(-1)
        target = self.masked(self.target_q_net.forward(obs), obs)
        if not self.double_q:
            return taken, target.max(-1).values
        chosen = self.masked(q, obs).argmax(-1, keepdim=True)
        return taken, target.gather(-1, chosen).squeeze(-1)

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """``(target, online)`` network pairs."""
        return [(self.target_q_net, self.q_net)]

    def update_target(self, tau: float) -> None:
        """Move the target network towards the online one: ``target += tau * (online - target)`` (1: copy)."""
        soft_update(self.target_pairs(), tau)


@torch.no_grad()
def soft_update(pairs: list[tuple[nn.Module, nn.Module]], tau: float) -> None:
    """``target += tau * (online - target)`` for every ``(target, online)`` network pair (``tau >= 1``: a copy)."""
    for target_net, online_net in pairs:
        target: list[torch.Tensor] = list(target_net.parameters())
        online: list[torch.Tensor] = list(online_net.parameters())
        if tau >= 1.0:
            torch._foreach_copy_(target, online)
        else:
            torch._foreach_lerp_(target, online, tau)


def build_actor(cls: Callable[..., nn.Module], observation_space: gym.Space, action_space: gym.Space, device: str | torch.device = "cpu", **kwargs: Any) -> Any:
    """``cls(observation_space, action_space, **kwargs)`` on ``device``: what an off-policy actor's factory builds."""
    return cls(observation_space, action_space, **kwargs).to(device)
