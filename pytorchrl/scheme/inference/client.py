"""A collection worker's side of central inference: an ActingPolicy whose policy runs elsewhere.

:class:`RemotePolicy` implements :class:`~pytorchrl.agent.contracts.ActingPolicy` over a
transport, ``call(method_name, *args) -> result``, that reaches an
:class:`~pytorchrl.scheme.inference.server.InferenceServer`: :func:`direct_call` in one process,
``lambda name, *args: ray.get(getattr(handle, name).remote(*args))`` over Ray. The worker keeps
what makes its data its own: the noise, drawn from its seeded stream by the server's
:class:`~pytorchrl.scheme.inference.spec.PolicySpec`, and the recurrent states its storage records.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from pytorchrl.agent.contracts import Acted, ActionSlots
from pytorchrl.scheme.inference.server import ActReply, InferenceServer, MissingStateError
from pytorchrl.scheme.inference.spec import PolicySpec
from pytorchrl.utils.errors import RequestInDoubt

#: ``call(method_name, *args)``: runs the server's method and returns its result
Call = Callable[..., Any]


def direct_call(server: InferenceServer) -> Call:
    """The in-process transport: ``call(name, *args)`` is ``getattr(server, name)(*args)``."""
    return functools.partial(_call_method, server)


def _call_method(server: InferenceServer, name: str, *args: Any) -> Any:
    return getattr(server, name)(*args)


class RemotePolicy:
    """An :class:`~pytorchrl.agent.contracts.ActingPolicy` served by an inference server.

    Recurrent policies: the server holds each env's state between steps, so a request carries
    only where episodes start, and the reply the next state, which the storage records as it
    would a :class:`~pytorchrl.agent.policy.LocalPolicy`'s. The storage zeroes the state of a
    row where an episode starts, so a zero row is a start (zeroing a row that is already zero
    changes nothing, so one that merely happens to be zero is safe too). The state is sent in
    full when the storage's state is not the continuation of the last reply (the first step, a
    checkpoint restored, a server that lost it): then the server adopts it.

    :param call: the transport (see the module docstring).
    :param worker_index: the collection worker's index (keys its states and exploration rate).
    :param spec: the served policy's spec (None: asked of the server).
    """

    def __init__(self, call: Call, worker_index: int, *, spec: PolicySpec | None = None) -> None:
        self._call = call
        # a request not safe to send twice goes by ``once`` where the transport has it (ServerCall)
        self._call_once: Call = getattr(call, "once", call)
        self.worker_index = worker_index
        self.spec: PolicySpec = call("policy_spec") if spec is None else spec
        self.is_recurrent = self.spec.is_recurrent
        self.scores_while_acting = self.spec.scores_while_acting
        self._version = 0
        self._last_state: torch.Tensor | None = None  # the next state of the last reply

    @property
    def version(self) -> int:
        """The version of the weights that chose the last actions (or were last set)."""
        return self._version

    def draw_noise(self, num_steps: int, num_envs: int) -> torch.Tensor:
        return self.spec.draw_noise(num_steps, num_envs)

    def act(self, obs: torch.Tensor, noise: torch.Tensor, slots: ActionSlots, state: torch.Tensor | None = None) -> Acted:
        scored = slots.log_prob is not None
        starts = sent = None
        if self.is_recurrent:
            assert state is not None, "a recurrent policy acts from the storage's state"
            starts = ~state.any(-1)
            sent = None if self._continues(state) else state
        given = () if slots.given is None else ((slots.given, slots.action[slots.given]),)  # sent only when there are any
        # acting from the state the server holds moves it on: such a request must not run twice
        # (a resend after a network fault would act from the moved state), so where it may have
        # run it is sent again with the state, as when the server holds none
        call = self._call_once if self.is_recurrent and sent is None else self._call
        try:
            reply: ActReply = call("act", self.worker_index, obs, noise, starts, scored, sent, *given)
        except (MissingStateError, RequestInDoubt):
            reply = self._call("act", self.worker_index, obs, noise, starts, scored, state, *given)
        slots.action.copy_(reply.action)
        if scored:
            assert slots.log_prob is not None and slots.value is not None and reply.log_prob is not None and reply.value is not None
            slots.log_prob.copy_(reply.log_prob)
            slots.value.copy_(reply.value)
        self._version, self._last_state = reply.version, reply.state
        return Acted(reply.state, reply.version)

    def _continues(self, state: torch.Tensor) -> bool:
        """Whether ``state`` is the last reply's next state with some rows zeroed (episode starts):
        then the server's rows are it too."""
        last = self._last_state
        return last is not None and last.shape == state.shape and torch.equal(state, last * state.any(-1, keepdim=True))

    def score(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._call("score", obs, actions)

    def score_sequence(
        self, obs: torch.Tensor, actions: torch.Tensor, state: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._call("score_sequence", obs, actions, state, starts)

    def evaluation_step(self, obs: torch.Tensor, state: Any, starts: torch.Tensor | None, deterministic: bool) -> tuple[torch.Tensor, Any]:
        return self._call("evaluation_step", obs, state, starts, deterministic)

    def set_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Sets the server's weights: in SEED mode the learner sets them there once, not per worker."""
        self._call("set_weights", weights, version)
        self._version = version

    def get_weights(self) -> dict[str, torch.Tensor]:
        return self._call("get_weights")
