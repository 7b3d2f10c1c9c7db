"""Collection workers, local and remote, and how their data is gathered."""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from pytorchrl.envs.normalization import MergedStatistics
from pytorchrl.scheme.base.evaluator import EvaluationRequest, Evaluator
from pytorchrl.scheme.base.inference_servers import InferenceServers
from pytorchrl.scheme.base.infos import count_spent, spent_state, under_way_reports
from pytorchrl.scheme.base.worker_set import CollectorNumbering, FaultTolerance, WorkerSet, answers, first_answer, paired, pass_on
from pytorchrl.scheme.collection.collection_worker import CollectionWorker
from pytorchrl.scheme.collection.thin_worker import Deferred, generation_kwargs, make_collection_worker, thin_recorder_factory
from pytorchrl.utils.arrays import to_arrays, to_tensors


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
    :param numbering: the numbers of this set's collecting workers, which key their seeds
        (gradient workers each own a set; the numbering keeps every collector's seeds distinct,
        added workers' included). Default: one set alone.
    :param max_policy_lag: drop rollouts older than this many versions (None: keep all).
    :param fraction_samples: synchronous preemption threshold on data.
    :param fraction_workers: synchronous preemption threshold on workers.
    :param compress: lz4-compress rollouts sent by remote workers.
    :param evaluation_only: build only a local, non-collecting worker (a set kept for evaluation).
    :param seed_generation: the generation of the gradient worker that owns the set (a
        replaced gradient worker's collection workers get fresh seeds too).
    :param fault: restarts, timeouts and whether to go on without dead workers. A remote worker
        that dies (or does not answer in time) is replaced with a fresh seed; the replacement
        starts in the background while the others go on collecting, and gets the current weights
        with its first call once it is up. The rollout the dead one was collecting is counted
        in ``lost_batches``; rollouts already received are never lost.
    :param inference: central inference servers (the scheme owns them): the remote workers act
        through them, hold no network and are sent no weights; :meth:`sync_weights` sets the
        servers' instead, and each round's info carries the servers' metrics. The local worker
        keeps its own copy of the actor for evaluation.
    :param weight_sync_every: central inference: set the servers' weights once the learner is
        this many versions past them (fewer weight transfers; the actions still carry the
        version that chose them, so policy lag counts it).

    Remote workers can be added and removed while training runs (:meth:`add_workers`,
    :meth:`remove_workers`).
    """

    def __init__(
        self,
        *,
        worker_kwargs: dict[str, Any],
        num_workers: int = 0,
        communication: str = "synchronous",
        resources: dict[str, Any] | None = None,
        numbering: CollectorNumbering | None = None,
        max_policy_lag: int | None = None,
        fraction_samples: float = 1.0,
        fraction_workers: float = 1.0,
        compress: bool = False,
        evaluation_only: bool = False,
        fault: FaultTolerance | None = None,
        seed_generation: int = 0,
        inference: InferenceServers | None = None,
        weight_sync_every: int = 1,
    ) -> None:
        self.communication = communication
        self.inference = None if evaluation_only else inference
        self.weight_sync_every = weight_sync_every
        self.max_policy_lag = max_policy_lag
        self.fraction_samples = fraction_samples
        self.fraction_workers = fraction_workers
        #: where the observation statistics come from when no worker of this set collects (the
        #: master's set beside remote gradient workers: theirs, :meth:`GradientWorkerSet.normalization_state`)
        self.statistics_from: Callable[[], dict[str, Any] | None] | None = None
        if evaluation_only:
            num_workers = 0
        numbering = numbering or CollectorNumbering()
        factory: Callable[..., Any] = functools.partial(
            _make_collection_worker, worker_kwargs=worker_kwargs, numbering=numbering,
            local_collects=num_workers == 0 and not evaluation_only, set_generation=seed_generation,
            policy_factory=None if self.inference is None else self.inference.policy_factory(),
        )
        recorder = None if self.inference is None else thin_recorder_factory(worker_kwargs["storage_factory"])
        #: central inference with remote workers that hold no torch (:mod:`.thin_worker`)
        self.thin = recorder is not None
        if recorder is not None:
            assert self.inference is not None
            thin_kwargs: dict[str, Any] = {
                "env_factory": worker_kwargs["env_factory"], "recorder_factory": recorder, "policy_factory": self.inference.policy_factory(arrays=True),
                **{k: worker_kwargs[k] for k in ("seed", "env_seed") if k in worker_kwargs},
            }
            factory = functools.partial(
                make_collection_worker, torch_factory=Deferred(factory), thin_kwargs=thin_kwargs, numbering=numbering, set_generation=seed_generation,
            )
        self.workers: WorkerSet[CollectionWorker] = WorkerSet(
            factory, num_remote=num_workers, resources=resources, compress=compress, fault=fault, name="collection worker"
        )
        # joiners (replacements, added workers) normalise with a collecting worker's statistics, not
        # fresh ones (observations at mean 0 and std 1 would be far from what the policy learned on)
        self.workers.on_join = functools.partial(pass_on, self.workers, get="running_statistics", put="adopt_statistics", control=True)
        # run.eval_parallel: a remote twin of the local worker as it is when it does not collect (its test envs seeded alike)
        self._evaluator_factory = functools.partial(
            _make_collection_worker, worker_kwargs=worker_kwargs, numbering=numbering, local_collects=False, set_generation=seed_generation
        )
        self.evaluator = Evaluator(self._evaluator_factory)  # its actor starts with the first start_evaluation()
        self._weights: tuple[int, Any] | None = None  # (version, object ref) of the newest weights
        self._resend = False  # a checkpoint was loaded: the next sync sends its weights whatever their version
        self._pending: dict[Any, tuple[Any, float]] = {}  # asynchronous: rollout ref -> (worker, deadline)
        self._idle: list[Any] = []  # asynchronous: workers to restart at the next collect()
        self._version = 0  # of the newest weights given to sync_weights
        self._round = 0
        self.dropped_batches = 0
        self.preempted_batches = 0
        self.lost_batches = 0
        self._reported_counts = (0, 0, 0)  # (dropped, preempted, lost) at the last collect()'s report
        self._retiring: set[Any] = set()  # asynchronous: removed workers whose last rollout is under way
        self._spent: list[dict[str, Any]] = []  # asynchronous: the infos of rollouts dropped for policy lag
        #: remote workers' normaliser statistics merged over all of them (``obs_rms``, ``ret_rms``;
        #: empty until a rollout reports some): sent with every rollout asked for, so that every
        #: worker normalises alike (ARCHITECTURE.md, "Normalisation statistics across workers")
        self._merged = MergedStatistics()
        # collect() holds it: add_workers/remove_workers from another thread wait for the round's end
        self._lock = threading.RLock()

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

        With remote workers the info also counts what happened since the last collection:
        rollouts dropped for policy lag, preempted, or lost with a dead worker (``dropped_batches``,
        ``preempted_batches``, ``lost_batches``: a loss found by a checkpoint in between counts
        here too), workers replaced since the last collection
        (``worker_restarts``, and ``worker_replace_s``: how long replacements that joined took),
        and the workers active at its end (``healthy_workers``).
        """
        with self._lock:
            version = self._version
            if not self.remote:
                data, info = self.local_worker.collect_data()
                info = merge_collection_info([info], current_version=version)
                count_spent(info, self._spent)  # a checkpoint's rollouts under way, resumed without remote workers
                return [data], info
            results = self._collect_sync() if self.communication == "synchronous" else self._collect_async(version)
            info = merge_collection_info([i for _, i in results], current_version=version)
            count_spent(info, self._spent)
            # since the last report, wherever it was noticed: a death found by a checkpoint's
            # state_dict() between two collections loses its rollout all the same
            counts = (self.dropped_batches, self.preempted_batches, self.lost_batches)
            for key, now, before in zip(("dropped_batches", "preempted_batches", "lost_batches"), counts, self._reported_counts, strict=True):
                info[key] = now - before
            self._reported_counts = counts
            info.update(self.workers.report())  # restarts since the last report, wherever the death was found
            info["healthy_workers"] = len(self.workers.remote_workers)
            if self.inference is not None:
                served = self.inference.pop_metrics()
                info["worker_restarts"] = info.get("worker_restarts", 0) + served.pop("server_restarts")  # a server is a worker
                info.update(served)
            return [to_tensors(d) for d, _ in results], info  # a thin worker's arrive as numpy

    def _collect_sync(self) -> list[tuple[dict[str, torch.Tensor], dict[str, Any]]]:
        ws = self.workers
        results: list[tuple[dict[str, torch.Tensor], dict[str, Any]]] = []
        while not results:  # a round in which every worker died is asked again of their replacements
            ws.poll()  # replacements and added workers that are up join this round
            ws.wait_for_active()
            version, weights = self._weights_ref()
            self._round += 1
            statistics = self._merged.state()  # empty before any came in: given it, empty or not, a worker reports what it takes in
            pending = {ws.call(w, "collect_data", weights, version, self._round, statistics): w for w in ws.remote_workers}
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

    def _take(self, ref: Any, worker: Any, results: list[Any]) -> bool:
        """Append the result of ``ref`` to ``results``; a dead worker is replaced instead."""
        ok, value = self.workers.try_get(ref)
        if ok:
            self._merged.merge(value[1].get("new_statistics", {}))  # a rollout dropped for policy lag was normalised all the same
            results.append(value)
        else:
            self._lose(worker, value)
        return ok

    def _lose(self, worker: Any, reason: str) -> None:
        """Count the rollout in flight from ``worker`` as lost and have it replaced."""
        self.lost_batches += 1
        self._retiring.discard(worker)
        self.workers.fail(worker, reason)

    def _collect_async(self, version: int) -> list[tuple[dict[str, torch.Tensor], dict[str, Any]]]:
        ws = self.workers
        if not self._pending and not self._idle:
            self._idle = list(ws.remote_workers)
        # workers whose rollout was taken last time restart now, with the weights of the
        # update made from it: restarting them before that update would add a version of lag
        for worker in [*self._idle, *ws.poll()]:
            self._submit(worker)
        self._idle = []
        while True:
            if not self._pending:  # every worker died (or left): wait for one, then put all to work
                ws.wait_for_active()
                for worker in ws.remote_workers:
                    self._submit(worker)
                continue
            first_deadline = min(deadline for _, deadline in self._pending.values())
            starting = ws.starting
            ready, _ = ws.wait([*self._pending, *starting], timeout=_left(first_deadline))
            if not ready:  # the oldest call is overdue: its worker is dead
                overdue = [ref for ref, (_, deadline) in self._pending.items() if deadline <= first_deadline]
                for ref in overdue:
                    self._lose(self._pending.pop(ref)[0], "no answer within scheme.worker_timeout_s")
                continue
            if ready[0] in starting:  # a replacement (or an added worker) is up: put it to work
                for worker in ws.poll():
                    self._submit(worker)
                continue
            worker, _ = self._pending.pop(ready[0])
            results: list[Any] = []
            if not self._take(ready[0], worker, results):
                continue
            data, info = results[0]
            retiring = worker in self._retiring
            if retiring:  # taken out by remove_workers(): its last rollout still counts
                self._retiring.discard(worker)
                ws.kill(worker)
            if self.max_policy_lag is not None and version - info["policy_version"] > self.max_policy_lag:
                self.dropped_batches += 1
                self._spent.append(info)
                if not retiring:
                    self._submit(worker)
                continue
            if not retiring:
                self._idle.append(worker)
            return [(data, info)]

    def _submit(self, worker: Any) -> None:
        version, weights = self._weights_ref()
        self._pending[self.workers.call(worker, "collect_data", weights, version, None, self._merged.state())] = (worker, self._deadline())

    def _deadline(self) -> float:
        timeout = self.workers.fault.timeout_s
        return math.inf if timeout is None else time.monotonic() + timeout

    def _weights_ref(self) -> tuple[int, Any]:
        if self._weights is None:
            raise RuntimeError("sync_weights() must be called before the first collect()")
        return self._weights

    # ---------------------------------------------------------------------- elasticity

    def add_workers(self, num: int) -> None:
        """Start ``num`` more remote collection workers (new indices, so new seeds). They join
        the first round (synchronous) or get a rollout to collect (asynchronous) once they are up,
        with the weights of that moment. Safe to call from another thread while training runs:
        it waits for the collection in progress to end.

        :raises ValueError: on a set without remote workers (its local worker collects).
        """
        with self._lock:
            self.workers.add(num)

    def remove_workers(self, num: int) -> None:
        """Take ``num`` remote collection workers out (the newest first; at least one stays).

        A removed worker's rollout under way (asynchronous collection) is still received and
        used; then its process ends. Like :meth:`add_workers`, safe from another thread.

        :raises ValueError: when ``num`` would leave no remote worker.
        """
        with self._lock:
            pending = {w for w, _ in self._pending.values()}
            for worker in self.workers.remove(num):
                self._idle = [w for w in self._idle if w != worker]
                if worker in pending:
                    self._retiring.add(worker)
                else:
                    self.workers.kill(worker)

    @property
    def num_remote_workers(self) -> int:
        """Remote collection workers, active or starting (the size the set is heading for)."""
        return len(self.workers.remote_workers) + len(self.workers.starting)

    def sync_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Make ``weights`` (policy ``version``) the ones the next rollouts are collected with.

        Remote workers read them from the object store, where they are put once per version;
        a local worker that does not collect is left alone (evaluation sets its own weights).
        With central inference the servers get them, before this returns, and the workers'
        calls carry none.
        """
        self._version = version
        if not self.remote:
            self.local_worker.set_weights(weights, version)
        elif self.inference is not None:
            if self._weights is None or self._resend or version - self._weights[0] >= self.weight_sync_every:
                self.inference.set_weights(weights, version)
                self._weights = (version, None)
        elif self._weights is None or self._resend or self._weights[0] != version:
            self._weights = (version, self.workers.put(weights))
        self._resend = False

    # -------------------------------------------------------------------- evaluation

    def evaluate(
        self, num_episodes: int, deterministic: bool = True, on_episode: Callable[[list[float]], None] | None = None,
        recorder: Any = None,
    ) -> list[float]:
        with self._lock:
            self._take_remote_statistics()
            return self.local_worker.evaluate(num_episodes, deterministic, on_episode, recorder)

    def start_evaluation(self, weights: dict[str, torch.Tensor], version: int, num_episodes: int, deterministic: bool = True) -> None:
        """Start :meth:`evaluate`'s episodes of ``weights`` on the evaluation worker (a Ray actor,
        made on first use) and return at once: :meth:`evaluation_ready`, :meth:`evaluation_result`."""
        with self._lock:
            normalization = self.normalization_state()
        self.evaluator.start(EvaluationRequest(weights, version, normalization, num_episodes, deterministic))

    def evaluation_ready(self) -> bool:
        """Whether the evaluation :meth:`start_evaluation` started has finished."""
        return self.evaluator.ready()

    def evaluation_result(self) -> dict[str, Any]:
        """The started evaluation's ``returns``, ``successes`` and ``duration_s``, waiting for it."""
        return self.evaluator.result()

    def acting_envs(self) -> Any:
        """The local worker's envs carrying the training observation statistics (a remote
        worker's, when the local one does not collect): what it acts on outside rollouts with."""
        with self._lock:
            self._take_remote_statistics()
            return self.local_worker.acting_envs()

    def normalization_state(self) -> dict[str, Any] | None:
        """The training observation statistics: the local worker's when it collects, else the
        remote workers' merged (before any came in, a remote worker's own); a remote gradient
        worker's, :attr:`statistics_from`, when no worker of this set collects. None without
        normalisation."""
        if self.statistics_from is not None:
            return self.statistics_from()
        if not self.remote:
            return self.local_worker.normalization_state()
        with self._lock:  # the merge changes with each rollout taken
            if "obs_rms" in self._merged:
                return self._merged.state()["obs_rms"]
        return self._ask_any("normalization_state")

    def running_statistics(self) -> dict[str, Any]:
        """The normalisers' statistics of this set (see
        :meth:`VecEnv.running_statistics <pytorchrl.envs.vec_env.VecEnv.running_statistics>`):
        the local worker's, or the remote workers' merged (before any came in, a remote worker's
        own; empty without normalisation or without an answer)."""
        if not self.remote:
            return self.local_worker.running_statistics()
        with self._lock:
            merged = self._merged.state()
        return merged or first_answer(self.workers, "running_statistics", control=True)[1] or {}

    def adopt_statistics(self, statistics: dict[str, Any]) -> None:
        """Every collecting worker of this set normalises with ``statistics`` from here on (a
        remote gradient worker that replaced a dead one takes a surviving one's)."""
        if not self.remote:
            self.local_worker.adopt_statistics(statistics)
            return
        with self._lock:
            self._merged.set(statistics)
        ws = self.workers
        for ref in [ws.call(w, "adopt_statistics", statistics) for w in ws.remote_workers]:
            ws.try_get(ref)  # a worker that dies meanwhile is found, and replaced, at its next call

    def take_new_statistics(self) -> dict[str, Any]:
        """What this set's normalisers took in since the last call: its merge's (remote workers),
        or its collecting local worker's; a remote gradient worker reports it to the update
        worker, which merges every replica's (ARCHITECTURE.md, "Normalisation statistics across
        workers")."""
        if not self.remote:
            return self.local_worker.take_new_statistics()
        with self._lock:
            return self._merged.take_new()

    def adopt_merged_statistics(self, merged: dict[str, Any]) -> None:
        """Go on from ``merged``, the update worker's merge of every replica's reports, plus what
        this set took in since it last reported; remote workers take it with their next rollout."""
        if not self.remote:
            self.local_worker.adopt_merged_statistics(merged)
            return
        with self._lock:
            self._merged.rebase(merged)

    def _take_remote_statistics(self) -> None:
        """When the local worker has no train envs, give it a collecting worker's observation
        statistics (evaluation and predict act with them)."""
        if self.remote or self.statistics_from is not None:
            self.local_worker.load_normalization(self.normalization_state())

    def _ask_any(self, method: str) -> Any:
        """``method``'s answer from the first remote worker that gives one, beside any
        collection in progress (dead ones are replaced; with none active, waits for one)."""
        while True:
            self.workers.wait_for_active()
            for worker in list(self.workers.remote_workers):
                ok, value = self._ask(worker, method, control=True)
                if ok:
                    return value

    def _ask(self, worker: Any, method: str, *, control: bool = False) -> tuple[bool, Any]:
        """``(True, worker.method())`` (``control``: beside a collection in progress, else
        after it), or ``(False, reason)`` when the worker is dead, or gives no answer within
        ``scheme.worker_timeout_s`` (a rollout under way that hangs: a checkpoint waited on it
        forever): it is then replaced, and the rollout it had under way (asynchronous
        collection) counted as lost."""
        ref = self.workers.call(worker, method, control=control)
        ready, _ = self.workers.wait([ref], timeout=_left(self._deadline()))
        ok, value = self.workers.try_get(ref) if ready else (False, f"no answer to {method} within scheme.worker_timeout_s")
        if not ok:
            self._forget(worker)
            self.workers.fail(worker, value)
        return ok, value

    def _forget(self, worker: Any) -> None:
        """Drop a dead worker from the asynchronous bookkeeping (its rollout is lost)."""
        for ref, (w, _) in list(self._pending.items()):
            if w == worker:
                del self._pending[ref]
                self.lost_batches += 1
        self._idle = [w for w in self._idle if w != worker]
        self._retiring.discard(worker)

    # ------------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        """The local worker's state, each active remote worker's with its index (a worker that
        dies meanwhile is left out: its replacement starts afresh), and the set's layout (which
        workers it holds, those added or taken out while training included)."""
        with self._lock:
            state: dict[str, Any] = {"local": self.local_worker.state_dict()}
            if self.remote:
                asked = [(self.workers.index_of(w), self._ask(w, "state_dict")) for w in list(self.workers.remote_workers)]
                state["remote"] = [value for _, (ok, value) in asked if ok]
                state["remote_indices"] = [index for index, (ok, _) in asked if ok]  # whose each state is
                state["layout"] = self.workers.layout()  # the workers added or taken out while training, too
                # asynchronous: the rollouts under way ended before those states were read
                under_way = [info for _, info in answers(self.workers, list(self._pending))]
                reports = under_way_reports(under_way)
                if self._merged or reports:  # with what of it a remote gradient worker's set reported up
                    state["merged_statistics"], state["reported_statistics"] = self._merged.state(*reports), self._merged.reported()
                if spent := spent_state([*self._spent, *under_way]):
                    state["spent"] = spent
            if self.evaluator.in_use:
                state["evaluator"] = self.evaluator.state_dict()
            return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self.local_worker.load_state_dict(state["local"])
            if "layout" in state:
                self._pending.clear()  # rollouts under way are not the loaded run's (a worker may end now)
                self.workers.restore_layout(state["layout"])
            for worker, worker_state in paired(self.workers, state.get("remote", []), state.get("remote_indices")):
                self.workers.get(self.workers.call(worker, "load_state_dict", to_arrays(worker_state) if self.thin else worker_state))
            # a checkpoint from before the merge: the first remote worker's own go on as the merged
            # ones; one whose local worker collected (resumed with remote workers): the local one's.
            # All of it counts as reported up: a remote gradient worker's set reports in the step
            # that merged, before any checkpoint
            self._merged.set(state.get("merged_statistics") or next(
                ({k: v for k, v in w["envs"].items() if k in ("obs_rms", "ret_rms")}
                 for w in [*state.get("remote", []), state["local"]] if isinstance(w.get("envs"), dict)), {}
            ), state.get("reported_statistics") if state.get("merged_statistics") else None)
            self._spent = [dict(done) for done in state.get("spent", [])]  # the checkpoint's rollouts under way: the next collection counts them
            # the next sync sends the loaded weights whatever their version: a live run that loads
            # an older (or same-version) checkpoint must not go on acting with the weights it had
            self._resend = True
            # rollouts under way from before the load are not the loaded run's: every worker starts
            # a new one, and one removed meanwhile ends now
            self._pending.clear()
            self._idle = []
            for worker in self._retiring:
                self.workers.kill(worker)
            self._retiring.clear()
            if "evaluator" in state:
                self.evaluator.load_state_dict(state["evaluator"])

    def close(self) -> None:
        with self._lock:
            for worker in self._retiring:
                self.workers.kill(worker)
            self._retiring.clear()
            self.workers.close()
            self.evaluator.close()


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
        "env_restarts": sum(i.get("env_restarts", 0) for i in infos),
    }


def _make_collection_worker(
    index: int,
    *,
    local: bool,
    worker_kwargs: dict[str, Any],
    numbering: CollectorNumbering,
    local_collects: bool,
    generation: int = 0,
    set_generation: int = 0,
    policy_factory: Callable[[int], Any] | None = None,
) -> CollectionWorker:
    # the collecting workers are numbered by `numbering`: the local one when it collects, else the
    # remote ones (index 1 -> the set's first number), so one remote worker collects what a local
    # one would; a replacement (generation > 0) keeps the number and gets fresh seeds
    kwargs = generation_kwargs(worker_kwargs, generation, set_generation)
    if not local and policy_factory is not None:  # central inference: remote workers hold no network
        kwargs["policy_factory"] = policy_factory
    return CollectionWorker(numbering(index), collect=local_collects if local else True, **kwargs)


def _left(deadline: float) -> float | None:
    """Seconds until ``deadline`` for ``ray.wait`` (None: no deadline)."""
    return None if deadline == math.inf else max(0.0, deadline - time.monotonic())
