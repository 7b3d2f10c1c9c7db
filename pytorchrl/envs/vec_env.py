"""Vectorized environments with torch tensors at the boundary.

:class:`VecEnv` wraps a gymnasium >= 1.0 vector env (the env's native vector implementation,
``SyncVectorEnv`` or ``AsyncVectorEnv``) and adds seeding, episode statistics and optional
observation normalisation and reward scaling, whose statistics travel in checkpoints.

Autoreset follows gymnasium's default *next-step* mode, which every vector env supports: the
step that ends an episode returns the episode's final observation, and the next ``step`` call
of that env resets it (its action is ignored and its reward is 0). :meth:`VecEnv.step` marks
that reset step ``valid=False``. This is what makes truncation cheap to handle correctly: the
observation following a truncated step *is* the final observation, so its value, computed by
the ordinary acting pass, is the bootstrap value (see :mod:`pytorchrl.agent.storages`).

With ``restart_failed_envs``, an env that raises in ``step`` or ``reset`` is recreated in place
(:class:`~pytorchrl.envs.making.RestartOnError`): its episode is cut as a truncation at the last good observation.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec

from pytorchrl.envs.atari import atari_spaces, is_atari_id, make_atari_env, make_atari_vector_env
from pytorchrl.envs.making import (
    RESTART_INFO_KEY,
    RestartOnError,
    check_env_id,
    check_spaces,
    env_errors,
    info_masks,
    make_single_env,
    make_vector_env,
    resolve_env_fn,
)
from pytorchrl.envs.normalization import ObservationNormalizer, RewardScaler, rebase, set_statistics, take_since
from pytorchrl.envs.rendering import use_headless_gl
from pytorchrl.envs.snapshot import restore, snapshot, snapshot_fits, snapshot_gaps
from pytorchrl.utils.arrays import as_numpy
from pytorchrl.utils.errors import InputError
from pytorchrl.utils.seeding import TEST_ROLE, TRAIN_ROLE, derive_seed
from pytorchrl.utils.spaces import ObsLayout, obs_layout, pack_dict

if TYPE_CHECKING:
    import torch

class VecEnv:
    """A batch of ``num_envs`` environments stepped together, tensors in and out.

    :param env_id: a registered gymnasium id, or ``'module:function'`` returning a gymnasium.Env.
    :param num_envs: number of environments.
    :param seed: the run seed; each env's stream is derived from (seed, role, worker, env index).
    :param worker_index: index of the owning collection worker (0 for the local one).
    :param test: an evaluation env (own seed stream, no reward scaling, frozen normaliser).
    :param vectorization: ``auto`` | ``native`` | ``sync`` | ``async``.
    :param env_kwargs: keyword arguments for the env.
    :param max_episode_steps: override of the time limit.
    :param normalize_obs: running mean/std observation normalisation.
    :param normalize_reward: reward scaling by the running return std.
    :param clip_obs: clip of normalised observations.
    :param clip_reward: clip of scaled rewards.
    :param reward_gamma: discount of the reward scaler's running return.
    :param restart_failed_envs: recreate an env that raises in ``step`` or ``reset`` (not with
        ``native`` vectorization; ``auto`` then means ``sync``). The step that failed is returned
        truncated, with the last good observation, ``valid=False`` and reward 0, and its episode
        is left out of :meth:`pop_episodes`; :meth:`pop_env_restarts` counts the restarts.
    :param action_mask: ``info``: each env is wrapped by :class:`~pytorchrl.envs.masking.InfoActionMask`
        (its mask becomes the ``action_mask`` key of a Dict observation; ``auto`` vectorization
        then means ``sync``); ``obs`` and ``none`` change nothing here.
    :param atari: the ``env.atari`` section as a dict: the preprocessing of ALE ids
        (:mod:`pytorchrl.envs.atari`; ignored for other ids). Episodes in :meth:`pop_episodes`
        are then whole games with their raw score, and training rewards are clipped to their sign.

    Observations leave as :func:`~pytorchrl.utils.spaces.obs_layout` stores them: images as
    ``uint8``, Dict observations packed into one row, Discrete ones as their value.
    """

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        seed: int = 0,
        worker_index: int = 0,
        test: bool = False,
        vectorization: str = "auto",
        env_kwargs: dict | None = None,
        max_episode_steps: int | None = None,
        normalize_obs: bool = False,
        normalize_reward: bool = False,
        clip_obs: float = 10.0,
        clip_reward: float = 10.0,
        reward_gamma: float = 0.99,
        restart_failed_envs: bool = False,
        atari: dict[str, Any] | None = None,
        action_mask: str = "none",
    ) -> None:
        check_env_id(env_id)
        self.env_id = env_id
        self.num_envs = num_envs
        self._atari = atari if atari is not None and is_atari_id(env_id) else None
        self._single_env_args = (dict(env_kwargs or {}), max_episode_steps, action_mask)
        if self._atari is not None:
            self.env = make_atari_vector_env(
                env_id, num_envs, atari=self._atari, vectorization=vectorization, env_kwargs=dict(env_kwargs or {}),
                max_episode_steps=max_episode_steps, wrap=RestartOnError.wrap if restart_failed_envs else None,
            )
        else:
            self.env = make_vector_env(
                env_id, num_envs, vectorization, dict(env_kwargs or {}), max_episode_steps, restart_failed_envs, action_mask
            )
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        check_spaces(env_id, self.observation_space, self.action_space)
        self._episodic_life = bool(self._atari and not test and self._atari["terminal_on_life_loss"])
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._clip_sign = bool(self._atari and not test and self._atari["clip_rewards"])
        self._layout = obs_layout(self.observation_space)
        self._dict_obs = isinstance(self.observation_space, gym.spaces.Dict)
        self._discrete = isinstance(self.action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete))
        self._low = getattr(self.action_space, "low", None)
        self._high = getattr(self.action_space, "high", None)
        role = TEST_ROLE if test else TRAIN_ROLE
        self._seeds = [derive_seed(seed, role, worker_index, i) for i in range(num_envs)]
        self._seed_keys, self._reseeds = (seed, role, worker_index), 0  # see reset_from_state
        self._native = not isinstance(self.env, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv))
        # env state in plain Python attributes can be snapshot; subprocesses and ALE's C++ state cannot
        # envs whose whole state is plain data resume exactly; the others (subprocesses, ALE, a
        # Box2D or MuJoCo simulator: snapshot_gaps) resume from a reset
        self._snapshots = not isinstance(self.env, gym.vector.AsyncVectorEnv) and self._atari is None and not snapshot_gaps(self.env)
        # what the envs were made with: a snapshot holds settings too (a time limit's length), so
        # it goes back only into envs made the same way, not into a resume or evaluation that changed them
        self._made_with = repr((env_id, sorted((env_kwargs or {}).items()), max_episode_steps, action_mask, vectorization))
        if normalize_obs and not (isinstance(self.observation_space, gym.spaces.Box) and not self._layout.is_uint8):
            raise InputError(
                f"env.normalize_obs = true needs a Box observation space of floats; env.env_id = {env_id!r} has "
                f"{self.observation_space} (images are scaled to [0, 1] by the encoder)"
            )
        self.obs_normalizer = ObservationNormalizer(self._layout.shape, clip=clip_obs) if normalize_obs else None
        if self.obs_normalizer is not None and test:
            self.obs_normalizer.frozen = True
        self.reward_scaler = (
            RewardScaler(num_envs, gamma=reward_gamma, clip=clip_reward) if normalize_reward and not test else None
        )
        self._episode_return = np.zeros(num_envs, dtype=np.float64)
        self._episode_length = np.zeros(num_envs, dtype=np.int64)
        self._prev_done = np.zeros(num_envs, dtype=bool)
        self._prev_ends = np.zeros(num_envs, dtype=bool)
        self._finished: list[tuple[int, float, int, bool | None]] = []
        self._seeded = False
        self.env_restarts_total = 0
        self._env_restarts = 0  # since the last pop_env_restarts()

    @property
    def layout(self) -> ObsLayout:
        """How observations are stored and sent (shape and dtype: :func:`~pytorchrl.utils.spaces.obs_layout`)."""
        return self._layout

    @classmethod
    def create_factory(
        cls, env_id: str, *, num_envs: int, seed: int = 0, num_test_envs: int | None = None, **kwargs: Any
    ) -> tuple[Callable[..., VecEnv], gym.Space, gym.Space]:
        """Check the env and return ``(factory, observation_space, action_space)``.

        ``factory(worker_index=0, test=False)`` builds the vector env inside whatever process calls
        it; test envs have ``num_test_envs`` envs (default ``num_envs``) and are made with
        ``eval_env_kwargs`` instead of ``env_kwargs`` when it is given.

        :raises InputError: for an unknown env id or an unsupported space.
        :raises ConfigError: for a keyword this constructor does not take, or a count, seed or
            ``env_kwargs`` of the wrong type or out of range (named as the config's ``env.*`` key).
        """
        num_envs, seed, num_test_envs = _check_factory_arguments(num_envs, seed, num_test_envs, kwargs)
        check_env_id(env_id)
        atari = kwargs.get("atari")
        env_kwargs = dict(kwargs.get("env_kwargs") or {})
        with env_errors(env_id, "env.env_kwargs", env_kwargs):
            if atari is not None and is_atari_id(env_id):
                obs_space, act_space = atari_spaces(env_id, atari, env_kwargs)
            else:
                mask_source = kwargs.get("action_mask", "none")
                probe = make_single_env(env_id, env_kwargs, kwargs.get("max_episode_steps"), mask_source)
                obs_space, act_space = probe.observation_space, probe.action_space
                if mask_source == "info":  # the mask only shows in a reset's info
                    probe.reset(seed=0)
                elif mask_source == "none" and info_masks(probe):
                    warnings.warn(
                        f"env.env_id = {env_id!r} gives its legal actions in info['action_mask'], and env.action_mask = 'none' "
                        "ignores them: the policy may choose illegal actions; set env.action_mask: info to use them",
                        stacklevel=2,
                    )
                probe.close()
        eval_kwargs = kwargs.get("eval_env_kwargs")
        if eval_kwargs is not None and eval_kwargs != env_kwargs and not (atari is not None and is_atari_id(env_id)):
            with env_errors(env_id, "env.eval_env_kwargs", dict(eval_kwargs)):
                make_single_env(env_id, dict(eval_kwargs), None).close()
        check_spaces(env_id, obs_space, act_space)
        # the id's registration goes with the factory: an id registered in this process only (a
        # gym.register in the user's script) is unknown to a remote worker's fresh interpreter
        spec = None if is_atari_id(env_id) or resolve_env_fn(env_id) is not None else gym.registry.get(env_id)
        factory = functools.partial(
            _build_vec_env, cls, env_id, num_envs=num_envs, seed=seed, num_test_envs=num_test_envs or num_envs, spec=spec, **kwargs
        )
        return factory, obs_space, act_space

    # ------------------------------------------------------------------------ stepping

    def reset(self) -> torch.Tensor:
        """Reset every env (seeded with the derived seeds on the first call) and return obs."""
        import torch

        return torch.from_numpy(self.reset_arrays())

    def reset_arrays(self) -> np.ndarray:
        """:meth:`reset` in numpy (a collection worker without torch)."""
        if self._seeded:
            obs, info = self.env.reset()
        else:
            obs, info = self.env.reset(seed=self._reset_seeds())  # type: ignore[arg-type]
            self._seeded = True
        self._count_restarts(info)
        self._episode_return[:] = 0.0
        self._episode_length[:] = 0
        self._prev_done[:] = False
        self._prev_ends[:] = False
        if self.reward_scaler is not None:  # fresh episodes: no discounted return carried into them (as SB3's VecNormalize.reset)
            self.reward_scaler.returns[:] = 0.0
        if self._episodic_life:
            self._lives = np.asarray(info["lives"]).copy()
        return self._obs_array(obs)

    def _reset_seeds(self) -> Any:
        """A native vector env takes one seed; ale-py's a per-env array of 31-bit seeds; the others a list."""
        if self._native and self._atari is not None:
            return np.array([s % 2**31 for s in self._seeds], dtype=np.int64)
        return self._seeds[0] if self._native else self._seeds

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step every env.

        :param actions: a batch of actions, one row per env.
        :return: ``obs, reward, terminated, truncated, valid`` as tensors of length ``num_envs``;
            ``valid`` is False for the reset steps of next-step autoreset (see the module doc).
        """
        import torch

        arrays = self.step_arrays(actions.numpy() if actions.device.type == "cpu" else actions.cpu().numpy())
        return tuple(torch.from_numpy(a) for a in arrays)  # type: ignore[return-value]

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """What the envs are given for the policy's ``actions`` (one env's or a batch): Box
        actions clipped to the space's bounds (a Gaussian policy's samples are not), as
        Stable-Baselines3 does; others as they are."""
        return actions if self._discrete else np.clip(actions, self._low, self._high)

    def step_arrays(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`step` on numpy arrays, for callers that store the results in numpy anyway
        (the collection loop: each tensor round trip costs microseconds per step)."""
        obs, reward, terminated, truncated, info = self.env.step(self.env_actions(actions))
        valid = ~self._prev_done
        restarted = self._count_restarts(info)
        if restarted is not None:  # a failed step is no transition (reset steps can restart too)
            valid &= ~restarted
        ends = terminated | truncated  # of an episode of the statistics: a whole game on Atari
        # steps of the statistics' episode: the valid ones, and on Atari the masked step after a
        # life lost too (a real step of the game; only a game over is followed by a reset step)
        counted = valid | (self._prev_done & ~self._prev_ends)
        if self._episodic_life and "lives" in info:  # a life lost ends the learner's episode; the game goes on
            lives = np.where(info.get("_lives", True), np.asarray(info["lives"]), self._lives)  # an env restarted reports none
            terminated = terminated | (lives < self._lives)
            self._lives = lives
        done = terminated | truncated
        self._episode_return += reward  # raw: Atari rewards are clipped below, after the score
        self._episode_length += counted
        if ends.any():
            ended = np.flatnonzero(ends)
            complete = ended if restarted is None else np.flatnonzero(ends & ~restarted)  # cut ones are partial
            self._finished.extend(
                zip(complete.tolist(), self._episode_return[complete].tolist(), self._episode_length[complete].tolist(), _successes(info, complete))
            )
            self._episode_return[ended] = 0.0
            self._episode_length[ended] = 0
        self._prev_done, self._prev_ends = done, ends
        if self._clip_sign:
            reward = np.sign(reward)
        if self.reward_scaler is not None:
            reward = self.reward_scaler(reward, done, valid)
        return self._obs_array(obs), np.asarray(reward, dtype=np.float32), terminated, truncated, valid

    def _obs_array(self, obs: Any) -> np.ndarray:
        if self._dict_obs:
            return pack_dict(self.observation_space, obs, self.num_envs)  # type: ignore[arg-type]
        if self.obs_normalizer is not None:
            obs = self.obs_normalizer(obs)
        return np.asarray(obs, dtype=self._layout.dtype)

    def _count_restarts(self, info: dict[str, Any]) -> np.ndarray | None:
        """Count the env restarts reported in a vector ``info``; return which envs restarted, if any."""
        counts = info.get(RESTART_INFO_KEY)
        if counts is None:
            return None
        n = int(counts.sum())
        self._env_restarts += n
        self.env_restarts_total += n
        return counts > 0

    def pop_env_restarts(self) -> int:
        """Number of env restarts (``restart_failed_envs``) since the last call."""
        out, self._env_restarts = self._env_restarts, 0
        return out

    def pop_episodes(self) -> list[tuple[int, float, int]]:
        """``(env index, return, length)`` of the episodes finished since the last call, in order.

        Returns are undiscounted and unscaled (the env's own rewards).
        """
        return [(i, ret, length) for i, ret, length, _ in self.pop_episode_outcomes()]

    def pop_episode_outcomes(self) -> list[tuple[int, float, int, bool | None]]:
        """:meth:`pop_episodes` with each episode's ``info["is_success"]`` at its last step (goal
        envs report it; None where the env did not)."""
        out, self._finished = self._finished, []
        return out

    def make_render_env(self) -> gym.Env:
        """One env like these (evaluation's preprocessing: whole games, raw rewards) that renders
        ``rgb_array`` frames, for videos; :meth:`single_obs` turns its observations into a batch."""
        env_kwargs, max_episode_steps, action_mask = self._single_env_args
        use_headless_gl()  # before the env's first renderer: MuJoCo on a machine without a display
        if self._atari is not None:
            return make_atari_env(self.env_id, self._atari, env_kwargs={**env_kwargs, "render_mode": "rgb_array"}, max_episode_steps=max_episode_steps)
        return make_single_env(self.env_id, {**env_kwargs, "render_mode": "rgb_array"}, max_episode_steps, action_mask)

    def single_obs(self, obs: Any) -> torch.Tensor:
        """One env's observation as a batch of one, stored and normalised as :meth:`step` does (frozen statistics)."""
        if self._dict_obs:
            return self.batch_obs({k: np.asarray(v)[None] for k, v in obs.items()})
        return self.batch_obs(np.asarray(obs)[None])

    def batch_obs(self, obs: Any) -> torch.Tensor:
        """A batch of observations of this env (a leading axis; a dict of such arrays for a Dict
        space), stored and normalised as :meth:`step` does (frozen statistics)."""
        import torch

        if self._dict_obs:
            n = len(np.asarray(next(iter(obs.values()))))
            return torch.from_numpy(pack_dict(self.observation_space, {k: np.asarray(v) for k, v in obs.items()}, n))  # type: ignore[arg-type]
        x = np.asarray(obs)
        if self.obs_normalizer is not None:
            x = self.obs_normalizer.normalize(x, update=False)
        return torch.from_numpy(np.asarray(x, dtype=self._layout.dtype))

    # --------------------------------------------------------------------------- state

    def copy_normalization_from(self, other: VecEnv) -> None:
        """Use ``other``'s observation statistics (evaluation envs use the training ones)."""
        if self.obs_normalizer is not None and other.obs_normalizer is not None:
            self.obs_normalizer.rms.load_state_dict(other.obs_normalizer.rms.state_dict())

    def running_statistics(self) -> dict[str, Any]:
        """The normalisers' running statistics, ``obs_rms`` and ``ret_rms`` (empty without
        normalisation): what a collection worker that joins a run mid-way takes from one that
        has collected (:meth:`adopt_statistics`), so that it does not start from fresh ones."""
        return {key: normalizer.rms.state_dict() for key, normalizer in self._normalizers()}

    def adopt_statistics(self, state: dict[str, Any]) -> None:
        """Take another env set's :meth:`running_statistics` (those this one normalises with;
        nothing of them to report as new), or a :meth:`state_dict`'s (with what it had reported)."""
        reported = state.get("reported", {})
        for key, normalizer in self._normalizers():
            if key in state:
                set_statistics(normalizer, state[key], reported=reported.get(key))

    def take_new_statistics(self) -> dict[str, Any]:
        """The moments of what the normalisers took in since the last call, keyed as
        :meth:`running_statistics` (empty without normalisation): what a remote collection worker
        reports with a rollout for its set to merge with the other workers' (ARCHITECTURE.md,
        "Normalisation statistics across workers")."""
        return {key: take_since(normalizer) for key, normalizer in self._normalizers()}

    def adopt_merged_statistics(self, merged: dict[str, Any]) -> None:
        """Normalise with ``merged`` (every worker's statistics, merged by the set) and what these
        envs took in since they last reported (:meth:`take_new_statistics`), which ``merged``
        does not hold yet."""
        for key, normalizer in self._normalizers():
            if key in merged:
                rebase(normalizer, merged[key])

    def _normalizers(self) -> list[tuple[str, ObservationNormalizer | RewardScaler]]:
        """The normalisers, by their key in :meth:`running_statistics`."""
        found: list[tuple[str, ObservationNormalizer | RewardScaler]] = []
        if self.obs_normalizer is not None:
            found.append(("obs_rms", self.obs_normalizer))
        if self.reward_scaler is not None:
            found.append(("ret_rms", self.reward_scaler))
        return found

    def state_dict(self) -> dict[str, Any]:
        """Normaliser statistics and, unless the envs live in subprocesses or in C (Atari), a
        :func:`~pytorchrl.envs.snapshot.snapshot` of the envs themselves (their generators and
        episodes in progress included) with this wrapper's episode bookkeeping; otherwise how
        many times they were reseeded (:meth:`reset_from_state`)."""
        state: dict[str, Any] = {
            "reseeds": self._reseeds, **self.running_statistics(), "reported": {key: dict(n.reported) for key, n in self._normalizers()},
        }
        if self.reward_scaler is not None:
            state["scaler_returns"] = self.reward_scaler.returns.copy()
        if self._snapshots:
            state["snapshot"] = snapshot(self.env)
            state["made_with"] = self._made_with
            state["episodes"] = {
                "return": self._episode_return.copy(),
                "length": self._episode_length.copy(),
                "prev_done": self._prev_done.copy(),
                "seeded": self._seeded,
            }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Take the statistics of :meth:`state_dict` and, where it holds a snapshot of envs made
        the same way (id, kwargs, time limit, vectorization), put the envs back where they were.

        :return: whether the envs were restored; if not, call :meth:`reset_from_state` (a reset
            with fresh seeds).
        """
        self.adopt_statistics(state)  # a checkpoint from before "reported": nothing of it to report as new
        if self.reward_scaler is not None and "ret_rms" in state:
            returns = as_numpy(state.get("scaler_returns", np.zeros(0)))
            if returns.shape == self.reward_scaler.returns.shape:  # else another env.num_envs: the envs start afresh
                self.reward_scaler.returns = returns.copy()
        self._pending_reseeds = int(state.get("reseeds", 0))
        if "snapshot" not in state or not self._snapshots or state.get("made_with", self._made_with) != self._made_with:
            return False
        episodes = state["episodes"]
        if len(as_numpy(episodes["return"])) != self.num_envs:  # a run resumed with another env.num_envs
            return False
        if not snapshot_fits(self.env, state["snapshot"]):  # built otherwise (env.restart_failed_envs changed): start afresh
            return False
        restore(self.env, state["snapshot"])
        self._episode_return, self._episode_length, self._prev_done = (as_numpy(episodes[k]).copy() for k in ("return", "length", "prev_done"))
        self._prev_ends = self._prev_done.copy()  # snapshots are of envs without lives: the same
        self._seeded = bool(episodes["seeded"])
        return True

    def reset_from_state(self) -> torch.Tensor:
        """Reset envs that :meth:`load_state_dict` could not put back (their state is in C or in
        subprocesses) with fresh seeds: derived from the same keys plus the number of such
        resumes, so a resumed run neither replays the streams its start used nor loses
        reproducibility (the same checkpoint resumes the same way)."""
        import torch

        return torch.from_numpy(self.reset_from_state_arrays())

    def reset_from_state_arrays(self) -> np.ndarray:
        """:meth:`reset_from_state` in numpy. The reset's observations are normalised with the
        loaded statistics and not merged into them, so that what was loaded is what the envs
        normalise with (``pytorchrl evaluate`` evaluates with a checkpoint's statistics, as the
        run's own layout does)."""
        self._reseeds = getattr(self, "_pending_reseeds", 0) + 1
        seed, role, worker_index = self._seed_keys
        self._seeds = [derive_seed(seed, role, worker_index, i, self._reseeds) for i in range(self.num_envs)]
        self._seeded = False
        normalizer = self.obs_normalizer
        frozen = normalizer is not None and normalizer.frozen
        if normalizer is not None:
            normalizer.frozen = True
        try:
            return self.reset_arrays()
        finally:
            if normalizer is not None:
                normalizer.frozen = frozen

    def close(self) -> None:
        self.env.close()


def _successes(info: dict[str, Any], envs: np.ndarray) -> list[bool | None]:
    """``info["is_success"]`` of ``envs`` in a vector step's info (None where an env did not report it)."""
    values = info.get("is_success")
    if values is None:
        return [None] * len(envs)
    reported = np.asarray(info.get("_is_success", np.ones(len(values), dtype=bool)))
    return [bool(values[i]) if reported[i] else None for i in envs.tolist()]


def _build_vec_env(
    cls: type[VecEnv], env_id: str, *, num_test_envs: int, num_envs: int, worker_index: int = 0, test: bool = False,
    eval_env_kwargs: dict | None = None, spec: EnvSpec | None = None, **kwargs: Any,
) -> VecEnv:
    if spec is not None and env_id not in gym.registry:  # registered in the driver only (see create_factory)
        gym.registry[env_id] = spec
    if test and eval_env_kwargs is not None:
        kwargs["env_kwargs"] = eval_env_kwargs
    return cls(env_id, num_envs=num_test_envs if test else num_envs, worker_index=worker_index, test=test, **kwargs)




def _check_factory_arguments(num_envs: Any, seed: Any, num_test_envs: Any, kwargs: dict[str, Any]) -> tuple[int, int, int | None]:
    """:meth:`VecEnv.create_factory`'s own arguments, checked as the config's keys are, before an
    env is made (a factory built by hand skips the config's checks; the first env would fail
    deep in gymnasium or numpy). Returns ``num_envs, seed, num_test_envs`` as the checks read
    them (``"2"`` is 2, as in a config)."""
    import dataclasses
    import inspect

    from pytorchrl.config import ConfigError, EnvConfig, RunConfig, check_section

    taken = set(inspect.signature(VecEnv.__init__).parameters) - {"self", "env_id", "num_envs", "seed", "worker_index", "test"}
    unknown = sorted(set(kwargs) - taken - {"eval_env_kwargs"})
    if unknown:
        raise ConfigError(f"VecEnv.create_factory: unknown argument {unknown[0]!r}; allowed: {', '.join(sorted(taken | {'eval_env_kwargs', 'num_test_envs', 'seed'}))}")
    fields = {f.name for f in dataclasses.fields(EnvConfig)}
    simple = {k: v for k, v in kwargs.items() if k in fields and k not in ("atari", "env_id")}
    env = check_section(EnvConfig(num_envs=num_envs, **({} if num_test_envs is None else {"num_test_envs": num_test_envs}), **simple), "env.")
    run = check_section(RunConfig(seed=seed), "run.")
    return env.num_envs, run.seed, None if num_test_envs is None else env.num_test_envs
