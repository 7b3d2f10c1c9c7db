"""A local worker plus remote copies of it: the one place that knows about Ray.

Workers are plain classes built from a picklable factory. :class:`WorkerSet` builds the local
worker in this process and ``num_remote`` Ray actors, each hosting a worker built by the same
factory with its own index (hence its own seeds) and the scheme's per-worker resources.

Everything the rest of the scheme does with remote workers goes through the few methods here
(:meth:`WorkerSet.call`, :meth:`WorkerSet.wait`, :meth:`WorkerSet.get`, :meth:`WorkerSet.put`),
so that Ray is imported only in this package, and only when a remote worker is asked for: a run
with local workers only never starts Ray.
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pytorchrl.scheme.base import compression
from pytorchrl.scheme.base.ray_runtime import ensure_ray, joins_cluster, planned_local_resources
from pytorchrl.utils.errors import WorkerFailure
from pytorchrl.utils.runtime import cap_threads

W = TypeVar("W")

#: a concurrency group for calls that must run while a long call (collect_data) is running
CONTROL_GROUP = "control"
#: how long a new remote worker may take to start
STARTUP_TIMEOUT_S = 300.0
#: below this size a value shared by calls travels inside each call (Ray inlines arguments up to 100 KB)
INLINE_BYTES = 90 * 1024


@dataclass(frozen=True)
class FaultTolerance:
    """What a :class:`WorkerSet` does when a remote worker dies (``scheme.*`` keys of the same names).

    :param max_restarts: replacements allowed over the set's life (``max_worker_restarts``).
    :param restart_delay_s: wait before a replacement (``worker_restart_delay_s``).
    :param ignore_failures: go on with fewer workers instead (``ignore_worker_failures``).
    :param timeout_s: a call not answered in this long means its worker is dead (``worker_timeout_s``).
    """

    max_restarts: int = 0
    restart_delay_s: float = 0.0
    ignore_failures: bool = False
    timeout_s: float | None = None


class _WorkerHost:
    """The Ray actor: hosts one worker and runs its methods by name.

    Results travel packed, their tensors in one buffer, lz4-compressed when ``compress`` is set
    (see :mod:`.compression`); packed arguments are unpacked before the call.
    """

    def __init__(
        self, worker_factory: Callable[..., Any], index: int, compress: bool, generation: int, delay_s: float = 0.0, max_threads: int | None = None
    ) -> None:
        time.sleep(delay_s)  # a replacement's back-off, spent here so that the driver never waits for it
        if max_threads is not None:  # before the worker's own configure_process(run.torch_threads)
            cap_threads(max_threads)
        self.worker = worker_factory(index, local=False, generation=generation)
        self.compress = compress

    def ready(self) -> bool:
        """Answers once the worker is built (its constructor ran before any call)."""
        return True

    def pid(self) -> int:
        """The worker's process id (for resource monitoring)."""
        return os.getpid()

    def threads(self) -> int:
        """The worker's torch intra-op threads."""
        import torch

        return torch.get_num_threads()

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        args = tuple(compression.unpack(a) for a in args)
        kwargs = {k: compression.unpack(v) for k, v in kwargs.items()}
        out = getattr(self.worker, method)(*args, **kwargs)
        return compression.pack(out, self.compress)


def remote_threads(resources: dict[str, Any]) -> int:
    """The most torch threads a remote worker runs: the whole CPUs Ray reserves for it (at least
    one). ``run.torch_threads`` sizes the driver's learner; a remote worker with the same count
    beside it oversubscribes the cores: with 2 threads in each of 3 processes on 2 cores, an
    APPO Pong learner's gradient step took the time of a 1-thread one (measured, 2026-11-23)."""
    return max(1, math.floor(float(resources.get("num_cpus", 1.0))))


