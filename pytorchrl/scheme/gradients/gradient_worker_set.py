"""Gradient workers, local and remote."""

from __future__ import annotations

import functools
from typing import Any

from pytorchrl.scheme.base.worker_set import WorkerSet
from pytorchrl.scheme.gradients.gradient_worker import GradientWorker


class GradientWorkerSet:
    """One local :class:`GradientWorker` plus ``num_workers`` remote ones.

    :param worker_kwargs: keyword arguments of :class:`GradientWorker`.
    :param num_workers: remote gradient workers.
    :param communication: ``synchronous`` | ``asynchronous``.
    :param resources: Ray resources of each remote worker.
    """

    def __init__(self, *, worker_kwargs: dict[str, Any], num_workers: int = 0, communication: str = "synchronous", resources: dict[str, Any] | None = None) -> None:
        self.communication = communication
        factory = functools.partial(_make_gradient_worker, worker_kwargs=worker_kwargs)
        self.workers: WorkerSet[GradientWorker] = WorkerSet(factory, num_remote=num_workers, resources=resources)

    @property
    def local_worker(self) -> GradientWorker:
        return self.workers.local_worker

    def close(self) -> None:
        self.workers.close()


def _make_gradient_worker(index: int, *, local: bool, worker_kwargs: dict[str, Any]) -> GradientWorker:
    return GradientWorker(index, **worker_kwargs)
