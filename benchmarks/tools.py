"""The user's-view figures of BENCHMARKS.md (Prometheus, Ray Tune): ``pytorchrl benchmark NAME``."""

from __future__ import annotations

import csv
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: the space both PBT and the random search draw from (PBT also perturbs it)
PENDULUM_SPACE = {"algorithm.lr": {"loguniform": [1.0e-4, 3.0e-3]}, "algorithm.clip_range": {"uniform": [0.1, 0.3]}}


def prometheus_overhead(seeds: list[int], *, steps: int = 100_000, repeats: int = 8) -> dict[str, Any]:
    """PPO CartPole-v1 (configs/ppo/cartpole.yaml, 100k env steps, no early stop) with and without
    run.prometheus_port (scraped every second), in 8 back-to-back pairs, which one first
    alternating: the median of the pairs' env-steps/s ratios (on / off), by wall-clock and by
    the process's CPU time (every thread's, the server's and the scraper's included; steadier
    than wall-clock on a shared VM)."""
    from benchmarks.suite import _config_path
    from pytorchrl.config import load_config
    from pytorchrl.learner import Learner

    seconds: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(repeats):
        for served in (rep % 2 == 1, rep % 2 == 0):  # alternate which goes first
            overrides = ["run.stop_at_return=null", f"run.target_steps={steps}", f"run.seed={seeds[0]}"]
            config = load_config(_config_path("ppo/cartpole.yaml"), [*overrides, *(["run.prometheus_port=0"] if served else [])])
            with tempfile.TemporaryDirectory() as tmp:
                learner = Learner.from_config(config, run_dir=Path(tmp) / "run", progress=False)
                stop = threading.Event()
                scrapes: list[int] = []
                if served:
                    url = learner.writers[0].url  # type: ignore[attr-defined]
                    threading.Thread(target=_scrape_every_second, args=(url, stop, scrapes), daemon=True).start()
                start, start_cpu = time.perf_counter(), time.process_time()
                learner.train()
                seconds[served].append(time.perf_counter() - start)
                cpu[served].append(time.process_time() - start_cpu)
                stop.set()
                learner.close()
            print(f"  prometheus {'on ' if served else 'off'}: {steps / seconds[served][-1]:,.0f} env-steps/s"
                  + (f" ({len(scrapes)} scrapes)" if served else ""), flush=True)
    off, on = statistics.median(seconds[False]), statistics.median(seconds[True])
    pairs = [a / b for a, b in zip(seconds[False], seconds[True], strict=True)]
    cpu_pairs = [a / b for a, b in zip(cpu[False], cpu[True], strict=True)]
    return {
        "env_steps_per_s_off": steps / off, "env_steps_per_s_on": steps / on, "ratio_on_off": statistics.median(pairs),
        "ratio_min": min(pairs), "ratio_max": max(pairs), "cpu_ratio_on_off": statistics.median(cpu_pairs),
        "cpu_ratio_min": min(cpu_pairs), "cpu_ratio_max": max(cpu_pairs), "repeats": repeats,
    }


def _scrape_every_second(url: str, stop: threading.Event, scrapes: list[int]) -> None:
    while not stop.wait(1.0):
        try:
            scrapes.append(len(urllib.request.urlopen(url, timeout=5).read()))
        except OSError:
            return


def tune_asha_cartpole(seeds: list[int], *, samples: int = 8) -> dict[str, Any]:
    """`pytorchrl tune configs/ppo/cartpole.yaml --space configs/tune/ppo_cartpole_space.yaml
    --samples 8 --scheduler asha`, then its best config trained afresh per seed (to 475)."""
    from benchmarks.suite import _config_path, learning
    from pytorchrl.tuning import format_table, tune

    with tempfile.TemporaryDirectory() as tmp:
        result = tune(
            _config_path("ppo/cartpole.yaml"), _config_path("tune/ppo_cartpole_space.yaml"), directory=Path(tmp) / "tune",
            samples=samples, scheduler="asha", verbose=False,
        )
        print(format_table(result, "eval_return_mean"), flush=True)
        best = learning(str(result.best_config_path), 475.0, 100_000, seeds)
    return {
        "trials": len(result.trials), "tune_wall_time_s": result.wall_time_s, "best_trial_eval": result.best_metric,
        "best_params": result.best_params, "best_config_solved": best["solved"], "best_config_median_steps": best["median_solved_at_env_steps"],
        "table": format_table(result, "eval_return_mean"),
    }


