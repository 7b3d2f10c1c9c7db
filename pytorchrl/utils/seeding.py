"""Seed derivation and global RNG state capture.

Every random stream in a run is derived from the run seed and a key naming its owner
(worker index, env index, role), through numpy's ``SeedSequence`` so that no two streams
overlap (O'Neill 2015; numpy's "parallel random number generation" guidance).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np

TRAIN_ROLE = 0
TEST_ROLE = 1
ACTING_ROLE = 2
GRADIENT_ROLE = 3
RESTART_ROLE = 4
EVALUATION_ROLE = 5


def derive_seed(run_seed: int, *keys: int) -> int:
    """Return a 32-bit seed for the stream named by ``keys`` inside run ``run_seed``.

    :param run_seed: the run's seed (``run.seed``).
    :param keys: non-negative integers naming the stream, e.g. ``(role, worker_index, env_index)``.
    """
    seq = np.random.SeedSequence(entropy=int(run_seed), spawn_key=tuple(int(k) for k in keys))
    return int(seq.generate_state(1, dtype=np.uint32)[0])


def generation_seed(run_seed: int, generation: int, outer_generation: int = 0) -> int:
    """The run seed a worker's streams derive from: ``run_seed`` itself for an original worker,
    a fresh one for its ``generation``-th replacement (a replacement must not replay the streams
    of the worker it replaces). ``outer_generation`` is that of the worker owning it (the
    collection workers of a replaced gradient worker are new too)."""
    if generation == 0 and outer_generation == 0:
        return run_seed
    keys = (generation,) if outer_generation == 0 else (generation, outer_generation)
    return derive_seed(run_seed, RESTART_ROLE, *keys)


def seed_everything(seed: int) -> None:
    """Seed python's, numpy's and torch's global generators."""
    random.seed(seed)
    import torch

    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def get_rng_state() -> dict[str, Any]:
    """Capture the global python, numpy and torch RNG states (tensors and plain data only)."""
    import torch

    py_state = random.getstate()
    np_state = np.random.get_state(legacy=False)
    np_state["state"]["key"] = torch.from_numpy(np_state["state"]["key"].astype(np.int64))  # checkpoint-safe
    return {
        "python": [py_state[0], list(py_state[1]), py_state[2]],
        "numpy": np_state,
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore a state captured by :func:`get_rng_state`."""
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = dict(state["numpy"])
    np_state["state"] = {**np_state["state"], "key": np.asarray(np_state["state"]["key"], dtype=np.uint32)}
    np.random.set_state(np_state)
    torch.set_rng_state(state["torch"])


class TorchStream:
    """A torch random stream of its own for one worker, whatever process it lives in.

    Inside :meth:`active` torch's global CPU generator is switched to this stream, so code that
    draws with the global generator (sampling actions, shuffling minibatches) draws the same
    numbers in a local worker and in a remote one: what makes local and remote runs identical.
    Switching costs two state copies, so it wraps whole rollouts or gradient steps.

    :param seed: a seed from :func:`derive_seed`.
    """

    def __init__(self, seed: int) -> None:
        import torch

        generator = torch.Generator()
        generator.manual_seed(seed)
        self.state = generator.get_state()

    @classmethod
    def from_state(cls, state: Any) -> TorchStream:
        """The stream whose generator state is ``state`` (a ``uint8`` tensor or array: a state
        kept by a process without torch)."""
        import torch

        stream = cls.__new__(cls)
        stream.state = torch.as_tensor(state, dtype=torch.uint8).clone()
        return stream

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        import torch

        outer = torch.get_rng_state()
        torch.set_rng_state(self.state)
        try:
            yield
        finally:
            self.state = torch.get_rng_state()
            torch.set_rng_state(outer)
