"""Soft actor-critic (Haarnoja et al. 2018) with automatic entropy tuning, and TD3 (Fujimoto et
al. 2018) / DDPG (Lillicrap et al. 2016), on a :class:`~pytorchrl.agent.actors.policy_critic.PolicyCriticActor`.

All losses of one minibatch go into one backward pass over one flat gradient (the framework's
gradient format): the policy's loss reads the critics through their detached parameters,
so it moves only the policy, and one Adam over all parameters is the same as one
per network (Adam is per-parameter). Replayed batches carry n-step returns in ``rewards`` and the
bootstrap discount in ``discounts`` (see :class:`~pytorchrl.agent.storages.off_policy.ReplayBuffer`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from pytorchrl.agent.actors.policy_critic import PolicyCriticActor
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.families import ReplayConfig, replay_storage_factory
from pytorchrl.agent.algorithms.sequences import Window
from pytorchrl.agent.algorithms.wiring import Wiring, encoder_spec, recurrent_spec
from pytorchrl.config import Config, ConfigError, param
from pytorchrl.utils.errors import InputError


@dataclass(frozen=True)
class SACConfig(ReplayConfig):
    """Soft actor-critic (Haarnoja et al. 2018): squashed Gaussian policy, twin critics, learned
    entropy coefficient; on a Discrete action space, discrete SAC (Christodoulou 2019)."""

    networks = 6  # the policy, two critics and their targets, each an MLP of actor.hidden_sizes (Adam state for all: an upper count)
    trained_keys = ("use_sde",)  # the policy head's shape

    name: str = param("sac", "The algorithm.")
    target_entropy: float | None = param(None, "Entropy the coefficient is tuned towards (null: -action_dim on a Box; 0.89 * log(num_actions) on a Discrete space).")
    init_ent_coef: float = param(1.0, "Initial entropy coefficient.", min=0, min_exclusive=True)
    learn_ent_coef: bool = param(True, "Tune the entropy coefficient automatically (else keep init_ent_coef).")
    use_sde: bool = param(
        False, "Generalized state-dependent exploration (gSDE, Raffin et al. 2022; SB3's use_sde): the policy's noise is its last hidden "
        "features times a random matrix, held for sde_sample_freq steps, whose entries' log std is learned. Box actions, no recurrent core.",
    )
    sde_sample_freq: int | None = param(
        None, "gSDE: redraw each env's noise matrix every this many steps (null: once per rollout, every update_every steps; SB3's -1).", min=1, max=1_000_000
    )
    sde_log_std_init: float = param(-3.0, "gSDE: initial log std of the noise matrix's entries (SB3's log_std_init; -3 is its SAC default).", min=-20, max=2)

    def switched_off(self, config: Config) -> list[tuple[bool, list[str], str]]:
        return [
            *super().switched_off(config),
            (not self.learn_ent_coef, ["target_entropy"], "algorithm.learn_ent_coef is false"),
            (not self.use_sde, ["sde_sample_freq", "sde_log_std_init"], "algorithm.use_sde is false"),
        ]


@dataclass(frozen=True)
class TD3Config(ReplayConfig):
    """TD3 (Fujimoto et al. 2018): deterministic policy, clipped double Q, target smoothing, delayed policy updates."""

    networks = 6

    name: str = param("td3", "The algorithm.")
    lr: float = param(1e-3, "Adam learning rate.", min=0, min_exclusive=True)
    policy_delay: int = param(2, "Gradient steps per policy and target update.", min=1)
    target_policy_noise: float = param(0.2, "Std of the smoothing noise on target actions, in [-1, 1] action units (0: none).", min=0)
    target_noise_clip: float = param(0.5, "Clip of the target smoothing noise.", min=0)
    exploration_noise: float = param(0.1, "Scale (sigma) of the exploration noise, in [-1, 1] action units.", min=0)
    exploration_noise_type: str = param("gaussian", "Exploration noise: independent Gaussian per step, or an Ornstein-Uhlenbeck process per env.", choices=("gaussian", "ou"))
    ou_theta: float = param(0.15, "Ornstein-Uhlenbeck mean reversion rate.", min=0, min_exclusive=True)
    ou_dt: float = param(1e-2, "Ornstein-Uhlenbeck time step.", min=0, min_exclusive=True)
    policy_update: str = param(
        "fused",
        "fused: the policy's gradient at the critics before their step, in one gradient with theirs (what gradient workers compute); "
        "after_critics: the critics step first and the policy's gradient is taken at them (Fujimoto et al.'s and SB3's order; "
        "no remote gradient workers).",
        choices=("fused", "after_critics"),
    )

    def check(self, config: Config) -> None:
        if self.policy_update == "after_critics" and config.scheme.num_grad_workers > 0:
            raise ConfigError(
                f"config key 'algorithm.policy_update' = 'after_critics' with scheme.num_grad_workers = {config.scheme.num_grad_workers}: "
                "the policy's gradient needs the critics' step applied first, which remote gradient workers do not see; "
                "use policy_update 'fused' or scheme.num_grad_workers = 0"
            )
        super().check(config)

    def switched_off(self, config: Config) -> list[tuple[bool, list[str], str]]:
        return [
            *super().switched_off(config),
            (self.exploration_noise_type != "ou", ["ou_theta", "ou_dt"], f"algorithm.exploration_noise_type is {self.exploration_noise_type!r}"),
            (self.target_policy_noise == 0, ["target_noise_clip"], "algorithm.target_policy_noise is 0"),
        ]


@dataclass(frozen=True)
class DDPGConfig(TD3Config):
    """DDPG (Lillicrap et al. 2016): TD3 with one critic, no target smoothing, a policy update every step."""

    networks = 4

    name: str = param("ddpg", "The algorithm.")
    policy_delay: int = param(1, "Gradient steps per policy and target update.", min=1)
    target_policy_noise: float = param(0.0, "Std of the smoothing noise on target actions (0: none, as in DDPG).", min=0)


class PolicyCritic(Algorithm):
    """What the algorithms on a :class:`PolicyCriticActor` share (SAC, TD3, DDPG, MPO): the
    wiring, polyak ``tau``, the critics' loss and priorities, and warm-up acting."""

    actor_kind = "PolicyCriticActor"
    storage_kind = "ReplayStorage"
    #: what the policy is over a bounded Box (``categorical`` over a Discrete space: discrete SAC)
    policy = "gaussian"
    num_critics = 2
    #: each critic's loss is this times its mean squared TD error: SAC's 0.5 (SB3's SAC), TD3's 1
    critic_loss_scale = 0.5
    tunable = (*Algorithm.tunable, "tau")
    metrics: tuple[str, ...] = ("value_loss", "policy_loss", "q_mean")

    @classmethod
    def check_action_space(cls, action_space: gym.Space) -> str | None:
        bounded = isinstance(action_space, gym.spaces.Box) and np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()
        if bounded or (isinstance(action_space, gym.spaces.Discrete) and gym.spaces.Discrete in cls.action_spaces):
            return None
        return "a bounded Box or a Discrete action space" if gym.spaces.Discrete in cls.action_spaces else "a bounded Box action space"

    @classmethod
    def wire(cls, config: Config, observation_space: gym.Space, action_space: gym.Space) -> Wiring:
        """A :class:`PolicyCriticActor` on a replay storage."""
        algo: Any = config.algorithm
        ou = getattr(algo, "exploration_noise_type", None) == "ou"
        recurrent = recurrent_spec(config.actor)
        if recurrent is not None and config.actor.shared_network:
            raise InputError("config key 'actor.shared_network' = true cannot be combined with a recurrent SAC (actor.recurrent); its policy and critics need their own cores")
        sde = bool(getattr(algo, "use_sde", False))
        if sde and isinstance(action_space, gym.spaces.Discrete):
            raise InputError(f"config key 'algorithm.use_sde' = true needs a Box action space (gSDE perturbs a Gaussian policy); {config.env.env_id!r} has {action_space}")
        if sde and recurrent is not None:
            raise InputError(f"config key 'algorithm.use_sde' = true cannot be combined with a recurrent SAC (actor.recurrent.type = {config.actor.recurrent.type!r}); set one of them off")
        options = {"sde": True, "sde_sample_freq": algo.sde_sample_freq, "log_std_init": algo.sde_log_std_init} if sde else {}
        actor_factory = PolicyCriticActor.create_factory(
            observation_space, action_space, policy="categorical" if isinstance(action_space, gym.spaces.Discrete) else cls.policy,
            num_critics=cls.num_critics, encoder=encoder_spec(config.actor), shared_network=config.actor.shared_network,
            exploration_noise=getattr(algo, "exploration_noise", 0.0), ou_noise=(algo.ou_theta, algo.ou_dt) if ou else None,  # type: ignore[union-attr]
            recurrent=recurrent, **options, **cls.actor_options(),
        )
        burn_in = {"burn_in": config.storage.burn_in} if "burn_in" in cls.constructor_keys else {}
        algo_factory = cls.create_factory(algo, **burn_in)
        return Wiring(actor=actor_factory, storage=replay_storage_factory(config, observation_space, action_space), algorithm=algo_factory)

    @classmethod
    def actor_options(cls) -> dict[str, Any]:
        """More :class:`PolicyCriticActor` keywords this algorithm needs (MPO: a target policy and its duals)."""
        return {}

    def __init__(self, actor: Any, device: str | torch.device = "cpu", config: ReplayConfig | None = None, **overrides: Any) -> None:
        super().__init__(actor, device, config, **overrides)
        self._td: tuple[torch.Tensor, torch.Tensor] | None = None

    def _critic_loss(self, q: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        """The sum over critics of each one's (importance-weighted) mean ``(q - y)^2`` times
        :attr:`critic_loss_scale`; keeps ``q`` and ``y`` for :meth:`pop_priorities`."""
        self._td = (q.detach(), y)
        if weights is None:  # uniform replay: one fused op and one autograd node
            return F.mse_loss(q, y.expand_as(q)) * (self.critic_loss_scale * q.shape[0])
        return self.critic_loss_scale * ((q - y).square() * weights).mean(-1).sum()

    def pop_priorities(self) -> torch.Tensor | None:
        """The last minibatch's absolute TD errors, averaged over critics (computed only when asked)."""
        if self._td is None:
            return None
        (q, y), self._td = self._td, None
        return (q - y).abs().mean(0)

    def set_warmup(self, warming_up: bool) -> None:
        """Act uniformly at random until the replay buffer first holds ``start_steps``."""
        self._end_uniform_acting(warming_up)


class SAC(PolicyCritic):
    """Soft actor-critic with twin critics and a learned entropy coefficient; over a Discrete
    action space, discrete SAC (Christodoulou 2019): critics value every action at once, so the
    soft value of the next state and the policy's loss are exact expectations over the
    policy's probabilities instead of one-sample estimates.

    Its actor is a ``gaussian`` or ``categorical`` :class:`PolicyCriticActor`; its
    hyper-parameters are :class:`SACConfig`'s (one ``lr`` for the policy, the critics and the
    entropy coefficient; ``tau``, the polyak step of the target critics after each gradient step;
    ``target_entropy`` None: ``-action_dim`` on a Box, ``0.89 * log(num_actions)`` on a Discrete
    space, 89% of the uniform policy's entropy).
    """

    config_class = SACConfig
    config: SACConfig
    constructor_keys = ("burn_in",)
    action_spaces = (gym.spaces.Box, gym.spaces.Discrete)
    recurrent = True
    metrics = (*PolicyCritic.metrics, "entropy", "ent_coef")

    def __init__(
        self, actor: Any, device: str | torch.device = "cpu", config: SACConfig | None = None, *, burn_in: int = 0, **overrides: Any
    ) -> None:
        """:param burn_in: first steps of a replayed window that only warm up the states (recurrent; ``storage.burn_in``)."""
        config = self.resolve_config(config, overrides)
        with torch.no_grad():
            actor.log_alpha.fill_(float(torch.log(torch.tensor(config.init_ent_coef))))
        actor.log_alpha.requires_grad_(config.learn_ent_coef)
        super().__init__(actor, device, config)
        self.burn_in = burn_in
        target = self.config.target_entropy
        self.target_entropy = (0.89 * math.log(actor.action_dim) if actor.discrete else -float(actor.action_dim)) if target is None else target
        self._window_td: torch.Tensor | None = None  # recurrent: the last windows' priorities

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        if "states" in batch:
            return self._sequence_loss(batch)
        actor = self.actor
        obs, next_obs = batch["obs"], batch["next_obs"]
        with torch.no_grad():
            next_params, next_x = actor._policy_out(next_obs), actor.critic_features(next_obs, target=True)
        return self._losses(
            actor._policy_out(obs), next_params, actor.critic_features(obs), next_x, batch["actions"], batch["rewards"], batch["discounts"], batch.get("weights")
        )

    def _sequence_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Recurrent SAC on replayed windows (as R2D2, :mod:`~pytorchrl.agent.algorithms.dqn`):
        the policy runs from the stored state, the critics from a zero state, both warmed up over
        the burn-in; n-step returns within the window; then :meth:`_losses` on the valid steps."""
        actor, burn = self.actor, self.burn_in
        obs, starts = batch["obs"], batch["starts"]
        policy = actor.policy_sequence(obs, batch["states"], starts, burn)  # [steps + 1, B, out]
        x = actor.critic_sequence(obs, starts, burn)
        with torch.no_grad():
            target_x = actor.critic_sequence(obs, starts, burn, target=True)
        window = Window(batch, burn, gamma=self.config.gamma, n_step=self.config.n_step)
        loss, info = self._losses(
            window.now(policy), window.at_boot(policy).detach(), window.now(x), window.at_boot(target_x), window.now(batch["actions"][burn:]),
            window.returns, window.discounts, window.weights,
        )
        td = super().pop_priorities()
        assert td is not None
        self._window_td = window.priorities(td, self.config.priority_eta)
        return loss, info

    def _losses(
        self, params: torch.Tensor, next_params: torch.Tensor, x: torch.Tensor, next_x: torch.Tensor, actions: torch.Tensor,
        rewards: torch.Tensor, discounts: torch.Tensor, weights: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The critics', the policy's and the entropy coefficient's losses of a batch of transitions,
        from the policy head's outputs (``params``; ``next_params`` of the next observations, no
        gradient) and the critics' input features (``x``; ``next_x`` the target critics' of the next
        observations). Written for few ops: on 256-wide networks every op and autograd node costs
        about as much as the matrix products (ARCHITECTURE.md decision 22)."""
        actor = self.actor
        alpha = actor.log_alpha.detach().exp()
        if actor.discrete:  # expectations over every action, exact: critics value them all at once
            with torch.no_grad():
                next_log_pi = F.log_softmax(next_params, dim=-1)
                next_v = (next_log_pi.exp() * (actor.q_from_features(next_x, target=True).min(0).values - alpha * next_log_pi)).sum(-1)
                y = rewards + discounts * next_v
            q_all = actor.q_from_features(x)  # [critics, batch, actions]
            q = q_all.gather(-1, actions.long().view(1, -1, 1).expand(q_all.shape[0], -1, 1)).squeeze(-1)
            critic_loss = self._critic_loss(q, y, weights)
            log_pi = F.log_softmax(params, dim=-1)
            pi = log_pi.exp()
            # every action's value is already there: the policy's loss reads it detached
            policy_loss = (pi * (alpha * log_pi - q_all.detach().min(0).values)).sum(-1).mean()
            log_prob = (pi * log_pi).sum(-1)  # E[log pi] per row: minus the entropy the coefficient tunes
        else:
            with torch.no_grad():
                next_action, next_log_prob = actor.sample_params(next_params)
                next_v = torch.sub(actor.q_from_features(next_x, next_action, target=True).min(0).values, alpha * next_log_prob)
                y = torch.addcmul(rewards, discounts, next_v)
            q = actor.q_from_features(x, actor.normalize(actions))
            critic_loss = self._critic_loss(q, y, weights)
            new_action, log_prob = actor.sample_params(params)
            policy_loss = torch.sub(alpha * log_prob, actor.q_from_features(x.detach(), new_action, frozen=True).min(0).values).mean()
        loss = critic_loss + policy_loss
        with torch.no_grad():
            log_prob_mean = log_prob.mean()
            # the entropy coefficient's loss -log_alpha (E[log pi] + target_entropy), as one addcmul
            ent_error = log_prob_mean + self.target_entropy
            stats = torch.stack([critic_loss, policy_loss, log_prob_mean, alpha, q.mean()]).tolist()
        if self.config.learn_ent_coef:
            loss = torch.addcmul(loss, actor.log_alpha, ent_error, value=-1.0)
        value_loss, policy_loss_value, log_prob_mean_value, ent_coef, q_mean = stats
        return loss, {
            "value_loss": value_loss, "policy_loss": policy_loss_value, "entropy": -log_prob_mean_value, "ent_coef": ent_coef, "q_mean": q_mean,
        }

    def pop_priorities(self) -> torch.Tensor | None:
        """The last minibatch's priorities: its transitions' absolute TD errors, or its windows'."""
        window = self._window_td
        if window is not None:
            self._window_td = None
            return window
        return super().pop_priorities()

    def apply_gradients(self, gradients: torch.Tensor | None = None, computed_at: int | None = None) -> bool:
        applied = super().apply_gradients(gradients, computed_at)
        if applied:
            self.update_targets(self.config.tau)
        return applied


class TD3(PolicyCritic):
    """TD3: clipped double Q, target policy smoothing, delayed policy and target updates. With
    one critic, ``policy_delay=1`` and no smoothing it is DDPG.

    Its actor is a ``deterministic`` :class:`PolicyCriticActor`; its hyper-parameters are
    :class:`TD3Config`'s (``tau``: the polyak step of the targets at each policy update).
    """

    config_class = TD3Config
    config: TD3Config
    action_spaces = (gym.spaces.Box,)
    policy = "deterministic"
    # Fujimoto et al.'s and SB3's sum of the critics' mean squared errors: under Adam only its
    # epsilon tells the scale apart, and with it the critics' steps match SB3's to float precision
    # (scripts/td3_sb3_update.py)
    critic_loss_scale = 1.0

    def __init__(self, actor: Any, device: str | torch.device = "cpu", config: TD3Config | None = None, **overrides: Any) -> None:
        self._policy_params = [*actor.policy_torso.parameters(), *actor.policy_head.parameters()]
        super().__init__(actor, device, config, **overrides)
        #: policy_update after_critics: the observations the policy's step after the critics' uses
        self._policy_obs: torch.Tensor | None = None
        self._policy_loss = math.nan  # after_critics: the last policy step's loss (reported by the next one)

    def param_groups(self) -> list[list[torch.Tensor]]:
        """The policy, and the critics: a critic-only step leaves the policy's Adam alone."""
        policy = {id(p) for p in self._policy_params}
        return [[p for p in self.params if id(p) in policy], [p for p in self.params if id(p) not in policy]]

    def _policy_step(self, version: int | None = None) -> bool:
        """Whether the step after ``version`` (None: this one's) moves the policy and the targets."""
        return ((self.version if version is None else version) + 1) % self.config.policy_delay == 0

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        actor = self.actor
        obs, actions = batch["obs"], actor.normalize(batch["actions"])
        with torch.no_grad():
            next_action = actor.deterministic(batch["next_obs"], target=True)
            if self.config.target_policy_noise > 0:
                noise = (torch.randn_like(next_action) * self.config.target_policy_noise).clamp(-self.config.target_noise_clip, self.config.target_noise_clip)
                next_action = (next_action + noise).clamp(-1.0, 1.0)
            y = batch["rewards"] + batch["discounts"] * actor.q_values(batch["next_obs"], next_action, target=True).min(0).values
        q = actor.q_values(obs, actions)
        loss = critic_loss = self._critic_loss(q, y, batch.get("weights"))
        info = {"value_loss": float(critic_loss.detach()), "q_mean": float(q.detach().mean())}
        if self._policy_step():
            if self.config.policy_update == "after_critics":  # apply_gradients takes it once the critics have stepped
                self._policy_obs = obs
                if not math.isnan(self._policy_loss):  # none before the first policy step
                    info["policy_loss"] = self._policy_loss
            else:
                policy_loss = self._policy_loss_of(obs)
                loss = loss + policy_loss
                info["policy_loss"] = float(policy_loss.detach())
        return loss, info

    def _policy_loss_of(self, obs: torch.Tensor) -> torch.Tensor:
        """``-q1(s, pi(s))``, the critics frozen."""
        actor = self.actor
        return -actor.q_values(obs, actor.deterministic(obs), critics=1, frozen=True).mean()

    def apply_gradients(self, gradients: torch.Tensor | None = None, computed_at: int | None = None) -> bool:
        policy_step = self._policy_step(computed_at)  # what compute_loss made it: with or without the policy's term
        after = self._policy_obs
        if policy_step and after is None:
            applied = super().apply_gradients(gradients, computed_at)
            if applied:
                self.update_targets(self.config.tau)
            return applied
        with self._hidden(self.segments[:1]):  # the critics alone
            applied = super().apply_gradients(gradients, computed_at)
        if policy_step and after is not None:  # after_critics: the policy's gradient at the stepped critics
            self._policy_obs = None
            if gradients is not None:
                raise RuntimeError("algorithm.policy_update 'after_critics' needs the minibatch here; it cannot apply a gradient computed elsewhere")
            if applied:
                self.flat_grad.zero_()
                policy_loss = self._policy_loss_of(after)
                policy_loss.backward()
                self._policy_loss = float(policy_loss.detach())
                if self._clip_gradient():
                    with self._hidden(self.segments[1:]):
                        self._adam_step()  # the version is the critics' step's: one update
                    self.update_targets(self.config.tau)
        return applied

    @contextlib.contextmanager
    def _hidden(self, segments: list[torch.Tensor]) -> Iterator[None]:
        """Steps inside it leave ``segments`` alone: Adam skips a segment without a gradient, so
        they (their moment estimates and step counts too) stay as they are, as with an optimizer
        that is not stepped."""
        views = [s.grad for s in segments]
        for segment in segments:
            segment.grad = None
        try:
            yield
        finally:
            for segment, view in zip(segments, views, strict=True):
                segment.grad = view


class DDPG(TD3):
    """DDPG (Lillicrap et al. 2016): :class:`TD3` with one critic; its config sets no target
    smoothing and a policy update every step."""

    config_class = DDPGConfig
    config: DDPGConfig
    num_critics = 1
