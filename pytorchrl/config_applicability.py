"""Which config keys apply to a run, and which a trained run's checkpoint fixes.

Two checks the field-by-field validation of :mod:`pytorchrl.config` cannot make:

* **Keys that do not apply** (:func:`inapplicable_keys`): a key set to something other than its
  default that this run never reads: ``env.atari.*`` on an env that is not ALE, ``actor.cnn_*``
  on a network without a CNN, the Ornstein-Uhlenbeck keys of Gaussian exploration, a replay
  buffer's size for an on-policy algorithm, HER's ``k`` without relabelling... They are accepted (a config shared between envs is
  legitimate) but :func:`warn_inapplicable` names them all in one warning per run, so that a
  user who meant them learns that they changed nothing. "Set" means *differs from the default*,
  not *written in the YAML*: a resumed run's ``config.yaml`` holds every key, defaults included,
  and must not warn about those. Some rules need the observation space (``actor.encoder: auto``
  builds a CNN only for images), so the check runs where the scheme is built, once per run.
* **Keys a checkpoint fixes** (:data:`TRAINED_KEYS`, :func:`check_trained_keys`): ``evaluate``
  and ``train --resume`` rebuild the run from its ``config.yaml`` plus overrides; an override
  that changes the network's shapes, the algorithm or what the network observes would load the
  weights into a different network (torch's many-line state_dict error) or, worse, run them on
  other inputs with no error at all (``env.normalize_obs``). Those overrides are refused in one
  line naming each key, the trained value and the override.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from pytorchrl.agent.actors.networks.encoders import IMAGE_ENCODERS, image_encoder
from pytorchrl.config import AtariConfig, Config, config_to_dict, from_dict
from pytorchrl.envs.atari import is_atari_id
from pytorchrl.utils.errors import ConfigError
from pytorchrl.utils.spaces import is_image_space

__all__ = ["RESUME_KEYS", "TRAINED_KEYS", "IgnoredConfigKeysWarning", "check_trained_keys", "inapplicable_keys", "warn_inapplicable"]


class IgnoredConfigKeysWarning(UserWarning):
    """Config keys were set that this run does not use (the message names them and why)."""


#: keys ``evaluate`` and ``train --resume`` overrides may not change: they shape the network
#: (its weights would not load), pick the algorithm, or change what the network observes (the
#: weights would load and act on other inputs). The others stay open, e.g. sticky actions
#: (``env.atari.repeat_action_probability``), ``run.eval_deterministic``, time limits
#: (``env.max_episode_steps``), ``env.env_kwargs`` (the spaces must stay the same), the number of
#: envs, the budget and every training hyper-parameter of a resumed run. The algorithm's config
#: adds its own (``AlgorithmConfig.trained_keys``: DQN's head shapes and return support).
TRAINED_KEYS = (
    "env.env_id", "env.normalize_obs", "env.clip_obs",
    "env.atari.frame_skip", "env.atari.screen_size", "env.atari.frame_stack", "env.atari.full_action_space",
    "actor.encoder.type", "actor.encoder.channels", "actor.encoder.features", "actor.hidden_sizes", "actor.activation", "actor.shared_network",
    "actor.recurrent.type", "actor.recurrent.hidden_size", "actor.recurrent.num_layers",
    "algorithm.name",
)
#: keys ``train --resume`` overrides may not change beside :data:`TRAINED_KEYS` (``evaluate``
#: may): the seed (the checkpoint carries on its random streams, so a new seed would change
#: nothing but the ``config.yaml`` that plots and the results table group seeds by) and the
#: replay buffer's shape, which the checkpoint's buffer must fit
RESUME_KEYS = ("run.seed", "storage.capacity", "algorithm.prioritized_replay")

_MISSING = object()


# ---------------------------------------------------------------------------- keys that do not apply


def warn_inapplicable(config: Config, observation_space: gym.Space) -> None:
    """One :class:`IgnoredConfigKeysWarning` naming every key :func:`inapplicable_keys` finds."""
    groups = inapplicable_keys(config, observation_space)
    if groups:
        text = "; ".join(f"{', '.join(keys)} ({why})" for keys, why in groups)
        warnings.warn(f"config keys that do not apply to this run are ignored: {text}", IgnoredConfigKeysWarning, stacklevel=2)


def inapplicable_keys(config: Config, observation_space: gym.Space) -> list[tuple[list[str], str]]:
    """The keys set to something other than their default that this run does not use.

    :param config: the run's config.
    :param observation_space: what the network reads (decides whether ``actor.encoder: auto``
        builds a CNN).
    :return: groups of dotted keys, each with the reason they do not apply (empty: all apply).
    """
    env, scheme = config.env, config.scheme
    found: list[tuple[list[str], str]] = []
    if not is_atari_id(env.env_id):
        found += _group(env.atari, "env.atari", _names(AtariConfig), f"env.env_id {env.env_id!r} is not an ALE (Atari) id")
    if not env.normalize_obs:
        found += _group(env, "env", ["clip_obs"], "env.normalize_obs is false")
    if not env.normalize_reward:
        found += _group(env, "env", ["clip_reward", "reward_gamma"], "env.normalize_reward is false")
    found += _actor_keys(config, observation_space)
    if not config.algorithm.replay:
        found += _group(config.storage, "storage", ["capacity", "checkpoint_buffer"], f"{config.algorithm.name} keeps no replay buffer")
    if config.storage.her.strategy == "none":
        found += _group(config.storage.her, "storage.her", ["k"], "storage.her.strategy is 'none'")
    found += _algorithm_keys(config)
    if not scheme.num_col_workers and not scheme.num_grad_workers and not config.run.eval_parallel:  # everything in this process: Ray is never started
        found += _group(
            scheme.ray, "scheme.ray", ["address", "num_cpus"],
            "scheme.num_col_workers and num_grad_workers are 0 and run.eval_parallel is false: no remote workers, so Ray is not started",
        )
    if config.run.eval_every == 0:
        found += _group(config.run, "run", ["eval_parallel"], "run.eval_every is 0: the one evaluation, at the end, is waited for")
    if not scheme.num_col_workers:
        found += _group(
            scheme, "scheme", ["col_worker_resources", "col_communication", "fraction_workers", "fraction_samples", "max_policy_lag"],
            "scheme.num_col_workers is 0",
        )
    elif scheme.col_communication == "asynchronous":
        found += _group(scheme, "scheme", ["fraction_workers", "fraction_samples"], "scheme.col_communication is 'asynchronous': each rollout is taken as it arrives, none is preempted")
    else:
        found += _group(scheme, "scheme", ["max_policy_lag"], "scheme.col_communication is 'synchronous': every rollout of a round is kept")
    if not scheme.num_grad_workers:
        found += _group(scheme, "scheme", ["grad_worker_resources"], "scheme.num_grad_workers is 0")
    if scheme.inference == "local":
        if scheme.inference_server.num_gpus == 0:  # what null means without servers (runs saved before the null default hold 0.0)
            scheme = dataclasses.replace(scheme, inference_server=dataclasses.replace(scheme.inference_server, num_gpus=None))
        found += _group(scheme, "scheme", ["inference_server"], "scheme.inference is 'local'")
    return found


def _actor_keys(config: Config, observation_space: gym.Space) -> list[tuple[list[str], str]]:
    """The image encoder's options without one (or an option the chosen encoder does not take,
    as a Nature CNN the channels), and the recurrent core's sizes without a core."""
    actor, found = config.actor, []
    encoder = actor.encoder
    cls = _cnn_class(encoder.type, observation_space)
    if cls is None:
        why = (
            "actor.encoder.type is 'mlp'" if encoder.type == "mlp"
            else f"actor.encoder.type {encoder.type!r} builds an MLP: the observations of {config.env.env_id!r} are not images"
        )
        found += _group(encoder, "actor.encoder", ["channels", "features", "precision"], why)
    else:
        name = next(n for n, c in IMAGE_ENCODERS.items() if c is cls)
        others = [key for key in ("channels", "features") if key not in cls.options]
        found += _group(encoder, "actor.encoder", others, f"actor.encoder.type {encoder.type!r} builds {name!r}, which takes {', '.join(cls.options)}")
    if actor.recurrent.type == "none":
        found += _group(actor.recurrent, "actor.recurrent", ["hidden_size", "num_layers"], "actor.recurrent.type is 'none'")
    name = config.algorithm.name
    if config.algorithm.replay:  # the on-policy actors' options
        found += _group(
            actor, "actor", ["log_std_init", "ortho_init"],
            f"they set up the on-policy actors (SAC's gSDE starts from algorithm.sde_log_std_init); {name}'s networks keep PyTorch's default initialisation",
        )
    return found


