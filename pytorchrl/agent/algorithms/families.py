"""What the algorithms of one family share: the on-policy ones (PPO, A2C, IMPALA, APPO) and the
replay ones (DQN, SAC, TD3, DDPG). Each family has a config base class (its common keys, their
defaults and their checks against the rest of a config) and its wiring (the storage its
algorithms learn from); an algorithm module subclasses the one that fits, or
:class:`~pytorchrl.config.AlgorithmConfig` directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym

from pytorchrl.agent.algorithms.wiring import (
    Wiring,
    action_mask_slice,
    encoder_spec,
    recurrent_spec,
    recurrent_state_size,
    rollout_shapes,
)
from pytorchrl.config import AlgorithmConfig, ConfigError, StorageConfig, param
from pytorchrl.config_checks import check_widths

if TYPE_CHECKING:
    from pytorchrl.config import Config

__all__ = ["DemosConfig", "OnPolicyConfig", "RNDConfig", "ReplayConfig", "actor_critic_wiring", "replay_storage_factory", "rnd_spec"]


@dataclass(frozen=True)
class RNDConfig:
    """Random Network Distillation (Burda et al. 2018), an exploration bonus of the on-policy
    algorithms (:mod:`pytorchrl.agent.actors.rnd`)."""

    enabled: bool = param(False, "Add RND's intrinsic rewards, with their own value head, discount and normalisation.")
    intrinsic_coef: float = param(1.0, "Weight of the intrinsic advantages in the policy's advantage.", min=0)
    extrinsic_coef: float = param(2.0, "Weight of the extrinsic (the env's) advantages in the policy's advantage.", min=0)
    gamma: float = param(0.99, "Discount of the intrinsic returns (non-episodic).", min=0, max=1)
    update_proportion: float = param(0.25, "Share of each minibatch's observations the predictor trains on.", min=0, min_exclusive=True, max=1)
    features: int = param(64, "Width of the target and predictor embeddings (Burda et al.: 512 on Atari).", min=1, max=65_536)
    hidden_sizes: tuple[int, ...] = param((64, 64), "Hidden layers of the target and predictor MLPs (after a Nature CNN on images).")
    obs_clip: float = param(5.0, "Normalised observations are clipped to [-obs_clip, obs_clip] before the RND networks.", min=0, min_exclusive=True)


@dataclass(frozen=True)
class DemosConfig:
    """PPO from demonstrations (PPOD; Libardi et al. 2021): some episodes replay a demonstration
    or one of the agent's best episodes instead of the policy (:mod:`pytorchrl.agent.storages.on_policy.demos`)."""

    enabled: bool = param(False, "Replay demonstrations (and the agent's best episodes) in a share of the episodes.")
    path: str | None = param(
        None, "A demonstration .npz file (written by `pytorchrl evaluate --save-demos`) or a directory of them; relative to the working directory."
    )
    rho: float = param(0.1, "Share of episode starts that replay a demonstration.", min=0, max=1)
    phi: float = param(0.3, "Share of episode starts that replay one of the agent's best episodes (0 until it has one).", min=0, max=1)
    buffer_size: int = param(10, "The agent's best episodes kept for replay, by return (0: none).", min=0, max=10_000)
    min_return: float | None = param(None, "Least return of an agent episode to be kept (null: the lowest return among the demonstrations).")


