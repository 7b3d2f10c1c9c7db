"""Central inference servers as Ray actors, and the transport their clients call them through.

:class:`InferenceServers` starts ``num_servers`` named, threaded Ray actors, each hosting an
:class:`~pytorchrl.scheme.inference.server.InferenceServer` built from a picklable factory (as
every worker is), and is the learner's handle on them: new weights once per round
(:meth:`InferenceServers.set_weights`) and their counters (:meth:`InferenceServers.pop_metrics`).
A collection worker acts through a :class:`~pytorchrl.scheme.inference.client.RemotePolicy`
whose transport is a :class:`ServerCall`: the server's name, resolved in the worker's process
(so a replaced server is found again by name), never a handle captured at start-up.

Like :mod:`.worker_set`, Ray is imported here only when a server is asked for.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from typing import Any

from pytorchrl.scheme.base.worker_set import STARTUP_TIMEOUT_S, remote_threads
from pytorchrl.scheme.inference.client import RemotePolicy
from pytorchrl.utils.errors import WorkerFailure
from pytorchrl.utils.runtime import cap_threads

#: the server's own counters (InferenceServer.pop_metrics) turned into the round's metrics
METRICS = ("inference_batch_mean", "inference_wait_ms", "inference_requests_per_s", "inference_busy_fraction")


class _ServerHost:
    """The Ray actor: hosts one inference server and runs its methods by name, from many threads
    at once (its ``max_concurrency`` lets every client's ``act`` wait for its batch together)."""

    def __init__(self, server_factory: Callable[[], Any], max_threads: int) -> None:
        cap_threads(max_threads)
        self.server = server_factory()

    def ready(self) -> bool:
        return True

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.server, method)(*args)


#: per process: the handle last resolved for a server name
_handles: dict[str, Any] = {}


class ServerCall:
    """``call(method, *args)`` on the server named ``name`` (the :class:`RemotePolicy` transport).

    A call that finds the server's process dead resolves the name again and retries once (a
    server restarted under its name is then reached); a reply not back in ``timeout_s`` raises,
    which fails the collection worker's call like any other fault.

    :param name: the server actor's Ray name.
    :param timeout_s: the longest one call waits (None: no limit).
    """

    def __init__(self, name: str, timeout_s: float | None = None) -> None:
        self.name, self.timeout_s = name, timeout_s

    def __call__(self, method: str, *args: Any) -> Any:
        import ray

        handle = _handles.get(self.name) or _resolve(self.name)
        try:
            return ray.get(handle.call.remote(method, *args), timeout=self.timeout_s)
        except ray.exceptions.RayActorError:
            return ray.get(_resolve(self.name).call.remote(method, *args), timeout=self.timeout_s)


def _resolve(name: str) -> Any:
    import ray

    _handles[name] = handle = ray.get_actor(name)
    return handle


def remote_policy(index: int, *, names: tuple[str, ...], timeout_s: float | None) -> RemotePolicy:
    """Collection worker ``index``'s policy: served by server ``index % len(names)`` (remote worker
    ``i`` has collector index ``i - 1``, so it uses server ``(i - 1) % num_servers``)."""
    return RemotePolicy(ServerCall(names[index % len(names)], timeout_s), index)


class InferenceServers:
    """``num_servers`` inference server actors, started and ready when the constructor returns.

    :param server_factory: ``server_factory() -> InferenceServer`` (picklable).
    :param num_servers: how many.
    :param num_clients: collection workers that will call them (sizes each actor's thread pool).
    :param resources: ``num_cpus``, ``num_gpus`` of each server.
    :param timeout_s: the clients' per-call timeout (``scheme.worker_timeout_s``).
    """

    def __init__(
        self, server_factory: Callable[[], Any], *, num_servers: int, num_clients: int, resources: dict[str, float], timeout_s: float | None = None
    ) -> None:
        import ray

        from pytorchrl.scheme.base.ray_runtime import ensure_ray

        ensure_ray()
        token = uuid.uuid4().hex[:12]
        self.names = tuple(f"pytorchrl-inference-{token}-{i}" for i in range(num_servers))
        self.timeout_s = timeout_s
        host: Any = ray.remote(_ServerHost)
        options = {
            "num_cpus": float(resources.get("num_cpus", 1.0)), "num_gpus": float(resources.get("num_gpus", 0.0)),
            "max_concurrency": num_clients + 2, "max_restarts": 0,
        }
        self.handles: list[Any] = [host.options(name=name, **options).remote(server_factory, remote_threads(resources)) for name in self.names]
        ready, _ = ray.wait([h.ready.remote() for h in self.handles], num_returns=len(self.handles), timeout=STARTUP_TIMEOUT_S)
        if len(ready) < len(self.handles):
            self.close()
            raise WorkerFailure(f"inference servers did not start within {STARTUP_TIMEOUT_S:g} s; is the Ray cluster overloaded?")
        ray.get(ready)  # a server that could not start raises its error here
        self._since = time.monotonic()

    def policy_factory(self) -> Callable[[int], RemotePolicy]:
        """``factory(collector_index) -> RemotePolicy`` for the collection workers (picklable)."""
        return functools.partial(remote_policy, names=self.names, timeout_s=self.timeout_s)

    def set_weights(self, weights: dict[str, Any], version: int) -> None:
        """Every server acts with ``weights`` of ``version`` from its next batch on; returns once all have them."""
        import ray

        ref = ray.put(weights)  # once, read by every server
        ray.get([h.call.remote("set_weights", ref, version) for h in self.handles])

    def pop_metrics(self) -> dict[str, float]:
        """The servers' counters since the last call, merged: ``inference_batch_mean`` (rows per
        batch), ``inference_wait_ms`` (mean queueing of a request), ``inference_requests_per_s``
        (all servers) and ``inference_busy_fraction`` (mean over servers)."""
        import ray

        parts = ray.get([h.call.remote("pop_metrics") for h in self.handles])
        now = time.monotonic()
        elapsed, self._since = max(now - self._since, 1e-9), now
        requests = sum(p["requests"] for p in parts)
        batches = sum(p["batches"] for p in parts)
        return {
            "inference_batch_mean": sum(p["rows"] for p in parts) / max(batches, 1),
            "inference_wait_ms": sum(p["mean_wait_ms"] * p["requests"] for p in parts) / max(requests, 1),
            "inference_requests_per_s": requests / elapsed,
            "inference_busy_fraction": sum(p["busy_fraction"] for p in parts) / max(len(parts), 1),
        }

    def close(self) -> None:
        import ray

        for handle in self.handles:
            ray.kill(handle)
        self.handles = []


def server_resources(num_cpus: float, num_gpus: float) -> dict[str, Any]:
    """One server's resources in the form of a worker's (for :func:`~.worker_set.check_fits`)."""
    return {"num_cpus": num_cpus, "num_gpus": num_gpus, "memory": None, "resources": {}}
