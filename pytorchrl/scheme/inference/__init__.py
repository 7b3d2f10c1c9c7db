"""Central batched inference (SEED mode): an :class:`InferenceServer` acts for many collection
workers, each of which acts through a :class:`RemotePolicy` (DESIGN.md section 2)."""

from pytorchrl.scheme.inference.client import RemotePolicy, direct_call
from pytorchrl.scheme.inference.server import ActReply, InferenceServer, MissingStateError, PendingAct
from pytorchrl.scheme.inference.spec import NoisePart, PolicySpec, policy_spec

__all__ = [
    "ActReply", "InferenceServer", "MissingStateError", "NoisePart", "PendingAct", "PolicySpec", "RemotePolicy", "direct_call",
    "policy_spec",
]
