"""Central inference with the server on a GPU: one server's batches, and Pong frames/s against local inference.

    python scripts/central_gpu.py server            # one inference server's batch latency
    python scripts/central_gpu.py pong --workers 8 12  # APPO Pong, central (server on the GPU) vs local, per count

``server``: an :class:`~pytorchrl.scheme.inference.InferenceServer` of the Pong Nature CNN
(``configs/appo/atari_pong_central.yaml``) in this process, called directly (no Ray): batches of
``--requests`` requests of ``--rows`` rows each (``--gap-ms``: a pause before each batch), on the GPU with pinned host buffers and non-blocking copies
(the server's :class:`_Staging`), on the GPU with pageable copies and one blocking copy per
request and tensor (the path before pinned buffers), and on the CPU. One JSON line per case:
milliseconds per batch, requests/s and observations/s.

``pong``: ``pytorchrl train configs/appo/atari_pong_central.yaml`` with each ``--workers`` count of remote
collection workers x 8 envs, the learner on the GPU (``run.device=cuda``), once with the server on
the GPU (``scheme.inference_server.num_gpus``' default with a CUDA learner) and once with local inference (each worker acting
on its CPU), each stopped after ``--seconds`` (SIGINT: the run's own clean stop). One JSON line per
mode: the median fps (agent steps/s; x4 for frames) of the logged intervals after the first, the
share of the steps in rollouts trained on (``trained_share``: rollouts older than
``scheme.max_policy_lag`` are dropped, yet their steps count in fps) and the trained steps/s over
the run's wall-clock, and the server's batch mean, queueing wait and busy fraction; then the
ratios, by fps and by trained steps/s.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "appo" / "atari_pong_central.yaml"


def bench_server(args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    from pytorchrl.agent.algorithms import ALGORITHMS, wire
    from pytorchrl.config import load_config
    from pytorchrl.envs.vec_env import VecEnv
    from pytorchrl.scheme.inference import InferenceServer

    torch.set_num_threads(1)
    cfg = load_config(CONFIG)
    _, obs_space, act_space = VecEnv.create_factory(cfg.env.env_id, num_envs=8, atari=dataclasses.asdict(cfg.env.atari))
    wiring = wire(ALGORITHMS[cfg.algorithm.name], cfg, obs_space, act_space)
    rows = args.rows
    cases = [("cuda", True), ("cuda", False), ("cpu", True)] if torch.cuda.is_available() else [("cpu", True)]
    out = []
    for device, pinned in cases:
        server = InferenceServer(wiring.actor, device=device, max_batch_size=rows * args.requests, max_wait_ms=1000)
        server._staging.reuses = pinned and device == "cuda"
        generator = np.random.default_rng(0)
        obs = [torch.from_numpy(generator.integers(0, 255, (rows, *obs_space.shape), dtype=np.uint8)) for _ in range(args.requests)]
        noise = server.spec.draw_noise(1, rows)[0]
        times = []
        for i in range(args.batches + 10):
            if args.gap_ms:  # as requests that come one env step apart: caches and the core cool between batches
                time.sleep(args.gap_ms / 1e3)
            start = time.perf_counter()
            pending = [server.submit(w, obs[w], noise, None, True) for w in range(args.requests)]
            for p in pending:
                p.result(timeout=60)
            if i >= 10:  # warm-up: kernels chosen, buffers allocated
                times.append(time.perf_counter() - start)
        server.close()
        ms = 1e3 * statistics.median(times)
        line = {"case": f"{device}{', pinned' if server._staging.reuses else (', pageable' if device == 'cuda' else '')}",
                "requests_per_batch": args.requests, "rows_per_batch": rows * args.requests, "ms_per_batch": round(ms, 3),
                "requests_per_s": round(1e3 * args.requests / ms), "obs_per_s": round(1e3 * rows * args.requests / ms)}
        print(json.dumps(line), flush=True)
        out.append(line)
    return out


def _train(mode: str, workers: int, args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    overrides = [
        f"scheme.num_col_workers={workers}", f"scheme.inference={mode}", f"run.device={args.device}", f"run.target_steps={args.steps or 100_000_000}",
        "run.eval_every=0", "run.checkpoint_every=0", "run.stop_at_return=null", f"run.log_every={2048 * workers}",
        f"scheme.inference_server.max_batch_size={8 * workers}",  # num_gpus: its default, half the learner's GPU with run.device=cuda
        f"scheme.inference_server.num_cpus={args.server_cpus}", *args.set,
    ]
    if run_dir.exists():  # train refuses it, and an earlier run's files would be read as this one's
        raise SystemExit(f"central_gpu: {run_dir} exists (an earlier call's run); give another --run-root")
    command = [sys.executable, "-m", "pytorchrl.cli", "train", str(CONFIG), *overrides, "--run-dir", str(run_dir), "--quiet"]
    proc = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        proc.wait(timeout=args.seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    if proc.returncode not in (0, 130):  # 0: done or stopped by the SIGINT, with a checkpoint; 130: stopped at once
        raise SystemExit(f"central_gpu: the {mode} run with {workers} workers failed (exit {proc.returncode}); see its error above")
    progress = run_dir / "progress.csv"
    rows = list(csv.DictReader(progress.open())) if progress.exists() else []
    fps = [float(r["fps"]) for r in rows[1:]]  # the first interval holds the start
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    trained = _trained_share(run_dir, summary)
    def mean_of(key: str) -> float | None:
        values = [float(r[key]) for r in rows[1:] if r.get(key)]
        return round(statistics.mean(values), 3) if values else None
    return {
        "mode": mode, "workers": workers, "envs_per_worker": 8, "intervals": len(fps),
        "fps_median": round(statistics.median(fps), 1) if fps else None, "fps": [round(x) for x in fps],
        "policy_lag_mean": mean_of("policy_lag_mean"), "inference_batch_mean": mean_of("inference_batch_mean"),
        "inference_wait_ms": mean_of("inference_wait_ms"), "inference_busy_fraction": mean_of("inference_busy_fraction"),
        "env_steps": summary.get("env_steps"), "wall_time_s": summary.get("wall_time_s"),
        # rollouts older than scheme.max_policy_lag are dropped, yet counted in env_steps and fps
        "dropped_batches": summary.get("dropped_batches"), "trained_share": trained,
        "trained_steps_per_s": round(trained * summary["env_steps"] / summary["wall_time_s"], 1) if trained is not None and summary.get("wall_time_s") else None,
        "train_return": [(int(r["env_steps"]), round(float(r["train_return_mean"]), 2)) for r in rows if r.get("train_return_mean")],
    }


def _trained_share(run_dir: Path, summary: dict[str, Any]) -> float | None:
    """The share of a run's env steps in rollouts that were trained on, not dropped for policy lag."""
    if "dropped_batches" not in summary or not summary.get("env_steps"):
        return None
    from pytorchrl.config import load_run_config

    config = load_run_config(run_dir)
    rollout = config.env.num_envs * config.storage.num_steps
    return round(1.0 - summary["dropped_batches"] * rollout / summary["env_steps"], 3)