class WorkerSet(Generic[W]):
    """A local worker and ``num_remote`` remote ones, all built by ``worker_factory(index, local=...)``.

    Remote workers are either *active* (:attr:`remote_workers`: built and answering) or
    *starting* (a replacement, or one added by :meth:`add`, whose process is being built).
    Nothing here waits for a starting worker except when no active one is left
    (:meth:`wait_for_active`): :meth:`poll` moves the ones that are up into
    :attr:`remote_workers`, at the end. A starting worker whose resources are gone (its node
    died) simply stays starting until the cluster has room for it again.

    A remote worker that dies is handed to :meth:`fail` (see :class:`FaultTolerance`): its
    replacement starts with the same index and the next ``generation``, which the factories
    turn into fresh seeds.

    :param worker_factory: ``worker_factory(index, local=bool, generation=int) -> worker``; picklable.
    :param num_remote: remote workers (indices 1..num_remote); the local one has index 0.
    :param resources: Ray resources of each remote worker: ``num_cpus``, ``num_gpus``,
        ``memory`` (bytes or None) and ``resources`` (custom, e.g. ``{"node_a": 1}``).
    :param compress: lz4-compress what remote workers send back (rollouts, gradients).
    :param fault: what to do when a remote worker dies.
    :param name: what the workers are called in messages ("collection worker").
    """

    def __init__(
        self,
        worker_factory: Callable[..., W],
        *,
        num_remote: int = 0,
        resources: dict[str, Any] | None = None,
        compress: bool = False,
        fault: FaultTolerance | None = None,
        name: str = "worker",
    ) -> None:
        self.worker_factory = worker_factory
        self.resources = dict(resources or {})
        self.compress = compress
        self.fault = fault or FaultTolerance()
        self.name = name
        self.restarts = 0
        self._reported_restarts = 0
        self._replace_times: list[float] = []  # seconds from a death to its replacement answering, not yet reported
        self.local_worker: W = worker_factory(0, local=True)
        self.remote_workers: list[Any] = []
        self._index: dict[Any, tuple[int, int]] = {}  # remote handle -> (index, generation)
        self._starting: dict[Any, tuple[Any, float]] = {}  # ready() ref -> (handle, when started)
        self._configured = num_remote  # the count the set was built with (add/remove change it since)
        #: the indices the set is meant to hold: the built ones, plus those added, less those taken
        #: out (a worker lost with scheme.ignore_worker_failures stays a member: a resume restarts it)
        self._members = set(range(1, num_remote + 1))
        self._next_index = num_remote + 1  # of the next worker added
        #: held while the set's members change (a worker joins, another thread resizes the set),
        #: so that a resize reaches a worker that joins either before it or after, never both
        self.membership = threading.RLock()
        #: told the workers that joined a running set (replacements, added ones) before anyone
        #: else sees them: a place to give them what the others have built up
        self.on_join: Callable[[list[Any]], None] | None = None
        if num_remote:
            ray = ensure_ray()
            self._actor_cls = ray.remote(**actor_options(self.resources))(_WorkerHost)
            try:
                for i in range(1, num_remote + 1):
                    self._start(i)
                self._await_ready()
            except BaseException:  # one could not start: the others end with the error, not with the driver
                self.close()
                raise

    def index_of(self, worker: Any) -> int | None:
        """A remote worker's index (None: it has died or been taken out)."""
        entry = self._index.get(worker)
        return None if entry is None else entry[0]

    def layout(self) -> dict[str, Any]:
        """Which workers the set holds, for a checkpoint: the indices of its members (built or
        added, not taken out; one being replaced, or lost with ``ignore_failures``, still
        counts), the index the next one added gets, and the count it was built with
        (:meth:`restore_layout`)."""
        return {"indices": sorted(self._members), "next_index": self._next_index, "configured": self._configured}

    def restore_layout(self, layout: dict[str, Any]) -> bool:
        """Hold the remote workers of a checkpoint's :meth:`layout`: workers added or taken out
        while it trained are started or ended again, by index, and waited for (a resumed run
        then goes on with the workers it had, seeded as they were). A set built with another
        count than the checkpoint's (the config changed on resume) keeps its own.

        :return: whether the set now holds the layout's workers.
        """
        with self.membership:
            self._next_index = max(self._next_index, int(layout["next_index"]))
            if int(layout["configured"]) != self._configured or not self.remote:
                return False
            wanted = {int(i) for i in layout["indices"]}
            for handle, (index, _) in list(self._index.items()):
                if index not in wanted:
                    if handle in self.remote_workers:
                        self.remote_workers.remove(handle)
                    self._starting = {ref: v for ref, v in self._starting.items() if v[0] != handle}
                    self.kill(handle)
            have = {index for index, _ in self._index.values()}
            for index in sorted(wanted - have):
                self._start(index)
            self._members = wanted
            self._await_ready(late="warn")  # as a new set does; a cluster without room for them yet: they join later, afresh
            self.remote_workers.sort(key=lambda w: self._index[w][0])
            return True

    def _start(self, index: int, generation: int = 0, delay_s: float = 0.0) -> Any:
        handle = self._actor_cls.remote(self.worker_factory, index, self.compress, generation, delay_s, remote_threads(self.resources))
        self._index[handle] = (index, generation)
        self._starting[handle.ready.remote()] = (handle, time.monotonic())
        return handle

    # ---------------------------------------------------------- failures and elasticity

    @staticmethod
    def is_failure(error: BaseException) -> bool:
        """Whether ``error`` (raised by :meth:`get`) means the worker is gone: its process or node
        died, or the call raised inside it (the worker's state is then unknown)."""
        import ray.exceptions

        return isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.RayTaskError))

    def fail(self, worker: Any, reason: str) -> None:
        """Retire a dead (or unresponsive) remote ``worker`` and start its replacement.

        The replacement starts after ``restart_delay_s`` without blocking anyone and joins
        :attr:`remote_workers` at a later :meth:`poll`. Ignoring failures, none is started.

        :raises WorkerFailure: restarts used up, or (ignoring failures) no worker left.
        """
        import ray

        ray.kill(worker, no_restart=True)  # a stalled one must not come back and answer late
        if worker not in self._index:  # already retired (reported twice, or taken out by remove())
            return
        index, generation = self._index.pop(worker)
        if worker in self.remote_workers:
            self.remote_workers.remove(worker)
        self._starting = {ref: v for ref, v in self._starting.items() if v[0] != worker}
        if self.fault.ignore_failures:
            if not self.remote_workers and not self._starting:
                raise WorkerFailure(f"every remote {self.name} has died (last: {reason}); scheme.ignore_worker_failures leaves none to go on with")
            return
        if self.restarts >= self.fault.max_restarts:
            raise WorkerFailure(
                f"remote {self.name} {index} died ({reason}) and scheme.max_worker_restarts = "
                f"{self.fault.max_restarts} replacements are used up"
            )
        self.restarts += 1
        warnings.warn(
            f"remote {self.name} {index} died ({reason}); starting a replacement "
            f"({self.restarts} of scheme.max_worker_restarts = {self.fault.max_restarts} used)",
            stacklevel=2,
        )
        self._start(index, generation + 1, self.fault.restart_delay_s)

    def poll(self, timeout: float = 0.0) -> list[Any]:
        """Move the starting workers that are up into :attr:`remote_workers` (waiting up to
        ``timeout`` seconds for the first); one that failed to start is handed to :meth:`fail`.

        :return: the workers that joined.
        """
        if not self._starting:
            return []
        ready, _ = self.wait(list(self._starting), num_returns=1, timeout=timeout)
        if ready:  # then every other one up by now too
            ready, _ = self.wait(list(self._starting), num_returns=len(self._starting), timeout=0)
        joined = []
        with self.membership:  # a resize from another thread comes before these join or after on_join told them of it
            for ref in ready:
                if ref not in self._starting:  # taken out meanwhile
                    continue
                handle, started = self._starting.pop(ref)
                ok, reason = self.try_get(ref)
                if ok:
                    self.remote_workers.append(handle)
                    joined.append(handle)
                    if self._index.get(handle, (0, 0))[1] > 0:  # a replacement: started when its predecessor was declared dead
                        self._replace_times.append(time.monotonic() - started)
                else:
                    self.fail(handle, f"could not start: {reason}")
            if joined and self.on_join is not None:
                self.on_join(joined)
        return joined

    def report(self) -> dict[str, Any]:
        """What happened since the last report, wherever it was noticed (a death found while
        sending weights counts as much as one found while collecting): ``worker_restarts``
        (replacements started) and ``worker_replace_s`` (mean seconds from a death to its
        replacement answering, for those that joined; absent if none did)."""
        out: dict[str, Any] = {"worker_restarts": self.restarts - self._reported_restarts}
        self._reported_restarts = self.restarts
        if self._replace_times:
            out["worker_replace_s"] = sum(self._replace_times) / len(self._replace_times)
            self._replace_times.clear()
        return out

    def wait_for_active(self) -> list[Any]:
        """Block until at least one remote worker is active (nothing to wait for when one is).

        :return: the workers that joined meanwhile.
        :raises WorkerFailure: when none starts within ``STARTUP_TIMEOUT_S`` (the cluster lacks
            the resources, or the workers fail as they start).
        """
        joined: list[Any] = []
        limit = time.monotonic() + max(STARTUP_TIMEOUT_S, self.fault.timeout_s or 0.0)
        while not self.remote_workers:
            if not self._starting or time.monotonic() > limit:
                raise WorkerFailure(
                    f"no remote {self.name} is alive and none could start within {STARTUP_TIMEOUT_S:g} s; "
                    "does the Ray cluster still have the resources they ask for?"
                )
            joined += self.poll(timeout=max(0.0, limit - time.monotonic()))
        return joined

    def _await_ready(self, late: str = "raise") -> None:
        """Wait until every starting worker is built (a new set starts complete), so that
        ``timeout_s`` never counts a worker's start-up; a worker that cannot start is an error.
        Those not up within the start-up time are an error too, or (``late="warn"``, a
        checkpoint's workers started again) warned of: they join at a later :meth:`poll`."""
        limit = max(STARTUP_TIMEOUT_S, self.fault.timeout_s or 0.0)
        refs = list(self._starting)
        if not refs:
            return
        ready, _ = self.wait(refs, num_returns=len(refs), timeout=limit)
        for ref in refs:
            if ref not in ready:
                continue
            handle, _ = self._starting.pop(ref)
            ok, reason = self.try_get(ref)
            if not ok:
                raise WorkerFailure(f"a remote {self.name} could not start: {reason}")
            self.remote_workers.append(handle)
        if self._starting and late == "raise":
            raise WorkerFailure(f"remote {self.name}s did not start within {limit:g} s; is the Ray cluster overloaded?")
        if self._starting:
            warnings.warn(
                f"{len(self._starting)} remote {self.name}s of the checkpoint did not start within {limit:g} s; "
                "they join when the Ray cluster has room for them, starting afresh",
                stacklevel=3,
            )

    @property
    def starting(self) -> list[Any]:
        """The ``ready()`` refs of the workers still starting (to wait on beside other calls)."""
        return list(self._starting)

    def add(self, num: int) -> None:
        """Start ``num`` more remote workers, with new indices (so new seeds); they join at a
        later :meth:`poll`."""
        if num < 0:
            raise ValueError(f"cannot add {num} workers: must be >= 0")
        if not self.remote_workers and not self._starting:
            raise no_remote_workers(self.name, "adding")
        for _ in range(num):
            self._start(self._next_index)
            self._members.add(self._next_index)
            self._next_index += 1

    def remove(self, num: int) -> list[Any]:
        """Take ``num`` remote workers out of the set: starting ones first (they are killed),
        then the newest active ones, which are returned for the caller to :meth:`kill` once
        their calls in flight have answered. At least one worker stays.

        :raises ValueError: ``num`` would leave no remote worker.
        """
        have = len(self.remote_workers) + len(self._starting)
        if have == 0:
            raise no_remote_workers(self.name, "removing")
        check_removal(self.name, have, num)
        for ref in list(self._starting)[::-1][:num]:
            handle, _ = self._starting.pop(ref)
            self._members.discard(self._index.get(handle, (0, 0))[0])
            self.kill(handle)
            num -= 1
        removed = self.remote_workers[len(self.remote_workers) - num:] if num else []
        for handle in removed:
            self.remote_workers.remove(handle)
            self._members.discard(self._index.pop(handle, (0, 0))[0])
        return removed

    def pids(self) -> list[int]:
        """Process ids of the active remote workers (answered beside any call in progress)."""
        import ray

        return ray.get([w.pid.options(concurrency_group=CONTROL_GROUP).remote() for w in self.remote_workers]) if self.remote_workers else []

    def kill(self, worker: Any) -> None:
        """End a remote worker's process (one taken out by :meth:`remove`, or starting)."""
        import ray

        self._index.pop(worker, None)
        ray.kill(worker, no_restart=True)

    @property
    def num_workers(self) -> int:
        return 1 + len(self.remote_workers)

    @property
    def remote(self) -> bool:
        """Whether this set has remote workers, active or starting (then the local one does not do the work)."""
        return bool(self.remote_workers or self._starting)

    # ------------------------------------------------------------------ remote calls

    def call(self, worker: Any, method: str, *args: Any, control: bool = False, **kwargs: Any) -> Any:
        """Start ``worker.method(*args, **kwargs)`` on a remote worker; returns an object ref.

        ``control`` runs it beside a long call in progress (e.g. preempting a collection).
        Object refs among the top-level arguments arrive as their values.
        """
        fn = worker.call.options(concurrency_group=CONTROL_GROUP) if control else worker.call
        return fn.remote(method, *args, **kwargs)

    def ask_all(self, method: str, *args: Any, control: bool = False) -> list[Any]:
        """The answers to ``method`` of every active remote worker that gives one (in worker
        order; ``control``: beside a long call in progress). One found dead is handed to
        :meth:`fail` (replaced) and left out; a call of its still under way fails for whoever
        waits on it next, who counts what it loses."""
        return [value for _, value in self.ask_each(method, *args, control=control)]

    def ask_each(self, method: str, *args: Any, control: bool = False) -> list[tuple[int | None, Any]]:
        """:meth:`ask_all`, each answer with the index of the worker that gave it."""
        refs = [(w, self.index_of(w), self.call(w, method, *args, control=control)) for w in list(self.remote_workers)]
        out = []
        for worker, index, ref in refs:
            ok, value = self.try_get(ref)
            if ok:
                out.append((index, value))
            else:
                self.fail(worker, value)
        return out

    def put(self, value: Any, *, compress: bool = False) -> Any:
        """Make ``value`` ready to be passed to any number of calls, packed (its tensors in one
        buffer, lz4-compressed with ``compress`` and the set's compression on).

        A large value is stored once in the object store and the ref returned (every call then
        reads the one copy). A small one (under Ray's limit for inline arguments, 100 KB) is
        returned packed and travels inside each call: cheaper than a put and a fetch, ~1.3 ms a
        round on the reference machine for a small policy's weights.
        """
        import ray

        packed = compression.pack(value, compress and self.compress)
        return packed if compression.nbytes(packed) < INLINE_BYTES else ray.put(packed)

    @staticmethod
    def wait(refs: Sequence[Any], *, num_returns: int = 1, timeout: float | None = None) -> tuple[list[Any], list[Any]]:
        """Split ``refs`` into ``num_returns`` ready ones and the rest (both in the order given)."""
        import ray

        return ray.wait(list(refs), num_returns=num_returns, timeout=timeout)

    @staticmethod
    def get(refs: Any) -> Any:
        """The values of one ref or a list of refs, decompressed."""
        import ray

        out = ray.get(refs)
        return [compression.unpack(o) for o in out] if isinstance(refs, list) else compression.unpack(out)

    def try_get(self, ref: Any) -> tuple[bool, Any]:
        """``(True, value)`` of one ref, or ``(False, reason)`` when its worker failed
        (:meth:`is_failure`); any other error is raised."""
        try:
            return True, self.get(ref)
        except Exception as error:
            if not self.is_failure(error):
                raise
            return False, failure_reason(error)

    def close(self) -> None:
        close = getattr(self.local_worker, "close", None)
        if close is not None:
            close()
        if self.remote_workers or self._starting:
            import ray

            for w in [*self.remote_workers, *(h for h, _ in self._starting.values())]:
                ray.kill(w)
            self.remote_workers, self._starting = [], {}


