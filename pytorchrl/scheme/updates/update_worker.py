"""The update worker: the master weights, the optimizer step and the policy version."""

from __future__ import annotations

import time
from typing import Any

from pytorchrl.scheme.gradients.gradient_worker_set import GradientWorkerSet


class UpdateWorker:
    """Applies gradients to the master copy of the weights and versions them.

    The master algorithm is the local gradient worker's: with local workers only, gradients are
    applied where they were computed, and nothing is copied.

    :param grad_workers: the gradient workers.
    :param update_execution: ``centralised`` | ``decentralised``.
    """

    def __init__(self, grad_workers: GradientWorkerSet, *, update_execution: str = "centralised") -> None:
        self.grad_workers = grad_workers
        self.update_execution = update_execution
        self.algo = grad_workers.local_worker.algo

    def step(self) -> dict[str, Any]:
        """Compute and apply one gradient; returns the merged info."""
        _, info = self.grad_workers.local_worker.step(return_gradients=False)
        start = time.perf_counter()
        if not info.get("skipped"):
            self.algo.apply_gradients(None)
        info["apply_time_s"] = time.perf_counter() - start
        info["policy_version"] = self.algo.version
        return info

    def set_progress(self, progress: float) -> None:
        self.algo.set_progress(progress)

    def state_dict(self) -> dict[str, Any]:
        return {"local_gradient_worker": self.grad_workers.local_worker.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.grad_workers.local_worker.load_state_dict(state["local_gradient_worker"])
