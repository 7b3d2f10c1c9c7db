"""IMPALA (Espeholt et al. 2018) and APPO: actor-critic learning from lagged rollouts with V-trace.

Both compute V-trace targets (:func:`~pytorchrl.agent.storages.on_policy.vtrace_buffer.compute_vtrace`)
on the time-major sequences of a :class:`~pytorchrl.agent.storages.on_policy.vtrace_buffer.VTraceBuffer`,
at one of two times (``targets``):

* ``minibatch`` (IMPALA): inside each minibatch's loss, with the current network; minibatches are
  whole sequences of a group of envs, as the recursion needs;
* ``round``: once per round, with the network as the round starts (one no-gradient forward pass,
  :meth:`IMPALA.prepare_round`), as PPO computes GAE once per rollout; the targets are then fixed
  numbers per transition, so memoryless minibatches are shuffled transitions, as PPO's.

The losses:

* IMPALA: ``-rho_t * A_t * log pi(a_t|x_t) + vf_coef * (vs_t - V(x_t))^2 / 2 - ent_coef * H``;
* APPO: PPO's clipped surrogate on the V-trace advantages, so several epochs over a lagged
  batch stay in a trust region; the ratio is to the behaviour policy, or (``proximal_policy:
  learner``) to the learner's policy at the start of the round, with the behaviour's lag
  weighted off (:class:`APPO`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from pytorchrl.agent.actors.rnd import RND_METRICS, intrinsic_rewards, predictor_loss, rewarded_observations
from pytorchrl.agent.algorithms.base import Algorithm, normalized
from pytorchrl.agent.algorithms.families import OnPolicyConfig, actor_critic_wiring
from pytorchrl.agent.algorithms.wiring import Wiring
from pytorchrl.agent.storages.on_policy.vtrace_buffer import compute_vtrace
from pytorchrl.config import Config, param


@dataclass(frozen=True)
class IMPALAConfig(OnPolicyConfig):
    """IMPALA (Espeholt et al. 2018): actor-critic on V-trace targets, for lagged (asynchronous) rollouts."""

    unrolls = True
    takes_rnd = True

    name: str = param("impala", "The algorithm.")
    lr: float = param(5e-4, "Adam learning rate.", min=0, min_exclusive=True)
    gae_lambda: float = param(1.0, "V-trace lambda: scales the trace weights c_t.", min=0, max=1)
    normalize_advantages: bool = param(False, "Normalise advantages per minibatch to zero mean, unit std.")
    ent_coef: float = param(0.01, "Entropy bonus coefficient.", min=0)
    rho_bar: float = param(1.0, "Truncation of the V-trace importance weights rho_t.", min=0, min_exclusive=True)
    c_bar: float = param(1.0, "Truncation of the V-trace trace weights c_t.", min=0, min_exclusive=True)
    num_epochs: int = param(1, "Passes over each batch.", min=1, max=10_000)
    minibatch_size: int | None = param(
        None, "Transitions per gradient step: whole env sequences, or shuffled transitions with targets: round (null: the whole batch).", min=1, max=10_000_000
    )
    targets: str = param(
        "minibatch",
        "When the V-trace targets are computed: 'minibatch' (in each minibatch's loss, with the current network, on whole sequences: IMPALA)"
        " or 'round' (once per round, with the network as the round starts, as PPO computes GAE; memoryless minibatches are then shuffled transitions).",
        choices=("minibatch", "round"),
    )


@dataclass(frozen=True)
class APPOConfig(IMPALAConfig):
    """APPO: PPO's clipped surrogate on V-trace advantages, around the behaviour or the learner's policy."""

    name: str = param("appo", "The algorithm.")
    normalize_advantages: bool = param(True, "Normalise advantages per minibatch to zero mean, unit std.")
    num_epochs: int = param(4, "Passes over each batch.", min=1, max=10_000)
    clip_range: float = param(0.2, "Clip range of the probability ratio to the proximal policy.", min=0, min_exclusive=True)
    proximal_policy: str = param(
        "behaviour",
        "What the ratio is clipped around: 'behaviour' (the policy that collected the rollout) or 'learner' (the learner's policy when the round starts,"
        " the behaviour's lag weighted by min(rho_bar, pi_learner / mu): Hilton et al. 2021's decoupled objective).",
        choices=("behaviour", "learner"),
    )


class IMPALA(Algorithm):
    """Importance-weighted actor-learner with V-trace targets.

    Its actor has ``evaluate_actions`` and ``get_value``; its hyper-parameters are
    :class:`IMPALAConfig`'s (``gae_lambda`` scales the traces ``c_t``; ``rho_bar`` truncates the
    importance weights of the targets and the policy gradient; ``targets``: see the module doc).
    """

    config_class = IMPALAConfig
    actor_kind = "OnPolicyActor"
    storage_kind = "VTraceBuffer"
    config: IMPALAConfig
    recurrent = True
    action_masks = True
    tunable = (*Algorithm.tunable, "ent_coef", "vf_coef", "rho_bar", "c_bar", "num_epochs")
    metrics: tuple[str, ...] = ("policy_loss", "value_loss", "entropy", "approx_kl", "rho_mean", "explained_variance", "lr")

    @classmethod
    def wire(cls, config: Config, observation_space: gym.Space, action_space: gym.Space) -> Wiring:
        return actor_critic_wiring(cls, config, observation_space, action_space, vtrace=True)

    def __init__(self, actor: nn.Module, device: str | torch.device = "cpu", config: IMPALAConfig | None = None, **overrides: Any) -> None:
        super().__init__(actor, device, config, **overrides)  # checks targets' choices (resolve_config)
        self._intrinsic_reward = float("nan")
        if self.config.rnd.enabled:
            self.metrics = (*self.metrics, *RND_METRICS)

    def prepare_round(self, storage: Any) -> None:
        """Score the round's rollouts once with the network as it is now, where the configuration
        asks for it (:meth:`_round_fields`), and with ``targets: round`` shuffle transitions.
        With RND, each rollout first gets its ``intrinsic_rewards`` (:func:`intrinsic_rewards`)."""
        if self.config.rnd.enabled:
            self._intrinsic_reward = intrinsic_rewards(self, storage)
        if self._scores_round():
            with torch.no_grad():
                storage.annotate(self._round_fields)
        if self.config.targets == "round":
            storage.use_transitions()

    def _scores_round(self) -> bool:
        return self.config.targets == "round"

    def _round_fields(self, rollout: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """What a round-start pass over one rollout stores in it (``[T, n]`` each): the policy's
        log-probs of the actions now, ``round_log_probs``, and with ``targets: round`` the V-trace
        ``vs``, ``advantages`` and ``rho``."""
        t, n = rollout["rewards"].shape
        log_prob, _, value, bootstrap = self._forward(rollout)
        fields = {"round_log_probs": log_prob.view(t, n)}
        if self.config.targets == "round":
            vs, advantages, rho = self._vtrace(rollout, log_prob, value, bootstrap)
            fields.update(vs=vs, advantages=advantages, rho=rho)
        return fields

    def _vtrace(self, batch: dict[str, torch.Tensor], log_prob: torch.Tensor, value: torch.Tensor, bootstrap: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """V-trace ``vs``, advantages and ``rho`` ``[T, n]`` of a time-major batch scored by ``log_prob`` and ``value`` ``[T * n]``."""
        t, n = batch["rewards"].shape
        cfg = self.config
        values = torch.cat([value.detach().view(t, n, -1), bootstrap.view(1, n, -1)])
        vs, advantages, rho = compute_vtrace(
            batch["log_probs"], log_prob.view(t, n), batch["rewards"], values[..., 0], batch["terminated"], batch["truncated"], batch["valid"],
            gamma=cfg.gamma, lambda_=cfg.gae_lambda, rho_bar=cfg.rho_bar, c_bar=cfg.c_bar,
        )
        if not cfg.rnd.enabled:
            return vs, advantages, rho
        # the intrinsic stream: its own values and discount, non-episodic (no episode end stops it)
        never = torch.zeros_like(batch["terminated"])
        vs_i, advantages_i, _ = compute_vtrace(
            batch["log_probs"], log_prob.view(t, n), batch["intrinsic_rewards"], values[..., 1], never, never, batch["valid"],
            gamma=cfg.rnd.gamma, lambda_=cfg.gae_lambda, rho_bar=cfg.rho_bar, c_bar=cfg.c_bar,
        )
        return torch.stack([vs, vs_i], -1), cfg.rnd.extrinsic_coef * advantages + cfg.rnd.intrinsic_coef * advantages_i, rho

    def _forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Current-policy log-probs, entropies and values ``[T * n]`` of a time-major batch, and the
        bootstrap values ``[n]`` (no gradient)."""
        t, n = batch["rewards"].shape
        obs = batch["obs"]
        actions = batch["actions"]
        if "states" in batch:  # a recurrent actor: one pass over the sequence, the bootstrap step included
            padded = torch.cat([actions, actions[-1:]])  # the bootstrap step's action is never scored
            log_prob, entropy, value = self.actor.evaluate_actions(obs, padded, batch["states"], batch["starts"])
            return log_prob[: t * n], entropy[: t * n], value[: t * n], value[t * n :].detach()
        log_prob, entropy, value = self.actor.evaluate_actions(obs[:t].reshape(t * n, *obs.shape[2:]), actions.reshape(t * n, *actions.shape[2:]))
        with torch.no_grad():
            bootstrap = self.actor.get_value(obs[t])
            if self.config.rnd.enabled:
                bootstrap = torch.stack([bootstrap, self.actor.intrinsic_value(obs[t])], -1)
        return log_prob, entropy, value, bootstrap

    def _evaluate(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Current-policy log-probs, entropies and values of a minibatch, and its V-trace targets:
        computed here on a time-major batch, or stored at the round's start (``targets: round``;
        the minibatch is then transitions, or sequences when recurrent)."""
        stored = "vs" in batch
        if stored and "states" not in batch:  # transitions
            log_prob, entropy, value = self.actor.evaluate_actions(batch["obs"], batch["actions"])
        else:
            log_prob, entropy, value, bootstrap = self._forward(batch)
        vs, advantages, rho = (batch["vs"], batch["advantages"], batch["rho"]) if stored else self._vtrace(batch, log_prob, value, bootstrap)
        mask = batch["valid"].reshape(-1).float()
        advantages = advantages.reshape(-1)
        if self.config.normalize_advantages:
            advantages = normalized(advantages, mask.bool())
        e = {
            "log_prob": log_prob, "entropy": entropy, "value": value, "vs": vs.reshape(value.shape), "advantages": advantages,
            "rho": rho.reshape(-1), "mask": mask, "count": mask.sum().clamp(min=1.0), "behaviour_log_prob": batch["log_probs"].reshape(-1),
        }
        if "round_log_probs" in batch:
            e["round_log_prob"] = batch["round_log_probs"].reshape(-1)
        return e

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, dict[str, float]]:
        e = self._evaluate(batch)
        policy_loss, extra = self._policy_loss(e)
        squared = (e["vs"] - e["value"]) ** 2
        if squared.dim() > 1:  # the extrinsic and the intrinsic value (RND): their mean, as PPO's loss
            squared = squared.mean(-1)
        value_loss = 0.5 * (squared * e["mask"]).sum() / e["count"]
        entropy_mean = (e["entropy"] * e["mask"]).sum() / e["count"]
        loss = policy_loss + self.config.vf_coef * value_loss - self.config.ent_coef * entropy_mean
        rnd_info: dict[str, float] = {}
        if self.config.rnd.enabled:
            rnd_loss, rnd_info = predictor_loss(self, rewarded_observations(batch))
            loss = loss + rnd_loss
            rnd_info["intrinsic_reward"] = self._intrinsic_reward
        with torch.no_grad():
            log_ratio = (e["log_prob"] - e["behaviour_log_prob"]) * e["mask"]
            approx_kl = (((log_ratio.exp() - 1) - log_ratio) * e["mask"]).sum() / e["count"]
            rho_mean = e["rho"].sum() / e["count"]
            stats = torch.stack([policy_loss, value_loss, entropy_mean, approx_kl, rho_mean, *extra.values()]).tolist()
        info: dict[str, Any] = dict(zip(("policy_loss", "value_loss", "entropy", "approx_kl", "rho_mean", *extra), stats))
        info["lr"] = self.lr
        info.update(rnd_info)
        return loss, info

    def _policy_loss(self, e: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The policy-gradient loss, and any statistics of it to log."""
        return -(e["rho"] * e["advantages"] * e["log_prob"] * e["mask"]).sum() / e["count"], {}


