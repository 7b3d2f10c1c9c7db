"""The scheme: collection, gradient and update workers wired from factories, in one place."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from pytorchrl.agent.algorithms import ALGORITHMS, wire
from pytorchrl.config import Config, ConfigError, RunConfig, SchemeConfig, check_section
from pytorchrl.config_applicability import warn_inapplicable
from pytorchrl.envs.vec_env import VecEnv
from pytorchrl.scheme.base.inference_servers import InferenceServers, server_resources
from pytorchrl.scheme.base.ray_runtime import configure_ray
from pytorchrl.scheme.base.worker_set import FaultTolerance, busy_resources, check_fits, cluster_resources, no_remote_workers
from pytorchrl.scheme.collection.collection_worker_set import CollectionWorkerSet
from pytorchrl.scheme.gradients.gradient_worker_set import GradientWorkerSet
from pytorchrl.scheme.inference import InferenceServer, policy_spec
from pytorchrl.scheme.updates.update_worker import UpdateWorker
from pytorchrl.utils.errors import InputError
from pytorchrl.utils.memory import check_memory
from pytorchrl.utils.seeding import seed_everything

#: what makes each factory a Scheme takes (for its error line)
_FACTORY_EXAMPLES = {"env": "VecEnv", "actor": "OnPolicyActor", "algo": "PPO", "storage": "GAEBuffer"}


class Scheme:
    """Collection workers feed gradient workers, which feed the update worker.

    :param env_factory: ``(worker_index, test=False, seed=...) -> VecEnv`` (see :meth:`VecEnv.create_factory`;
        ``seed`` overrides its run seed, for replacement workers).
    :param actor_factory: ``(device) -> actor``.
    :param algo_factory: ``(actor, device) -> Algorithm``.
    :param storage_factory: ``(device=...) -> storage``.
    :param config: worker counts, communication modes, resources and fault tolerance.
    :param device: torch device of the learner (gradient and update workers).
    :param torch_threads: ``torch.set_num_threads`` in every worker.
    :param seed: the run seed (of the workers' acting and shuffling streams).
    :param seed_generators: seed Python's, numpy's and torch's global generators from ``seed``
        first, so that two schemes of one seed start from the same weights (the driver's actor is
        initialised from torch's). :func:`build_scheme` passes False: :meth:`Learner.from_config
        <pytorchrl.learner.Learner.from_config>` seeded them before the env was probed.
    :raises ConfigError: for a ``config`` value a config file could not hold, when the remote
        workers cannot fit the Ray cluster's resources, or central inference is asked of an actor
        a shared server cannot serve.
    """

    def __init__(
        self,
        *,
        env_factory: Callable[..., VecEnv],
        actor_factory: Callable[..., Any],
        algo_factory: Callable[..., Any],
        storage_factory: Callable[..., Any],
        config: SchemeConfig | None = None,
        device: str = "cpu",
        torch_threads: int = 1,
        seed: int = 0,
        seed_generators: bool = True,
    ) -> None:
        self.config = config = with_server_gpus(check_section(config or SchemeConfig(), "scheme."), device)  # a section built in Python skips from_dict's checks
        factories = {"env_factory": env_factory, "actor_factory": actor_factory, "algo_factory": algo_factory, "storage_factory": storage_factory}
        for name, factory in factories.items():
            if not callable(factory):
                maker = _FACTORY_EXAMPLES[name.removesuffix("_factory")]
                raise InputError(f"Scheme({name}={factory!r}): {name} must be a callable, e.g. what {maker}.create_factory(...) returns")
        check_section(RunConfig(device=device, torch_threads=torch_threads, seed=seed), "run.")  # the run's keys Scheme takes, checked as in a config
        device = resolve_device(device)  # one this machine has: cuda without a GPU is one line, not torch's assertion
        if seed_generators:
            seed_everything(seed)
        col_resources = dataclasses.asdict(config.col_worker_resources)
        grad_resources = dataclasses.asdict(config.grad_worker_resources)
        if config.inference == "central":  # before Ray starts: refused in a moment, not after Ray's start-up
            _check_servable(actor_factory)
        if config.num_col_workers or config.num_grad_workers:
            configure_ray(address=config.ray.address, num_cpus=config.ray.num_cpus)
            groups = remote_worker_groups(config)
            need_memory = any(res.get("memory") for _, count, res in groups if count)
            problem = check_fits(groups, *cluster_resources(need_memory=need_memory))
            if problem is not None:
                raise ConfigError(problem)
            busy = busy_resources(groups)
            if busy is not None:  # Ray would wait without a word (a second job on a full cluster)
                warnings.warn(busy, stacklevel=2)
        self.inference = _start_inference(config, actor_factory) if config.inference == "central" else None
        self._acting: tuple[int, Any] | None = None  # predict(): the policy version acted with, and its envs
        fault = FaultTolerance(
            max_restarts=config.max_worker_restarts,
            restart_delay_s=config.worker_restart_delay_s,
            ignore_failures=config.ignore_worker_failures,
            timeout_s=config.worker_timeout_s,
        )
        col_kwargs = {
            "env_factory": env_factory, "actor_factory": actor_factory,
            "storage_factory": storage_factory, "torch_threads": torch_threads, "seed": seed,
        }
        col_workers_factory = CollectionWorkerSet.create_factory(
            worker_kwargs=col_kwargs,
            num_workers=config.num_col_workers,
            communication=config.col_communication,
            resources=col_resources,
            max_policy_lag=config.max_policy_lag,
            fraction_samples=config.fraction_samples,
            fraction_workers=config.fraction_workers,
            compress=config.compress_data,
            fault=fault,
            inference=self.inference,
            weight_sync_every=config.inference_server.weight_sync_every,
        )
        grad_kwargs = {
            "col_workers_factory": col_workers_factory, "actor_factory": actor_factory, "algo_factory": algo_factory,
            "storage_factory": storage_factory, "device": device, "torch_threads": torch_threads, "seed": seed,
            # remote replicas: the GPU Ray gives each (it is cuda:0 in its process) when they reserve one, else the CPU;
            # run.device is the learner's, on the driver's node
            "remote_device": "cuda" if grad_resources["num_gpus"] else "cpu",
        }
        try:  # the servers started must not outlive an error in the workers (parts that do not fit)
            self.grad_workers = GradientWorkerSet(
                worker_kwargs=grad_kwargs,
                num_workers=config.num_grad_workers,
                communication=config.grad_communication,
                resources=grad_resources,
                collectors_per_worker=max(config.num_col_workers, 1),
                compress=config.compress_data,
                fault=dataclasses.replace(fault, timeout_s=None),
            )
        except BaseException:
            if self.inference is not None:
                self.inference.close()
            raise
        self.update_worker = UpdateWorker(self.grad_workers, update_execution=config.update_execution)
        if config.num_grad_workers > 0:  # the local gradient worker's envs do not collect: the replicas' statistics
            self.collection_workers.statistics_from = self.grad_workers.normalization_state
        self._closed = False

    @property
    def algorithm(self) -> Any:
        """The master algorithm (weights, optimizer, version)."""
        return self.update_worker.algo

    @property
    def collection_workers(self) -> CollectionWorkerSet:
        """The local gradient worker's collection workers."""
        return self.grad_workers.local_worker.col_workers

    # ------------------------------------------------------------------ elastic workers

    def add_collection_workers(self, num: int) -> None:
        """Start ``num`` more remote collection workers (per gradient worker, when those are
        remote) while training runs; they get the current weights with their first rollout.

        Safe to call from another thread than the one training: it takes effect between two
        collections. New workers join once their processes are up (seconds), without pausing
        the others.

        :raises ValueError: when the scheme has no remote collection workers to add to.
        :raises ConfigError: when the cluster could never place them beside the workers it has
            (one line); those it cannot place now are warned of (they wait until it can).
        """
        self._check_count("add_collection_workers", num)
        self._check_room(num)
        self._resize(num)

    def remove_collection_workers(self, num: int) -> None:
        """Take ``num`` remote collection workers out (per gradient worker when those are
        remote), the newest first; at least one stays. A rollout they have under way is still
        used. Safe from another thread, like :meth:`add_collection_workers`.

        :raises ValueError: when ``num`` would leave no remote collection worker.
        """
        self._check_count("remove_collection_workers", num)
        self._resize(-num)

    @property
    def num_collection_workers(self) -> int:
        """Remote collection workers, starting ones included (summed over gradient workers)."""
        if self.grad_workers.workers.remote:
            return self.grad_workers.num_collection_workers
        return self.collection_workers.num_remote_workers

    def _check_count(self, method: str, num: Any) -> None:
        if self._closed:
            raise RuntimeError(f"Scheme.{method}(): the scheme is closed")
        if not isinstance(num, int) or isinstance(num, bool) or num < 1:
            raise InputError(f"Scheme.{method}({num!r}): the number of workers must be an int >= 1")

    def _check_room(self, num: int) -> None:
        """Refuse ``num`` more collection workers (per gradient worker) that the Ray cluster could
        never place beside those running; warn when it cannot place them now (Ray would wait
        without a word, and the workers never join)."""
        config = self.config
        if not config.num_col_workers:
            return  # no remote set to add to: _resize says so
        added = num * max(config.num_grad_workers, 1)
        resources = dataclasses.asdict(config.col_worker_resources)
        groups = [g for g in remote_worker_groups(config) if g[0] != "collection worker"]
        groups.append(("collection worker", self.num_collection_workers + added, resources))
        problem = check_fits(groups, *cluster_resources(need_memory=bool(resources.get("memory"))), where="add_collection_workers")
        if problem is not None:
            raise ConfigError(problem)
        busy = busy_resources([("collection worker", added, resources)], who=f"the {added} added collection workers")
        if busy is not None:
            warnings.warn(busy, stacklevel=3)

    def _resize(self, num: int) -> None:
        """Add ``num`` remote collection workers (``num`` < 0: take ``-num`` out), per gradient
        worker when those are remote."""
        ws = self.grad_workers.workers
        if not ws.remote and num > 0:
            ws.local_worker.add_collection_workers(num)
        elif not ws.remote:
            ws.local_worker.remove_collection_workers(-num)
        elif not self.config.num_col_workers:  # the replicas' local collection workers collect
            raise no_remote_workers("collection worker", "adding" if num > 0 else "removing")
        else:
            self.grad_workers.resize_collection_workers(num)

    def evaluate(
        self, num_episodes: int, deterministic: bool = True, on_episode: Callable[[list[float]], None] | None = None,
        recorder: Any = None,
    ) -> list[float]:
        """Returns of the current policy on the local collection worker's test envs (``deterministic``:
        acting with the policy's mode; ``on_episode``: called with the returns so far after each
        episode, in this process; ``recorder``: an :class:`~pytorchrl.agent.storages.on_policy.demos.EpisodeRecorder`
        that keeps the episodes)."""
        col = self.collection_workers
        col.local_worker.set_weights(self.algorithm.get_weights(acting=True), self.algorithm.version)
        return col.evaluate(num_episodes, deterministic, on_episode, recorder)

    def start_evaluation(self, num_episodes: int, deterministic: bool = True) -> None:
        """:meth:`evaluate` beside training: the current weights' episodes start on an evaluation
        worker (a Ray actor, made on first use; it reserves no CPU) and this returns at once.
        :meth:`evaluation_ready` says when they are done, :meth:`evaluation_result` waits for
        their ``returns``, ``successes`` and ``duration_s``. One evaluation is under way at a time."""
        configure_ray(address=self.config.ray.address, num_cpus=self.config.ray.num_cpus)  # a scheme without remote workers has not yet
        algo = self.algorithm
        self.collection_workers.start_evaluation(algo.get_weights(acting=True), algo.version, num_episodes, deterministic)

    def evaluation_ready(self) -> bool:
        """Whether the evaluation :meth:`start_evaluation` started is done."""
        return self.collection_workers.evaluation_ready()

    def evaluation_result(self) -> dict[str, Any]:
        """The started evaluation's ``returns``, ``successes`` (goal envs) and ``duration_s``, waiting for it."""
        return self.collection_workers.evaluation_result()

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = True,
    ) -> tuple[np.ndarray, Any]:
        """The current policy's action for one env's observation, or for a batch of them (a
        leading axis), as the env returns them: normalised with the training statistics, acted
        on by the driver's collection worker as in evaluation (``deterministic``: the mode), and
        as evaluation steps its envs with it (Box actions clipped to the space's bounds).

        :param state: a recurrent policy's state, from the previous call (None: a new episode).
        :param episode_start: with ``state``, a bool per row: which rows start a new episode.
        :return: ``(action, state)``: the action (numpy; a batch for a batch) and the new state.
        :raises InputError: an observation of another shape than the env's (or a batch of them).
        """
        algo, col = self.algorithm, self.collection_workers
        if self._acting is None or self._acting[0] != algo.version:  # new weights (and, remote, statistics) once per version
            col.local_worker.set_weights(algo.get_weights(acting=True), algo.version)
            self._acting = (algo.version, col.acting_envs())
        envs = self._acting[1]
        batch, single = as_observation_batch(observation, envs.observation_space)
        policy, obs = col.local_worker.policy, envs.batch_obs(batch)
        state, starts = _predict_state(policy, state, episode_start, deterministic, rows=len(obs))
        with torch.no_grad():
            action, state = policy.evaluation_step(obs, state, starts, deterministic)
        actions = envs.env_actions(action.cpu().numpy())  # what evaluation's envs would be given: within a Box's bounds
        return (actions[0] if single else actions), state

    @property
    def eval_successes(self) -> list[bool]:
        """``info["is_success"]`` of the last :meth:`evaluate`'s episodes, of those that reported it (goal envs)."""
        return self.collection_workers.local_worker.eval_successes

    def state_dict(self) -> dict[str, Any]:
        """The master's algorithm state and every worker's collection state (a checkpoint's ``scheme``)."""
        return self.update_worker.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take back :meth:`state_dict`'s state (workers beyond those in it start afresh)."""
        self.update_worker.load_state_dict(state)
        self._acting = None  # predict() takes the loaded weights and statistics, whatever their version number

    def close(self) -> None:
        """Close the envs and stop the remote workers and inference servers."""
        self._closed = True
        self.grad_workers.close()
        if self.inference is not None:
            self.inference.close()


def _predict_state(policy: Any, state: Any, episode_start: Any, deterministic: Any, *, rows: int) -> tuple[Any, torch.Tensor | None]:
    """``predict``'s ``state`` (numpy taken as well as the tensor a previous call returned) and
    ``episode_start`` as the policy takes them, for ``rows`` observations.

    :raises InputError: a ``deterministic`` that is not a bool; a state given to a memoryless
        policy; a state or ``episode_start`` that does not fit the observations.
    """
    if not isinstance(deterministic, (bool, np.bool_)):
        raise InputError(f"predict: deterministic is True or False, got {deterministic!r}")
    if not getattr(policy, "is_recurrent", False):
        if state is not None:
            raise InputError(f"predict: this policy has no recurrent state: pass state=None (got {type(state).__name__})")
        return None, None  # episode_start means nothing to a memoryless policy (as in Stable-Baselines3)
    width = getattr(getattr(policy, "actor", None), "state_size", None)
    shape = f"{rows} x {width}" if width else f"{rows} rows"
    if state is not None:
        if isinstance(state, np.ndarray):
            state = torch.as_tensor(state, dtype=torch.float32)
        if not isinstance(state, torch.Tensor):
            raise InputError(f"predict: state is the one the previous call returned ({shape} for {rows} observation(s)), got {type(state).__name__}")
        if state.ndim != 2 or state.shape[0] != rows or (width and state.shape[1] != width):
            raise InputError(f"predict: state has shape {tuple(state.shape)}; for {rows} observation(s) this policy's state is {shape}")
    if episode_start is None:
        return state, None
    starts = np.asarray(episode_start)
    if starts.dtype != bool and not (np.issubdtype(starts.dtype, np.integer) and np.isin(starts, (0, 1)).all()):
        raise InputError(f"predict: episode_start is a bool per observation, got {episode_start!r}")
    if starts.size != rows:
        raise InputError(f"predict: episode_start has {starts.size} values for {rows} observation(s)")
    return state, torch.as_tensor(starts.astype(bool).reshape(-1))


def as_observation_batch(observation: Any, space: gym.Space) -> tuple[Any, bool]:
    """``(batch, single)``: ``observation`` as a batch (a leading axis added to one env's
    observation) and whether it was one env's.

    :raises InputError: when it is neither one observation of ``space`` nor a batch of them.
    """
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(observation, dict) or set(observation) != set(space.spaces):
            raise InputError(f"predict: a Dict space's observation is a dict with keys {sorted(space.spaces)}, got {type(observation).__name__}")
        for key, sub in space.spaces.items():
            _check_dtype(observation[key], sub, f"key {key!r}")
        shapes = {k: np.shape(v) for k, v in observation.items()}
        if all(shapes[k] == sub.shape for k, sub in space.spaces.items()):
            return {k: np.asarray(v)[None] for k, v in observation.items()}, True
        if all(shapes[k][1:] == sub.shape for k, sub in space.spaces.items()) and len({s[0] for s in shapes.values()}) == 1 and min(s[0] for s in shapes.values()) > 0:
            return observation, False
        raise InputError(f"predict: observation shapes {shapes} fit neither the env's {({k: v.shape for k, v in space.spaces.items()})} nor a batch of them")
    _check_dtype(observation, space, "")
    array = np.asarray(observation)
    if array.shape == space.shape:
        return array[None], True
    if array.shape[1:] == space.shape and array.shape[0] > 0:
        return array, False
    raise InputError(f"predict: an observation of shape {array.shape}; the env's observations have shape {space.shape} (or N x that, a batch)")


def _check_dtype(observation: Any, space: gym.Space, where: str) -> None:
    """Refuse float values for an integer space (an image of uint8 frames given as floats in [0,
    1] would be cast to zeros and acted on without a word)."""
    if not isinstance(space, gym.spaces.Box) or not np.issubdtype(space.dtype, np.integer):
        return
    array = np.asarray(observation)
    if np.issubdtype(array.dtype, np.floating) and array.size and not np.array_equal(array, np.round(array)):
        raise InputError(
            f"predict: the observation{' ' + where if where else ''} holds fractional values, and the env's observations are "
            f"{space.dtype} (e.g. image frames in 0-255): pass them as the env gives them"
        )


def _start_inference(config: SchemeConfig, actor_factory: Callable[..., Any]) -> InferenceServers:
    """The central inference servers: their policy on the GPU Ray gives them when they reserve
    one (``cuda``: Ray makes it the only one they see, whichever index the learner uses), else on the CPU."""
    server = config.inference_server
    server_factory = functools.partial(
        InferenceServer, actor_factory, device="cuda" if server.num_gpus else "cpu",
        max_batch_size=server.max_batch_size, max_wait_ms=server.max_wait_ms,
        score_while_acting=config.col_communication == "asynchronous",  # weights change under a rollout in progress
    )
    return InferenceServers(
        server_factory, num_servers=server.num_servers, num_clients=config.num_col_workers,
        resources=server_resources(server.num_cpus, server.num_gpus or 0.0), timeout_s=config.worker_timeout_s,
        max_restarts=config.max_worker_restarts, transport=server.transport,
    )


def _check_servable(actor_factory: Callable[..., Any]) -> None:
    """:raises ConfigError: for an actor whose exploration a shared server cannot reproduce
    (noisy nets, Ornstein-Uhlenbeck noise: :func:`~pytorchrl.scheme.inference.policy_spec`)."""
    import torch

    try:
        with torch.random.fork_rng(devices=[]):  # the probe must not shift the master actor's initialisation
            policy_spec(actor_factory(torch.device("cpu")))
    except ValueError as error:
        raise ConfigError(f"config key 'scheme.inference' = 'central' cannot serve this actor: {error}; use inference 'local'") from None


def with_server_gpus(config: SchemeConfig, device: str) -> SchemeConfig:
    """``config`` with ``inference_server.num_gpus`` null resolved: with central inference and a
    learner on CUDA, the servers reserve half a GPU between them (Ray counts nothing for the
    learner in the driver; on a one-GPU machine it is the learner's), so ``run.device: cuda``
    puts them on a GPU too; else 0 (on the CPU). ``device`` may be ``run.device`` unresolved (``auto``)."""
    server = config.inference_server
    if server.num_gpus is not None:
        return config
    cuda = (resolve_device(device) if device == "auto" else device).startswith("cuda")
    gpus = 0.5 / server.num_servers if config.inference == "central" and cuda else 0.0
    return dataclasses.replace(config, inference_server=dataclasses.replace(server, num_gpus=gpus))


def remote_worker_groups(config: SchemeConfig) -> list[tuple[str, int, dict[str, Any]]]:
    """``(name, count, resources)`` of a scheme's remote workers: its gradient workers, then its
    collection workers (``num_col_workers`` per gradient worker, or in all without any), then its
    central inference servers (``inference_server.num_gpus`` resolved by :func:`with_server_gpus`;
    null counts as 0)."""
    server = config.inference_server
    return [
        ("gradient worker", config.num_grad_workers, dataclasses.asdict(config.grad_worker_resources)),
        ("collection worker", config.num_col_workers * max(config.num_grad_workers, 1), dataclasses.asdict(config.col_worker_resources)),
        ("inference server", server.num_servers if config.inference == "central" else 0, server_resources(server.num_cpus, server.num_gpus or 0.0)),
    ]


def build_scheme(config: Config) -> Scheme:
    """Build every factory from ``config`` (each from its own section) and wire the scheme: the
    env's, then the algorithm's own wiring (``algorithm.name`` looked up in the registry).

    :raises InputError: for an unknown env id or unsupported spaces.
    """
    env, run = config.env, config.run
    device = resolve_device(run.device)  # first: a device this machine lacks fails before any env is made
    env_factory, obs_space, action_space = VecEnv.create_factory(
        env.env_id,
        num_envs=env.num_envs,
        seed=run.seed,
        num_test_envs=env.num_test_envs,
        vectorization=env.vectorization,
        env_kwargs=env.env_kwargs,
        eval_env_kwargs=env.eval_env_kwargs,
        max_episode_steps=env.max_episode_steps,
        normalize_obs=env.normalize_obs,
        normalize_reward=env.normalize_reward,
        clip_obs=env.clip_obs,
        clip_reward=env.clip_reward,
        reward_gamma=env.reward_gamma,
        restart_failed_envs=env.restart_failed_envs,
        atari=dataclasses.asdict(env.atari),
        action_mask=env.action_mask,
    )
    check_memory(config, obs_space)  # before the driver builds the encoder once (wire) or any worker allocates
    wiring = wire(ALGORITHMS[config.algorithm.name], config, obs_space, action_space)
    if config.scheme.inference == "central":
        _check_servable(wiring.actor)  # a refusal before the warning on keys it would ignore
    warn_inapplicable(config, obs_space)  # once per run, after the checks that refuse it: the keys set that it will not use
    return Scheme(
        env_factory=env_factory,
        actor_factory=wiring.actor,
        algo_factory=wiring.algorithm,
        storage_factory=wiring.storage,
        config=config.scheme,
        device=device,
        torch_threads=run.torch_threads,
        seed=run.seed,
        seed_generators=False,
    )


def resolve_device(device: str) -> str:
    """``auto`` means CUDA when available; any other device must exist on this machine.

    :raises ConfigError: naming ``run.device`` and the devices this machine has.
    """
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    available = available_devices()
    kind, _, index = device.partition(":")
    if device in available or (kind == "cuda" and not index and torch.cuda.is_available()):
        return device
    raise ConfigError(f"config key 'run.device' = {device!r} is not a device of this machine; it has: {', '.join([*available, 'auto'])}")


def available_devices() -> list[str]:
    """The torch devices of this machine: ``cpu``, each ``cuda:N``, and ``mps`` where it works."""
    import torch

    devices = ["cpu", *(f"cuda:{i}" for i in range(torch.cuda.device_count()))]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        devices.append("mps")
    return devices
