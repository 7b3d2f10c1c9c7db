"""Recurrent cores (GRU, LSTM) that follow any encoder: memory for partially observable tasks.

A core's state travels as one flat float tensor per env, ``[batch, state_size]`` (an LSTM's
``h`` and ``c`` side by side, layers back to back), so storages, Ray messages and checkpoints
carry it like any other row. Two ways to run a core, which give the same numbers:

* :meth:`RecurrentCore.step`: one step of a batch of envs (the acting path; the caller has
  already zeroed the rows whose episode starts here);
* :meth:`RecurrentCore.sequence`: ``[T, batch]`` steps from a stored initial state, zeroing a
  row's state wherever ``starts[t]`` says a new episode begins at step ``t``. The sequence is
  cut only at the steps where some row starts an episode, and each piece runs as one cuDNN-style
  ``nn.GRU``/``nn.LSTM`` call (the learner's path: re-running a rollout or a replayed sequence).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

# On CUDA a learner's GRU/LSTM weights are views of its algorithm's one flat parameter buffer
# (ARCHITECTURE.md, decision 56), not cuDNN's packed layout, so cuDNN copies them into one per
# call (correct; a 128-unit GRU's ~0.4 MB) and warns once. Packing them (``flatten_parameters``)
# would re-point them off that buffer, and the optimizer would step weights the module no longer reads.
warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk of memory")

__all__ = ["RecurrentCore", "RecurrentSpec", "carried_state", "run_core"]

CORES = ("gru", "lstm")


@dataclass(frozen=True)
class RecurrentSpec:
    """What ``actor.recurrent`` asks for; picklable, so it travels inside actor factories.

    :param kind: ``gru`` or ``lstm``.
    :param hidden_size: state width per layer.
    :param num_layers: stacked layers.
    """

    kind: str = "gru"
    hidden_size: int = 128
    num_layers: int = 1

    @property
    def state_size(self) -> int:
        """Width of one core's flat state: ``h`` (and an LSTM's ``c``) of every layer."""
        return (1 if self.kind == "gru" else 2) * self.num_layers * self.hidden_size

    def build(self, input_size: int) -> RecurrentCore:
        return RecurrentCore(input_size, kind=self.kind, hidden_size=self.hidden_size, num_layers=self.num_layers)


def carried_state(rhs: torch.Tensor | None, done: torch.Tensor | None, batch: int, size: int, device: torch.device) -> torch.Tensor:
    """The state an actor's ``get_action`` steps from: ``rhs`` (zeros for fresh episodes when
    None), with the rows where ``done`` says a new episode starts zeroed."""
    state = torch.zeros(batch, size, device=device) if rhs is None else rhs
    return state if done is None else state * (~done.bool()).to(state.dtype).view(-1, 1)


class RecurrentCore(nn.Module):
    """A GRU or LSTM over feature vectors, with a flat state (see the module doc).

    Weights are orthogonal and biases zero (as in the PPO-LSTM implementations of Huang et al.
    2022), except an LSTM's forget-gate bias, which starts at 1 so that memory is kept until
    learned otherwise (Jozefowicz et al. 2015).

    :param input_size: width of the encoder's features.
    :param kind: ``gru`` or ``lstm``.
    :param hidden_size: state width per layer (the width of the core's output).
    :param num_layers: stacked layers.
    """

    def __init__(self, input_size: int, *, kind: str = "gru", hidden_size: int = 128, num_layers: int = 1) -> None:
        super().__init__()
        if kind not in CORES:
            raise ValueError(f"unknown recurrent core {kind!r}; allowed: {', '.join(CORES)}")
        self.kind, self.hidden_size, self.num_layers = kind, hidden_size, num_layers
        rnn_class = nn.GRU if kind == "gru" else nn.LSTM
        self.rnn = rnn_class(input_size, hidden_size, num_layers=num_layers)
        for name, p in self.rnn.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(p)
            else:
                nn.init.zeros_(p)
                if kind == "lstm" and name.startswith("bias_ih"):  # forget gate open at the start (Jozefowicz et al. 2015)
                    nn.init.ones_(p[hidden_size : 2 * hidden_size])
        self.out_features = hidden_size
        self._parts = 1 if kind == "gru" else 2
        self.state_size = RecurrentSpec(kind, hidden_size, num_layers).state_size

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """The state of fresh episodes: zeros."""
        return torch.zeros(batch, self.state_size, device=device)

    def _unflatten(self, state: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        # [B, parts * L * H] -> [parts, L, B, H], the layout nn.GRU / nn.LSTM take
        b = state.shape[0]
        hx = state.view(b, self._parts, self.num_layers, self.hidden_size).permute(1, 2, 0, 3).contiguous()
        return hx[0] if self.kind == "gru" else (hx[0], hx[1])

    def _flatten(self, hx: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        stacked = hx.unsqueeze(0) if isinstance(hx, torch.Tensor) else torch.stack(hx)
        return stacked.permute(2, 0, 1, 3).reshape(stacked.shape[2], self.state_size)

    def step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: ``x [B, F]`` and ``state [B, S]`` to ``output [B, H], new_state [B, S]``.

        Runs the cells directly on slices of the flat state (``torch.gru_cell``/``lstm_cell``):
        no module call, no state permutes; a one-layer GRU's state *is* its output.
        """
        h, n = self.hidden_size, self.num_layers
        weights = cast(list[torch.Tensor], self.rnn._flat_weights)
        if self.kind == "gru":
            if n == 1:
                x = torch.gru_cell(x, state, *weights[:4])
                return x, x
            layers = []
            for layer in range(n):
                x = torch.gru_cell(x, state[:, layer * h : (layer + 1) * h], *weights[4 * layer : 4 * layer + 4])
                layers.append(x)
            return x, torch.cat(layers, dim=1)
        hs, cs = [], []
        for layer in range(n):
            hx = (state[:, layer * h : (layer + 1) * h], state[:, (n + layer) * h : (n + layer + 1) * h])
            x, c = torch.lstm_cell(x, hx, *weights[4 * layer : 4 * layer + 4])
            hs.append(x)
            cs.append(c)
        return x, torch.cat([*hs, *cs], dim=1)

    def sequence(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``T`` steps: ``x [T, B, F]`` from ``state [B, S]``, a row's state zeroed before step
        ``t`` where ``starts[t]`` (bool ``[T, B]``) is set.

        :return: ``outputs [T, B, H]`` and the state after the last step ``[B, S]``.
        """
        t = x.shape[0]
        keep = (~starts).to(x.dtype)
        # cut where any row starts an episode (step 0 is always a cut)
        cuts = [0, *(torch.nonzero(starts[1:].any(dim=1)).flatten() + 1).tolist(), t]
        outs = []
        for a, b in itertools.pairwise(cuts):
            if b <= a:
                continue
            state = state * keep[a].unsqueeze(-1)
            out, hx = self.rnn(x[a:b], self._unflatten(state))
            state = self._flatten(hx)
            outs.append(out)
        return torch.cat(outs) if len(outs) > 1 else outs[0], state


def run_core(
    core: RecurrentCore, encode: Callable[[torch.Tensor], torch.Tensor], obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor,
    burn_in: int = 0,
) -> torch.Tensor:
    """``core`` over ``encode``'d observations ``[T, B, ...]`` from ``state`` (reset at ``starts``):
    the first ``burn_in`` steps only warm the state up, without gradient; the outputs of the rest,
    ``[T - burn_in, B, H]``. The one sequence path of every learner (R2D2, recurrent SAC, PPO)."""
    b = obs.shape[1]

    def features(part: torch.Tensor) -> torch.Tensor:
        return encode(part.reshape(-1, *obs.shape[2:])).view(part.shape[0], b, -1)

    if burn_in:
        with torch.no_grad():
            _, state = core.sequence(features(obs[:burn_in]), state, starts[:burn_in])
    return core.sequence(features(obs[burn_in:]), state, starts[burn_in:])[0]
