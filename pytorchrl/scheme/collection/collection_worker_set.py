"""Collection workers, local and remote, and how their data is gathered."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import Any

import torch

from pytorchrl.scheme.base.worker_set import FaultTolerance, WorkerSet, replica_ordinal
from pytorchrl.scheme.collection.collection_worker import CollectionWorker
from pytorchrl.utils.seeding import generation_seed


class CollectionWorkerSet:
    """One local :class:`CollectionWorker` plus ``num_workers`` remote ones.

    With no remote workers the local one collects; with remote workers it only holds weights
    (it would compete with them for CPU) and is used for evaluation.

    Collection modes with remote workers:

    * ``synchronous``: a round asks every worker for one rollout with the current weights. Once
      ``fraction_workers`` of the workers, or rollouts holding ``fraction_samples`` of the
      round's data, have arrived, the others are preempted: they stop at their next step and
      send what they have (still on-policy, so it is used too).
    * ``asynchronous``: every worker has a rollout under way; :meth:`collect` returns the first
      one to arrive, and the next :meth:`collect` (after the learner's update) restarts that
      worker with the newest weights. A rollout collected more than ``max_policy_lag`` policy
      versions ago is dropped and counted, never used.

    :param worker_kwargs: keyword arguments of :class:`CollectionWorker` (factories, device, seed).
    :param num_workers: remote collection workers.
    :param communication: ``synchronous`` | ``asynchronous``.
    :param resources: Ray resources of each remote worker.
    :param index_offset: collector index of this set's first collecting worker (gradient
        workers each own a set; offsets keep every collector's seeds distinct).
    :param max_policy_lag: drop rollouts older than this many versions (None: keep all).
    :param fraction_samples: synchronous preemption threshold on data.
    :param fraction_workers: synchronous preemption threshold on workers.
    :param compress: lz4-compress rollouts sent by remote workers.
    :param evaluation_only: build only a local, non-collecting worker (a set kept for evaluation).
    :param fault: restarts, timeouts and whether to go on without dead workers. A remote worker
        that dies (or does not answer in time) is replaced with a fresh seed and gets the current
        weights with its next call; the rollout it was collecting is counted in ``lost_batches``.
        Rollouts already received are never lost.
    """

    def __init__(
        self,
        *,
        worker_kwargs: dict[str, Any],
        num_workers: int = 0,
        communication: str = "synchronous",
        resources: dict[str, Any] | None = None,
        index_offset: int = 0,
        max_policy_lag: int | None = None,
        fraction_samples: float = 1.0,
        fraction_workers: float = 1.0,
        compress: bool = False,
        evaluation_only: bool = False,
        fault: FaultTolerance | None = None,
    ) -> None:
        self.communication = communication
        self.max_policy_lag = max_policy_lag
        self.fraction_samples = fraction_samples
        self.fraction_workers = fraction_workers
        if evaluation_only:
            num_workers = 0
        factory = functools.partial(
            _make_collection_worker, worker_kwargs=worker_kwargs, offset=index_offset,
            local_collects=num_workers == 0 and not evaluation_only,
        )
        self.workers: WorkerSet[CollectionWorker] = WorkerSet(
            factory, num_remote=num_workers, resources=resources, compress=compress, fault=fault, name="collection worker"
        )
        self._weights: tuple[int, Any] | None = None  # (version, object ref) of the newest weights
        self._pending: dict[Any, tuple[Any, float]] = {}  # asynchronous: rollout ref -> (worker, deadline)
        self._idle: list[Any] = []  # asynchronous: workers to restart at the next collect()
        self._version = 0  # of the newest weights given to sync_weights
        self._round = 0
        self.dropped_batches = 0
        self.preempted_batches = 0
        self.lost_batches = 0

    @classmethod
    def create_factory(cls, **kwargs: Any) -> Callable[..., CollectionWorkerSet]:
        """A picklable ``factory(**overrides) -> CollectionWorkerSet`` (each gradient worker builds its own)."""
        return functools.partial(cls, **kwargs)

    @property
    def local_worker(self) -> CollectionWorker:
        return self.workers.local_worker

    @property
    def remote(self) -> bool:
        return self.workers.remote

    # ------------------------------------------------------------------------ collection

    def collect(self) -> tuple[list[dict[str, torch.Tensor]], dict[str, Any]]:
        """One round of data: rollouts and their merged info (see the class doc).

        With remote workers the info also counts what happened during this call: rollouts
        dropped for policy lag, preempted, or lost with a dead worker (``dropped_batches``,
        ``preempted_batches``, ``lost_batches``), workers replaced (``worker_restarts``), and
        the workers alive at its end (``healthy_workers``).
        """
        version = self._version
        if not self.remote:
            data, info = self.local_worker.collect_data()
            return [data], merge_collection_info([info], current_version=version)
        counts = (self.dropped_batches, self.preempted_batches, self.lost_batches, self.workers.restarts)
        results = self._collect_sync() if self.communication == "synchronous" else self._collect_async(version)
        info = merge_collection_info([i for _, i in results], current_version=version)
        info["dropped_batches"] = self.dropped_batches - counts[0]
        info["preempted_batches"] = self.preempted_batches - counts[1]
        info["lost_batches"] = self.lost_batches - counts[2]
        info["worker_restarts"] = self.workers.restarts - counts[3]
        info["healthy_workers"] = len(self.workers.remote_workers)
        return [d for d, _ in results], info

    def _collect_sync(self) -> list[tuple[dict[str, torch.Tensor], dict[str, Any]]]:
        ws = self.workers
        results: list[tuple[dict[str, torch.Tensor], dict[str, Any]]] = []
        while not results:  # a round in which every worker died is asked again of their replacements
            version, weights = self._weights_ref()
            self._round += 1
            pending = {ws.call(w, "collect_data", weights, version, self._round): w for w in ws.remote_workers}
            deadline = self._deadline()
            n = len(pending)
            enough_workers = math.ceil(self.fraction_workers * n - 1e-9)
            preemptable = self.fraction_workers < 1.0 or self.fraction_samples < 1.0
            while pending:
                ready, _ = ws.wait(list(pending), num_returns=1 if preemptable else len(pending), timeout=_left(deadline))
                if not ready:  # the deadline passed: whoever has not answered is dead
                    for ref in list(pending):
                        self._lose(pending.pop(ref), "no answer within scheme.worker_timeout_s")
                    break
                for ref in ready:
                    self._take(ref, pending.pop(ref), results)
                full = max((i["env_steps"] for _, i in results), default=0)  # every rollout not preempted has this size
                if preemptable and pending and results and (
                    len(results) >= enough_workers or sum(i["env_steps"] for _, i in results) >= self.fraction_samples * n * full
                ):
                    for w in pending.values():
                        ws.call(w, "preempt", self._round, control=True)
                    late = len(results)
                    ready, _ = ws.wait(list(pending), num_returns=len(pending), timeout=_left(self._deadline()))
                    for ref in ready:
                        self._take(ref, pending.pop(ref), results)
                    self.preempted_batches += sum(1 for _, i in results[late:] if i["preempted"])
                    for ref in list(pending):
                        self._lose(pending.pop(ref), "no answer to a preemption within scheme.worker_timeout_s")
        return results

    def _take(self, ref: Any, worker: Any, results: list[Any]) -> None:
        """Append the result of ``ref`` to ``results``; a dead worker is replaced instead."""
        ok, value = self.workers.try_get(ref)
        if ok:
            results.append(value)
        else:
            self._lose(worker, value)

    def _lose(self, worker: Any, reason: str) -> Any | None:
        """Count the rollout in flight from ``worker`` as lost and replace the worker."""
        self.lost_batches += 1
        return self.workers.replace(worker, reason)

    def _collect_async(self, version: int) -> list[tuple[dict[str, torch.Tensor], dict[str, Any]]]:
        ws = self.workers
        if not self._pending and not self._idle:
            self._idle = list(ws.remote_workers)
        # workers whose rollout was taken last time restart now, with the weights of the
        # update made from it: restarting them before that update would add a version of lag
        for worker in self._idle:
            self._submit(worker)
        self._idle = []
        while True:
            first_deadline = min(deadline for _, deadline in self._pending.values())
            ready, _ = ws.wait(list(self._pending), timeout=_left(first_deadline))
            if not ready:  # the oldest call is overdue: its worker is dead
                overdue = [ref for ref, (_, deadline) in self._pending.items() if deadline <= first_deadline]
                for ref in overdue:
                    self._resubmit(self._pending.pop(ref)[0], "no answer within scheme.worker_timeout_s")
                continue
            worker, _ = self._pending.pop(ready[0])
            ok, value = ws.try_get(ready[0])
            if not ok:
                self._resubmit(worker, value)
                continue
            data, info = value
            if self.max_policy_lag is not None and version - info["policy_version"] > self.max_policy_lag:
                self.dropped_batches += 1
                self._submit(worker)
                continue
            self._idle.append(worker)
            return [(data, info)]

    def _resubmit(self, worker: Any, reason: str) -> None:
        new = self._lose(worker, reason)
        if new is not None:
            self._submit(new)

    def _submit(self, worker: Any) -> None:
        version, weights = self._weights_ref()
        self._pending[self.workers.call(worker, "collect_data", weights, version)] = (worker, self._deadline())

    def _deadline(self) -> float:
        timeout = self.workers.fault.timeout_s
        return math.inf if timeout is None else time.monotonic() + timeout

    def _weights_ref(self) -> tuple[int, Any]:
        if self._weights is None:
            raise RuntimeError("sync_weights() must be called before the first collect()")
        return self._weights

    def sync_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Make ``weights`` (policy ``version``) the ones the next rollouts are collected with.

        Remote workers read them from the object store, where they are put once per version;
        a local worker that does not collect is left alone (evaluation sets its own weights).
        """
        self._version = version
        if not self.remote:
            self.local_worker.set_weights(weights, version)
        elif self._weights is None or self._weights[0] != version:
            self._weights = (version, self.workers.put(weights))

    # -------------------------------------------------------------------- evaluation

    def evaluate(self, num_episodes: int) -> list[float]:
        if self.remote:
            # the local worker has no train envs: evaluate with a collecting worker's statistics
            self.local_worker.load_normalization(self._ask_any("normalization_state"))
        return self.local_worker.evaluate(num_episodes)

    def _ask_any(self, method: str) -> Any:
        """``method``'s answer from the first remote worker alive, beside any collection in progress."""
        return self._ask(self.workers.remote_workers[0], method, control=True)

    def _ask(self, worker: Any, method: str, *, control: bool = False) -> Any:
        """``worker.method()`` (``control``: beside a collection in progress, else after it); a
        dead worker is replaced and its replacement (or, ignoring failures, the first worker
        left) asked instead."""
        ws = self.workers
        while True:
            ok, value = ws.try_get(ws.call(worker, method, control=control))
            if ok:
                return value
            asynchronous = self.communication == "asynchronous" and bool(self._pending or self._idle)
            self._forget(worker)
            worker = ws.replace(worker, value) or ws.remote_workers[0]
            if asynchronous and worker not in self._idle and all(w != worker for w, _ in self._pending.values()):
                self._idle.append(worker)  # started at the next collect()

    def _forget(self, worker: Any) -> None:
        """Drop a worker about to be replaced from the asynchronous bookkeeping (its rollout is lost)."""
        for ref, (w, _) in list(self._pending.items()):
            if w == worker:
                del self._pending[ref]
                self.lost_batches += 1
        self._idle = [w for w in self._idle if w != worker]

    # ------------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"local": self.local_worker.state_dict()}
        if self.remote:
            state["remote"] = [self._ask(w, "state_dict") for w in list(self.workers.remote_workers)]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.local_worker.load_state_dict(state["local"])
        for worker, worker_state in zip(self.workers.remote_workers, state.get("remote", []), strict=False):
            self.workers.get(self.workers.call(worker, "load_state_dict", worker_state))

    def close(self) -> None:
        self.workers.close()


def merge_collection_info(infos: list[dict[str, Any]], *, current_version: int) -> dict[str, Any]:
    """Sum steps, join episode lists, and measure each batch's policy lag."""
    lags = [current_version - i["policy_version"] for i in infos]
    return {
        "env_steps": sum(i["env_steps"] for i in infos),
        "episode_returns": [r for i in infos for r in i["episode_returns"]],
        "episode_lengths": [n for i in infos for n in i["episode_lengths"]],
        "collect_time_s": max(i["collect_time_s"] for i in infos),
        "policy_lag_mean": sum(lags) / len(lags),
        "policy_lags": lags,
        "num_batches": len(infos),
    }


def _make_collection_worker(
    index: int, *, local: bool, worker_kwargs: dict[str, Any], offset: int, local_collects: bool, generation: int = 0
) -> CollectionWorker:
    # the collecting workers are numbered from `offset`: the local one when it collects, else the
    # remote ones (index 1 -> offset), so one remote worker collects what a local one would; a
    # replacement (generation > 0) keeps the number and gets fresh seeds
    kwargs = dict(worker_kwargs)
    if generation:
        kwargs["seed"] = kwargs["env_seed"] = generation_seed(worker_kwargs.get("seed", 0), generation)
    return CollectionWorker(offset + replica_ordinal(index), collect=local_collects if local else True, **kwargs)


def _left(deadline: float) -> float | None:
    """Seconds until ``deadline`` for ``ray.wait`` (None: no deadline)."""
    return None if deadline == math.inf else max(0.0, deadline - time.monotonic())