def pbt_pendulum(seeds: list[int], *, samples: int = 4, threshold: float = -250.0) -> dict[str, Any]:
    """PBT on PPO Pendulum-v1 (4 trials, lr and clip_range perturbed every 16k env steps) against a
    random search of the same space, trials and budget: env steps to -250 of PBT's best trial
    and of the random search's median trial."""
    from benchmarks.suite import _config_path
    from pytorchrl.tuning import format_table, tune

    out: dict[str, Any] = {}
    for scheduler in ("pbt", "fifo"):
        with tempfile.TemporaryDirectory() as tmp:
            result = tune(
                _config_path("ppo/pendulum.yaml"), PENDULUM_SPACE, directory=Path(tmp) / scheduler, samples=samples, scheduler=scheduler,
                overrides=[f"run.seed={seeds[0]}"], perturbation_interval=16_384 if scheduler == "pbt" else None, trial_cpus=0.5, verbose=False,
            )
            print(f"{scheduler}:\n{format_table(result, 'eval_return_mean')}", flush=True)
            steps = sorted(_steps_to(Path(tmp) / scheduler / "trials" / t["trial"] / "progress.csv", threshold) for t in result.trials)
        name = "pbt" if scheduler == "pbt" else "random_search"
        out[f"{name}_steps_to_threshold"] = [None if s == float("inf") else s for s in steps]
        out[f"{name}_wall_time_s"] = result.wall_time_s
    pbt_best = min(s for s in out["pbt_steps_to_threshold"] if s is not None) if any(out["pbt_steps_to_threshold"]) else None
    random_steps = [float("inf") if s is None else s for s in out["random_search_steps_to_threshold"]]
    random_median = statistics.median(random_steps)
    out["pbt_best_steps"] = pbt_best
    out["random_search_median_steps"] = None if random_median == float("inf") else random_median
    out["pbt_best_fewer_than_random_median"] = pbt_best is not None and pbt_best < random_median
    return out


def _steps_to(progress_csv: Path, threshold: float) -> float:
    """Env steps of the first evaluation at or above ``threshold`` in a run's progress.csv (inf: never)."""
    from pytorchrl.plotting import evaluated_steps

    if not progress_csv.is_file():
        return float("inf")
    with open(progress_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row["eval_return_mean"] and float(row["eval_return_mean"]) >= threshold:
                return float(evaluated_steps(row))
    return float("inf")


def kill_collection_workers(learner: Any, kills: int) -> list[float]:
    """SIGKILL a remote collection worker's process ``kills`` times, each once the last
    replacement has joined, training meanwhile; returns the ``worker_replace_s`` values logged."""
    import os
    import signal

    workers = learner.scheme.collection_workers.workers
    places = len(workers.remote_workers)
    times: list[float] = []
    for _ in range(kills):
        os.kill(workers.pids()[0], signal.SIGKILL)
        restarts = learner.worker_restarts
        while learner.worker_restarts == restarts or len(workers.remote_workers) < places:
            info = learner.step()
            times += [info["worker_replace_s"]] if "worker_replace_s" in info else []
    return times


def worker_kill_drill(seeds: list[int], *, kills: int = 4) -> dict[str, Any]:
    """PPO CartPole, 2 remote collection workers (sync and async): SIGKILL a worker's process 4 times,
    each once the last replacement joined: worker_restarts counted and worker_replace_s per death."""
    from benchmarks.suite import _config_path
    from pytorchrl.config import load_config
    from pytorchrl.learner import Learner

    out: dict[str, Any] = {}
    for communication in ("synchronous", "asynchronous"):
        overrides = [
            f"scheme.col_communication={communication}", "scheme.col_worker_resources.num_cpus=0.1", "scheme.worker_restart_delay_s=0",
            "scheme.worker_timeout_s=600", "run.target_steps=1000000", "run.stop_at_return=null", f"run.seed={seeds[0]}",
        ]
        learner = Learner.from_config(load_config(_config_path("ppo/cartpole_sync_2workers.yaml"), overrides), progress=False)
        try:
            times = kill_collection_workers(learner, kills)
        finally:
            learner.close()
        out[f"{communication}_worker_restarts"] = learner.worker_restarts
        out[f"{communication}_worker_replace_s"] = [round(t, 2) for t in times]
        print(f"  {communication}: {kills} kills, worker_restarts {learner.worker_restarts}, worker_replace_s {out[f'{communication}_worker_replace_s']}", flush=True)
    out["kills"] = kills
    return out


BENCHMARKS: dict[str, Callable[[list[int]], dict[str, Any]]] = {
    "prometheus_overhead": prometheus_overhead,
    "tune_asha_cartpole": tune_asha_cartpole,
    "pbt_pendulum": pbt_pendulum,
    "worker_kill_drill": worker_kill_drill,
}
