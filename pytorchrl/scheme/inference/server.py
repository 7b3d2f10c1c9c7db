"""Central batched inference (SEED mode): one copy of the policy serves many collection workers.

A request is one collection worker's vector-env step. Requests that arrive together are acted on
in one policy call: a batching thread takes the queued requests once they hold
``max_batch_size`` observation rows or ``max_wait_ms`` has passed since the first of them
arrived (Sample Factory's policy-worker rule), concatenates their rows, acts through a
:class:`~pytorchrl.agent.policy.LocalPolicy` into freshly allocated
:class:`~pytorchrl.agent.contracts.ActionSlots` and splits the results back.

Why a batching thread and not a leader elected among the waiting callers: the policy is then
touched by one thread only (with :meth:`InferenceServer.set_weights` and the scoring calls
serialised by one lock), the wait rule lives in one loop, and a caller's reply is never delayed
by the batch it happened to lead. A Ray actor host with ``max_concurrency > 1`` calls
:meth:`InferenceServer.act` from its thread pool; each call only queues its request and blocks
on its own event (without the GIL), so the cost of the extra thread is one wake-up per batch.
Calls over the socket skip the thread: its listener's one loop reads the requests that arrive
together and runs them as batches itself (:meth:`InferenceServer.act_arrays_now`, by the same
rule), so a batch costs no hand-over between threads at all.

What makes the actions those of a local policy (ARCHITECTURE.md, decisions 34 and 48): the noise
is drawn from the worker's own stream (by the worker and sent with the request, or, for a client
without torch, here from the stream state it hands over: :meth:`InferenceServer.begin_rollout`),
and the rows do not interact in the
policy, so a row's action depends on its observation, its noise and the weights only. Bitwise,
that holds where a row's matrix products do not depend on where it sits in the batch, which is
the CPU's BLAS's choice: on the AMD EPYC VMs (torch 2.13, one or two intra-op threads) a request
whose row count is a multiple of 4 gets the same bits as alone, whatever else is in the batch,
and other counts put its rows in other blocks of the GEMM kernel; on the Intel Xeon VMs MKL
takes another kernel for a narrow output (measured on a 64-to-2 product, the shape of PPO
CartPole's logit head) once a batch has 16 rows or more. Either way log-probabilities and values
move by float rounding (at most 1.2e-7 measured on the AMD VM's PPO CartPole actor, 2.1e-6 on the
Intel VM's with perturbed weights, on log-probabilities of magnitude ~10), which left every
sampled action the same in the cases measured (320 on the Intel VM): a
sampled action is an argmax of logits plus the row's noise (or a mean plus scaled noise), so
rounding changes it only where two candidates tie to the last bits.

On a GPU (``device`` ``cuda``) each policy call's rows cross the bus twice: its observations and
noise are concatenated into pinned host buffers and copied up without blocking, and its replies
(actions, scores, recurrent states) come down into pinned buffers with one synchronisation, not
one blocking copy per request and tensor (:class:`_Staging`). A batch makes one policy call
unless its requests act differently (scored or not; Ape-X workers' own exploration rates: one
call per rate); a recurrent request's episode starts and any state it sends go up on their own.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
import torch

from pytorchrl.agent.contracts import ActionSlots
from pytorchrl.agent.policy import LocalPolicy
from pytorchrl.scheme.inference.array_policy import FrameDelta, MissingFramesError, MissingNoiseError, decode_frames, stacks
from pytorchrl.scheme.inference.spec import PolicySpec, policy_spec
from pytorchrl.utils.seeding import TorchStream

#: the actor attributes its ``set_collector`` sets per collection worker (Ape-X's exploration rate)
COLLECTOR_ATTRIBUTES = ("epsilon_power",)


class ActReply(NamedTuple):
    """The answer to one act request (CPU tensors, ``[num_envs, ...]``).

    :param action: the actions.
    :param log_prob: their log-probabilities (a ``scored`` request), else None.
    :param value: the observations' values (a ``scored`` request), else None.
    :param state: a recurrent policy's state after the step (what the storage records as the
        next step's state), else None.
    :param version: the version of the weights that chose the actions.
    """

    action: torch.Tensor
    log_prob: torch.Tensor | None
    value: torch.Tensor | None
    state: torch.Tensor | None
    version: int


class MissingStateError(LookupError):
    """The server holds no recurrent state for a worker whose request continues episodes (it was
    restarted, say): the client resends the request with the state."""


@dataclass(eq=False)
class PendingAct:
    """A queued act request; :meth:`result` waits for its reply.

    :param worker_index: the collection worker (the key of its envs' recurrent states and of its
        exploration setting).
    :param obs: ``[num_envs, ...]`` observations.
    :param noise: ``[num_envs, ...]`` the step's sampling noise.
    :param starts: ``[num_envs]`` bool, an episode starts at ``obs`` (recurrent policies).
    :param scored: the reply carries log-probabilities and values.
    :param state: ``[num_envs, state_size]``: act from this state (already zero where episodes
        start) instead of the one the server holds for the worker.
    :param given: ``(rows, actions)``: the rows (bool ``[num_envs]``) whose actions are given
        (PPOD's replayed ones), and those actions: the reply has them, scored in the same pass.
    """

    worker_index: int
    obs: torch.Tensor
    noise: torch.Tensor
    starts: torch.Tensor | None
    scored: bool
    state: torch.Tensor | None
    given: tuple[torch.Tensor, torch.Tensor] | None = None
    arrival: float = field(default_factory=time.monotonic, init=False)
    _done: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _reply: ActReply | None = field(default=None, init=False, repr=False)
    _error: BaseException | None = field(default=None, init=False, repr=False)

    @property
    def rows(self) -> int:
        return int(self.obs.shape[0])

    def result(self, timeout: float | None = None) -> ActReply:
        """The reply, once the request's batch has run (re-raises the batch's error)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"no reply to worker {self.worker_index}'s request within {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._reply is not None
        return self._reply

    def finish(self, reply: ActReply | None = None, error: BaseException | None = None) -> None:
        self._reply, self._error = reply, error
        self._done.set()


