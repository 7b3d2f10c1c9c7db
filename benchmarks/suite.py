"""The figures of BENCHMARKS.md: ``pytorchrl benchmark [NAME ...]``.

Learning benchmarks train a shipped config for each seed, in this process, with the run's own
protocol (deterministic evaluation of ``run.eval_episodes`` episodes every ``run.eval_every``
env steps, wall-clock from the first step, evaluations included) and report the median.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.memory import MEMORY_BENCHMARKS
from benchmarks.pixels import BENCHMARKS as PIXELS_BENCHMARKS
from benchmarks.tools import BENCHMARKS as TOOLS_BENCHMARKS

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _config_path(relative: str) -> Path:
    """A config of the checkout this suite belongs to: not the working directory's, which may be
    another checkout (a worktree) than the code that runs."""
    if (CONFIGS / relative).is_file():
        return CONFIGS / relative
    raise FileNotFoundError(f"configs/{relative} not found in {CONFIGS.parent} (the benchmarks run from a pytorchrl checkout)")


def learning(config: str, threshold: float, budget: int, seeds: list[int], overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """Train ``config`` once per seed until ``threshold`` or ``budget`` env steps."""
    from pytorchrl.config import load_config
    from pytorchrl.learner import Learner

    runs = []
    for seed in seeds:
        cfg = load_config(_config_path(config), [*overrides, f"run.seed={seed}", f"run.stop_at_return={threshold}", f"run.target_steps={budget}"])
        learner = Learner.from_config(cfg, progress=False)
        try:
            summary = learner.train()
        finally:
            learner.close()
        runs.append(summary)
        print(
            f"  {config} seed {seed}: solved_at_steps={summary['solved_at_env_steps']} "
            f"solved_at_s={summary['solved_at_wall_time_s']} final_eval={summary['final_eval_return_mean']:.1f} "
            f"steps={summary['env_steps']} wall={summary['wall_time_s']:.1f}s",
            flush=True,
        )
    solved = [r for r in runs if r["solved_at_env_steps"] is not None]
    return {
        "config": config,
        "threshold": threshold,
        "budget_env_steps": budget,
        "seeds": seeds,
        "solved": f"{len(solved)}/{len(runs)}",
        "median_solved_at_env_steps": _median([r["solved_at_env_steps"] for r in runs]),
        "median_solved_at_wall_time_s": _median([r["solved_at_wall_time_s"] for r in runs]),
        "median_final_eval_return": _median([r["final_eval_return_mean"] for r in runs]),
        "runs": runs,
    }


def _median(values: list[Any]) -> Any:
    """Median where an unsolved run counts as infinitely late (None if most runs did not solve)."""
    vals = sorted(float("inf") if v is None else v for v in values)
    m = statistics.median(vals) if vals else None
    return None if m is None or m == float("inf") else m


def ppo_cartpole(seeds: list[int]) -> dict[str, Any]:
    """PPO CartPole-v1 to eval >= 475 within 100k env steps (SB3 zoo on this machine: 6.3 s median)."""
    return learning("ppo/cartpole.yaml", 475.0, 100_000, seeds)


def ppo_acrobot(seeds: list[int]) -> dict[str, Any]:
    """PPO Acrobot-v1 to eval >= -100 within 200k env steps."""
    return learning("ppo/acrobot.yaml", -100.0, 200_000, seeds)


def ppo_pendulum(seeds: list[int]) -> dict[str, Any]:
    """PPO Pendulum-v1 to eval >= -250 within 200k env steps."""
    return learning("ppo/pendulum.yaml", -250.0, 200_000, seeds)


def a2c_cartpole(seeds: list[int]) -> dict[str, Any]:
    """A2C CartPole-v1 to eval >= 475 within 200k env steps."""
    return learning("a2c/cartpole.yaml", 475.0, 200_000, seeds)


def dqn_cartpole(seeds: list[int]) -> dict[str, Any]:
    """DQN CartPole-v1 to eval >= 475 within 50k env steps."""
    return learning("dqn/cartpole.yaml", 475.0, 50_000, seeds)


def rainbow_cartpole(seeds: list[int]) -> dict[str, Any]:
    """Rainbow (every DQN component on) CartPole-v1 to eval >= 475 within 50k env steps."""
    return learning("dqn/rainbow_cartpole.yaml", 475.0, 50_000, seeds)


def sac_pendulum(seeds: list[int]) -> dict[str, Any]:
    """SAC Pendulum-v1 to eval >= -200 within 10k env steps (SB3 rl-zoo SAC on this machine: 58 s median to -200)."""
    return learning("sac/pendulum.yaml", -200.0, 10_000, seeds)


def sac_step(seeds: list[int], *, steps: int = 3_000) -> dict[str, Any]:
    """Milliseconds per SAC step (one Pendulum-v1 env step and one gradient step, ``configs/sac/pendulum.yaml``)
    over ``steps`` env steps without evaluations (the first ``start_steps`` make no update)."""
    from pytorchrl.config import load_config
    from pytorchrl.learner import Learner

    runs = []
    for seed in seeds:
        cfg = load_config(_config_path("sac/pendulum.yaml"), [f"run.seed={seed}", f"run.target_steps={steps}", f"run.eval_every={10 * steps}", "run.stop_at_return=null"])
        learner = Learner.from_config(cfg, progress=False)
        try:
            start = time.perf_counter()
            while not learner.done():  # train()'s loop; its finish() (a final evaluation) is not timed
                learner.step()
            wall = time.perf_counter() - start
            learner.finish()
        finally:
            learner.close()
        runs.append({"seed": seed, "ms_per_step": round(1e3 * wall / steps, 2), "updates": learner.updates})
        print(f"  sac/pendulum.yaml seed {seed}: {runs[-1]['ms_per_step']} ms per step over {steps} steps", flush=True)
    return {"steps": steps, "median_ms_per_step": statistics.median(r["ms_per_step"] for r in runs), "runs": runs}


def sac_discrete_cartpole(seeds: list[int]) -> dict[str, Any]:
    """Discrete SAC CartPole-v1 to eval >= 475 within 100k env steps."""
    return learning("sac/discrete_cartpole.yaml", 475.0, 100_000, seeds)


def td3_pendulum(seeds: list[int]) -> dict[str, Any]:
    """TD3 Pendulum-v1 to eval >= -200 within 10k env steps."""
    return learning("td3/pendulum.yaml", -200.0, 10_000, seeds)


def ddpg_pendulum(seeds: list[int]) -> dict[str, Any]:
    """DDPG Pendulum-v1 to eval >= -250 within 30k env steps."""
    return learning("ddpg/pendulum.yaml", -250.0, 30_000, seeds)


def apex_cartpole(seeds: list[int]) -> dict[str, Any]:
    """Ape-X DQN, 2 remote collection workers (asynchronous, per-worker epsilon, actor-side priorities), CartPole-v1 to 475 within 100k."""
    return learning("dqn/apex_cartpole.yaml", 475.0, 100_000, seeds)


def replay_buffer(seeds: list[int]) -> dict[str, Any]:
    """Replay buffer insert / sample throughput (uniform, prioritized; 1M capacity, batch 256) and the 84x84x4 memory figure."""
    from benchmarks.replay_buffer import replay_buffer as measure

    return measure(seeds)


def collection(seeds: list[int], *, num_envs: int = 64, steps: int = 2_000, repeats: int = 3) -> dict[str, Any]:
    """One CollectionWorker, 64 CartPole envs, default MLP: env-steps/s vs the measured bound."""
    from pytorchrl.config import ActorConfig
    from pytorchrl.scheme.collection.collection_worker import CollectionWorker

    torch.set_num_threads(1)
    worker = _collection_worker(CollectionWorker, ActorConfig(), num_envs=num_envs, num_steps=steps)
    envs, actor = worker.envs, worker.policy.actor
    assert envs is not None
    rng = np.random.default_rng(0)
    acts = rng.integers(0, 2, size=(steps, num_envs))
    obs = torch.zeros(num_envs, *envs.observation_space.shape)
    measured, env_only, forward_only = [], [], []
    worker.collect_data()  # warm-up
    for _ in range(repeats):
        t = time.perf_counter()
        worker.collect_data()
        measured.append(steps * num_envs / (time.perf_counter() - t))
        raw = envs.env
        raw.reset(seed=1)
        t = time.perf_counter()
        for a in acts:
            raw.step(a)
        env_only.append(time.perf_counter() - t)
        t = time.perf_counter()
        with torch.no_grad():
            for _ in range(steps):
                actor.forward(obs)
        forward_only.append(time.perf_counter() - t)
    bound = steps * num_envs / (statistics.median(env_only) + statistics.median(forward_only))
    result = {
        "num_envs": num_envs,
        "collect_env_steps_per_s": statistics.median(measured),
        "raw_env_steps_per_s": steps * num_envs / statistics.median(env_only),
        "bare_forward_per_s": steps / statistics.median(forward_only),
        "bound_env_steps_per_s": bound,
        "ratio_to_bound": statistics.median(measured) / bound,
    }
    worker.close()
    return result


def _collection_worker(cls: Any, actor_cfg: Any, *, num_envs: int, num_steps: int) -> Any:
    from pytorchrl.agent.actors.on_policy import OnPolicyActor
    from pytorchrl.agent.algorithms.wiring import encoder_spec, recurrent_spec, recurrent_state_size
    from pytorchrl.agent.storages.on_policy.gae_buffer import GAEBuffer
    from pytorchrl.envs.vec_env import VecEnv

    env_factory, obs_space, act_space = VecEnv.create_factory("CartPole-v1", num_envs=num_envs, seed=0)
    return cls(
        1,
        env_factory=env_factory,
        actor_factory=OnPolicyActor.create_factory(
            obs_space, act_space, encoder=encoder_spec(actor_cfg), shared_network=actor_cfg.shared_network,
            log_std_init=actor_cfg.log_std_init, ortho_init=actor_cfg.ortho_init, recurrent=recurrent_spec(actor_cfg),
        ),
        storage_factory=GAEBuffer.create_factory(
            num_steps=num_steps, num_envs=num_envs, obs_shape=obs_space.shape, action_shape=(), discrete=True,
            state_size=recurrent_state_size(actor_cfg, 1 if actor_cfg.shared_network else 2),
        ),
    )


def scaling(seeds: list[int], *, workers: tuple[int, ...] = (1, 2, 4), rounds: int = 8) -> dict[str, Any]:
    """Collection env-steps/s with 1/2/4 remote workers vs the local scheme (slow env and CartPole); Ray overhead per round."""
    from pytorchrl.config import from_dict
    from pytorchrl.scheme.scheme import build_scheme

    result: dict[str, Any] = {}
    cases = [("slow", "benchmarks.envs:slow_cartpole", {"step_sleep_s": 0.001}, 4, 64), ("cartpole", "CartPole-v1", {}, 16, 128)]
    for tag, env_id, kwargs, num_envs, num_steps in cases:
        rates: dict[str, float] = {}
        round_s: dict[str, float] = {}
        for n in (0, *workers):
            raw = {
                "env": {"env_id": env_id, "num_envs": num_envs, "env_kwargs": kwargs},
                "storage": {"num_steps": num_steps},
                "scheme": {"num_col_workers": n, "col_worker_resources": {"num_cpus": 0.5}},
            }
            scheme = build_scheme(from_dict(raw))
            try:
                col, algo = scheme.collection_workers, scheme.algorithm
                weights = algo.get_weights()
                times, steps = [], []
                for i in range(rounds + 1):  # new weights every round, as in training
                    start = time.perf_counter()
                    col.sync_weights(weights, i)
                    _, info = col.collect()
                    if i:  # the first round starts the envs
                        times.append(time.perf_counter() - start)
                        steps.append(info["env_steps"])
            finally:
                scheme.close()
            name = "local" if n == 0 else f"{n}_remote"
            rates[name] = sum(steps) / sum(times)
            round_s[name] = statistics.median(times)
            print(f"  {tag} {name}: {rates[name]:,.0f} env-steps/s, round {round_s[name] * 1e3:.1f} ms", flush=True)
        for name, rate in rates.items():
            result[f"{tag}_{name}_env_steps_per_s"] = rate
        result[f"{tag}_2_vs_1_remote"] = rates["2_remote"] / rates["1_remote"]
        result[f"{tag}_1_remote_vs_local"] = rates["1_remote"] / rates["local"]
        result[f"{tag}_ray_overhead_per_round_ms"] = (round_s["1_remote"] - round_s["local"]) * 1e3
    return result


def compression(seeds: list[int], *, repeats: int = 20) -> dict[str, Any]:
    """lz4 (scheme.compress_data): sizes and costs for a CartPole rollout and a gradient; the link speed below which it pays."""
    import pickle

    from pytorchrl.config import from_dict
    from pytorchrl.scheme.base import compression as lz
    from pytorchrl.scheme.scheme import build_scheme

    scheme = build_scheme(from_dict({"env": {"env_id": "CartPole-v1", "num_envs": 16}, "storage": {"num_steps": 32}}))
    try:
        rollout, _ = scheme.collection_workers.local_worker.collect_data()
        gradient = torch.randn(scheme.algorithm.flat_grad.numel())
    finally:
        scheme.close()
    result: dict[str, Any] = {}
    for name, obj in (("rollout", rollout), ("gradient", gradient)):
        raw = len(pickle.dumps(obj))
        packed = lz.pack(obj, compress=True)
        small = len(pickle.dumps(packed))
        start = time.perf_counter()
        for _ in range(repeats):
            lz.unpack(lz.pack(obj, compress=True))
        cost = (time.perf_counter() - start) / repeats
        saved = raw - small
        result[f"{name}_bytes"] = raw
        result[f"{name}_compressed_bytes"] = small
        result[f"{name}_ratio"] = raw / small
        result[f"{name}_pack_unpack_ms"] = cost * 1e3
        # compression pays when sending the saved bytes would take longer than packing them
        result[f"{name}_pays_below_MB_per_s"] = saved / cost / 1e6 if saved > 0 else 0.0
    return result


def distributed_learning(seeds: list[int], *, modes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Every valid col x grad x update mode x {1,2} col x {1,2} grad workers learns CartPole (sync: PPO, 150k; async: APPO, 300k)."""
    import itertools

    result: dict[str, Any] = {}
    table = []
    for col, grad, update, n_col, n_grad in itertools.product(
        ("synchronous", "asynchronous"), ("synchronous", "asynchronous"), ("centralised", "decentralised"), (1, 2), (1, 2)
    ):
        if update == "decentralised" and grad == "asynchronous":
            continue
        mode = {"col_communication": col, "grad_communication": grad, "update_execution": update, "num_col_workers": n_col, "num_grad_workers": n_grad}
        if modes is not None and mode not in modes:
            continue
        sync = col == "synchronous"
        config = "ppo/cartpole_sync_2workers.yaml" if sync else "ppo/cartpole_async_2workers.yaml"
        overrides = (
            *(f"scheme.{k}={v}" for k, v in mode.items()),
            f"storage.num_steps={32 // n_col}" if sync else "storage.num_steps=32",
            "scheme.col_worker_resources.num_cpus=0.25",
            "scheme.grad_worker_resources.num_cpus=0.25",
        )
        res = learning(config, 475.0, 150_000 if sync else 300_000, seeds, overrides)
        name = "-".join(str(v)[:5] for v in mode.values())
        table.append((name, res["solved"], res["median_solved_at_env_steps"], res["median_solved_at_wall_time_s"]))
        result[name] = f"{res['solved']} solved, median {res['median_solved_at_env_steps']} steps, {res['median_solved_at_wall_time_s']} s"
    result["all_modes_solved"] = all(r[2] is not None for r in table)
    return result


