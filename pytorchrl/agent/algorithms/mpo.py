"""Maximum a posteriori Policy Optimisation (Abdolmaleki et al. 2018a, "Maximum a Posteriori
Policy Optimisation"; the decoupled mean and covariance constraints of Abdolmaleki et al. 2018b,
"Relative Entropy Regularized Policy Iteration").

Each gradient step of a replayed minibatch of ``B`` states, on a :class:`PolicyCriticActor`
with a Gaussian policy (squashed by a tanh into the action bounds), target copies of the policy
and the critics, and three learned Lagrange multipliers (the actor's ``duals``):

* **Policy evaluation.** The critics regress on ``r + discount * mean_j min_k Q'_k(s', a'_j)``
  with ``N`` actions ``a'_j`` sampled from the target policy at ``s'`` (an expected-SARSA target).
* **E-step.** ``N`` actions ``a_ij`` from the target policy at each ``s_i``, valued by the target
  critics; their non-parametric weights are ``q_ij = softmax_j(Q(s_i, a_ij) / eta)``. The
  temperature ``eta`` minimises the dual ``eta * epsilon + eta * mean_i log mean_j exp(Q_ij / eta)``,
  which keeps ``KL(q || pi_target)`` near ``epsilon``.
* **M-step.** The policy maximises ``sum_ij q_ij log pi(a_ij | s_i)``, decoupled: once with its
  own mean and the target's standard deviations, once with the target's mean and its own
  standard deviations, each under its own KL bound to the target policy (``epsilon_mean``,
  ``epsilon_std``) enforced by a multiplier ``alpha`` learned on ``alpha * (epsilon - KL)``.
  The tanh is a bijection, so log-probabilities and KLs are those of the Gaussians before it
  (the Jacobian does not depend on the policy's parameters).

All losses go into one backward pass, as SAC's do: the critics' loss moves only the critics, the
M-step only the policy (it reads the target critics), each dual only its multiplier. One Adam
steps everything at ``lr``; the multipliers are ``softplus(dual_scale * x)``, so with Adam (which
steps ``x`` by about ``lr`` whatever the gradient's scale) they move at about ``dual_scale * lr``,
the faster dual learning rate of the paper's implementations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F

from pytorchrl.agent.algorithms.families import ReplayConfig
from pytorchrl.agent.algorithms.sac import PolicyCritic
from pytorchrl.config import Config, ConfigError, param

__all__ = ["MPO", "MPOConfig", "e_step_weights", "temperature_dual"]

_LOG_STD_MIN, _LOG_STD_MAX = -20.0, 2.0


@dataclass(frozen=True)
class MPOConfig(ReplayConfig):
    """MPO (Abdolmaleki et al. 2018): E-step over sampled actions, decoupled KL constraints on the
    policy's mean and covariance, learned Lagrange multipliers."""

    networks = 6  # the policy, two critics, and the targets of all three

    name: str = param("mpo", "The algorithm.")
    num_action_samples: int = param(20, "Actions sampled from the target policy per state, for the E-step and the critics' target.", min=2, max=1_000)
    epsilon: float = param(0.1, "E-step: bound on KL(q || pi_target) that the temperature enforces.", min=0, min_exclusive=True)
    epsilon_mean: float = param(2.5e-3, "M-step: bound on the KL of the policy's mean to the target policy's.", min=0, min_exclusive=True)
    epsilon_std: float = param(1e-5, "M-step: bound on the KL of the policy's standard deviations to the target policy's.", min=0, min_exclusive=True)
    init_temperature: float = param(1.0, "Initial temperature eta.", min=0, min_exclusive=True)
    init_alpha_mean: float = param(1.0, "Initial Lagrange multiplier of the mean's KL bound.", min=0, min_exclusive=True)
    init_alpha_std: float = param(10.0, "Initial Lagrange multiplier of the standard deviations' KL bound.", min=0, min_exclusive=True)
    dual_scale: float = param(30.0, "The multipliers learn about this many times faster than lr (softplus(dual_scale * x)).", min=0, min_exclusive=True)

    def check(self, config: Config) -> None:
        super().check(config)
        if config.actor.recurrent.type != "none":
            raise ConfigError(f"config key 'actor.recurrent.type' = {config.actor.recurrent.type!r}: MPO takes no recurrent core; use 'none'")


