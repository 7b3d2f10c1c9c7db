"""On-policy storages (imported on first use, :mod:`pytorchrl.utils.lazy`)."""

from typing import TYPE_CHECKING

from pytorchrl.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from pytorchrl.agent.storages.on_policy.gae_buffer import GAEBuffer, compute_gae
    from pytorchrl.agent.storages.on_policy.rollout import RolloutStorage
    from pytorchrl.agent.storages.on_policy.vtrace_buffer import VTraceBuffer, compute_vtrace

__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("GAEBuffer", "compute_gae"), "pytorchrl.agent.storages.on_policy.gae_buffer"),
    "RolloutStorage": "pytorchrl.agent.storages.on_policy.rollout",
    **dict.fromkeys(("VTraceBuffer", "compute_vtrace"), "pytorchrl.agent.storages.on_policy.vtrace_buffer"),
})

__all__ = ["GAEBuffer", "RolloutStorage", "VTraceBuffer", "compute_gae", "compute_vtrace"]