def bench_pong(args: argparse.Namespace) -> list[dict[str, Any]]:
    root = Path(args.run_root or tempfile.mkdtemp(prefix="central_gpu_"))
    out = []
    for workers in args.workers:
        lines = []
        for mode in args.modes:
            line = _train(mode, workers, args, root / f"{mode}-{workers}w")
            print(json.dumps(line), flush=True)
            lines.append(line)
        by_mode = {line["mode"]: line for line in lines}
        if {"central", "local"} <= set(by_mode):
            central, local = by_mode["central"], by_mode["local"]
            ratio = {"workers": workers, "central_over_local": round(central["fps_median"] / local["fps_median"], 3) if central["fps_median"] and local["fps_median"] else None}
            if central["trained_steps_per_s"] and local["trained_steps_per_s"]:  # what the learner took, over each run's wall-clock
                ratio["trained_central_over_local"] = round(central["trained_steps_per_s"] / local["trained_steps_per_s"], 3)
            print(json.dumps(ratio), flush=True)
        out += lines
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["server", "pong"])
    parser.add_argument("--requests", type=int, default=8, help="server: requests per batch")
    parser.add_argument("--rows", type=int, default=8, help="server: rows (envs) per request")
    parser.add_argument("--gap-ms", type=float, default=0.0, help="server: pause before each timed batch")
    parser.add_argument("--batches", type=int, default=200, help="server: timed batches per case")
    parser.add_argument("--workers", type=int, nargs="+", default=[8], help="pong: remote collection workers (8 envs each), one pair per count")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="pong: further config overrides, as on pytorchrl train")
    parser.add_argument("--seconds", type=float, default=90.0, help="pong: each run's length (at most, with --steps)")
    parser.add_argument("--steps", type=int, help="pong: train to this many agent steps (x4 frames) instead")
    parser.add_argument("--modes", nargs="+", default=["local", "central"], choices=["local", "central"])
    parser.add_argument("--server-cpus", type=float, default=1.0, help="pong: the server's CPU reservation")
    parser.add_argument("--device", default="cuda", help="pong: the learner's (and the server's) device")
    parser.add_argument("--run-root", help="pong: where the runs go (default: a temporary directory)")
    args = parser.parse_args()
    bench_server(args) if args.what == "server" else bench_pong(args)


if __name__ == "__main__":
    main()
