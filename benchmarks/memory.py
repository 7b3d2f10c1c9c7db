"""The memory-and-structure figures of BENCHMARKS.md (recurrent policies, R2D2, action masks):
``pytorchrl benchmark NAME``."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

MASKED_CARTPOLE = "pytorchrl/CartPoleNoVelocity-v1"


def ppo_gru_masked_cartpole(seeds: list[int]) -> dict[str, Any]:
    """PPO-GRU on CartPole without velocities to eval >= 475 within the zoo's 100k env steps
    (configs/ppo/cartpole_masked_gru.yaml), and the same config without the recurrent core,
    which must not get there (the memory is what solves it)."""
    from benchmarks.suite import learning

    gru = learning("ppo/cartpole_masked_gru.yaml", 475.0, 100_000, seeds)
    mlp = learning("ppo/cartpole_masked_gru.yaml", 475.0, 100_000, seeds, ("actor.recurrent.type=none",))
    return {
        "gru_solved": gru["solved"],
        "gru_median_solved_at_env_steps": gru["median_solved_at_env_steps"],
        "gru_median_solved_at_wall_time_s": gru["median_solved_at_wall_time_s"],
        "mlp_solved": mlp["solved"],
        "mlp_median_final_eval_return": mlp["median_final_eval_return"],
        "runs": {"gru": gru["runs"], "mlp": mlp["runs"]},
    }


def appo_lstm_masked_cartpole(seeds: list[int]) -> dict[str, Any]:
    """APPO-LSTM, 2 remote collection workers (asynchronous), CartPole without velocities to eval
    >= 475 within 1M env steps (configs/appo/cartpole_masked_lstm.yaml)."""
    from benchmarks.suite import learning

    return learning("appo/cartpole_masked_lstm.yaml", 475.0, 1_000_000, seeds)


def r2d2_masked_cartpole(seeds: list[int]) -> dict[str, Any]:
    """R2D2-style recurrent DQN (sequence replay, burn-in, stored states) on CartPole without
    velocities to eval >= 475 within 300k env steps (configs/dqn/r2d2_cartpole_masked.yaml)."""
    from benchmarks.suite import learning

    return learning("dqn/r2d2_cartpole_masked.yaml", 475.0, 300_000, seeds)


def sac_gru_masked_pendulum(seeds: list[int]) -> dict[str, Any]:
    """Recurrent SAC (GRU) on Pendulum without its angular velocity to eval >= -250 within 100k
    env steps (configs/sac/pendulum_masked_gru.yaml)."""
    from benchmarks.suite import learning

    return learning("sac/pendulum_masked_gru.yaml", -250.0, 100_000, seeds)


def masked_actions(seeds: list[int]) -> dict[str, Any]:
    """PPO and DQN on pytorchrl/LegalMoves-v0 (masks from info; the env raises on an illegal
    action, so finishing the run means none was taken): final eval return against the best play's
    expected return, estimated by playing it."""
    from benchmarks.suite import learning

    best = _legal_moves_best_return()
    ppo = learning("ppo/legal_moves_masked.yaml", best * 0.95, 100_000, seeds)
    dqn = learning("dqn/legal_moves_masked.yaml", best * 0.95, 100_000, seeds)
    return {
        "best_play_return": best,
        "ppo_solved": ppo["solved"],
        "ppo_median_final_eval_return": ppo["median_final_eval_return"],
        "dqn_solved": dqn["solved"],
        "dqn_median_final_eval_return": dqn["median_final_eval_return"],
    }


def _legal_moves_best_return(episodes: int = 2_000) -> float:
    import gymnasium as gym
    import numpy as np

    import pytorchrl.envs  # noqa: F401  (registers the id)

    env = gym.make("pytorchrl/LegalMoves-v0")
    total = 0.0
    for ep in range(episodes):
        _, info = env.reset(seed=ep)
        done = False
        while not done:
            _, reward, terminated, truncated, info = env.step(int(np.flatnonzero(info["action_mask"]).max()))
            total += float(reward)
            done = terminated or truncated
    return total / episodes


def recurrent_collection(seeds: list[int], *, num_envs: int = 64, steps: int = 1_000, repeats: int = 5) -> dict[str, Any]:
    """One collection worker, 64 CartPole envs: env-steps/s with a GRU-128 core after the MLP
    (acting, scoring and storing states) against the memoryless MLP actor, alternating in one
    run; the GRU shared by policy and value (the usual recurrent PPO design) and one per head."""
    from benchmarks.suite import _collection_worker
    from pytorchrl.config import ActorConfig, RecurrentConfig
    from pytorchrl.scheme.collection.collection_worker import CollectionWorker

    torch.set_num_threads(1)
    gru = RecurrentConfig(type="gru", hidden_size=128)
    configs = {
        "mlp": ActorConfig(),
        "gru_shared": ActorConfig(recurrent=gru, shared_network=True),
        "gru_separate": ActorConfig(recurrent=gru, shared_network=False),
    }
    workers = {name: _collection_worker(CollectionWorker, cfg, num_envs=num_envs, num_steps=steps) for name, cfg in configs.items()}
    rates: dict[str, list[float]] = {name: [] for name in workers}
    for worker in workers.values():
        worker.collect_data()  # warm-up
    names = list(workers)
    for rep in range(repeats):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:  # rotate which goes first
            t = time.perf_counter()
            workers[name].collect_data()
            rates[name].append(steps * num_envs / (time.perf_counter() - t))
    for worker in workers.values():
        worker.close()
    median = {name: statistics.median(r) for name, r in rates.items()}
    return {
        "num_envs": num_envs,
        **{f"{name}_env_steps_per_s": value for name, value in median.items()},
        "ratio_gru_shared_to_mlp": median["gru_shared"] / median["mlp"],
        "ratio_gru_separate_to_mlp": median["gru_separate"] / median["mlp"],
    }


MEMORY_BENCHMARKS: dict[str, Callable[[list[int]], dict[str, Any]]] = {
    "ppo_gru_masked_cartpole": ppo_gru_masked_cartpole,
    "appo_lstm_masked_cartpole": appo_lstm_masked_cartpole,
    "r2d2_masked_cartpole": r2d2_masked_cartpole,
    "sac_gru_masked_pendulum": sac_gru_masked_pendulum,
    "masked_actions": masked_actions,
    "recurrent_collection": recurrent_collection,
}
