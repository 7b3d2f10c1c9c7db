"""Typed, frozen run configuration loaded from YAML, with dotted CLI overrides.

A config has six sections: ``env``, ``actor``, ``storage``, ``algorithm``, ``scheme``, ``run``.
Each is a frozen dataclass whose fields carry their documentation and constraints in
``metadata`` (see :func:`param`), so that validation, the error messages and the docs come from
one place. ``algorithm.name`` picks the algorithm's own dataclass, a subclass of
:class:`AlgorithmConfig` that lives in the algorithm's module and is found through the registry
(:data:`pytorchrl.agent.algorithms.ALGORITHMS`).

Every bad value raises :class:`ConfigError` with one line naming the key, the value and what
is allowed; the checks live in :mod:`pytorchrl.config_checks`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from pytorchrl.config_checks import bad_choice, build_section, check_across_keys, check_scheme, describe_value, type_hints
from pytorchrl.utils.errors import ConfigError
from pytorchrl.utils.strict_yaml import BadStructure, DuplicateKey, load_yaml, parse_yaml, yaml_problem

__all__ = [
    "ActorConfig",
    "AlgorithmConfig",
    "AtariConfig",
    "Config",
    "ConfigError",
    "EncoderConfig",
    "EnvConfig",
    "HERConfig",
    "InferenceServerConfig",
    "RayConfig",
    "RecurrentConfig",
    "RunConfig",
    "SchemeConfig",
    "StorageConfig",
    "WorkerResources",
    "apply_overrides",
    "config_to_dict",
    "from_dict",
    "load_config",
    "set_values",
]


def param(
    default: Any,
    doc: str,
    *,
    min: float | None = None,
    max: float | None = None,
    min_exclusive: bool = False,
    choices: tuple[Any, ...] | None = None,
    allow_inf: bool = False,
) -> Any:
    """A dataclass field with its documentation and constraints.

    :param default: default value (a dict or list default is copied per instance).
    :param doc: one sentence: what the field means.
    :param min: smallest allowed value (inclusive unless ``min_exclusive``).
    :param max: largest allowed value (inclusive).
    :param choices: the allowed values.
    :param allow_inf: a float key that takes ``.inf`` (meaning "no limit"); every other float must
        be finite (NaN never is allowed: range checks compare false on it).
    """
    meta = {"doc": doc, "min": min, "max": max, "min_exclusive": min_exclusive, "choices": choices, "allow_inf": allow_inf}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class AtariConfig:
    """Preprocessing of ALE (Atari) ids, applied to those only (Mnih et al. 2015; sticky actions
    as in Machado et al. 2018 and the v5 ids). Life-loss episode ends and reward clipping apply
    to training envs; evaluation and progress.csv report raw scores of whole games."""

    frame_skip: int = param(4, "Frames per agent step (the action repeated; the last two frames max-pooled).", min=1, max=16)
    screen_size: int = param(84, "Observations are screen_size x screen_size grey frames.", min=8, max=210)
    noop_max: int = param(
        30, "At most this many no-op actions after a reset (0: none); at most 1,000 (each costs frame_skip emulated frames, in native code that a signal cannot stop).", min=0, max=1_000
    )
    frame_stack: int = param(4, "Frames stacked into one observation (channels first).", min=1, max=16)
    terminal_on_life_loss: bool = param(True, "Training envs: a life lost ends the learner's episode (the game goes on).")
    clip_rewards: bool = param(True, "Training envs: rewards clipped to their sign (scores stay raw).")
    repeat_action_probability: float = param(0.25, "Sticky actions: the previous action is repeated with this probability per frame.", min=0, max=1)
    full_action_space: bool = param(False, "All 18 ALE actions instead of the game's minimal set.")
    max_episode_frames: int = param(
        108_000, "Games are truncated after this many frames (30 minutes of play); at most 10,000,000 (46 hours; ale-py counts in 32 bits).", min=1, max=10_000_000
    )
    num_threads: int = param(
        1, "Threads of ale-py's native vector env (vectorization 'native'/'auto'); more than the cores a worker has oversubscribes them.", min=1, max=256
    )
    fire_reset: bool = param(
        False, "Press FIRE after every reset, for games that wait for it to start (Breakout: without it a new game stands still until the agent fires); "
        "the native vector env presses it for one frame, which a sticky action can swallow, the sync/async wrapper for a whole agent step."
    )


@dataclass(frozen=True)
class EnvConfig:
    """The environments: what to run and how to vectorize and normalise it."""

    env_id: str = param("CartPole-v1", "A registered gymnasium id, or 'module:function' returning a gymnasium.Env.")
    env_kwargs: dict = param({}, "Keyword arguments passed to gymnasium.make or to the env function.")
    eval_env_kwargs: dict | None = param(
        None, "Keyword arguments of the evaluation envs (None: env_kwargs); e.g. {} to evaluate a fault-injection env without faults."
    )
    num_envs: int = param(8, "Environments per collection worker, stepped as one vector env.", min=1, max=65_536)
    vectorization: str = param(
        "auto",
        "How the envs are batched: 'native' (the env's own vector implementation; for ALE ids ale-py's "
        "threaded AtariVectorEnv), 'sync' (SyncVectorEnv), 'async' (subprocesses), or 'auto' (native where it exists, else sync).",
        choices=("auto", "native", "sync", "async"),
    )
    max_episode_steps: int | None = param(
        None, "Override of the env's time limit (episodes are truncated there); at most 100,000,000 (Atari: times frame_skip, it must fit ale-py's 32-bit frame count).",
        min=1, max=100_000_000,
    )
    normalize_obs: bool = param(
        False,
        "Normalise observations by a running mean/std (saved in checkpoints). With a replay buffer the transitions keep the "
        "statistics of when they were collected, as RLlib's filters do (SB3 normalises at sampling).",
    )
    normalize_reward: bool = param(False, "Scale rewards by the running std of the discounted return (a replay buffer keeps them scaled as collected).")
    clip_obs: float = param(10.0, "Clip normalised observations to [-clip_obs, clip_obs] (.inf: no clipping).", min=0, min_exclusive=True, allow_inf=True)
    clip_reward: float = param(10.0, "Clip scaled rewards to [-clip_reward, clip_reward] (.inf: no clipping).", min=0, min_exclusive=True, allow_inf=True)
    reward_gamma: float = param(0.99, "Discount used by reward scaling's running return.", min=0, max=1)
    num_test_envs: int = param(10, "Environments used (vectorized) for deterministic evaluation.", min=1, max=65_536)
    action_mask: str = param(
        "none",
        "Where legal actions come from (Discrete actions): 'info' (info['action_mask'] of reset and step), 'obs' (the 'action_mask' "
        "key of a Dict observation), or 'none'. Illegal actions get a -inf logit / are never the argmax.",
        choices=("none", "info", "obs"),
    )
    restart_failed_envs: bool = param(
        False,
        "Recreate an env that raises in step or reset inside its worker; its episode is cut (not counted in returns) "
        "and counted in env_restarts. Exceptions only: a process exit is a worker failure (see scheme.max_worker_restarts). "
        "Not with vectorization 'native' ('auto' then uses 'sync').",
    )
    atari: AtariConfig = param(AtariConfig(), "Atari preprocessing (ALE ids only).")


@dataclass(frozen=True)
class RecurrentConfig:
    """A recurrent core after the encoder: memory for partially observable tasks. Its state is
    reset where an episode ends and carried across a worker's rollouts."""

    type: str = param("none", "The core: 'gru', 'lstm', or 'none' (a memoryless policy).", choices=("none", "gru", "lstm"))
    hidden_size: int = param(
        128, "Width of the core's state (per layer; an LSTM keeps two such vectors); hidden_size x num_layers is at most 8,192 (a step's work grows with its square).",
        min=1, max=4_096,
    )
    num_layers: int = param(1, "Stacked recurrent layers.", min=1, max=16)


