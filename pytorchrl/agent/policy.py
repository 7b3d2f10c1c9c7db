"""Acting with a local copy of the actor, and moving an actor's weights in and out in place.

:class:`LocalPolicy` is the :class:`~pytorchrl.agent.contracts.ActingPolicy` a collection
worker uses when it acts itself: the actor and the version of its weights, nothing of the
algorithm (no optimizer, no flat gradient buffers, no target networks' updates).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pytorchrl.agent.contracts import Acted, ActionSlots


class ModuleWeights:
    """Reads and writes a module's parameters and buffers in place: the objects themselves, found
    at first use, so they stay right through optimizer steps and flat-buffer views. Move the
    module (``.to()``) before that first use: a move to another device or dtype replaces its
    buffers (its parameters' data is swapped in place), and the ones found would be stale.

    :param module: the actor.
    """

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self._vars: dict[str, torch.Tensor] | None = None

    def tensors(self) -> dict[str, torch.Tensor]:
        if self._vars is None:  # built on first use: an algorithm may replace parameters by flat views first
            self._vars = self.module.state_dict(keep_vars=True)
        return self._vars

    def get(self, acting: bool = False, copy: bool = True) -> dict[str, torch.Tensor]:
        """The module's parameters and buffers, detached copies on the CPU (copies: a parameter may
        be a view of a flat buffer, and pickling a view would send the whole buffer).

        :param acting: only what acting needs (the module's ``acting_prefixes``; e.g. SAC's policy
            without its critics and targets, a fifth of the weights).
        :param copy: False: the live tensors themselves (detached), for a consumer in this process
            that copies them at once.
        """
        state = self.tensors()
        prefixes = getattr(self.module, "acting_prefixes", None) if acting else None
        keys = state.keys() if prefixes is None else [k for k in state if k.startswith(prefixes)]
        if not copy:
            return {k: state[k].detach() for k in keys}
        return {k: state[k].detach().to("cpu", copy=True) for k in keys}

    def set(self, weights: dict[str, torch.Tensor]) -> None:
        """Copy ``weights`` (all of them or the acting ones) into the module in place."""
        state = self.tensors()
        if weights.keys() <= state.keys() and all(w.shape == state[k].shape for k, w in weights.items()):
            with torch.no_grad():  # one op: a tenth of load_state_dict's cost on a small actor
                torch._foreach_copy_([state[k] for k in weights], list(weights.values()))
        else:
            self.module.load_state_dict(weights)  # its error names the missing or mismatched keys


class LocalPolicy:
    """An :class:`~pytorchrl.agent.contracts.ActingPolicy` over an actor in this process.

    Which of the actor's acting paths a step takes (memoryless, scored while acting, recurrent)
    is decided once here, not probed per step.

    :param actor: an on- or off-policy actor (``act``, ``act_scored``, ``act_recurrent``,
        ``draw_noise``, ``score``, ``get_action``).
    """

    def __init__(self, actor: nn.Module) -> None:
        self.actor: Any = actor  # the acting methods are the actor classes' own, not nn.Module's
        self._version = 0
        self._weights = ModuleWeights(actor)
        # getattr: an actor of a user's own scheme may predate these attributes
        self.is_recurrent: bool = getattr(actor, "is_recurrent", False)
        self.scores_while_acting: bool = getattr(actor, "scores_while_acting", False)

    @property
    def version(self) -> int:
        return self._version

    def draw_noise(self, num_steps: int, num_envs: int) -> torch.Tensor:
        return self.actor.draw_noise(num_steps, num_envs)

    def act(self, obs: torch.Tensor, noise: torch.Tensor, slots: ActionSlots, state: torch.Tensor | None = None) -> Acted:
        actor, scored, given = self.actor, slots.log_prob is not None, slots.given
        # given actions: a scoring path keeps and scores them itself (an on-policy actor's), the others are put back
        extra = {"given": given} if scored and given is not None else {}
        kept = slots.action[given].clone() if given is not None and not scored else None
        next_state = None
        if self.is_recurrent:  # the state the storage keeps per step in, the next one out
            rows = (slots.log_prob, slots.value) if scored else ()
            next_state = actor.act_recurrent(obs, state, noise, slots.action, *rows, **extra)
        elif scored:  # CNN policies: one encoder pass per step gives action, log-prob and value
            actor.act_scored(obs, noise, slots.action, slots.log_prob, slots.value, **extra)
        else:
            actor.act(obs, noise, out=slots.action)
        if kept is not None:
            slots.action[given] = kept
        return Acted(next_state, self._version)

    def score(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor.score(obs, actions)

    def score_sequence(
        self, obs: torch.Tensor, actions: torch.Tensor, state: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor.score_sequence(obs, actions, state, starts)

    def evaluation_step(self, obs: torch.Tensor, state: Any, starts: torch.Tensor | None, deterministic: bool) -> tuple[torch.Tensor, Any]:
        action, _, state = self.actor.get_action(obs, state, starts, deterministic=deterministic)
        return action, state

    def set_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self._weights.set(weights)
        self._version = version

    def get_weights(self) -> dict[str, torch.Tensor]:
        return self._weights.get()
