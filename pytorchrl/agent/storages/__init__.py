"""Storages: rollouts and replay buffers, and the return math that belongs to them (imported on
first use, :mod:`pytorchrl.utils.lazy`: a collection worker without torch records with
:mod:`.on_policy.recorder` alone)."""

from typing import TYPE_CHECKING

from pytorchrl.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from pytorchrl.agent.storages.on_policy import GAEBuffer, RolloutStorage, VTraceBuffer, compute_gae, compute_vtrace

__getattr__, __dir__ = lazy_exports(
    __name__, dict.fromkeys(("GAEBuffer", "RolloutStorage", "VTraceBuffer", "compute_gae", "compute_vtrace"), "pytorchrl.agent.storages.on_policy")
)

__all__ = ["GAEBuffer", "RolloutStorage", "VTraceBuffer", "compute_gae", "compute_vtrace"]