@dataclass(frozen=True)
class EncoderConfig:
    """The feature extractor before the MLP (``actor.encoder``); its image encoders are the
    registry :data:`pytorchrl.agent.actors.networks.encoders.IMAGE_ENCODERS`, each with its own
    options (a key another encoder takes, set here, warns that it does not apply)."""

    type: str = param(
        "auto",
        "'auto' (a CNN, the first image encoder, for image observations, uint8 with 3 dims; the MLP otherwise), 'mlp', or an image encoder: "
        "'nature_cnn' (Mnih et al. 2015), 'impala_resnet' (Espeholt et al. 2018); Dict observations get one per key.",
    )
    channels: tuple[int, ...] | None = param(None, "impala_resnet: channels of its stacks (null: 16, 32, 32); at most 8 stacks of 1,024.")
    features: int | None = param(
        None, "Width of an image encoder's output layer (null: its default, 512 nature_cnn, 256 impala_resnet; 0: none, the flattened convolutions).",
        min=0, max=65_536,
    )
    precision: str = param(
        "float32",
        "What an image encoder computes in: 'float32', or 'bfloat16' (autocast: 1.4-1.6x faster CNN steps on CPUs with "
        "AVX-512 BF16 or AMX and on Ampere+ GPUs; parameters, optimizer state and the heads stay float32).",
        choices=("float32", "bfloat16"),
    )


