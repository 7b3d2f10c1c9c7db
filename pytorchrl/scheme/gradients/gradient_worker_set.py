"""Gradient workers, local and remote."""

from __future__ import annotations

import functools
import threading
from typing import Any

from pytorchrl.envs.normalization import MergedStatistics
from pytorchrl.scheme.base.worker_set import (
    CollectorNumbering,
    FaultTolerance,
    WorkerSet,
    check_removal,
    first_answer,
    give,
    pass_on,
    replica_ordinal,
)
from pytorchrl.scheme.gradients.gradient_worker import GradientWorker
from pytorchrl.utils.seeding import generation_seed


class GradientWorkerSet:
    """One local :class:`GradientWorker` plus ``num_workers`` remote ones.

    With remote gradient workers the local one computes nothing: it holds the master algorithm
    (for the :class:`UpdateWorker`) and a non-collecting collection worker for evaluation. Each
    remote gradient worker owns its own collection workers, numbered apart from the others'.

    :param worker_kwargs: keyword arguments of :class:`GradientWorker`.
    :param num_workers: remote gradient workers.
    :param communication: ``synchronous`` | ``asynchronous``.
    :param resources: Ray resources of each remote worker.
    :param collectors_per_worker: collecting workers per gradient worker at the start (for their numbers: :class:`CollectorNumbering`).
    :param compress: lz4-compress the gradients remote workers send.
    :param fault: restarts of dead remote gradient workers (``timeout_s`` is left to their
        collection workers: a gradient step waits for a collection round). A replacement gets
        fresh seeds, new collection workers, and the master's state before its first step.
    """

    def __init__(
        self,
        *,
        worker_kwargs: dict[str, Any],
        num_workers: int = 0,
        communication: str = "synchronous",
        resources: dict[str, Any] | None = None,
        collectors_per_worker: int = 1,
        compress: bool = False,
        fault: FaultTolerance | None = None,
    ) -> None:
        self.communication = communication
        factory = functools.partial(
            _make_gradient_worker, worker_kwargs=worker_kwargs, num_remote=num_workers, collectors=collectors_per_worker
        )
        self.workers: WorkerSet[GradientWorker] = WorkerSet(
            factory, num_remote=num_workers, resources=resources, compress=compress, fault=fault, name="gradient worker"
        )
        #: the replicas' normaliser statistics merged over all of them (each reports what its
        #: collection workers took in with the first step of a round; the update worker merges it
        #: and sends the merge with each replica's next step that starts a round)
        self._statistics = MergedStatistics()
        self._statistics_lock = threading.Lock()  # evaluation may read the merge from another thread
        #: counts the changes of the merge (the update worker packs it once per change)
        self.statistics_version = 0
        # a replacement's new collection workers normalise with the merge (before the first
        # report, a surviving replica's statistics), not fresh ones (its weights and optimizer
        # come from the master: UpdateWorker)
        self.workers.on_join = self._on_join
        self._collectors = collectors_per_worker
        #: collection workers added to (> 0) or taken from (< 0) every replica since the start: a
        #: replacement replica, built with the config's count, is resized alike when it joins
        #: (kept in checkpoints); changed under ``self.workers.membership``, which a joining
        #: replica holds from its arrival to :meth:`_on_join`, so that a resize reaches it once
        self.collectors_added = 0

    @property
    def local_worker(self) -> GradientWorker:
        return self.workers.local_worker

    def merge_statistics(self, new: dict[str, Any]) -> None:
        """Merge a replica's report (``info["new_statistics"]`` of its step)."""
        with self._statistics_lock:
            self._statistics.merge(new)
            self.statistics_version += 1

    def merged_statistics(self, *reports: dict[str, Any]) -> dict[str, Any]:
        """Every replica's normaliser statistics merged (empty before the first report); with
        ``reports`` of steps not taken in yet (a checkpoint's) merged into a copy."""
        with self._statistics_lock:
            return self._statistics.state(*reports)

    def set_merged_statistics(self, statistics: dict[str, Any]) -> None:
        """Make ``statistics`` the merge (a checkpoint's)."""
        with self._statistics_lock:
            self._statistics.set(statistics)
            self.statistics_version += 1

    @property
    def collectors_configured(self) -> int:
        """The remote collection workers each replica is built with (``scheme.num_col_workers``)."""
        return self._collectors

    def resize_fresh(self, replicas: list[Any]) -> None:
        """Give ``replicas``, built with the configured count, the collection workers added to
        (or taken from) every replica since (a replacement that joins; one a checkpoint has no
        state for)."""
        with self.workers.membership:
            if self.collectors_added and replicas:
                method = "add_collection_workers" if self.collectors_added > 0 else "remove_collection_workers"
                give(self.workers, replicas, method, abs(self.collectors_added))

    def _on_join(self, joined: list[Any]) -> None:
        self.resize_fresh(joined)  # a resize from another thread reaches every replica, this one too
        merged = self.merged_statistics()
        if not merged:
            pass_on(self.workers, joined, get="running_statistics", put="adopt_statistics")
            return
        give(self.workers, joined, "adopt_statistics", merged)

    def resize_collection_workers(self, num: int) -> None:
        """Add ``num`` remote collection workers to every remote replica (``num`` < 0: take
        ``-num`` out of each, the newest first); replicas that join later (replacements, built
        with the config's count) are resized alike. A replica found dead is replaced.

        :raises ValueError: when it would leave a replica without a remote collection worker.
        """
        with self.workers.membership:
            if num < 0:  # against the replica with the fewest (scheme.ignore_worker_failures: some may have lost workers)
                have = [*self.workers.ask_all("num_collection_workers"), self._collectors + self.collectors_added]
                check_removal("collection worker", min(have), -num)
            method = "add_collection_workers" if num > 0 else "remove_collection_workers"
            self.workers.ask_all(method, abs(num))
            self.collectors_added += num

    @property
    def num_collection_workers(self) -> int:
        """Remote collection workers over every replica, those of replicas starting included."""
        answers = self.workers.ask_all("num_collection_workers")
        return sum(answers) + len(self.workers.starting) * (self._collectors + self.collectors_added)

    def normalization_state(self) -> dict[str, Any] | None:
        """The observation statistics merged over every replica (their collection workers
        collect; the local one, which evaluates, does not): what evaluation, ``predict`` and the
        parallel evaluator normalise with. Before the first report, those of the first remote
        gradient worker that answers; None when none answers (the evaluation keeps the
        statistics it had); a dead one is left to the update worker, which replaces it and gives
        its replacement the master's state."""
        merged = self.merged_statistics()
        if "obs_rms" in merged:
            return merged["obs_rms"]
        return first_answer(self.workers, "normalization_state")[1]

    def close(self) -> None:
        self.workers.close()


