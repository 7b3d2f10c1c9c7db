"""The update worker: the master weights, the optimizer step and the policy version."""

from __future__ import annotations

import time
from typing import Any

import torch

from pytorchrl.scheme.base.infos import count_spent, merge_step_infos, spent_state, under_way_reports
from pytorchrl.scheme.base.worker_set import answers, first_answer, paired
from pytorchrl.scheme.gradients.gradient_worker_set import GradientWorkerSet


class UpdateWorker:
    """Applies gradients to the master copy of the weights and versions them.

    The master algorithm is the local gradient worker's. With local workers only, gradients are
    applied where they were computed, and nothing is copied. With remote gradient workers:

    * ``synchronous`` gradients: every worker computes one minibatch gradient; their
      sample-weighted average is applied. ``centralised``: the master applies it and the new
      weights go out through the object store (put once, read by all) with the next step.
      ``decentralised``: the average goes out instead and every worker applies it to its own
      replica (same start, same optimizer, same gradients: identical weights), so weights never
      travel after the first step.
    * ``asynchronous`` gradients (centralised only): every worker always has a gradient under
      way; each is applied as it arrives and that worker continues from the new weights (A3C
      style). ``gradient_staleness`` counts the versions applied since its weights were sent.

    Each replica reports what its collection workers' normalisers took in with the first step of
    a round; the reports are merged (:meth:`GradientWorkerSet.merge_statistics`) and the merge
    goes with each replica's next step that starts a round, so that every replica normalises
    alike (ARCHITECTURE.md, "Normalisation statistics across workers").

    :param grad_workers: the gradient workers.
    :param update_execution: ``centralised`` | ``decentralised``.
    """

    def __init__(self, grad_workers: GradientWorkerSet, *, update_execution: str = "centralised") -> None:
        self.grad_workers = grad_workers
        self.update_execution = update_execution
        self.algo = grad_workers.local_worker.algo
        self._workers = grad_workers.workers
        self._progress: float | None = None
        self._replicas_synced = False
        self._weights: tuple[int, Any] | None = None
        self._pending: dict[Any, Any] = {}
        self._average: Any = None  # decentralised: the averaged gradient replicas apply next
        self.lost_batches = 0  # gradients lost with a dead gradient worker
        self._hyperparameters: dict[str, Any] = {}  # changed since the start: every replica takes them with the master's state
        self._starts_round: dict[Any, bool] = {}  # whether a replica's next step starts a round (unknown: yes)
        self._healthy: dict[Any, int] = {}  # each replica's collection workers active at its last collection
        self._statistics: tuple[int, Any] | None = None  # (version, packed) of the replicas' merged statistics
        self._spent: list[dict[str, Any]] = []  # the infos of steps whose gradients were dropped (_drain)

    @property
    def remote(self) -> bool:
        return self._workers.remote

    def step(self) -> dict[str, Any]:
        """Compute and apply one gradient (one per worker, averaged, when synchronous); returns the merged info."""
        if not self.remote:
            return self._step_local()
        lost = self.lost_batches
        synchronous = self.grad_workers.communication == "synchronous"
        joined = self._workers.poll() + self._workers.wait_for_active()
        if joined and synchronous:
            self._replicas_synced = False  # every replica restarts from the master's state
        for worker in joined if self._replicas_synced else []:  # asynchronous: the newcomers alone
            if self._load_master(worker):  # one that died meanwhile has no step to lose
                self._submit(worker)
        if not self._replicas_synced:
            self._drain()
            for worker in list(self._workers.remote_workers):
                self._load_master(worker)
            self._replicas_synced, self._weights, self._average = True, None, None
        info = self._step_sync() if synchronous else self._step_async()
        if info.get("healthy_workers") is not None:  # the run's, not the replicas' that collected in this step (one, asynchronous)
            info["healthy_workers"] = sum(self._healthy.get(w, 0) for w in self._workers.remote_workers)
        count_spent(info, self._spent)
        info["lost_batches"] = info.get("lost_batches", 0) + self.lost_batches - lost
        events = self._workers.report()  # gradient workers replaced since the last step
        info["worker_restarts"] = info.get("worker_restarts", 0) + events["worker_restarts"]
        if "worker_replace_s" in events:  # beside the collection workers' own, if any were replaced too
            info["worker_replace_s"] = (info.get("worker_replace_s", events["worker_replace_s"]) + events["worker_replace_s"]) / 2
        return info

    def _load_master(self, worker: Any) -> bool:
        """Give a gradient worker the master's weights, optimizer state and version, and the
        hyper-parameters changed since the start (:meth:`set_hyperparameters`); False when it
        is dead (it is then replaced)."""
        ok, reason = self._workers.try_get(self._workers.call(worker, "load_algorithm_state", self.algo.state_dict(), self._hyperparameters))
        if not ok:
            self._workers.fail(worker, reason)
        return ok

    def _step_local(self) -> dict[str, Any]:
        _, info = self.grad_workers.local_worker.step(return_gradients=False)
        if "env_steps" in info:  # a checkpoint's steps under way, resumed without remote gradient workers
            count_spent(info, self._spent)
        start = time.perf_counter()
        if not info.get("skipped") and not self.algo.apply_gradients(None):
            info["nonfinite_updates"] = 1
        info["apply_time_s"] = time.perf_counter() - start
        info["policy_version"] = self.algo.version
        return info

    def _step_sync(self) -> dict[str, Any]:
        ws = self._workers
        kwargs: dict[str, Any] = {"progress": self._progress}
        if self.update_execution == "decentralised":
            kwargs["gradients"] = self._average
        else:
            kwargs["weights"], kwargs["version"] = self._weights_ref()
        refs = {ws.call(w, "step", True, statistics=self._statistics_for(w), **kwargs): w for w in ws.remote_workers}
        results = []
        for ref, worker in refs.items():
            ok, value = ws.try_get(ref)
            if ok:
                self._take_report(worker, value[1])
                results.append(value)
            else:  # a dead gradient worker: the others' gradients make this step
                self._lose(worker, value)
        if not results:
            return {"skipped": 1.0, "round_end": False, "policy_version": self.algo.version}
        start = time.perf_counter()
        grads = [(g, i["num_samples"]) for g, i in results if g is not None]
        self._average = None
        applied = True
        if grads:
            total = sum(n for _, n in grads)
            average = torch.stack([g * (n / total) for g, n in grads]).sum(0)
            applied = self.algo.apply_gradients(average)  # decentralised replicas skip the same average alike
            self._past_warmup()
            if self.update_execution == "decentralised":
                self._average = ws.put(average, compress=True)
        info = merge_step_infos([i for _, i in results])
        if grads and not applied:
            info["nonfinite_updates"] = 1
        info["apply_time_s"] = time.perf_counter() - start
        info["policy_version"] = self.algo.version
        return info

    def _step_async(self) -> dict[str, Any]:
        ws = self._workers
        if not self._pending:
            for w in ws.remote_workers:
                self._submit(w)
        while True:
            if not self._pending:  # every replica died (one may between wait_for_active and here): no step
                return {"skipped": 1.0, "round_end": False, "policy_version": self.algo.version}
            ready, _ = ws.wait(list(self._pending))
            worker = self._pending.pop(ready[0])
            ok, value = ws.try_get(ready[0])
            if ok:
                break
            self._lose(worker, value)
        grads, info = value
        self._take_report(worker, info)
        start = time.perf_counter()
        info["gradient_staleness"] = self.algo.version - info["policy_version"]
        if grads is not None:
            if not self.algo.apply_gradients(grads, computed_at=info["policy_version"]):
                info["nonfinite_updates"] = 1
            self._past_warmup()
        self._submit(worker)
        info["apply_time_s"] = time.perf_counter() - start
        info["policy_version"] = self.algo.version
        return info

    def _past_warmup(self) -> None:
        """A replica sent a gradient, so its replay buffer held ``start_steps``: the master's actor,
        which no round of its own reaches, stops acting uniformly at random too (its evaluation,
        ``predict``, checkpoints and a replacement's state act with the policy)."""
        self.algo.set_warmup(False)

    def _submit(self, worker: Any) -> None:
        weights, version = self._weights_ref()
        call = self._workers.call(worker, "step", True, weights=weights, version=version, progress=self._progress, statistics=self._statistics_for(worker))
        self._pending[call] = worker

    def _drain(self) -> None:
        """Wait for the steps under way (asynchronous gradients) and drop their gradients, which
        were computed from weights every replica is about to leave; what their collections took
        counts all the same (:func:`count_spent`), and what their replicas' normalisers reported
        is merged (the replica has counted it as reported)."""
        for ref, worker in list(self._pending.items()):
            ok, value = self._workers.try_get(ref)
            if ok:
                self._take_report(worker, value[1])
                self._spent.extend(spent_state([value[1]]))  # what it counts, not the whole info
            else:
                self._lose(worker, value)
        self._pending.clear()

    def _lose(self, worker: Any, reason: str) -> None:
        """A gradient worker died with a step under way: its gradient is lost, it is replaced."""
        self.lost_batches += 1
        self._starts_round.pop(worker, None)
        self._healthy.pop(worker, None)
        self._workers.fail(worker, reason)

    def _take_report(self, worker: Any, info: dict[str, Any]) -> None:
        """Merge what a replica's normalisers took in (its step's ``new_statistics``) and note
        whether its next step starts a round."""
        new = info.pop("new_statistics", None)
        if new:
            self.grad_workers.merge_statistics(new)
        self._starts_round[worker] = bool(info.get("round_end"))
        if info.get("healthy_workers") is not None:  # None: a replica that collects itself
            self._healthy[worker] = info["healthy_workers"]

    def _statistics_for(self, worker: Any) -> dict[str, Any] | None:
        """The replicas' merged statistics for a replica whose next step starts a round (its
        collection workers collect with them), else None (nothing to send)."""
        if not self._starts_round.get(worker, True):
            return None
        version = self.grad_workers.statistics_version
        if self._statistics is None or self._statistics[0] != version:  # packed once per change, not per replica
            merged = self.grad_workers.merged_statistics()
            self._statistics = (version, self._workers.put(merged) if merged else None)
        return self._statistics[1]

    def _weights_ref(self) -> tuple[Any, int]:
        """The master weights in the object store, put once per version."""
        if self._weights is None or self._weights[0] != self.algo.version:
            self._weights = (self.algo.version, self._workers.put(self.algo.get_weights()))
        return self._weights[1], self._weights[0]

    def replica_weights(self) -> list[dict[str, torch.Tensor]]:
        """Every remote gradient worker's weights, once they have applied all that was sent."""
        if self.update_execution == "decentralised" and self._average is not None:
            self._workers.ask_all("apply_gradients", self._average)
            self._average = None
        return self._workers.ask_all("get_weights")

    def set_progress(self, progress: float) -> None:
        self.algo.set_progress(progress)
        self._progress = progress

    def set_hyperparameters(self, values: dict[str, Any]) -> None:
        """Change the tunable hyper-parameters of the master and of every remote gradient worker:
        before its next step each reloads the master's state (weights, optimizer, learning rate)
        and takes the values changed so far (their losses read ``clip_range``, ``ent_coef`` and
        the like, which that state does not carry), as a replacement does when it joins."""
        self.algo.set_hyperparameters(values)
        self._hyperparameters.update(values)
        self._replicas_synced = False

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"local_gradient_worker": self.grad_workers.local_worker.state_dict()}
        if self.remote:
            # a replica found dead is replaced and left out (its replacement starts afresh, as a
            # collection worker's does); its step under way is lost at the next step
            with self._workers.membership:  # the replicas' layouts and the count added to each agree (no resize between)
                answered = self._workers.ask_each("collection_state_dict")
                # the collection workers added to every replica while training, over the count each
                # was built with: a replica without a state in it, or a later replacement, is resized alike
                state["collectors_added"] = [self.grad_workers.collectors_configured, self.grad_workers.collectors_added]
            state["remote_gradient_workers"] = [value for _, value in answered]
            state["remote_gradient_indices"] = [index for index, _ in answered]  # whose each state is
            # asynchronous: the steps under way ended before those states were read
            under_way = [info for _, info in answers(self._workers, list(self._pending))]
            merged = self.grad_workers.merged_statistics(*under_way_reports(under_way))
            if merged:
                state["merged_statistics"] = merged
            if spent := spent_state([*self._spent, *under_way]):
                state["spent"] = spent
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.grad_workers.local_worker.load_state_dict(state["local_gradient_worker"])
        saved = state.get("remote_gradient_workers", [])
        pairs = paired(self._workers, saved, state.get("remote_gradient_indices"))
        for worker, worker_state in pairs:
            self._workers.get(self._workers.call(worker, "load_state_dict", worker_state))
        if self.remote and "collectors_added" in state:
            configured, added = state["collectors_added"]
            # a config that asks for another count than the checkpoint's was built with: its own count, as the replicas' sets keep it
            self.grad_workers.collectors_added = int(added) if int(configured) == self.grad_workers.collectors_configured else 0
            with_state = {id(w) for w, _ in pairs}
            self.grad_workers.resize_fresh([w for w in self._workers.remote_workers if id(w) not in with_state])
        if self.remote and "merged_statistics" in state:
            self.grad_workers.set_merged_statistics(state["merged_statistics"])
        elif self.remote:  # a checkpoint from before the merge: the first replica's statistics go on as the merge,
            # which every replica adopts as reported (its normalisers may count all they hold as not reported yet)
            merged = first_answer(self._workers, "running_statistics")[1] or {}
            self.grad_workers.set_merged_statistics(merged)
            if merged:
                self._workers.ask_all("adopt_statistics", merged)
        self._starts_round.clear()  # each replica's next step starts a round
        self._pending.clear()  # steps under way from before the load: theirs is not the loaded run's
        self._spent = [dict(done) for done in state.get("spent", [])]  # the checkpoint's steps under way: the next step counts them
        self._replicas_synced = False