#: the encoder's old flat keys, read as the nested ``actor.encoder.*`` keys they became
FLAT_ENCODER_KEYS = {"cnn_channels": "channels", "cnn_features": "features", "cnn_precision": "precision"}


@dataclass(frozen=True)
class ActorConfig:
    """The policy (and value) network: an encoder (feature extractor) and heads."""

    encoder: EncoderConfig = param(
        EncoderConfig(), "The feature extractor: a section ({type: impala_resnet, channels: [16, 32, 32]}), or its type alone (encoder: nature_cnn)."
    )
    hidden_sizes: tuple[int, ...] = param(
        (64, 64), "Widths of the MLP after the encoder's extractor (the whole encoder for vector observations); at most 64 layers of 65,536."
    )
    activation: str = param("tanh", "Hidden-layer activation of the MLP.", choices=("tanh", "relu", "elu", "gelu"))
    mlp_precision: str = param(
        "float32",
        "What the hidden layers of the MLPs (after the extractor; the critics' but their output layer; not DQN's "
        "head_hidden_sizes) compute in: 'float32', or 'bfloat16' (2-3.5x faster matrix products on CPUs with AVX-512 BF16 "
        "or AMX; parameters, optimizer state, output layers and losses stay float32).",
        choices=("float32", "bfloat16"),
    )
    shared_network: bool = param(
        False, "One encoder for policy and value (else two); SAC/TD3/DDPG: the policy reads the critics' extractor, detached."
    )
    log_std_init: float = param(0.0, "Initial log standard deviation of Gaussian policies (state independent).")
    ortho_init: bool = param(True, "Orthogonal initialisation (gain sqrt(2) hidden, 0.01 policy, 1 value).")
    recurrent: RecurrentConfig = param(
        RecurrentConfig(), "Recurrent core (GRU/LSTM) after the encoder: PPO, A2C, IMPALA, APPO, DQN and SAC (R2D2-style sequence replay); not TD3/DDPG."
    )


@dataclass(frozen=True)
class HERConfig:
    """Hindsight Experience Replay (Andrychowicz et al. 2017): replayed transitions of a goal env
    (a Dict observation with ``observation``, ``achieved_goal`` and ``desired_goal``) get, with
    probability k / (k + 1), a goal the same episode achieved instead of the one it was given,
    and the env's ``compute_reward`` for it (:mod:`pytorchrl.agent.storages.off_policy.her`)."""

    strategy: str = param(
        "none",
        "Where relabelled goals come from: 'future' (a goal achieved at or after the transition), 'final' (the episode's last), "
        "'episode' (any of the episode's), or 'none' (no relabelling).",
        choices=("none", "future", "final", "episode"),
    )
    k: int = param(4, "Relabelled goals per real one: a sampled transition is relabelled with probability k / (k + 1).", min=1, max=1_000)


@dataclass(frozen=True)
class StorageConfig:
    """The rollouts workers collect, and (off-policy algorithms) the replay buffer they fill."""

    num_steps: int = param(128, "Steps per env in one rollout; a rollout holds num_steps * num_envs transitions.", min=1, max=1_000_000)
    capacity: int = param(100_000, "Off-policy: transitions the replay buffer holds (the oldest are overwritten).", min=1, max=1_000_000_000)
    checkpoint_buffer: bool | None = param(
        None,
        "Off-policy: include the replay buffer in checkpoints (exact resume needs it; a run resumed without it refills it with its policy). "
        "null: included when the observations of the most it holds in the run (capacity, or run.target_steps transitions if fewer) take at most 1 GiB "
        "(vector observations up to about 1M x 268 floats; not Atari frames).",
    )
    sequence_length: int | None = param(
        None,
        "Recurrent policies: steps per training sequence. On-policy: rollouts are cut into chunks of this length, each with its stored "
        "initial state (null: whole rollouts, one sequence per env). DQN/SAC: replayed sequences (R2D2; required), one starting every (sequence_length - burn_in) // 2 steps. "
        "IMPALA/APPO without a recurrent core too: V-trace's unroll length, so minibatches hold more, shorter sequences.",
        min=2,
        max=100_000,
    )
    burn_in: int = param(0, "Recurrent DQN/SAC: first steps of each replayed sequence that only warm up the state (no loss; R2D2).", min=0, max=100_000)
    her: HERConfig = param(HERConfig(), "Off-policy, goal envs: Hindsight Experience Replay of the replay buffer.")


