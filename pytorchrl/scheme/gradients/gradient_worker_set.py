"""Gradient workers, local and remote."""

from __future__ import annotations

import functools
import threading
from typing import Any

from pytorchrl.envs.normalization import MergedStatistics
from pytorchrl.scheme.base.worker_set import FaultTolerance, WorkerSet, first_answer, give, pass_on, replica_ordinal
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
    :param collectors_per_worker: collecting workers per gradient worker (for seed offsets).
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
            _make_gradient_worker, worker_kwargs=worker_kwargs, has_remote=num_workers > 0, collectors=collectors_per_worker
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
        self.workers.on_join = self._give_statistics

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

    def _give_statistics(self, joined: list[Any]) -> None:
        merged = self.merged_statistics()
        if not merged:
            pass_on(self.workers, joined, get="running_statistics", put="adopt_statistics")
            return
        give(self.workers, joined, "adopt_statistics", merged)

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
    index: int, *, local: bool, worker_kwargs: dict[str, Any], has_remote: bool, collectors: int, generation: int = 0
) -> GradientWorker:
    if local and has_remote:
        overrides: dict[str, Any] = {"evaluation_only": True}
    else:
        overrides = {"index_offset": replica_ordinal(index) * collectors, "seed_generation": generation}
    kwargs = dict(worker_kwargs)
    kwargs["seed"] = generation_seed(kwargs.get("seed", 0), generation)  # a replacement: fresh shuffling stream
    return GradientWorker(index, col_overrides=overrides, report_statistics=not local, **kwargs)
