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

Frame-stacked observations (Atari's 4 frames) travel as their change (ARCHITECTURE.md, decision
49): all but the newest of an env's frames are the previous step's, which the server still holds,
so a step sends each env's newest frame, and whole stacks only for the envs whose stacks did not
shift (an episode start). That is a quarter of the bytes, and keeps a Pong step of 8 envs (55
KB) under Ray's 100 KB limit for arguments sent inline, where the whole stacks (220 KB) went
through the object store. :func:`encode_frames` and :func:`decode_frames` are the codec; a
server that lacks the step a delta extends (restarted) raises :class:`MissingFramesError` and is
sent the whole observations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

#: ``call(method_name, *args)``: runs the server's method and returns its result
Call = Callable[..., Any]


class MissingNoiseError(LookupError):
    """The server holds no noise for a worker's rollout (it was restarted mid-rollout): the client
    hands it the rollout's stream state again and resends the step."""


class MissingFramesError(LookupError):
    """The server does not hold the observations a :class:`FrameDelta` extends (it was restarted):
    the client sends the step's observations whole."""


class FrameDelta(NamedTuple):
    """A step's frame-stacked observations (``[envs, stack, *frame]``) as their change from the
    observations of step ``base`` (the client's count of acted steps).

    :param base: the step whose observations these extend.
    :param newest: ``[envs, *frame]``, each env's newest frame.
    :param fresh_rows: the envs whose stacks did not shift (episode starts), sent whole.
    :param fresh: ``[len(fresh_rows), stack, *frame]``, their observations.
    """

    base: int
    newest: np.ndarray
    fresh_rows: np.ndarray
    fresh: np.ndarray


def stacks(obs: Any) -> bool:
    """Whether ``obs`` (one step of a vector env's) may be frame stacks: ``[envs, stack >= 2, ...]``."""
    return isinstance(obs, np.ndarray) and obs.ndim >= 3 and obs.shape[1] >= 2


def encode_frames(obs: np.ndarray, base: int, previous: np.ndarray) -> FrameDelta | None:
    """``obs`` as a :class:`FrameDelta` from ``previous`` (the observations of step ``base``), or
    None when no env's frame stack shifted by one frame (observations that are not stacks)."""
    if not stacks(obs) or obs.shape != previous.shape or obs.dtype != previous.dtype:
        return None
    shifted = (obs[:, :-1] == previous[:, 1:]).reshape(len(obs), -1).all(axis=1)
    if not shifted.any():
        return None
    fresh_rows = np.flatnonzero(~shifted)
    return FrameDelta(base, obs[:, -1], fresh_rows, obs[fresh_rows])


def decode_frames(delta: FrameDelta, previous: np.ndarray) -> np.ndarray:
    """The observations ``delta`` encodes, from ``previous`` (those of step ``delta.base``)."""
    obs = np.empty_like(previous)
    obs[:, :-1] = previous[:, 1:]
    obs[:, -1] = delta.newest
    obs[delta.fresh_rows] = delta.fresh
    return obs


#: steps in a row without a shifted frame stack after which a client stops looking for one
_DELTA_TRIES = 8


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
        self._acted = 0  # steps acted on: the server keys the observations it keeps by it
        self._previous: np.ndarray | None = None  # the last acted step's observations (frame deltas)
        self._misses = 0  # steps in a row without a frame delta

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
        sent = self._encode(obs)
        try:
            reply = self._call("act_arrays", self.worker_index, sent, step, scores is not None, self._acted + 1)
        except (MissingNoiseError, MissingFramesError) as missing:  # a restarted server holds neither
            if isinstance(missing, MissingNoiseError):
                assert self._rollout is not None
                self._call("begin_rollout", self.worker_index, *self._rollout)
            reply = self._call("act_arrays", self.worker_index, obs, step, scores is not None, self._acted + 1)
        self._acted += 1
        if self._misses < _DELTA_TRIES and stacks(obs):
            self._previous = obs.copy()
        actions, log_prob, value, self.version = reply
        action[...] = actions
        if scores is not None:
            scores[0][...] = log_prob
            scores[1][...] = value

    def _encode(self, obs: np.ndarray) -> np.ndarray | FrameDelta:
        """What a step sends: a :class:`FrameDelta` where the frame stacks shifted, else ``obs``."""
        if self._previous is None or self._misses >= _DELTA_TRIES:
            return obs
        delta = encode_frames(obs, self._acted, self._previous)
        self._misses = 0 if delta is not None else self._misses + 1
        if self._misses >= _DELTA_TRIES:
            self._previous = None
        return obs if delta is None else delta

    def score(self, obs: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``log_prob(actions), value`` of flat batches."""
        return self._call("score_arrays", obs, actions)
