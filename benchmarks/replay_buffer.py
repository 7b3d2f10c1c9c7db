"""Replay buffer throughput and memory: :func:`replay_buffer`.

Throughput is measured on 1M-row buffers of CartPole-sized observations (4 float32), filled
past capacity (so the ring wraps) by 4 continuing streams of 32 steps x 16 envs; sampling is
at batch 256 with 3-step returns. The memory figure is for 1M 84x84x4 uint8 frames, where the
point of storing each observation once shows: the whole buffer against the frames alone.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch

from pytorchrl.agent.storages.off_policy.replay import PrioritizedSampler, ReplayBuffer, Sampler, UniformSampler

CAPACITY = 1_000_000
STEPS, ENVS, STREAMS = 32, 16, 4
BATCH, N_STEP = 256, 3


def _chunks(rng: np.random.Generator, count: int, obs_shape: tuple[int, ...], obs_dtype: Any) -> list[dict[str, torch.Tensor]]:
    """Rollout chunks with episode ends about every 100 steps and the reset steps that follow."""
    chunks = []
    for _ in range(count):
        ended = rng.random((STEPS, ENVS)) < 0.01
        terminated = ended & (rng.random((STEPS, ENVS)) < 0.5)
        valid = np.ones((STEPS, ENVS), dtype=bool)
        valid[1:] = ~ended[:-1]
        obs = rng.random((STEPS + 1, ENVS, *obs_shape)) * 255
        chunks.append({
            "obs": torch.from_numpy(obs.astype(obs_dtype)),
            "actions": torch.from_numpy(rng.integers(0, 2, (STEPS, ENVS))),
            "rewards": torch.ones(STEPS, ENVS),
            "terminated": torch.from_numpy(terminated & valid),
            "truncated": torch.from_numpy(ended & ~terminated & valid),
            "valid": torch.from_numpy(valid),
        })
    return chunks


def _throughput(seed: int, sampler: Sampler, chunks: list[dict[str, torch.Tensor]], batches: int) -> dict[str, float]:
    buf = ReplayBuffer(capacity=CAPACITY, n_step=N_STEP, gamma=0.99, sampler=sampler)
    adds = CAPACITY * 5 // 4 // (STEPS * ENVS)  # past capacity: the ring wraps
    start = time.perf_counter()
    for i in range(adds):
        stream = {"stream_id": torch.tensor(i % STREAMS), "chunk_index": torch.tensor(i // STREAMS)}
        buf.add_data({**chunks[i % len(chunks)], **stream})
    figures = {"insert": adds * STEPS * ENVS / (time.perf_counter() - start)}
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    for _ in range(batches):
        buf.sample(BATCH, gen)
    figures["sample"] = batches * BATCH / (time.perf_counter() - start)
    if isinstance(sampler, PrioritizedSampler):
        td = torch.randn(batches, BATCH, generator=gen)
        start = time.perf_counter()
        for i in range(batches):
            buf.update_priorities(buf.sample(BATCH, gen)["indices"], td[i])
        figures["sample_update"] = batches * BATCH / (time.perf_counter() - start)
    return figures


def _frame_buffer(capacity: int) -> ReplayBuffer:
    """A prioritized buffer of 84x84x4 uint8 frames, allocated (by a one-step add) but not filled."""
    buf = ReplayBuffer(capacity=capacity, n_step=N_STEP, sampler=PrioritizedSampler())
    buf.add_data({
        "obs": torch.zeros(2, 1, 84, 84, 4, dtype=torch.uint8),
        "actions": torch.zeros(1, 1, dtype=torch.long),
        "rewards": torch.zeros(1, 1),
        "terminated": torch.zeros(1, 1, dtype=torch.bool),
        "truncated": torch.zeros(1, 1, dtype=torch.bool),
        "valid": torch.ones(1, 1, dtype=torch.bool),
    })
    return buf


def _frame_memory() -> dict[str, Any]:
    """Bytes of a 1M-frame prioritized buffer against the frames alone."""
    try:
        buf = _frame_buffer(CAPACITY)
        nbytes, how = buf.nbytes, "allocated"
    except MemoryError:
        # Linux's default overcommit refuses address space beyond RAM + swap even untouched: the
        # row arrays are exactly linear in capacity, so take them per row from a smaller buffer
        small = _frame_buffer(CAPACITY // 16)
        per_row = (small.nbytes - small.sampler.nbytes) // small.capacity
        sampler = PrioritizedSampler()
        sampler.bind(CAPACITY)
        nbytes, how = per_row * CAPACITY + sampler.nbytes, f"per-row bytes of a {small.capacity:,}-row buffer x 1M + a 1M sum tree"
    frames = CAPACITY * 84 * 84 * 4
    return {"frames_1m_nbytes": nbytes, "frames_1m_raw_obs_nbytes": frames, "frames_1m_ratio": nbytes / frames, "frames_1m_how": how}


def replay_buffer(seeds: list[int]) -> dict[str, Any]:
    """Insert and sample throughput (transitions/s) of uniform and prioritized 1M buffers, and the
    memory of a 1M-frame buffer relative to its frames (median over ``seeds``)."""
    runs: dict[str, list[float]] = {}
    for seed in seeds:
        chunks = _chunks(np.random.default_rng(seed), 8, (4,), np.float32)
        for name, sampler in (("uniform", UniformSampler()), ("prioritized", PrioritizedSampler())):
            for figure, value in _throughput(seed, sampler, chunks, batches=1000).items():
                runs.setdefault(f"{name}_{figure}_per_s", []).append(value)
    result: dict[str, Any] = {k: statistics.median(v) for k, v in runs.items()}
    result.update(_frame_memory())
    for key, value in result.items():
        print(f"  replay_buffer {key}: {value:,.4g}" if isinstance(value, float) else f"  replay_buffer {key}: {value}", flush=True)
    return result
