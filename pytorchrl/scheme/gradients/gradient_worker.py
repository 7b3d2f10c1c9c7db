"""The gradient worker: turns collected rollouts into gradients, minibatch by minibatch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from pytorchrl.scheme.collection.collection_worker_set import CollectionWorkerSet


class GradientWorker:
    """Owns a :class:`CollectionWorkerSet`, an algorithm and a storage.

    Each :meth:`step` computes the gradient of one minibatch. When the current round's
    minibatches are used up (or the algorithm stops the round early, e.g. on target KL), it first
    gives its collection workers the current weights and gathers a new round of data.

    :param index: worker index (0: local).
    :param col_workers_factory: ``() -> CollectionWorkerSet``.
    :param actor_factory: ``(device) -> actor``.
    :param algo_factory: ``(actor, device) -> Algorithm``.
    :param storage_factory: ``(device=...) -> storage``.
    :param device: torch device for gradients.
    :param torch_threads: ``torch.set_num_threads`` for this process.
    """

    def __init__(
        self,
        index: int,
        *,
        col_workers_factory: Callable[[], CollectionWorkerSet],
        actor_factory: Callable[..., Any],
        algo_factory: Callable[..., Any],
        storage_factory: Callable[..., Any],
        device: str = "cpu",
        torch_threads: int = 1,
    ) -> None:
        torch.set_num_threads(torch_threads)
        self.index = index
        self.device = torch.device(device)
        self.col_workers = col_workers_factory()
        self.actor = actor_factory(self.device)
        self.algo = algo_factory(self.actor, self.device)
        self.storage = storage_factory(device=self.device)
        self._batches: Iterator[dict[str, torch.Tensor]] | None = None
        self._remaining = 0

    def step(self, return_gradients: bool = True) -> tuple[torch.Tensor | None, dict[str, Any]]:
        """Gradients of the next minibatch (left in ``.grad`` if not ``return_gradients``) and info.

        Info holds the algorithm's diagnostics, ``round_end`` (the round's last minibatch), and,
        on the first step of a round, the collection info (``env_steps``, episode returns, ...).
        """
        info: dict[str, Any] = {}
        if self._remaining == 0 or self.algo.stop_round:
            info.update(self._new_round())
        start = time.perf_counter()
        assert self._batches is not None
        batch = next(self._batches)
        self._remaining -= 1
        info.update(self.algo.compute_gradients(batch))
        info["gradient_time_s"] = time.perf_counter() - start
        info["round_end"] = self._remaining == 0 or self.algo.stop_round
        grads = self.algo.get_gradients() if return_gradients else None
        return grads, info

    def _new_round(self) -> dict[str, Any]:
        self.algo.stop_round = False
        self.storage.after_gradients()
        self.col_workers.sync_weights(self.algo.get_weights(), self.algo.version)
        rollouts, info = self.col_workers.collect()
        for data in rollouts:
            self.storage.add_data(data)
        self.storage.before_gradients()
        size = self.algo.minibatch_size or self.storage.num_samples
        self._remaining = self.storage.num_batches(size) * self.algo.num_epochs
        self._batches = self.storage.generate_batches(minibatch_size=size, num_epochs=self.algo.num_epochs)
        info["explained_variance"] = self.storage.explained_variance()
        return info

    def set_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.algo.set_weights(weights, version)

    def state_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algo.state_dict(), "collection": self.col_workers.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.algo.load_state_dict(state["algorithm"])
        self.col_workers.load_state_dict(state["collection"])
        self._remaining = 0

    def close(self) -> None:
        self.col_workers.close()
