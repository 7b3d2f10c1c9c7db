"""Actor-critic network for on-policy algorithms."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from pytorchrl.agent.actors.distributions import ActionHead, CategoricalHead, DiagGaussianHead, legal_actions, make_action_head
from pytorchrl.agent.actors.networks.encoders import EncoderSpec, has_cnn
from pytorchrl.agent.actors.networks.mlp import HIDDEN_GAIN, orthogonal_init
from pytorchrl.agent.actors.networks.recurrent import RecurrentCore, RecurrentSpec, carried_state, run_core
from pytorchrl.agent.actors.noise import NoisePart
from pytorchrl.agent.actors.rnd import RNDSpec, intrinsic_values


class OnPolicyActor(nn.Module):
    """A policy head and a value head over encoder features (shared or separate).

    :param observation_space: any space :class:`EncoderSpec` takes (Box, image, Discrete, Dict).
    :param action_space: Discrete, Box or MultiDiscrete.
    :param encoder: the feature extractor (MLP by default).
    :param shared_network: one encoder for both heads instead of two.
    :param log_std_init: initial log std of Gaussian policies.
    :param ortho_init: orthogonal initialisation with the usual PPO gains.
    :param recurrent: a recurrent core after each encoder (policy and value share one with
        ``shared_network``); its state is the ``rhs`` of the acting and evaluation methods.
    :param action_mask: where the legal-action mask sits in an observation row (a packed Dict's
        ``action_mask`` key); illegal actions then get probability 0 (Discrete actions only).
    :param rnd: Random Network Distillation (:mod:`~pytorchrl.agent.actors.rnd`): its networks,
        and a second value head for the intrinsic returns; :meth:`evaluate_actions` then gives
        both values (``[B, 2]``), acting and scoring the extrinsic one.

    A recurrent actor scores while it acts (one pass per step gives the action, its
    log-probability and the value, and the next state of both cores, which the storage keeps
    per step for chunked minibatches); :meth:`score_sequence` re-runs the recurrence over a
    rollout from a stored state and gives the same numbers.
    """

    is_recurrent = False
    state_size = 0

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        encoder: EncoderSpec = EncoderSpec(),
        shared_network: bool = False,
        log_std_init: float = 0.0,
        ortho_init: bool = True,
        recurrent: RecurrentSpec | None = None,
        action_mask: slice | None = None,
        rnd: RNDSpec | None = None,
    ) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space
        self.policy_net = encoder.build(observation_space)
        self.value_net = None if shared_network else encoder.build(observation_space)
        width = self.policy_net.out_features
        self.policy_core: RecurrentCore | None = None
        self.value_core: RecurrentCore | None = None
        if recurrent is not None:
            self.policy_core = recurrent.build(width)
            self.value_core = None if self.value_net is None else recurrent.build(self.value_net.out_features)
            width = self.policy_core.out_features
            self.is_recurrent = True
            self._policy_state = self.policy_core.state_size
            self.state_size = self._policy_state + (0 if self.value_core is None else self.value_core.state_size)
        self.action_head: ActionHead = make_action_head(width, action_space, log_std_init=log_std_init)
        if action_mask is not None and not isinstance(self.action_head, CategoricalHead):
            raise ValueError(f"action masks need a Discrete action space, got {action_space}")
        self.action_mask = action_mask
        # RND: a second value head (intrinsic returns) and the RND networks, which stay on the learner
        self.rnd = None if rnd is None else rnd.build(observation_space)
        if self.rnd is not None and recurrent is not None:
            raise ValueError("RND takes a memoryless actor (its intrinsic values are scored per observation)")
        self.value_head = nn.Linear(width, 1 if rnd is None else 2)
        if self.rnd is not None:
            self.acting_prefixes = tuple(f"{name}." for name, _ in self.named_children() if name != "rnd")
        if ortho_init:
            orthogonal_init(self.policy_net, HIDDEN_GAIN)
            if self.value_net is not None:
                orthogonal_init(self.value_net, HIDDEN_GAIN)
            orthogonal_init(self.action_head, 0.01)
            orthogonal_init(self.value_head, 1.0)
        self.continuous = isinstance(self.action_head, DiagGaussianHead)
        # a CNN costs the same per row in a batch of 8 as of 4096, so scoring the rollout
        # afterwards would only repeat the forward pass: score while acting instead
        # (and a recurrent actor needs the state of both cores at every step)
        self.scores_while_acting = self.is_recurrent or has_cnn(self)

    @classmethod
    def create_factory(cls, observation_space: gym.Space, action_space: gym.Space, **kwargs: Any) -> Callable[..., OnPolicyActor]:
        """A picklable ``factory(device="cpu") -> OnPolicyActor``."""
        return functools.partial(_build_actor, cls, observation_space, action_space, **kwargs)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Distribution parameters and state values (shape ``[batch]``) of a memoryless actor."""
        features = self.policy_net.forward(obs)
        value_features = features if self.value_net is None else self.value_net.forward(obs)
        return self._params(features, obs), self._value(value_features)

    def _mask(self, obs: torch.Tensor) -> torch.Tensor | None:
        """The legal actions of each observation row (None without masking)."""
        return legal_actions(obs, self.action_mask)

    def _params(self, features: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        if self.action_mask is None:
            return self.action_head.forward(features)
        return cast(CategoricalHead, self.action_head).forward(features, self._mask(obs))

    def _value(self, features: torch.Tensor) -> torch.Tensor:
        """The (extrinsic) value ``[B]``."""
        if self.rnd is None:
            return F.linear(features, self.value_head.weight, self.value_head.bias).squeeze(-1)
        return F.linear(features, self.value_head.weight[:1], self.value_head.bias[:1]).squeeze(-1)

    def _values(self, features: torch.Tensor) -> torch.Tensor:
        """Every value head's output: ``[B]``, or ``[B, 2]`` with RND (extrinsic, intrinsic)."""
        out = F.linear(features, self.value_head.weight, self.value_head.bias)
        return out.squeeze(-1) if self.rnd is None else out

    def intrinsic_value(self, obs: torch.Tensor) -> torch.Tensor:
        """The intrinsic value head's output ``[B]`` (RND)."""
        net = self.policy_net if self.value_net is None else self.value_net
        return intrinsic_values(self.value_head, net.forward(obs))

    # ------------------------------------------------------------- recurrent features

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """The recurrent state of fresh episodes (``[batch, 0]`` for a memoryless actor)."""
        return torch.zeros(batch, self.state_size, device=device)

    def _step_features(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Policy features, value features and the next state of one step (recurrent actors)."""
        assert self.policy_core is not None
        features, policy_state = self.policy_core.step(self.policy_net.forward(obs), state[:, : self._policy_state])
        if self.value_core is None:
            return features, features, policy_state
        assert self.value_net is not None
        value_features, value_state = self.value_core.step(self.value_net.forward(obs), state[:, self._policy_state :])
        return features, value_features, torch.cat([policy_state, value_state], dim=1)

    def _sequence_features(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy and value features over ``obs [T, B, ...]`` from ``state`` (see
        :func:`~pytorchrl.agent.actors.networks.recurrent.run_core`), flattened to ``[T * B, H]``."""
        assert self.policy_core is not None
        features = run_core(self.policy_core, self.policy_net.forward, obs, state[:, : self._policy_state], starts).flatten(0, 1)
        if self.value_core is None:
            return features, features
        assert self.value_net is not None
        return features, run_core(self.value_core, self.value_net.forward, obs, state[:, self._policy_state :], starts).flatten(0, 1)

    def get_action(
        self, obs: torch.Tensor, rhs: Any = None, done: torch.Tensor | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], Any]:
        """Act on a batch of observations.

        :param rhs: a recurrent actor's state (None: fresh episodes); ignored otherwise.
        :param done: bool per row: a new episode starts at this observation (its state is zeroed).
        :return: ``action, {"log_prob", "value"}, rhs`` (the next state; None for a memoryless actor).
        """
        if self.is_recurrent:
            state = carried_state(rhs, done, obs.shape[0], self.state_size, obs.device)
            features, value_features, rhs = self._step_features(obs, state)
            params, value = self._params(features, obs), self._value(value_features)
        else:
            params, value = self.forward(obs)
        action, log_prob = self.action_head.sample(params, deterministic)
        return action, {"log_prob": log_prob, "value": value}, rhs

    def get_value(self, obs: torch.Tensor, rhs: Any = None, done: torch.Tensor | None = None) -> torch.Tensor:
        """State values only (a recurrent actor: of a sequence ``[T, B, ...]`` from state ``rhs``
        with episode starts ``done``, flattened)."""
        if self.is_recurrent:
            assert done is not None, "a recurrent actor's get_value takes sequences with their episode starts"
            return self._value(self._sequence_features(obs, rhs, done)[1])
        net = self.policy_net if self.value_net is None else self.value_net
        return self._value(net.forward(obs))

    def noise_parts(self) -> tuple[NoisePart, ...]:
        """What :meth:`draw_noise` draws, in order: the action head's (before its scaling)."""
        return self.action_head.noise_parts()

    @property
    def noise_scaled_by_weights(self) -> bool:
        """:meth:`draw_noise` scales the drawn parts by ``exp(log_std)`` (a Gaussian head)."""
        return self.action_head.noise_scaled_by_weights

    def exploration_state(self) -> str | None:
        """Exploration kept in the actor beside its drawn noise: none."""
        return None

    def draw_noise(self, num_steps: int, num_envs: int) -> torch.Tensor:
        """The sampling noise of a whole rollout, for :meth:`act` (one row per step)."""
        return self.action_head.draw_noise(num_steps, num_envs)

    def act(self, obs: torch.Tensor, noise: torch.Tensor, out: torch.Tensor) -> None:
        """Sample actions for a batch of observations into ``out``: the collection path.

        Only the policy half runs per step; log-probabilities and values are computed for the
        whole rollout afterwards by :meth:`score`, in large batches (five times cheaper per row).
        """
        features = self.policy_net.forward(obs)
        if self.action_mask is None:
            self.action_head.act(features, noise, out)
        else:
            self.action_head.act_params(self._params(features, obs), noise, out)

    def act_scored(
        self, obs: torch.Tensor, noise: torch.Tensor, out: torch.Tensor, log_prob_out: torch.Tensor, value_out: torch.Tensor,
        given: torch.Tensor | None = None,
    ) -> None:
        """:meth:`act`, also writing the actions' log-probabilities and the observations' values
        (what :meth:`score` would give): one pass of the encoder instead of two.

        :param given: bool per row, or None: rows whose action is already in ``out`` (PPOD's
            replayed ones), kept and scored in the same pass."""
        features = self.policy_net.forward(obs)
        self._act_scored(features, features if self.value_net is None else self.value_net.forward(obs), obs, noise, out, log_prob_out, value_out, given)

    def _act_scored(
        self, features: torch.Tensor, value_features: torch.Tensor, obs: torch.Tensor, noise: torch.Tensor, out: torch.Tensor,
        log_prob_out: torch.Tensor, value_out: torch.Tensor, given: torch.Tensor | None,
    ) -> None:
        params = self._params(features, obs)
        kept = None if given is None else out[given].clone()
        self.action_head.act_params(params, noise, out)
        if kept is not None:
            out[given] = kept
        log_prob_out.copy_(self.action_head.log_prob(params, out))
        value_out.copy_(self._value(value_features))

    def act_recurrent(
        self, obs: torch.Tensor, state: torch.Tensor, noise: torch.Tensor, out: torch.Tensor,
        log_prob_out: torch.Tensor | None = None, value_out: torch.Tensor | None = None, given: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """:meth:`act_scored` of a recurrent actor from ``state`` (already zeroed where an episode
        starts); returns the next state. Without ``log_prob_out`` and ``value_out`` it only acts:
        the caller scores the rollout afterwards (:meth:`score_sequence`)."""
        features, value_features, next_state = self._step_features(obs, state)
        if log_prob_out is None or value_out is None:
            self.action_head.act_params(self._params(features, obs), noise, out)
        else:
            self._act_scored(features, value_features, obs, noise, out, log_prob_out, value_out, given)
        return next_state

    def score(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``log_prob(actions), value`` of a batch of observations (see :meth:`act`)."""
        params, value = self.forward(obs)
        return self.action_head.log_prob(params, actions), value

    def score_sequence(self, obs: torch.Tensor, actions: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`score` of a recurrent actor over ``[T, B]`` steps from ``state`` (episode starts
        ``starts``): the recurrence re-run over a rollout; ``[T * B]`` outputs."""
        features, value_features = self._sequence_features(obs, state, starts)
        flat_obs = obs.reshape(-1, *obs.shape[2:])
        params = self._params(features, flat_obs)
        return self.action_head.log_prob(params, actions.reshape(-1, *actions.shape[2:])), self._value(value_features)

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor, rhs: Any = None, done: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``log_prob(actions), entropy, value`` under the current parameters (for the losses;
        with RND ``value`` is ``[B, 2]``, the extrinsic and the intrinsic one).

        A recurrent actor takes sequences: ``obs [T, B, ...]``, ``actions [T, B, ...]``, the state
        at their start ``rhs [B, S]`` and the episode starts ``done [T, B]``; outputs are ``[T * B]``.
        """
        if self.is_recurrent:
            assert done is not None, "a recurrent actor evaluates sequences with their episode starts"
            features, value_features = self._sequence_features(obs, rhs, done)
            obs, actions = obs.reshape(-1, *obs.shape[2:]), actions.reshape(-1, *actions.shape[2:])
            params, value = self._params(features, obs), self._value(value_features)
        elif self.rnd is None:
            params, value = self.forward(obs)
        else:
            features = self.policy_net.forward(obs)
            params, value = self._params(features, obs), self._values(features if self.value_net is None else self.value_net.forward(obs))
        log_prob, entropy = self.action_head.log_prob_entropy(params, actions)
        return log_prob, entropy, value


def _build_actor(cls: type[OnPolicyActor], observation_space: gym.Space, action_space: gym.Space, device: str | torch.device = "cpu", **kwargs: Any) -> OnPolicyActor:
    return cls(observation_space, action_space, **kwargs).to(device)
