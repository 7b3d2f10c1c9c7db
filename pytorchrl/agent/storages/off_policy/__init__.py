"""Off-policy storages: the replay buffer, its samplers and its hindsight relabeller (imported on
first use, :mod:`pytorchrl.utils.lazy`: a collection worker without torch records with
:mod:`.recorder` alone)."""

from typing import TYPE_CHECKING

from pytorchrl.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from pytorchrl.agent.storages.off_policy.her import HindsightRelabeller
    from pytorchrl.agent.storages.off_policy.replay import PrioritizedSampler, ReplayBuffer, Sampler, UniformSampler
    from pytorchrl.agent.storages.off_policy.sum_tree import SumTree

__getattr__, __dir__ = lazy_exports(__name__, {
    "HindsightRelabeller": "pytorchrl.agent.storages.off_policy.her",
    **dict.fromkeys(("PrioritizedSampler", "ReplayBuffer", "Sampler", "UniformSampler"), "pytorchrl.agent.storages.off_policy.replay"),
    "SumTree": "pytorchrl.agent.storages.off_policy.sum_tree",
})

__all__ = ["HindsightRelabeller", "PrioritizedSampler", "ReplayBuffer", "Sampler", "SumTree", "UniformSampler"]
