"""What a client of a central inference server needs to know about the policy, without its network.

A collection worker draws its rollout's sampling noise from its own seeded stream, so that what a
seed collects does not depend on where the policy runs (ARCHITECTURE.md, decision 34). Each shipped
actor describes its noise as a few plain draws (:class:`~pytorchrl.agent.actors.noise.NoisePart`:
Gumbel, normal, uniform, random integers) whose shapes follow from the action space alone;
:class:`PolicySpec` records the actor's parts, and :meth:`PolicySpec.draw_noise` draws them with the
actor's own function (:func:`~pytorchrl.agent.actors.noise.draw_parts`), so a worker that holds no
network consumes its stream exactly as a :class:`~pytorchrl.agent.policy.LocalPolicy` would. The one
weight-dependent step, a Gaussian on-policy head's scaling by ``exp(log_std)``, is applied by the
server, which holds the weights (an elementwise product: the same bits either way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from pytorchrl.agent.actors.noise import DescribesNoise, NoisePart, draw_parts

__all__ = ["NoisePart", "PolicySpec", "policy_spec"]


@dataclass(frozen=True)
class PolicySpec:
    """A served policy as its clients see it (picklable and small: it crosses to every worker once).

    :param is_recurrent: the policy keeps a state per env.
    :param scores_while_acting: acting can fill log-probabilities and values too.
    :param state_size: a recurrent policy's state width (0: memoryless).
    :param noise: the parts of a rollout's noise, in the order the actor draws them.
    :param noise_scaled_by_std: the server multiplies the noise by ``exp(log_std)`` of the
        acting weights (a Gaussian on-policy head: the actor draws it scaled).
    :param action_shape: one action's shape.
    :param discrete: actions are integers (``torch.long``), else ``float32``.
    """

    is_recurrent: bool
    scores_while_acting: bool
    state_size: int
    noise: tuple[NoisePart, ...]
    noise_scaled_by_std: bool
    action_shape: tuple[int, ...]
    discrete: bool

    def draw_noise(self, num_steps: int, num_envs: int) -> torch.Tensor:
        """A rollout's noise, one row per step: what the actor's ``draw_noise`` would draw (before
        any scaling by the weights), consuming the active random stream the same way."""
        return draw_parts(self.noise, num_steps, num_envs)

    def empty_actions(self, rows: int, device: torch.device) -> torch.Tensor:
        """Uninitialised action rows, as the storages allocate them."""
        return torch.empty((rows, *self.action_shape), dtype=torch.long if self.discrete else torch.float32, device=device)


def policy_spec(actor: Any) -> PolicySpec:
    """The :class:`PolicySpec` of one of the shipped actors, from the noise it describes
    (``noise_parts``, ``noise_scaled_by_weights``).

    :raises ValueError: for exploration that keeps per-worker state or parameter noise on the
        actor itself (noisy nets, Ornstein-Uhlenbeck noise; the actor's ``exploration_state``): a
        shared server cannot reproduce it; for an actor that does not describe its noise.
    """
    noise, scaled = _noise(actor)
    space = actor.action_space
    return PolicySpec(
        is_recurrent=bool(getattr(actor, "is_recurrent", False)),
        scores_while_acting=bool(getattr(actor, "scores_while_acting", False)),
        state_size=int(getattr(actor, "state_size", 0)),
        noise=noise,
        noise_scaled_by_std=scaled,
        action_shape=_action_shape(space),
        discrete=isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)),
    )


def _noise(actor: object) -> tuple[tuple[NoisePart, ...], bool]:
    """The noise ``actor`` describes: its parts, and whether its ``draw_noise`` scales them by its weights."""
    if not isinstance(actor, DescribesNoise):
        raise ValueError(f"no noise spec for {type(actor).__name__}; central inference takes the shipped actors")
    kept = actor.exploration_state()
    if kept is not None:
        raise ValueError(f"{kept}; a shared inference server cannot")
    return tuple(actor.noise_parts()), bool(actor.noise_scaled_by_weights)


def _action_shape(space: gym.Space) -> tuple[int, ...]:
    if isinstance(space, gym.spaces.Discrete):
        return ()
    if isinstance(space, gym.spaces.MultiDiscrete):
        return (len(space.nvec),)
    assert space.shape is not None, f"unsupported action space {space}"
    return (int(np.prod(space.shape)),)

