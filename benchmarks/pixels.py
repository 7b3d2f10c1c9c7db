"""The pixels-and-physics figures of BENCHMARKS.md (Atari, MuJoCo): ``pytorchrl benchmark NAME``.

Learning targets train the shipped configs (:func:`benchmarks.suite.learning`); Pong runs for
hours on a CPU, so its figure usually comes from a background run continued with ``--resume``
(see BENCHMARKS.md for where its curve was recorded).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

#: learning targets: name -> (config, threshold, env-step budget, what it measures)
LEARNING_TARGETS: dict[str, tuple[str, float, int, str]] = {
    "ppo_pong": ("ppo/atari_pong.yaml", 18.0, 2_500_000, "PPO ALE/Pong-v5 to a raw game score >= 18 within 10M frames (2.5M agent steps)."),
    "appo_pong": ("appo/atari_pong.yaml", 18.0, 2_500_000, "APPO ALE/Pong-v5, 2 remote asynchronous collection workers, to >= 18 within 10M frames."),
    "dqn_pong": ("dqn/atari_pong.yaml", 18.0, 2_500_000, "Rainbow-style DQN ALE/Pong-v5 to >= 18 within 10M frames."),
    "sac_halfcheetah": ("sac/halfcheetah.yaml", 5000.0, 300_000, "SAC HalfCheetah-v5 to eval >= 5000 within 300k env steps."),
    "td3_halfcheetah": ("td3/halfcheetah.yaml", 5000.0, 300_000, "TD3 HalfCheetah-v5 to eval >= 5000 within 300k env steps."),
    "ppo_halfcheetah": ("ppo/halfcheetah.yaml", 2000.0, 1_000_000, "PPO HalfCheetah-v5 to eval >= 2000 within 1M env steps."),
}


def _learning_benchmark(config: str, threshold: float, budget: int, doc: str) -> Callable[[list[int]], dict[str, Any]]:
    """A benchmark that trains ``config`` per seed to ``threshold`` within ``budget`` (``--list`` shows ``doc``)."""

    def run(seeds: list[int]) -> dict[str, Any]:
        from benchmarks.suite import learning

        return learning(config, threshold, budget, seeds)

    run.__doc__ = doc
    return run


def atari_collection(seeds: list[int], *, num_envs: int = 16, steps: int = 256, repeats: int = 3) -> dict[str, Any]:
    """One collection worker, 16 Pong envs (ale-py's native vector env, one thread), Nature CNN
    policy, acting and storage without learning: env frames/s against the bound measured in the
    same run (raw vectorized ALE stepping plus a bare batched CNN forward per step)."""
    from benchmarks.suite import _config_path
    from pytorchrl.agent.algorithms import ALGORITHMS, wire
    from pytorchrl.agent.policy import LocalPolicy
    from pytorchrl.config import load_config
    from pytorchrl.envs.vec_env import VecEnv
    from pytorchrl.scheme.collection.collection_worker import CollectionWorker
    from pytorchrl.utils.runtime import configure_process

    del seeds
    configure_process(1)
    cfg = load_config(_config_path("ppo/atari_pong.yaml"), [f"env.num_envs={num_envs}", f"storage.num_steps={steps}", "env.atari.num_threads=1"])
    env_factory, obs_space, act_space = VecEnv.create_factory(cfg.env.env_id, num_envs=num_envs, atari=dataclasses.asdict(cfg.env.atari))
    assert isinstance(act_space, gym.spaces.Discrete)
    wiring = wire(ALGORITHMS["ppo"], cfg, obs_space, act_space)
    worker = CollectionWorker(1, env_factory=env_factory, actor_factory=wiring.actor, storage_factory=wiring.storage)
    envs, actor = worker.envs, cast(LocalPolicy, worker.policy).actor
    assert envs is not None
    frame_skip = cfg.env.atari.frame_skip
    acts = np.random.default_rng(0).integers(0, int(act_space.n), size=(steps, num_envs))
    obs = envs.reset()
    measured, env_only, forward_only = [], [], []
    worker.collect_data()  # warm-up
    for _ in range(repeats):
        t = time.perf_counter()
        worker.collect_data()
        measured.append(steps * num_envs / (time.perf_counter() - t))
        t = time.perf_counter()
        for a in acts:
            envs.env.step(a)
        env_only.append(time.perf_counter() - t)
        t = time.perf_counter()
        with torch.inference_mode():
            for _ in range(steps):
                actor.forward(obs)
        forward_only.append(time.perf_counter() - t)
    worker.close()
    bound = steps * num_envs / (statistics.median(env_only) + statistics.median(forward_only))
    collect = statistics.median(measured)
    return {
        "num_envs": num_envs,
        "collect_frames_per_s": collect * frame_skip,
        "raw_env_frames_per_s": steps * num_envs * frame_skip / statistics.median(env_only),
        "bare_forward_batches_per_s": steps / statistics.median(forward_only),
        "bound_frames_per_s": bound * frame_skip,
        "ratio_to_bound": collect / bound,
    }


def atari_replay_memory(seeds: list[int], *, capacity: int = 100_000) -> dict[str, Any]:
    """Bytes of a DQN Pong run's replay buffer per stored frame stack, against the raw stacks
    (``capacity * 4 * 84 * 84`` bytes): the buffer of ``configs/dqn/atari_pong.yaml`` filled
    with real preprocessed Pong observations through its storage's own rollouts."""
    from benchmarks.suite import _config_path
    from pytorchrl.agent.algorithms import ALGORITHMS, wire
    from pytorchrl.config import load_config
    from pytorchrl.envs.vec_env import VecEnv

    del seeds
    cfg = load_config(_config_path("dqn/atari_pong.yaml"), [f"storage.capacity={capacity}"])
    env_factory, obs_space, act_space = VecEnv.create_factory(cfg.env.env_id, num_envs=cfg.env.num_envs, atari=dataclasses.asdict(cfg.env.atari))
    assert isinstance(act_space, gym.spaces.Discrete)
    wiring = wire(ALGORITHMS["dqn"], cfg, obs_space, act_space)
    envs, collect, replay = env_factory(worker_index=0), wiring.storage(), wiring.storage()
    rng = np.random.default_rng(0)
    collect.reset(envs.reset())
    stored = 0
    while stored < capacity + 1000:  # past the capacity: the ring has wrapped
        for _, _, action in collect.acting_slots():
            action.copy_(torch.from_numpy(rng.integers(0, int(act_space.n), size=envs.num_envs)))
            next_obs, reward, terminated, truncated, valid = envs.step_arrays(action.numpy())
            collect.insert(reward=reward, terminated=terminated, truncated=truncated, valid=valid, next_obs=next_obs)
        data = collect.get_data()
        replay.add_data(data)
        stored += int(data["rewards"].numel())
    envs.close()
    raw = capacity * int(np.prod(obs_space.shape or ()))
    buffer = replay.buffer
    return {
        "capacity": capacity,
        "obs_dtype": str(buffer._arrays["obs"].dtype),
        "buffer_bytes": buffer.nbytes,
        "raw_frame_stack_bytes": raw,
        "ratio_to_raw": buffer.nbytes / raw,
        "transitions_sampleable": buffer.num_samples,
    }


_GEMMS = ("aten.mm.", "aten.addmm.", "aten.bmm.", "aten.baddbmm.")


def _gemm_floor(step: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """The matrix products one call of ``step`` makes, replayed alone on copies of their inputs:
    ``(milliseconds per call, MFLOP per call)``. No implementation of the same networks and
    batch can do less work than these products on this CPU."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: list[tuple[Any, list[Any], dict[str, Any]]] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if str(func).startswith(_GEMMS):
                calls.append((func, [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args], kwargs or {}))
            return func(*args, **(kwargs or {}))

    with Record():
        step()
    flops = 0
    for func, args, _ in calls:
        mat1, mat2 = args[-2:] if "add" in str(func) else args[:2]  # (b)addmm: (bias, m1, m2); (b)mm: (m1, m2)
        batch = mat1.shape[0] if mat1.dim() == 3 else 1
        flops += 2 * batch * mat1.shape[-2] * mat1.shape[-1] * mat2.shape[-1]

    def replay() -> None:
        for func, args, kwargs in calls:
            func(*args, **kwargs)

    for _ in range(max(1, repeats // 10)):
        replay()
    start = time.perf_counter()
    for _ in range(repeats):
        replay()
    return 1e3 * (time.perf_counter() - start) / repeats, flops / 1e6


def sac_halfcheetah_step(seeds: list[int], *, steps: int = 1_500, warmup: int = 500, precision: str = "float32") -> dict[str, Any]:
    """Milliseconds per SAC HalfCheetah-v5 step (``configs/sac/halfcheetah.yaml``: one env step,
    acting, storage and one gradient step; no evaluation), after ``warmup`` updates, and the floor
    under it: the time of the same update's matrix products replayed alone. ``precision``: the
    config's ``actor.mlp_precision``. Compare the step with Stable-Baselines3's in one run:
    ``scripts/sac_step_vs_sb3.py``."""
    from benchmarks.suite import _config_path
    from pytorchrl.config import load_config
    from pytorchrl.learner import Learner

    runs = []
    for seed in seeds:
        cfg = load_config(_config_path("sac/halfcheetah.yaml"), [
            f"run.seed={seed}", "run.target_steps=1000000000", "run.eval_every=1000000000", "run.log_every=1000000000",
            "run.checkpoint_every=1000000000", "run.stop_at_return=null", "algorithm.start_steps=1000", f"actor.mlp_precision={precision}",
        ])
        learner = Learner.from_config(cfg, progress=False)  # its workers set the config's torch_threads
        try:
            while learner.updates < warmup:
                learner.step()
            start = time.perf_counter()
            for _ in range(steps):
                learner.step()
            step_ms = 1e3 * (time.perf_counter() - start) / steps
            gemm_ms, mflop = _gemm_floor(learner.step, repeats=steps // 3)
        finally:
            learner.close()
        runs.append({
            "seed": seed, "threads": torch.get_num_threads(), "ms_per_step": round(step_ms, 3), "gemm_ms_per_update": round(gemm_ms, 3),
            "gemm_mflop_per_update": round(mflop, 1), "gemm_gflop_per_s": round(mflop / gemm_ms, 1), "gemm_share": round(gemm_ms / step_ms, 3),
        })
        print(f"  sac/halfcheetah.yaml ({precision}) seed {seed}: {step_ms:.2f} ms per step; its matrix products alone {gemm_ms:.2f} ms "
              f"({mflop:.0f} MFLOP)", flush=True)
    return {
        "steps": steps,
        "precision": precision,
        "median_ms_per_step": statistics.median(r["ms_per_step"] for r in runs),
        "median_gemm_ms_per_update": statistics.median(r["gemm_ms_per_update"] for r in runs),
        "runs": runs,
    }


def sac_halfcheetah_step_bf16(seeds: list[int]) -> dict[str, Any]:
    """:func:`sac_halfcheetah_step` with ``actor.mlp_precision: bfloat16`` (hidden layers in
    bfloat16: for CPUs with AVX-512 BF16 or AMX)."""
    return sac_halfcheetah_step(seeds, precision="bfloat16")


BENCHMARKS: dict[str, Callable[[list[int]], dict[str, Any]]] = {
    "atari_collection": atari_collection,
    "sac_halfcheetah_step": sac_halfcheetah_step,
    "sac_halfcheetah_step_bf16": sac_halfcheetah_step_bf16,
    "atari_replay_memory": atari_replay_memory,
    **{name: _learning_benchmark(*target) for name, target in LEARNING_TARGETS.items()},
}
