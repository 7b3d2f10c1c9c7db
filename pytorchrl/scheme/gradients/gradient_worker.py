"""The gradient worker: turns collected rollouts into gradients, minibatch by minibatch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from pytorchrl.agent.algorithms.base import check_parts, check_shared_settings
from pytorchrl.scheme.base.infos import merge_step_infos
from pytorchrl.scheme.base.worker_set import replica_ordinal
from pytorchrl.scheme.collection.collection_worker_set import CollectionWorkerSet
from pytorchrl.utils.runtime import configure_process
from pytorchrl.utils.seeding import GRADIENT_ROLE, TorchStream, derive_seed


class GradientWorker:
    """Owns a :class:`CollectionWorkerSet`, an algorithm and a storage.

    Each :meth:`step` computes the gradient of one minibatch. When the current round's
    minibatches are used up (or the algorithm stops the round early, e.g. on target KL), it first
    gives its collection workers the current weights and gathers a new round of data.

    :param index: worker index (0: local; remote ones from 1). Keys the worker's own torch
        stream (minibatch shuffling), which remote worker 1 shares with a lone local worker.
    :param col_workers_factory: ``(**overrides) -> CollectionWorkerSet``.
    :param actor_factory: ``(device) -> actor``.
    :param algo_factory: ``(actor, device) -> Algorithm``.
    :param storage_factory: ``(device=...) -> storage``.
    :param device: torch device for gradients.
    :param torch_threads: ``torch.set_num_threads`` for this process.
    :param seed: the run seed.
    :param col_overrides: keyword overrides for ``col_workers_factory`` (e.g. ``index_offset``,
        or ``evaluation_only`` for a local worker that only holds the master weights).
    :param report_statistics: report what the collection workers' normalisers took in with the
        first step of each round (``info["new_statistics"]``), for the update worker to merge
        with the other replicas' (a remote gradient worker).
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
        seed: int = 0,
        col_overrides: dict[str, Any] | None = None,
        report_statistics: bool = False,
    ) -> None:
        configure_process(torch_threads)
        self.index = index
        self.report_statistics = report_statistics
        self.device = torch.device(device)
        self._stream = TorchStream(derive_seed(seed, GRADIENT_ROLE, replica_ordinal(index)))
        self.col_workers = col_workers_factory(**(col_overrides or {}))
        try:  # parts that do not fit are refused here: the collection workers started must not outlive the error
            self.actor = actor_factory(self.device)
            algorithm_class = getattr(algo_factory, "func", None)  # create_factory's partial of the class
            check_parts(algorithm_class, actor=self.actor)  # before the algorithm reads the actor
            self.algo = algo_factory(self.actor, self.device)
            self.storage = storage_factory(device=self.device)
            check_parts(algorithm_class, storage=self.storage)
            check_shared_settings(self.algo, self.storage, getattr(algo_factory, "keywords", {}))
        except BaseException:
            self.col_workers.close()
            raise
        self._batches: Iterator[dict[str, torch.Tensor]] | None = None
        self._remaining = 0

    def step(
        self,
        return_gradients: bool = True,
        *,
        weights: dict[str, torch.Tensor] | None = None,
        version: int | None = None,
        gradients: torch.Tensor | None = None,
        progress: float | None = None,
        statistics: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor | None, dict[str, Any]]:
        """Gradients of the next minibatch (left in ``.grad`` if not ``return_gradients``) and info.

        A remote worker is told what changed since its last step: new ``weights`` of policy
        ``version`` (centralised updates), or the averaged ``gradients`` to apply itself first
        (decentralised updates), the training ``progress`` for schedules, and, before a step
        that starts a round, the normaliser ``statistics`` merged over every replica, which its
        collection workers go on from (:meth:`CollectionWorkerSet.adopt_merged_statistics`).

        Info holds the algorithm's diagnostics, ``num_samples`` (the minibatch's size),
        ``policy_version`` (of the weights the gradient was computed with), ``round_end`` (the
        round's last minibatch), and, on the first step of a round, the collection info (and,
        with ``report_statistics``, ``new_statistics``).
        Skipped steps (e.g. target KL) return no gradients.
        """
        if gradients is not None:
            self.algo.apply_gradients(gradients)
        if weights is not None:
            self.algo.set_weights(weights, version)
        if progress is not None:
            self.algo.set_progress(progress)
        if statistics:
            self.col_workers.adopt_merged_statistics(statistics)
        info: dict[str, Any] = {}
        with self._stream.active():
            if self._remaining == 0 or self.algo.stop_round:
                info.update(self._new_rounds())
            start = time.perf_counter()
            assert self._batches is not None
            batch = next(self._batches)
            self._remaining -= 1
            info.update(self.algo.compute_gradients(batch))
            if self.storage.uses_priorities:  # prioritized replay: the minibatch's new TD errors
                priorities = self.algo.pop_priorities()
                if priorities is not None:
                    self.storage.update_priorities(batch["indices"], priorities)
        info["gradient_time_s"] = time.perf_counter() - start
        info["round_end"] = self._remaining == 0 or self.algo.stop_round
        info["num_samples"] = _batch_size(batch, self.algo.burn_in)
        info["policy_version"] = self.algo.version
        grads = self.algo.get_gradients() if return_gradients and not info.get("skipped") else None
        return grads, info

    def _new_rounds(self) -> dict[str, Any]:
        """Collect rounds until one gives minibatches (a replay buffer may still be filling up)."""
        infos = [self._new_round()]
        while self._remaining == 0:
            infos.append(self._new_round())
        if len(infos) == 1:
            merged = infos[0]
        else:
            merged = merge_step_infos(infos)
            merged["healthy_workers"] = infos[-1].get("healthy_workers")  # a state, not a count
            # rounds one after another: their collections' times add up (merging replicas takes the longest)
            merged["collect_time_s"] = sum(i.get("collect_time_s") or 0.0 for i in infos)
        if self.report_statistics:
            new = self.col_workers.take_new_statistics()
            if new:
                merged["new_statistics"] = new
        return merged

    def _new_round(self) -> dict[str, Any]:
        self.algo.stop_round = False
        self.storage.after_gradients()
        self.algo.set_warmup(self.storage.warming_up)  # off-policy start_steps: before the weights go out
        # a local collection worker copies the weights into its own actor: no copy on the way
        weights = self.algo.get_weights(acting=True, copy=self.col_workers.remote)
        self.col_workers.sync_weights(weights, self.algo.version)
        rollouts, info = self.col_workers.collect()
        for data in rollouts:
            self.storage.add_data(data)
        self.storage.set_progress(self.algo.progress)  # e.g. prioritized replay's importance-sampling exponent
        self.storage.before_gradients()
        self.algo.prepare_round(self.storage)
        size = self.algo.minibatch_size  # None (A2C, IMPALA's default): the whole batch, whatever share of it is valid
        self._remaining = self.storage.num_batches(size) * self.algo.num_epochs
        self._batches = self.storage.generate_batches(minibatch_size=size, num_epochs=self.algo.num_epochs)
        info["explained_variance"] = self.storage.explained_variance()
        return info

    def set_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.algo.set_weights(weights, version)

    def get_weights(self) -> dict[str, torch.Tensor]:
        return self.algo.get_weights()

    def apply_gradients(self, gradients: torch.Tensor) -> None:
        """Step this replica's optimizer on ``gradients`` (decentralised updates)."""
        self.algo.apply_gradients(gradients)

    def add_collection_workers(self, num: int) -> None:
        """See :meth:`CollectionWorkerSet.add_workers`."""
        self.col_workers.add_workers(num)

    def remove_collection_workers(self, num: int) -> None:
        """See :meth:`CollectionWorkerSet.remove_workers`."""
        self.col_workers.remove_workers(num)

    def num_collection_workers(self) -> int:
        return self.col_workers.num_remote_workers

    def running_statistics(self) -> dict[str, Any]:
        """Its collection workers' normalisers' statistics (:meth:`CollectionWorkerSet.running_statistics`)."""
        return self.col_workers.running_statistics()

    def adopt_statistics(self, statistics: dict[str, Any]) -> None:
        """Its collection workers normalise with ``statistics`` from here on (a replacement's)."""
        self.col_workers.adopt_statistics(statistics)

    def normalization_state(self) -> dict[str, Any] | None:
        """This worker's collection workers' observation statistics (see :meth:`CollectionWorkerSet.normalization_state`)."""
        return self.col_workers.normalization_state()

    def load_algorithm_state(self, state: dict[str, Any], hyperparameters: dict[str, Any] | None = None) -> None:
        """Take the master's weights, optimizer state and version (identical replicas), and the
        tunable hyper-parameters the master changed since the start (the state holds only the
        learning rate)."""
        self.algo.load_state_dict(state)
        if hyperparameters:
            self.algo.set_hyperparameters(hyperparameters)

    def device_name(self) -> str:
        """Where the replica computes (``cuda:0``, ``cpu``)."""
        return str(next(self.actor.parameters()).device)

    def state_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algo.state_dict(), **self.collection_state_dict()}

    def collection_state_dict(self) -> dict[str, Any]:
        """What a remote worker keeps beyond the master's algorithm state (and its replay
        buffer, when the storage is told to checkpoint it)."""
        state = {"collection": self.col_workers.state_dict(), "gradient_rng": self._stream.state}
        buffer = self.storage.buffer_state()
        if buffer is not None:
            state["replay_buffer"] = buffer
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "algorithm" in state:
            self.algo.load_state_dict(state["algorithm"])
        self.col_workers.load_state_dict(state["collection"])
        if "gradient_rng" in state:
            self._stream.state = state["gradient_rng"]
        if "replay_buffer" in state:
            self.storage.load_buffer_state(state["replay_buffer"])
        self._remaining = 0

    def close(self) -> None:
        self.col_workers.close()


def _batch_size(batch: dict[str, torch.Tensor], burn_in: int = 0) -> int:
    """The steps a minibatch's loss is a mean over, which weigh its gradient in the replicas'
    average: shuffled transitions, or the valid steps of time-major sequences; of replayed
    windows (R2D2, recurrent SAC), those after the ``burn_in``, which only warms the state up."""
    if "valid" in batch:
        return int(batch["valid"][burn_in:].sum())
    return int(next(iter(batch.values())).shape[0])
