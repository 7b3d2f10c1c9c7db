"""DQN (Mnih et al. 2015) with every Rainbow component (Hessel et al. 2018) switchable.

The components live where they act: double Q-learning and the C51 loss here; dueling heads and
noisy nets in :class:`~pytorchrl.agent.actors.off_policy.QNetwork`; n-step returns and
prioritized replay in :class:`~pytorchrl.agent.storages.off_policy.ReplayBuffer`, which hands
this algorithm batches with the n-step return in ``rewards``, the bootstrap discount in
``discounts`` (0 after a termination) and importance ``weights``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F

from pytorchrl.agent.actors.off_policy import OffPolicyActor
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.wiring import Wiring, encoder_spec, num_collectors, replay_storage_factory
from pytorchrl.config import Config, DQNConfig


class DQN(Algorithm):
    """Q-learning on replayed transitions, with a target network.

    :param actor: an :class:`~pytorchrl.agent.actors.off_policy.OffPolicyActor`.
    :param lr: Adam learning rate.
    :param minibatch_size: transitions per gradient step.
    :param double_q: pick the bootstrap action with the online network, value it with the target.
    :param target_update_interval: gradient steps between target updates.
    :param tau: each target update moves the target this far towards the online network (1: copy).
    :param exploration_fraction: share of ``run.target_steps`` over which epsilon decays linearly.
    :param exploration_initial_eps: epsilon at the start.
    :param exploration_final_eps: epsilon after the decay.
    :param max_grad_norm: global gradient-norm clip (None: off).
    :param adam_eps: Adam epsilon.
    :param device: torch device.
    """

    config_class = DQNConfig
    tunable = (*Algorithm.tunable, "tau")
    action_spaces = (gym.spaces.Discrete,)

    @classmethod
    def wire(cls, config: Config, observation_space: gym.Space, action_space: gym.Space) -> Wiring:
        """A Q-network actor (``rainbow`` turns every component on; noisy nets replace
        epsilon-greedy exploration) on a replay storage."""
        algo = config.algorithm
        assert isinstance(algo, DQNConfig)
        if algo.rainbow:
            algo = dataclasses.replace(
                algo, double_q=True, dueling=True, n_step=max(algo.n_step, 3), prioritized_replay=True, noisy_nets=True, distributional=True
            )
            config = dataclasses.replace(config, algorithm=algo)
        actor_factory = OffPolicyActor.create_factory(
            observation_space, action_space, encoder=encoder_spec(config.actor), dueling=algo.dueling, noisy=algo.noisy_nets,
            num_atoms=algo.num_atoms if algo.distributional else 1, v_min=algo.v_min, v_max=algo.v_max,
            apex_alpha=algo.apex_epsilon_alpha, num_collectors=num_collectors(config),
        )
        explore = (0.0, 0.0) if algo.noisy_nets else (algo.exploration_initial_eps, algo.exploration_final_eps)
        algo_factory = cls.create_factory(
            lr=algo.lr, minibatch_size=algo.minibatch_size, double_q=algo.double_q, target_update_interval=algo.target_update_interval,
            tau=algo.tau, exploration_fraction=algo.exploration_fraction, exploration_initial_eps=explore[0],
            exploration_final_eps=explore[1], max_grad_norm=algo.max_grad_norm, adam_eps=algo.adam_eps,
        )
        storage_factory = replay_storage_factory(config, observation_space, action_space, actor_priorities=algo.actor_priorities)
        return Wiring(actor=actor_factory, storage=storage_factory, algorithm=algo_factory)

    def __init__(
        self,
        actor: Any,
        device: str | torch.device = "cpu",
        *,
        lr: float = 1e-4,
        minibatch_size: int = 64,
        double_q: bool = False,
        target_update_interval: int = 1,
        tau: float = 1.0,
        exploration_fraction: float = 0.1,
        exploration_initial_eps: float = 1.0,
        exploration_final_eps: float = 0.05,
        max_grad_norm: float | None = 10.0,
        adam_eps: float = 1.5e-4,
    ) -> None:
        super().__init__(actor, device, lr=lr, adam_eps=adam_eps, max_grad_norm=max_grad_norm)
        self.minibatch_size = minibatch_size
        self.double_q = double_q
        self.target_update_interval = target_update_interval
        self.tau = tau
        self.exploration = (exploration_fraction, exploration_initial_eps, exploration_final_eps)
        self._priorities: torch.Tensor | None = None
        self.set_progress(0.0)

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        q_net, target = self.actor.q_net, self.actor.target_q_net
        q_net.reset_noise()
        target.reset_noise()
        actions = batch["actions"].long()
        rows = torch.arange(len(actions))
        with torch.no_grad():  # the target network runs once: it both values and (without double Q) picks
            next_logits = target.logits(batch["next_obs"])
            chooser = q_net.forward(batch["next_obs"]) if self.double_q else target.values(next_logits)
            next_out = next_logits[rows, chooser.argmax(-1)]  # [batch, atoms] of the bootstrap action
        out = q_net.logits(batch["obs"])[rows, actions]
        if q_net.num_atoms == 1:
            q = out.squeeze(-1)
            with torch.no_grad():
                y = batch["rewards"] + batch["discounts"] * next_out.squeeze(-1)
            per_sample = F.smooth_l1_loss(q, y, reduction="none")
            priorities = (y - q).detach().abs()
            info = {"q_mean": float(q.detach().mean()), "td_abs_mean": float(priorities.mean())}
        else:  # C51: cross-entropy to the projected target distribution
            log_p = out.log_softmax(-1)
            with torch.no_grad():
                m = project_distribution(next_out.softmax(-1), batch["rewards"], batch["discounts"], q_net.support)
            per_sample = -(m * log_p).sum(-1)
            priorities = per_sample.detach()
            info = {"q_mean": float((log_p.detach().exp() * q_net.support).sum(-1).mean()), "td_abs_mean": float(priorities.mean())}
        weights = batch.get("weights")  # importance weights of prioritized replay
        loss = per_sample.mean() if weights is None else (weights * per_sample).mean()
        self._priorities = priorities
        info["value_loss"] = float(loss.detach())
        info["epsilon"] = float(self.actor.epsilon)
        return loss, info

    def pop_priorities(self) -> torch.Tensor | None:
        """The last minibatch's TD errors (C51: its losses), the new priorities of its transitions."""
        out, self._priorities = self._priorities, None
        return out

    def apply_gradients(self, gradients: torch.Tensor | None = None) -> bool:
        applied = super().apply_gradients(gradients)
        if applied and self.version % self.target_update_interval == 0:
            self.update_targets(self.tau)
        return applied

    def set_progress(self, progress: float) -> None:
        """Epsilon decays linearly from its initial to its final value over ``exploration_fraction``."""
        super().set_progress(progress)
        fraction, initial, final = self.exploration
        done = 1.0 if fraction == 0 else min(1.0, progress / fraction)
        self.actor.epsilon.fill_(initial + done * (final - initial))