def _make_gradient_worker(
    index: int, *, local: bool, worker_kwargs: dict[str, Any], num_remote: int, collectors: int, generation: int = 0
) -> GradientWorker:
    kwargs = dict(worker_kwargs)
    remote_device = kwargs.pop("remote_device", None)
    if not local and remote_device is not None:  # a remote replica computes where its reserved resources are, not on the driver's device
        kwargs["device"] = remote_device
    kwargs["seed"] = generation_seed(kwargs.get("seed", 0), generation)  # a replacement: fresh shuffling stream
    overrides = collection_overrides(index, local=local, num_remote=num_remote, collectors=collectors, generation=generation)
    return GradientWorker(index, col_overrides=overrides, report_statistics=not local, **kwargs)


def collection_overrides(index: int, *, local: bool, num_remote: int, collectors: int, generation: int) -> dict[str, Any]:
    """How gradient worker ``index`` (of ``num_remote`` remote ones) builds its collection set:
    beside remote ones, the local worker's only evaluates; a replica's collecting workers are
    numbered apart from every other replica's (:class:`CollectorNumbering`), and a replaced
    replica's get fresh seeds."""
    if local and num_remote:
        return {"evaluation_only": True}
    return {"numbering": CollectorNumbering(replica_ordinal(index), max(num_remote, 1), collectors), "seed_generation": generation}
