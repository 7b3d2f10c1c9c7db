"""Collection workers, local and remote, and how their data is gathered."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from pytorchrl.scheme.base.worker_set import WorkerSet
from pytorchrl.scheme.collection.collection_worker import CollectionWorker


class CollectionWorkerSet:
    """One local :class:`CollectionWorker` plus ``num_workers`` remote ones.

    With no remote workers the local one collects; with remote workers it only holds weights
    (it would compete with them for CPU) and is used for evaluation.

    :param worker_kwargs: keyword arguments of :class:`CollectionWorker` (factories, device).
    :param num_workers: remote collection workers.
    :param communication: ``synchronous`` | ``asynchronous``.
    :param resources: Ray resources of each remote worker.
    """

    def __init__(self, *, worker_kwargs: dict[str, Any], num_workers: int = 0, communication: str = "synchronous", resources: dict[str, Any] | None = None) -> None:
        self.communication = communication
        factory = functools.partial(_make_collection_worker, worker_kwargs=worker_kwargs, has_remote=num_workers > 0)
        self.workers: WorkerSet[CollectionWorker] = WorkerSet(factory, num_remote=num_workers, resources=resources)

    @classmethod
    def create_factory(cls, **kwargs: Any) -> Callable[..., CollectionWorkerSet]:
        """A picklable ``factory() -> CollectionWorkerSet`` (each gradient worker builds its own)."""
        return functools.partial(cls, **kwargs)

    @property
    def local_worker(self) -> CollectionWorker:
        return self.workers.local_worker

    def collect(self) -> tuple[list[dict[str, torch.Tensor]], dict[str, Any]]:
        """One round of data: a rollout from every collecting worker, and their merged info."""
        data, info = self.local_worker.collect_data()
        return [data], merge_collection_info([info], current_version=self.local_worker.algo.version)

    def sync_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Give every worker the weights of policy ``version``."""
        self.local_worker.set_weights(weights, version)

    def evaluate(self, num_episodes: int) -> list[float]:
        return self.local_worker.evaluate(num_episodes)

    def state_dict(self) -> dict[str, Any]:
        return {"local": self.local_worker.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.local_worker.load_state_dict(state["local"])

    def close(self) -> None:
        self.workers.close()


def merge_collection_info(infos: list[dict[str, Any]], *, current_version: int) -> dict[str, Any]:
    """Sum steps and times, join episode lists, and measure each batch's policy lag."""
    lags = [current_version - i["policy_version"] for i in infos]
    return {
        "env_steps": sum(i["env_steps"] for i in infos),
        "episode_returns": [r for i in infos for r in i["episode_returns"]],
        "episode_lengths": [n for i in infos for n in i["episode_lengths"]],
        "collect_time_s": max(i["collect_time_s"] for i in infos),
        "policy_lag_mean": sum(lags) / len(lags),
        "num_batches": len(infos),
    }


def _make_collection_worker(index: int, *, local: bool, worker_kwargs: dict[str, Any], has_remote: bool) -> CollectionWorker:
    return CollectionWorker(index, collect=not (local and has_remote), **worker_kwargs)
