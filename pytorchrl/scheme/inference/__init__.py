"""Central batched inference (SEED mode): an :class:`InferenceServer` acts for many collection
workers, each of which acts through a :class:`RemotePolicy` (DESIGN.md section 2). Imported on
first use (:mod:`pytorchrl.utils.lazy`): a central-mode collection worker holds no torch."""

from typing import TYPE_CHECKING

from pytorchrl.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from pytorchrl.scheme.inference.client import RemotePolicy, direct_call
    from pytorchrl.scheme.inference.server import ActReply, InferenceServer, MissingStateError, PendingAct
    from pytorchrl.scheme.inference.spec import NoisePart, PolicySpec, policy_spec

__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("RemotePolicy", "direct_call"), "pytorchrl.scheme.inference.client"),
    **dict.fromkeys(("ActReply", "InferenceServer", "MissingStateError", "PendingAct"), "pytorchrl.scheme.inference.server"),
    **dict.fromkeys(("NoisePart", "PolicySpec", "policy_spec"), "pytorchrl.scheme.inference.spec"),
})

__all__ = [
    "ActReply", "InferenceServer", "MissingStateError", "NoisePart", "PendingAct", "PolicySpec", "RemotePolicy", "direct_call",
    "policy_spec",
]