def paired(workers: WorkerSet[Any], states: list[Any], indices: list[int] | None) -> list[tuple[Any, Any]]:
    """Each active remote worker with its saved state: the state of its index (``indices``: whose
    each state is; a worker replaced or added since is no longer in index order), or by position
    in a checkpoint that kept no indices. A worker without a state starts afresh."""
    if indices is None:
        return list(zip(workers.remote_workers, states, strict=False))
    by_index = dict(zip(indices, states, strict=True))
    return [(w, by_index[i]) for w in workers.remote_workers if (i := workers.index_of(w)) in by_index]


def no_remote_workers(name: str, verb: str) -> ValueError:
    """The error of ``verb`` (adding, removing) remote workers of a set that has none."""
    return ValueError(f"{verb} remote {name}s needs a set started with remote ones (the local worker does the work here)")


def check_removal(name: str, have: int, num: int) -> None:
    """Refuse to take ``num`` of ``have`` remote workers called ``name`` out (one must stay).

    :raises ValueError: naming how many can go.
    """
    if not 0 <= num < have:
        room = f"at most {have - 1} can go" if have > 1 else "none can go"
        raise ValueError(f"cannot remove {num} of {have} remote {name}s: at least one must stay, so {room}")


def first_answer(workers: WorkerSet[Any], method: str, *, control: bool = False, skip: Sequence[Any] = ()) -> tuple[bool, Any]:
    """``(True, answer)`` of the first active remote worker (not in ``skip``) that answers
    ``method`` (no arguments; ``control``: beside a long call in progress), else ``(False,
    None)``. One that fails is left to whoever replaces workers (it is found at its next call)."""
    for worker in [w for w in workers.remote_workers if w not in skip]:
        ok, value = workers.try_get(workers.call(worker, method, control=control))
        if ok:
            return True, value
    return False, None