@dataclass(frozen=True)
class OnPolicyConfig(AlgorithmConfig):
    """Hyper-parameters shared by the on-policy algorithms."""

    lr: float = param(3e-4, "Adam learning rate.", min=0, min_exclusive=True)
    anneal_lr: bool = param(False, "Decay the learning rate linearly towards 0 over run.target_steps, once a round: round k of N trains at 1 - k/N of lr (CleanRL's schedule).")
    gamma: float = param(0.99, "Discount factor.", min=0, max=1)
    gae_lambda: float = param(0.95, "GAE lambda (Schulman et al. 2016); 1 gives Monte-Carlo returns.", min=0, max=1)
    normalize_advantages: bool = param(True, "Normalise advantages per minibatch to zero mean, unit std.")
    ent_coef: float = param(0.0, "Entropy bonus coefficient.", min=0)
    vf_coef: float = param(0.5, "Value loss coefficient.", min=0)
    max_grad_norm: float | None = param(0.5, "Clip the global gradient norm to this (null: no clipping).", min=0, min_exclusive=True)
    adam_eps: float = param(1e-5, "Adam epsilon.", min=0, min_exclusive=True)
    rnd: RNDConfig = param(RNDConfig(), "Random Network Distillation: intrinsic rewards for exploration (PPO, A2C, IMPALA, APPO).")
    demos: DemosConfig = param(DemosConfig(), "PPO from demonstrations (PPOD): demonstrations replayed in a share of the episodes (PPO, A2C, IMPALA, APPO).")

    #: takes RND (its loss adds the predictor's, its round start scores the rollouts)
    takes_rnd: ClassVar[bool] = False
    #: RND's networks are the actor's: a checkpoint fixes whether they exist and their shapes
    trained_keys = ("rnd.enabled", "rnd.features", "rnd.hidden_sizes")

    def check(self, config: Config) -> None:
        """Sequences are cut from one rollout and start from their stored state (no burn-in);
        RND needs an algorithm that takes it and a memoryless actor; demonstrations a path, and
        observations and actions that replay as recorded."""
        self._check_demos(config)
        if self.rnd.enabled:
            if not self.takes_rnd:
                from pytorchrl.agent.algorithms import ALGORITHMS

                takes = ", ".join(name for name, cls in ALGORITHMS.items() if getattr(cls.config_class, "takes_rnd", False))
                raise ConfigError(f"config key 'algorithm.rnd.enabled' = true: algorithm {self.name!r} does not take RND; these do: {takes}")
            if config.actor.recurrent.type != "none":
                raise ConfigError(f"config key 'algorithm.rnd.enabled' = true needs a memoryless actor: actor.recurrent.type is {config.actor.recurrent.type!r}")
            if config.scheme.num_grad_workers > 0:  # the master holds no data: its statistics would overwrite the replicas' every step
                raise ConfigError(
                    f"config key 'algorithm.rnd.enabled' = true needs the local gradient worker: scheme.num_grad_workers is "
                    f"{config.scheme.num_grad_workers}, allowed 0 (RND's running statistics live with the one learner that scores the rollouts)"
                )
            check_widths("algorithm.rnd.hidden_sizes", self.rnd.hidden_sizes)
        storage = config.storage
        length = storage.sequence_length
        if length is not None and length > storage.num_steps:
            raise ConfigError(
                f"config key 'storage.sequence_length' = {length} is longer than the rollout (storage.num_steps = {storage.num_steps}); "
                "sequences are cut from one rollout"
            )
        if storage.burn_in:
            raise ConfigError(
                f"config key 'storage.burn_in' = {storage.burn_in} is for replayed sequences (recurrent DQN/SAC); on-policy sequences start from their stored state"
            )

    def _check_demos(self, config: Config) -> None:
        """A replayed episode is its recorded actions played again, checked against its recorded
        observations: they must be the env's own (no running normalisation) and the env must
        repeat them (no sticky actions). The files themselves are checked by the wiring, which
        knows the env's spaces (:func:`demo_spec`)."""
        demos = self.demos
        if not demos.enabled:
            return
        if demos.path is None:
            raise ConfigError("config key 'algorithm.demos.enabled' = true needs algorithm.demos.path: a demonstration .npz file or a directory of them")
        if demos.rho + demos.phi > 1:
            raise ConfigError(
                f"config keys 'algorithm.demos.rho' = {demos.rho} and 'algorithm.demos.phi' = {demos.phi} add up to more than 1: they are shares of the episode starts"
            )
        if config.env.normalize_obs:
            raise ConfigError(
                "config key 'algorithm.demos.enabled' = true needs env.normalize_obs = false: replayed episodes are checked against the recorded observations"
            )
        # the agent's own episodes are ranked against the demonstrations by return: both must be
        # whole episodes of raw rewards (demonstrations are recorded so, by evaluation's envs)
        if config.env.normalize_reward:
            raise ConfigError(
                "config key 'algorithm.demos.enabled' = true needs env.normalize_reward = false: the agent's episodes are kept by their return, against the demonstrations' raw ones"
            )
        from pytorchrl.envs.atari import is_atari_id

        if is_atari_id(config.env.env_id):
            atari = config.env.atari
            for key, value, why in (
                ("repeat_action_probability", atari.repeat_action_probability, "sticky actions make a replayed episode differ from the recorded one"),
                ("clip_rewards", atari.clip_rewards, "the agent's episodes are kept by their return, against the demonstrations' raw scores"),
                ("terminal_on_life_loss", atari.terminal_on_life_loss, "demonstrations are whole games, and a life's episode starts mid-game"),
            ):
                if value:
                    raise ConfigError(
                        f"config key 'algorithm.demos.enabled' = true needs env.atari.{key} = {0 if key == 'repeat_action_probability' else 'false'} (it is {value}): {why}"
                    )

    def switched_off(self, config: Config) -> list[tuple[bool, list[str], str]]:
        return [(not self.demos.enabled, ["demos"], "algorithm.demos.enabled is false")]


