"""Random Network Distillation (Burda et al. 2018, "Exploration by Random Network Distillation").

An exploration bonus for the on-policy algorithms: a fixed, randomly initialised *target*
network embeds each observation; a *predictor* learns to reproduce the embedding on the states
the agent visits. Its error is large on states seen rarely, and that error is the *intrinsic
reward*. Following the paper:

* both networks read observations normalised by running statistics and clipped to ``[-5, 5]``
  (the statistics are updated from each round's observations before they are scored);
* intrinsic rewards are divided by a running standard deviation of their non-episodic
  discounted sum (``gamma_intrinsic``), so their scale does not drift as the predictor learns;
  each env's sum runs on across rollouts (the paper's ``RewardForwardFilter``; restarted at 0
  with every rollout, the sums' std held their climb from 0 each time, another scale);
* they have their own value head and discount, and their returns are non-episodic: an episode
  end does not stop them (a game over is not a reason to stop exploring);
* the advantage the policy maximises is ``extrinsic_coef * A_e + intrinsic_coef * A_i``;
* the predictor is trained on a random ``update_proportion`` of the observations a minibatch's
  rewards were scored on (each step's next observation, ``rnd_obs``; an episode's final
  observation included, which is no step's own observation), so what pays is what it learns.

:class:`RandomNetworkDistillation` lives inside the actor (its weights and statistics are
checkpointed with it and never sent to collection workers). The algorithms score each round's
rollouts when it starts (:func:`intrinsic_rewards`, on the learner, with the predictor as it is
then) and add :func:`predictor_loss` to their loss. The storage seams: the rollouts get an
``intrinsic_rewards`` field (``annotate``, as APPO's round-start fields), and a GAE buffer a
second reward stream (:meth:`~pytorchrl.agent.storages.on_policy.gae_buffer.GAEBuffer.add_reward_stream`);
IMPALA and APPO compute the intrinsic V-trace beside the extrinsic one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pytorchrl.agent.actors.networks.encoders import EncoderSpec
from pytorchrl.agent.actors.networks.mlp import orthogonal_init

__all__ = [
    "RND_METRICS", "RNDSpec", "RandomNetworkDistillation", "add_intrinsic_rewards", "intrinsic_rewards", "predictor_loss", "rewarded_observations"
]

#: what an algorithm with RND reports beside its own metrics
RND_METRICS = ("rnd_loss", "intrinsic_reward")


@dataclass(frozen=True)
class RNDSpec:
    """What the RND networks are and how their rewards are scaled (the ``algorithm.rnd`` keys).

    :param features: width of the embedding both networks output.
    :param hidden_sizes: the MLP of each network over vector observations (images: a Nature CNN first).
    :param gamma: discount of the intrinsic returns whose running std scales the rewards.
    :param obs_clip: normalised observations are clipped to ``[-obs_clip, obs_clip]``.
    """

    features: int = 64
    hidden_sizes: tuple[int, ...] = (64, 64)
    gamma: float = 0.99
    obs_clip: float = 5.0

    def build(self, observation_space: gym.Space) -> RandomNetworkDistillation:
        return RandomNetworkDistillation(observation_space, self)


class RandomNetworkDistillation(nn.Module):
    """The target and predictor networks and the running statistics of RND (module doc).

    :param observation_space: a Box (vector or image) or Discrete space.
    :param spec: sizes and scaling.
    """

    obs_mean: torch.Tensor
    obs_var: torch.Tensor
    obs_count: torch.Tensor
    return_mean: torch.Tensor
    return_var: torch.Tensor
    return_count: torch.Tensor

    def __init__(self, observation_space: gym.Space, spec: RNDSpec) -> None:
        super().__init__()
        if not isinstance(observation_space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise ValueError(f"RND needs a Box or Discrete observation space, got {observation_space}")
        self.spec = spec
        # images arrive normalised and clipped (``normalize``), not as uint8 frames: not scaled again
        encoder = EncoderSpec(hidden_sizes=spec.hidden_sizes, activation="relu", image_scale=1.0)
        # the predictor is one layer deeper than the target (as in the paper): it can fit the
        # target's features, and what it cannot fit yet is what is new
        target, predictor = encoder.build(observation_space), encoder.build(observation_space)
        self.target = nn.Sequential(target, nn.Linear(target.out_features, spec.features))
        self.predictor = nn.Sequential(
            predictor, nn.Linear(predictor.out_features, spec.features), nn.ReLU(), nn.Linear(spec.features, spec.features)
        )
        orthogonal_init(self.target, float(np.sqrt(2)))
        orthogonal_init(self.predictor, float(np.sqrt(2)))
        self.target.requires_grad_(False)
        shape = observation_space.shape if isinstance(observation_space, gym.spaces.Box) else ()
        self.discrete_obs = isinstance(observation_space, gym.spaces.Discrete)
        self.register_buffer("obs_mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("obs_var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("obs_count", torch.tensor(1e-4, dtype=torch.float64))
        self.register_buffer("return_mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("return_var", torch.ones((), dtype=torch.float64))
        self.register_buffer("return_count", torch.tensor(1e-4, dtype=torch.float64))
        #: each env's non-episodic discounted sum of intrinsic rewards, per rollout of a round
        #: (its place in the round's list: a collection worker's, in a synchronous scheme), carried
        #: to the next round; on the learner only, checkpointed with the algorithm
        self.forward_sums: list[torch.Tensor] = []

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations normalised by the running statistics and clipped (Discrete: as they are)."""
        if self.discrete_obs:
            return obs
        std = self.obs_var.sqrt().float().clamp(min=1e-6)
        clip = self.spec.obs_clip
        return ((obs.float() - self.obs_mean.float()) / std).clamp(-clip, clip)

    def errors(self, obs: torch.Tensor) -> torch.Tensor:
        """The predictor's squared error per observation ``[B]`` (mean over the embedding)."""
        x = self.normalize(obs)
        with torch.no_grad():
            target = self.target(x)
        return (self.predictor(x) - target).square().mean(-1)

    @torch.no_grad()
    def update_obs_stats(self, obs: torch.Tensor) -> None:
        """Merge a batch of observations ``[B, ...]`` into the running mean and variance."""
        if self.discrete_obs:
            return
        batch = obs.double()
        merged = _merge(self.obs_mean, self.obs_var, self.obs_count, batch.mean(0), batch.var(0, unbiased=False), batch.shape[0])
        for buffer, value in zip((self.obs_mean, self.obs_var, self.obs_count), merged):
            buffer.copy_(value)  # in place: the algorithm's weight views (checkpoints, syncs) hold these tensors

    @torch.no_grad()
    def scaled_rewards(self, rewards: torch.Tensor, valid: torch.Tensor, slot: int = 0) -> torch.Tensor:
        """``rewards [T, N]`` divided by the running std of their non-episodic discounted sums
        (``valid`` marks the steps that count), whose statistics these rollouts update. Each
        env's sum goes on from where the last rollout with this ``slot`` left it (a received
        rollout's place in the round, :meth:`GAEBuffer.rollout_slots
        <pytorchrl.agent.storages.on_policy.gae_buffer.GAEBuffer.rollout_slots>`; the
        sequences cut from one share it) in :attr:`forward_sums`; at 0 the first time, or when
        the envs there are other ones. A place is a collection worker while all of them answer
        every round; with preemption (``fraction_*`` < 1) or a replaced worker it may hold
        another worker's envs, whose sums then go on from these (a small error in the scale's
        statistics, not in the rewards' ranking)."""
        while len(self.forward_sums) <= slot:
            self.forward_sums.append(torch.zeros(0, dtype=torch.float64))
        running = self.forward_sums[slot]
        if running.shape != rewards.shape[1:]:
            running = torch.zeros(rewards.shape[1], dtype=torch.float64)
        sums = torch.empty_like(rewards, dtype=torch.float64)
        for t in range(rewards.shape[0]):
            running = running * self.spec.gamma + rewards[t].double()
            sums[t] = running
        self.forward_sums[slot] = running
        kept = sums[valid.bool()]
        if kept.numel():
            merged = _merge(self.return_mean, self.return_var, self.return_count, kept.mean(), kept.var(unbiased=False), kept.numel())
            for buffer, value in zip((self.return_mean, self.return_var, self.return_count), merged):
                buffer.copy_(value)
        return (rewards.double() / self.return_var.sqrt().clamp(min=1e-8)).float()


