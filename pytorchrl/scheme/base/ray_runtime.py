"""Starting or joining Ray, once, when the first remote worker is asked for.

* No address (and no ``RAY_ADDRESS``): a private embedded Ray sized to this machine, or to
  ``scheme.ray.num_cpus``; it lives as long as this process. It is always a new one
  (``address="local"``): Ray's own default would join the newest cluster that ``ray start`` left
  on this machine, someone else's or another experiment's, so a run joins a cluster only when
  it is pointed at one.
* ``--address ADDR``, ``scheme.ray.address`` or ``RAY_ADDRESS``: join that cluster. An address
  that does not answer fails at once with one line instead of Ray's long retry loop, naming
  where the address came from. ``local`` asks for the embedded Ray even where ``RAY_ADDRESS`` is set.
* Ray already initialised (tests, notebooks, a Ray job's driver): used as it is.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from pytorchrl.utils.errors import InputError

_settings: dict[str, Any] = {"address": None, "num_cpus": None}


def configure_ray(*, address: str | None = None, num_cpus: int | None = None) -> None:
    """Where :func:`ensure_ray` connects (``address``) or how big a local Ray it starts."""
    _settings["address"] = address
    _settings["num_cpus"] = num_cpus


def _address() -> tuple[str | None, str]:
    """The cluster to join (None: an embedded local Ray) and where that came from, for messages."""
    if _settings["address"] == "local":
        return None, "scheme.ray.address"
    if _settings["address"]:
        return _settings["address"], "--address / scheme.ray.address"
    return os.environ.get("RAY_ADDRESS") or None, "the environment variable RAY_ADDRESS"


def joins_cluster() -> bool:
    """Whether :func:`ensure_ray` joins a cluster (an address, or a Ray job's ``RAY_ADDRESS``)
    rather than starting a Ray of this process's own."""
    return _address()[0] is not None


def planned_local_resources() -> dict[str, float] | None:
    """The resources :func:`ensure_ray` would give an embedded local Ray (CPUs and GPUs), or None
    when it would join a cluster or Ray is already running (then ask Ray itself)."""
    import sys

    if joins_cluster():
        return None
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        return None
    import torch

    return {"CPU": float(_local_cpus()), "GPU": float(torch.cuda.device_count())}


def _local_cpus() -> int:
    """The CPUs of an embedded local Ray: ``scheme.ray.num_cpus``, else what Ray itself finds for
    this machine, which heeds a container's or a cgroup's CPU limit (Docker ``--cpus``, a
    Kubernetes limit, a Slurm cpuset); ``os.cpu_count()`` counts the host's cores."""
    if _settings["num_cpus"]:
        return int(_settings["num_cpus"])
    try:
        from ray._private.utils import get_num_cpus  # what Ray would register given no num_cpus

        return max(1, int(get_num_cpus(override_docker_cpu_warning=True)))
    except Exception:  # another Ray layout
        return os.cpu_count() or 1


def ensure_ray() -> Any:
    """The ``ray`` module, initialised (see the module doc)."""
    import ray

    address, source = _address()
    if address:
        _check_reachable(address, source)
    if ray.is_initialized():
        return ray
    if address:
        try:
            ray.init(address=address, log_to_driver=True)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError(f"Ray address {address!r} ({source}): cannot join the Ray cluster there ({_first_line(exc)})") from None
        return ray
    logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(_hide_local_token_notice)
    ray.init(
        address="local",
        num_cpus=_local_cpus(),  # what the layout was checked against (planned_local_resources)
        include_dashboard=False,
        log_to_driver=True,
        logging_level=logging.WARNING,
    )
    return ray


def _hide_local_token_notice(record: logging.LogRecord) -> bool:
    """Drop Ray's notice that a new local cluster has token authentication on (it does: Ray
    2.60's default): pytorchrl's local Ray is private to this process, so the notice leaves a
    user nothing to do, and it opened every ``pytorchrl tune`` run. Ray's warning that a cluster
    has *no* authentication still shows."""
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


def _check_reachable(address: str, source: str = "--address / scheme.ray.address") -> None:
    """Fail fast for a ``host:port`` (or ``ray://host:port``) address nobody listens on; the
    message names ``source``, where the address came from, and how to train without it."""
    if address == "auto" or address.startswith("local"):
        return
    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"Ray address {address!r}: expected host:port, ray://host:port or 'auto'")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except OSError as exc:
        raise InputError(
            f"Ray address {address!r}: no Ray cluster answers there ({exc.strerror or exc}); it is {source}"
            f"{' (a resumed run keeps its own)' if 'scheme' in source else ''}: {_without(source)}"
        ) from None
    if not address.startswith("ray://"):
        _check_token(address, host, int(port), source)