@dataclass(frozen=True)
class ReplayConfig(AlgorithmConfig):
    """Hyper-parameters shared by the algorithms that learn from a replay buffer."""

    replay = True
    encoders = 2  # the online network's extractor (SAC/TD3/DDPG: the critics' shared one) and its target's

    lr: float = param(3e-4, "Adam learning rate.", min=0, min_exclusive=True)
    adam_eps: float = param(1e-8, "Adam epsilon.", min=0, min_exclusive=True)
    gamma: float = param(0.99, "Discount factor.", min=0, max=1)
    minibatch_size: int = param(256, "Transitions per gradient step.", min=1, max=10_000_000)
    update_every: int | None = param(
        None, "Env steps (per env) between rounds of gradient steps; a round makes update_every * num_envs * updates_per_step of them (null: storage.num_steps).", min=1, max=1_000_000
    )
    updates_per_step: float = param(1.0, "Gradient steps per collected transition (the replay ratio).", min=0, min_exclusive=True, max=1_000)
    start_steps: int = param(1000, "Transitions collected before the first gradient step (SAC/TD3/DDPG act uniformly at random until then).", min=0)
    tau: float = param(0.005, "Polyak step of the target networks per update (1: copy).", min=0, max=1, min_exclusive=True)
    n_step: int = param(1, "n-step returns (a Rainbow component for DQN).", min=1, max=10_000)
    prioritized_replay: bool = param(False, "Prioritized replay, proportional over a sum tree (a Rainbow component for DQN).")
    per_alpha: float = param(0.6, "Prioritized replay: priority exponent.", min=0)
    per_beta0: float = param(0.4, "Prioritized replay: initial importance-sampling exponent, annealed to 1.", min=0, max=1)
    max_grad_norm: float | None = param(None, "Clip the global gradient norm to this (null: no clipping).", min=0, min_exclusive=True)
    priority_eta: float = param(
        0.9, "Recurrent DQN/SAC with prioritized replay: a window's priority is eta * max + (1 - eta) * mean of its TD errors (R2D2).", min=0, max=1
    )

    def prioritized(self) -> bool:
        """Whether replay is prioritized (DQN's ``rainbow`` turns it on too)."""
        return self.prioritized_replay

    def returns_n_step(self) -> int:
        """The n of the n-step returns replayed (DQN's ``rainbow`` raises it to 3)."""
        return self.n_step

    def steps_per_round(self, config: Config) -> tuple[str, int]:
        if self.update_every is not None:
            return "algorithm.update_every", self.update_every
        return super().steps_per_round(config)

    def check(self, config: Config) -> None:
        """The warm-up against the first minibatch, the budget and the buffer; replayed sequences."""
        if self.minibatch_size > self.start_steps:
            raise ConfigError(
                f"config key 'algorithm.minibatch_size' = {self.minibatch_size} is larger than algorithm.start_steps = "
                f"{self.start_steps}: the first gradient step would sample more transitions than the buffer holds; "
                "raise start_steps or lower minibatch_size"
            )
        if self.update_every is not None and config.storage.num_steps not in (StorageConfig.num_steps, self.update_every):
            raise ConfigError(
                f"config key 'algorithm.update_every' = {self.update_every} disagrees with storage.num_steps = {config.storage.num_steps}: "
                "both set the steps per round for a replay algorithm; set one of them"
            )
        if self.start_steps > config.run.target_steps:
            raise ConfigError(
                f"config key 'algorithm.start_steps' = {self.start_steps} is larger than run.target_steps = {config.run.target_steps}: "
                "the run would end (or overrun its budget) before its first gradient step; lower start_steps or raise target_steps"
            )
        if self.start_steps > config.storage.capacity:
            raise ConfigError(f"config key 'algorithm.start_steps' = {self.start_steps} is larger than storage.capacity = {config.storage.capacity}")
        self._check_her(config)
        storage = config.storage
        if config.actor.recurrent.type == "none":
            return
        length = storage.sequence_length
        if length is None:
            raise ConfigError(f"config key 'storage.sequence_length' is required for a recurrent {self.name.upper()} (R2D2-style sequence replay); e.g. 40")
        if storage.burn_in >= length:
            raise ConfigError(
                f"config key 'storage.burn_in' = {storage.burn_in} must be below storage.sequence_length = {length} "
                "(the burn-in only warms up the state; the loss needs the steps after it)"
            )
        if length > storage.capacity:
            raise ConfigError(f"config key 'storage.sequence_length' = {length} is larger than storage.capacity = {storage.capacity}")

    def _check_her(self, config: Config) -> None:
        """A relabelled goal changes the reward of every step of an n-step return, and relabelling
        works on single transitions, not on the replayed sequences of a recurrent core."""
        strategy = config.storage.her.strategy
        if strategy == "none":
            return
        n_step = self.returns_n_step()
        if n_step > 1:
            raise ConfigError(
                f"config key 'storage.her.strategy' = {strategy!r} needs 1-step returns: algorithm.n_step is {n_step}"
                f"{' (algorithm.rainbow raises it to 3)' if n_step != self.n_step else ''}; set algorithm.n_step=1 or storage.her.strategy=none"
            )
        if config.env.normalize_reward:
            raise ConfigError(
                f"config key 'storage.her.strategy' = {strategy!r} recomputes a relabelled transition's reward with the env's compute_reward, "
                "unscaled: it does not take env.normalize_reward = true (the replayed rewards would mix two scales); set env.normalize_reward=false"
            )
        if config.actor.recurrent.type != "none":
            raise ConfigError(
                f"config key 'storage.her.strategy' = {strategy!r} relabels single transitions: it does not take a recurrent core "
                f"(actor.recurrent.type = {config.actor.recurrent.type!r}); set actor.recurrent.type=none or storage.her.strategy=none"
            )

    def switched_off(self, config: Config) -> list[tuple[bool, list[str], str]]:
        prioritized = self.prioritized()
        recurrent = config.actor.recurrent.type != "none"
        return [
            (not prioritized, ["per_alpha", "per_beta0", "priority_eta"], "algorithm.prioritized_replay is false"),
            (prioritized and not recurrent, ["priority_eta"], "it weighs the priorities of replayed sequences: actor.recurrent.type is 'none'"),
        ]


