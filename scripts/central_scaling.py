"""Central against local inference as collection workers are added, on a local multi-node Ray cluster.

    python scripts/central_scaling.py --workers 1 2 4 8 16 32 64 --seconds 20

Starts a Ray cluster of ``--nodes`` nodes on this machine (``ray.cluster_utils.Cluster``: each
node its own raylet and object store, as ``ray start`` nodes are), builds the scheme of
``configs/ppo/latency_scaling.yaml`` (``pytorchrl/Latency-v0``: 20 ms a step, 4x84x84 uint8
observations, a Nature CNN) with the first count's collection workers, and grows it to each count in turn
(``Scheme.add_collection_workers``, the elastic path). At each count it collects for
``--seconds`` without learning (asynchronous collection: every rollout is followed, as in training, by
new weights: to every server in central mode, to the worker that collected it in local mode) and
prints one JSON line:

* ``steps_per_s``, and ``linear``: that over the one-worker rate times the count;
* ``rss_mb`` / ``pss_mb``: the median collection worker's resident and proportional set size
  (PSS splits pages shared between processes, such as torch's libraries, among them);
* ``cpu_us_per_request``: CPU time of the collection workers and of the servers per env step of
  one worker (one inference request in central mode), from ``/proc``;
* ``runq_us_per_request``: time runnable but waiting for a core (``/proc/.../schedstat``, every
  thread), per request: the workers' (what one step waited), the servers' and this driver's;
  ``--worker-nice`` sets the workers' niceness (Ray starts them at 15);
* ``busy_cores``: the cores busy over the window, the machine's (``/proc/stat``) and those of the
  workers, the servers and this driver (the learner's side); the rest is Ray's own processes;
* in central mode the servers' batch mean, queueing wait and busy fraction, and how the requests
  travelled (``socket_calls_per_request`` by family, ``unix`` or ``tcp``; the rest by Ray call), with
  ``--transports`` choosing ``scheme.inference_server.transport`` (one pass each).

``--ceiling`` measures instead one server's most requests/s: workers whose env does not sleep
(``step_ms`` 0), ``--envs`` observations per request.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout
    sys.path.insert(0, str(ROOT))

from pytorchrl.utils.runtime import renice_threads, thread_ids  # noqa: E402

CONFIG = ROOT / "configs" / "ppo" / "latency_scaling.yaml"


def _proc(pid: int) -> dict[str, float]:
    """CPU seconds, RSS and PSS (MB) of a process on this machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    mem = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Rss", "Pss"):
            mem[key] = int(rest.split()[0]) / 1024
    return {"cpu_s": ticks / os.sysconf("SC_CLK_TCK"), "rss_mb": mem["Rss"], "pss_mb": mem["Pss"], "runq_s": _runq_s(pid)}


def _runq_s(pid: int) -> float:
    """Seconds the threads of process ``pid`` have spent runnable but waiting for a core (the second field
    of each ``/proc/PID/task/TID/schedstat``; 0 where the kernel keeps no schedstats)."""
    total = 0
    for tid in thread_ids(pid):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):  # the thread ended, or no schedstats
            pass
    return total / 1e9


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy, all cores (``/proc/stat``: user, nice,
    system, irq and softirq; not idle, iowait or time stolen by the hypervisor)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields[i] for i in (0, 1, 2, 5, 6)) / os.sysconf("SC_CLK_TCK")