def _merge(mean: torch.Tensor, var: torch.Tensor, count: torch.Tensor, batch_mean: torch.Tensor, batch_var: torch.Tensor, n: int) -> tuple[torch.Tensor, ...]:
    """Running moments merged with a batch's (Chan et al. 1979, as :class:`~pytorchrl.envs.normalization.RunningMeanStd`)."""
    delta = batch_mean - mean
    total = count + n
    new_mean = mean + delta * (n / total)
    m2 = var * count + batch_var * n + delta.square() * (count * n / total)
    return new_mean, m2 / total, total


def intrinsic_rewards(algorithm: Any, storage: Any) -> float:
    """The round-start scoring: merge this round's observations into the normalisation
    statistics, then give every rollout of ``storage`` its ``intrinsic_rewards`` ``[T, N]`` (the
    predictor's errors on the next observations, scaled) and those observations, ``rnd_obs [T,
    N, ...]`` (what :func:`predictor_loss` trains on), through the storage's ``annotate``. The
    running sums that scale them are kept per received rollout (``storage.rollout_slots()``):
    the sequences V-trace cuts from one go on from each other, in time order.

    :return: the mean intrinsic reward of the round's valid steps (a diagnostic).
    """
    rnd: RandomNetworkDistillation = algorithm.actor.rnd
    device = algorithm.device
    for rollout in storage.rollouts():
        t, n = rollout["rewards"].shape
        next_obs = rollout["obs"][1 : t + 1].reshape(t * n, *rollout["obs"].shape[2:])
        rnd.update_obs_stats(next_obs[rollout["valid"].reshape(-1).bool()].to(device))
    kept: list[torch.Tensor] = []
    slots = iter(storage.rollout_slots())

    def fields(rollout: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        t, n = rollout["rewards"].shape
        next_obs = rollout["obs"][1 : t + 1]
        with torch.no_grad():
            errors = rnd.errors(next_obs.reshape(t * n, *next_obs.shape[2:]).to(device)).view(t, n).cpu()
        rewards = rnd.scaled_rewards(errors, rollout["valid"].cpu(), slot=next(slots))
        kept.append(rewards[rollout["valid"].cpu().bool()])
        return {"intrinsic_rewards": rewards.to(rollout["rewards"].device), "rnd_obs": next_obs}

    storage.annotate(fields)
    return float(torch.cat(kept).mean()) if kept and sum(k.numel() for k in kept) else float("nan")


def add_intrinsic_rewards(algorithm: Any, storage: Any) -> float:
    """The round-start hook of the GAE algorithms (PPO, A2C): :func:`intrinsic_rewards`, then the
    intrinsic stream with the values of the actor's second head, its discount and the
    advantages' coefficients, to the storage (:meth:`~pytorchrl.agent.storages.on_policy.gae_buffer.GAEBuffer.add_reward_stream`).

    :return: the round's mean intrinsic reward.
    """
    mean = intrinsic_rewards(algorithm, storage)
    cfg = algorithm.config.rnd

    def stream(rollout: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        obs = rollout["obs"]
        t, n = rollout["rewards"].shape
        with torch.no_grad():
            values = algorithm.actor.intrinsic_value(obs[: t + 1].reshape((t + 1) * n, *obs.shape[2:]).to(algorithm.device))
        return rollout["intrinsic_rewards"], values.view(t + 1, n).cpu()

    storage.add_reward_stream(stream, gamma=cfg.gamma, extrinsic_coef=cfg.extrinsic_coef, intrinsic_coef=cfg.intrinsic_coef)
    return mean


def rewarded_observations(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The observations a minibatch's intrinsic rewards were scored on (``rnd_obs``), of its
    valid steps, as ``[B, ...]``: time-major minibatches (IMPALA's) are masked by ``valid``;
    transitions are valid ones already."""
    obs, valid = batch["rnd_obs"], batch.get("valid")
    if valid is not None and valid.dim() > 1:
        return obs[valid.bool()]
    return obs


def predictor_loss(algorithm: Any, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """The predictor's loss on a random ``update_proportion`` of a minibatch's observations
    (flattened to ``[B, ...]``), and its diagnostics. Only the kept rows go through the two
    networks: at the paper's 0.25, a quarter of the work of scoring them all and masking."""
    rnd: RandomNetworkDistillation = algorithm.actor.rnd
    proportion = algorithm.config.rnd.update_proportion
    if proportion < 1.0:
        obs = obs[(torch.rand(obs.shape[0]) < proportion).to(obs.device)]  # on the CPU stream, as the minibatches are drawn
    errors = rnd.errors(obs)
    loss = errors.sum() / max(1, errors.numel())
    return loss, {"rnd_loss": float(loss.detach())}


def intrinsic_values(head: nn.Linear, features: torch.Tensor) -> torch.Tensor:
    """The second output of a two-headed value layer ``[B]``."""
    return F.linear(features, head.weight[1:2], head.bias[1:2]).squeeze(-1)