def _algorithm_keys(config: Config) -> list[tuple[list[str], str]]:
    """The algorithm's keys that its other keys switch off (:meth:`~pytorchrl.config.AlgorithmConfig.switched_off`)."""
    algo = config.algorithm
    rules = algo.switched_off(config)
    found: list[tuple[list[str], str]] = []
    reported: set[str] = set()  # a key two rules switch off is named once, by the first
    for applies, names, why in rules:
        keys = [k for k in _set_keys(algo, "algorithm", names) if k not in reported] if applies else []
        reported.update(keys)
        if keys:
            found.append((keys, why))
    return found


def _cnn_class(kind: str, space: gym.Space) -> Any:
    """The image encoder ``actor.encoder.type`` builds for ``space``, or None (an MLP: ``mlp``,
    or no image in the space); see :meth:`~pytorchrl.agent.actors.networks.encoders.EncoderSpec.extractor`."""
    subs = list(space.spaces.values()) if isinstance(space, gym.spaces.Dict) else [space]
    if not any(is_image_space(s) for s in subs):
        return None
    return image_encoder(kind)


def _names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _group(section: Any, prefix: str, names: Iterable[str], why: str) -> list[tuple[list[str], str]]:
    """``[(keys, why)]`` for the keys among ``names`` set in ``section`` (:func:`_set_keys`); ``[]`` without any."""
    keys = _set_keys(section, prefix, names)
    return [(keys, why)] if keys else []


