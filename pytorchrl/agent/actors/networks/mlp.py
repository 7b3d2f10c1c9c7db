"""MLP feature extractor and initialisation helpers."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.tanh,
    "relu": torch.relu,
    "elu": F.elu,
    "gelu": F.gelu,
}


class CachedLayers(nn.Module):
    """A network whose ``forward`` reads ``self._layers``, its ``(weight, bias)`` pairs, instead
    of walking its submodules: ``nn.Module`` attribute lookups and container indexing cost
    microseconds each, more than a small network's matrix products. The tensors are updated in
    place by optimizers and ``load_state_dict``, so holding them is safe; ``.to()`` refreshes them."""

    _layers: list[tuple[torch.Tensor, torch.Tensor]]

    def _layer_parameters(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        raise NotImplementedError

    def _cache_parameters(self) -> None:
        self._layers = self._layer_parameters()

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        out = super()._apply(fn, recurse)
        self._cache_parameters()
        return out


def run_layers(
    x: torch.Tensor, layers: list[tuple[torch.Tensor, torch.Tensor]], act: Callable[[torch.Tensor], torch.Tensor], dtype: torch.dtype
) -> torch.Tensor:
    """``act(linear(x))`` through ``layers``, computed in ``dtype``: bfloat16 casts the input and
    each layer's parameters (differentiably, so gradients reach the float32 parameters in float32)
    and returns float32, so what reads the result (heads, losses) stays float32. Explicit casts
    rather than autocast: autocast dispatches every op through its cast policy, which costs more
    than these few casts on a small network."""
    if dtype is torch.float32 or not layers:
        for weight, bias in layers:
            x = act(F.linear(x, weight, bias))
        return x
    x = x.to(dtype)
    for weight, bias in layers:
        x = act(F.linear(x, weight.to(dtype), bias.to(dtype)))
    return x.float()


class MLP(CachedLayers):
    """``Linear -> activation`` blocks; ``out_features`` is the last hidden width (input width if none).

    ``forward`` calls the functional ops directly instead of each submodule: on small networks
    the per-module call overhead costs more than the matrix products. ``dtype`` is what the
    layers compute in (``actor.mlp_precision``; see :func:`run_layers`).
    """

    dtype: torch.dtype = torch.float32

    def __init__(self, in_features: int, hidden_sizes: tuple[int, ...], *, activation: str = "tanh") -> None:
        super().__init__()
        widths = (in_features, *hidden_sizes)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))
        self.activation = activation
        self._act = ACTIVATIONS[activation]
        self.out_features = widths[-1]
        self._cache_parameters()

    def _layer_parameters(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(lin.weight, lin.bias) for lin in self.layers if isinstance(lin, nn.Linear)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_layers(x, self._layers, self._act, self.dtype)


def orthogonal_init(module: nn.Module, gain: float) -> None:
    """Orthogonal weights with ``gain`` and zero biases for every Linear and Conv2d in ``module``
    (Saxe et al. 2014; the PPO implementation details of Engstrom et al. 2020)."""
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            nn.init.orthogonal_(layer.weight, gain=gain)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


HIDDEN_GAIN = math.sqrt(2)
