"""Central inference servers as Ray actors, and the transport their clients call them through.

:class:`InferenceServers` starts ``num_servers`` named, threaded Ray actors, each hosting an
:class:`~pytorchrl.scheme.inference.server.InferenceServer` built from a picklable factory (as
every worker is), and is the learner's handle on them: new weights once per round
(:meth:`InferenceServers.set_weights`) and their counters (:meth:`InferenceServers.pop_metrics`).
A collection worker acts through a :class:`~pytorchrl.scheme.inference.client.RemotePolicy`
whose transport is a :class:`ServerCall`: the server's name, resolved in the worker's process
(so a replaced server is found again by name), never a handle captured at start-up.
A collection worker without torch calls it over a plain socket instead (:mod:`.socket_transport`:
a Unix socket on the server's node, TCP from other nodes; ``scheme.inference_server.transport``),
with the :class:`ServerCall` as its fallback.

Like :mod:`.worker_set`, Ray is imported here only when a server is asked for.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytorchrl.scheme.base import compression
from pytorchrl.scheme.base.socket_transport import Endpoint, Route, SocketCall, SocketListener, socket_address
from pytorchrl.scheme.base.worker_set import STARTUP_TIMEOUT_S, remote_threads
from pytorchrl.utils.errors import RequestInDoubt, WorkerFailure
from pytorchrl.utils.runtime import cap_threads, renice_threads, thread_ids

if TYPE_CHECKING:
    from pytorchrl.scheme.inference.array_policy import ArrayPolicy
    from pytorchrl.scheme.inference.client import RemotePolicy

#: the server's own counters (InferenceServer.pop_metrics) turned into the round's metrics
METRICS = ("inference_batch_mean", "inference_wait_ms", "inference_requests_per_s", "inference_busy_fraction")


#: what a client without torch calls (over the socket too: :mod:`.socket_transport`)
ARRAY_METHODS = frozenset(("array_spec", "stream_state", "begin_rollout", "act_arrays", "score_arrays"))

#: a server's threads (Ray's ``max_concurrency``) at the least: every client's ``act`` waits for its
#: batch in one, so workers added during training up to this many per server never queue for one
MIN_SERVER_THREADS = 128


class _ServerHost:
    """The Ray actor: hosts one inference server and runs its methods by name, from many threads
    at once (its ``max_concurrency`` lets every client's ``act`` wait for its batch together).

    Started again by Ray when its process dies (up to ``scheme.max_worker_restarts`` times), it
    first takes the newest weights the learner left in the :class:`_ServerBox`, so a restarted
    server acts with the same weights and version as the others before it answers anyone.
    """

    def __init__(self, box_name: str, max_threads: int, transport: str = "auto", niceness: int | None = None) -> None:
        import ray

        cap_threads(max_threads)
        # the driver's priority, before this actor starts threads of its own (they inherit it);
        # Ray's collection workers stay at its 15, so a waiting batch runs first (None: as Ray left it)
        self.reniced = niceness is not None and renice_threads(niceness)
        # the factory and the weights come from the box, not as constructor arguments: Ray keeps
        # those in its object store, where they may be gone when it restarts the actor
        started: Any = ray.get(ray.get_actor(box_name).start.remote())  # (the factory ref, the newest weights or None)
        factory_refs, latest = started
        self.server: Any = ray.get(factory_refs[0])()
        if latest is not None:
            (ref,), version = latest
            self.server.set_weights(compression.unpack(ray.get(ref)), version)
        #: the side door (after the weights: a client may call as soon as it connects); TCP on
        #: the node's address for other nodes' clients unless they are to use Ray, or Ray's own
        #: traffic is encrypted (TLS), which a plain socket would not be
        tls = os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true")
        tcp_host = ray.util.get_node_ip_address() if transport == "auto" and not tls else None
        self.node: str = ray.get_runtime_context().get_node_id()
        self.listener: SocketListener = SocketListener(
            self._array_call, socket_address(ray.get_runtime_context().get_actor_name()), tcp_host,
            batched=("act_arrays", self.server.act_arrays_now), max_wait_s=self.server.max_wait_s,
        )

    def ready(self) -> bool:
        return True

    def endpoint(self) -> tuple[str, Endpoint]:
        """The Ray node this server runs on, and where its socket listens (:mod:`.socket_transport`)."""
        return self.node, self.listener.endpoint()

    def socket_calls(self) -> dict[str, int]:
        """Calls answered over the socket so far: ``{"unix": n, "tcp": m}``."""
        return dict(self.listener.calls)

    def _array_call(self, method: str, args: tuple[Any, ...]) -> Any:
        """A call over the socket (:attr:`listener`)."""
        if method not in ARRAY_METHODS:
            raise ValueError(f"{method} is not served over the socket")
        return getattr(self.server, method)(*args)

    def pid(self) -> int:
        """The server's process id (for resource monitoring)."""
        return os.getpid()

    def niceness(self) -> tuple[bool, set[int]]:
        """Whether the server took the driver's niceness, and the niceness of each of its threads now."""
        return self.reniced, {os.getpriority(os.PRIO_PROCESS, tid) for tid in thread_ids()}

    def call(self, method: str, *args: Any) -> Any:
        """``server.method(*args)`` (the learner's calls: weights, counters); packed arguments
        are unpacked."""
        return getattr(self.server, method)(*(compression.unpack(a) for a in args))

    def request(self, method: str, args: Any) -> Any:
        """A client's call: ``server.method(*args)`` with the arguments and the result packed
        (:mod:`.compression`), since pickled torch tensors cost a request more CPU than the rest
        of its round trip (BENCHMARKS.md, "Central inference at scale")."""
        return compression.pack(getattr(self.server, method)(*compression.unpack(args)))


class _ServerBox:
    """A small actor that holds what a (re)starting server needs, the server factory's and the
    newest weights' object refs (not the objects: wrapped in lists, Ray keeps the refs alive
    without fetching them), and counts server starts."""

    def __init__(self, factory_ref: list[Any]) -> None:
        self.factory_ref = factory_ref
        self.latest: tuple[list[Any], int] | None = None
        self.starts = 0

    def put(self, refs: list[Any], version: int) -> None:
        self.latest = (refs, version)

    def start(self) -> tuple[list[Any], tuple[list[Any], int] | None]:
        """A server starts: the factory, and the newest weights if the learner has set any."""
        self.starts += 1
        return self.factory_ref, self.latest

    def count(self) -> int:
        return self.starts


#: per process: the handle last resolved for a server name
_handles: dict[str, Any] = {}


class ServerCall:
    """``call(method, *args)`` on the server named ``name`` (the :class:`RemotePolicy` transport).

    A call that finds the server's process dead is sent again once Ray has started it again
    under its name (:func:`call_surviving`); a reply not back in ``timeout_s``, or a server whose
    restarts are used up, raises, which fails the collection worker's call like any other fault.

    :param name: the server actor's Ray name.
    :param timeout_s: the longest one call waits (None: no limit).
    """

    def __init__(self, name: str, timeout_s: float | None = None) -> None:
        self.name, self.timeout_s = name, timeout_s

    def __call__(self, method: str, *args: Any) -> Any:
        return self._send(method, args, resend_in_doubt=True)

    def once(self, method: str, *args: Any) -> Any:
        """As a call, for a request that is not safe to send twice: where it may have run on a
        server Ray lost touch with, :class:`RequestInDoubt` is raised instead of sending it again."""
        return self._send(method, args, resend_in_doubt=False)

    def _send(self, method: str, args: tuple[Any, ...], *, resend_in_doubt: bool) -> Any:
        packed = compression.pack(args)
        return compression.unpack(call_surviving(self.name, lambda h: h.request.remote(method, packed), self.timeout_s, resend_in_doubt=resend_in_doubt))


def call_surviving(name: str, submit: Callable[[Any], Any], timeout_s: float | None, *, resend_in_doubt: bool = True) -> Any:
    """``ray.get(submit(handle))`` on the actor named ``name``, sent again while Ray restarts it.

    :param resend_in_doubt: send it again, too, when Ray lost touch with a live server (a network
        fault: the call may or may not have run); else raise :class:`RequestInDoubt`.
    :raises WorkerFailure: the actor is gone for good (its restarts used up: its name no longer resolves).
    :raises ray.exceptions.GetTimeoutError: no reply within ``timeout_s`` in all (or the
        ``RayActorError`` of the last try, when the time ran out while it was restarting).
    """
    import ray

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        handle = _handles.get(name) or _resolve(name)
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            return ray.get(submit(handle), timeout=left)
        except ray.exceptions.RayActorError as error:
            if not resend_in_doubt and isinstance(error, ray.exceptions.ActorUnavailableError):
                raise RequestInDoubt(f"inference server {name} was unreachable during a call that may have run: {error}") from error
            if deadline is not None and time.monotonic() >= deadline:
                raise
            try:  # a name that still resolves is an actor being restarted
                _resolve(name)
            except ValueError:
                raise WorkerFailure(f"inference server {name} died and its restarts (scheme.max_worker_restarts) are used up") from None
            time.sleep(_RETRY_S)


#: the pause before a call is sent again to a server being restarted
_RETRY_S = 0.05


def locate(name: str, transport: str, timeout_s: float | None) -> Route | None:
    """How this process reaches the server named ``name`` by socket: its Unix socket when on its
    Ray node, else its TCP port with ``transport`` "auto"; None: by Ray call."""
    import ray

    node, endpoint = call_surviving(name, lambda h: h.endpoint.remote(), timeout_s)
    if node == ray.get_runtime_context().get_node_id():
        return "unix", endpoint.unix, endpoint.key
    if transport == "auto" and endpoint.tcp is not None:
        return "tcp", endpoint.tcp, endpoint.key
    return None


def _resolve(name: str) -> Any:
    import ray

    _handles[name] = handle = ray.get_actor(name)
    return handle


def remote_policy(
    index: int, *, names: tuple[str, ...], timeout_s: float | None, arrays: bool = False, transport: str = "auto",
) -> RemotePolicy | ArrayPolicy:
    """Collection worker ``index``'s policy: served by server ``index % len(names)`` (remote worker
    ``i`` has collector index ``i - 1``, so it uses server ``(i - 1) % num_servers``); with
    ``arrays`` an :class:`~pytorchrl.scheme.inference.array_policy.ArrayPolicy` (a worker without
    torch), which calls the server over a socket (:mod:`.socket_transport`) unless ``transport``
    is "ray": "auto" a Unix socket on the server's node and TCP from others, "same_node" the Unix
    socket only."""
    name = names[index % len(names)]
    call: Callable[..., Any] = ServerCall(name, timeout_s)
    if arrays:
        from pytorchrl.scheme.inference.array_policy import ArrayPolicy

        if transport != "ray":
            call = SocketCall(call, functools.partial(locate, name, transport, timeout_s), timeout_s)
        return ArrayPolicy(call, index)
    from pytorchrl.scheme.inference.client import RemotePolicy

    return RemotePolicy(call, index)


class InferenceServers:
    """``num_servers`` inference server actors, started and ready when the constructor returns.

    :param server_factory: ``server_factory() -> InferenceServer`` (picklable).
    :param num_servers: how many.
    :param num_clients: collection workers that will call them (sizes each actor's thread pool).
    :param resources: ``num_cpus``, ``num_gpus`` of each server.
    :param timeout_s: the clients' per-call timeout (``scheme.worker_timeout_s``).
    :param max_restarts: how many times Ray starts each server again after its process dies
        (``scheme.max_worker_restarts``); the restarted server takes the newest weights first,
        and a request it was serving is sent again by its client (:class:`ServerCall`).
    """

    def __init__(
        self, server_factory: Callable[[], Any], *, num_servers: int, num_clients: int, resources: dict[str, float], timeout_s: float | None = None,
        max_restarts: int = 0, transport: str = "auto",
    ) -> None:
        import ray

        from pytorchrl.scheme.base.ray_runtime import ensure_ray

        ensure_ray()
        token = uuid.uuid4().hex[:12]
        self.names = tuple(f"pytorchrl-inference-{token}-{i}" for i in range(num_servers))
        self.timeout_s, self.transport = timeout_s, transport
        host: Any = ray.remote(_ServerHost)
        box_name = f"pytorchrl-inference-{token}-box"
        self._box: Any = ray.remote(_ServerBox).options(name=box_name, num_cpus=0).remote([ray.put(server_factory)])
        options = {
            "num_cpus": float(resources.get("num_cpus", 1.0)), "num_gpus": float(resources.get("num_gpus", 0.0)),
            "max_concurrency": max(num_clients + 2, MIN_SERVER_THREADS), "max_restarts": max_restarts,
        }
        niceness = os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else None  # the driver's, for the servers
        self.handles: list[Any] = [host.options(name=name, **options).remote(box_name, remote_threads(resources), transport, niceness) for name in self.names]
        ready, _ = ray.wait([h.ready.remote() for h in self.handles], num_returns=len(self.handles), timeout=STARTUP_TIMEOUT_S)
        if len(ready) < len(self.handles):
            self.close()
            raise WorkerFailure(f"inference servers did not start within {STARTUP_TIMEOUT_S:g} s; is the Ray cluster overloaded?")
        try:
            ray.get(ready)  # a server that could not start raises its error here
        except BaseException:  # the others (and the box) end with it
            self.close()
            raise
        self._since = time.monotonic()
        self._starts = num_servers  # server starts counted so far (the box counts them)
        self._max_restarts = max_restarts

    def policy_factory(self, arrays: bool = False) -> Callable[[int], RemotePolicy | ArrayPolicy]:
        """``factory(collector_index) -> RemotePolicy`` for the collection workers (picklable);
        with ``arrays``, of :class:`~pytorchrl.scheme.inference.array_policy.ArrayPolicy`."""
        return functools.partial(remote_policy, names=self.names, timeout_s=self.timeout_s, arrays=arrays, transport=self.transport)

    def set_weights(self, weights: dict[str, Any], version: int) -> None:
        """Every server acts with ``weights`` of ``version`` from its next batch on; returns once all have them."""
        import ray

        ref = ray.put(compression.pack(weights))  # once, read by every server; packed, as a worker's are
        ray.get(self._box.put.remote([ref], version))  # first: a server restarting from now on starts with these
        for name in self.names:
            call_surviving(name, lambda h: h.call.remote("set_weights", ref, version), STARTUP_TIMEOUT_S)

    def pop_metrics(self) -> dict[str, float]:
        """The servers' counters since the last call, merged: ``inference_batch_mean`` (rows per
        batch), ``inference_wait_ms`` (mean queueing of a request), ``inference_requests_per_s``
        (all servers), ``inference_busy_fraction`` (mean over servers), and ``server_restarts``
        (servers Ray started again after their process died)."""
        import ray

        parts = [call_surviving(name, lambda h: h.call.remote("pop_metrics"), STARTUP_TIMEOUT_S) for name in self.names]
        now = time.monotonic()
        elapsed, self._since = max(now - self._since, 1e-9), now
        requests = sum(p["requests"] for p in parts)
        batches = sum(p["batches"] for p in parts)
        starts = ray.get(self._box.count.remote())
        restarts, self._starts = starts - self._starts, starts
        if restarts:  # as a dead collection worker's replacement is announced (WorkerSet)
            warnings.warn(
                f"{restarts} inference server{'s' if restarts > 1 else ''} died and Ray started {'them' if restarts > 1 else 'it'} again "
                f"(scheme.max_worker_restarts = {self._max_restarts} per server); the newest weights were taken first and the "
                "requests under way sent again",
                stacklevel=2,
            )
        return {
            "server_restarts": restarts,
            "inference_batch_mean": sum(p["rows"] for p in parts) / max(batches, 1),
            "inference_wait_ms": sum(p["mean_wait_ms"] * p["requests"] for p in parts) / max(requests, 1),
            "inference_requests_per_s": requests / elapsed,
            "inference_busy_fraction": sum(p["busy_fraction"] for p in parts) / max(len(parts), 1),
        }

    def close(self) -> None:
        import ray

        for handle in [*self.handles, self._box]:
            ray.kill(handle)
        self.handles = []


def server_resources(num_cpus: float, num_gpus: float) -> dict[str, Any]:
    """One server's resources in the form of a worker's (for :func:`~.worker_set.check_fits`)."""
    return {"num_cpus": num_cpus, "num_gpus": num_gpus, "memory": None, "resources": {}}