@dataclass(frozen=True)
class AlgorithmConfig:
    """What every algorithm's config holds and answers; each algorithm module subclasses it
    with its hyper-parameters (their defaults written there once) and the checks and facts
    below. ``algorithm.name`` picks the subclass through the registry,
    :data:`pytorchrl.agent.algorithms.ALGORITHMS`, the only list of algorithm names."""

    name: str = param("ppo", "The algorithm: a name in pytorchrl.agent.algorithms.ALGORITHMS.")

    #: it learns from a replay buffer (``storage.capacity`` applies; its buffer's memory is estimated)
    replay: ClassVar[bool] = False
    #: ``storage.sequence_length`` applies without a recurrent core (V-trace unrolls)
    unrolls: ClassVar[bool] = False
    #: ``algorithm.*`` keys a checkpoint fixes (they shape the network: ``evaluate`` and ``train
    #: --resume`` refuse overrides of them, as of :data:`~pytorchrl.config_applicability.TRAINED_KEYS`)
    trained_keys: ClassVar[tuple[str, ...]] = ()
    #: for the memory estimate: MLPs it keeps (None: the actor's, 1 shared or 2) and CNN
    #: extractors or recurrent cores it keeps at least (None: likewise)
    networks: ClassVar[int | None] = None
    encoders: ClassVar[int | None] = None

    def check(self, config: Config) -> None:
        """Checks of this section against the rest of ``config`` (:class:`ConfigError`, one line)."""

    def switched_off(self, config: Config) -> list[tuple[bool, list[str], str]]:
        """Rules ``(applies, keys, why)``: this section's keys (names without ``algorithm.``) that
        its other keys or the run switch off when ``applies`` (see
        :func:`~pytorchrl.config_applicability.inapplicable_keys`)."""
        return []

    def steps_per_round(self, config: Config) -> tuple[str, int]:
        """The steps of every env one round collects, and the key that sets them."""
        return "storage.num_steps", config.storage.num_steps


def _default_algorithm() -> AlgorithmConfig:
    from pytorchrl.agent.algorithms import ALGORITHMS

    return ALGORITHMS["ppo"].config_class()


@dataclass(frozen=True)
class WorkerResources:
    """Ray resources of one remote worker."""

    num_cpus: float = param(1.0, "CPUs reserved per worker.", min=0)
    num_gpus: float = param(0.0, "GPUs reserved per worker.", min=0)
    memory: int | None = param(None, "Bytes of memory reserved per worker (null: no reservation).", min=0)
    resources: dict = param({}, "Custom Ray resources per worker, e.g. {node_a: 1} to pin workers to nodes.")


@dataclass(frozen=True)
class RayConfig:
    """Where remote workers run: an embedded local Ray, or an existing cluster."""

    address: str | None = param(
        None, "Ray cluster to join ('host:port', 'ray://host:port', 'auto'); null: RAY_ADDRESS, else an embedded local Ray; "
        "'local': an embedded local Ray even where RAY_ADDRESS is set.",
    )
    num_cpus: int | None = param(None, "CPUs of the embedded local Ray (null: all of this machine's).", min=1)


@dataclass(frozen=True)
class InferenceServerConfig:
    """Central inference servers (``scheme.inference: central``): Ray actors that batch the
    collection workers' env steps and run the policy (ARCHITECTURE.md, decision 36)."""

    num_servers: int = param(1, "Inference servers; collection worker i acts through server (i - 1) % num_servers.", min=1)
    max_batch_size: int = param(256, "Observation rows that start a batch at once (whole requests, never more rows unless one request has more).", min=1)
    max_wait_ms: float = param(2.0, "The longest the first queued request waits for others, in milliseconds.", min=0)
    num_cpus: float = param(1.0, "CPUs reserved per server.", min=0)
    num_gpus: float | None = param(
        None, "GPUs reserved per server; above 0 the server acts on the GPU Ray gives it, with pinned host buffers "
        "(null: 0.5 / num_servers when run.device is CUDA, on a one-GPU machine the learner's GPU; else 0).", min=0,
    )
    weight_sync_every: int = param(
        1, "Send the servers new weights once the learner is this many policy versions (gradient steps) past theirs, checked after "
        "each round (1: every round).", min=1,
    )
    transport: str = param(
        "auto",
        "How collection workers without torch reach their server: auto (a Unix socket on the server's node, TCP from other nodes), "
        "same_node (the Unix socket on the server's node, Ray calls from others), ray (Ray calls always).",
        choices=("auto", "same_node", "ray"),
    )


