"""numpy and torch at the boundary of processes that hold no torch (a central-inference
collection worker): such a process sends and receives numpy arrays; checkpoints hold tensors."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def is_tensor(x: Any) -> bool:
    """Whether ``x`` is a torch tensor, without importing torch (none exists before it is imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def as_numpy(x: Any) -> np.ndarray:
    """``x`` as a numpy array: itself, or a CPU copy of a tensor's memory (a view when already on the CPU)."""
    if isinstance(x, np.ndarray):
        return x
    if is_tensor(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def to_tensors(tree: Any) -> Any:
    """``tree`` (dicts, lists, tuples) with its numeric numpy arrays as tensors sharing their memory
    and its numpy scalars as Python numbers (what ``torch.load(weights_only=True)`` reads back)."""
    if isinstance(tree, np.ndarray) and tree.dtype.kind in "biuf":
        import torch

        return torch.from_numpy(tree if tree.flags.c_contiguous else tree.copy(order="C"))  # (np.ascontiguousarray makes 0-d arrays 1-d)
    if isinstance(tree, np.generic) and tree.dtype.kind in "biuf":  # a numpy scalar: a Python number
        return tree.item()
    if isinstance(tree, dict):
        return {k: to_tensors(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)) and not hasattr(tree, "_fields"):
        return type(tree)(to_tensors(v) for v in tree)
    return tree


def to_arrays(tree: Any) -> Any:
    """``tree`` with its CPU tensors as numpy arrays (for a process that holds no torch)."""
    if is_tensor(tree):
        return tree.detach().cpu().numpy()
    if isinstance(tree, dict):
        return {k: to_arrays(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)) and not hasattr(tree, "_fields"):
        return type(tree)(to_arrays(v) for v in tree)
    return tree
