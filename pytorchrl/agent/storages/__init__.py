"""Storages: rollouts and replay buffers, and the return math that belongs to them."""

from pytorchrl.agent.storages.on_policy import GAEBuffer, compute_gae

__all__ = ["GAEBuffer", "compute_gae"]
