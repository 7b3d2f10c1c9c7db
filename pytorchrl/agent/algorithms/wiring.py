"""How an algorithm declares what it runs on: the seam between the config and the scheme.

Every algorithm class carries its own wiring next to its code (STYLE 4): ``config_class``
(its frozen config dataclass, defined in the same module), ``action_spaces`` (what it can act
in) and the classmethod ``wire(config, observation_space, action_space) -> Wiring``, which
builds the picklable factories of its actor, storage and itself from the config sections (the
on-policy and replay families' wirings are in :mod:`~pytorchrl.agent.algorithms.families`).
``build_scheme`` looks the class up in :data:`~pytorchrl.agent.algorithms.ALGORITHMS` by
``algorithm.name`` and calls :func:`wire`: it names no algorithm, and adding one adds a module
and a registry line (the recipe is in ARCHITECTURE.md).

Networks come from one builder, :class:`~pytorchrl.agent.actors.networks.EncoderSpec`, made
here from the ``actor`` section (:func:`encoder_spec`) and checked against the observation
space before any worker starts (:func:`check_encoder`); a recurrent core after it from
:func:`recurrent_spec`. An algorithm says whether it takes a recurrent core
(``Algorithm.recurrent``) and action masks (``Algorithm.action_masks``); :func:`wire` refuses
the others in one line.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from pytorchrl.agent.actors.networks import encoders
from pytorchrl.agent.actors.networks.encoders import EncoderError, EncoderSpec
from pytorchrl.agent.actors.networks.recurrent import RecurrentSpec
from pytorchrl.envs.masking import check_mask_space, mask_slice
from pytorchrl.utils.errors import InputError
from pytorchrl.utils.spaces import check_observation_space, obs_layout

if TYPE_CHECKING:
    from pytorchrl.config import ActorConfig, Config


@dataclass(frozen=True)
class Wiring:
    """The picklable factories a scheme is built from.

    :param actor: ``actor(device) -> actor``.
    :param storage: ``storage(device=...) -> storage``.
    :param algorithm: ``algorithm(actor, device) -> Algorithm``.
    """

    actor: Callable[..., Any]
    storage: Callable[..., Any]
    algorithm: Callable[..., Any]


def wire(algorithm_class: Any, config: Config, observation_space: gym.Space, action_space: gym.Space) -> Wiring:
    """Check the spaces against what ``algorithm_class`` and the encoder take, then let the
    class build its factories.

    :raises InputError: one line naming the unsupported space or the encoder key.
    """
    name, env_id = config.algorithm.name, config.env.env_id
    problem = algorithm_class.check_action_space(action_space)
    if problem is not None:
        raise InputError(f"algorithm.name = {name!r} needs {problem}; env.env_id = {env_id!r} has {action_space}")
    problem = check_observation_space(observation_space)
    if problem is not None:
        raise InputError(f"env.env_id = {env_id!r}: {problem}")
    check_encoder(encoder_spec(config.actor), observation_space, env_id)
    if recurrent_spec(config.actor) is not None and not algorithm_class.recurrent:
        takes = ", ".join(n for n, c in _registry().items() if c.recurrent)
        raise InputError(f"config key 'actor.recurrent.type' = {config.actor.recurrent.type!r}: algorithm {name!r} cannot take a recurrent core; these can: {takes}")
    source = config.env.action_mask
    if source != "none":
        if not algorithm_class.action_masks:
            takes = ", ".join(n for n, c in _registry().items() if c.action_masks)
            raise InputError(f"config key 'env.action_mask' = {source!r}: algorithm {name!r} does not take action masks; these do: {takes}")
        problem = check_mask_space(observation_space, action_space, source)
        if problem is not None:
            raise InputError(f"config key 'env.action_mask' = {source!r} on env.env_id = {env_id!r}: {problem}")
    return algorithm_class.wire(config, observation_space, action_space)


def _registry() -> dict[str, Any]:
    from pytorchrl.agent.algorithms import ALGORITHMS

    return ALGORITHMS


def recurrent_spec(actor: ActorConfig) -> RecurrentSpec | None:
    """The ``actor.recurrent`` section as a :class:`RecurrentSpec` (None: no core)."""
    rec = actor.recurrent
    return None if rec.type == "none" else RecurrentSpec(kind=rec.type, hidden_size=rec.hidden_size, num_layers=rec.num_layers)


def recurrent_state_size(actor: ActorConfig, cores: int = 1) -> int:
    """Width of the flat recurrent state of ``cores`` cores of the ``actor`` section (0: none)."""
    spec = recurrent_spec(actor)
    return 0 if spec is None else spec.state_size * cores


def action_mask_slice(config: Config, observation_space: gym.Space) -> slice | None:
    """Where the actors find the legal-action mask in an observation row (None: no masking)."""
    return None if config.env.action_mask == "none" else mask_slice(observation_space)


def encoder_spec(actor: ActorConfig) -> EncoderSpec:
    """The ``actor`` section's encoder keys as an :class:`EncoderSpec`."""
    encoder = actor.encoder
    return EncoderSpec(
        kind=encoder.type, hidden_sizes=tuple(actor.hidden_sizes), activation=actor.activation,
        cnn_channels=None if encoder.channels is None else tuple(encoder.channels), cnn_features=encoder.features,
        cnn_precision=encoder.precision, mlp_precision=actor.mlp_precision,
    )


def check_encoder(spec: EncoderSpec, observation_space: gym.Space, env_id: str) -> None:
    """Build the encoder once in the driver: an impossible one is one line here, not a
    traceback in every worker; an MLP over a large image, or a bfloat16 CNN on a CPU that
    emulates bfloat16, warns once here."""
    try:
        encoder = spec.build(observation_space)
    except EncoderError as exc:
        raise InputError(f"actor.encoder.type = {spec.kind!r} on env.env_id = {env_id!r}: {exc}") from None
    for problem in spec.large_mlp_inputs(observation_space):
        warnings.warn(f"actor.encoder.type = {spec.kind!r}: {problem}", stacklevel=3)
    slow = []  # bfloat16 keys with layers to compute
    if spec.cnn_precision == "bfloat16" and encoders.has_cnn(encoder):
        slow.append("actor.encoder.precision")
    if spec.mlp_precision == "bfloat16" and spec.hidden_sizes:
        slow.append("actor.mlp_precision")
    if slow and not encoders.cpu_has_bf16():
        warnings.warn(f"{' and '.join(slow)} = 'bfloat16': {encoders.SLOW_BF16_CPU}", stacklevel=3)


def rollout_shapes(
    config: Config, observation_space: gym.Space, action_space: gym.Space, num_steps: int, *, state_size: int = 0, state_stride: int | None = None
) -> dict[str, Any]:
    """The :class:`~pytorchrl.agent.storages.on_policy.rollout.RolloutStorage` arguments of a
    rollout of ``num_steps`` steps of every env (observations stored as :func:`obs_layout` says;
    a recurrent actor's state of ``state_size``, sent every ``state_stride`` steps)."""
    layout = obs_layout(observation_space)
    return {
        "state_size": state_size,
        "state_stride": state_stride,
        "num_steps": num_steps,
        "num_envs": config.env.num_envs,
        "obs_shape": layout.shape,
        "obs_dtype": layout.dtype.name,
        "action_shape": () if isinstance(action_space, gym.spaces.Discrete) else action_space.shape,
        "discrete": isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)),
    }


def num_collectors(config: Config) -> int:
    """Collection workers that act in the whole scheme (Ape-X keys exploration by them)."""
    return max(config.scheme.num_col_workers, 1) * max(config.scheme.num_grad_workers, 1)
