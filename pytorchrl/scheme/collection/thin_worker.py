"""A central-inference collection worker that holds no torch (ARCHITECTURE.md, decision 48).

With ``scheme.inference: central`` a remote collection worker only steps its envs and records
what happens: its policy runs on an inference server. :class:`ThinCollectionWorker` does that in
numpy alone: a :class:`~pytorchrl.envs.vec_env.VecEnv` stepped through ``step_arrays``, a
recorder (:mod:`pytorchrl.agent.storages.on_policy.recorder`, :mod:`pytorchrl.agent.storages.off_policy.recorder`), and an
:class:`~pytorchrl.scheme.inference.array_policy.ArrayPolicy`; its rollouts and state leave as
numpy arrays, which the learner's side takes as tensors (sharing their memory). A process that
never imports torch holds ~185 MB less (145 against 330 MB RSS beside a Nature CNN), which is what lets
dozens of collection workers share a small machine.

It collects what a :class:`~pytorchrl.scheme.collection.collection_worker.CollectionWorker`
with a :class:`~pytorchrl.scheme.inference.client.RemotePolicy` collects, bit for bit: the same
env seeds, the same acting stream (drawn by the server from the state this worker keeps), the
same recorder layout. It serves memoryless policies: PPO, A2C, IMPALA and APPO (RND included),
DQN and Ape-X (actor-side priorities scored through the server), SAC, TD3 and DDPG; recurrent
policies and demonstrations keep the torch worker (:func:`thin_recorder_factory` says which).
"""

from __future__ import annotations

import functools
import pickle
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pytorchrl.scheme.base.worker_set import CollectorNumbering
from pytorchrl.utils.arrays import as_numpy
from pytorchrl.utils.seeding import ACTING_ROLE, derive_seed, generation_seed


class TrainEnvStatistics:
    """The normaliser statistics of a collection worker's train envs (``self.envs``, None on a
    worker that does not collect), shared by the torch and the thin workers."""

    envs: Any

    def normalization_state(self) -> dict[str, Any] | None:
        """The train envs' observation statistics (None without normalisation)."""
        rms = None if self.envs is None or self.envs.obs_normalizer is None else self.envs.obs_normalizer.rms
        return None if rms is None else rms.state_dict()

    def running_statistics(self) -> dict[str, Any]:
        """The train envs' normalisers' statistics (see :meth:`VecEnv.running_statistics <pytorchrl.envs.vec_env.VecEnv.running_statistics>`)."""
        return {} if self.envs is None else self.envs.running_statistics()

    def adopt_statistics(self, state: dict[str, Any]) -> None:
        """Normalise the train envs with another worker's statistics from here on (a worker
        that joins a run mid-way: a replacement, or one added)."""
        if self.envs is not None:
            self.envs.adopt_statistics(state)

    def take_new_statistics(self) -> dict[str, Any]:
        """What the train envs' normalisers took in since they last reported (see
        :meth:`VecEnv.take_new_statistics <pytorchrl.envs.vec_env.VecEnv.take_new_statistics>`):
        a remote gradient worker's set whose local worker collects reports it up."""
        return {} if self.envs is None else self.envs.take_new_statistics()

    def adopt_merged_statistics(self, merged: dict[str, Any]) -> None:
        """Go on from a merge of every reporter's statistics (see
        :meth:`VecEnv.adopt_merged_statistics <pytorchrl.envs.vec_env.VecEnv.adopt_merged_statistics>`)."""
        if self.envs is not None:
            self.envs.adopt_merged_statistics(merged)


