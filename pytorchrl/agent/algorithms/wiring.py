"""How an algorithm declares what it runs on: the seam between the config and the scheme.

Every algorithm class carries its own wiring next to its code (STYLE 4): ``config_class``
(its frozen config dataclass), ``action_spaces`` (what it can act in) and the classmethod
``wire(config, observation_space, action_space) -> Wiring``, which builds the picklable
factories of its actor, storage and itself from the config sections. ``build_scheme`` looks the
class up in :data:`~pytorchrl.agent.algorithms.ALGORITHMS` by ``algorithm.name`` and calls
:func:`wire`: it names no algorithm, and adding one adds a module and a registry line.

Networks come from one builder, :class:`~pytorchrl.agent.actors.networks.EncoderSpec`, made
here from the ``actor`` section (:func:`encoder_spec`) and checked against the observation
space before any worker starts (:func:`check_encoder`); a recurrent core after it from
:func:`recurrent_spec`. An algorithm says whether it takes a recurrent core
(``Algorithm.recurrent``) and action masks (``Algorithm.action_masks``); :func:`wire` refuses
the others in one line.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

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
    return EncoderSpec(
        kind=actor.encoder, hidden_sizes=tuple(actor.hidden_sizes), activation=actor.activation,
        cnn_channels=None if actor.cnn_channels is None else tuple(actor.cnn_channels), cnn_features=actor.cnn_features,
        cnn_precision=actor.cnn_precision, mlp_precision=actor.mlp_precision,
    )


def check_encoder(spec: EncoderSpec, observation_space: gym.Space, env_id: str) -> None:
    """Build the encoder once in the driver: an impossible one is one line here, not a
    traceback in every worker; an MLP over a large image, or a bfloat16 CNN on a CPU that
    emulates bfloat16, warns once here."""
    try:
        encoder = spec.build(observation_space)
    except EncoderError as exc:
        raise InputError(f"actor.encoder = {spec.kind!r} on env.env_id = {env_id!r}: {exc}") from None
    for problem in spec.large_mlp_inputs(observation_space):
        warnings.warn(f"actor.encoder = {spec.kind!r}: {problem}", stacklevel=3)
    slow = []  # bfloat16 keys with layers to compute
    if spec.cnn_precision == "bfloat16" and encoders.has_cnn(encoder):
        slow.append("actor.cnn_precision")
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


def algorithm_kwargs(config: Any, *drop: str) -> dict[str, Any]:
    """The algorithm section as constructor keywords, without ``name`` and ``drop``."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k != "name" and k not in drop}


def num_collectors(config: Config) -> int:
    """Collection workers that act in the whole scheme (Ape-X keys exploration by them)."""
    return max(config.scheme.num_col_workers, 1) * max(config.scheme.num_grad_workers, 1)


def actor_critic_wiring(algorithm_class: Any, config: Config, observation_space: gym.Space, action_space: gym.Space, *, vtrace: bool = False) -> Wiring:
    """The on-policy wiring: an :class:`~pytorchrl.agent.actors.on_policy.OnPolicyActor` and a
    rollout buffer that computes GAE (``gamma`` and ``gae_lambda`` go to it, the storage owns the
    math), or with ``vtrace`` a time-major buffer whose targets the algorithm computes itself."""
    from pytorchrl.agent.actors.on_policy import OnPolicyActor
    from pytorchrl.agent.storages.on_policy.gae_buffer import GAEBuffer
    from pytorchrl.agent.storages.on_policy.vtrace_buffer import VTraceBuffer

    actor, algo = config.actor, cast(Any, config.algorithm)
    actor_factory = OnPolicyActor.create_factory(
        observation_space, action_space, encoder=encoder_spec(actor), shared_network=actor.shared_network,
        log_std_init=actor.log_std_init, ortho_init=actor.ortho_init, recurrent=recurrent_spec(actor),
        action_mask=action_mask_slice(config, observation_space),
    )
    state_size = recurrent_state_size(actor, 1 if actor.shared_network else 2)
    rollout = rollout_shapes(
        config, observation_space, action_space, config.storage.num_steps, state_size=state_size, state_stride=config.storage.sequence_length
    )
    if vtrace:
        storage_factory = VTraceBuffer.create_factory(gamma=algo.gamma, **rollout)
        algo_factory = algorithm_class.create_factory(**algorithm_kwargs(algo))
    else:
        storage_factory = GAEBuffer.create_factory(gamma=algo.gamma, gae_lambda=algo.gae_lambda, **rollout)
        algo_factory = algorithm_class.create_factory(**algorithm_kwargs(algo, "gamma", "gae_lambda"))
    return Wiring(actor=actor_factory, storage=storage_factory, algorithm=algo_factory)


def replay_storage_factory(config: Config, observation_space: gym.Space, action_space: gym.Space, *, actor_priorities: bool = False) -> Callable[..., Any]:
    """The replay storage of a replay algorithm's config: rollouts of ``update_every`` steps in,
    replayed minibatches out; with a recurrent core (``actor.recurrent``), rollouts carry the
    acting state of every step and overlapping windows of ``storage.sequence_length`` come out
    (R2D2; returns are then the algorithm's, computed within each window)."""
    from pytorchrl.agent.storages.off_policy.replay_storage import ReplayStorage
    from pytorchrl.agent.storages.off_policy.sequence_replay import SequenceReplayStorage

    algo: Any = config.algorithm
    rollout = rollout_shapes(config, observation_space, action_space, algo.update_every or config.storage.num_steps, state_size=recurrent_state_size(config.actor))
    common = {
        "capacity": config.storage.capacity, "prioritized": algo.prioritized_replay, "alpha": algo.per_alpha, "beta0": algo.per_beta0,
        "updates_per_step": algo.updates_per_step, "start_steps": algo.start_steps, "checkpoint_buffer": config.storage.checkpoint_buffer,
    }
    if rollout["state_size"]:
        rollout.pop("state_stride")  # every step's state: any step may start a window
        return SequenceReplayStorage.create_factory(sequence_length=config.storage.sequence_length, **common, **rollout)
    return ReplayStorage.create_factory(
        n_step=algo.n_step, gamma=algo.gamma, actor_priorities=actor_priorities and algo.prioritized_replay, **common, **rollout
    )
