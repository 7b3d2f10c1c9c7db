"""lz4 compression of the tensors that travel between workers (``scheme.compress_data``).

:func:`pack` replaces every tensor inside dicts, lists and tuples by a :class:`Packed` holding
its lz4-compressed bytes; :func:`unpack` undoes it (and leaves anything else alone, so it is
safe to call on data that was never packed). Rollouts of small-integer observations and
sparse rewards shrink several-fold; dense float32 gradients barely do, which is why it is a
switch (``pytorchrl benchmark compression`` measures both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass
class Packed:
    """One compressed tensor."""

    data: bytes
    dtype: str
    shape: tuple[int, ...]


def pack(obj: Any) -> Any:
    """``obj`` with every tensor replaced by its compressed :class:`Packed` form."""
    import lz4.frame

    if isinstance(obj, torch.Tensor):
        array = obj.detach().cpu().contiguous().numpy()
        return Packed(lz4.frame.compress(array.tobytes(), compression_level=0), array.dtype.str, tuple(array.shape))
    if isinstance(obj, dict):
        return {k: pack(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(pack(v) for v in obj)
    return obj


def unpack(obj: Any) -> Any:
    """Undo :func:`pack`; anything without :class:`Packed` parts comes back as it is."""
    if isinstance(obj, Packed):
        import lz4.frame

        array = np.frombuffer(lz4.frame.decompress(obj.data), dtype=np.dtype(obj.dtype)).reshape(obj.shape)
        return torch.from_numpy(array.copy())
    if isinstance(obj, dict):
        return {k: unpack(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(unpack(v) for v in obj)
    return obj
