"""How tensors travel between workers: as numpy arrays, optionally lz4-compressed.

:func:`pack` replaces every tensor inside dicts, lists and tuples by a :class:`Wire` holding it
as a numpy array (which Ray serialises out of band and reads back from its object store without
a copy; pickled torch tensors cost several times more per call), or, with ``compress``
(``scheme.compress_data``), by a :class:`Packed` holding its lz4-compressed bytes. :func:`unpack`
undoes either, and leaves anything else alone, so it is safe on data that was never packed.
Rollouts with small-integer observations and sparse rewards shrink several-fold; dense float32
gradients barely do, which is why compression is a switch (``pytorchrl benchmark compression``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass
class Wire:
    """One tensor as a numpy array."""

    array: np.ndarray


@dataclass
class Packed:
    """One compressed tensor."""

    data: bytes
    dtype: str
    shape: tuple[int, ...]


def pack(obj: Any, compress: bool = True) -> Any:
    """``obj`` with every tensor replaced by a :class:`Packed` (``compress``) or a :class:`Wire`."""
    if isinstance(obj, torch.Tensor):
        if obj.dtype == torch.bfloat16:  # numpy has no bfloat16: let Ray pickle it
            return obj
        array = obj.detach().cpu().contiguous().numpy()
        if not compress:
            return Wire(array)
        import lz4.frame

        return Packed(lz4.frame.compress(array.tobytes(), compression_level=0), array.dtype.str, tuple(array.shape))
    if isinstance(obj, dict):
        return {k: pack(v, compress) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(pack(v, compress) for v in obj)
    return obj


def unpack(obj: Any) -> Any:
    """Undo :func:`pack`; anything without packed parts comes back as it is."""
    if isinstance(obj, Wire):
        return torch.from_numpy(obj.array.copy())  # out of Ray's read-only object store
    if isinstance(obj, Packed):
        import lz4.frame

        array = np.frombuffer(lz4.frame.decompress(obj.data), dtype=np.dtype(obj.dtype)).reshape(obj.shape)
        return torch.from_numpy(array.copy())
    if isinstance(obj, dict):
        return {k: unpack(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(unpack(v) for v in obj)
    return obj
