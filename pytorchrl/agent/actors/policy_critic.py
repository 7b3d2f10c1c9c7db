"""The actor of SAC, TD3, DDPG and MPO: a policy, an ensemble of Q critics and their target copies.

:class:`PolicyCriticActor` acts on the collection path with the same interface as the other
actors (:meth:`PolicyCriticActor.draw_noise`, :meth:`PolicyCriticActor.act`), its exploration
noise drawn ahead from the worker's stream; :class:`CriticEnsemble` evaluates ``K`` critics as one
batched network.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pytorchrl.agent.actors.networks.encoders import Encoder, EncoderSpec, feature_width
from pytorchrl.agent.actors.networks.mlp import ACTIVATIONS, CachedLayers
from pytorchrl.agent.actors.networks.recurrent import RecurrentCore, RecurrentSpec, carried_state, run_core
from pytorchrl.agent.actors.noise import NoisePart, draw_parts
from pytorchrl.agent.actors.off_policy import build_actor, soft_update

_LOG2 = math.log(2.0)
#: gSDE: the variance's floor and the clip of the mean before the tanh (SB3's epsilon and clip_mean)
_SDE_EPSILON = 1e-6
_SDE_CLIP_MEAN = 2.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class PolicyCriticActor(nn.Module):
    """A policy, ``num_critics`` Q critics, and target copies: the actor of SAC (squashed
    Gaussian policy over a Box, or a categorical one over a Discrete space; twin critics), TD3
    (deterministic policy, twin critics, target policy) and DDPG (deterministic policy, one critic).

    Over a Box, the policy works in ``[-1, 1]`` (a tanh squashes it); actions leave the actor
    scaled to the space's bounds, and critics take them back in ``[-1, 1]`` (:meth:`normalize`),
    so one network fits any action range; each critic is ``Q(s, a)``. Over a Discrete space
    (discrete SAC, Christodoulou 2019) the policy outputs logits and each critic outputs
    ``Q(s, .)`` for every action, so expectations over actions are exact sums. Before
    ``start_steps`` the collection path acts uniformly at random: the ``uniform`` buffer, which
    reaches collection workers with the weights.

    :param observation_space: the observation space (any that :class:`EncoderSpec` takes).
    :param action_space: a bounded Box space, or a Discrete one (``policy="categorical"``).
    :param policy: ``gaussian`` (SAC), ``deterministic`` (TD3, DDPG) or ``categorical`` (discrete SAC).
    :param num_critics: Q-networks (2: clipped double Q).
    :param encoder: the policy's encoder; the critics share one extractor of the same spec
        (:meth:`EncoderSpec.extractor`), whose features (with the action) enter the ensemble's
        MLP of ``encoder.hidden_sizes``.
    :param shared_network: the policy reads the critics' extractor, detached (so only the critic
        loss trains it, as in SAC-AE and DrQ), instead of its own.
    :param exploration_noise: scale (sigma) of the noise a deterministic policy explores with (in ``[-1, 1]`` units).
    :param ou_noise: ``(theta, dt)``: that noise is an Ornstein-Uhlenbeck process per env
        (``x += -theta x dt + sqrt(dt) N(0, 1)``, scaled by ``exploration_noise``; temporally
        correlated, as in DDPG) instead of independent Gaussian draws. Its state lives in each
        collection worker's actor and carries over episode ends.
    :param sde: generalized state-dependent exploration (gSDE, Raffin et al. 2022) for the
        ``gaussian`` policy: the head outputs only the mean, and the policy's noise is
        ``features @ W``, the policy's last hidden features times a matrix ``W`` of independent
        ``N(0, exp(sde_log_std)^2)`` entries (a learned ``[features, actions]`` parameter), drawn
        per env and held for ``sde_sample_freq`` steps, so exploration is smooth in time and
        state-dependent. Its log-probability is the Gaussian's with variance
        ``features^2 @ exp(2 sde_log_std)`` (the features detached, as SB3's ``learn_features=False``);
        the mean is clipped to ``[-2, 2]`` before the tanh (SB3's ``clip_mean``). The matrices live
        in each collection worker's actor (:meth:`exploration_state`).
    :param sde_sample_freq: redraw ``W`` every this many steps of a rollout (None: once per
        rollout, at its start; SB3's ``sde_sample_freq=-1``).
    :param log_std_init: the initial value of every ``sde_log_std`` entry.
    :param target_policy: keep a target copy of a stochastic policy too (MPO; TD3 and DDPG's
        deterministic policy always has one); a policy with a target learns no entropy coefficient.
    :param duals: learned Lagrange multipliers (MPO): a parameter vector of this many entries,
        trained with the rest, never sent to collection workers.
    :param recurrent: recurrent cores (recurrent SAC): one after the policy's torso, whose state
        the collection workers carry (``act_recurrent``), and one after the critics' extractor,
        which the learner runs over replayed windows from a zero state warmed up by the burn-in
        (:meth:`policy_sequence`, :meth:`critic_sequence`; targets get a copy of the critics' core).
    """

    is_recurrent = False
    state_size = 0
    #: acting leaves scoring to the rollout's end (Ape-X's priorities; see OnPolicyActor)
    scores_while_acting = False
    #: what collection workers need to act (state-dict key prefixes): not the critics or targets
    acting_prefixes: tuple[str, ...] = ("policy_torso.", "policy_core.", "policy_head.", "sde_log_std", "uniform", "low", "high")
    uniform: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor
    action_mid: torch.Tensor
    action_half: torch.Tensor
    action_scale: torch.Tensor
    action_shift: torch.Tensor

    def __init__(
        self, observation_space: gym.Space, action_space: gym.Space, *, policy: str = "gaussian", num_critics: int = 2,
        encoder: EncoderSpec = EncoderSpec(hidden_sizes=(256, 256), activation="relu"), shared_network: bool = False,
        exploration_noise: float = 0.1, ou_noise: tuple[float, float] | None = None, recurrent: RecurrentSpec | None = None,
        target_policy: bool = False, duals: int = 0, sde: bool = False, sde_sample_freq: int | None = None, log_std_init: float = 0.0,
    ) -> None:
        super().__init__()
        self.discrete = policy == "categorical"
        if self.discrete:
            if not isinstance(action_space, gym.spaces.Discrete):
                raise ValueError(f"a categorical policy needs a Discrete action space, got {action_space}")
        elif not isinstance(action_space, gym.spaces.Box) or not np.all(np.isfinite(action_space.low)) or not np.all(np.isfinite(action_space.high)):
            raise ValueError(f"this actor needs a bounded Box action space, got {action_space}")
        self.observation_space, self.action_space = observation_space, action_space
        # discrete: actions are indices, and the policy and critics have one output per action
        self.action_dim = int(action_space.n) if isinstance(action_space, gym.spaces.Discrete) else int(np.prod(action_space.shape))
        self.gaussian = policy == "gaussian"
        if sde and (not self.gaussian or recurrent is not None):
            raise ValueError("gSDE (sde) needs the gaussian policy without a recurrent core")
        # the critics' extractor (None: a flat Box, read as it is) and its width; registered
        # after the policy, whose parameters come first (TD3 steps that run alone)
        critic_extractor = encoder.extractor(observation_space)
        features = int(np.prod(observation_space.shape or ())) if critic_extractor is None else feature_width(critic_extractor)
        self.shared_network = shared_network and critic_extractor is not None
        if self.shared_network:  # the policy's MLP over the critics' (detached) features
            self.policy_torso = Encoder(
                gym.spaces.Box(-np.inf, np.inf, (features,)), None, encoder.hidden_sizes, activation=encoder.activation, dtype=encoder.mlp_dtype
            )
        else:
            self.policy_torso = encoder.build(observation_space)
        if recurrent is not None and (self.shared_network or policy == "deterministic"):
            raise ValueError("a recurrent core needs a stochastic policy (SAC) with its own encoder (shared_network off)")
        head_in = self.policy_torso.out_features
        self.policy_core: RecurrentCore | None = None
        if recurrent is not None:
            self.policy_core = recurrent.build(head_in)
            head_in = self.policy_core.out_features
            self.is_recurrent, self.state_size = True, self.policy_core.state_size
        self.policy_head = nn.Linear(head_in, 2 * self.action_dim if self.gaussian and not sde else self.action_dim)
        # gSDE: the log std of each entry of the noise matrix W (features x actions); sent to collection workers
        self.sde_log_std = nn.Parameter(torch.full((head_in, self.action_dim), float(log_std_init))) if sde else None
        self.sde_sample_freq = sde_sample_freq
        self._sde_eps: torch.Tensor | None = None  # per env [envs, features, actions] standard normals, drawn per rollout
        self._sde_weights: torch.Tensor | None = None  # the matrices W: those normals times exp(sde_log_std) when drawn
        self._sde_step = 0  # steps acted since they were drawn
        self.critic_extractor = critic_extractor
        self.critic_core: RecurrentCore | None = None
        if recurrent is not None:
            self.critic_core = recurrent.build(features)
            features = self.critic_core.out_features
        self.target_critic_core = None if self.critic_core is None else copy.deepcopy(self.critic_core).requires_grad_(False)
        critic_in, critic_out = (features, self.action_dim) if self.discrete else (features + self.action_dim, 1)
        self.critics = CriticEnsemble(
            num_critics, critic_in, tuple(encoder.hidden_sizes), encoder.activation, out_features=critic_out, dtype=encoder.mlp_dtype
        )
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        self.target_critic_extractor = copy.deepcopy(self.critic_extractor)
        if self.target_critic_extractor is not None:
            self.target_critic_extractor.requires_grad_(False)
        if self.shared_network:
            self.acting_prefixes = (*self.acting_prefixes, "critic_extractor.")
        has_target_policy = policy == "deterministic" or target_policy
        self.target_policy = copy.deepcopy(nn.ModuleList([self.policy_torso, self.policy_head])).requires_grad_(False) if has_target_policy else None
        self.log_alpha = None if has_target_policy else nn.Parameter(torch.zeros(()))  # SAC's entropy coefficient, learned
        self.duals = nn.Parameter(torch.zeros(duals)) if duals else None  # MPO's Lagrange multipliers, learned
        self.exploration_noise = exploration_noise
        self.ou_noise = ou_noise
        self._ou_state: torch.Tensor | None = None  # per env, made on first use
        self.register_buffer("uniform", torch.tensor(True))
        bounds = (np.zeros(1), np.ones(1)) if isinstance(action_space, gym.spaces.Discrete) else (action_space.low, action_space.high)
        self.register_buffer("low", torch.tensor(bounds[0], dtype=torch.float32).flatten())
        self.register_buffer("high", torch.tensor(bounds[1], dtype=torch.float32).flatten())
        # scale() and normalize() as one op each: ``mid + a * half`` and ``(a - mid) / half``
        self.register_buffer("action_mid", (self.high + self.low) / 2, persistent=False)
        self.register_buffer("action_half", (self.high - self.low) / 2, persistent=False)
        self.register_buffer("action_scale", 1.0 / self.action_half, persistent=False)
        self.register_buffer("action_shift", -self.action_mid * self.action_scale, persistent=False)
        self.continuous = not self.discrete

    @classmethod
    def create_factory(cls, observation_space: gym.Space, action_space: gym.Space, **kwargs: Any) -> Callable[..., PolicyCriticActor]:
        return functools.partial(build_actor, cls, observation_space, action_space, **kwargs)

    # ------------------------------------------------------------------- the policy

    def _policy_out(self, obs: torch.Tensor, target: bool = False) -> torch.Tensor:
        if target:
            assert self.target_policy is not None
            torso, head = self.target_policy
        else:
            torso, head = self.policy_torso, self.policy_head
        if self.shared_network:  # the critics' extractor (the target's for the target policy), detached
            with torch.no_grad():
                obs = self.critic_features(obs, target=target)
        linear = cast(nn.Linear, head)  # F.linear rather than the module calls: a tenth of the overhead
        features = torso.forward(obs)
        out = F.linear(features, linear.weight, linear.bias)
        return out if self.sde_log_std is None else torch.cat([out, features], dim=-1)

    def _head(self, features: torch.Tensor) -> torch.Tensor:
        return F.linear(features, self.policy_head.weight, self.policy_head.bias)

    def _mean(self, params: torch.Tensor) -> torch.Tensor:
        """The Gaussian's mean per action from the policy head's output ``params`` (gSDE: clipped)."""
        if self.sde_log_std is None:
            return params[..., : self.action_dim]
        return params[..., : self.action_dim].clamp(-_SDE_CLIP_MEAN, _SDE_CLIP_MEAN)

    def _mean_log_std(self, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian's mean and log std per action from the policy head's output ``params``;
        with gSDE (``params``: the mean, then the features), the log std of ``features @ W``."""
        if self.sde_log_std is None:
            mean, log_std = params.chunk(2, dim=-1)
            return mean, log_std.clamp(-20.0, 2.0)
        features = params[..., self.action_dim :].detach()
        variance = torch.matmul(features.square(), self.sde_log_std.mul(2.0).exp()).add_(_SDE_EPSILON)
        return self._mean(params), variance.log().mul_(0.5)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised squashed-Gaussian sample in ``[-1, 1]`` and its log-probability (SAC)."""
        return self.sample_params(self._policy_out(obs))

    def sample_params(self, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`sample` from the policy head's output ``params`` (mean and log std)."""
        mean, log_std = self._mean_log_std(params)
        eps = torch.randn_like(mean)
        pre = torch.addcmul(mean, log_std.exp(), eps)
        # log N(pre; mean, std) - log(1 - tanh(pre)^2), where ``(pre - mean) / std`` is the noise
        # itself and log(1 - tanh(x)^2) = 2 log 2 - 2 logaddexp(x, -x) (stable). The noise terms
        # carry no gradient; the rest is few ops, as every op costs on a small network's update.
        with torch.no_grad():
            noise_term = eps.square().sum(-1).mul_(-0.5).sub_(self.action_dim * (_HALF_LOG_2PI + 2.0 * _LOG2))
        log_prob = torch.add(noise_term, torch.sub(torch.logaddexp(pre, -pre), log_std, alpha=0.5).sum(-1), alpha=2.0)
        return torch.tanh(pre), log_prob

    def log_policy(self, obs: torch.Tensor) -> torch.Tensor:
        """``log pi(. | obs)`` over every action ``[batch, actions]`` (categorical policy)."""
        return F.log_softmax(self._policy_out(obs), dim=-1)

    # ------------------------------------------------------- recurrent (sequences)

    def policy_sequence(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor, burn_in: int = 0) -> torch.Tensor:
        """The policy head's outputs over a window ``obs [T, B, ...]`` from the stored ``state``,
        after ``burn_in`` steps that only warm the state up (no gradient): ``[T - burn_in, B, out]``."""
        assert self.policy_core is not None
        return self._head(run_core(self.policy_core, self.policy_torso.forward, obs, state, starts, burn_in))

    def critic_sequence(self, obs: torch.Tensor, starts: torch.Tensor, burn_in: int = 0, *, target: bool = False) -> torch.Tensor:
        """The critics' input features over a window, from a zero state warmed up over ``burn_in``
        steps (the workers do not run the critics, so no state of theirs is stored): ``[T - burn_in, B, F]``."""
        core = self.target_critic_core if target else self.critic_core
        assert core is not None
        return run_core(core, lambda x: self.critic_features(x, target=target), obs, core.initial_state(obs.shape[1], obs.device), starts, burn_in)

    def q_from_features(self, x: torch.Tensor, action: torch.Tensor | None = None, *, target: bool = False, frozen: bool = False) -> torch.Tensor:
        """:meth:`q_values` from the critics' input features ``x`` (e.g. :meth:`critic_sequence`'s, flattened)."""
        x = x if action is None else torch.cat([x, action], dim=-1)
        q = (self.target_critics if target else self.critics).forward(x, frozen)
        return q if self.discrete else q.squeeze(-1)

    def deterministic(self, obs: torch.Tensor, target: bool = False) -> torch.Tensor:
        """The policy's action in ``[-1, 1]`` without noise (the Gaussian's squashed mean); the
        most probable action of a categorical policy."""
        return self._deterministic(self._policy_out(obs, target))

    def _deterministic(self, params: torch.Tensor) -> torch.Tensor:
        """:meth:`deterministic` from the policy head's output."""
        if self.discrete:
            return params.argmax(-1)
        return torch.tanh(self._mean(params) if self.gaussian else params)

    def scale(self, action: torch.Tensor) -> torch.Tensor:
        """``[-1, 1]`` to the action space's bounds (indices stay as they are)."""
        if self.discrete:
            return action
        return torch.addcmul(self.action_mid, action, self.action_half)

    def normalize(self, action: torch.Tensor) -> torch.Tensor:
        """The action space's bounds to ``[-1, 1]``."""
        return torch.addcmul(self.action_shift, action.flatten(1), self.action_scale)

    # ------------------------------------------------------------------ the critics

    def q_values(
        self, obs: torch.Tensor, action: torch.Tensor | None = None, *, target: bool = False, critics: int | None = None, frozen: bool = False
    ) -> torch.Tensor:
        """``[num_critics, batch]`` Q-values of ``action`` (in ``[-1, 1]``); over a Discrete space
        (no ``action``) ``[num_critics, batch, actions]``, every action's value. The first
        ``critics`` only if given; ``frozen``: no gradient reaches the critics (policy losses)."""
        q = self.q_from_features(self.critic_features(obs, target=target, frozen=frozen), action, target=target, frozen=frozen)
        return q if critics is None else q[:critics]

    def critic_features(self, obs: torch.Tensor, *, target: bool = False, frozen: bool = False) -> torch.Tensor:
        """The critics' input features of ``obs`` (the flattened observation without an extractor)."""
        extractor = self.target_critic_extractor if target else self.critic_extractor
        if extractor is None:
            return obs.flatten(1)
        if frozen:
            with torch.no_grad():
                return extractor.forward(obs)
        return extractor.forward(obs)

    # ------------------------------------------------------------------------ acting

    #: the policy's std (SAC) and ``exploration_noise`` (TD3, DDPG) apply per step, in :meth:`act`
    noise_scaled_by_weights = False

    def noise_parts(self) -> tuple[NoisePart, ...]:
        """What :meth:`draw_noise` draws, in order: policy noise (Gaussian; Gumbel for a categorical
        policy, whose ``argmax(logits + noise)`` is a sample), and a uniform random action (before
        ``start_steps``), per step and env."""
        if self.discrete:
            return NoisePart("gumbel", self.action_dim), NoisePart("integers", 1, self.action_dim)
        return NoisePart("normal", self.action_dim), NoisePart("symmetric_uniform", self.action_dim)

    def exploration_state(self) -> str | None:
        """Exploration kept in the actor beside its drawn noise, in words: an Ornstein-Uhlenbeck
        process's state (its steps are the drawn normals, but where it stands is per env and worker)."""
        if self.ou_noise is not None:
            return "Ornstein-Uhlenbeck noise keeps its state in each worker's actor"
        if self.sde_log_std is not None:
            return "gSDE (algorithm.use_sde) keeps each env's noise matrix in its worker's actor"
        return None

    def draw_noise(self, num_steps: int, num_envs: int) -> torch.Tensor:
        """:meth:`noise_parts`, drawn from the CPU generator (see :meth:`act`); with gSDE, then
        each env's noise matrix for the rollout's first steps (its policy-noise part goes unused)."""
        parts = draw_parts(self.noise_parts(), num_steps, num_envs)
        if self.sde_log_std is not None:
            self._draw_sde(num_envs)
        return parts

    def _draw_sde(self, num_envs: int) -> None:
        """Every env's gSDE matrix, fresh: standard normals times ``exp(sde_log_std)`` as it is now
        (held until the next draw, as SB3 holds its exploration matrix)."""
        assert self.sde_log_std is not None
        self._sde_eps = torch.randn(num_envs, *self.sde_log_std.shape).to(self.sde_log_std.device)  # the CPU stream, as the other noise
        self._sde_weights = self._sde_eps * self.sde_log_std.detach().exp()
        self._sde_step = 0

    def act(self, obs: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        """Exploring actions for a batch of observations into ``out`` (see :meth:`draw_noise`)."""
        self._act(None if bool(self.uniform) else self._policy_out(obs), noise, out)

    def act_recurrent(self, obs: torch.Tensor, state: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """:meth:`act` of a recurrent policy from ``state`` (zeroed where an episode starts);
        returns the next state (advanced while acting uniformly too, so stored states stay true)."""
        assert self.policy_core is not None
        features, state = self.policy_core.step(self.policy_torso.forward(obs), state)
        self._act(None if bool(self.uniform) else self._head(features), noise, out)
        return state

    def _act(self, params: torch.Tensor | None, noise: torch.Tensor, out: torch.Tensor) -> None:
        """Actions from the policy head's ``params`` (None: uniformly at random) and ``noise``."""
        policy_noise, random_action = noise[..., : self.action_dim], noise[..., self.action_dim :]
        if params is None:
            action = random_action[..., 0].long() if self.discrete else random_action
        elif self.discrete:
            action = (params + policy_noise).argmax(-1)
        elif self.sde_log_std is not None:
            action = torch.tanh(self._sde_noise(params).add_(self._mean(params)))
        elif self.gaussian:
            mean, log_std = self._mean_log_std(params)
            action = torch.tanh(torch.addcmul(mean, log_std.exp(), policy_noise))
        else:
            noise = policy_noise if self.ou_noise is None else self._ou_step(policy_noise)
            action = (torch.tanh(params) + self.exploration_noise * noise).clamp(-1.0, 1.0)
        out.copy_(self.scale(action).view_as(out))

    def _sde_noise(self, params: torch.Tensor) -> torch.Tensor:
        """gSDE's noise of one step, ``features @ W`` per env, from the policy head's ``params``;
        each env's ``W`` is redrawn every ``sde_sample_freq`` steps (or held for the rollout)."""
        assert self.sde_log_std is not None
        rows = params.shape[0]
        freq = self.sde_sample_freq
        if self._sde_weights is None or self._sde_weights.shape[0] != rows or (freq is not None and self._sde_step >= freq):
            self._draw_sde(rows)
        assert self._sde_weights is not None
        self._sde_step += 1
        return torch.bmm(params[:, self.action_dim :].unsqueeze(1), self._sde_weights).squeeze(1)

    def _ou_step(self, gaussian: torch.Tensor) -> torch.Tensor:
        """Advance the Ornstein-Uhlenbeck state one step with the standard normal ``gaussian`` draws."""
        assert self.ou_noise is not None
        theta, dt = self.ou_noise
        if self._ou_state is None or self._ou_state.shape != gaussian.shape:
            self._ou_state = torch.zeros_like(gaussian)
        self._ou_state = torch.add(self._ou_state * (1.0 - theta * dt), gaussian, alpha=math.sqrt(dt))
        return self._ou_state

    def get_action(
        self, obs: torch.Tensor, rhs: Any = None, done: torch.Tensor | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], Any]:
        """The deterministic action (evaluation) or an exploring one; a recurrent policy carries
        its state in ``rhs`` (None: fresh episodes), zeroed where ``done`` starts an episode.
        gSDE acts with the noise matrices it holds (drawn on first use, or when the number of
        rows changes, and every ``sde_sample_freq`` calls), as SB3's ``predict`` does, not with a
        fresh matrix per call."""
        params = None
        if self.policy_core is not None:
            state = carried_state(rhs, done, obs.shape[0], self.state_size, obs.device)
            features, rhs = self.policy_core.step(self.policy_torso.forward(obs), state)
            params = self._head(features)
        if deterministic:
            return self.scale(self.deterministic(obs) if params is None else self._deterministic(params)), {}, rhs
        out = torch.empty(obs.shape[0], dtype=torch.long, device=obs.device) if self.discrete else torch.empty(obs.shape[0], self.action_dim, device=obs.device)
        # not draw_noise: that starts a rollout (gSDE: new matrices); the CPU stream's draws, where the actor acts
        noise = draw_parts(self.noise_parts(), 1, obs.shape[0])[0].to(obs.device)
        if params is None:
            self.act(obs, noise, out)
        else:
            self._act(None if bool(self.uniform) else params, noise, out)
        return out, {}, rhs

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """``(target, online)`` network pairs: the critics, and the policy of TD3/DDPG."""
        pairs: list[tuple[nn.Module, nn.Module]] = [(self.target_critics, self.critics)]
        if self.critic_extractor is not None and self.target_critic_extractor is not None:
            pairs.append((self.target_critic_extractor, self.critic_extractor))
        if self.critic_core is not None and self.target_critic_core is not None:
            pairs.append((self.target_critic_core, self.critic_core))
        if self.target_policy is not None:
            pairs.append((self.target_policy, nn.ModuleList([self.policy_torso, self.policy_head])))
        return pairs

    def update_target(self, tau: float) -> None:
        """Polyak-average the target critics (and target policy) towards the online ones."""
        soft_update(self.target_pairs(), tau)


class CriticEnsemble(CachedLayers):
    """``K`` independent Q MLPs evaluated as one: each layer is one batched matrix
    product over the ensemble (``baddbmm``), so twin critics cost one pass of kernels and
    autograd nodes instead of two, which is most of an update on small networks.

    ``forward(x, frozen=True)`` reads detached parameters: the gradient reaches the input (the
    policy's action) but never the critics, which is what a policy loss needs.

    :param num: critics in the ensemble.
    :param in_features: observation plus action size.
    :param hidden_sizes: hidden widths.
    :param activation: hidden activation name.
    :param out_features: outputs per critic (1 for ``Q(s, a)``; the number of actions for ``Q(s, .)``).
    :param dtype: what the hidden layers compute in (``actor.mlp_precision``): bfloat16 casts the
        input and their parameters, and the output layer computes in float32 from the last hidden
        layer's features cast back, so Q-values (hundreds, on MuJoCo) keep float32's resolution
        where bfloat16's 8-bit mantissa would round them by whole units.
    """

    def __init__(
        self, num: int, in_features: int, hidden_sizes: tuple[int, ...], activation: str, out_features: int = 1,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        widths = (in_features, *hidden_sizes, out_features)
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in itertools.pairwise(widths):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default initialisation, per critic
            self.weights.append(nn.Parameter(torch.empty(num, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(num, 1, fan_out).uniform_(-bound, bound)))
        self._act = ACTIVATIONS[activation]
        self.num = num
        self.dtype = dtype
        self._cache_parameters()

    def _layer_parameters(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return list(zip(self.weights, self.biases))

    def forward(self, x: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        """``[num, batch, out_features]`` outputs for ``x`` (``[batch, in_features]``)."""
        layers = self._layers
        last = len(layers) - 1
        low = self.dtype is not torch.float32 and last > 0
        if low:
            x = x.to(self.dtype)  # before the expand, which stays a view
        h = x.unsqueeze(0).expand(self.num, *x.shape)
        for i, (weight, bias) in enumerate(layers):
            if frozen:
                weight, bias = weight.detach(), bias.detach()
            if i == last:
                if low:
                    h = h.float()
                h = torch.baddbmm(bias, h, weight)
            else:
                if low:
                    weight, bias = weight.to(self.dtype), bias.to(self.dtype)
                h = self._act(torch.baddbmm(bias, h, weight))
        return h
