"""An up-front floor on the memory a run needs, checked in the driver before anything is allocated.

Typed but absurd sizes (``actor.hidden_sizes: [100000, 100000]``, a replay buffer of a billion
Atari frames) would otherwise fail deep inside torch or the kernel's OOM killer, in a worker. The
estimate is a lower bound, so it never refuses a run that fits: the MLP's weights with their
gradients and Adam moments (16 bytes a parameter) times the networks the algorithm keeps, and one
rollout (on-policy) or the replay buffer's observations (off-policy).
"""

from __future__ import annotations

import itertools
import math
import os
from typing import Any

import gymnasium as gym

from pytorchrl.config import Config
from pytorchrl.utils.errors import ConfigError
from pytorchrl.utils.spaces import is_image_space, obs_layout

#: bytes per parameter: the weight, its gradient and Adam's two moments, float32
BYTES_PER_PARAMETER = 16
#: MLPs an algorithm keeps (policy and value; SAC/TD3: policy, two critics and their targets)
NETWORKS = {"dqn": 2, "sac": 6, "td3": 6, "ddpg": 4}
_GIB = 1 << 30


def estimate_bytes(config: Config, observation_space: gym.Space) -> dict[str, tuple[str, Any, int]]:
    """Lower bounds of the run's big allocations: ``{part: (config key, its value, bytes)}``."""
    layout = obs_layout(observation_space)
    obs_bytes = math.prod(layout.shape) * (1 if layout.is_uint8 else 4)
    actor = config.actor
    cnn = actor.encoder in ("nature_cnn", "impala_resnet") or (actor.encoder == "auto" and is_image_space(observation_space))
    if cnn:
        inputs = (512 if actor.encoder != "impala_resnet" else 256) if actor.cnn_features is None else actor.cnn_features  # 0: uncounted
    else:
        inputs = math.prod(layout.shape)
    widths = [inputs, *actor.hidden_sizes]
    params = sum(a * b for a, b in itertools.pairwise(widths))
    copies = NETWORKS.get(config.algorithm.name, 1 if actor.shared_network else 2)
    parts: dict[str, tuple[str, Any, int]] = {"networks": ("actor.hidden_sizes", list(actor.hidden_sizes), params * copies * BYTES_PER_PARAMETER)}
    if config.algorithm.name in NETWORKS:
        parts["replay buffer"] = ("storage.capacity", config.storage.capacity, config.storage.capacity * obs_bytes)
    else:
        steps = config.storage.num_steps
        parts[f"a rollout of storage.num_steps x env.num_envs = {steps} x {config.env.num_envs}"] = (
            "storage.num_steps", steps, (steps + 1) * config.env.num_envs * obs_bytes
        )
    return parts


def available_bytes() -> int | None:
    """Memory this machine can still give (Linux ``MemAvailable``; None where unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(config: Config, observation_space: gym.Space, available: int | None = None) -> None:
    """Refuse a run whose floor estimate exceeds the memory available, naming the key that makes it.

    :raises ConfigError: one line with the key, its value, the estimate and what is available.
    """
    available = available_bytes() if available is None else available
    if available is None:
        return
    parts = estimate_bytes(config, observation_space)
    total = sum(b for _, _, b in parts.values())
    if total <= available:
        return
    part, (key, value, size) = max(parts.items(), key=lambda item: item[1][2])
    raise ConfigError(
        f"config key {key!r} = {value!r}: the run needs at least {total / _GIB:,.1f} GiB ({part}: {size / _GIB:,.1f} GiB), "
        f"more than the {available / _GIB:,.1f} GiB this machine has available; lower it"
    )