class _Counters:
    """What :meth:`InferenceServer.pop_metrics` reports, accumulated under a lock of its own.

    Busy time is what the policy runs (a batch, or a scoring call), which the policy lock
    serialises, so at most one busy interval is open at a time (``busy_since``): a window counts
    the part of it that falls inside the window, so ``busy_fraction`` stays within [0, 1] even
    when a long scoring call spans several windows.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.busy_since: float | None = None
        self.reset()

    def reset(self) -> None:
        self.since = time.monotonic()
        self.requests = self.rows = self.batches = self.max_batch_rows = self.score_requests = 0
        self.wait_s = self.busy_s = 0.0

    def busy(self) -> float:
        """The policy starts running (call with the policy lock held); returns the time."""
        with self.lock:
            self.busy_since = now = time.monotonic()
        return now

    def idle(self) -> None:
        """The policy has stopped running (what :meth:`batch` and :meth:`scoring` do first)."""
        with self.lock:
            self._idle()

    def _idle(self) -> None:
        if self.busy_since is not None:
            self.busy_s += time.monotonic() - max(self.busy_since, self.since)
            self.busy_since = None

    def batch(self, requests: Sequence[PendingAct], start: float) -> None:
        """A batch that began at ``start`` (:meth:`busy`) has run."""
        rows = sum(r.rows for r in requests)
        with self.lock:
            self._idle()
            self.requests += len(requests)
            self.rows += rows
            self.batches += 1
            self.max_batch_rows = max(self.max_batch_rows, rows)
            self.wait_s += sum(start - r.arrival for r in requests)

    def scoring(self) -> None:
        """A scoring call has run."""
        with self.lock:
            self._idle()
            self.score_requests += 1

    def pop(self) -> dict[str, float]:
        with self.lock:
            now = time.monotonic()
            if self.busy_since is not None:  # running now: this window's part, the rest to the next
                self.busy_s += now - max(self.busy_since, self.since)
            out = {
                "requests": float(self.requests),
                "rows": float(self.rows),
                "batches": float(self.batches),
                "mean_batch_rows": self.rows / max(self.batches, 1),
                "max_batch_rows": float(self.max_batch_rows),
                "mean_wait_ms": 1e3 * self.wait_s / max(self.requests, 1),
                "score_requests": float(self.score_requests),
                "busy_fraction": self.busy_s / max(now - self.since, 1e-9),
            }
            self.reset()
        return out


class InferenceServer:
    """Serves one policy to many collection workers, batching their steps.

    A plain class: a Ray actor host wraps it (``max_concurrency`` above the number of workers, so
    that their :meth:`act` calls can wait together); every method is safe to call from many
    threads. :meth:`close` stops the batching thread.

    :param actor_factory: ``actor_factory(device) -> actor`` (a wiring's, as a collection worker's).
    :param device: where the policy runs; requests and replies stay on the CPU.
    :param max_batch_size: observation rows that start a batch at once; a batch takes whole
        requests, never more rows than this (unless one request alone has more).
    :param max_wait_ms: the longest the first queued request waits for others.
    :param score_while_acting: clients of an actor that scores (on-policy: ``act_scored``) score
        every step as they act (log-probabilities and values of the weights that acted), even
        where the actor would score the rollout once it ends: asynchronous collection, whose weights change under a rollout in progress (scored
        afterwards, its steps would carry the log-probabilities of weights that never acted).
    """

    def __init__(
        self, actor_factory: Callable[..., Any], *, device: str = "cpu", max_batch_size: int = 256, max_wait_ms: float = 1.0,
        score_while_acting: bool = False,
    ) -> None:
        if max_batch_size < 1 or max_wait_ms < 0:
            raise ValueError(f"need max_batch_size >= 1 and max_wait_ms >= 0, got {max_batch_size} and {max_wait_ms}")
        self.device = torch.device(device)
        self.max_batch_size, self.max_wait_s = max_batch_size, max_wait_ms / 1e3
        actor = actor_factory(self.device)
        self.spec: PolicySpec = policy_spec(actor)
        if score_while_acting and not self.spec.scores_while_acting and hasattr(actor, "act_scored"):  # replay actors are not scored
            self.spec = replace(self.spec, scores_while_acting=True)
        self.policy = LocalPolicy(actor)
        self._log_std: torch.Tensor | None = actor.action_head.log_std if self.spec.noise_scaled_by_std else None
        self._settings: dict[int, tuple[tuple[str, Any], ...]] = {}  # per worker: its COLLECTOR_ATTRIBUTES
        self._states: dict[int, torch.Tensor] = {}  # per worker: its envs' state rows, on the device
        self._noise: dict[int, tuple[torch.Tensor, ...]] = {}  # per array client: its rollout's noise, per step
        self._frames: dict[int, tuple[int, np.ndarray]] = {}  # per array client: its last step's frame stacks, and the step
        self._stream_lock = threading.Lock()
        self._queue: deque[PendingAct] = deque()
        self._queued_rows = 0
        self._cond = threading.Condition()
        self._policy_lock = threading.Lock()  # one user of the policy at a time: a batch, a scoring call, new weights
        self._closed = False
        self._counters = _Counters()
        self._staging = _Staging(self.device)
        self._thread = threading.Thread(target=self._serve, name="inference-batching", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------- acting

    @property
    def version(self) -> int:
        return self.policy.version

    def policy_spec(self) -> PolicySpec:
        """What a client needs to know of the policy (:class:`~.client.RemotePolicy` asks once)."""
        return self.spec

    def act(
        self, worker_index: int, obs: torch.Tensor, noise: torch.Tensor, starts: torch.Tensor | None = None,
        scored: bool = False, state: torch.Tensor | None = None, given: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> ActReply:
        """Act on one worker's step, batched with whatever other requests arrive meanwhile (see
        :class:`PendingAct` for the arguments); blocks until the reply."""
        return self.submit(worker_index, obs, noise, starts, scored, state, given).result()

    def submit(
        self, worker_index: int, obs: torch.Tensor, noise: torch.Tensor, starts: torch.Tensor | None = None,
        scored: bool = False, state: torch.Tensor | None = None, given: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> PendingAct:
        """Queue an act request without waiting (:meth:`act` is ``submit(...).result()``).

        :raises MissingStateError: a recurrent request continues episodes (some ``starts`` False)
            without a ``state``, and the server holds none for ``worker_index``.
        """
        return self._enqueue(self._request(worker_index, obs, noise, starts, scored, state, given))

    def _enqueue(self, pending: PendingAct) -> PendingAct:
        with self._cond:
            if self._closed:
                raise RuntimeError("the inference server is closed")
            self._queue.append(pending)
            self._queued_rows += pending.rows
            self._cond.notify()
        return pending

    def _request(
        self, worker_index: int, obs: torch.Tensor, noise: torch.Tensor, starts: torch.Tensor | None, scored: bool, state: torch.Tensor | None,
        given: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> PendingAct:
        """A checked request, not queued."""
        if noise.shape[0] != obs.shape[0] or (starts is not None and starts.shape[0] != obs.shape[0]):
            raise ValueError(f"obs, noise and starts need one row per env, got {obs.shape[0]}, {noise.shape[0]} and "
                             f"{None if starts is None else starts.shape[0]}")
        if self.spec.is_recurrent:
            if starts is None:
                raise ValueError("a recurrent policy's requests need starts (where episodes start)")
            # read without the batching thread's lock: a worker's previous step stored its rows before its reply
            if state is None and worker_index not in self._states and not bool(starts.all()):
                raise MissingStateError(f"no recurrent state held for worker {worker_index}: send it with the request")
        return PendingAct(worker_index, obs, noise, starts, scored, state, given)

    def _serve(self) -> None:
        """The batching loop (its own thread)."""
        with torch.inference_mode():
            while (batch := self._next_batch()) is not None:
                self._run_batch(batch)

    def _next_batch(self) -> list[PendingAct] | None:
        """Wait for a batch by the rule of the module docstring; None once closed."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            deadline = self._queue[0].arrival + self.max_wait_s
            while self._queued_rows < self.max_batch_size and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            batch = _take_batch(self._queue, self.max_batch_size)
            self._queued_rows -= sum(r.rows for r in batch)
            return batch

    def _run_batch(self, batch: list[PendingAct]) -> None:
        try:
            with self._policy_lock:
                start = self._counters.busy()  # busy (and done waiting) from here: a scoring call may have held the lock
                try:
                    replies = self._act_groups(batch)
                except BaseException:
                    self._counters.idle()
                    self._staging.settle()  # a failed call may leave a copy from the pinned buffers in flight
                    raise
                self._counters.batch(batch, start)
        except Exception as error:  # the callers get it instead of waiting forever
            for request in batch:
                request.finish(error=error)
            return
        for request, reply in zip(batch, replies):
            request.finish(reply)

    def _act_groups(self, batch: list[PendingAct]) -> list[ActReply]:
        """One policy call per group of requests that act alike: scored or not (the two paths
        compute the actions with different ops), and one exploration setting per group (Ape-X
        workers explore at their own rates: one call per rate in the batch)."""
        groups: dict[tuple[bool, tuple[tuple[str, Any], ...]], list[int]] = {}
        for i, request in enumerate(batch):
            groups.setdefault((request.scored, self._setting(request.worker_index)), []).append(i)
        replies: list[ActReply | None] = [None] * len(batch)
        version = self.policy.version
        for (scored, setting), indices in groups.items():
            for name, value in setting:
                setattr(self.policy.actor, name, value)
            for i, reply in zip(indices, self._act_group([batch[i] for i in indices], scored, version)):
                replies[i] = reply
        return [r for r in replies if r is not None]

    def _act_group(self, group: list[PendingAct], scored: bool, version: int) -> list[ActReply]:
        obs = self._staging.upload("obs", [r.obs for r in group])
        noise = self._staging.upload("noise", [r.noise for r in group])
        if self._log_std is not None:  # the actor's draw_noise scales by its std; the client cannot
            noise = noise.mul_(self._log_std.exp())
        rows = obs.shape[0]
        action = self.spec.empty_actions(rows, self.device)
        slots = ActionSlots(action, torch.empty(rows, device=self.device), torch.empty(rows, device=self.device)) if scored else ActionSlots(action)
        if any(r.given is not None for r in group):
            slots = slots._replace(given=self._give(group, action))
        state = self._gather_states(group) if self.spec.is_recurrent else None
        acted = self.policy.act(obs, noise, slots, state)
        sizes = [r.rows for r in group]
        if acted.state is not None:
            for request, rows_state in zip(group, acted.state.split(sizes)):
                self._states[request.worker_index] = rows_state
        host = self._staging.download([slots.action, slots.log_prob, slots.value, acted.state])
        pieces = [[None] * len(group) if t is None else _pieces(t, sizes, self._staging.reuses) for t in host]
        return [ActReply(a, lp, v, s, version) for a, lp, v, s in zip(*pieces)]

    def _give(self, group: list[PendingAct], action: torch.Tensor) -> torch.Tensor:
        """The group's given rows (bool, on the device), their actions written into ``action``."""
        given = torch.zeros(action.shape[0], dtype=torch.bool)
        start = 0
        for request in group:
            if request.given is not None:
                rows, actions = request.given
                given[start : start + request.rows] = rows
                action[start : start + request.rows][rows.to(self.device)] = actions.to(self.device, action.dtype)
            start += request.rows
        return given.to(self.device)

    def _gather_states(self, group: list[PendingAct]) -> torch.Tensor:
        """The rows' states: each worker's held rows (or the one sent), zeroed where episodes
        start by the storage's own product, ``state * ~starts`` (so even the zeros' signs match)."""
        parts = []
        for request in group:
            held = request.state.to(self.device, copy=True) if request.state is not None else self._states.get(request.worker_index)
            if held is None:  # a worker's first request, all episodes starting
                held = torch.zeros(request.rows, self.spec.state_size, device=self.device)
            assert request.starts is not None
            parts.append(held * ~request.starts.to(self.device)[:, None])
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _setting(self, worker_index: int) -> tuple[tuple[str, Any], ...]:
        """The actor attributes worker ``worker_index`` acts with (``set_collector``'s), found once."""
        if worker_index not in self._settings:
            actor = self.policy.actor
            names = [n for n in COLLECTOR_ATTRIBUTES if hasattr(actor, n)]
            defaults = [(n, getattr(actor, n)) for n in names]
            set_collector = getattr(actor, "set_collector", None)
            if set_collector is not None:
                set_collector(worker_index)
            self._settings[worker_index] = tuple((n, getattr(actor, n)) for n in names)
            for name, value in defaults:
                setattr(actor, name, value)
        return self._settings[worker_index]

    # ------------------------------------------------------- clients without torch (numpy)

    def array_spec(self) -> dict[str, Any]:
        """What an :class:`~.array_policy.ArrayPolicy` needs to know, as plain data (unpickling a
        :class:`PolicySpec` would import torch)."""
        return {"scores_while_acting": self.spec.scores_while_acting}

    def stream_state(self, seed: int) -> np.ndarray:
        """The state of a fresh acting stream seeded ``seed``, as bytes."""
        return TorchStream(seed).state.numpy().copy()

    def begin_rollout(self, worker_index: int, stream: np.ndarray, num_steps: int, num_envs: int) -> np.ndarray:
        """Draw worker ``worker_index``'s next rollout's noise from its acting stream, whose state
        is ``stream`` (what its ``draw_noise`` would draw in a local worker), keep it for
        :meth:`act_arrays`, and return the stream's state after the draw."""
        drawing = TorchStream.from_state(stream)
        with self._stream_lock, drawing.active():  # the global generator: one thread at a time
            noise = self.spec.draw_noise(num_steps, num_envs)
        self._noise[worker_index] = noise.unbind(0)
        return drawing.state.numpy().copy()

    def act_arrays(self, worker_index: int, obs: np.ndarray | FrameDelta, step: int, scored: bool, acted: int = 0) -> tuple[Any, ...]:
        """:meth:`act` for an :class:`~.array_policy.ArrayPolicy`: step ``step`` of the rollout
        begun by :meth:`begin_rollout`; ``(action, log_prob, value, version)`` in numpy. ``obs``
        may be a :class:`~.array_policy.FrameDelta` from the client's step ``acted - 1``.

        :raises MissingNoiseError: no rollout begun for the worker (the server was restarted).
        :raises MissingFramesError: ``obs`` extends a step this server does not hold.
        """
        return _array_reply(self._enqueue(self._array_request(worker_index, obs, step, scored, acted)).result())

    def act_arrays_now(self, calls: Sequence[tuple[Any, ...]], arrivals: Sequence[float] | None = None) -> list[tuple[bool, Any]]:
        """:meth:`act_arrays` of several clients at once, run in the calling thread as batches of
        at most ``max_batch_size`` rows (the socket listener's loop, which has read them all: it
        batches by :attr:`max_wait_s` itself, so nothing here waits or hands over to the batching
        thread). ``(True, reply)`` or ``(False, error)`` per call, in order.

        :param arrivals: the ``time.monotonic()`` at which each call was read (default: now), so
            that ``mean_wait_ms`` counts the loop's wait for company as the queue's wait is counted.
        """
        out: list[tuple[bool, Any]] = [(False, RuntimeError("not run"))] * len(calls)
        pending: list[tuple[int, PendingAct]] = []
        for i, args in enumerate(calls):
            try:
                request = self._array_request(*args)
            except Exception as error:  # that client's alone (its noise or frames are not held)
                out[i] = (False, error)
                continue
            if arrivals is not None:
                request.arrival = arrivals[i]
            pending.append((i, request))
        queue = deque(request for _, request in pending)
        with torch.inference_mode():
            while queue:  # batches by the batching thread's rule
                self._run_batch(_take_batch(queue, self.max_batch_size))
        for i, request in pending:
            try:
                out[i] = (True, _array_reply(request.result(0)))
            except Exception as error:
                out[i] = (False, error)
        return out

    def _array_request(self, worker_index: int, obs: np.ndarray | FrameDelta, step: int, scored: bool, acted: int = 0) -> PendingAct:
        noise = self._noise.get(worker_index)
        if noise is None:
            raise MissingNoiseError(f"no rollout noise held for worker {worker_index}: begin the rollout again")
        if isinstance(obs, FrameDelta):
            held = self._frames.get(worker_index)
            if held is None or held[0] != obs.base:
                raise MissingFramesError(f"no observations of step {obs.base} held for worker {worker_index}: send them whole")
            obs = decode_frames(obs, held[1])
        if stacks(obs):
            self._frames[worker_index] = (acted, obs)
        return self._request(worker_index, torch.from_numpy(obs), noise[step], None, scored, None)

    def score_arrays(self, obs: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`score` in numpy."""
        log_prob, value = self.score(torch.from_numpy(obs), torch.from_numpy(actions))
        return log_prob.numpy(), value.numpy()

    # ------------------------------------------------------------------------ scoring

    def score(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``log_prob(actions), value`` of flat batches (a rollout scored after collection)."""
        return self._serialised(self.policy.score, obs, actions)

    def score_sequence(
        self, obs: torch.Tensor, actions: torch.Tensor, state: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`score` of a recurrent policy over ``[T, B]`` steps from ``state`` (the bootstrap value)."""
        return self._serialised(self.policy.score_sequence, obs, actions, state, starts)

    def _serialised(self, fn: Callable[..., tuple[torch.Tensor, torch.Tensor]], *tensors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with self._policy_lock, torch.inference_mode():
            self._counters.busy()  # busy from here: the wait for the lock is not work
            try:
                log_prob, value = fn(*(t.to(self.device) for t in tensors))
                out = log_prob.cpu(), value.cpu()
            except BaseException:
                self._counters.idle()
                raise
            self._counters.scoring()
        return out

    def evaluation_step(self, obs: torch.Tensor, state: Any, starts: torch.Tensor | None, deterministic: bool) -> tuple[torch.Tensor, Any]:
        """``action, next_state`` for test episodes (stateless here: the caller carries the state)."""
        with self._policy_lock, torch.inference_mode():
            state = None if state is None else state.to(self.device)
            starts = None if starts is None else starts.to(self.device)
            action, state = self.policy.evaluation_step(obs.to(self.device), state, starts, deterministic)
            return action.cpu(), None if state is None else state.cpu()

    # ---------------------------------------------------------------- weights, metrics

    def set_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Act with ``weights`` of policy ``version`` from the next batch on (in place; a running
        batch finishes with the weights it started with)."""
        with self._policy_lock:
            self.policy.set_weights(weights, version)

    def get_weights(self) -> dict[str, torch.Tensor]:
        with self._policy_lock:
            return self.policy.get_weights()

    def device_name(self) -> str:
        """Where the policy runs (``cuda:0``, ``cpu``)."""
        return str(next(self.policy.actor.parameters()).device)

    def pop_metrics(self) -> dict[str, float]:
        """Counters since the last call: ``requests``, ``rows``, ``batches``, ``mean_batch_rows``,
        ``max_batch_rows``, ``mean_wait_ms`` (queued until the batch started), ``score_requests``
        and ``busy_fraction`` (time running the policy over wall time)."""
        return self._counters.pop()

    def close(self) -> None:
        """Stop the batching thread; requests still queued fail."""
        with self._cond:
            self._closed = True
            queued, self._queue = list(self._queue), deque()
            self._cond.notify_all()
        self._thread.join()
        for request in queued:
            request.finish(error=RuntimeError("the inference server closed before acting on this request"))


class _Staging:
    """A batch's way to the policy's device and back.

    On the CPU it concatenates (a fresh tensor: the noise is scaled in place) and hands the
    replies back as they are. On a GPU it keeps one pinned host buffer per role, grown to the
    largest batch seen: the requests are concatenated into it and copied up without blocking, and
    the replies are copied down into their own buffers, then one stream synchronisation. Reuse is
    safe because the batching thread runs one policy call at a time and each synchronises (a
    failed one too: :meth:`settle`) before the next writes a buffer; the replies are cut from the
    buffers as copies (:attr:`reuses`).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.reuses = device.type == "cuda"
        self._buffers: dict[str, torch.Tensor] = {}

    def buffer(self, role: str, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """The pinned buffer of ``role``, as a ``shape`` view (reallocated when too small or of another dtype)."""
        numel = int(np.prod(shape))
        held = self._buffers.get(role)
        if held is None or held.dtype != dtype or held.numel() < numel:
            held = self._buffers[role] = torch.empty(numel, dtype=dtype, pin_memory=True)
        return held[:numel].view(*shape)

    def upload(self, role: str, parts: list[torch.Tensor]) -> torch.Tensor:
        """``torch.cat(parts)`` on the device."""
        if not self.reuses:
            return torch.cat(parts).to(self.device)
        host = self.buffer(role, (sum(p.shape[0] for p in parts), *parts[0].shape[1:]), parts[0].dtype)
        torch.cat(parts, out=host)
        return host.to(self.device, non_blocking=True)

    def download(self, tensors: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        """The device's ``tensors`` on the host (views of this batch's buffers on a GPU)."""
        if not self.reuses:
            return tensors
        host = [None if t is None else self.buffer(f"reply{i}", t.shape, t.dtype).copy_(t, non_blocking=True) for i, t in enumerate(tensors)]
        self.settle()
        return host

    def settle(self) -> None:
        """Wait for the copies in flight (the buffers may then be written again)."""
        if self.reuses:
            torch.cuda.current_stream(self.device).synchronize()


def _take_batch(queue: deque[PendingAct], max_rows: int) -> list[PendingAct]:
    """Pop the next batch off ``queue``: whole requests in arrival order while they fit in
    ``max_rows`` (the first always), a worker once (its next step waits for the next batch)."""
    batch: list[PendingAct] = []
    rows, workers = 0, set[int]()
    while queue and not (batch and (rows + queue[0].rows > max_rows or queue[0].worker_index in workers)):
        request = queue.popleft()
        batch.append(request)
        rows += request.rows
        workers.add(request.worker_index)
    return batch


def _array_reply(reply: ActReply) -> tuple[Any, ...]:
    """An :class:`ActReply` as an array client takes it: ``(action, log_prob, value, version)`` in numpy."""
    return (
        reply.action.numpy(), None if reply.log_prob is None else reply.log_prob.numpy(),
        None if reply.value is None else reply.value.numpy(), reply.version,
    )


def _pieces(t: torch.Tensor, sizes: list[int], copy: bool = False) -> list[torch.Tensor]:
    """``t`` split into compact CPU tensors (a view would pickle its whole batch); ``copy`` also
    when whole (``t`` is a buffer the next batch writes)."""
    if len(sizes) == 1:
        return [t.to("cpu", copy=copy)]
    return [piece.to("cpu", copy=True) for piece in t.split(sizes)]
