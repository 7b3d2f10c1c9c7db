"""What :func:`~pytorchrl.config.from_dict` checks: each value against its field's annotation
and metadata (type, range, choices: :func:`build_section`), then the checks across keys
(:func:`check_across_keys`), each failure one :class:`ConfigError` line naming the key, the value
and what is allowed.

Split from :mod:`pytorchrl.config` (the schema: the sections' dataclasses, and reading YAML and
overrides) along that seam; it needs the schema's classes only as annotations, so it imports
nothing of it and the schema imports it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from typing import TYPE_CHECKING, Any

from pytorchrl.utils.errors import ConfigError

if TYPE_CHECKING:
    from pytorchrl.config import Config, SchemeConfig


#: the widest MLP layer and CNN stack a config may ask for (a 65,536-wide square layer is 16 GiB of float32 weights;
#: a 1,024-channel stack makes 5 3x3 convolutions of 9.4M weights each, at the image's full resolution for the first)
MAX_WIDTH, MAX_CHANNELS = 65_536, 1_024
#: the most MLP hidden layers and IMPALA stacks (each stack halves the image: 8 take 84x84 to 1x1); a network's
#: work, unlike its memory, grows with its depth at any width, so a typo of 300,000 layers is refused, not built
MAX_LAYERS, MAX_CNN_STACKS = 64, 8
#: a recurrent core's hidden_size x num_layers (a step costs about gates x hidden_size^2 multiply-adds per layer)
MAX_RECURRENT_UNITS = 8_192


def describe_value(value: Any) -> str:
    """A value's type and (shortened) repr, for messages about what was given instead."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints`` of a config section, resolved once per class (it re-evaluates
    every annotation on each call: most of the time of building a config)."""
    return typing.get_type_hints(cls)


def build_section(cls: type, raw: Any, prefix: str, sections: dict[str, type] | None = None) -> Any:
    """The config dataclass ``cls`` built from the mapping ``raw``, every value checked against its
    field's annotation and metadata (:func:`~pytorchrl.config.param`); nested sections recursively.

    :param prefix: the section's place in a whole config, for messages (``"run."``).
    :param sections: section classes that replace a field's annotation (the algorithm's own).
    """
    where = prefix.rstrip(".") or "config"
    if raw is None:
        raw = {}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if not isinstance(raw, dict):
        example = f"{where}.{next(iter(fields))}" if where != "config" else "run.seed"
        raise ConfigError(f"config key {where!r} = {raw!r} is a section, not a value: set its keys (e.g. {example}=...)")
    for key in raw:
        if key not in fields:
            near = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean {prefix + near[0]!r}?" if near else f"; allowed: {', '.join(fields)}"
            raise ConfigError(f"unknown config key {prefix + str(key)!r}{hint}")
    hints = type_hints(cls)
    values = {}
    for name, f in fields.items():
        if name not in raw:
            continue
        key = f"{prefix}{name}"
        sub = (sections or {}).get(name)
        typ = sub or hints[name]
        if sub is not None or (isinstance(typ, type) and dataclasses.is_dataclass(typ)):
            values[name] = build_section(typ, raw[name], key + ".")
        else:
            values[name] = _check_value(key, raw[name], typ, f.metadata)
    if sections and "algorithm" in sections and "algorithm" not in values:
        values["algorithm"] = sections["algorithm"]()
    return cls(**values)


def _check_value(key: str, value: Any, typ: Any, meta: Any) -> Any:
    value = _coerce(key, value, typ)
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value) and not (math.isinf(value) and meta.get("allow_inf")):
        raise ConfigError(f"config key {key!r} = {value!r} is not a finite number")
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ConfigError(bad_choice(key, value, choices))
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and (value < lo or (meta.get("min_exclusive") and value == lo)):
        rel = ">" if meta.get("min_exclusive") else ">="
        raise ConfigError(f"config key {key!r} = {value!r} is out of range: must be {rel} {lo}")
    if hi is not None and value > hi:
        raise ConfigError(f"config key {key!r} = {value!r} is out of range: must be <= {hi}")
    return value


def _coerce(key: str, value: Any, typ: Any) -> Any:
    """Check ``value`` against the annotation ``typ``; ints are accepted where floats are."""
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(typ)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(key, value, inner[0])
    if origin is tuple:
        (item, _) = typing.get_args(typ)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key {key!r} = {value!r} has the wrong type: expected a list of {item.__name__}")
        return tuple(_coerce(f"{key}[{i}]", v, item) for i, v in enumerate(value))
    if typ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an int of hundreds of digits
            raise ConfigError(f"config key {key!r} = {str(value)[:20]}... ({len(str(value))} digits) is too large for a float") from None
    if typ is float and isinstance(value, str):  # YAML 1.1 reads 3e-4 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if typ is int and isinstance(value, (float, str)) and not isinstance(value, bool):  # 1e6 or 1.0e+6 steps: a whole number
        whole = _whole_number(value)
        if whole is not None:
            return whole
    if typ is dict and isinstance(value, dict):
        return dict(value)
    if isinstance(typ, type) and isinstance(value, typ) and not (typ is int and isinstance(value, bool)):
        return value
    name = getattr(typ, "__name__", str(typ))
    raise ConfigError(f"config key {key!r} = {value!r} has the wrong type: expected {name}")


def _whole_number(value: float | str) -> int | None:
    """``value`` as an int when it is a whole number written as a float (``5e3``, ``1.0e+6``,
    ``2000.0``), else None."""
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if math.isfinite(number) and number.is_integer() else None


def bad_choice(key: str, value: Any, choices: tuple[Any, ...]) -> str:
    """The message for a value outside ``choices``, with the nearest choice when one is near."""
    near = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    allowed = ", ".join(repr(c) for c in choices)
    return f"config key {key!r} = {value!r} is not allowed{hint}; allowed: {allowed}"


def check_across_keys(config: Config) -> None:
    """The checks across keys of a config whose every value passed its own (:func:`build_section`)."""
    check_scheme(config.scheme)
    _check_sequences(config)
    _check_her(config)
    config.algorithm.check(config)
    check_widths("actor.hidden_sizes", config.actor.hidden_sizes, MAX_WIDTH, MAX_LAYERS)
    check_widths("actor.encoder.channels", config.actor.encoder.channels, MAX_CHANNELS, MAX_CNN_STACKS)
    _check_encoder_type(config.actor.encoder.type)
    _check_work(config)


def _check_encoder_type(name: str) -> None:
    """``actor.encoder.type`` against the encoder registry."""
    from pytorchrl.agent.actors.networks.encoders import ENCODERS

    if name not in ENCODERS:
        raise ConfigError(bad_choice("actor.encoder.type", name, ENCODERS))


def check_widths(key: str, sizes: tuple[int, ...] | None, widest: int = MAX_WIDTH, most: int = MAX_LAYERS) -> None:
    """A list of layer widths: at most ``most`` layers, each 1..``widest`` wide."""
    sizes = sizes or ()
    if len(sizes) > most:  # the count, not the list: it may be 300,000 long
        raise ConfigError(f"config key {key!r} has {len(sizes):,} layers: at most {most} are allowed")
    if any(s < 1 or s > widest for s in sizes):
        raise ConfigError(f"config key {key!r} = {list(sizes)!r} is out of range: every width must be in 1..{widest:,}")


#: Ray's own resources, which a worker's section sets by their keys, not under ``resources``
RAY_BUILTIN_RESOURCES = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}


def check_scheme(scheme: SchemeConfig) -> None:
    """The scheme's checks across its keys (:func:`from_dict` runs them, and
    :class:`~pytorchrl.scheme.scheme.Scheme` on a section built in Python)."""
    if scheme.update_execution == "decentralised" and scheme.grad_communication == "asynchronous":
        raise ConfigError(
            "config key 'scheme.update_execution' = 'decentralised' needs scheme.grad_communication "
            "'synchronous' (asynchronous gradients cannot be applied identically on every worker)"
        )
    _check_inference(scheme)
    gpus = [(f"{name}.num_gpus", getattr(scheme, name).num_gpus) for name in ("col_worker_resources", "grad_worker_resources")]
    for key, amount in [*gpus, ("inference_server.num_gpus", scheme.inference_server.num_gpus)]:
        if amount is not None and amount > 1 and not float(amount).is_integer():
            raise ConfigError(
                f"config key 'scheme.{key}' = {amount!r}: Ray gives a worker a fraction of one GPU or whole GPUs; "
                f"allowed: a value in [0, 1] or a whole number (e.g. {math.floor(amount)} or {math.ceil(amount)})"
            )
    for name in ("col_worker_resources", "grad_worker_resources"):
        for resource, amount in getattr(scheme, name).resources.items():
            if resource in RAY_BUILTIN_RESOURCES:
                raise ConfigError(
                    f"config key 'scheme.{name}.resources' = {{{resource!r}: {amount!r}}}: {resource!r} is not a custom resource; "
                    f"set it with scheme.{name}.{RAY_BUILTIN_RESOURCES[resource]}"
                )
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) or amount < 0:
                raise ConfigError(
                    f"config key 'scheme.{name}.resources' = {{{resource!r}: {amount!r}}}: a custom Ray resource is an amount >= 0 per worker, e.g. {{{resource!r}: 1}}"
                )


def _check_inference(scheme: SchemeConfig) -> None:
    """Central inference serves remote collection workers of a local gradient worker."""
    if scheme.inference != "central":
        return
    servers = scheme.inference_server.num_servers
    if scheme.num_col_workers == 0:
        raise ConfigError(
            "config key 'scheme.inference' = 'central' needs remote collection workers: scheme.num_col_workers is 0 "
            "(set it >= 1, or use inference 'local')"
        )
    if servers > scheme.num_col_workers:
        raise ConfigError(
            f"config key 'scheme.inference_server.num_servers' = {servers} is more than scheme.num_col_workers = "
            f"{scheme.num_col_workers}: a server would serve no worker; allowed: 1..{scheme.num_col_workers}"
        )
    if scheme.num_grad_workers > 0:
        raise ConfigError(
            f"config key 'scheme.inference' = 'central' with scheme.num_grad_workers = {scheme.num_grad_workers}: central inference "
            "serves the collection workers of one learner; set scheme.num_grad_workers = 0 (or use inference 'local')"
        )
    sync_every, lag = scheme.inference_server.weight_sync_every, scheme.max_policy_lag
    if scheme.col_communication == "asynchronous" and lag is not None and lag < sync_every - 1:
        # the servers may stay sync_every - 1 versions behind while collect() waits: every rollout dropped, none kept
        raise ConfigError(
            f"config key 'scheme.max_policy_lag' = {lag} is below scheme.inference_server.weight_sync_every - 1 = {sync_every - 1}: "
            f"the servers may act that many versions behind, so every rollout would be dropped; allowed: >= {sync_every - 1} (or null)"
        )


def _check_sequences(config: Config) -> None:
    """Sequences need a recurrent core (or an algorithm that unrolls without one, V-trace), and
    only a core warms up over a burn-in; the algorithm's :meth:`AlgorithmConfig.check` checks the rest."""
    if config.actor.recurrent.type != "none":
        return
    from pytorchrl.agent.algorithms import ALGORITHMS

    length, burn_in = config.storage.sequence_length, config.storage.burn_in
    if length is not None and not config.algorithm.unrolls:
        unrolling = "/".join(name.upper() for name, cls in ALGORITHMS.items() if cls.config_class.unrolls)
        raise ConfigError(
            f"config key 'storage.sequence_length' = {length} is for recurrent policies (and {unrolling}'s V-trace unrolls); "
            "set actor.recurrent.type to 'gru' or 'lstm'"
        )
    if burn_in:
        raise ConfigError(f"config key 'storage.burn_in' = {burn_in} is for recurrent policies; set actor.recurrent.type to 'gru' or 'lstm'")


