"""A rollout's sampling noise, as the actors describe it: a few plain draws, concatenated.

An actor draws the noise of a whole rollout up front (ARCHITECTURE.md, decision 14). What that
noise is made of follows from the action space alone: Gumbel noise for a categorical policy,
standard normals for a Gaussian one, a uniform draw and a random action for epsilon-greedy
exploration. Each actor (through its action head, on-policy) lists it as :class:`NoisePart` s,
and :func:`draw_parts` is the one place that draws them, so a central inference server's client,
which holds no network, consumes its seeded stream exactly as the actor would (decision 34). What
needs the weights (a Gaussian on-policy head scales its draw by ``exp(log_std)``; noisy nets
redraw their parameter noise first) stays the actor's own step around the draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import torch

NoiseKind = Literal["gumbel", "normal", "uniform", "symmetric_uniform", "integers"]


def gumbel_noise(shape: tuple[int, ...], device: torch.device | None = None) -> torch.Tensor:
    """Gumbel(0, 1) noise: ``argmax(logits + G)`` is a sample of ``softmax(logits)`` (Gumbel-max)."""
    return torch.empty(shape, device=device).exponential_().log_().neg_()


@dataclass(frozen=True)
class NoisePart:
    """One draw of a rollout's noise: ``[num_steps, num_envs, width]`` values of one kind.

    :param kind: ``gumbel`` (Gumbel(0, 1): ``-log(Exp(1))``), ``normal`` (N(0, 1)), ``uniform``
        (U[0, 1)), ``symmetric_uniform`` (U[-1, 1)) or ``integers`` (uniform in ``[0, high)``, as floats).
    :param width: values per env and step.
    :param high: the exclusive bound of ``integers``.
    """

    kind: NoiseKind
    width: int
    high: int = 0

    def draw(self, num_steps: int, num_envs: int, device: torch.device | None = None) -> torch.Tensor:
        """This part's values, from the active generator of ``device`` (None: the default device)."""
        shape = (num_steps, num_envs, self.width)
        if self.kind == "gumbel":
            return gumbel_noise(shape, device)
        if self.kind == "normal":
            return torch.randn(shape, device=device)
        if self.kind == "uniform":
            return torch.rand(shape, device=device)
        if self.kind == "symmetric_uniform":
            return torch.rand(shape, device=device) * 2 - 1
        return torch.randint(self.high, shape, device=device).float()


@runtime_checkable
class DescribesNoise(Protocol):
    """An actor that says what its rollout noise is (every shipped actor)."""

    #: its ``draw_noise`` multiplies the drawn parts by ``exp(log_std)`` of its weights
    noise_scaled_by_weights: bool

    def noise_parts(self) -> tuple[NoisePart, ...]:
        """What its ``draw_noise`` draws with :func:`draw_parts`, in order."""
        ...

    def exploration_state(self) -> str | None:
        """Exploration it keeps beside the drawn noise (parameter noise, a process's state), in
        words; None when the drawn noise is all of it."""
        ...


def draw_parts(parts: Sequence[NoisePart], num_steps: int, num_envs: int, device: torch.device | None = None) -> torch.Tensor:
    """A rollout's noise, one row per step: ``parts`` drawn in order, concatenated along the last dimension."""
    drawn = [part.draw(num_steps, num_envs, device) for part in parts]
    return drawn[0] if len(drawn) == 1 else torch.cat(drawn, dim=-1)
