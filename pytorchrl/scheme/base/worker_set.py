"""A local worker plus remote copies of it: the one place that knows about Ray.

Workers are plain classes built from a picklable factory. :class:`WorkerSet` builds the local
worker in this process; remote workers (Ray actors built from the same factory, with the
scheme's resources and their own index, hence their own seeds) are added here, and only here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from pytorchrl.utils.errors import ConfigError

W = TypeVar("W")


class WorkerSet(Generic[W]):
    """A local worker and ``num_remote`` remote ones, all built by ``worker_factory(index, **kw)``.

    :param worker_factory: ``worker_factory(index, local=bool) -> worker``.
    :param num_remote: remote workers (indices 1..num_remote); the local one has index 0.
    :param resources: Ray resources of each remote worker.
    """

    def __init__(self, worker_factory: Callable[..., W], *, num_remote: int = 0, resources: dict[str, Any] | None = None) -> None:
        if num_remote > 0:
            raise ConfigError(
                f"scheme: {num_remote} remote workers asked for, but remote (Ray) workers are not "
                "available in this version; allowed: 0"
            )
        self.worker_factory = worker_factory
        self.resources = dict(resources or {})
        self.local_worker: W = worker_factory(0, local=True)
        self.remote_workers: list[Any] = []

    @property
    def num_workers(self) -> int:
        return 1 + len(self.remote_workers)

    def close(self) -> None:
        close = getattr(self.local_worker, "close", None)
        if close is not None:
            close()
