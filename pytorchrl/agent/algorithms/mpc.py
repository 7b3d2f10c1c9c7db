"""Model-based RL by model-predictive control: a dynamics-model ensemble learned from replay, and
collection workers that act by planning with it (:class:`~pytorchrl.agent.actors.model_based.MPCActor`).

The learner's part is supervised: each member of the ensemble regresses the normalised
observation change and reward of replayed transitions (mean squared error) through the
framework's one flat gradient, each member on its own bootstrap of the replay buffer, as PETS's
ensembles (Chua et al. 2018): a buffer row counts for member k as many times as a Poisson(1)
draw fixed for that row and member (:func:`bootstrap_weights`), so each member leaves out about
37% of the data and the members disagree where data are few. A resample of each minibatch would
give every member the same expected weight on every row. Once a round's data is in, the normalisation statistics are
recomputed from the whole replay buffer (:meth:`MPC.prepare_round`); they are buffers of the
actor, so they reach the workers with the weights and go into checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from pytorchrl.agent.actors.model_based import PLANNERS, MPCActor
from pytorchrl.agent.algorithms.base import Algorithm
from pytorchrl.agent.algorithms.families import ReplayConfig, replay_storage_factory
from pytorchrl.agent.algorithms.wiring import Wiring
from pytorchrl.config import Config, ConfigError, param
from pytorchrl.utils.errors import InputError


@dataclass(frozen=True)
class MPCConfig(ReplayConfig):
    """Model-predictive control with a learned dynamics-model ensemble (PETS, Chua et al. 2018;
    Nagabandi et al. 2018 and 2019). Each member is an MLP of ``actor.hidden_sizes`` and
    ``actor.activation``; ``lr`` is the model's learning rate."""

    networks = 5  # the ensemble's members (the default ensemble_size; an upper count for smaller ones)
    encoders = 0
    trained_keys = ("ensemble_size",)

    name: str = param("mpc", "The algorithm.")
    lr: float = param(1e-3, "Adam learning rate of the model ensemble.", min=0, min_exclusive=True)
    minibatch_size: int = param(128, "Transitions per gradient step (each member trains on its own bootstrap resample of them).", min=1, max=10_000_000)
    update_every: int | None = param(
        200, "Env steps (per env) between rounds of model training; a round makes update_every * num_envs * updates_per_step gradient steps.",
        min=1, max=1_000_000,
    )
    start_steps: int = param(200, "Transitions collected with uniformly random actions before the model trains and planning starts.", min=0)
    ensemble_size: int = param(5, "Members of the dynamics-model ensemble.", min=1, max=64)
    planner: str = param(
        "cem", "How actions are planned: best of random sequences, the cross-entropy method (PETS), or PDDM's reward-weighted filtered-noise update.",
        choices=PLANNERS,
    )
    horizon: int = param(25, "Planning horizon, in env steps.", min=1, max=1_000)
    num_candidates: int = param(400, "Action sequences scored per planning iteration (a multiple of ensemble_size: each goes through one member).", min=1, max=100_000)
    cem_iterations: int = param(5, "cem: refits of the Gaussian over action sequences per env step.", min=1, max=100)
    num_elites: int = param(40, "cem: best candidates the Gaussian is refitted to.", min=2)
    cem_alpha: float = param(0.1, "cem: share of the old mean and std kept at each refit (smoothing).", min=0, max=1)
    pddm_gamma: float = param(1.0, "pddm: reward weighting, candidates weighted by exp(pddm_gamma * predicted return).", min=0)
    pddm_beta: float = param(0.6, "pddm: noise filter, n_t = beta * u_t + (1 - beta) * n_(t-1) (1: independent noise per step).", min=0, max=1, min_exclusive=True)
    pddm_sigma: float = param(0.5, "pddm: std of the candidates' noise before filtering, in [-1, 1] action units.", min=0, min_exclusive=True)

    def planner_options(self) -> dict[str, Any]:
        """The planner's own keywords (see :mod:`~pytorchrl.agent.actors.model_based`)."""
        if self.planner == "cem":
            return {"iterations": self.cem_iterations, "num_elites": self.num_elites, "alpha": self.cem_alpha}
        if self.planner == "pddm":
            return {"gamma": self.pddm_gamma, "beta": self.pddm_beta, "sigma": self.pddm_sigma}
        return {}

    def check(self, config: Config) -> None:
        """What MPC's model and planners cannot do, before the replay family's checks."""
        if config.actor.recurrent.type != "none":
            raise ConfigError(f"config key 'actor.recurrent.type' = {config.actor.recurrent.type!r}: mpc's dynamics model is memoryless; use 'none'")
        if self.n_step != 1:
            raise ConfigError(f"config key 'algorithm.n_step' = {self.n_step}: mpc's model learns one-step transitions; use 1")
        if self.prioritized_replay:
            raise ConfigError("config key 'algorithm.prioritized_replay' = true: mpc trains its model on uniform replay (it has no TD errors to prioritise by)")
        if self.num_candidates % self.ensemble_size:
            raise ConfigError(
                f"config key 'algorithm.num_candidates' = {self.num_candidates} is not a multiple of algorithm.ensemble_size = {self.ensemble_size} "
                "(each candidate is rolled out through one member)"
            )
        if self.planner == "cem" and self.num_elites > self.num_candidates:
            raise ConfigError(f"config key 'algorithm.num_elites' = {self.num_elites} is larger than algorithm.num_candidates = {self.num_candidates}")
        if config.scheme.num_grad_workers > 0:
            raise ConfigError(
                f"config key 'scheme.num_grad_workers' = {config.scheme.num_grad_workers}: mpc's normalisation statistics come from the "
                "learner's own replay buffer; use 0 (remote collection workers are fine)"
            )
        super().check(config)

    def switched_off(self, config: Config) -> list[tuple[bool, list[str], str]]:
        return [
            *super().switched_off(config),
            (True, ["gamma", "tau"], "mpc plans undiscounted model returns and keeps no target networks"),
            (self.planner != "cem", ["cem_iterations", "num_elites", "cem_alpha"], f"algorithm.planner is {self.planner!r}"),
            (self.planner != "pddm", ["pddm_gamma", "pddm_beta", "pddm_sigma"], f"algorithm.planner is {self.planner!r}"),
        ]


