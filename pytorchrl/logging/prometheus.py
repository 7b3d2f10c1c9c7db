"""Live metrics for Prometheus: ``run.prometheus_port`` serves ``/metrics`` from the driver.

Every numeric progress.csv column of a log row becomes a gauge ``pytorchrl_<column>`` labelled
with the run's name, so one Prometheus can watch several runs. Worker health is in the row
already: ``healthy_workers``, ``worker_restarts``, ``env_restarts``, ``lost_batches``,
``dropped_batches``, ``preempted_batches``, ``policy_lag_mean``, ``gradient_staleness``, and with
central inference the servers' ``inference_batch_mean``, ``inference_wait_ms``,
``inference_requests_per_s`` and ``inference_busy_fraction``. A column left empty in a row (an
evaluation not due) keeps its last value. The gauges change when a row is written, so
``run.log_every`` sets how fresh they are; a scrape costs the training loop nothing (the server
is a daemon thread reading a registry that is written once per row).

``prometheus-client`` is imported only when a port is set (extra ``prometheus``).
"""

from __future__ import annotations

import errno
import re
import socket
from typing import Any

from pytorchrl.utils.errors import ConfigError

PREFIX = "pytorchrl_"

#: what each worker-health gauge means (the other columns get a generic help line)
HELP = {
    "env_steps": "Environment steps collected so far.",
    "updates": "Gradient updates made so far (those whose gradient was not finite, and so not applied, included: see nonfinite_updates).",
    "fps": "Environment steps per second over the last log interval.",
    "train_return_mean": "Mean return of the last 100 training episodes (raw game score on Atari).",
    "eval_return_mean": "Mean return of the last evaluation (deterministic unless run.eval_deterministic is false).",
    "eval_env_steps": "Env steps of the weights the last evaluation evaluated.",
    "eval_success_rate": "Share of the last evaluation's episodes that ended with info['is_success'] (goal envs).",
    "healthy_workers": "Remote collection workers alive.",
    "worker_restarts": "Dead remote workers replaced so far.",
    "env_restarts": "Failed envs recreated inside their workers so far.",
    "lost_batches": "Rollouts (and gradients of remote gradient workers) lost with dead workers so far.",
    "dropped_batches": "Rollouts dropped for exceeding scheme.max_policy_lag so far.",
    "preempted_batches": "Rollouts cut short by a synchronous round's fraction_samples/fraction_workers so far.",
    "policy_lag_mean": "Mean policy versions between acting and learning, over the last log interval.",
    "gradient_staleness": "Mean versions behind of asynchronous gradients, over the last log interval.",
    "inference_batch_mean": "Central inference: observation rows per server batch, over the last log interval.",
    "inference_wait_ms": "Central inference: mean milliseconds a request queued before its batch ran.",
    "inference_requests_per_s": "Central inference: act requests per second, all servers.",
    "inference_busy_fraction": "Central inference: share of the time the servers ran the policy (mean over servers).",
}


class PrometheusWriter:
    """Serves the latest log row at ``http://host:port/metrics``.

    :param port: TCP port (0: any free one; :attr:`port` says which).
    :param host: interface to bind (``127.0.0.1`` keeps the metrics on this machine).
    :param run_name: value of the ``run`` label of every gauge.
    :raises ConfigError: when the port cannot be bound (in use, or not allowed).
    """

    def __init__(self, port: int, host: str = "127.0.0.1", run_name: str = "run") -> None:
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            raise ConfigError(
                "config key 'run.prometheus_port' needs prometheus-client: pip install prometheus-client"
            ) from None
        self.registry = CollectorRegistry()
        self.run_name = run_name
        self._gauges: dict[str, Any] = {}
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:  # the host, not the port
                raise ConfigError(
                    f"config key 'run.prometheus_host' = {host!r}: cannot serve metrics there ({exc.strerror or exc}); "
                    "use 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or an address of this machine"
                ) from None
            raise ConfigError(
                f"config key 'run.prometheus_port' = {port}: cannot serve metrics on {host}:{port} ({exc.strerror or exc}); "
                "choose a free port (0 picks one)"
            ) from None
        self.host = host
        self.port = int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def write(self, row: dict[str, Any]) -> None:
        from prometheus_client import Gauge

        for key, value in row.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue  # None: not measured in this interval, the gauge keeps its last value
            gauge = self._gauges.get(key)
            if gauge is None:
                name = PREFIX + metric_name(key)
                gauge = Gauge(name, HELP.get(key, f"progress.csv column {key}."), ["run"], registry=self.registry)
                self._gauges[key] = gauge
            gauge.labels(run=self.run_name).set(value)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def metric_name(column: str) -> str:
    """A progress.csv column as a valid Prometheus metric name (letters, digits, underscores)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", column)
