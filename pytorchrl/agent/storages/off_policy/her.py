"""Hindsight Experience Replay (Andrychowicz et al. 2017), composed into the replay buffer.

A goal env (the gymnasium-robotics ``GoalEnv`` API) observes a Dict with ``observation``,
``achieved_goal`` and ``desired_goal`` and rewards ``compute_reward(achieved_goal,
desired_goal, info)``. A sparse reward is almost never earned by chance; HER replays each
transition as if the goal had been one the agent did reach, and those rewards are earned.

Where it sits. :class:`HindsightRelabeller` is a part of :class:`~pytorchrl.agent.storages.off_policy.replay.ReplayBuffer`
beside its sampler: the buffer stores what the envs gave, the sampler draws rows, and the
relabeller rewrites the drawn batch (``ReplayBuffer.sample``; a buffer without one pays one
``is None`` test). Nothing is stored twice: a relabelled goal is read from the observation ring
when the transition is sampled (the paper's "future" goals are drawn anew at every replay, as in
SB3's ``HerReplayBuffer``, rather than k copies stored at the episode's end).

What it does to a batch of rows ``t``: each is relabelled with probability ``k / (k + 1)`` (k
relabelled goals per real one). Its new goal is the ``achieved_goal`` of the next observation of
a transition ``j`` of the same episode: ``future``: ``j`` uniform in ``[t, end]``; ``final``:
``j = end``; ``episode``: ``j`` uniform over the whole episode. The episode is followed through
the buffer's ``next_row`` links and ends at a terminated or truncated transition, or before a
row with no sampleable transition (the invalid reset step of next-step autoreset, or a stream's
pending rows, whose transition has not arrived: an episode still running offers the goals it
has so far). ``episode`` walks back too, through an index of each row's predecessor that the
relabeller keeps beside the ring (derived from ``next_row``: rebuilt, not saved, on a restore).
The goal replaces ``desired_goal`` in ``obs`` and ``next_obs``; ``rewards`` become
``compute_reward(next achieved_goal, goal, {})`` and, if the env has ``compute_terminated``,
``discounts`` follow it (else the stored termination stands). Stored infos are not kept, so an
env whose reward reads its ``info`` is not supported.

It keeps no state of its own: its draws come from the generator the buffer samples with (the
torch global one in training, saved in checkpoints), so a resumed run relabels as the original
would. Priorities (prioritized replay) stay per row: a relabelled transition's TD error updates
its row's priority, as in other HER implementations. One-step returns only: an n-step return's
rewards would all change with the goal (the config refuses n_step > 1 and recurrent cores).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from pytorchrl.utils.errors import InputError
from pytorchrl.utils.spaces import dict_slices

__all__ = ["GOAL_KEYS", "STRATEGIES", "HindsightRelabeller", "goal_space_problem", "make_goal_env"]

#: the keys of a goal env's Dict observation
GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
#: where relabelled goals come from (``storage.her.strategy`` adds ``none``)
STRATEGIES = ("future", "final", "episode")


def goal_space_problem(space: gym.Space) -> str | None:
    """None if ``space`` is a goal env's observation space, else what is wrong with it."""
    if not isinstance(space, gym.spaces.Dict):
        return f"its observation space is {space}, not a Dict with keys {', '.join(GOAL_KEYS)}"
    missing = [key for key in GOAL_KEYS if key not in space.spaces]
    if missing:
        return f"its Dict observation has no {', '.join(repr(k) for k in missing)} (it has {', '.join(repr(k) for k in space.spaces)})"
    achieved, desired = space.spaces["achieved_goal"], space.spaces["desired_goal"]
    if not (isinstance(achieved, gym.spaces.Box) and isinstance(desired, gym.spaces.Box) and achieved.shape == desired.shape):
        return f"its 'achieved_goal' ({achieved}) and 'desired_goal' ({desired}) are not Boxes of one shape"
    return None


def make_goal_env(env_id: str, env_kwargs: dict) -> Any:
    """The unwrapped env of ``env_id`` whose ``compute_reward`` (and ``compute_terminated``)
    score relabelled goals: made in the process that samples, once per buffer."""
    from pytorchrl.envs.making import check_env_id, resolve_env_fn

    check_env_id(env_id)  # registers pytorchrl's and ale-py's ids in this process
    fn = resolve_env_fn(env_id)
    env = fn(**env_kwargs) if fn is not None else gym.make(env_id, **env_kwargs)
    return env.unwrapped


