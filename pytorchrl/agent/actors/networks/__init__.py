"""Feature extractors: every actor takes its networks from :class:`EncoderSpec`."""

from pytorchrl.agent.actors.networks.encoders import ENCODERS, Encoder, EncoderError, EncoderSpec, ImpalaResNet, NatureCNN
from pytorchrl.agent.actors.networks.mlp import MLP, orthogonal_init

__all__ = ["ENCODERS", "MLP", "Encoder", "EncoderError", "EncoderSpec", "ImpalaResNet", "NatureCNN", "orthogonal_init"]
