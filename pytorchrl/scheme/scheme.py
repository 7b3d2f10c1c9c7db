"""The scheme: collection, gradient and update workers wired from factories, in one place."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from pytorchrl.agent.actors.off_policy import OffPolicyActor, PolicyCriticActor
from pytorchrl.agent.actors.on_policy import OnPolicyActor
from pytorchrl.agent.algorithms import ALGORITHMS, DQN, SAC, SEQUENCE_ALGORITHMS, TD3
from pytorchrl.agent.storages.off_policy.replay_storage import ReplayStorage
from pytorchrl.agent.storages.on_policy.gae_buffer import GAEBuffer
from pytorchrl.agent.storages.on_policy.vtrace_buffer import VTraceBuffer
from pytorchrl.config import OFF_POLICY, Config, ConfigError, DQNConfig, SACConfig, SchemeConfig, TD3Config
from pytorchrl.envs.vec_env import VecEnv
from pytorchrl.scheme.base.ray_runtime import configure_ray
from pytorchrl.scheme.base.worker_set import FaultTolerance, check_fits, cluster_resources
from pytorchrl.scheme.collection.collection_worker_set import CollectionWorkerSet
from pytorchrl.scheme.gradients.gradient_worker_set import GradientWorkerSet
from pytorchrl.scheme.updates.update_worker import UpdateWorker
from pytorchrl.utils.errors import InputError


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
    :raises ConfigError: when the remote workers cannot fit the Ray cluster's resources.
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
    ) -> None:
        self.config = config = config or SchemeConfig()
        col_resources = dataclasses.asdict(config.col_worker_resources)
        grad_resources = dataclasses.asdict(config.grad_worker_resources)
        if config.num_col_workers or config.num_grad_workers:
            configure_ray(address=config.ray.address, num_cpus=config.ray.num_cpus)
            groups = [
                ("gradient worker", config.num_grad_workers, grad_resources),
                ("collection worker", config.num_col_workers * max(config.num_grad_workers, 1), col_resources),
            ]
            need_memory = any(res.get("memory") for _, count, res in groups if count)
            problem = check_fits(groups, *cluster_resources(need_memory=need_memory))
            if problem is not None:
                raise ConfigError(problem)
        fault = FaultTolerance(
            max_restarts=config.max_worker_restarts,
            restart_delay_s=config.worker_restart_delay_s,
            ignore_failures=config.ignore_worker_failures,
            timeout_s=config.worker_timeout_s,
        )
        col_kwargs = {
            "env_factory": env_factory, "actor_factory": actor_factory, "algo_factory": algo_factory,
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
        )
        grad_kwargs = {
            "col_workers_factory": col_workers_factory, "actor_factory": actor_factory, "algo_factory": algo_factory,
            "storage_factory": storage_factory, "device": device, "torch_threads": torch_threads, "seed": seed,
        }
        self.grad_workers = GradientWorkerSet(
            worker_kwargs=grad_kwargs,
            num_workers=config.num_grad_workers,
            communication=config.grad_communication,
            resources=grad_resources,
            collectors_per_worker=max(config.num_col_workers, 1),
            compress=config.compress_data,
            fault=dataclasses.replace(fault, timeout_s=None),
        )
        self.update_worker = UpdateWorker(self.grad_workers, update_execution=config.update_execution)

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
        """
        self._resize("add_collection_workers", num)

    def remove_collection_workers(self, num: int) -> None:
        """Take ``num`` remote collection workers out (per gradient worker when those are
        remote), the newest first; at least one stays. A rollout they have under way is still
        used. Safe from another thread, like :meth:`add_collection_workers`.

        :raises ValueError: when ``num`` would leave no remote collection worker.
        """
        self._resize("remove_collection_workers", num)

    @property
    def num_collection_workers(self) -> int:
        """Remote collection workers, starting ones included (summed over gradient workers)."""
        ws = self.grad_workers.workers
        if ws.remote:
            return sum(ws.call_all("num_collection_workers"))
        return self.collection_workers.num_remote_workers

    def _resize(self, method: str, num: int) -> None:
        ws = self.grad_workers.workers
        if ws.remote:
            ws.call_all(method, num)
        else:
            getattr(ws.local_worker, method)(num)

    def evaluate(self, num_episodes: int) -> list[float]:
        """Deterministic returns of the current policy on the local collection worker's test envs."""
        col = self.collection_workers
        col.local_worker.set_weights(self.algorithm.get_weights(acting=True), self.algorithm.version)
        return col.evaluate(num_episodes)

    def state_dict(self) -> dict[str, Any]:
        return self.update_worker.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.update_worker.load_state_dict(state)

    def close(self) -> None:
        self.grad_workers.close()