def _set_keys(section: Any, prefix: str, names: Iterable[str]) -> list[str]:
    """The dotted keys among ``names`` whose value in ``section`` differs from the section class's default."""
    default = type(section)()
    return [f"{prefix}.{name}" for name in names if getattr(section, name) != getattr(default, name)]


# ------------------------------------------------------------------------- keys a checkpoint fixes


def check_trained_keys(trained: Config, raw: dict, overrides: Sequence[str], where: str | Path, *, resume: bool = False) -> Config:
    """The trained run's config with ``overrides`` applied, refused where they change a key of
    :data:`TRAINED_KEYS` (``resume``: or of :data:`RESUME_KEYS`).

    :param trained: the run's own config (its ``config.yaml``, valid).
    :param raw: that ``config.yaml`` as a nested dict, overrides applied.
    :param overrides: the ``key=value`` overrides (named in the message).
    :param where: the ``config.yaml`` (named in the message).
    :raises ConfigError: one line naming each changed key, its trained value and the override;
        or a bad override (an unknown key, a value out of range), blamed on the overrides.
    """
    algorithm = raw.get("algorithm")
    name = algorithm.get("name", trained.algorithm.name) if isinstance(algorithm, dict) else trained.algorithm.name  # first: another algorithm's section would not even validate
    if name != trained.algorithm.name:
        raise ConfigError(_changed_message([("algorithm.name", trained.algorithm.name, name)], overrides, where, resume))
    try:
        config = from_dict(raw)
    except ConfigError as exc:
        raise ConfigError(f"overrides of {where}: {exc}") from None
    changed = []
    for key in (*TRAINED_KEYS, *(f"algorithm.{name}" for name in trained.algorithm.trained_keys), *(RESUME_KEYS if resume else ())):
        before, after = _get(trained, key), _get(config, key)
        if before is not _MISSING and config_to_dict(before) != config_to_dict(after):
            changed.append((key, before, after))
    if changed:
        raise ConfigError(_changed_message(changed, overrides, where, resume))
    return config


def _changed_message(changed: list[tuple[str, Any, Any]], overrides: Sequence[str], where: str | Path, resume: bool) -> str:
    parts = []
    for key, before, after in changed:
        # the override that sets the key, or the whole section holding it (`actor={...}`)
        given = [o for o in overrides if key == o.partition("=")[0] or key.startswith(o.partition("=")[0] + ".")]
        what = f"override {given[-1]!r}" if given else "the overrides"
        parts.append(f"{what} changes {key} to {_show(after)} (trained with {_show(before)})")
    return (
        f"{'; '.join(parts)}, in {where}: a checkpoint fixes its network, algorithm and observations"
        f"{' (a resumed run also its seed and its replay buffer: start a new run for another)' if resume else ''}; only evaluation and "
        "training settings may change (`pytorchrl evaluate --help` lists the keys it fixes)"
    )


def _show(value: Any) -> str:
    """A config value as YAML writes it (``true``, not ``True``); others as their repr."""
    value = config_to_dict(value)
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _get(config: Any, key: str) -> Any:
    for part in key.split("."):
        config = getattr(config, part, _MISSING)
        if config is _MISSING:
            return _MISSING
    return config