def _check_her(config: Config) -> None:
    """Hindsight relabelling happens in a replay buffer; the replay family checks the rest
    (:meth:`~pytorchrl.agent.algorithms.families.ReplayConfig.check`), the env's spaces are checked
    where the storage is wired."""
    strategy = config.storage.her.strategy
    if strategy == "none" or config.algorithm.replay:
        return
    from pytorchrl.agent.algorithms import ALGORITHMS

    takes = ", ".join(name for name, cls in ALGORITHMS.items() if cls.config_class.replay)
    raise ConfigError(
        f"config key 'storage.her.strategy' = {strategy!r} relabels replayed transitions: algorithm {config.algorithm.name!r} keeps no replay "
        f"buffer; these do: {takes}"
    )


def round_env_steps(config: Config) -> tuple[str, int]:
    """The env steps one round of collection makes, and the product they come from (for messages):
    ``env.num_envs x steps x max(1, scheme.num_col_workers)``, where steps is ``storage.num_steps``
    (on-policy rollouts) or ``algorithm.update_every`` (replay algorithms, when set)."""
    workers = max(1, config.scheme.num_col_workers)
    steps_key, steps = config.algorithm.steps_per_round(config)
    total = config.env.num_envs * steps * workers
    return f"env.num_envs x {steps_key} x max(1, scheme.num_col_workers) = {config.env.num_envs} x {steps} x {workers} = {total:,}", total


def _check_work(config: Config) -> None:
    """Limits on a run's work, which the memory floor does not bound: a recurrent core's size, and
    one round of collection against the whole budget (65,536 CartPole envs x 32 steps is 21 times
    ``run.target_steps``: the progress line shows 2097%, and a round cannot be cut short)."""
    core = config.actor.recurrent
    if core.type != "none" and core.hidden_size * core.num_layers > MAX_RECURRENT_UNITS:
        raise ConfigError(
            f"config key 'actor.recurrent.hidden_size' = {core.hidden_size} x actor.recurrent.num_layers = {core.num_layers} is "
            f"{core.hidden_size * core.num_layers:,} recurrent units: at most {MAX_RECURRENT_UNITS:,} are allowed; lower either"
        )
    product, total = round_env_steps(config)
    if total > config.run.target_steps:
        raise ConfigError(
            f"config keys {product} env steps in one round, more than run.target_steps = {config.run.target_steps:,} (the whole budget); "
            "lower them or raise run.target_steps"
        )