def _available_gb() -> float:
    """The machine's available memory (``MemAvailable``), in GB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return float("inf")


def _pids(handles: list[Any]) -> list[int]:
    import ray

    return ray.get([h.pid.remote() for h in handles])


def pin_threads(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` (threads started later inherit their creator's) on ``cpus``."""
    for tid in thread_ids(pid):
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def measure(scheme: Any, seconds: float, envs_per_worker: int, worker_nice: int | None = None, pin: bool = False) -> dict[str, Any]:
    """Collect for ``seconds`` (after one rollout per worker of warm-up); the figures of one count."""
    cws = scheme.collection_workers
    weights = scheme.algorithm.get_weights()
    version = [0]
    cws.sync_weights(weights, version[0])

    def step() -> dict[str, Any]:
        _, info = cws.collect()
        version[0] += 1
        cws.sync_weights(weights, version[0])  # as after a learner's update
        return info

    workers = cws.num_remote_workers
    while len(cws.workers.remote_workers) < workers:  # added workers join a collect() once they are up
        step()
    for _ in range(workers):  # warm-up: every worker through one rollout
        step()
    if cws.inference is not None:
        cws.inference.pop_metrics()
    calls = _socket_calls(cws.inference)
    col_pids = _pids(cws.workers.remote_workers)
    srv_pids = _pids(cws.inference.handles) if cws.inference is not None else []
    if worker_nice is not None:
        for pid in col_pids:
            renice_threads(worker_nice, pid)
    if pin:  # the servers on the first core, the collection workers on the others (Sample Factory pins its workers)
        cores = sorted(os.sched_getaffinity(0))
        for pid in srv_pids:
            pin_threads(pid, {cores[0]})
        for pid in col_pids:
            pin_threads(pid, set(cores[1:]))
    driver = os.getpid()
    before = {pid: _proc(pid) for pid in [*col_pids, *srv_pids, driver]}
    busy_before = _machine_busy_s()
    steps, start = 0, time.perf_counter()
    metrics: list[dict[str, Any]] = []
    while time.perf_counter() - start < seconds:
        info = step()
        steps += info["env_steps"]
        metrics.append(info)
    elapsed = time.perf_counter() - start
    busy = _machine_busy_s() - busy_before
    after = {pid: _proc(pid) for pid in [*col_pids, *srv_pids, driver]}
    requests = steps / envs_per_worker
    cpu = {pid: after[pid]["cpu_s"] - before[pid]["cpu_s"] for pid in after}
    runq = {pid: after[pid]["runq_s"] - before[pid]["runq_s"] for pid in after}
    out: dict[str, Any] = {
        "workers": workers,
        "steps_per_s": round(steps / elapsed, 1),
        "rss_mb": round(statistics.median(after[p]["rss_mb"] for p in col_pids), 1),
        "pss_mb": round(statistics.median(after[p]["pss_mb"] for p in col_pids), 1),
        "cpu_us_per_request": {
            "workers": round(1e6 * sum(cpu[p] for p in col_pids) / max(requests, 1), 1),
            "servers": round(1e6 * sum(cpu[p] for p in srv_pids) / max(requests, 1), 1),
        },
        # time runnable but waiting for a core, per request: a worker's share is what one step
        # waited (the workers' sum over the requests); the servers' and driver's, their threads' sum
        "runq_us_per_request": {
            "worker": round(1e6 * sum(runq[p] for p in col_pids) / max(requests, 1), 1),
            "servers": round(1e6 * sum(runq[p] for p in srv_pids) / max(requests, 1), 1),
            "driver": round(1e6 * runq[driver] / max(requests, 1), 1),
        },
        # cores busy over the window: the whole machine, and the parts named (the rest: Ray's
        # raylets, GCS and object transfers, and whatever else runs)
        "busy_cores": {
            "machine": round(busy / elapsed, 2), "workers": round(sum(cpu[p] for p in col_pids) / elapsed, 2),
            "servers": round(sum(cpu[p] for p in srv_pids) / elapsed, 2), "driver": round(cpu[driver] / elapsed, 2),
        },
    }
    if cws.inference is not None:  # each collect's info carries the servers' counters since the last
        served = [m for m in metrics if m["inference_requests_per_s"] > 0]  # a collect may come before any batch
        for key in ("inference_batch_mean", "inference_wait_ms", "inference_busy_fraction"):
            out[key] = round(statistics.mean(m[key] for m in served), 3) if served else None
        out["server_pss_mb"] = round(sum(after[p]["pss_mb"] for p in srv_pids), 1)
        # how requests travelled: socket calls per request, by family (the rest by Ray call)
        out["socket_calls_per_request"] = {k: round((n - calls[k]) / max(requests, 1), 2) for k, n in _socket_calls(cws.inference).items()}
    return out


