"""Env state as plain data, for checkpoints that resume an episode where it was.

A gymnasium env keeps its state in instance attributes: CartPole's ``state`` array, the time
limit's ``_elapsed_steps``, the vector env's autoreset flags, the random generator. A
:func:`snapshot` reads the plain-data attributes of every layer of an env (vector env, each
sub-env and each wrapper around it): numbers, strings, numpy arrays (tensors once in a checkpoint:
:func:`~pytorchrl.utils.checkpoint.save_checkpoint` turns them into tensors),
numpy generators (their bit-generator state) and containers of those. Everything else (spaces,
functions, renderers, simulator handles) is left out, so a snapshot is always safe to load with
``torch.load(weights_only=True)``: never a pickled object.

:func:`restore` writes the attributes back into a freshly built env of the same config. It is
exact for envs whose whole state is plain data (the classic-control and toy-text envs, and
pure-Python envs in general); an env with state elsewhere (a C simulator such as Box2D's or
MuJoCo's, a subprocess) is not captured and resumes from a reset instead (:func:`snapshot_gaps`,
:meth:`VecEnv.state_dict`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pytorchrl.utils.arrays import as_numpy, is_tensor

_GENERATOR = "__numpy_generator__"
_SKIP = object()
#: attributes that hold the next layers (walked on their own) rather than state
_LAYER_KEYS = ("env", "envs")


def snapshot(env: Any) -> dict[str, Any]:
    """The plain-data state of ``env``: its layers' attributes, and its sub-envs' (vector envs)."""
    state: dict[str, Any] = {"layers": [_attributes(layer) for layer in _layers(env)]}
    sub_envs = vars(env).get("envs")
    if isinstance(sub_envs, list):
        state["envs"] = [[_attributes(layer) for layer in _layers(e)] for e in sub_envs]
    return state


def snapshot_gaps(env: Any) -> list[str]:
    """The state a :func:`snapshot` of ``env`` would leave out: attributes of its layers (and of
    its sub-envs' layers) that are neither plain data nor settings (spaces, specs, enums,
    functions), e.g. a Box2D world, MuJoCo's ``MjData``. An env with any is not snapshotted: a
    restore would write the plain attributes over a simulator it does not restore (LunarLander
    then failed its first step), so it resumes from a reset instead. Named ``Layer.attribute``."""
    envs = [env, *(e for e in (vars(env).get("envs") or []) if hasattr(e, "__dict__"))] if hasattr(env, "__dict__") else []
    return [
        f"{type(layer).__name__}.{key}"
        for e in envs for layer in _layers(e) for key, value in vars(layer).items()
        if key not in _LAYER_KEYS and not _harmless(value)
    ]


def _harmless(value: Any) -> bool:
    """Plain data, or a setting rather than state."""
    import enum

    import gymnasium as gym
    from gymnasium.envs.registration import EnvSpec

    if _plain(value) is not _SKIP or isinstance(value, (gym.Space, EnvSpec, enum.Enum)):
        return True
    if callable(value) and not isinstance(value, gym.Env):  # env makers, functions
        return True
    if isinstance(value, (list, tuple)):
        return all(_harmless(v) for v in value)
    if isinstance(value, dict):
        return all(_harmless(v) for v in value.values())
    return False


def snapshot_fits(env: Any, state: dict[str, Any]) -> bool:
    """Whether ``env`` is made of the same layers as the :func:`snapshot` ``state`` (its sub-envs
    too): what :func:`restore` needs, asked before it writes anything. Another
    ``env.restart_failed_envs``, say, wraps each env in one more layer, or makes a native
    vector env a ``SyncVectorEnv``."""
    return _misfit(env, state) is None


def restore(env: Any, state: dict[str, Any]) -> None:
    """Write a :func:`snapshot` back into ``env`` (built from the same config; :func:`snapshot_fits`).

    :raises ValueError: when ``env`` is not made of the same layers as the snapshot's (nothing
        is written then).
    """
    misfit = _misfit(env, state)
    if misfit is not None:
        raise ValueError(misfit)
    _restore_layers(_layers(env), state["layers"])
    for e, layers in zip(vars(env).get("envs") or [], state.get("envs") or []):
        _restore_layers(_layers(e), layers)


def _misfit(env: Any, state: dict[str, Any]) -> str | None:
    """How ``env``'s layers (and its sub-envs') differ from the snapshot's (None: they fit)."""

    def differ(layers: list[Any], entries: list[dict[str, Any]]) -> str | None:
        names, want = [type(layer).__name__ for layer in layers], [entry["type"] for entry in entries]
        return None if names == want else f"env snapshot of layers {want} does not fit an env of layers {names}"

    sub_envs, saved = vars(env).get("envs"), state.get("envs")
    outer = differ(_layers(env), state["layers"])
    if outer is not None or saved is None:
        return outer
    if not isinstance(sub_envs, list) or len(sub_envs) != len(saved):
        return f"env snapshot holds {len(saved)} sub-envs, the env has {len(sub_envs or [])}"
    return next((m for m in (differ(_layers(e), layers) for e, layers in zip(sub_envs, saved)) if m is not None), None)