def pass_on(workers: WorkerSet[Any], joined: list[Any], get: str, put: str, *, control: bool = False) -> None:
    """Give the workers that ``joined`` a running set what an established one has built up: the
    :func:`first_answer` of another worker to ``get`` goes to each joiner's ``put`` (nothing
    when it is empty, or when none answers). A joiner that dies meanwhile is found at its next call."""
    _, value = first_answer(workers, get, control=control, skip=joined)
    if value:
        give(workers, joined, put, value)


def give(workers: WorkerSet[Any], joined: list[Any], put: str, value: Any) -> None:
    """Call ``put(value)`` on each of ``joined`` and wait; one that dies meanwhile is found at its next call."""
    for ref in [workers.call(w, put, value) for w in joined]:
        workers.try_get(ref)


def answers(workers: WorkerSet[Any], refs: Sequence[Any]) -> list[Any]:
    """The values of the calls ``refs`` (under way), waited for; a dead worker's are left out, to
    whoever waits on its call next (it replaces the worker)."""
    values = []
    for ref in refs:
        ok, value = workers.try_get(ref)
        if ok:
            values.append(value)
    return values


def failure_reason(error: BaseException) -> str:
    """One line on why a remote call failed (for messages and logs)."""
    import ray.exceptions

    if isinstance(error, ray.exceptions.RayTaskError):
        cause = getattr(error, "cause", None) or error
        lines = str(cause).strip().splitlines()
        return f"{type(cause).__name__}: {lines[-1] if lines else ''}".rstrip(": ")
    if isinstance(error, ray.exceptions.RayActorError):
        if getattr(error, "actor_init_failed", False):  # its constructor raised: the exception's last line ends Ray's message
            lines = [line for line in str(error).strip().splitlines() if line.strip()]
            kind, _, message = (lines[-1] if lines else "").partition(": ")
            return f"it raised {kind.rsplit('.', 1)[-1]} as it started: {message}" if message else "it raised an error as it started"
        return "its process died"
    return type(error).__name__


