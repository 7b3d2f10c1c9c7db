"""On-policy storages."""

from pytorchrl.agent.storages.on_policy.gae_buffer import GAEBuffer, compute_gae
from pytorchrl.agent.storages.on_policy.rollout import RolloutStorage
from pytorchrl.agent.storages.on_policy.vtrace_buffer import VTraceBuffer, compute_vtrace

__all__ = ["GAEBuffer", "RolloutStorage", "VTraceBuffer", "compute_gae", "compute_vtrace"]