def _layers(env: Any) -> list[Any]:
    """``env`` and the envs it wraps, outermost first."""
    out: list[Any] = []
    while env is not None and hasattr(env, "__dict__") and all(env is not o for o in out):
        out.append(env)
        env = vars(env).get("env")
    return out


def _attributes(obj: Any) -> dict[str, Any]:
    out = {}
    for key, value in vars(obj).items():
        if key in _LAYER_KEYS:
            continue
        plain = _plain(value)
        if plain is not _SKIP:
            out[key] = plain
    return {"type": type(obj).__name__, "attributes": out}


def _plain(value: Any) -> Any:
    """``value`` as checkpoint-safe plain data, or ``_SKIP``."""
    if isinstance(value, np.generic):  # before the Python types: np.float64 is a float
        return value.item() if value.dtype.kind in "biuf" else _SKIP
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        return value.copy() if value.dtype.kind in "biuf" and value.dtype != np.uint16 else _SKIP
    if isinstance(value, np.random.Generator):
        return {_GENERATOR: _plain(value.bit_generator.state)}
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return _SKIP if any(v is _SKIP for v in items) else type(value)(items)
    if isinstance(value, dict) and all(isinstance(k, (str, int)) for k in value):
        entries = {k: _plain(v) for k, v in value.items()}
        return _SKIP if any(v is _SKIP for v in entries.values()) else entries
    return _SKIP


def _restore_layers(layers: list[Any], saved: list[dict[str, Any]]) -> None:
    for layer, entry in zip(layers, saved):
        for key, value in entry["attributes"].items():
            setattr(layer, key, _unplain(value, getattr(layer, key, None)))


def _unplain(value: Any, current: Any) -> Any:
    """Undo :func:`_plain`, reusing ``current`` (the attribute's value now) for its types."""
    if isinstance(value, dict) and _GENERATOR in value:
        generator = current if isinstance(current, np.random.Generator) else np.random.Generator(np.random.PCG64())
        generator.bit_generator.state = _unplain(value[_GENERATOR], None)
        return generator
    if isinstance(value, np.ndarray) or is_tensor(value):  # numpy in memory, a tensor from a checkpoint
        return as_numpy(value).copy()
    if isinstance(value, (list, tuple)):
        same = isinstance(current, (list, tuple)) and len(current) == len(value)
        return type(value)(_unplain(v, current[i] if same else None) for i, v in enumerate(value))
    if isinstance(value, dict):
        now: dict = current if isinstance(current, dict) else {}
        return {k: _unplain(v, now.get(k)) for k, v in value.items()}
    if isinstance(current, np.generic):  # a numpy scalar saved as a Python number
        return type(current)(value)
    return value