def replica_ordinal(index: int) -> int:
    """The ordinal that keys a worker's seeds: remote worker ``k`` gets ``k - 1`` and the local
    worker (index 0) gets 0, so a lone remote worker reproduces a lone local one exactly."""
    return max(index - 1, 0)


@dataclass(frozen=True)
class CollectorNumbering:
    """The number of each collecting worker of one gradient replica's collection set, which keys
    its seeds: numbers are distinct over every replica's workers, added ones included.

    Replica ``replica`` (of ``replicas``) starts with ``per_replica`` collecting workers, numbered
    ``replica * per_replica + j`` (``j``: :func:`replica_ordinal` of the worker's index), so that
    the replicas' first workers are numbered 0, 1, 2, ... in order. A worker added later (``j >=
    per_replica``) takes a number past all of those, the replicas' added workers interleaved:
    ``replicas * per_replica + (j - per_replica) * replicas + replica``. One set alone
    (``replicas`` 1) numbers its workers ``j``.
    """

    replica: int = 0
    replicas: int = 1
    per_replica: int = 1

    def __call__(self, index: int) -> int:
        j = replica_ordinal(index)
        if j < self.per_replica:
            return self.replica * self.per_replica + j
        return self.replicas * self.per_replica + (j - self.per_replica) * self.replicas + self.replica