class MPO(PolicyCritic):
    """MPO on a bounded Box action space (see the module doc); two critics, whose minimum values
    actions, as SAC's.

    Its actor is a ``gaussian`` :class:`~pytorchrl.agent.actors.policy_critic.PolicyCriticActor`
    with a target policy and three duals (temperature, mean and standard-deviation
    multipliers); its hyper-parameters are :class:`MPOConfig`'s.
    """

    config_class = MPOConfig
    config: MPOConfig
    action_spaces = (gym.spaces.Box,)
    metrics = (*PolicyCritic.metrics, "temperature", "kl_mean", "kl_std", "alpha_mean", "alpha_std", "entropy")

    @classmethod
    def check_action_space(cls, action_space: gym.Space) -> str | None:
        problem = super().check_action_space(action_space)
        return None if problem is None else "a bounded Box action space (MPO's Gaussian policy is continuous)"

    @classmethod
    def actor_options(cls) -> dict[str, Any]:
        return {"target_policy": True, "duals": 3}

    def __init__(self, actor: Any, device: str | torch.device = "cpu", config: MPOConfig | None = None, **overrides: Any) -> None:
        config = self.resolve_config(config, overrides)
        if actor.duals is None or actor.duals.numel() != 3 or actor.target_policy is None:
            raise ValueError("MPO needs a PolicyCriticActor with target_policy=True and duals=3")
        with torch.no_grad():  # softplus(scale * x) = init  <=>  x = log(expm1(init)) / scale
            inits = torch.tensor([config.init_temperature, config.init_alpha_mean, config.init_alpha_std])
            actor.duals.copy_(torch.log(torch.expm1(inits)) / config.dual_scale)
        super().__init__(actor, device, config)

    def multipliers(self) -> torch.Tensor:
        """``[temperature, alpha_mean, alpha_std]`` now."""
        return F.softplus(self.config.dual_scale * self.actor.duals) + 1e-8

    def _sample(self, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """``N`` pre-tanh samples ``[N, B, A]`` of the Gaussians ``(mean, std)`` ``[B, A]``."""
        eps = torch.randn(self.config.num_action_samples, *mean.shape, device=mean.device)
        return mean + std * eps

    def _values(self, x: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
        """The target critics' minimum ``[N, B]`` of the squashed actions ``pre`` ``[N, B, A]``
        at critic features ``x`` ``[B, F]``."""
        n, b, a = pre.shape
        xs = x.unsqueeze(0).expand(n, *x.shape).reshape(n * b, -1)
        q = self.actor.q_from_features(xs, torch.tanh(pre).reshape(n * b, a), target=True)
        return q.min(0).values.view(n, b)

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        actor, cfg = self.actor, self.config
        obs, next_obs = batch["obs"], batch["next_obs"]
        with torch.no_grad():
            target_mean, target_std = _gaussian(actor._policy_out(torch.cat([obs, next_obs]), target=True))
            b = obs.shape[0]
            target_x = actor.critic_features(torch.cat([obs, next_obs]), target=True)
            next_values = self._values(target_x[b:], self._sample(target_mean[b:], target_std[b:]))
            y = batch["rewards"] + batch["discounts"] * next_values.mean(0)
            target_mean, target_std = target_mean[:b], target_std[:b]
            pre = self._sample(target_mean, target_std)  # [N, B, A]: the E-step's actions
            q_sampled = self._values(target_x[:b], pre)
        q = actor.q_from_features(actor.critic_features(obs), actor.normalize(batch["actions"]))
        critic_loss = self._critic_loss(q, y, batch.get("weights"))

        temperature, alpha_mean, alpha_std = self.multipliers().unbind()
        temperature_loss = temperature_dual(q_sampled, temperature, cfg.epsilon)
        weights = e_step_weights(q_sampled, temperature.detach())

        mean, std = _gaussian(actor._policy_out(obs))
        # decoupled M-step: the mean's fit with the target's spread, the spread's with the target's mean
        log_prob_mean = _log_normal(pre, mean, target_std)
        log_prob_std = _log_normal(pre, target_mean, std)
        fit = -(weights * (log_prob_mean + log_prob_std)).sum(0).mean()
        kl_mean = (0.5 * ((mean - target_mean) / target_std).square()).sum(-1).mean()
        kl_std = (torch.log(std / target_std) + 0.5 * (target_std / std).square() - 0.5).sum(-1).mean()
        policy_loss = fit + alpha_mean.detach() * kl_mean + alpha_std.detach() * kl_std
        alpha_loss = alpha_mean * (cfg.epsilon_mean - kl_mean.detach()) + alpha_std * (cfg.epsilon_std - kl_std.detach())

        loss = critic_loss + policy_loss + temperature_loss + alpha_loss
        with torch.no_grad():
            entropy = (torch.log(std) + 0.5 * math.log(2 * math.pi * math.e)).sum(-1).mean()  # of the Gaussian before the tanh
            stats = torch.stack([critic_loss, fit, q.mean(), temperature, kl_mean, kl_std, alpha_mean, alpha_std, entropy]).tolist()
        return loss, dict(zip(("value_loss", "policy_loss", "q_mean", "temperature", "kl_mean", "kl_std", "alpha_mean", "alpha_std", "entropy"), stats))

    def apply_gradients(self, gradients: torch.Tensor | None = None, computed_at: int | None = None) -> bool:
        applied = super().apply_gradients(gradients, computed_at)
        if applied:
            self.update_targets(self.config.tau)
        return applied


def e_step_weights(q: torch.Tensor, temperature: torch.Tensor | float) -> torch.Tensor:
    """The E-step's non-parametric weights ``softmax_j(q_ij / temperature)`` over the ``N``
    sampled actions (dim 0) of each state: ``q`` is ``[N, B]``."""
    return torch.softmax(q / temperature, dim=0)


def temperature_dual(q: torch.Tensor, temperature: torch.Tensor, epsilon: float) -> torch.Tensor:
    """The temperature's dual ``eta * epsilon + eta * mean_i log mean_j exp(q_ij / eta)`` (its
    minimum keeps ``KL(q || pi_target)`` at ``epsilon``); ``q`` ``[N, B]`` carries no gradient."""
    n = q.shape[0]
    return temperature * epsilon + temperature * (torch.logsumexp(q / temperature, dim=0) - math.log(n)).mean()


def _gaussian(params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation of the policy head's output (mean and log std, as SAC's)."""
    mean, log_std = params.chunk(2, dim=-1)
    return mean, log_std.clamp(_LOG_STD_MIN, _LOG_STD_MAX).exp()


def _log_normal(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``log N(x; mean, diag(std^2))`` summed over the last dim (``x`` ``[N, B, A]``, the others ``[B, A]``)."""
    return (-0.5 * ((x - mean) / std).square() - torch.log(std) - 0.5 * math.log(2 * math.pi)).sum(-1)
