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

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _config_path(relative: str) -> Path:
    for root in (Path.cwd() / "configs", CONFIGS):
        if (root / relative).is_file():
            return root / relative
    raise FileNotFoundError(f"configs/{relative} not found (run from a pytorchrl checkout)")


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


def collection(seeds: list[int], *, num_envs: int = 64, steps: int = 2_000, repeats: int = 3) -> dict[str, Any]:
    """One CollectionWorker, 64 CartPole envs, default MLP: env-steps/s vs the measured bound."""
    from pytorchrl.config import ActorConfig
    from pytorchrl.scheme.collection.collection_worker import CollectionWorker

    torch.set_num_threads(1)
    worker = _collection_worker(CollectionWorker, ActorConfig(), num_envs=num_envs, num_steps=steps)
    envs, actor = worker.envs, worker.actor
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
    import dataclasses

    from pytorchrl.agent.actors.on_policy import OnPolicyActor
    from pytorchrl.agent.algorithms import PPO
    from pytorchrl.agent.storages.on_policy.gae_buffer import GAEBuffer
    from pytorchrl.envs.vec_env import VecEnv

    env_factory, obs_space, act_space = VecEnv.create_factory("CartPole-v1", num_envs=num_envs, seed=0)
    return cls(
        1,
        env_factory=env_factory,
        actor_factory=OnPolicyActor.create_factory(obs_space, act_space, **dataclasses.asdict(actor_cfg)),
        algo_factory=PPO.create_factory(),
        storage_factory=GAEBuffer.create_factory(
            num_steps=num_steps, num_envs=num_envs, obs_shape=obs_space.shape, action_shape=(), discrete=True
        ),
    )


BENCHMARKS: dict[str, Callable[[list[int]], dict[str, Any]]] = {
    "ppo_cartpole": ppo_cartpole,
    "collection": collection,
    "ppo_acrobot": ppo_acrobot,
    "ppo_pendulum": ppo_pendulum,
    "a2c_cartpole": a2c_cartpole,
}


def machine() -> str:
    """One line naming this machine, for BENCHMARKS.md."""
    return (
        f"{platform.node()}: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"python {platform.python_version()}, torch {torch.__version__}"
    )


def run_benchmarks(names: list[str], *, seeds: list[int]) -> dict[str, Any]:
    """Run the named benchmarks and print a table of their headline figures."""
    print(f"# pytorchrl benchmark {' '.join(names)}  ({time.strftime('%Y-%m-%d %H:%M')}, {machine()})", flush=True)
    results = {}
    for name in names:
        results[name] = BENCHMARKS[name](seeds)
    print()
    print("| benchmark | figure | value |")
    print("|---|---|---|")
    for name, res in results.items():
        for key, value in res.items():
            if key in ("runs", "seeds", "config"):
                continue
            shown = f"{value:,.3f}" if isinstance(value, float) else value
            print(f"| {name} | {key} | {shown} |")
    return results
