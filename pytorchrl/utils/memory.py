"""An up-front floor on the memory a run needs, checked in the driver before anything is allocated.

Typed but absurd sizes (``actor.hidden_sizes: [100000, 100000]``, a replay buffer of a billion
Atari frames) would otherwise fail deep inside torch or the kernel's OOM killer, in a worker. The
estimate is a lower bound, so it never refuses a run that fits: the MLP's weights with their
gradients and Adam moments (16 bytes a parameter) times the networks the algorithm keeps, the same
for a CNN extractor of an image observation (convolutions and output layer) and a recurrent core
(times the extractors the algorithm keeps at least), the Atari and MuJoCo envs of this process
(each holds an emulator or a compiled model), and one rollout (on-policy) or the replay buffer's
observations (off-policy: as many as it holds by the run's end, :func:`held_transitions`).
"""

from __future__ import annotations

import itertools
import math
import os
from typing import Any

import gymnasium as gym

from pytorchrl.agent.actors.networks.encoders import EncoderError, image_encoder
from pytorchrl.config import Config
from pytorchrl.utils.errors import ConfigError
from pytorchrl.utils.spaces import is_image_space, obs_layout

#: bytes per parameter: the weight, its gradient and Adam's two moments, float32
BYTES_PER_PARAMETER = 16
_GIB = 1 << 30


#: ``storage.checkpoint_buffer: null`` puts the replay buffer in checkpoints when the most it
#: holds in the run takes at most this
AUTO_CHECKPOINT_BUFFER_BYTES = _GIB


def observation_bytes(observation_space: gym.Space) -> int:
    """Bytes of one stored observation."""
    layout = obs_layout(observation_space)
    return math.prod(layout.shape) * (1 if layout.is_uint8 else 4)


def checkpoints_buffer(config: Config, observation_space: gym.Space) -> bool:
    """``storage.checkpoint_buffer``, its null resolved: whether the observations of the most the
    buffer holds in this run (its capacity, or ``run.target_steps`` transitions when the run ends
    first) take at most :data:`AUTO_CHECKPOINT_BUFFER_BYTES`. A checkpoint stores only the filled
    part, so a 300k-step Humanoid run (348 floats an observation) keeps its buffer, 0.4 GB at the
    end, while its 1M-step run (1.4 GB) does not."""
    if config.storage.checkpoint_buffer is not None:
        return config.storage.checkpoint_buffer
    return held_transitions(config) * observation_bytes(observation_space) <= AUTO_CHECKPOINT_BUFFER_BYTES


def held_transitions(config: Config) -> int:
    """The most transitions the replay buffer holds in this run: its capacity, or every env step
    of ``run.target_steps`` when the run ends first. Its observation arrays are ``np.empty``,
    whose pages cost memory only once written, so this, not the capacity, is what they take (a
    resume with a larger budget is checked again; one whose buffer was not checkpointed refills
    fewer, so its floor reads high); the few arrays filled when the buffer is made (a priority
    tree's minima, HER's episode links) are counted at their capacity."""
    return min(config.storage.capacity, config.run.target_steps)


def estimate_bytes(config: Config, observation_space: gym.Space) -> dict[str, tuple[str, Any, int]]:
    """Lower bounds of the run's big allocations: ``{part: (config key, its value, bytes)}``."""
    obs_bytes = observation_bytes(observation_space)
    parts = {**network_bytes(config, observation_space), **env_bytes(config)}
    if config.algorithm.replay:
        held, capacity = held_transitions(config), config.storage.capacity
        if held < capacity:  # the budget binds: lowering the capacity above it would change nothing
            parts[f"replay buffer, the {held:,} transitions it holds by the run's end (storage.capacity {capacity:,})"] = ("run.target_steps", held, held * obs_bytes)
        else:
            parts["replay buffer"] = ("storage.capacity", capacity, capacity * obs_bytes)
        from pytorchrl.agent.algorithms.families import ReplayConfig
        from pytorchrl.agent.storages.off_policy.sum_tree import SumTree

        # arrays written whole when the buffer is made: their whole capacity costs at once
        eager = {}
        prioritized = isinstance(config.algorithm, ReplayConfig) and config.algorithm.prioritized()
        if prioritized and config.actor.recurrent.type == "none":  # a sequence buffer's tree spans windows, fewer: left out
            eager["priority tree"] = SumTree.eager_bytes(capacity)
        if config.storage.her.strategy == "episode":
            eager["episode links"] = 8 * capacity  # each row's predecessor in its episode
        if eager:
            parts[f"the replay buffer's {' and '.join(eager)}, made whole"] = ("storage.capacity", capacity, sum(eager.values()))
    else:
        steps = config.storage.num_steps
        parts[f"a rollout of storage.num_steps x env.num_envs = {steps} x {config.env.num_envs}"] = (
            "storage.num_steps", steps, (steps + 1) * config.env.num_envs * obs_bytes
        )
    return parts