def project_distribution(next_probs: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """Project the distribution ``rewards + discounts * Z`` onto ``support`` (C51, Bellemare et al.
    2017, Algorithm 1): each shifted atom's probability is split between its two neighbours.

    :param next_probs: ``[batch, atoms]`` probabilities of the bootstrap distribution.
    :param rewards: ``[batch]`` (n-step) returns.
    :param discounts: ``[batch]`` bootstrap discounts (0 after a termination).
    :param support: ``[atoms]`` evenly spaced atom values.
    :return: ``[batch, atoms]`` projected probabilities.
    """
    v_min, v_max, atoms = float(support[0]), float(support[-1]), support.numel()
    delta = (v_max - v_min) / (atoms - 1)
    tz = (rewards.unsqueeze(-1) + discounts.unsqueeze(-1) * support).clamp(v_min, v_max)
    b = (tz - v_min) / delta
    lower, upper = b.floor().long(), b.ceil().long()
    # an atom that lands exactly on the support goes wholly to it (lower == upper)
    same = lower == upper
    w_lower = (upper.float() - b) + same.float()
    w_upper = b - lower.float()
    out = torch.zeros_like(next_probs)
    out.scatter_add_(-1, lower, next_probs * w_lower)
    out.scatter_add_(-1, upper, next_probs * w_upper)
    return out
