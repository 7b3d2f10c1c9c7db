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


class MLP(CachedLayers):
    """``Linear -> activation`` blocks; ``out_features`` is the last hidden width (input width if none).

    ``forward`` calls the functional ops directly instead of each submodule: on small networks
    the per-module call overhead costs more than the matrix products.
    """

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
        for weight, bias in self._layers:
            x = self._act(F.linear(x, weight, bias))
        return x


def orthogonal_init(module: nn.Module, gain: float) -> None:
    """Orthogonal weights with ``gain`` and zero biases for every Linear and Conv2d in ``module``
    (Saxe et al. 2014; the PPO implementation details of Engstrom et al. 2020)."""
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            nn.init.orthogonal_(layer.weight, gain=gain)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


HIDDEN_GAIN = math.sqrt(2)