class MPC(Algorithm):
    """Trains :class:`MPCActor`'s dynamics-model ensemble on replayed transitions; the actor plans with it.

    Its loss per minibatch is, summed over members, each member's mean squared error over the
    normalised observation change and reward of its own bootstrap resample of the minibatch
    (drawn from the gradient worker's stream, so runs repeat exactly). Summing, not averaging,
    keeps each member's gradient what it would be alone.
    """

    config_class = MPCConfig
    actor_kind = "MPCActor"
    storage_kind = "ReplayStorage"
    config: MPCConfig
    action_spaces = (gym.spaces.Box,)
    metrics: tuple[str, ...] = ("model_loss", "dynamics_loss", "reward_loss")

    @classmethod
    def check_action_space(cls, action_space: gym.Space) -> str | None:
        if isinstance(action_space, gym.spaces.Box) and np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all():
            return None
        return "a bounded Box action space (its planners search action sequences within the bounds)"

    @classmethod
    def wire(cls, config: Config, observation_space: gym.Space, action_space: gym.Space) -> Wiring:
        """An :class:`MPCActor` on a replay storage."""
        if not (isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1):
            raise InputError(
                f"algorithm.name = 'mpc' needs one-dimensional Box observations (its model predicts their change); "
                f"env.env_id = {config.env.env_id!r} has {observation_space}"
            )
        algo = config.algorithm
        assert isinstance(algo, MPCConfig)
        actor_factory = MPCActor.create_factory(
            observation_space, action_space, ensemble_size=algo.ensemble_size, hidden_sizes=tuple(config.actor.hidden_sizes),
            activation=config.actor.activation, planner=algo.planner, horizon=algo.horizon, num_candidates=algo.num_candidates,
            planner_options=algo.planner_options(),
        )
        return Wiring(actor=actor_factory, storage=replay_storage_factory(config, observation_space, action_space), algorithm=cls.create_factory(algo))

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        actor = self.actor
        obs, next_obs = batch["obs"].flatten(1).float(), batch["next_obs"].flatten(1).float()
        inputs = actor.model_inputs(obs, actor.normalize(batch["actions"]))
        targets = actor.model_targets(obs, next_obs, batch["rewards"])
        members = actor.ensemble_size
        error = (actor.model(inputs.expand(members, *inputs.shape)) - targets).square()  # [K, B, obs + 1]
        weights = bootstrap_weights(batch["indices"], members).to(error.device)  # [K, B]: each member's bootstrap
        loss = ((weights * error.mean(-1)).sum(1) / weights.sum(1).clamp(min=1.0)).sum()
        with torch.no_grad():
            model_loss, dynamics_loss, reward_loss = torch.stack([error.mean(), error[..., :-1].mean(), error[..., -1].mean()]).tolist()
        return loss, {"model_loss": model_loss, "dynamics_loss": dynamics_loss, "reward_loss": reward_loss}

    def prepare_round(self, storage: Any) -> None:
        """Recompute the normalisation statistics from every transition the replay buffer holds
        (PETS's rule: before each training, from the whole dataset). A round's weights go out
        before its data arrive, so workers plan with the statistics the model was trained with."""
        buffer = getattr(storage, "buffer", None)
        data = buffer.transitions() if buffer is not None else {}
        if len(data.get("rewards", ())) < 2:
            return
        obs = torch.from_numpy(data["obs"]).flatten(1).float()
        self.actor.set_statistics(obs, torch.from_numpy(data["next_obs"]).flatten(1).float(), torch.from_numpy(data["rewards"]).float())

    def set_warmup(self, warming_up: bool) -> None:
        """Act uniformly at random until the replay buffer first holds ``start_steps``."""
        self._end_uniform_acting(warming_up)


#: Poisson(1)'s cumulative distribution at 0, 1, ... 7: a uniform draw below entry j counts j times
_POISSON_1_CDF = torch.tensor([sum(np.exp(-1.0) / np.prod(range(1, i + 1)) for i in range(j + 1)) for j in range(8)], dtype=torch.float64)


def bootstrap_weights(rows: torch.Tensor, members: int) -> torch.Tensor:
    """How many times each replay row counts for each member ``[members, B]``: Poisson(1) draws,
    fixed for a (row, member) pair for the whole run (an integer hash of the two, so nothing is
    stored or checkpointed), the bootstrap of each member over the buffer."""
    rows = rows.detach().cpu().long().reshape(1, -1)
    key = rows * members + torch.arange(members).reshape(-1, 1) + 1
    h = (key * 2654435761) & 0xFFFFFFFF  # Knuth's multiplicative hash, then two xor-shift-multiply rounds
    h = ((h ^ (h >> 16)) * 0x45D9F3B) & 0xFFFFFFFF
    h = ((h ^ (h >> 16)) * 0x45D9F3B) & 0xFFFFFFFF
    h = h ^ (h >> 16)
    uniform = h.double() / 2.0**32
    return torch.searchsorted(_POISSON_1_CDF, uniform, right=True).float()