def policy_lag(seeds: list[int]) -> dict[str, Any]:
    """Asynchronous collection with 2 workers (APPO config): median policy lag of the rollouts used, and learning."""
    from pytorchrl.config import load_config
    from pytorchrl.learner import Learner

    lags: list[float] = []
    medians = []
    for seed in seeds:
        cfg = load_config(_config_path("ppo/cartpole_async_2workers.yaml"), [f"run.seed={seed}", "run.target_steps=100000", "run.stop_at_return=475"])
        learner = Learner.from_config(cfg, progress=False)
        try:
            summary = learner.train()
            hist = learner.policy_lags
        finally:
            learner.close()
        per_run = sorted(hist.elements())
        medians.append(statistics.median(per_run))
        lags.extend(per_run)
        print(f"  seed {seed}: median lag {medians[-1]}, max {max(per_run)}, dropped {learner.dropped_batches}, solved at {summary['solved_at_env_steps']}", flush=True)
    return {
        "median_policy_lag": statistics.median(medians),
        "p90_policy_lag": float(np.percentile(lags, 90)),
        "max_policy_lag": max(lags),
    }


def fault_tolerance(seeds: list[int], *, crash_every_s: tuple[float, ...] = (20.0, 3.0)) -> dict[str, Any]:
    """PPO CartPole, 2 remote collection workers: time to 475 without faults and with a worker crash (process exit) every ~20 s and ~3 s."""
    config = "ppo/cartpole_sync_2workers.yaml"
    env = ("env.env_id=benchmarks.envs:crashing_cartpole", "env.eval_env_kwargs={}", "scheme.col_worker_resources.num_cpus=0.5")
    clean = learning(config, 475.0, 150_000, seeds, env)
    clean_s = clean["median_solved_at_wall_time_s"]
    # crashes at a given mean interval of training time, at the clean runs' env-step rate
    rate = statistics.median(r["env_steps"] / r["wall_time_s"] for r in clean["runs"])
    result: dict[str, Any] = {"clean_solved": clean["solved"], "clean_median_time_to_475_s": clean_s}
    for every in crash_every_s:
        p_crash = 1.0 / (every * rate)
        faulty = learning(config, 475.0, 150_000, seeds, (*env, f"env.env_kwargs={{p_crash: {p_crash:.3g}, crash_mode: exit}}"))
        faulty_s = faulty["median_solved_at_wall_time_s"]
        tag = f"crash_every_{every:g}s"
        result[f"{tag}_p_crash_per_env_step"] = float(f"{p_crash:.3g}")
        result[f"{tag}_solved"] = faulty["solved"]
        result[f"{tag}_median_time_to_475_s"] = faulty_s
        result[f"{tag}_vs_clean_time"] = faulty_s / clean_s if clean_s and faulty_s else None
        result[f"{tag}_worker_restarts_per_run"] = [r["worker_restarts"] for r in faulty["runs"]]
        result[f"{tag}_lost_batches_per_run"] = [r["lost_batches"] for r in faulty["runs"]]
    return result