@dataclass(frozen=True)
class SchemeConfig:
    """How collection, gradient and update workers are laid out and talk."""

    num_col_workers: int = param(0, "Remote collection workers (0: the local worker collects; Ray is not started for collection).", min=0)
    col_communication: str = param("synchronous", "Collection mode.", choices=("synchronous", "asynchronous"))
    num_grad_workers: int = param(0, "Remote gradient workers (0: gradients computed locally).", min=0)
    grad_communication: str = param("synchronous", "Gradient mode.", choices=("synchronous", "asynchronous"))
    update_execution: str = param("centralised", "Where gradients are applied.", choices=("centralised", "decentralised"))
    max_policy_lag: int | None = param(None, "Drop batches collected more than this many policy versions ago (null: keep all).", min=0)
    fraction_samples: float = param(1.0, "Synchronous collection: stop a round once this fraction of the data arrived.", min=0, max=1, min_exclusive=True)
    fraction_workers: float = param(1.0, "Synchronous collection: stop a round once this fraction of workers answered.", min=0, max=1, min_exclusive=True)
    compress_data: bool = param(False, "lz4-compress rollouts and gradients sent between workers.")
    col_worker_resources: WorkerResources = param(WorkerResources(), "Ray resources of each remote collection worker.")
    grad_worker_resources: WorkerResources = param(WorkerResources(), "Ray resources of each remote gradient worker.")
    max_worker_restarts: int = param(10, "Replacements of dead remote workers allowed in one run.", min=0)
    worker_restart_delay_s: float = param(1.0, "Seconds to wait before replacing a dead worker.", min=0)
    ignore_worker_failures: bool = param(False, "Go on with fewer workers instead of replacing dead ones.")
    worker_timeout_s: float = param(60.0, "A worker that has not answered in this many seconds is treated as dead.", min=0, min_exclusive=True)
    ray: RayConfig = param(RayConfig(), "Ray: embedded or a cluster (only used with remote workers).")
    inference: str = param(
        "local", "Where collection workers' policy runs: 'local' (a copy in each worker) or 'central' (batched on inference servers).",
        choices=("local", "central"),
    )
    inference_server: InferenceServerConfig = param(InferenceServerConfig(), "Central inference servers (scheme.inference: central).")


@dataclass(frozen=True)
class RunConfig:
    """The run: budget, seeds, logging, evaluation, checkpoints, stop conditions."""

    seed: int = param(0, "Run seed; every random stream is derived from it.", min=0, max=2**64 - 1)
    target_steps: int = param(100_000, "Stop after this many environment steps.", min=1)
    log_every: int = param(2_000, "Write a progress.csv / TensorBoard row every this many env steps.", min=1)
    eval_every: int = param(
        4_000, "Evaluate every this many env steps (0: only at the end); an evaluation another would follow before the next row gets a row of its own.", min=0
    )
    eval_episodes: int = param(10, "Episodes per evaluation.", min=1, max=1_000_000)
    eval_deterministic: bool = param(
        True, "Evaluate with the policy's mode (argmax / mean); false samples actions, as rl-zoo does on Atari, where an argmax policy can loop."
    )
    eval_parallel: bool = param(
        False,
        "Evaluate in a Ray actor beside training (RLlib's evaluation_parallel_to_training): the learner trains on while the episodes "
        "of the weights at eval_every run; their result goes into the row logged at those steps. It pays with a core to spare.",
    )
    checkpoint_every: int = param(50_000, "Write a checkpoint every this many env steps (0: only at the end).", min=0)
    keep_checkpoints: int = param(3, "Keep the newest this many checkpoints.", min=1)
    max_time_s: float | None = param(None, "Stop after this many seconds of wall-clock, counted over the whole run: a resumed run's earlier stretches count "
        "(null or .inf: no limit).", min=0, min_exclusive=True, allow_inf=True)
    stop_at_return: float | None = param(
        None, "Stop once an evaluation's mean return reaches this (-.inf: after the first evaluation).", allow_inf=True
    )
    device: str = param("cpu", "Torch device of the learner ('cpu', 'cuda', 'cuda:1', 'auto').")
    torch_threads: int = param(
        1, "torch.set_num_threads of the learner's process, and of each remote worker up to its reserved whole CPUs (small nets run fastest on 1).", min=1, max=1_024
    )
    max_nonfinite_updates: int = param(
        10, "Stop (exit 1) after this many updates in a row with a NaN or infinite gradient; each one is skipped, never applied.", min=1
    )
    prometheus_port: int | None = param(
        None, "Serve live metrics (every progress.csv column and worker health) at http://prometheus_host:PORT/metrics (null: off; 0: any free port).",
        min=0, max=65535,
    )
    prometheus_host: str = param("127.0.0.1", "Interface the Prometheus endpoint binds ('0.0.0.0': reachable from other machines).")