class ThinCollectionWorker(TrainEnvStatistics):
    """Steps a train :class:`~pytorchrl.envs.vec_env.VecEnv`, acts through an
    :class:`~pytorchrl.scheme.inference.array_policy.ArrayPolicy`, records in a
    :class:`~pytorchrl.agent.storages.on_policy.recorder.RolloutRecorder` (or its replay twin,
    :class:`~pytorchrl.agent.storages.off_policy.recorder.ReplayRecorder`).

    :param index: collector index (as a :class:`~.collection_worker.CollectionWorker`'s).
    :param env_factory: ``env_factory(worker_index, seed=...) -> VecEnv``.
    :param recorder_factory: ``recorder_factory() -> RolloutRecorder`` (:func:`thin_recorder_factory`).
    :param policy_factory: ``policy_factory(index) -> ArrayPolicy``.
    :param seed: the run seed (of the acting stream, whose key is ``index``).
    :param env_seed: the run seed of the train envs' streams (None: the env factory's own).
    """

    def __init__(
        self, index: int, *, env_factory: Callable[..., Any], recorder_factory: Callable[..., Any], policy_factory: Callable[[int], Any],
        seed: int = 0, env_seed: int | None = None,
    ) -> None:
        self.index = index
        self.policy = policy_factory(index)
        self._stream: np.ndarray = self.policy.initial_stream(derive_seed(seed, ACTING_ROLE, index))
        self.envs = env_factory(worker_index=index, **({} if env_seed is None else {"seed": env_seed}))
        self.storage = recorder_factory()
        if hasattr(self.storage, "stream_id"):  # a replay recorder keys its envs' observation streams by it
            self.storage.stream_id = derive_seed(seed, ACTING_ROLE, index)
        self._preempted: int | None = None
        self._started = False

    def collect_data(
        self, weights: Any = None, version: int | None = None, round_id: int | None = None, statistics: dict[str, Any] | None = None,
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Step the envs until the recorder holds one rollout; return it (numpy) with its info
        (the arguments and keys of :meth:`~.collection_worker.CollectionWorker.collect_data`).
        ``weights`` are the server's business: a central-mode worker is never sent any."""
        start = time.perf_counter()
        if statistics:
            self.envs.adopt_merged_statistics(statistics)
        envs, storage, policy = self.envs, self.storage, self.policy
        if not self._started:
            storage.reset(envs.reset_arrays())
            self._started = True
        self._stream = policy.begin_rollout(self._stream, storage.num_steps, envs.num_envs)
        scored = policy.scores_while_acting
        preempted = False
        oldest: int | None = None  # the oldest weights that chose an action: policy lag counts from them
        for step, obs, action in storage.acting_slots():
            policy.act(obs, step, action, storage.scoring_rows(step) if scored else None)
            oldest = policy.version if oldest is None else min(oldest, policy.version)
            next_obs, reward, terminated, truncated, valid = envs.step_arrays(action)
            storage.insert(reward=reward, terminated=terminated, truncated=truncated, valid=valid, next_obs=next_obs)
            if round_id is not None and self._preempted == round_id:
                preempted = not storage.full
                break
        if storage.needs_scoring:
            storage.score(policy.score, from_step=storage.step if scored else 0)
        data = storage.get_data()
        return data, rollout_info(
            envs, env_steps=int(data["rewards"].size), version=policy.version if oldest is None else oldest, start=start, index=self.index, preempted=preempted,
            report_statistics=statistics is not None,
        )

    def preempt(self, round_id: int) -> None:
        """End round ``round_id``'s rollout early (called while :meth:`collect_data` runs)."""
        self._preempted = round_id

    def state_dict(self) -> dict[str, Any]:
        """As a :class:`~.collection_worker.CollectionWorker`'s, in numpy."""
        state: dict[str, Any] = {"acting_rng": self._stream.copy()}
        if self._started:
            state["envs"] = self.envs.state_dict()
            state["storage"] = self.storage.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "acting_rng" in state:
            self._stream = np.array(as_numpy(state["acting_rng"]), dtype=np.uint8)
        if "envs" in state:
            if self.envs.load_state_dict(state["envs"]) and "storage" in state:
                self.storage.load_state_dict(state["storage"])
            else:
                self.storage.reset(self.envs.reset_from_state_arrays())
            self._started = True

    def imports_torch(self) -> bool:
        """Whether this process has imported torch (it should not have: see the module doc)."""
        return "torch" in sys.modules

    def close(self) -> None:
        self.envs.close()


def rollout_info(
    envs: Any, *, env_steps: int, version: int, start: float, index: int, preempted: bool, report_statistics: bool = False,
) -> dict[str, Any]:
    """What a collection worker reports with a rollout: ``env_steps``, ``episode_returns``,
    ``episode_lengths`` (the episodes ``envs`` finished since the last rollout),
    ``policy_version``, ``collect_time_s`` (since ``start``, a ``perf_counter`` time),
    ``worker_index``, ``preempted``, ``env_restarts``, and with normalisation and
    ``report_statistics`` (a remote worker, whose set merges them) ``new_statistics``
    (:meth:`VecEnv.take_new_statistics <pytorchrl.envs.vec_env.VecEnv.take_new_statistics>`)."""
    episodes = envs.pop_episodes()
    new_statistics = envs.take_new_statistics() if report_statistics else {}
    return {
        "env_steps": env_steps,
        "episode_returns": [r for _, r, _ in episodes],
        "episode_lengths": [n for _, _, n in episodes],
        "policy_version": version,
        "collect_time_s": time.perf_counter() - start,
        "worker_index": index,
        "preempted": preempted,
        "env_restarts": envs.pop_env_restarts(),
        **({"new_statistics": new_statistics} if new_statistics else {}),
    }


def thin_recorder_factory(storage_factory: Any) -> Callable[..., Any] | None:
    """The recorder a thin worker fills in place of ``storage_factory``'s storage, or None when
    that storage needs the torch worker (a recurrent state, demonstrations)."""
    from pytorchrl.agent.storages.off_policy.recorder import ReplayRecorder
    from pytorchrl.agent.storages.off_policy.replay_storage import ReplayStorage
    from pytorchrl.agent.storages.on_policy.recorder import RolloutRecorder
    from pytorchrl.agent.storages.on_policy.rollout import RolloutStorage

    if not isinstance(storage_factory, functools.partial) or not isinstance(storage_factory.func, type):
        return None
    cls, kwargs = storage_factory.func, storage_factory.keywords
    if not issubclass(cls, RolloutStorage) or kwargs.get("state_size") or kwargs.get("demos") is not None:
        return None
    recorder = ReplayRecorder if issubclass(cls, ReplayStorage) else RolloutRecorder
    return recorder.from_storage_factory(storage_factory)


class Deferred:
    """An object pickled once, unpickled only where it is used: a thin worker's factory carries the
    torch worker's arguments (for the local worker) without its process unpickling them."""

    def __init__(self, obj: Any) -> None:
        from ray import cloudpickle  # factories may hold what plain pickle cannot (as Ray pickles them)

        self._blob = cloudpickle.dumps(obj)

    def load(self) -> Any:
        return pickle.loads(self._blob)


def make_collection_worker(
    index: int, *, local: bool, generation: int = 0, torch_factory: Deferred, thin_kwargs: dict[str, Any], numbering: CollectorNumbering, set_generation: int = 0,
) -> Any:
    """The collection worker set's factory in central mode: the local worker is a torch
    :class:`~.collection_worker.CollectionWorker` (it evaluates), a remote one a
    :class:`ThinCollectionWorker`, numbered and seeded as the torch factory numbers them."""
    if local:
        return torch_factory.load()(index, local=True, generation=generation)
    return ThinCollectionWorker(numbering(index), **generation_kwargs(thin_kwargs, generation, set_generation))


def generation_kwargs(kwargs: dict[str, Any], generation: int, set_generation: int) -> dict[str, Any]:
    """A collection worker's arguments for its generation: a replacement (``generation`` > 0), or
    a worker of a set rebuilt after a gradient worker's replacement (``set_generation``), keeps its
    number and gets fresh acting and env seeds; the first generation keeps the run's."""
    out = dict(kwargs)
    if generation or set_generation:
        out["seed"] = out["env_seed"] = generation_seed(kwargs.get("seed", 0), generation, set_generation)
    return out
