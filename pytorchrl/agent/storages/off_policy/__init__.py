"""Off-policy storages: the replay buffer and its samplers."""

from pytorchrl.agent.storages.off_policy.replay import PrioritizedSampler, ReplayBuffer, Sampler, UniformSampler
from pytorchrl.agent.storages.off_policy.sum_tree import SumTree

__all__ = ["PrioritizedSampler", "ReplayBuffer", "Sampler", "SumTree", "UniformSampler"]
