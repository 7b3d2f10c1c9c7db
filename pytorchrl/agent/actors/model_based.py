"""Model-based acting: a learned dynamics-model ensemble and the planners that act through it (MPC).

:class:`DynamicsEnsemble` is ``K`` MLPs evaluated as one (a ``baddbmm`` per layer, as
:class:`~pytorchrl.agent.actors.policy_critic.CriticEnsemble`), each predicting the observation's
change and the reward from ``(obs, action)`` in normalised units. :class:`MPCActor` holds it
with the normalisation statistics (buffers: the learner computes them from its replay buffer,
and they reach collection workers with the weights) and acts by planning: every step it
searches action sequences over ``horizon`` steps, scores them by the rewards the model
predicts, and takes the first action of the best plan (model-predictive control).

The planners are plain functions over a ``rollout_return(actions) -> returns`` callable
(``actions [E, N, H, A]`` in ``[-1, 1]``: ``N`` candidate sequences of ``H`` steps for each of
``E`` observations; ``returns [E, N]``), so they can be checked on a known objective:

- :func:`random_shooting`: the best of ``N`` uniformly random sequences (Nagabandi et al. 2018);
- :func:`cem`: the cross-entropy method, a Gaussian over sequences refitted to its elites a few
  times (PETS, Chua et al. 2018);
- :func:`pddm`: MPPI-style reward-weighted averaging of candidates drawn around the previous
  plan with temporally filtered noise (Nagabandi et al. 2019, "Deep Dynamics Models for Learning
  Dexterous Manipulation", eq. 3-4).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from pytorchrl.agent.actors.noise import NoisePart, draw_parts
from pytorchrl.agent.actors.policy_critic import CriticEnsemble

#: ``actions [E, N, H, A] -> returns [E, N]``
ReturnFn = Callable[[torch.Tensor], torch.Tensor]

PLANNERS = ("random_shooting", "cem", "pddm")


# ----------------------------------------------------------------------------- planners


def random_shooting(rollout_return: ReturnFn, mean: torch.Tensor, *, num_candidates: int) -> torch.Tensor:
    """The best of ``num_candidates`` uniformly random action sequences in ``[-1, 1]``.

    :param mean: ``[E, H, A]``; only its shape is read (random shooting keeps no plan).
    :return: ``[E, H, A]``, each row's best sequence.
    """
    e, h, a = mean.shape
    candidates = torch.rand(e, num_candidates, h, a, device=mean.device).mul_(2).sub_(1)
    best = rollout_return(candidates).argmax(1)
    return candidates[torch.arange(e, device=mean.device), best]


def cem(
    rollout_return: ReturnFn, mean: torch.Tensor, *, num_candidates: int, iterations: int, num_elites: int, alpha: float, init_std: float = 0.5
) -> torch.Tensor:
    """The cross-entropy method over action sequences: ``iterations`` times, draw
    ``num_candidates`` sequences from a diagonal Gaussian (clipped to ``[-1, 1]``), and move its
    mean and std towards those of the ``num_elites`` best, keeping ``alpha`` of the old values.

    :param mean: ``[E, H, A]``, the starting mean (the previous step's plan, shifted).
    :param init_std: the starting std, in ``[-1, 1]`` action units (0.5: a quarter of the range, as PETS).
    :return: ``[E, H, A]``, the final mean.
    """
    std = torch.full_like(mean, init_std)
    for _ in range(iterations):
        candidates = torch.addcmul(mean.unsqueeze(1), std.unsqueeze(1), torch.randn(mean.shape[0], num_candidates, *mean.shape[1:], device=mean.device))
        candidates.clamp_(-1.0, 1.0)
        elite_rows = rollout_return(candidates).topk(num_elites, dim=1).indices
        elites = candidates.gather(1, elite_rows.view(*elite_rows.shape, 1, 1).expand(-1, -1, *mean.shape[1:]))
        mean = torch.lerp(elites.mean(1), mean, alpha)
        std = torch.lerp(elites.std(1, unbiased=False), std, alpha)
    return mean


def filtered_noise(shape: tuple[int, ...], beta: float, sigma: float, device: torch.device | None = None) -> torch.Tensor:
    """``[E, N, H, A]`` Gaussian noise of std ``sigma`` filtered along the horizon (dim 2):
    ``n_t = beta * u_t + (1 - beta) * n_{t-1}``, ``n_{-1} = 0`` (PDDM, eq. 4): consecutive
    actions of a candidate move together, which smooth controllers need."""
    u = torch.randn(shape, device=device).mul_(sigma * beta)
    for t in range(1, shape[2]):
        u[:, :, t].add_(u[:, :, t - 1], alpha=1.0 - beta)
    return u


def pddm(rollout_return: ReturnFn, mean: torch.Tensor, *, num_candidates: int, gamma: float, beta: float, sigma: float) -> torch.Tensor:
    """PDDM's planner (Nagabandi et al. 2019, MPPI-style): ``num_candidates`` sequences around
    ``mean`` with :func:`filtered_noise`, averaged with weights ``exp(gamma * return)``.

    :param mean: ``[E, H, A]``, the previous step's plan, shifted.
    :param gamma: reward weighting; large is close to taking the best candidate, 0 the plain mean.
    :param beta: noise filter; 1 is independent noise per step, small is smoother.
    :param sigma: std of the unfiltered noise, in ``[-1, 1]`` action units.
    :return: ``[E, H, A]``, the new plan.
    """
    noise = filtered_noise((mean.shape[0], num_candidates, *mean.shape[1:]), beta, sigma, mean.device)
    candidates = noise.add_(mean.unsqueeze(1)).clamp_(-1.0, 1.0)
    weights = torch.softmax(gamma * rollout_return(candidates), dim=1)  # exp(gamma (R - max R)), normalised
    return torch.einsum("en,enha->eha", weights, candidates)


# ------------------------------------------------------------------------------ model


class DynamicsEnsemble(CriticEnsemble):
    """``K`` independent MLPs evaluated as one (the layers of a
    :class:`~pytorchrl.agent.actors.policy_critic.CriticEnsemble`: one batched matrix product per
    layer over the members), each on its own input: planning sends each candidate through its
    own member at the cost of one network.

    :param num: members.
    :param in_features: observation plus action size.
    :param out_features: observation plus reward size.
    :param hidden_sizes: hidden widths.
    :param activation: hidden activation name.
    """

    def __init__(self, num: int, in_features: int, out_features: int, hidden_sizes: tuple[int, ...], activation: str) -> None:
        super().__init__(num, in_features, hidden_sizes, activation, out_features=out_features)

    def forward(self, x: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        """``[K, B, out_features]`` outputs of ``x [K, B, in_features]`` (member k on row block k;
        ``frozen``: detached parameters, as the critics')."""
        last = len(self._layers) - 1
        for i, (weight, bias) in enumerate(self._layers):
            if frozen:
                weight, bias = weight.detach(), bias.detach()
            x = torch.baddbmm(bias, x, weight)
            if i < last:
                x = self._act(x)
        return x


class MPCActor(nn.Module):
    """A :class:`DynamicsEnsemble` with its normalisation statistics, acting by planning.

    The model predicts, per member, ``(obs' - obs - delta_mean) / delta_std`` and
    ``(reward - reward_mean) / reward_std`` from ``((obs - obs_mean) / obs_std, action)``, actions
    in ``[-1, 1]`` (scaled to the space's bounds at the actor's edge, as the policy-critic actor).
    The six statistics are buffers: :class:`~pytorchrl.agent.algorithms.mpc.MPC` sets them from its
    replay buffer each round, and they travel with the weights and into checkpoints.

    Planning rolls each candidate through one member (candidate ``n`` through member ``n % K``,
    PETS's "TS-inf" propagation without the sampling) and sums the predicted rewards, undiscounted, over
    the horizon; the model has no termination head, so a plan assumes the episode goes on.

    Collection acts with the plan of the previous step, shifted by one, as the starting point of
    the next (CEM's mean, PDDM's mean; random shooting keeps none). That warm start is the
    actor's, per env, and is dropped at each rollout's start (:meth:`draw_noise`): rollouts
    are what a checkpoint is taken between, so a resumed run plans exactly as the uninterrupted
    one. Within a rollout it carries over an episode's end (the planner's iterations move away from a
    stale start). Evaluation carries it in ``rhs``, reset where an episode starts.

    :param observation_space: a one-dimensional Box.
    :param action_space: a bounded Box.
    :param ensemble_size: members of the ensemble.
    :param hidden_sizes: hidden widths of each member.
    :param activation: hidden activation.
    :param planner: ``random_shooting``, ``cem`` or ``pddm``.
    :param horizon: planning horizon, in steps.
    :param num_candidates: action sequences per planning iteration (a multiple of ``ensemble_size``).
    :param planner_options: the planner's own keywords (:func:`cem`, :func:`pddm`).
    """

    is_recurrent = False
    state_size = 0
    scores_while_acting = False
    #: planning draws its candidates from the active stream while it acts; the rollout's
    #: pre-drawn noise is only the warm-up's random actions
    noise_scaled_by_weights = False

    uniform: torch.Tensor
    action_mid: torch.Tensor
    action_half: torch.Tensor
    obs_mean: torch.Tensor
    obs_std: torch.Tensor
    delta_mean: torch.Tensor
    delta_std: torch.Tensor
    reward_mean: torch.Tensor
    reward_std: torch.Tensor

    def __init__(
        self, observation_space: gym.Space, action_space: gym.Space, *, ensemble_size: int = 5, hidden_sizes: tuple[int, ...] = (200, 200),
        activation: str = "relu", planner: str = "cem", horizon: int = 25, num_candidates: int = 400, planner_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not (isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1):
            raise ValueError(f"MPCActor needs a one-dimensional Box observation space, got {observation_space}")
        if not (isinstance(action_space, gym.spaces.Box) and np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
            raise ValueError(f"MPCActor needs a bounded Box action space, got {action_space}")
        if planner not in PLANNERS:
            raise ValueError(f"MPCActor: planner {planner!r} is not one of {', '.join(PLANNERS)}")
        if num_candidates % ensemble_size:
            raise ValueError(f"MPCActor: num_candidates = {num_candidates} is not a multiple of ensemble_size = {ensemble_size}")
        self.observation_space, self.action_space = observation_space, action_space
        self.obs_dim = int(observation_space.shape[0])
        self.action_dim = int(np.prod(action_space.shape))
        self.model = DynamicsEnsemble(ensemble_size, self.obs_dim + self.action_dim, self.obs_dim + 1, tuple(hidden_sizes), activation)
        self.ensemble_size = ensemble_size
        self.planner, self.horizon, self.num_candidates = planner, horizon, num_candidates
        self.planner_options = dict(planner_options or {})
        low = torch.as_tensor(action_space.low, dtype=torch.float32).flatten()
        high = torch.as_tensor(action_space.high, dtype=torch.float32).flatten()
        self.register_buffer("action_mid", (high + low) / 2)
        self.register_buffer("action_half", (high - low) / 2)
        self.register_buffer("uniform", torch.tensor(True))  # random actions until start_steps (set by the learner)
        for name, size in (("obs", self.obs_dim), ("delta", self.obs_dim), ("reward", 1)):
            self.register_buffer(f"{name}_mean", torch.zeros(size))
            self.register_buffer(f"{name}_std", torch.ones(size))
        self._warm: torch.Tensor | None = None  # collection's shifted plan per env (see the class doc)

    @classmethod
    def create_factory(cls, observation_space: gym.Space, action_space: gym.Space, **kwargs: Any) -> Callable[..., MPCActor]:
        """A picklable ``factory(device="cpu") -> MPCActor``."""
        return functools.partial(_build, cls, observation_space, action_space, **kwargs)

    # -------------------------------------------------------------------------- model

    def normalize(self, action: torch.Tensor) -> torch.Tensor:
        """The action space's bounds to ``[-1, 1]``."""
        return (action.flatten(1) - self.action_mid) / self.action_half

    def scale(self, action: torch.Tensor) -> torch.Tensor:
        """``[-1, 1]`` to the action space's bounds."""
        return torch.addcmul(self.action_mid, action, self.action_half)

    def model_inputs(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The members' inputs: normalised observations beside ``[-1, 1]`` actions (``[..., obs + action]``)."""
        return torch.cat([(obs - self.obs_mean) / self.obs_std, action], dim=-1)

    def model_targets(self, obs: torch.Tensor, next_obs: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
        """What the members learn to output for a transition, normalised: ``[..., obs + 1]``."""
        delta = (next_obs - obs - self.delta_mean) / self.delta_std
        return torch.cat([delta, ((reward - self.reward_mean) / self.reward_std).unsqueeze(-1)], dim=-1)

    @torch.no_grad()
    def set_statistics(self, obs: torch.Tensor, next_obs: torch.Tensor, reward: torch.Tensor) -> None:
        """Set the normalisation statistics from transitions (``[B, obs]``, ``[B, obs]``, ``[B]``);
        stds below 1e-6 count as 1e-6, so a constant dimension does not divide by zero."""
        for name, values in (("obs", obs), ("delta", next_obs - obs), ("reward", reward.unsqueeze(-1))):
            values = values.double()
            getattr(self, f"{name}_mean").copy_(values.mean(0))
            getattr(self, f"{name}_std").copy_(values.std(0, unbiased=False).clamp_min(1e-6))

    def rollout_return(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The model's summed rewards of ``actions [E, N, H, A]`` from ``obs [E, obs]``: ``[E, N]``.

        Candidate ``n`` goes through member ``n % K`` all along (the rows of one member are one
        block of the batched product)."""
        e, n, h, a = actions.shape
        k = self.ensemble_size
        # [E, N, ...] -> [K, E * N / K, ...], candidate n = j * K + k going to member k
        acts = actions.view(e, n // k, k, h, a).permute(2, 0, 1, 3, 4).reshape(k, e * (n // k), h, a)
        state = obs.view(1, e, 1, -1).expand(k, e, n // k, -1).reshape(k, e * (n // k), -1)
        total = torch.zeros(k, e * (n // k), device=obs.device)
        for t in range(h):
            out = self.model(self.model_inputs(state, acts[:, :, t]))
            state = state + torch.addcmul(self.delta_mean, out[..., :-1], self.delta_std)
            total.add_(out[..., -1], alpha=float(self.reward_std)).add_(float(self.reward_mean))
        return total.view(k, e, n // k).permute(1, 2, 0).reshape(e, n)

    def plan(self, obs: torch.Tensor, warm: torch.Tensor) -> torch.Tensor:
        """The planner's action sequences ``[E, H, A]`` (in ``[-1, 1]``) for ``obs [E, obs]``, from ``warm`` (same shape)."""
        rollout_return = functools.partial(self.rollout_return, obs.flatten(1).float())
        options = self.planner_options
        if self.planner == "cem":
            return cem(rollout_return, warm, num_candidates=self.num_candidates, **options)
        if self.planner == "pddm":
            return pddm(rollout_return, warm, num_candidates=self.num_candidates, **options)
        return random_shooting(rollout_return, warm, num_candidates=self.num_candidates)

    @staticmethod
    def shifted(plan: torch.Tensor) -> torch.Tensor:
        """The plan one step later: its first step dropped, its last repeated (the next step's warm start)."""
        return torch.cat([plan[:, 1:], plan[:, -1:]], dim=1)

    def _zero_plan(self, num_envs: int, device: torch.device) -> torch.Tensor:
        return torch.zeros(num_envs, self.horizon, self.action_dim, device=device)

    # ------------------------------------------------------------------------- acting

    def noise_parts(self) -> tuple[NoisePart, ...]:
        """What :meth:`draw_noise` draws: a uniform random action per step and env (before ``start_steps``)."""
        return (NoisePart("symmetric_uniform", self.action_dim),)

    def exploration_state(self) -> str | None:
        """The warm start is kept per env in each worker's actor (a central server could not keep it)."""
        return "MPC keeps each env's plan in the worker's actor as the next step's warm start"

    def draw_noise(self, num_steps: int, num_envs: int) -> torch.Tensor:
        """The rollout's random actions; a new rollout drops the warm start (see the class doc)."""
        self._warm = None
        return draw_parts(self.noise_parts(), num_steps, num_envs)

    def act(self, obs: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        """Actions for a batch of observations into ``out``: ``noise``'s random ones while warming
        up, else the first step of a plan (candidates drawn from the active random stream)."""
        if bool(self.uniform):
            action = noise
        else:
            warm = self._warm
            if warm is None or warm.shape[0] != obs.shape[0]:
                warm = self._zero_plan(obs.shape[0], obs.device)
            plan = self.plan(obs, warm)
            self._warm = self.shifted(plan)
            action = plan[:, 0]
        out.copy_(self.scale(action).view_as(out))

    def get_action(
        self, obs: torch.Tensor, rhs: Any = None, done: torch.Tensor | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], Any]:
        """A planned action (random while warming up, unless ``deterministic``), the warm start
        carried in ``rhs`` (None: fresh episodes) and reset where ``done`` starts an episode.

        Planning has no exploration noise to switch off: ``deterministic`` (evaluation) plans
        even while the buffer warms up, with the global random stream."""
        e = obs.shape[0]
        if not deterministic and bool(self.uniform):
            return self.scale(torch.rand(e, self.action_dim, device=obs.device).mul_(2).sub_(1)), {}, rhs
        warm = self._zero_plan(e, obs.device) if rhs is None or rhs.shape[0] != e else rhs.clone()
        if done is not None:
            warm[torch.as_tensor(done, dtype=torch.bool, device=obs.device).view(-1)] = 0.0
        plan = self.plan(obs, warm)
        return self.scale(plan[:, 0]), {}, self.shifted(plan)


def _build(cls: Callable[..., nn.Module], observation_space: gym.Space, action_space: gym.Space, device: str | torch.device = "cpu", **kwargs: Any) -> Any:
    return cls(observation_space, action_space, **kwargs).to(device)
