"""DQN (Mnih et al. 2015) with every Rainbow component (Hessel et al. 2018) switchable.

The components live where they act: double Q-learning and the C51 loss here; dueling heads and
noisy nets in :class:`~pytorchrl.agent.actors.off_policy.QNetwork`; n-step returns and
prioritized replay in :class:`~pytorchrl.agent.storages.off_policy.ReplayBuffer`, which hands
this algorithm batches with the n-step return in ``rewards``, the bootstrap discount in
``discounts`` (0 after a termination) and importance ``weights``.

With a recurrent core (``actor.recurrent``) it is R2D2 (Kapturowski et al. 2019): replayed
windows of ``storage.sequence_length`` steps (:mod:`~pytorchrl.agent.storages.off_policy.sequence_replay`)
start from the state stored when they were collected; the first ``storage.burn_in`` steps only
warm the state up (no gradient, no loss), for the online and the target network alike; n-step
returns are computed within the window (a return that reaches its end bootstraps there), and a
window's priority is ``eta * max + (1 - eta) * mean`` of its steps' absolute TD errors. The loss
of the window's steps is then exactly the one-step loss above, per step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F

from pytorchrl.agent.actors.off_policy import OffPolicyActor
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.families import ReplayConfig, replay_storage_factory
from pytorchrl.agent.algorithms.sequences import Window
from pytorchrl.agent.algorithms.wiring import Wiring, action_mask_slice, encoder_spec, num_collectors, recurrent_spec
from pytorchrl.config import Config, ConfigError, param
from pytorchrl.config_checks import check_widths


@dataclass(frozen=True)
class DQNConfig(ReplayConfig):
    """DQN (Mnih et al. 2015) with each Rainbow component (Hessel et al. 2018) switchable."""

    networks = 2  # the Q-network and its target
    trained_keys = ("rainbow", "dueling", "noisy_nets", "distributional", "num_atoms", "v_min", "v_max", "head_hidden_sizes", "value_rescaling")

    name: str = param("dqn", "The algorithm.")
    lr: float = param(1e-4, "Adam learning rate.", min=0, min_exclusive=True)
    minibatch_size: int = param(64, "Transitions per gradient step.", min=1, max=10_000_000)
    target_update_interval: int = param(1000, "Gradient steps between target-network updates.", min=1)
    tau: float = param(1.0, "Each target update moves the target this far towards the online network (1: copy; <1: Polyak).", min=0, max=1, min_exclusive=True)
    exploration_fraction: float = param(0.1, "Share of run.target_steps over which epsilon decays linearly.", min=0, max=1)
    exploration_initial_eps: float = param(1.0, "Epsilon at the start.", min=0, max=1)
    exploration_final_eps: float = param(0.05, "Epsilon after the decay.", min=0, max=1)
    max_grad_norm: float | None = param(10.0, "Clip the global gradient norm to this (null: no clipping).", min=0, min_exclusive=True)
    adam_eps: float = param(1.5e-4, "Adam epsilon.", min=0, min_exclusive=True)
    double_q: bool = param(False, "Rainbow: double Q-learning (online net picks the bootstrap action, target net values it).")
    dueling: bool = param(False, "Rainbow: dueling value and advantage streams.")
    noisy_nets: bool = param(False, "Rainbow: noisy linear heads explore instead of epsilon-greedy (epsilon is then 0).")
    distributional: bool = param(False, "Rainbow: C51 distributional Q-learning.")
    num_atoms: int = param(51, "C51: atoms of the return distribution.", min=2, max=10_000)
    v_min: float = param(-10.0, "C51: smallest return on the support.")
    v_max: float = param(10.0, "C51: largest return on the support.")
    actor_priorities: bool = param(False, "Ape-X: collection workers score their transitions' n-step TD errors, as the learner does, as initial priorities (with prioritized_replay).")
    apex_epsilon_alpha: float | None = param(
        None, "Ape-X: collector i of N explores with epsilon ** (1 + alpha * i / (N - 1)) (Horgan et al. 2018 use 7 with epsilon 0.4); null: off.", min=0
    )
    value_rescaling: bool = param(
        False, "R2D2: learn h(Q), h(x) = sign(x)(sqrt(|x| + 1) - 1) + 1e-3 x, against targets h(r + discount * h^-1(Q_target)) "
        "(Pohlen et al. 2018; Kapturowski et al. 2019), so that large returns do not dominate the loss.",
    )
    head_hidden_sizes: tuple[int, ...] = param(
        (), "Hidden layers of each Q head stream (the advantage's, and the value's with dueling), noisy with noisy_nets; Hessel et al.'s Rainbow network: [512] with actor.encoder.features=0 and actor.hidden_sizes=[]."
    )
    rainbow: bool = param(False, "Turn every Rainbow component on (double_q, dueling, n_step >= 3, prioritized_replay, noisy_nets, distributional).")

    def resolved(self) -> DQNConfig:
        """The config the algorithm runs with: ``rainbow`` turns every component on."""
        if not self.rainbow:
            return self
        return dataclasses.replace(
            self, double_q=True, dueling=True, n_step=max(self.n_step, 3), prioritized_replay=True, noisy_nets=True, distributional=True, rainbow=False
        )

    def prioritized(self) -> bool:
        return self.prioritized_replay or self.rainbow

    def returns_n_step(self) -> int:
        return self.resolved().n_step

    def check(self, config: Config) -> None:
        super().check(config)
        if self.v_min >= self.v_max:
            raise ConfigError(f"config key 'algorithm.v_min' = {self.v_min} must be below algorithm.v_max = {self.v_max}")
        if self.value_rescaling and (self.distributional or self.rainbow):
            raise ConfigError(
                "config key 'algorithm.value_rescaling' = true is not available with C51 (algorithm.distributional or rainbow: its "
                "support is in return units); allowed: value_rescaling with the scalar Q-head"
            )
        if self.value_rescaling and self.actor_priorities:
            raise ConfigError(
                "config key 'algorithm.value_rescaling' = true is not available with algorithm.actor_priorities (collection workers "
                "score TD errors in return units, the learner in rescaled ones); allowed: one of the two"
            )
        if self.actor_priorities and (self.distributional or self.rainbow):
            raise ConfigError(
                "config key 'algorithm.actor_priorities' = true is not available with C51 (algorithm.distributional or rainbow: the "
                "learner's priorities are the return distribution's cross-entropy, the collection workers' TD errors in return units); "
                "allowed: actor_priorities with the scalar Q-head"
            )
        if self.actor_priorities and config.actor.recurrent.type != "none":
            raise ConfigError("config key 'algorithm.actor_priorities' = true is not available with a recurrent DQN (sequence priorities come from the learner)")
        check_widths("algorithm.head_hidden_sizes", self.head_hidden_sizes)

    def switched_off(self, config: Config) -> list[tuple[bool, list[str], str]]:
        collectors = num_collectors(config)
        noisy, distributional = self.noisy_nets or self.rainbow, self.distributional or self.rainbow
        return [
            *super().switched_off(config),
            (not self.prioritized(), ["actor_priorities"], "algorithm.prioritized_replay is false"),
            (not distributional, ["num_atoms", "v_min", "v_max"], "algorithm.distributional is false"),
            (noisy, ["exploration_fraction", "exploration_initial_eps", "exploration_final_eps", "apex_epsilon_alpha"],
             "noisy nets explore instead of epsilon-greedy (algorithm.noisy_nets or rainbow)"),
            (collectors == 1, ["apex_epsilon_alpha"], "it spreads epsilon over several collectors; this run has one"),
        ]


class DQN(Algorithm):
    """Q-learning on replayed transitions, with a target network.

    Its actor is an :class:`~pytorchrl.agent.actors.off_policy.OffPolicyActor`; its
    hyper-parameters are :class:`DQNConfig`'s (``rainbow`` resolved: every component on).
    ``gamma`` and ``n_step`` make the returns within a replayed window when recurrent (else the
    storage's); ``priority_eta`` mixes a window's max and mean TD error.
    """

    config_class = DQNConfig
    actor_kind = "OffPolicyActor"
    storage_kind = "ReplayStorage"
    config: DQNConfig
    constructor_keys = ("burn_in",)
    tunable = (*Algorithm.tunable, "tau")
    metrics = ("value_loss", "q_mean", "td_abs_mean", "epsilon")
    recurrent = True
    action_masks = True
    action_spaces = (gym.spaces.Discrete,)

    @classmethod
    def wire(cls, config: Config, observation_space: gym.Space, action_space: gym.Space) -> Wiring:
        """A Q-network actor (``rainbow`` turns every component on; noisy nets replace
        epsilon-greedy exploration) on a replay storage."""
        assert isinstance(config.algorithm, DQNConfig)
        algo = config.algorithm.resolved()
        config = dataclasses.replace(config, algorithm=algo)
        actor_factory = OffPolicyActor.create_factory(
            observation_space, action_space, encoder=encoder_spec(config.actor), dueling=algo.dueling, noisy=algo.noisy_nets,
            num_atoms=algo.num_atoms if algo.distributional else 1, v_min=algo.v_min, v_max=algo.v_max,
            apex_alpha=algo.apex_epsilon_alpha, num_collectors=num_collectors(config), double_q=algo.double_q, recurrent=recurrent_spec(config.actor),
            action_mask=action_mask_slice(config, observation_space), head_hidden_sizes=tuple(algo.head_hidden_sizes),
        )
        storage_factory = replay_storage_factory(config, observation_space, action_space, actor_priorities=algo.actor_priorities)
        return Wiring(actor=actor_factory, storage=storage_factory, algorithm=cls.create_factory(algo, burn_in=config.storage.burn_in))

    def __init__(
        self, actor: Any, device: str | torch.device = "cpu", config: DQNConfig | None = None, *, burn_in: int = 0, **overrides: Any
    ) -> None:
        """:param burn_in: first steps of a replayed window that only warm up the state (recurrent; ``storage.burn_in``)."""
        super().__init__(actor, device, self.resolve_config(config, overrides).resolved())
        self.burn_in = burn_in
        # noisy nets explore instead of epsilon-greedy
        initial, final = (0.0, 0.0) if self.config.noisy_nets else (self.config.exploration_initial_eps, self.config.exploration_final_eps)
        self.exploration = (self.config.exploration_fraction, initial, final)
        self._priorities: torch.Tensor | None = None
        self.set_progress(0.0)

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        q_net, target = self.actor.q_net, self.actor.target_q_net
        q_net.reset_noise()
        target.reset_noise()
        if "states" in batch:
            return self._sequence_loss(batch)
        actions = batch["actions"].long()
        rows = torch.arange(len(actions))
        with torch.no_grad():  # the target network runs once: it both values and (without double Q) picks
            next_logits = target.logits(batch["next_obs"])
            chooser = q_net.forward(batch["next_obs"]) if self.config.double_q else target.values(next_logits)
            next_out = next_logits[rows, self.actor.masked(chooser, batch["next_obs"]).argmax(-1)]  # [batch, atoms] of the bootstrap action
        out = q_net.logits(batch["obs"])[rows, actions]
        loss, info, self._priorities = self._loss(out, next_out, batch["rewards"], batch["discounts"], batch.get("weights"))
        return loss, info

    def _loss(
        self, out: torch.Tensor, next_out: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor, weights: torch.Tensor | None
    ) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
        """The loss of taken-action outputs ``out`` against ``rewards + discounts * next_out``
        (``[batch, atoms]`` each), its diagnostics, and each sample's absolute TD error."""
        q_net = self.actor.q_net
        if q_net.num_atoms == 1:
            q = out.squeeze(-1)
            # the head learns h(Q) with value rescaling, Q without: to and from return units
            h, h_inv = (rescale_value, rescale_inverse) if self.config.value_rescaling else (_same, _same)
            with torch.no_grad():
                y = h(rewards + discounts * h_inv(next_out.squeeze(-1)))
            per_sample = F.smooth_l1_loss(q, y, reduction="none")
            priorities = (y - q).detach().abs()
            info = {"q_mean": float(h_inv(q.detach()).mean()), "td_abs_mean": float(priorities.mean())}
        else:  # C51: cross-entropy to the projected target distribution
            log_p = out.log_softmax(-1)
            with torch.no_grad():
                m = project_distribution(next_out.softmax(-1), rewards, discounts, q_net.support)
            per_sample = -(m * log_p).sum(-1)
            priorities = per_sample.detach()
            info = {"q_mean": float((log_p.detach().exp() * q_net.support).sum(-1).mean()), "td_abs_mean": float(priorities.mean())}
        # importance weights of prioritized replay
        loss = per_sample.mean() if weights is None else (weights * per_sample).mean()
        info["value_loss"] = float(loss.detach())
        info["epsilon"] = float(self.actor.epsilon)
        return loss, info, priorities

    def _sequence_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """R2D2 on time-major windows (see the module doc): burn-in, n-step returns within the
        window, the one-step loss per valid step, and eta-mixed window priorities."""
        q_net, target = self.actor.q_net, self.actor.target_q_net
        obs, starts, state = batch["obs"], batch["starts"], batch["states"]
        burn = self.burn_in  # both networks warm their states up on the first steps, without gradient
        with torch.no_grad():
            target_logits = target.logits_sequence(obs, state, starts, burn)  # [L + 1 - burn, B, A, atoms]
        online_logits = q_net.logits_sequence(obs, state, starts, burn)
        window = Window(batch, burn, gamma=self.config.gamma, n_step=self.config.n_step)
        with torch.no_grad():
            values = q_net.values(online_logits.detach()) if self.config.double_q else target.values(target_logits)
            chooser = self.actor.masked(window.at_boot(values), window.at_boot(obs[burn:]))
            next_out = window.at_boot(target_logits)[torch.arange(len(chooser)), chooser.argmax(-1)]
        out = window.now(online_logits)[torch.arange(len(chooser)), window.now(batch["actions"][burn:]).long()]
        loss, info, td = self._loss(out, next_out, window.returns, window.discounts, window.weights)
        self._priorities = window.priorities(td, self.config.priority_eta)
        return loss, info

    def pop_priorities(self) -> torch.Tensor | None:
        """The last minibatch's TD errors (C51: its losses), the new priorities of its transitions."""
        out, self._priorities = self._priorities, None
        return out

    def apply_gradients(self, gradients: torch.Tensor | None = None, computed_at: int | None = None) -> bool:
        applied = super().apply_gradients(gradients, computed_at)
        if applied and self.version % self.config.target_update_interval == 0:
            self.update_targets(self.config.tau)
        return applied

    def set_progress(self, progress: float) -> None:
        """Epsilon decays linearly from its initial to its final value over ``exploration_fraction``."""
        super().set_progress(progress)
        fraction, initial, final = self.exploration
        done = 1.0 if fraction == 0 else min(1.0, progress / fraction)
        self.actor.epsilon.fill_(initial + done * (final - initial))


def _same(x: torch.Tensor) -> torch.Tensor:
    return x


#: the epsilon of the value rescaling h (Pohlen et al. 2018; R2D2 uses the same)
RESCALE_EPS = 1e-3


def rescale_value(x: torch.Tensor, eps: float = RESCALE_EPS) -> torch.Tensor:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x: compresses large returns, keeps their order and sign."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def rescale_inverse(y: torch.Tensor, eps: float = RESCALE_EPS) -> torch.Tensor:
    """h^-1(y) = sign(y) (((sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps))^2 - 1), the inverse of
    :func:`rescale_value`; the root is computed as ``2 a / (sqrt(1 + 4 eps a) + 1)``, ``a = |y| + 1
    + eps``, the same value without the cancellation of ``sqrt(...) - 1`` in float32."""
    a = y.abs() + 1.0 + eps
    root = 2.0 * a / (torch.sqrt(1.0 + 4.0 * eps * a) + 1.0)
    return torch.sign(y) * (root * root - 1.0)


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
    # a NaN return (a broken env) makes its row NaN, so the loss is NaN and the update is skipped,
    # instead of an out-of-range atom index (clamp maps infinities to the ends; NaN stays)
    broken = b.isnan()
    # float32 rounding can put a return clamped to v_max a hair past the last atom (b = 100.0000076
    # of 100 on linspace(-1.7, 2.9, 101)): its ceil would index one atom past the support
    b = b.masked_fill(broken, 0.0).clamp(0.0, atoms - 1)
    lower, upper = b.floor().long(), b.ceil().long()
    # an atom that lands exactly on the support goes wholly to it (lower == upper)
    same = lower == upper
    w_lower = (upper.float() - b) + same.float()
    w_upper = b - lower.float()
    out = torch.zeros_like(next_probs)
    out.scatter_add_(-1, lower, next_probs * w_lower)
    out.scatter_add_(-1, upper, next_probs * w_upper)
    return out.masked_fill(broken.any(-1, keepdim=True), float("nan"))