def _socket_calls(inference: Any) -> dict[str, int]:
    """The servers' socket calls so far, by family (``unix``, ``tcp``)."""
    import ray

    if inference is None:
        return {}
    parts = ray.get([h.socket_calls.remote() for h in inference.handles])
    return {family: sum(p[family] for p in parts) for family in ("unix", "tcp")}


def run_mode(inference: str, counts: list[int], args: argparse.Namespace, address: str, transport: str = "auto") -> list[dict[str, Any]]:
    from pytorchrl.config import load_config
    from pytorchrl.scheme.scheme import build_scheme

    overrides = [
        f"scheme.inference={inference}", f"scheme.num_col_workers={counts[0]}", f"env.num_envs={args.envs}",
        f"env.env_kwargs.step_ms={0 if args.ceiling else args.step_ms}", f"scheme.ray.address={address}",
        f"scheme.inference_server.max_wait_ms={args.max_wait_ms}", f"scheme.inference_server.num_cpus={args.server_cpus}",
        f"scheme.inference_server.transport={transport}", *args.set,
    ]
    label = {"inference": inference, **({"transport": transport} if inference == "central" else {})}
    scheme = build_scheme(load_config(CONFIG, overrides))
    rows: list[dict[str, Any]] = []
    try:
        for count in counts:
            have = scheme.num_collection_workers
            free_gb = _available_gb()
            if count > have and free_gb < args.min_free_gb:
                print(json.dumps({**label, "stopped_before": count, "available_gb": round(free_gb, 1)}), flush=True)
                break
            if count > have:
                scheme.add_collection_workers(count - have)
            row = {**label, **measure(scheme, args.seconds, args.envs, args.worker_nice, args.pin)}
            if rows:
                first = rows[0]
                row["linear"] = round(row["steps_per_s"] / (first["steps_per_s"] / first["workers"] * row["workers"]), 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        scheme.close()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--modes", nargs="+", default=["central", "local"], choices=["central", "local"])
    parser.add_argument("--seconds", type=float, default=20.0, help="collection time at each count")
    parser.add_argument("--step-ms", type=float, default=20.0, help="the latency env's sleep per step")
    parser.add_argument("--envs", type=int, default=1, help="envs per collection worker (rows per request)")
    parser.add_argument("--nodes", type=int, default=4, help="Ray nodes besides the head (each with 16 logical CPUs)")
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument(
        "--transports", nargs="+", default=["auto"], choices=["auto", "same_node", "ray"],
        help="central mode's scheme.inference_server.transport, one pass each",
    )
    parser.add_argument("--server-cpus", type=float, default=1.0)
    parser.add_argument("--worker-nice", type=int, help="the collection workers' niceness (Ray starts them at 15)")
    parser.add_argument("--pin", action="store_true", help="the servers' threads on the first core, the collection workers' on the others")
    parser.add_argument("--min-free-gb", type=float, default=3.0, help="add no workers once less memory than this is available")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="further config overrides, as on pytorchrl train")
    parser.add_argument("--ceiling", action="store_true", help="envs that do not sleep: one server's most requests/s")
    args = parser.parse_args(argv)

    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "include_dashboard": False})
    for _ in range(args.nodes):
        cluster.add_node(num_cpus=16)
    ray.init(address=cluster.address, logging_level="ERROR")
    try:
        for mode in args.modes:
            for transport in args.transports if mode == "central" else ["auto"]:
                run_mode(mode, sorted(args.workers), args, cluster.address, transport)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
