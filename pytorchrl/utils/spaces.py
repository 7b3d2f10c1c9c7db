"""How observations of each space are stored, sent and read back: one array row per observation.

Storages, Ray transport and checkpoints handle one array per observation batch. Spaces map onto
that row as follows (:func:`obs_layout`):

- ``Box``: as it is. Images (``uint8``, 3 dims, see :func:`is_image_space`) stay ``uint8`` from
  the env to the learner, which scales them to float there (a quarter of float32's bytes in
  rollouts, replay and messages); every other Box is float32.
- ``Discrete``: the value as the env gives it (``start`` to ``start + n - 1``), one float32 per
  observation (the encoder one-hots its index).
- ``Dict``: the keys' rows flattened and laid back to back in sorted key order (gymnasium's
  order); ``uint8`` when every key is an image-like ``uint8`` Box, else float32. The encoder
  slices each key back out (:func:`dict_slices`), so a Dict needs no special case in any storage.
  (A ``uint8`` Box that is not an image is stored as float32 like any vector.)

Any other space (``Tuple``, ``Text``, ``Graph``, nested Dicts, ``MultiBinary`` ...) is not
supported: :func:`check_observation_space` names it.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

__all__ = ["ObsLayout", "check_observation_space", "dict_slices", "is_image_space", "obs_layout", "pack_dict"]


@dataclass(frozen=True)
class ObsLayout:
    """The stored row of an observation: ``shape`` and numpy ``dtype`` (``uint8`` or ``float32``)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def is_uint8(self) -> bool:
        return self.dtype == np.uint8


def is_image_space(space: gym.Space) -> bool:
    """A ``uint8`` Box with 3 dimensions (channels first or last): what the CNN encoders take."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


def _leaf_problem(space: gym.Space, where: str) -> str | None:
    if isinstance(space, gym.spaces.Box):
        return None if space.shape else f"{where} is a Box without a shape"
    if isinstance(space, gym.spaces.Discrete):
        return None
    return f"{where} is {space}; supported: Box, Discrete, or a Dict of those"


def check_observation_space(space: gym.Space) -> str | None:
    """None if the observation space is supported, else one sentence naming the part that is not."""
    if isinstance(space, gym.spaces.Dict):
        if not space.spaces:
            return "the observation space is an empty Dict"
        for key, sub in space.spaces.items():
            problem = _leaf_problem(sub, f"Dict key {key!r}")
            if problem is not None:
                return problem
        return None
    return _leaf_problem(space, "the observation space")


def _leaf_size(space: gym.Space) -> int:
    return 1 if isinstance(space, gym.spaces.Discrete) else int(np.prod(space.shape or ()))


def obs_layout(space: gym.Space) -> ObsLayout:
    """The stored row of one observation of ``space`` (see the module doc)."""
    if isinstance(space, gym.spaces.Dict):
        subs = list(space.spaces.values())
        uint8 = all(is_image_space(s) for s in subs)  # else a uint8 vector key would reach an MLP as bytes
        return ObsLayout((sum(_leaf_size(s) for s in subs),), np.dtype(np.uint8 if uint8 else np.float32))
    if isinstance(space, gym.spaces.Discrete):
        return ObsLayout((), np.dtype(np.float32))
    assert space.shape is not None
    return ObsLayout(tuple(space.shape), np.dtype(np.uint8 if is_image_space(space) else np.float32))


def dict_slices(space: gym.spaces.Dict) -> dict[str, slice]:
    """Where each key's flattened values sit in a packed Dict row."""
    out, offset = {}, 0
    for key, sub in space.spaces.items():
        size = _leaf_size(sub)
        out[key] = slice(offset, offset + size)
        offset += size
    return out


def pack_dict(space: gym.spaces.Dict, obs: dict[str, np.ndarray], num_envs: int) -> np.ndarray:
    """A vector env's Dict observation (a dict of ``[num_envs, ...]`` arrays) as packed rows."""
    layout = obs_layout(space)
    return np.concatenate([np.asarray(obs[key]).reshape(num_envs, -1) for key in space.spaces], axis=1, dtype=layout.dtype)


def same_layout(a: gym.Space, b: gym.Space) -> bool:
    """Whether two spaces have one layout: the same kind, shape, number of values and first value
    (``Discrete``), numbers of actions (``MultiDiscrete``) and keys (``Dict``); Box bounds may
    differ. What a network made for ``a`` can take from an env of ``b``."""
    if type(a) is not type(b) or getattr(a, "shape", None) != getattr(b, "shape", None):
        return False
    if isinstance(a, gym.spaces.Discrete):
        return int(a.n) == int(b.n) and int(a.start) == int(b.start)  # type: ignore[attr-defined]
    if isinstance(a, gym.spaces.MultiDiscrete):
        return bool(np.array_equal(a.nvec, b.nvec))  # type: ignore[attr-defined]
    if isinstance(a, gym.spaces.Dict):
        return list(a.spaces) == list(b.spaces) and all(same_layout(a.spaces[k], b.spaces[k]) for k in a.spaces)  # type: ignore[attr-defined]
    return True