def _without(source: str) -> str:
    """How to train on an embedded local Ray instead of the address from ``source``."""
    if "RAY_ADDRESS" in source:
        return "unset RAY_ADDRESS, or pass --address local, to train on a local Ray instead"
    return "scheme.ray.address=null (or --address local) trains on a local Ray instead"


def driver_token() -> tuple[str | None, str]:
    """The token this driver would present, as Ray finds it: only with ``RAY_AUTH_MODE=token``,
    from ``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH`` names, else ``~/.ray/auth_token``.

    :return: ``(token or None, where it came from)``.
    """
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        return None, "RAY_AUTH_MODE is not 'token'"
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip(), "RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    try:
        with open(path) as f:
            return f.read().strip() or None, path
    except OSError:
        return None, f"no token file {path}"


def _check_token(address: str, host: str, port: int, source: str = "--address / scheme.ray.address") -> None:
    """Ask the cluster's GCS for its id, presenting this driver's token as Ray would: a cluster
    with token authentication that refuses it is one line now, instead of Ray's retry loop (a
    warning a second for ~15 s, then "cannot connect" without the cause)."""
    try:
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:  # another Ray layout: ray.init reports what it finds
        return
    token, source = driver_token()
    metadata = [("authorization", f"Bearer {token}")] if token else None
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        try:
            request = gcs_service_pb2.GetClusterIdRequest()  # type: ignore[attr-defined]
            gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(request, timeout=5, metadata=metadata)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAUTHENTICATED:
                if _speaks_http(host, port):  # ray.init would retry this forever
                    raise InputError(
                        f"Ray address {address!r} ({source}): that port answers HTTP, as Ray's dashboard and Jobs API do (8265 by "
                        "default, what `ray job submit` takes); a training run joins the head's GCS port, 6379 by default "
                        f"(`ray start --head --port`), e.g. {host}:6379"
                        + ("; unset RAY_ADDRESS, or pass --address, for this run" if "RAY_ADDRESS" in source else "")
                    ) from None
                return  # not a GCS, or busy: ray.init says what it finds
            how = "RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN or in a file named by RAY_AUTH_TOKEN_PATH (default ~/.ray/auth_token)"
            if token is None:
                raise InputError(f"Ray address {address!r}: the cluster requires token authentication and this driver has no token ({source}); run with {how}") from None
            raise InputError(f"Ray address {address!r}: the cluster refused this driver's token (from {source}); run with {how}") from None


def _speaks_http(host: str, port: int) -> bool:
    """Whether ``host:port`` answers a plain HTTP/1.0 request (a GCS speaks gRPC only)."""
    try:
        with socket.create_connection((host, port), timeout=3) as conn:
            conn.settimeout(3)
            conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return conn.recv(8).startswith(b"HTTP/")
    except OSError:
        return False


def _first_line(exc: BaseException) -> str:
    """The exception's first line, with the next one when the first only announces it ("...
    failure from server:", "To fix this, either:"), so that the one line says what failed."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if not lines[0].endswith(":") or len(lines) == 1:
        return lines[0]
    cause = lines[-1] if any(line.startswith("Traceback") for line in lines) else lines[1]  # a traceback's cause is its last line
    return f"{lines[0]} {cause}"