class HindsightRelabeller:
    """Rewrites sampled batches of a :class:`~pytorchrl.agent.storages.off_policy.replay.ReplayBuffer`
    with hindsight goals (see the module doc).

    :param strategy: ``future``, ``final`` or ``episode``.
    :param k: relabelled goals per real one (relabelled with probability ``k / (k + 1)``).
    :param achieved: where ``achieved_goal`` sits in a stored observation row.
    :param desired: where ``desired_goal`` sits in it.
    :param make_env: a picklable ``make_env() -> env`` with ``compute_reward`` (and maybe
        ``compute_terminated``), called on first use.
    """

    def __init__(self, *, strategy: str, k: int, achieved: slice, desired: slice, make_env: Callable[[], Any]) -> None:
        if strategy not in STRATEGIES or k < 1:
            raise ValueError(f"HindsightRelabeller: need strategy in {STRATEGIES} and k >= 1; got {strategy!r}, {k}")
        self.strategy, self.k = strategy, k
        self.achieved, self.desired = achieved, desired
        self.make_env = make_env
        self._env: Any = None
        self._prev: np.ndarray | None = None  # episode: each row's predecessor in its stream (-1: none seen)

    @classmethod
    def for_env(
        cls, env_id: str, env_kwargs: dict, observation_space: gym.Space, *, strategy: str, k: int, where: str = "storage.her.strategy"
    ) -> HindsightRelabeller:
        """A relabeller for the envs of ``env_id``, checked now (in the driver): their Dict goal
        keys, and a ``compute_reward`` on the env.

        :raises InputError: one line naming ``where``, the env and what it lacks.
        """
        problem = goal_space_problem(observation_space)
        if problem is None:
            env = make_goal_env(env_id, dict(env_kwargs))
            if not callable(getattr(env, "compute_reward", None)):
                problem = "it has no compute_reward(achieved_goal, desired_goal, info) to score relabelled goals"
            env.close()
        if problem is not None:
            raise InputError(f"config key {where!r} = {strategy!r} needs a goal env, and env.env_id = {env_id!r} is not one: {problem}")
        assert isinstance(observation_space, gym.spaces.Dict)
        slices = dict_slices(observation_space)
        make_env = functools.partial(make_goal_env, env_id, dict(env_kwargs))
        return cls(strategy=strategy, k=k, achieved=slices["achieved_goal"], desired=slices["desired_goal"], make_env=make_env)

    # ------------------------------------------------------------------ the buffer's calls

    def bind(self, capacity: int) -> None:
        """Allocate the predecessor index (``episode`` only: the other strategies only walk forward)."""
        if self.strategy == "episode":
            self._prev = np.full(capacity, -1, dtype=np.int64)

    def added(self, rows: np.ndarray, next_rows: np.ndarray) -> None:
        """Rows whose ``next_row`` was just written (``-1``: pending, none yet)."""
        if self._prev is not None:
            linked = next_rows >= 0
            self._prev[next_rows[linked]] = rows[linked]

    def restored(self, next_row: np.ndarray) -> None:
        """Rebuild the predecessor index from a restored buffer's ``next_row[:size]``; the entries
        it differs in from the index kept while adding point at overwritten rows, which
        :meth:`_first` never follows, so sampling goes on exactly."""
        if self._prev is not None:
            self._prev.fill(-1)
            linked = np.flatnonzero(next_row >= 0)
            self._prev[next_row[linked]] = linked

    @property
    def nbytes(self) -> int:
        return 0 if self._prev is None else self._prev.nbytes

    def relabel(self, batch: dict[str, np.ndarray], rows: np.ndarray, arrays: dict[str, np.ndarray], gamma: float, generator: torch.Generator | None) -> None:
        """Relabel a sampled batch in place (``obs``, ``next_obs``, ``rewards``, ``discounts``).

        :param batch: the buffer's one-step batch (numpy, rows of its own).
        :param rows: the sampled rows (sampleable transitions).
        :param arrays: the buffer's ring arrays (``obs``, ``next_row``, ``ready``, ``terminated``, ``truncated``).
        :param gamma: the discount of a transition that does not terminate.
        :param generator: what the buffer samples with (None: torch's global generator).
        """
        draws = torch.rand((2, len(rows)), generator=generator, dtype=torch.float64).numpy()  # always both: a fixed count per batch
        chosen = np.flatnonzero(draws[0] < self.k / (self.k + 1))
        if len(chosen) == 0:
            return
        goal_rows = self.goal_rows(rows[chosen], draws[1][chosen], arrays)
        goals = arrays["obs"][goal_rows, self.achieved]
        batch["obs"][chosen, self.desired] = goals
        batch["next_obs"][chosen, self.desired] = goals
        achieved = batch["next_obs"][chosen, self.achieved]
        env = self._goal_env()
        infos: list[dict[str, Any]] = [{} for _ in chosen]  # infos are not stored
        batch["rewards"][chosen] = np.asarray(env.compute_reward(achieved, goals, infos), dtype=np.float32).reshape(len(chosen))
        compute_terminated = getattr(env, "compute_terminated", None)
        if callable(compute_terminated):
            terminated = np.broadcast_to(np.asarray(compute_terminated(achieved, goals, infos), dtype=bool), (len(chosen),))
            batch["discounts"][chosen] = np.where(terminated, 0.0, gamma)

    def goal_rows(self, rows: np.ndarray, draws: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """For transitions ``rows``, the rows whose observation's ``achieved_goal`` becomes their
        goal: the next observation of a transition of the same episode, picked by the strategy
        (``draws`` uniform in ``[0, 1)``, one per row)."""
        last, after = self._last(rows, arrays)  # the episode's last transition; transitions in [row, last]
        if self.strategy == "final":
            return arrays["next_row"][last]
        if self.strategy == "future":
            first, offsets = rows, np.minimum((draws * after).astype(np.int64), after - 1)
        else:
            first, before = self._first(rows, arrays)
            total = before + after
            offsets = np.minimum((draws * total).astype(np.int64), total - 1)
        return arrays["next_row"][self._walk(first, offsets, arrays)]

    # ------------------------------------------------------------------ following an episode

    @staticmethod
    def _ends(rows: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
        return arrays["terminated"][rows] | arrays["truncated"][rows]

    def _last(self, rows: np.ndarray, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Each row's episode's last transition so far, and the transitions from the row to it
        (>= 1): ``next_row`` is followed until a transition that ends the episode, or a next
        row with no sampleable transition (a reset step, or pending rows)."""
        last, count = rows.copy(), np.ones(len(rows), dtype=np.int64)
        going = np.flatnonzero(~self._ends(rows, arrays))
        while len(going):
            nxt = arrays["next_row"][last[going]]  # a ready row's next row is alive
            going = going[arrays["ready"][nxt]]
            last[going] = arrays["next_row"][last[going]]
            count[going] += 1
            going = going[~self._ends(last[going], arrays)]
        return last, count

    def _first(self, rows: np.ndarray, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Each row's episode's first transition in the buffer, and the transitions before the row
        (>= 0): predecessors are followed while they are sampleable, do not end an episode, and
        still link to the row (an entry of an overwritten row does not)."""
        assert self._prev is not None
        first, count = rows.copy(), np.zeros(len(rows), dtype=np.int64)
        going = np.arange(len(rows))
        while len(going):
            prev = self._prev[first[going]]
            safe = np.maximum(prev, 0)
            ok = (prev >= 0) & (arrays["next_row"][safe] == first[going]) & arrays["ready"][safe] & ~self._ends(safe, arrays)
            going, prev = going[ok], prev[ok]
            first[going] = prev
            count[going] += 1
        return first, count

    @staticmethod
    def _walk(rows: np.ndarray, steps: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """Follow ``next_row`` ``steps`` times from each row (within its episode: the caller counted them)."""
        rows = rows.copy()
        going = np.flatnonzero(steps > 0)
        steps = steps.copy()
        while len(going):
            rows[going] = arrays["next_row"][rows[going]]
            steps[going] -= 1
            going = going[steps[going] > 0]
        return rows

    def _goal_env(self) -> Any:
        if self._env is None:
            self._env = self.make_env()
        return self._env
