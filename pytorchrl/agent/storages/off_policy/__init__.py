"""Off-policy storages: the replay buffer, its samplers and its hindsight relabeller."""

from pytorchrl.agent.storages.off_policy.her import HindsightRelabeller
from pytorchrl.agent.storages.off_policy.replay import PrioritizedSampler, ReplayBuffer, Sampler, UniformSampler
from pytorchrl.agent.storages.off_policy.sum_tree import SumTree

__all__ = ["HindsightRelabeller", "PrioritizedSampler", "ReplayBuffer", "Sampler", "SumTree", "UniformSampler"]
