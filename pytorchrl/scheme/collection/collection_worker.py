"""The collection worker: steps its envs with its acting policy and fills its storage."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from pytorchrl.agent.contracts import ActingPolicy, ActionSlots, CollectionStorage
from pytorchrl.agent.policy import LocalPolicy
from pytorchrl.agent.storages.on_policy.demos import EpisodeRecorder
from pytorchrl.envs.vec_env import VecEnv
from pytorchrl.scheme.collection.thin_worker import TrainEnvStatistics, rollout_info
from pytorchrl.utils.runtime import configure_process
from pytorchrl.utils.seeding import ACTING_ROLE, EVALUATION_ROLE, TorchStream, derive_seed


class CollectionWorker(TrainEnvStatistics):
    """Owns a train :class:`VecEnv`, a test VecEnv (made on first evaluation), an
    :class:`~pytorchrl.agent.contracts.ActingPolicy` and a
    :class:`~pytorchrl.agent.contracts.CollectionStorage`; no algorithm. A plain class: worker
    sets make it remote.

    :param index: collector index: part of every env seed and of the acting stream's seed, so
        the same index collects the same data in a local or a remote worker.
    :param env_factory: ``env_factory(worker_index, test=False, seed=...) -> VecEnv`` (``seed``:
        the run seed the env streams derive from, when not the factory's own).
    :param actor_factory: ``actor_factory(device) -> actor``, acted with by a
        :class:`~pytorchrl.agent.policy.LocalPolicy`.
    :param policy_factory: ``policy_factory(index) -> ActingPolicy`` instead (central inference:
        a :class:`~pytorchrl.scheme.inference.client.RemotePolicy`; the worker then builds no actor
        and holds no network).
    :param storage_factory: ``storage_factory(device=...) -> storage``.
    :param collect: build train envs and collect (a local worker beside remote ones only holds weights).
    :param device: torch device for acting.
    :param torch_threads: ``torch.set_num_threads`` for this process.
    :param seed: the run seed (of the acting stream, whose key is ``index``).
    :param env_seed: the run seed of the train envs' streams (None: the env factory's own); a
        replacement worker gets a fresh one.
    """

    def __init__(
        self,
        index: int,
        *,
        env_factory: Callable[..., VecEnv],
        actor_factory: Callable[..., Any],
        storage_factory: Callable[..., Any],
        collect: bool = True,
        device: str = "cpu",
        torch_threads: int = 1,
        seed: int = 0,
        env_seed: int | None = None,
        policy_factory: Callable[[int], ActingPolicy] | None = None,
    ) -> None:
        configure_process(torch_threads)
        self.index = index
        self._stream = TorchStream(derive_seed(seed, ACTING_ROLE, index))
        # sampled evaluation draws from a stream of its own: evaluating never moves the training
        # streams, and one evaluation of the same weights draws the same numbers in any process
        self._eval_stream = TorchStream(derive_seed(seed, EVALUATION_ROLE, index))
        self._preempted: int | None = None
        self.device = torch.device(device)
        self.env_factory = env_factory
        self.policy: ActingPolicy = policy_factory(index) if policy_factory is not None else self._local_policy(actor_factory)
        seeded = {} if env_seed is None else {"seed": env_seed}
        self.envs = env_factory(worker_index=index, **seeded) if collect else None
        self.storage: CollectionStorage | None = storage_factory(device=self.device) if collect else None
        check_fits = getattr(self.storage, "check_fits", None)
        if check_fits is not None:  # a hand-built storage factory made for other envs: one line now, not numpy's error later
            check_fits(self.envs)
        actor = getattr(self.policy, "actor", None)
        if actor is not None and self.envs is not None:  # the same for a hand-built actor factory
            check_actor_fits(actor, self.envs)
        wrap_policy = getattr(self.storage, "wrap_policy", None)
        if wrap_policy is not None:  # demonstrations (PPOD): the storage chooses the actions of envs that replay one
            self.policy = wrap_policy(self.policy)
        if self.storage is not None and hasattr(self.storage, "stream_id"):
            # replay storages key their envs' observation streams by it: unique per worker and generation
            self.storage.stream_id = derive_seed(seed, ACTING_ROLE, index)
        self.test_envs: VecEnv | None = None
        #: ``info["is_success"]`` of the last :meth:`evaluate`'s episodes, of those that reported it (goal envs)
        self.eval_successes: list[bool] = []
        self._started = False

    def _local_policy(self, actor_factory: Callable[..., Any]) -> LocalPolicy:
        actor = actor_factory(self.device)
        set_collector = getattr(actor, "set_collector", None)
        if set_collector is not None:  # e.g. Ape-X: each collector explores at its own rate
            set_collector(self.index)
        return LocalPolicy(actor)

    # ---------------------------------------------------------------------- collection

    def collect_data(
        self, weights: dict[str, torch.Tensor] | None = None, version: int | None = None, round_id: int | None = None,
        statistics: dict[str, Any] | None = None,
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Step the envs until the storage holds one rollout; return it with its info.

        :param weights: act with these weights of policy ``version`` (None: the current ones).
        :param round_id: the collection round; :meth:`preempt` with the same id ends the rollout
            early (after at least one step), and the shorter rollout is returned.
        :param statistics: normalise with these normaliser statistics, the set's merge of every
            worker's (:meth:`VecEnv.adopt_merged_statistics <pytorchrl.envs.vec_env.VecEnv.adopt_merged_statistics>`;
            empty: none merged yet), and report what the normalisers take in; None (a local
            worker, the only one collecting): go on with the envs' own, reporting nothing.
        :return: ``data, info``; info: ``env_steps``, ``episode_returns``, ``episode_lengths``,
            ``policy_version`` (the oldest weights that chose one of its actions: through an
            inference server they can change within a rollout), ``collect_time_s``, ``worker_index``, ``preempted``,
            ``env_restarts`` (envs recreated, ``env.restart_failed_envs``), and with
            normalisation and ``statistics`` given ``new_statistics`` (what the normalisers took
            in during the rollout).
        """
        if self.envs is None or self.storage is None:
            raise RuntimeError(f"collection worker {self.index} was built without envs (collect=False)")
        if statistics:
            self.envs.adopt_merged_statistics(statistics)
        if weights is not None:
            self.set_weights(weights, version if version is not None else self.policy.version)
        start = time.perf_counter()
        envs, storage, policy = self.envs, self.storage, self.policy
        if not self._started:
            storage.reset(envs.reset())
            self._started = True
        preempted = False
        with torch.inference_mode(), self._stream.active():
            # per step only the policy half acts; scoring the rollout afterwards adds the values
            # and log-probabilities in big batches (ARCHITECTURE.md, "The acting loop")
            noise = policy.draw_noise(storage.num_steps, envs.num_envs).unbind(0)
            scored = storage.needs_scoring and policy.scores_while_acting
            recurrent = policy.is_recurrent
            oldest: int | None = None  # the oldest weights that chose an action: policy lag counts from them
            for step, obs, action in storage.acting_slots():
                slots = ActionSlots(action, *storage.scoring_rows(step)) if scored else ActionSlots(action)
                acted = policy.act(obs, noise[step], slots, storage.recurrent_state(step) if recurrent else None)
                oldest = acted.version if oldest is None else min(oldest, acted.version)
                next_obs, reward, terminated, truncated, valid = envs.step_arrays(action.numpy())
                storage.insert(reward=reward, terminated=terminated, truncated=truncated, valid=valid, next_obs=next_obs, next_state=acted.state)
                if round_id is not None and self._preempted == round_id:
                    preempted = not storage.full
                    break
            if storage.needs_scoring:
                score = policy.score_sequence if recurrent else policy.score
                storage.score(score, from_step=storage.step if scored else 0)
        data = storage.get_data()
        return data, rollout_info(
            envs, env_steps=int(data["rewards"].numel()), version=self.policy.version if oldest is None else oldest, start=start, index=self.index, preempted=preempted,
            report_statistics=statistics is not None,
        )

    def preempt(self, round_id: int) -> None:
        """End round ``round_id``'s rollout early (called while :meth:`collect_data` runs)."""
        self._preempted = round_id

    def evaluate(
        self, num_episodes: int, deterministic: bool = True, on_episode: Callable[[list[float]], None] | None = None,
        recorder: EpisodeRecorder | None = None,
    ) -> list[float]:
        """Returns of ``num_episodes`` episodes on the test envs.

        Each test env contributes a fixed share of the episodes, so that short episodes do not
        crowd out long ones (the bias of "take the first N that finish").

        :param on_episode: called with the returns so far after each counted episode (a progress
            line: an Atari evaluation can take minutes).
        :param recorder: keeps the counted episodes' observations, actions and rewards
            (``evaluate --save-demos``).

        The episodes' ``info["is_success"]`` (goal envs) go to :attr:`eval_successes`.
        """
        envs = self._made_test_envs()
        if self.envs is not None:
            envs.copy_normalization_from(self.envs)
        quota = np.array([(num_episodes + i) // envs.num_envs for i in range(envs.num_envs)][::-1])
        returns: list[float] = []
        self.eval_successes = []
        obs = envs.reset()
        envs.pop_episodes()
        if recorder is not None:
            recorder.reset(obs)
        rhs, starts = None, None  # a recurrent actor's state, and where episodes start
        with torch.no_grad(), self._eval_stream.active():
            while quota.any():
                action, rhs = self.policy.evaluation_step(obs, rhs, starts, deterministic)
                obs, reward, terminated, truncated, valid = envs.step(action)
                if recorder is not None:
                    recorder.step(action, obs, reward, terminated | truncated, valid)
                starts = ~valid  # after a reset step, a new episode starts at obs
                for i, ret, _, success in envs.pop_episode_outcomes():
                    if quota[i] > 0:
                        quota[i] -= 1
                        returns.append(ret)
                        if success is not None:
                            self.eval_successes.append(success)
                        if recorder is not None:
                            recorder.keep(i)
                        if on_episode is not None:
                            on_episode(returns)
        return returns

    def evaluation(
        self, weights: dict[str, torch.Tensor], version: int, normalization: dict[str, Any] | None, num_episodes: int, deterministic: bool,
    ) -> dict[str, Any]:
        """:meth:`evaluate` of ``weights`` (policy ``version``) with the observation statistics
        ``normalization`` (None: the worker's own), in one call: what an evaluation worker beside
        training (``run.eval_parallel``) is asked. Returns ``returns``, ``successes`` and
        ``duration_s``."""
        start = time.perf_counter()
        self.set_weights(weights, version)
        self.load_normalization(normalization)
        returns = self.evaluate(num_episodes, deterministic)
        return {"returns": returns, "successes": list(self.eval_successes), "duration_s": time.perf_counter() - start}

    # ------------------------------------------------------------------------ weights

    def set_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.policy.set_weights(weights, version)

    def get_weights(self) -> dict[str, torch.Tensor]:
        return self.policy.get_weights()

    # -------------------------------------------------------------------------- state

    def acting_envs(self) -> VecEnv:
        """The envs whose observation statistics this worker acts with outside its rollouts
        (:meth:`~pytorchrl.learner.Learner.predict`): its train envs, or without them its test
        envs (given a collecting worker's statistics by :meth:`load_normalization`)."""
        return self.envs if self.envs is not None else self._made_test_envs()

    def load_normalization(self, state: dict[str, Any] | None) -> None:
        """Evaluate with another worker's observation statistics (see :meth:`normalization_state`)."""
        if state is None:
            return
        envs = self._made_test_envs()
        if envs.obs_normalizer is not None:
            envs.obs_normalizer.rms.load_state_dict(state)

    def _made_test_envs(self) -> VecEnv:
        """The test envs, made on first use (a worker that only collects never makes them)."""
        if self.test_envs is None:
            self.test_envs = self.env_factory(worker_index=self.index, test=True)
        return self.test_envs

    def state_dict(self) -> dict[str, Any]:
        """Env statistics, random streams and, where the envs allow it, the envs themselves and
        the observation the next rollout starts from: taken between rollouts, it resumes exactly."""
        state: dict[str, Any] = {"acting_rng": self._stream.state, "eval_rng": self._eval_stream.state}
        if self.envs is not None and self._started:
            state["envs"] = self.envs.state_dict()
            assert self.storage is not None
            state["storage"] = self.storage.state_dict()
        if self.test_envs is not None:
            state["test_envs"] = self.test_envs.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "acting_rng" in state:
            self._stream.state = state["acting_rng"]
        if "eval_rng" in state:
            self._eval_stream.state = state["eval_rng"]
        if self.envs is not None and "envs" in state:
            assert self.storage is not None
            if self.envs.load_state_dict(state["envs"]) and "storage" in state:
                self.storage.load_state_dict(state["storage"])  # the episodes go on where they were
            else:
                self.storage.reset(self.envs.reset_from_state())
                load_lasting = getattr(self.storage, "load_lasting_state", None)
                if load_lasting is not None and "storage" in state:  # PPOD's best episodes outlive the episodes in progress
                    load_lasting(state["storage"])
            self._started = True
        if "test_envs" in state:
            test_envs = self._made_test_envs()
            if not test_envs.load_state_dict(state["test_envs"]):
                test_envs.reset_from_state()

    def close(self) -> None:
        for envs in (self.envs, self.test_envs):
            if envs is not None:
                envs.close()


def check_actor_fits(actor: Any, envs: Any) -> None:
    """:raises InputError: when ``actor`` was made for other spaces than ``envs`` have (a factory
    built by hand from another env's spaces, or with the two spaces swapped)."""
    from pytorchrl.utils.errors import InputError
    from pytorchrl.utils.spaces import same_layout

    for name in ("observation_space", "action_space"):
        made_for, have = getattr(actor, name, None), getattr(envs, name)
        if made_for is not None and not same_layout(made_for, have):
            raise InputError(
                f"{type(actor).__name__} was made for {name} {made_for}, but the envs ({envs.env_id!r}) have {have}: "
                "pass the actor factory the spaces VecEnv.create_factory returns (observation space first)"
            )
