"""A central-inference client that holds no torch: numpy in, numpy out.

:class:`ArrayPolicy` is how a :class:`~pytorchrl.scheme.collection.thin_worker.ThinCollectionWorker`
acts: it sends one vector-env step of observations to an
:class:`~pytorchrl.scheme.inference.server.InferenceServer` and writes the actions (and, for
policies that score while acting, log-probabilities and values) into its recorder's rows.

The sampling noise stays the worker's own, as with a :class:`~.client.RemotePolicy` (ARCHITECTURE.md,
decisions 34 and 48): the worker keeps its acting stream's *state* (a torch generator's bytes, in
numpy) and hands it to the server at each rollout's start; the server draws the rollout's noise
from it, exactly as a local worker's ``draw_noise`` would, keeps the noise for the worker's steps
and returns the advanced state. So a worker without torch collects what a local one does, bit
for bit, and a checkpoint holds its stream as a local worker's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: ``call(method_name, *args)``: runs the server's method and returns its result
Call = Callable[..., Any]


class MissingNoiseError(LookupError):
    """The server holds no noise for a worker's rollout (it was restarted mid-rollout): the client
    hands it the rollout's stream state again and resends the step."""


class ArrayPolicy:
    """Acts through an inference server on numpy arrays (a memoryless policy).

    :param call: the transport (:class:`~pytorchrl.scheme.base.inference_servers.ServerCall`, or a
        direct call in one process).
    :param worker_index: the collection worker's index (keys its noise and exploration rate).
    """

    def __init__(self, call: Call, worker_index: int) -> None:
        self._call = call
        self.worker_index = worker_index
        spec = call("array_spec")
        #: acting also fills log-probabilities and values
        self.scores_while_acting: bool = spec["scores_while_acting"]
        self.version = 0
        self._rollout: tuple[np.ndarray, int, int] | None = None  # (stream state at its start, steps, envs)

    def initial_stream(self, seed: int) -> np.ndarray:
        """The state of a fresh acting stream seeded ``seed`` (as a local worker's starts)."""
        return self._call("stream_state", seed)

    def begin_rollout(self, stream: np.ndarray, num_steps: int, num_envs: int) -> np.ndarray:
        """The server draws this rollout's noise from ``stream``; returns the stream's state after it."""
        self._rollout = (stream, num_steps, num_envs)
        return self._call("begin_rollout", self.worker_index, stream, num_steps, num_envs)

    def act(self, obs: np.ndarray, step: int, action: np.ndarray, scores: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Act on the rollout's ``step``: the actions go into ``action``, and with ``scores`` the
        log-probabilities and values into its ``(log_prob, value)`` rows."""
        try:
            reply = self._call("act_arrays", self.worker_index, obs, step, scores is not None)
        except MissingNoiseError:
            assert self._rollout is not None
            self._call("begin_rollout", self.worker_index, *self._rollout)
            reply = self._call("act_arrays", self.worker_index, obs, step, scores is not None)
        actions, log_prob, value, self.version = reply
        action[...] = actions
        if scores is not None:
            scores[0][...] = log_prob
            scores[1][...] = value

    def score(self, obs: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``log_prob(actions), value`` of flat batches."""
        return self._call("score_arrays", obs, actions)