def actor_critic_wiring(algorithm_class: Any, config: Config, observation_space: gym.Space, action_space: gym.Space, *, vtrace: bool = False) -> Wiring:
    """The on-policy wiring: an :class:`~pytorchrl.agent.actors.on_policy.OnPolicyActor` and a
    rollout buffer that computes GAE (``gamma`` and ``gae_lambda`` go to it, the storage owns the
    math), or with ``vtrace`` a time-major buffer whose targets the algorithm computes itself."""
    from pytorchrl.agent.actors.on_policy import OnPolicyActor
    from pytorchrl.agent.storages.on_policy.gae_buffer import GAEBuffer
    from pytorchrl.agent.storages.on_policy.vtrace_buffer import VTraceBuffer

    actor, algo = config.actor, config.algorithm
    assert isinstance(algo, OnPolicyConfig)
    actor_factory = OnPolicyActor.create_factory(
        observation_space, action_space, encoder=encoder_spec(actor), shared_network=actor.shared_network,
        log_std_init=actor.log_std_init, ortho_init=actor.ortho_init, recurrent=recurrent_spec(actor),
        action_mask=action_mask_slice(config, observation_space), rnd=rnd_spec(algo.rnd),
    )
    state_size = recurrent_state_size(actor, 1 if actor.shared_network else 2)
    rollout = rollout_shapes(
        config, observation_space, action_space, config.storage.num_steps, state_size=state_size, state_stride=config.storage.sequence_length
    )
    rollout["demos"] = demo_spec(config, action_space, rollout)
    if vtrace:
        storage_factory = VTraceBuffer.create_factory(gamma=algo.gamma, **rollout)
    else:
        storage_factory = GAEBuffer.create_factory(gamma=algo.gamma, gae_lambda=algo.gae_lambda, **rollout)
    return Wiring(actor=actor_factory, storage=storage_factory, algorithm=algorithm_class.create_factory(config=algo))


