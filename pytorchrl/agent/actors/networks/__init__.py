"""Feature extractors."""

from pytorchrl.agent.actors.networks.mlp import MLP, orthogonal_init

__all__ = ["MLP", "orthogonal_init"]