def actor_options(resources: dict[str, Any]) -> dict[str, Any]:
    """Ray actor options for one worker's resources (``memory: None`` means no reservation)."""
    items = dict(_resource_items(resources))
    options: dict[str, Any] = {
        "num_cpus": items.pop("CPU", 0.0),
        "num_gpus": items.pop("GPU", 0.0),
        "concurrency_groups": {CONTROL_GROUP: 1},
        "max_restarts": 0,
    }
    if "memory" in items:
        options["memory"] = int(items.pop("memory"))
    if items:
        options["resources"] = items
    return options


def total_resources(groups: Sequence[tuple[str, int, dict[str, Any]]]) -> dict[str, float]:
    """Sum the resources of ``(name, count, resources)`` worker groups, in Ray's resource names."""
    total: dict[str, float] = {}
    for _, count, res in groups:
        for key, amount in _resource_items(res):
            total[key] = total.get(key, 0.0) + count * amount
    return total


def _resource_items(res: dict[str, Any]) -> list[tuple[str, float]]:
    """One worker's non-zero resources under Ray's names (``CPU``, ``GPU``, ``memory``, custom)."""
    items = [("CPU", float(res.get("num_cpus", 1.0))), ("GPU", float(res.get("num_gpus", 0.0)))]
    if res.get("memory"):
        items.append(("memory", float(res["memory"])))
    items.extend((str(k), float(v)) for k, v in (res.get("resources") or {}).items())
    return [(k, v) for k, v in items if v > 0]