def resume_after_kill(seeds: list[int], *, target_steps: int = 30_720, checkpoint_every: int = 4_096) -> dict[str, Any]:
    """PPO CartPole through the CLI: SIGKILL the driver at a random moment, resume, and compare
    with a run never interrupted (final steps, env steps redone, weights equal)."""
    import random
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile

    from pytorchrl.utils.checkpoint import list_checkpoints, load_checkpoint

    args = [
        str(_config_path("ppo/cartpole.yaml")), "--quiet", f"run.target_steps={target_steps}", "run.stop_at_return=null",
        f"run.checkpoint_every={checkpoint_every}", "run.log_every=1024", "run.eval_every=8192",
    ]
    cli = [sys.executable, "-m", "pytorchrl.cli", "train"]
    root = Path(tempfile.mkdtemp(prefix="pytorchrl-kill-"))
    rows = []
    try:
        for seed in seeds:
            whole, killed = root / f"whole_{seed}", root / f"killed_{seed}"
            start = time.perf_counter()
            subprocess.run([*cli, *args, f"run.seed={seed}", "--run-dir", str(whole)], check=True, capture_output=True)
            duration = time.perf_counter() - start
            proc = subprocess.Popen([*cli, *args, f"run.seed={seed}", "--run-dir", str(killed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(random.Random(seed).uniform(0.3, 0.9) * duration)  # start-up included: anywhere in the run
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            lines = (killed / "progress.csv").read_text().splitlines() if (killed / "progress.csv").is_file() else []
            logged = int(lines[-1].split(",", 1)[0]) if len(lines) > 1 else 0
            saved = list_checkpoints(killed / "checkpoints")
            resumed_from = int(saved[-1].name[5:]) if saved else 0
            if saved:
                subprocess.run([*cli, "--resume", str(killed)], check=True, capture_output=True)
            else:  # killed before the first checkpoint: nothing to resume, start again
                shutil.rmtree(killed, ignore_errors=True)
                subprocess.run([*cli, *args, f"run.seed={seed}", "--run-dir", str(killed)], check=True, capture_output=True)
            a, _ = load_checkpoint(whole / "checkpoints" / f"step_{target_steps}")
            b, meta = load_checkpoint(killed / "checkpoints" / f"step_{target_steps}")
            wa, wb = (x["scheme"]["local_gradient_worker"]["algorithm"]["actor"] for x in (a, b))
            same = all(torch.equal(wa[k], wb[k]) for k in wa)
            rows.append({"seed": seed, "killed_after_logged_steps": logged, "resumed_from": resumed_from,
                         "final_steps": meta["env_steps"], "weights_equal_uninterrupted": same})
            print(f"  seed {seed}: killed after step {logged} (logged), resumed from checkpoint {resumed_from}, "
                  f"final {meta['env_steps']}, weights equal to the uninterrupted run: {same}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "kills": len(rows),
        "all_reached_target_steps": all(r["final_steps"] == target_steps for r in rows),
        "max_steps_redone": max(r["killed_after_logged_steps"] - r["resumed_from"] for r in rows),
        "checkpoint_every": checkpoint_every,
        "all_weights_equal_uninterrupted": all(r["weights_equal_uninterrupted"] for r in rows),
        "runs": rows,
    }


def memory(seeds: list[int], *, duration_s: float = 1_800.0, sample_every_s: float = 10.0, warmup_s: float = 300.0) -> dict[str, Any]:
    """Resident memory of the driver and 2 remote collection workers over a 30-minute
    asynchronous APPO run on CartPole (run directory, evaluations and checkpoints included):
    growth from the end of the warm-up to the end, and the curve."""
    import tempfile
    import threading

    from pytorchrl.config import load_config
    from pytorchrl.learner import Learner

    overrides = [f"run.seed={seeds[0]}", "run.target_steps=1000000000000", "run.stop_at_return=null", f"run.max_time_s={duration_s}",
                 "run.checkpoint_every=200000", "run.keep_checkpoints=2"]
    cfg = load_config(_config_path("ppo/cartpole_async_2workers.yaml"), overrides)
    run_dir = Path(tempfile.mkdtemp(prefix="pytorchrl-memory-"))
    learner = Learner.from_config(cfg, run_dir=run_dir, progress=False)
    pids = {"driver": os.getpid(), **{f"worker_{i}": pid for i, pid in enumerate(learner.scheme.collection_workers.workers.pids(), 1)}}
    samples: list[tuple[float, dict[str, float]]] = []
    stop = threading.Event()

    def sample() -> None:
        start = time.monotonic()
        while not stop.wait(0 if not samples else sample_every_s):
            samples.append((time.monotonic() - start, {name: _rss_mib(pid) for name, pid in pids.items()}))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        summary = learner.train()
    finally:
        stop.set()
        sampler.join()
        learner.close()

    def mean_over(lo: float, hi: float) -> dict[str, float]:
        window = [s for t, s in samples if lo <= t <= hi]
        return {name: statistics.fmean(s[name] for s in window) for name in pids}

    end = samples[-1][0]
    after_warmup, final = mean_over(warmup_s, warmup_s + 60.0), mean_over(end - 60.0, end)
    growth = {name: (final[name] - after_warmup[name]) / after_warmup[name] for name in pids}
    for t, s in samples[:: max(1, round(60.0 / sample_every_s))]:
        print(f"  t={t / 60:5.1f} min  " + "  ".join(f"{name} {mib:7.1f} MiB" for name, mib in s.items()), flush=True)
    return {
        "duration_s": round(end, 1),
        "env_steps": summary["env_steps"],
        "rss_after_warmup_mib": {k: round(v, 1) for k, v in after_warmup.items()},
        "rss_at_end_mib": {k: round(v, 1) for k, v in final.items()},
        "rss_growth": {k: f"{v:+.1%}" for k, v in growth.items()},
        "max_growth_below_10pct": max(growth.values()) < 0.10,
        "curve_mib": [(round(t), {k: round(v, 1) for k, v in s.items()}) for t, s in samples],
    }


def _rss_mib(pid: int) -> float:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


BENCHMARKS: dict[str, Callable[[list[int]], dict[str, Any]]] = {
    "ppo_cartpole": ppo_cartpole,
    "collection": collection,
    "ppo_acrobot": ppo_acrobot,
    "ppo_pendulum": ppo_pendulum,
    "a2c_cartpole": a2c_cartpole,
    "dqn_cartpole": dqn_cartpole,
    "rainbow_cartpole": rainbow_cartpole,
    "apex_cartpole": apex_cartpole,
    "sac_pendulum": sac_pendulum,
    "sac_step": sac_step,
    "sac_discrete_cartpole": sac_discrete_cartpole,
    "td3_pendulum": td3_pendulum,
    "ddpg_pendulum": ddpg_pendulum,
    "replay_buffer": replay_buffer,
    "scaling": scaling,
    "compression": compression,
    "policy_lag": policy_lag,
    "distributed_learning": distributed_learning,
    "fault_tolerance": fault_tolerance,
    "resume_after_kill": resume_after_kill,
    "memory": memory,
}
BENCHMARKS.update(PIXELS_BENCHMARKS)
BENCHMARKS.update(TOOLS_BENCHMARKS)
BENCHMARKS.update(MEMORY_BENCHMARKS)


def machine() -> str:
    """One line naming this machine, for BENCHMARKS.md."""
    return (
        f"{platform.node()}: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"python {platform.python_version()}, torch {torch.__version__}"
    )


def run_benchmarks(names: list[str], *, seeds: list[int], on_result: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the named benchmarks and print a table of their headline figures.

    :param on_result: called with the results so far after each benchmark (``--json`` keeps
        them as they come: a later benchmark that fails loses none of the earlier ones).
    """
    print(f"# pytorchrl benchmark {' '.join(names)}  ({time.strftime('%Y-%m-%d %H:%M')}, {machine()}; "
          f"code {Path(__file__).resolve().parent.parent}, configs {CONFIGS})", flush=True)
    results = {}
    for name in names:
        results[name] = BENCHMARKS[name](seeds)
        if on_result is not None:
            on_result(results)
    print()
    print("| benchmark | figure | value |")
    print("|---|---|---|")
    for name, res in results.items():
        for key, value in res.items():
            if key in ("runs", "seeds", "config", "curve_mib", "table"):
                continue
            shown = f"{value:,.3f}" if isinstance(value, float) else value
            print(f"| {name} | {key} | {shown} |")
    return results
