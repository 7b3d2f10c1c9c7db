"""How tensors travel between workers: all of a message's tensors (and numeric numpy arrays,
which come back as arrays) in one buffer, optionally lz4-compressed.

:func:`pack` turns an object (dicts, lists and tuples holding tensors and plain data, e.g. a
rollout and its info, or a state dict) into a :class:`Wire`: the object's skeleton, with every
tensor replaced by a :class:`_Slot`, and one contiguous byte buffer holding every tensor's bytes
(lz4-compressed with ``compress``, i.e. ``scheme.compress_data``). Ray pays a fixed cost per
serialised buffer: one buffer per message instead of one per tensor saves ~1 ms a round trip on
the reference machine, and pickled torch tensors would cost several times more.
:func:`unpack` undoes it with one copy (out of Ray's read-only buffers), and leaves anything else
alone, so it is safe on data that was never packed. Rollouts with small-integer observations and
sparse rewards shrink several-fold under lz4; dense float32 gradients barely do, which is why
compression is a switch (``pytorchrl benchmark compression``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytorchrl.utils.arrays import is_tensor

#: tensors start at multiples of this many bytes in the buffer, so each can be viewed in place
_ALIGN = 16


class _Slot:
    """Where a tensor or a numpy array was: its place in the buffer, dtype (a torch dtype, or a
    numpy one for an array: it comes back an array, in a process that may hold no torch) and shape."""

    __slots__ = ("dtype", "nbytes", "offset", "shape")

    def __init__(self, offset: int, nbytes: int, dtype: Any, shape: tuple[int, ...]) -> None:
        self.offset, self.nbytes, self.dtype, self.shape = offset, nbytes, dtype, shape

    def __reduce__(self) -> tuple[Any, ...]:
        return _Slot, (self.offset, self.nbytes, self.dtype, self.shape)


@dataclass
class Wire:
    """A packed object: its skeleton and the bytes of all its tensors."""

    skeleton: Any
    payload: np.ndarray | bytes  # uint8 array, or lz4 bytes when ``compressed``
    size: int  # uncompressed payload bytes
    compressed: bool

    @property
    def nbytes(self) -> int:
        """The bytes that travel."""
        return len(self.payload) if isinstance(self.payload, bytes) else int(self.payload.nbytes)


def pack(obj: Any, compress: bool = False) -> Any:
    """``obj`` as a :class:`Wire` (unchanged when it holds no tensor)."""
    arrays: list[tuple[int, np.ndarray]] = []
    skeleton, size = _strip(obj, arrays, 0)
    if not arrays:
        return obj
    # numpy, not torch, for the byte shuffling: a numpy op costs a fraction of a torch one
    payload = np.empty(size, dtype=np.uint8)  # a copy: the message never aliases the sender's tensors
    for offset, array in arrays:
        payload[offset : offset + array.nbytes] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    if compress:
        import lz4.frame

        return Wire(skeleton, lz4.frame.compress(payload, compression_level=0), size, True)
    return Wire(skeleton, payload, size, False)


def _strip(obj: Any, arrays: list[tuple[int, np.ndarray]], offset: int) -> tuple[Any, int]:
    """``obj`` with its tensors replaced by slots; their arrays listed with their offsets."""
    if is_tensor(obj) or (isinstance(obj, np.ndarray) and obj.dtype.kind in "biufc"):
        if isinstance(obj, np.ndarray):
            array, dtype = obj, obj.dtype
        else:
            tensor = obj.detach() if obj.device.type == "cpu" else obj.detach().cpu()
            bits = _bits().get(tensor.dtype)
            if bits is not None:  # numpy has no such dtype: send the bits
                tensor = tensor.view(bits)
            array, dtype = tensor.numpy(), obj.dtype
        arrays.append((offset, array))
        end = offset + array.nbytes
        return _Slot(offset, array.nbytes, dtype, tuple(obj.shape)), end + (-end % _ALIGN)
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out[k], offset = _strip(v, arrays, offset)
        return out, offset
    if isinstance(obj, (list, tuple)):
        if all(type(v) in _PLAIN for v in obj):  # e.g. episode returns: nothing to look into
            return obj, offset
        items = []
        for v in obj:
            item, offset = _strip(v, arrays, offset)
            items.append(item)
        return _same_sequence(obj, items), offset
    return obj, offset


_PLAIN = frozenset((int, float, bool, str, type(None)))


@functools.cache
def _bits() -> dict[Any, Any]:
    """Torch dtypes numpy lacks, sent as integers of the same width (torch imported when a tensor is met)."""
    import torch

    return {torch.bfloat16: torch.int16}


@functools.cache
def _numpy_dtype(dtype: Any) -> np.dtype:
    """The numpy dtype a torch dtype travels as (what :func:`_strip` made of it)."""
    import torch

    return torch.empty(0, dtype=_bits().get(dtype, dtype)).numpy().dtype


def unpack(obj: Any) -> Any:
    """Undo :func:`pack`; anything else comes back as it is. The tensors are views into one
    fresh, writable buffer."""
    if not isinstance(obj, Wire):
        return obj
    if obj.compressed:
        import lz4.frame

        buffer = np.frombuffer(bytearray(lz4.frame.decompress(obj.payload)), dtype=np.uint8)
    else:
        buffer = np.array(obj.payload, dtype=np.uint8, copy=True)
    return _fill(obj.skeleton, buffer)


def _fill(obj: Any, buffer: np.ndarray) -> Any:
    if isinstance(obj, _Slot):
        if isinstance(obj.dtype, np.dtype):
            return buffer[obj.offset : obj.offset + obj.nbytes].view(obj.dtype).reshape(obj.shape)
        import torch

        array = buffer[obj.offset : obj.offset + obj.nbytes].view(_numpy_dtype(obj.dtype)).reshape(obj.shape)
        tensor = torch.from_numpy(array)
        return tensor.view(obj.dtype) if obj.dtype in _bits() else tensor
    if isinstance(obj, dict):
        return {k: _fill(v, buffer) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if all(type(v) in _PLAIN for v in obj):
            return obj
        return _same_sequence(obj, [_fill(v, buffer) for v in obj])
    return obj


def _same_sequence(like: list | tuple, items: list[Any]) -> Any:
    """``items`` as a sequence of ``like``'s type (a NamedTuple's fields are positional)."""
    return type(like)(*items) if hasattr(like, "_fields") else type(like)(items)


def nbytes(obj: Any) -> int:
    """The bytes a packed object sends (0 for one that holds no tensor)."""
    return obj.nbytes if isinstance(obj, Wire) else 0