class APPO(IMPALA):
    """Asynchronous PPO: PPO's clipped surrogate on V-trace advantages.

    The ratio is clipped around a *proximal* policy. ``proximal_policy="behaviour"``: the policy
    that collected the rollout, as in PPO. A lagged rollout then starts its epochs with ratios
    already off 1, and the clip drops their gradient. ``"learner"``: the decoupled objective of
    Hilton et al. (2021, "Batch size-invariance for policy optimization"; IMPACT, Luo et al. 2020,
    with a target network): the proximal policy is the learner's own when the round starts (one
    no-gradient forward pass over the round's rollouts, :meth:`prepare_round`), so each round's
    first step is unclipped however old the rollout, and the behaviour's lag is corrected by the
    weight ``min(rho_bar, pi_prox / mu)`` instead:
    ``min(rho_bar, pi_prox/mu) * min(r A, clip(r, 1 - eps, 1 + eps) A)``, ``r = pi / pi_prox``.

    Its hyper-parameters are :class:`APPOConfig`'s: IMPALA's, ``clip_range`` (epsilon of the
    ratio clip) and ``proximal_policy`` (see above).
    """

    config_class = APPOConfig
    config: APPOConfig
    tunable = (*IMPALA.tunable, "clip_range")
    metrics = (*IMPALA.metrics, "clip_fraction")

    def __init__(self, actor: nn.Module, device: str | torch.device = "cpu", config: APPOConfig | None = None, **overrides: Any) -> None:
        super().__init__(actor, device, config, **overrides)  # checks proximal_policy's choices (resolve_config)

    def _scores_round(self) -> bool:
        """``proximal_policy="learner"`` scores the round's actions with the policy as it is now."""
        return self.config.proximal_policy == "learner" or super()._scores_round()

    def _policy_loss(self, e: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The clipped surrogate, and ``clip_fraction``: the share of valid steps whose ratio is
        outside the clip (no gradient from the surrogate there, half the time)."""
        proximal = e.get("round_log_prob") if self.config.proximal_policy == "learner" else None
        anchor = e["behaviour_log_prob"] if proximal is None else proximal
        ratio = (e["log_prob"] - anchor).exp()
        clip = self.config.clip_range
        surrogate = torch.min(e["advantages"] * ratio, e["advantages"] * ratio.clamp(1 - clip, 1 + clip))
        if proximal is not None:  # the behaviour's lag, as a truncated importance weight
            surrogate = surrogate * (proximal - e["behaviour_log_prob"]).exp().clamp(max=self.config.rho_bar)
        with torch.no_grad():
            clip_fraction = (((ratio - 1).abs() > clip).float() * e["mask"]).sum() / e["count"]
        return -(surrogate * e["mask"]).sum() / e["count"], {"clip_fraction": clip_fraction}