def build_scheme(config: Config) -> Scheme:
    """Build every factory from ``config`` (each from its own section) and wire the scheme.

    :raises InputError: for an unknown env id or unsupported spaces.
    """
    env, run, algo = config.env, config.run, config.algorithm
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
    )
    update_every = getattr(algo, "update_every", None)  # replay algorithms: the rollout is the update interval
    rollout = {
        "num_steps": update_every or config.storage.num_steps,
        "num_envs": env.num_envs,
        "obs_shape": obs_space.shape,
        "action_shape": action_space.shape if not isinstance(action_space, gym.spaces.Discrete) else (),
        "discrete": isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)),
    }
    if algo.name in OFF_POLICY:
        actor_factory, storage_factory, algo_factory = _off_policy_factories(config, obs_space, action_space, rollout)
    else:
        actor_factory = OnPolicyActor.create_factory(obs_space, action_space, **dataclasses.asdict(config.actor))
        algo_params = {k: v for k, v in dataclasses.asdict(algo).items() if k != "name"}
        if algo.name in SEQUENCE_ALGORITHMS:  # V-trace: the algorithm computes the targets itself
            storage_factory = VTraceBuffer.create_factory(gamma=algo.gamma, **rollout)
        else:
            storage_factory = GAEBuffer.create_factory(gamma=algo_params.pop("gamma"), gae_lambda=algo_params.pop("gae_lambda"), **rollout)
        algo_factory = ALGORITHMS[algo.name].create_factory(**algo_params)
    return Scheme(
        env_factory=env_factory,
        actor_factory=actor_factory,
        algo_factory=algo_factory,
        storage_factory=storage_factory,
        config=config.scheme,
        device=resolve_device(run.device),
        torch_threads=run.torch_threads,
        seed=run.seed,
    )


def resolve_device(device: str) -> str:
    """``auto`` means CUDA when available."""
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _off_policy_factories(config: Config, obs_space: gym.Space, action_space: gym.Space, rollout: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Actor, replay storage and algorithm factories of a replay config: DQN (``rainbow`` turns
    every component on; noisy nets replace epsilon-greedy exploration), SAC, TD3 or DDPG."""
    algo = config.algorithm
    assert isinstance(algo, (DQNConfig, SACConfig, TD3Config))
    actor_factory: Any
    if isinstance(algo, DQNConfig):
        if not isinstance(action_space, gym.spaces.Discrete):
            raise InputError(f"algorithm.name = {algo.name!r} needs a Discrete action space; env.env_id = {config.env.env_id!r} has {action_space}")
        if algo.rainbow:
            algo = dataclasses.replace(
                algo, double_q=True, dueling=True, n_step=max(algo.n_step, 3), prioritized_replay=True, noisy_nets=True, distributional=True
            )
        actor_factory = OffPolicyActor.create_factory(
            obs_space, action_space, hidden_sizes=tuple(config.actor.hidden_sizes), activation=config.actor.activation,
            dueling=algo.dueling, noisy=algo.noisy_nets, num_atoms=algo.num_atoms if algo.distributional else 1,
            v_min=algo.v_min, v_max=algo.v_max, apex_alpha=algo.apex_epsilon_alpha,
            num_collectors=max(config.scheme.num_col_workers, 1) * max(config.scheme.num_grad_workers, 1),
        )
        explore = (0.0, 0.0) if algo.noisy_nets else (algo.exploration_initial_eps, algo.exploration_final_eps)
        algo_factory = DQN.create_factory(
            lr=algo.lr, minibatch_size=algo.minibatch_size, double_q=algo.double_q, target_update_interval=algo.target_update_interval,
            tau=algo.tau, exploration_fraction=algo.exploration_fraction, exploration_initial_eps=explore[0],
            exploration_final_eps=explore[1], max_grad_norm=algo.max_grad_norm, adam_eps=algo.adam_eps,
        )
        actor_priorities = algo.actor_priorities
    else:
        sac = isinstance(algo, SACConfig)
        discrete = sac and isinstance(action_space, gym.spaces.Discrete)  # discrete SAC
        bounded_box = isinstance(action_space, gym.spaces.Box) and np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()
        if not (bounded_box or discrete):
            allowed = "a bounded Box or a Discrete action space" if sac else "a bounded Box action space"
            raise InputError(f"algorithm.name = {algo.name!r} needs {allowed}; env.env_id = {config.env.env_id!r} has {action_space}")
        policy = "categorical" if discrete else "gaussian" if sac else "deterministic"
        actor_factory = PolicyCriticActor.create_factory(
            obs_space, action_space, policy=policy, num_critics=1 if algo.name == "ddpg" else 2,
            hidden_sizes=tuple(config.actor.hidden_sizes), activation=config.actor.activation,
            exploration_noise=algo.exploration_noise if isinstance(algo, TD3Config) else 0.0,
            ou_noise=(algo.ou_theta, algo.ou_dt) if isinstance(algo, TD3Config) and algo.exploration_noise_type == "ou" else None,
        )
        if isinstance(algo, SACConfig):
            algo_factory = SAC.create_factory(
                lr=algo.lr, minibatch_size=algo.minibatch_size, tau=algo.tau, target_entropy=algo.target_entropy,
                init_ent_coef=algo.init_ent_coef, learn_ent_coef=algo.learn_ent_coef, max_grad_norm=algo.max_grad_norm,
            )
        else:
            algo_factory = TD3.create_factory(
                lr=algo.lr, minibatch_size=algo.minibatch_size, tau=algo.tau, policy_delay=algo.policy_delay,
                target_policy_noise=algo.target_policy_noise, target_noise_clip=algo.target_noise_clip, max_grad_norm=algo.max_grad_norm,
            )
        actor_priorities = False
    storage_factory = ReplayStorage.create_factory(
        capacity=config.storage.capacity, n_step=algo.n_step, gamma=algo.gamma, prioritized=algo.prioritized_replay,
        alpha=algo.per_alpha, beta0=algo.per_beta0, updates_per_step=algo.updates_per_step, start_steps=algo.start_steps,
        checkpoint_buffer=config.storage.checkpoint_buffer, actor_priorities=actor_priorities and algo.prioritized_replay,
        **rollout,
    )
    return actor_factory, storage_factory, algo_factory
