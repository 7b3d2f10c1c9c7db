"""A sum tree (and min tree) over non-negative priorities, with vectorized batch operations.

Level 0 holds the leaves, level ``k + 1`` the sums (and minima) of level ``k``'s blocks of
``FANOUT`` nodes, each level zero-padded to whole blocks; the last level is the total. A
batch operation costs a few numpy calls per level, and numpy's cost is per call, so the fanout
is 16 rather than 2: a 1M-leaf tree has 5 levels instead of 20, a node's children are 16
contiguous values (one gather), and the internal nodes take 1/15 of the leaves' memory instead
of as much again. The first level of at most ``TOP_LEVEL`` nodes is searched whole with one
cumulative sum and recomputed whole on updates, which is cheaper than descending the levels
above it one by one.

Every internal node is *recomputed* from its children whenever a leaf below it changes, never
adjusted by a difference: no rounding drift, duplicate indices in a batch cannot leave the tree
inconsistent, and (a row reduction giving a row the same bits whatever the other rows) a tree
rebuilt from saved leaves is identical.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

FANOUT = 16
TOP_LEVEL = 4096


def _level_sizes(capacity: int) -> list[int]:
    """Each level's length, the leaves first (padded to the fan-out), the root last."""
    sizes = [-(-capacity // FANOUT) * FANOUT]
    while sizes[-1] > FANOUT:
        sizes.append(-(-sizes[-1] // FANOUT // FANOUT) * FANOUT)
    sizes.append(1)  # the root: the total
    return sizes


class SumTree:
    """Prefix-sum search over ``capacity`` non-negative values (priorities).

    A zero leaf is never returned by :meth:`find`; :attr:`min` is the smallest *nonzero* leaf.

    :param capacity: number of leaves.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        sizes = _level_sizes(capacity)
        # np.zeros is calloc'd: an unused big tree costs no resident memory
        self._sums = [np.zeros(n, dtype=np.float64) for n in sizes]
        self._mins = [np.full(n, np.inf, dtype=np.float64) for n in sizes]  # zero leaves count as +inf
        # the first level small enough to search whole, and to recompute whole on updates
        self._top = next(k for k, n in enumerate(sizes) if n <= TOP_LEVEL)

    @staticmethod
    def eager_bytes(capacity: int) -> int:
        """Memory a tree of ``capacity`` leaves takes when made: its minima, filled with +inf (the
        sums are calloc'd zeros, which cost nothing until written)."""
        return 8 * sum(_level_sizes(capacity))

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._sums[-1][0])

    @property
    def min(self) -> float:
        """Smallest nonzero leaf (``inf`` when every leaf is 0)."""
        return float(self._mins[-1][0])

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (*self._sums, *self._mins))

    def leaves(self) -> np.ndarray:
        """A read-only view of the ``capacity`` leaves."""
        view = self._sums[0][: self.capacity]
        view.flags.writeable = False
        return view

    def get(self, indices: np.ndarray) -> np.ndarray:
        """The leaves at ``indices``."""
        return self._sums[0][np.asarray(indices, dtype=np.int64)]

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set the leaves at ``indices`` to ``values``; a repeated index keeps its last value, as
        if the updates were made one by one.

        :param indices: leaf indices in ``[0, capacity)``.
        :param values: non-negative values, one per index (or one for all).
        """
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        values = np.broadcast_to(np.asarray(values, dtype=np.float64), indices.shape)
        if indices.size == 0:
            return
        if indices.min() < 0 or indices.max() >= self.capacity:
            raise IndexError(f"SumTree index out of range [0, {self.capacity})")
        if not np.all(values >= 0):  # also rejects NaN
            raise ValueError("SumTree values must be non-negative")
        # the first occurrence in the reversed batch is the last in the batch
        nodes, last = np.unique(indices[::-1], return_index=True)
        values = values[::-1][last]
        self._sums[0][nodes] = values
        self._mins[0][nodes] = np.where(values > 0, values, np.inf)
        for level in range(len(self._sums) - 1):
            sums, mins = self._sums[level].reshape(-1, FANOUT), self._mins[level].reshape(-1, FANOUT)
            if level >= self._top:  # a small level: recomputing all of the next costs less than picking
                self._sums[level + 1][: len(sums)] = sums.sum(axis=1)
                self._mins[level + 1][: len(mins)] = mins.min(axis=1)
                continue
            nodes //= FANOUT
            nodes = nodes[np.concatenate(([True], nodes[1:] != nodes[:-1]))]  # sorted: duplicates adjacent
            self._sums[level + 1][nodes] = np.take(sums, nodes, axis=0).sum(axis=1)
            self._mins[level + 1][nodes] = np.take(mins, nodes, axis=0).min(axis=1)

    def find(self, prefix_sums: np.ndarray) -> np.ndarray:
        """For each ``u`` in ``prefix_sums``, the leaf ``i`` with
        ``sum(leaves[:i]) <= u < sum(leaves[:i + 1])``: a leaf drawn with probability
        proportional to its value when ``u`` is uniform on ``[0, total)``.

        The first small level is searched whole (one cumulative sum), the levels below it block
        by block. A ``u`` at or past a node's sum (rounding) goes to its last nonzero child, so
        the search never enters an empty subtree and never returns a zero leaf.
        """
        if self._sums[-1][0] <= 0:
            raise ValueError("SumTree.find on an empty tree (all leaves are 0)")
        u = np.array(prefix_sums, dtype=np.float64).reshape(-1)
        top = self._sums[self._top]
        cumsum = np.cumsum(top)  # exact and monotone: it rises exactly at the nonzero nodes
        nodes = np.searchsorted(cumsum, u, side="right")
        over = np.flatnonzero(nodes == len(top))
        if over.size:
            nodes[over] = np.flatnonzero(top)[-1]
        u = np.maximum(u - (cumsum[nodes] - top[nodes]), 0.0)
        for level in range(self._top - 1, -1, -1):
            children = np.take(self._sums[level].reshape(-1, FANOUT), nodes, axis=0)
            child, u = _choose(children, u)
            nodes = nodes * FANOUT + child
        return nodes

    def state_dict(self) -> dict[str, Any]:
        """The leaves (the rest of the tree is rebuilt from them)."""
        return {"leaves": torch.from_numpy(self._sums[0][: self.capacity].copy())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the leaves of a :meth:`state_dict` and rebuild the tree above them."""
        leaves = state["leaves"].numpy()
        if leaves.shape != (self.capacity,):
            raise ValueError(f"SumTree state has {leaves.shape[0]} leaves, this tree {self.capacity}")
        for sums, mins in zip(self._sums, self._mins):
            sums[:] = 0.0
            mins[:] = np.inf
        self._sums[0][: self.capacity] = leaves
        self._mins[0][: self.capacity] = np.where(leaves > 0, leaves, np.inf)
        for level in range(len(self._sums) - 1):
            n = len(self._sums[level]) // FANOUT
            self._sums[level + 1][:n] = self._sums[level].reshape(-1, FANOUT).sum(axis=1)
            self._mins[level + 1][:n] = self._mins[level].reshape(-1, FANOUT).min(axis=1)


def _choose(children: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """In each row of ``children``, the child where ``u`` falls, and ``u`` within it.

    The child is the first whose (exact, monotone) cumulative sum passes ``u``: the sum rises
    there, so its value is > 0. Where ``u`` is past the row's sum, the last nonzero child.
    """
    cumsum = np.cumsum(children, axis=1)
    child = np.count_nonzero(cumsum <= u[:, None], axis=1)
    over = np.flatnonzero(child == FANOUT)
    if over.size:
        child[over] = FANOUT - 1 - np.argmax(children[over, ::-1] > 0, axis=1)
    rows = np.arange(len(u))
    # u within the chosen child, never below 0 by rounding (that could pick a zero grandchild)
    return child, np.maximum(u - (cumsum[rows, child] - children[rows, child]), 0.0)
