"""Storages: rollouts and replay buffers, and the return math that belongs to them."""

from pytorchrl.agent.storages.on_policy import GAEBuffer, RolloutStorage, VTraceBuffer, compute_gae, compute_vtrace

__all__ = ["GAEBuffer", "RolloutStorage", "VTraceBuffer", "compute_gae", "compute_vtrace"]