@dataclass(frozen=True)
class Config:
    """A whole run."""

    env: EnvConfig = param(EnvConfig(), "The environments.")
    actor: ActorConfig = param(ActorConfig(), "The policy network.")
    storage: StorageConfig = param(StorageConfig(), "The rollout storage.")
    algorithm: AlgorithmConfig = field(default_factory=_default_algorithm, metadata={"doc": "The algorithm; 'name' picks which."})
    scheme: SchemeConfig = param(SchemeConfig(), "Worker layout and communication.")
    run: RunConfig = param(RunConfig(), "Budget, logging, evaluation, checkpoints.")


# ----------------------------------------------------------------------------------- loading


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config and apply ``key=value`` overrides.

    :param path: the YAML file.
    :param overrides: dotted overrides such as ``algorithm.lr=3e-4`` (values parsed as YAML).
    :raises ConfigError: for a missing or unreadable file, unknown keys or bad values.
    """
    raw = apply_overrides(read_mapping(path, "config file"), overrides)
    config = from_dict(raw)  # first: a misspelt section is named as such
    for section, key in (("env", "env_id"), ("algorithm", "name")):  # a file says what it trains: no default env or algorithm
        if key not in (raw.get(section) or {}):
            raise ConfigError(f"config file {str(path)!r} sets no {section}.{key}: a config names at least its env (env.env_id) and algorithm (algorithm.name)")
    return config


def read_mapping(path: str | Path, what: str) -> dict:
    """:func:`load_yaml` of a file that must hold a mapping of sections (a config, a run's
    ``config.yaml``): an empty file, a list or a scalar is one :class:`ConfigError` line."""
    raw = load_yaml(path, what)
    if raw is None:
        raise ConfigError(f"{what} {str(path)!r} is empty: a config names at least its env (env.env_id) and algorithm (algorithm.name)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{what} {str(path)!r} must hold a mapping of sections, got {type(raw).__name__}")
    return raw


def load_run_config(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = (), *, resume: bool = False) -> Config:
    """The config a run directory was started with (its ``config.yaml``, which the caller has
    checked is there), plus ``overrides``; a bad file or a bad override is one :class:`ConfigError`
    line blaming the one at fault, and so is an override of a key the checkpoint fixes
    (:data:`~pytorchrl.config_applicability.TRAINED_KEYS`; ``resume``: and ``RESUME_KEYS``)."""
    from pytorchrl.config_applicability import check_trained_keys  # it imports this module

    config_path = Path(run_dir) / "config.yaml"
    raw = read_mapping(config_path, "run config file")  # a list, a scalar or an alias loop there: one line
    try:
        trained = from_dict(raw)
    except ConfigError as exc:
        raise ConfigError(f"{config_path}: {exc}") from None
    return check_trained_keys(trained, apply_overrides(raw, overrides), overrides, config_path, resume=resume)


def apply_overrides(raw: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """Return a copy of the nested dict ``raw`` with dotted ``key=value`` overrides applied."""
    if isinstance(overrides, str):  # a lone string would be read as overrides of one character each
        raise ConfigError(f"overrides are a list of 'section.key=value' strings, got the string {overrides!r}: pass [{overrides!r}]")
    out = _deep_copy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        if "" in key.split("."):
            raise ConfigError(f"override {item!r}: the key {key!r} has an empty part; keys look like section.key, e.g. run.seed")
        _set_dotted(out, key, _override_value(item, text), item)
    return out


#: characters that open YAML flow collections and quoted strings: an override that has one and does
#: not parse is a typo (`{a: 1`), not a plain string
_YAML_OPENERS = frozenset("[]{}\"'")


def _override_value(item: str, text: str) -> Any:
    """An override's value, parsed as YAML (strictly, as files are). Text YAML rejects stays the
    string it was meant as (``@host``, ``*x``) unless it has brackets, braces or quotes: then
    it is one :class:`ConfigError` line, not a string the key's type check would blame."""
    try:
        return parse_yaml(text) if text else None
    except DuplicateKey as exc:
        raise ConfigError(f"override {item!r}: key {exc.key!r} is given twice") from None
    except BadStructure as exc:
        raise ConfigError(f"override {item!r}: {exc}") from None
    except yaml.YAMLError as exc:
        if _YAML_OPENERS.isdisjoint(text):
            return text
        raise ConfigError(f"override {item!r} is not valid YAML ({yaml_problem(exc)}); close its brackets, braces and quotes") from None