def check_fits(
    groups: Sequence[tuple[str, int, dict[str, Any]]],
    cluster: dict[str, float],
    nodes: Sequence[dict[str, float]],
    where: str = "scheme",
    who: str = "the workers",
) -> str | None:
    """Why the worker ``groups`` cannot all be placed on a cluster, or None when they may.

    Each check is one no placement can pass: a resource no node has enough of, totals beyond
    the cluster's, and each group alone on the nodes as Ray places a worker (all of its
    resources on one node; a fraction of a GPU within one GPU). Groups that fit alone may
    still not fit together; Ray's placement decides those, and the run waits for them.

    :param groups: ``(name, count, resources)`` per kind of worker.
    :param cluster: the cluster's total resources (``ray.cluster_resources()``).
    :param nodes: each alive node's resources.
    :param where: what the message starts with (the part of the config that asks).
    :param who: what the groups are, in the message on their total.
    """
    for name, count, res in groups:
        if count == 0:
            continue
        for key, amount in _resource_items(res):
            biggest = max((n.get(key, 0.0) for n in nodes), default=0.0)
            if amount > biggest + 1e-9:
                return (
                    f"{where}: one {name} asks for {_fmt(key, amount)} {key} but no node of the Ray cluster has more than "
                    f"{_fmt(key, biggest)}; lower the {name} resources or add such a node"
                )
    for key, amount in total_resources(groups).items():
        have = cluster.get(key, 0.0)
        if amount > have + 1e-9:
            detail = " + ".join(f"{c} {n}{'s' * (c != 1)} x {_fmt(key, v)}" for n, c, r in groups for k, v in _resource_items(r) if k == key and c)
            return (
                f"{where}: {who} ask for {_fmt(key, amount)} {key} in all ({detail}) but the Ray cluster has "
                f"{_fmt(key, have)}; lower the worker counts or their per-worker resources"
            )
    # each group alone on the nodes, as Ray places a worker: a bound no mix of groups can beat
    for name, count, res in groups:
        if count == 0:
            continue
        per_node = [_workers_on(n, res) for n in nodes]
        if sum(per_node) >= count:
            continue
        wants = ", ".join(f"{_fmt(k, v)} {k}" for k, v in _resource_items(res))
        if not any(per_node):
            return (
                f"{where}: one {name} asks for {wants} on one node, and no node of the Ray cluster has all of that; "
                f"lower the {name} resources or add such a node"
            )
        return (
            f"{where}: {count} {name}s ask for {wants} each, all of a worker's on one node, and the Ray cluster's nodes "
            f"hold {sum(per_node)} of them at most (per node: {', '.join(map(str, per_node))}); lower the {name} count or resources, or add nodes"
        )
    return None


