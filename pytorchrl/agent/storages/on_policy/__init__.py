"""On-policy storages."""

from pytorchrl.agent.storages.on_policy.gae_buffer import GAEBuffer, compute_gae

__all__ = ["GAEBuffer", "compute_gae"]