def network_bytes(config: Config, observation_space: gym.Space) -> dict[str, tuple[str, Any, int]]:
    """The networks' part of :func:`estimate_bytes`: MLPs, CNN extractors and recurrent cores."""
    layout = obs_layout(observation_space)
    actor = config.actor
    encoder = actor.encoder
    cls = image_encoder(encoder.type)
    image = isinstance(observation_space, gym.spaces.Box) and is_image_space(observation_space)
    inputs, extractor = math.prod(layout.shape), 0
    if cls is not None and (encoder.type != "auto" or image):
        # the encoder sizes itself (a Dict's CNNs: uncounted, their features only)
        inputs = cls.options["features"] if encoder.features is None else encoder.features
        if image:
            try:
                extractor, inputs = cls.size(observation_space, {"channels": encoder.channels, "features": encoder.features})
            except EncoderError:  # too small an image: the encoder refuses it when built
                extractor, inputs = 0, 0
    widths = [inputs, *actor.hidden_sizes]
    params = sum(a * b for a, b in itertools.pairwise(widths))
    # the MLPs and the CNN extractors or recurrent cores the algorithm keeps (its config says;
    # else the actor's: policy and value, or one shared)
    own = 1 if actor.shared_network else 2
    copies, encoders = config.algorithm.networks or own, config.algorithm.encoders or own
    parts: dict[str, tuple[str, Any, int]] = {"networks": ("actor.hidden_sizes", list(actor.hidden_sizes), params * copies * BYTES_PER_PARAMETER)}
    if extractor and cls is not None:
        key = ("actor.encoder.channels", list(encoder.channels or ())) if "channels" in cls.options else ("actor.encoder.features", encoder.features)
        parts["CNN encoders"] = (*key, extractor * encoders * BYTES_PER_PARAMETER)
    core = actor.recurrent
    if core.type != "none":
        gates = 3 if core.type == "gru" else 4  # per layer: input and hidden weights of each gate, two biases
        core_params = sum(gates * (width * core.hidden_size + core.hidden_size**2 + 2 * core.hidden_size) for width in [widths[-1]] + [core.hidden_size] * (core.num_layers - 1))
        parts["recurrent cores"] = ("actor.recurrent.hidden_size", core.hidden_size, core_params * encoders * BYTES_PER_PARAMETER)
    return parts


#: below this many envs in this process their memory is not counted (measuring a MuJoCo env makes one, ~50 ms)
COUNT_ENVS_FROM = 256
#: a floor on what ale-py allocates per Atari env: measured 0.92 MiB (ale-py 0.12, 256 envs of Pong in
#: its vector env), counted as half that to stay a lower bound
ATARI_ENV_BYTES = 1 << 19


def env_bytes(config: Config) -> dict[str, tuple[str, Any, int]]:
    """The envs' part of :func:`estimate_bytes`: every Atari env holds an emulator and its frames
    (:data:`ATARI_ENV_BYTES`), every MuJoCo env compiles its own model and data (HalfCheetah: 0.5
    MiB, read from one env made here). 65,536 of either are tens of GiB, which ale-py or MuJoCo
    fail to allocate with a fatal error or the kernel's OOM killer rather than a Python exception.
    Other envs, and runs of fewer than :data:`COUNT_ENVS_FROM` envs in this process, count 0."""
    from pytorchrl.envs.atari import is_atari_id

    env = config.env
    count = (env.num_envs if config.scheme.num_col_workers == 0 else 0) + env.num_test_envs  # the envs in this process
    if count < COUNT_ENVS_FROM or ":" in env.env_id:
        return {}
    each, kind = (ATARI_ENV_BYTES, "Atari") if is_atari_id(env.env_id) else (_mujoco_env_bytes(env.env_id, env.env_kwargs), "MuJoCo")
    return {f"{count:,} {kind} envs of {each / (1 << 20):.2f} MiB": ("env.num_envs", env.num_envs, count * each)} if each else {}


def _mujoco_env_bytes(env_id: str, env_kwargs: dict[str, Any]) -> int:
    """The model and data buffers of one MuJoCo env of ``env_id`` (0: not a MuJoCo env)."""
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        return 0  # not registered: VecEnv says so in one line
    if not str(spec.entry_point).startswith("gymnasium.envs.mujoco"):
        return 0
    try:
        probe = gym.make(env_id, **env_kwargs).unwrapped
    except Exception:  # a bad kwarg or a missing dependency: VecEnv reports it in one line when it makes the envs
        return 0
    try:
        return int(probe.model.nbuffer) + int(probe.data.nbuffer)  # type: ignore[attr-defined]
    finally:
        probe.close()


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