def _workers_on(node: dict[str, float], res: dict[str, Any]) -> int:
    """How many workers of ``res`` one node holds alone, as Ray places them: every resource of a
    worker on the one node, and its GPUs as Ray's GPU instances (a fraction of one GPU within
    one instance, whole GPUs as whole instances)."""
    most = math.inf
    for key, amount in _resource_items(res):
        have = node.get(key, 0.0)
        if key == "GPU" and amount < 1:
            fits = math.floor(have + 1e-9) * math.floor(1 / amount + 1e-9)
        else:
            fits = math.floor(have / amount + 1e-9)
        most = min(most, fits)
    return 10**9 if most == math.inf else int(most)


def _fmt(key: str, value: float) -> str:
    if key == "memory":
        return f"{value / 2**30:.2f} GiB"  # followed by the key, "memory", or by the end of a clause
    return str(int(value)) if math.isclose(value, round(value)) else f"{value:g}"


#: seconds :func:`busy_resources` waits for resources to come free before it says they are not
BUSY_GRACE_S = 5.0


def busy_resources(groups: Sequence[tuple[str, int, dict[str, Any]]], who: str = "the workers") -> str | None:
    """When the worker ``groups`` fit a cluster that this run joins (:func:`check_fits` said so)
    but not into what it has free now (other jobs or runs hold the rest), why: Ray then waits,
    silently, until they are freed. None when they fit now, or on a Ray of this run's own."""
    if not joins_cluster():
        return None
    deadline = time.monotonic() + BUSY_GRACE_S
    while True:
        free = dict(ensure_ray().available_resources())
        short = [(key, amount, free.get(key, 0.0)) for key, amount in total_resources(groups).items() if amount > free.get(key, 0.0) + 1e-9]
        if not short:
            return None
        if time.monotonic() >= deadline:
            break
        time.sleep(0.25)  # workers just stopped (a scheme closed a moment ago) give their resources back within a second or two
    key, amount, have = short[0]
    return (
        f"{who} ask for {_fmt(key, amount)} {key} in all; the Ray cluster has that many but only {_fmt(key, have)} free now "
        "(other jobs or runs hold the rest), so the run waits until they are freed"
    )


def cluster_resources(*, need_memory: bool = False) -> tuple[dict[str, float], list[dict[str, float]]]:
    """The Ray cluster's total resources and each alive node's.

    For an embedded local Ray not started yet, its planned CPUs and GPUs, so that a layout that
    cannot fit fails before paying Ray's start-up (unless memory is reserved: only a running
    Ray knows how much it has).
    """
    planned = None if need_memory else planned_local_resources()
    if planned is not None:
        return planned, [planned]
    ray = ensure_ray()
    nodes = [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]
    return dict(ray.cluster_resources()), nodes