def set_values(raw: dict, values: dict[str, Any]) -> dict:
    """Return a copy of the nested dict ``raw`` with ``{dotted.key: value}`` set (values as they are)."""
    out = _deep_copy(raw)
    for key, value in values.items():
        _set_dotted(out, key, value, key)
    return out


def _set_dotted(out: dict, key: str, value: Any, what: str) -> None:
    canonical_encoder(out)
    node = out
    parts = _encoder_key(key, value).split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {what!r}: {part!r} is not a section")
    algorithm = out.get("algorithm")
    name = algorithm.get("name", "ppo") if isinstance(algorithm, dict) else "ppo"
    if value is None and _is_section(parts, name):  # null would drop the file's whole section for the defaults (a value: validation's)
        dotted = ".".join(parts)
        raise ConfigError(f"override {what!r}: config key {dotted!r} = null is a section, not a value: set its keys (e.g. {dotted}.KEY=VALUE)")
    node[parts[-1]] = _merged(node.get(parts[-1]), value, parts, name)


def _merged(old: Any, new: Any, path: list[str], algorithm: str) -> Any:
    """What a key at ``path`` holds after an override sets it to ``new``: a mapping given for a
    config section (``algorithm={lr: 1}``, ``algorithm.rnd={features: 32}``) changes the keys it
    names and keeps the others, as dotted overrides of each would; any other value (a
    dict-valued key such as ``env.env_kwargs`` included) replaces the old. An ``algorithm``
    mapping naming another algorithm starts from that algorithm's defaults. ``algorithm``: the
    name of the algorithm whose sections ``algorithm.*`` paths are."""
    if not (isinstance(old, dict) and isinstance(new, dict) and _is_section(path, algorithm)):
        return new
    if path == ["algorithm"] and new.get("name", old.get("name")) != old.get("name"):
        return new
    return {**old, **{k: _merged(old.get(k), v, [*path, str(k)], algorithm) for k, v in new.items()}}


def _is_section(path: list[str], algorithm: str = "ppo") -> bool:
    """Whether the dotted ``path`` names a config section (a dataclass), not a value, in a config
    of ``algorithm`` (its own sections: PPO's ``rnd`` and ``demos``; an unknown name: the keys
    every algorithm has)."""
    from pytorchrl.agent.algorithms import algorithm_class

    cls: Any = Config
    for part in path:
        typ: Any
        if cls is Config and part == "algorithm":
            try:
                found = algorithm_class(algorithm)
            except ConfigError:  # from_dict says so, in its turn
                found = None
            typ = found.config_class if found is not None else AlgorithmConfig
        else:
            typ = type_hints(cls).get(part)
        if not (isinstance(typ, type) and dataclasses.is_dataclass(typ)):
            return False
        cls = typ
    return True


def canonical_encoder(raw: dict) -> dict:
    """``raw`` (changed in place) with the encoder in its nested form: ``actor.encoder: TYPE``
    becomes ``{type: TYPE}``, and the old flat keys ``actor.cnn_channels``, ``cnn_features`` and
    ``cnn_precision`` (still read: old run directories hold them) its ``channels``, ``features``
    and ``precision`` (a null flat key, as old ``config.yaml`` files write it, is dropped).

    :raises ConfigError: a flat key and its nested twin set to different values.
    """
    actor = raw.get("actor")
    if not isinstance(actor, dict):
        return raw
    if isinstance(actor.get("encoder"), str):
        actor["encoder"] = {"type": actor["encoder"]}
    for flat, key in FLAT_ENCODER_KEYS.items():
        if flat not in actor:
            continue
        value = actor.pop(flat)
        section = actor.setdefault("encoder", {})
        if value is None or not isinstance(section, dict):
            continue
        if section.get(key, value) != value:
            raise ConfigError(
                f"config keys 'actor.{flat}' = {value!r} and 'actor.encoder.{key}' = {section[key]!r} disagree: "
                f"set actor.encoder.{key} alone (actor.{flat} is its old name)"
            )
        section[key] = value
    return raw