def rnd_spec(rnd: RNDConfig) -> Any:
    """The ``algorithm.rnd`` section as the actor's :class:`~pytorchrl.agent.actors.rnd.RNDSpec` (None: off)."""
    from pytorchrl.agent.actors.rnd import RNDSpec

    if not rnd.enabled:
        return None
    return RNDSpec(features=rnd.features, hidden_sizes=tuple(rnd.hidden_sizes), gamma=rnd.gamma, obs_clip=rnd.obs_clip)


def demo_spec(config: Config, action_space: gym.Space, rollout: dict[str, Any]) -> Any:
    """The ``algorithm.demos`` section as the storage's :class:`~pytorchrl.agent.storages.on_policy.demos.DemoSpec`
    (None: off), its files read and checked against the env's spaces here, in the driver, so a
    bad one is one line before any worker starts (the workers read them again where they run)."""
    from pytorchrl.agent.storages.on_policy.demos import DemoSpec, load_demos

    demos = config.algorithm.demos  # type: ignore[attr-defined]
    if not demos.enabled:
        return None
    spec = DemoSpec(
        path=str(Path(demos.path).resolve()), rho=demos.rho, phi=demos.phi, buffer_size=demos.buffer_size, min_return=demos.min_return,
        env_id=config.env.env_id, obs_shape=tuple(rollout["obs_shape"]), obs_dtype=rollout["obs_dtype"],
        action_shape=tuple(rollout["action_shape"]), discrete=rollout["discrete"],
        num_actions=int(action_space.n) if isinstance(action_space, gym.spaces.Discrete) else None,
    )
    load_demos(spec)
    return spec


def replay_storage_factory(config: Config, observation_space: gym.Space, action_space: gym.Space, *, actor_priorities: bool = False) -> Callable[..., Any]:
    """The replay storage of a replay algorithm's config: rollouts of ``update_every`` steps in,
    replayed minibatches out; with a recurrent core (``actor.recurrent``), rollouts carry the
    acting state of every step and overlapping windows of ``storage.sequence_length`` come out
    (R2D2; returns are then the algorithm's, computed within each window)."""
    from pytorchrl.agent.storages.off_policy.replay_storage import ReplayStorage
    from pytorchrl.agent.storages.off_policy.sequence_replay import SequenceReplayStorage
    from pytorchrl.utils.memory import checkpoints_buffer

    algo = config.algorithm
    assert isinstance(algo, ReplayConfig)
    rollout = rollout_shapes(config, observation_space, action_space, algo.update_every or config.storage.num_steps, state_size=recurrent_state_size(config.actor))
    common = {
        "capacity": config.storage.capacity, "prioritized": algo.prioritized(), "alpha": algo.per_alpha, "beta0": algo.per_beta0,
        "updates_per_step": algo.updates_per_step, "start_steps": algo.start_steps, "checkpoint_buffer": checkpoints_buffer(config, observation_space),
    }
    if rollout["state_size"]:
        rollout.pop("state_stride")  # every step's state: any step may start a window
        return SequenceReplayStorage.create_factory(sequence_length=config.storage.sequence_length, burn_in=config.storage.burn_in, **common, **rollout)
    return ReplayStorage.create_factory(
        n_step=algo.n_step, gamma=algo.gamma, actor_priorities=actor_priorities and algo.prioritized(),
        relabeller=hindsight_relabeller(config, observation_space), **common, **rollout
    )


def hindsight_relabeller(config: Config, observation_space: gym.Space) -> Any:
    """The ``storage.her`` section as a :class:`~pytorchrl.agent.storages.off_policy.her.HindsightRelabeller`
    (None: ``strategy: none``), checked against the env: its goal keys and its ``compute_reward``."""
    from pytorchrl.agent.storages.off_policy.her import HindsightRelabeller

    her = config.storage.her
    if her.strategy == "none":
        return None
    return HindsightRelabeller.for_env(
        config.env.env_id, config.env.env_kwargs, observation_space, strategy=her.strategy, k=her.k, where="storage.her.strategy"
    )