def _encoder_key(key: str, value: Any) -> str:
    """An override's key in the nested encoder form (``actor.cnn_features`` is
    ``actor.encoder.features``; ``actor.encoder=TYPE`` sets ``actor.encoder.type``)."""
    section, _, name = key.partition(".")
    if section != "actor" or "." in name:
        return key
    if name in FLAT_ENCODER_KEYS:
        return f"actor.encoder.{FLAT_ENCODER_KEYS[name]}"
    return "actor.encoder.type" if name == "encoder" and isinstance(value, str) else key


def from_dict(raw: dict) -> Config:
    """Build and validate a :class:`Config` from a nested dict."""
    if not isinstance(raw, dict):
        raise ConfigError(f"a config is a mapping of sections (run, env, algorithm, ...), got {describe_value(raw)}")
    raw = canonical_encoder(_deep_copy(raw))
    algo = raw.get("algorithm") or {}
    if not isinstance(algo, dict):
        raise ConfigError(f"config key 'algorithm' = {algo!r} is a section, not a value: set its keys (e.g. algorithm.name={algo if isinstance(algo, str) else 'ppo'})")
    from pytorchrl.agent.algorithms import ALGORITHMS, algorithm_class

    name = algo.get("name", "ppo")
    if algorithm_class(name) is None:  # a 'module:Class' outside the package is imported and registered here
        raise ConfigError(f"{bad_choice('algorithm.name', name, tuple(ALGORITHMS))}, or 'module:Class' naming an Algorithm subclass")
    sections = {"algorithm": ALGORITHMS[name].config_class}
    own = {f.name for f in dataclasses.fields(sections["algorithm"])}
    for key in algo:
        takers = [n for n, cls in ALGORITHMS.items() if key not in own and key in {f.name for f in dataclasses.fields(cls.config_class)}]
        if takers:
            raise ConfigError(f"config key 'algorithm.{key}' does not apply to algorithm.name = {name!r}; it is a key of {', '.join(takers)}")
    config = build_section(Config, raw, "", sections)
    check_across_keys(config)
    return config


def checked(config: Config) -> Config:
    """``config`` validated as :func:`from_dict` validates a file's values (its types, ranges,
    choices and the checks across keys): a config built or changed in Python, e.g. with
    ``dataclasses.replace``, skips them otherwise. Returns the config (rebuilt, equal to it).

    :raises ConfigError: one line naming the key at fault, or a value that is not a :class:`Config`.
    """
    if not isinstance(config, Config):
        raise ConfigError(
            f"expected a pytorchrl.config.Config (from load_config or from_dict), got {describe_value(config)}; "
            "a dict goes through from_dict, a YAML file through load_config"
        )
    return from_dict(config_to_dict(config))


def check_section(section: Any, prefix: str) -> Any:
    """One config section built in Python (:class:`RunConfig`, :class:`SchemeConfig`, an
    algorithm's config), with the checks :func:`from_dict` gives its keys in a file; the scheme's
    checks across keys too. Returns the section (rebuilt, equal to it).

    :param prefix: the section's place in a whole config, for messages (``"run."``).
    :raises ConfigError: one line naming the key at fault.
    """
    if not dataclasses.is_dataclass(section) or isinstance(section, type):
        raise ConfigError(f"config section {prefix.rstrip('.')!r} must be a config dataclass, got {describe_value(section)}")
    rebuilt = build_section(type(section), config_to_dict(section), prefix)
    if isinstance(rebuilt, SchemeConfig):
        check_scheme(rebuilt)
    return rebuilt


def config_to_dict(config: Any) -> Any:
    """The config as plain YAML-ready data (tuples become lists)."""
    if dataclasses.is_dataclass(config):
        return {f.name: config_to_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, (tuple, list)):
        return [config_to_dict(v) for v in config]
    if isinstance(config, dict):
        return {k: config_to_dict(v) for k, v in config.items()}
    return config


def _deep_copy(raw: Any) -> Any:
    if isinstance(raw, dict):
        return {k: _deep_copy(v) for k, v in raw.items()}
    if isinstance(raw, list):
        return [_deep_copy(v) for v in raw]
    return raw

