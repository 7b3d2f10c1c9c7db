"""The collection half of the on-policy storages, in numpy: what a collection worker fills.

A :class:`RolloutRecorder` is a preallocated ``[num_steps, num_envs]`` rollout of numpy arrays
that :meth:`RolloutRecorder.insert` fills, :meth:`RolloutRecorder.score` completes with the
acting policy's log-probabilities and values, and :meth:`RolloutRecorder.get_data` hands out as
numpy arrays. It imports no torch: a central-inference collection worker, whose policy runs on
a server, records with it and so holds no torch at all (ARCHITECTURE.md, decision 48).
:class:`~pytorchrl.agent.storages.on_policy.rollout.RolloutStorage` is the same recorder seen
through tensors (views of the same memory), with the gradient side added.

Episode ends follow gymnasium's next-step autoreset (see :mod:`pytorchrl.envs.vec_env`): after
a step ``t`` that ends an episode, ``obs[t + 1]`` is the episode's final observation and step
``t + 1`` is a reset step with ``valid = False``.

Recurrent policies (``state_size > 0``): the recorder also keeps, per step, the state the actor
acts on (``states[t]``, zeroed where an episode starts) and ``starts[t]`` (a new episode starts
at ``obs[t]``: the step before was a reset step, or the envs were just reset). The state after
a rollout's last step and its flag roll over into the next rollout, so a worker's envs keep
their memory across rollouts. A rollout sends ``starts`` for every step and the state at the
start of every ``state_stride`` steps (the first step of each training sequence).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pytorchrl.utils.arrays import as_numpy

STEP_KEYS = ("actions", "log_probs", "rewards", "terminated", "truncated", "valid")
#: the keys of a recurrent rollout beyond the memoryless ones
RECURRENT_KEYS = ("states", "starts")


class RolloutRecorder:
    """Rollouts of ``num_envs`` envs, ``num_steps`` steps each, in numpy.

    :param num_steps: steps per env in one rollout.
    :param num_envs: envs per collection worker.
    :param obs_shape: shape of one observation (as stored, see :func:`~pytorchrl.utils.spaces.obs_layout`).
    :param action_shape: shape of one action (``()`` for Discrete).
    :param discrete: actions are integers.
    :param obs_dtype: ``float32``, or ``uint8`` for images: they stay ``uint8`` in the rollout,
        in transport and in minibatches, and are scaled by the encoder on the learner's device.
    :param state_size: a recurrent actor's state width (0: memoryless).
    :param state_stride: steps between the states a rollout sends (None: the rollout's length,
        i.e. only its initial state).
    """

    #: collected rollouts need the acting policy's log-probabilities and values (:meth:`score`)
    needs_scoring = True

    def __init__(
        self,
        *,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        discrete: bool,
        obs_dtype: str = "float32",
        state_size: int = 0,
        state_stride: int | None = None,
    ) -> None:
        self.state_size = state_size
        self.state_stride = state_stride or num_steps
        self.num_steps = num_steps
        self.num_envs = num_envs
        self._shapes = (obs_shape, action_shape, discrete)
        self.obs_dtype_name = obs_dtype
        self._np: dict[str, np.ndarray] = {}  # the rollout's arrays, once allocated
        self.step = 0

    def check_fits(self, envs: Any) -> None:
        """:raises InputError: when this storage was made for other envs than ``envs`` (a
        :class:`~pytorchrl.envs.vec_env.VecEnv`): its ``num_envs``, ``obs_shape``, ``obs_dtype``,
        ``action_shape`` or ``discrete``, named with the env's value (a factory built by hand can
        disagree with the env factory; the first rollout would fail deep in numpy or torch)."""
        import gymnasium as gym

        from pytorchrl.utils.errors import InputError

        obs_shape, action_shape, discrete = self._shapes
        space = envs.action_space
        wanted = {
            "num_envs": (self.num_envs, envs.num_envs),
            "obs_shape": (tuple(obs_shape), tuple(envs.layout.shape)),
            "obs_dtype": (self.obs_dtype_name, envs.layout.dtype.name),
            "action_shape": (tuple(action_shape), () if isinstance(space, gym.spaces.Discrete) else tuple(space.shape)),
            "discrete": (bool(discrete), isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete))),
        }
        for key, (have, env_value) in wanted.items():
            if have != env_value:
                raise InputError(
                    f"{type(self).__name__} was made with {key}={have!r}, but the envs ({envs.env_id!r}) need {key}={env_value!r}: "
                    "pass the storage factory the env factory's values"
                )

    @classmethod
    def create_factory(cls, **kwargs: Any) -> Callable[..., Any]:
        """A picklable ``factory(device="cpu") -> storage``, its arguments checked here
        (:func:`check_storage_arguments`)."""
        check_storage_arguments(cls, kwargs)
        return functools.partial(cls, **kwargs)

    @classmethod
    def from_storage_factory(cls, factory: functools.partial) -> Callable[..., RolloutRecorder]:
        """The recorder of an on-policy storage's factory: its collection half, without torch
        (the factory's gradient-side arguments left out)."""
        names = init_parameters(cls) - {"self", "rollout"}
        return functools.partial(cls, **{k: v for k, v in factory.keywords.items() if k in names})

    def _allocate(self) -> None:
        """The rollout arrays, made on first use: a gradient worker's storage never needs them."""
        (obs_shape, action_shape, discrete), t, n = self._shapes, self.num_steps, self.num_envs
        np_ = self._np
        np_["obs"] = np.zeros((t + 1, n, *obs_shape), dtype=self.obs_dtype_name)
        np_["values"] = np.zeros((t + 1, n), dtype=np.float32)
        # one spare row, so that obs[s:e] and actions[s:e] always pair up in score()
        np_["actions"] = np.zeros((t + 1, n, *action_shape), dtype=np.int64 if discrete else np.float32)
        np_["log_probs"] = np.zeros((t, n), dtype=np.float32)
        np_["rewards"] = np.zeros((t, n), dtype=np.float32)
        np_["terminated"] = np.zeros((t, n), dtype=bool)
        np_["truncated"] = np.zeros((t, n), dtype=bool)
        np_["valid"] = np.ones((t, n), dtype=bool)
        if self.state_size:
            np_["states"] = np.zeros((t + 1, n, self.state_size), dtype=np.float32)
            np_["starts"] = np.ones((t + 1, n), dtype=bool)

    def _view(self, key: str) -> Any:
        """The rollout's ``key`` as the acting policy reads and writes it (numpy here; tensors in
        :class:`~pytorchrl.agent.storages.on_policy.rollout.RolloutStorage`)."""
        return self._np[key]

    # ------------------------------------------------------------------ collection side

    def reset(self, obs: Any) -> None:
        """Start from a fresh observation (after an env reset)."""
        if not self._np:
            self._allocate()
        self._np["obs"][0] = as_numpy(obs)
        if self.state_size:
            self._np["states"][0] = 0.0
            self._np["starts"][0] = True
        self.step = 0

    def recurrent_state(self, step: int) -> Any:
        """The state a recurrent actor acts on at ``step`` (zero where an episode starts there)."""
        return self._view("states")[step]

    @property
    def full(self) -> bool:
        return self.step >= self.num_steps

    def acting_slots(self) -> Iterator[tuple[int, Any, Any]]:
        """``(step, obs, action)`` for each step left in the rollout: the observation to act
        on and the row the actions are written into in place. :meth:`insert` advances."""
        obs_rows, action_rows = list(self._view("obs")), list(self._view("actions"))  # views, made once
        while self.step < self.num_steps:
            yield self.step, obs_rows[self.step], action_rows[self.step]

    def scoring_rows(self, step: int) -> tuple[Any, Any]:
        """The ``(log_prob, value)`` rows of ``step``, for an actor that scores while it acts
        (then :meth:`score` with ``from_step`` adds only the bootstrap value)."""
        return self._view("log_probs")[step], self._view("values")[step]

    def insert(
        self,
        *,
        reward: Any,
        terminated: Any,
        truncated: Any,
        valid: Any,
        next_obs: Any,
        action: Any = None,
        next_state: Any = None,
    ) -> None:
        """Store one step of every env: what came of the actions taken at ``obs[step]``.

        The actions are already in place (:meth:`acting_slots`) unless given here; log-probabilities and
        values are added for the whole rollout by :meth:`score`. Arrays or CPU tensors.
        ``next_state``: a recurrent actor's state after the step (zeroed here where the step was
        a reset step, i.e. a new episode starts at ``next_obs``).
        """
        t, np_ = self.step, self._np
        if next_state is not None:
            start = ~as_numpy(valid).astype(bool)
            np_["starts"][t + 1] = start
            np_["states"][t + 1] = as_numpy(next_state) * ~start[:, None]
        if action is not None:
            np_["actions"][t] = as_numpy(action)
        np_["rewards"][t] = as_numpy(reward)
        np_["terminated"][t] = as_numpy(terminated)
        np_["truncated"][t] = as_numpy(truncated)
        np_["valid"][t] = as_numpy(valid)
        np_["obs"][t + 1] = as_numpy(next_obs)
        self._inserted(t)
        self.step = t + 1

    def _inserted(self, t: int) -> None:
        """Step ``t`` is stored (a hook: demonstrations follow the episodes)."""

    def score(self, fn: Callable[..., tuple[Any, Any]], chunk_steps: int = 256, from_step: int = 0) -> None:
        """Fill the log-probabilities of the actions taken so far and the values of every
        observation, the last one (the bootstrap value) included.

        :param fn: ``fn(obs, actions) -> (log_prob, value)`` on flat batches (the acting policy),
            given and returning what :meth:`_view` holds (arrays here); with recurrent states
            ``fn(obs, actions, state, starts)`` on ``[T, N]`` sequences from the stored state at
            ``from_step`` (one call: the recurrence runs in order).
        :param chunk_steps: steps per batch: big enough to amortise the per-call cost, small
            enough to stay in cache.
        :param from_step: the steps before it are scored already (see :meth:`scoring_rows`).
        """
        t, n = self.step, self.num_envs
        obs, actions, values, log_probs = (self._view(k) for k in ("obs", "actions", "values", "log_probs"))
        if self.state_size:
            s = from_step
            log_prob, value = fn(obs[s : t + 1], actions[s : t + 1], self._view("states")[s], self._view("starts")[s : t + 1])
            values[s : t + 1] = value.reshape(t + 1 - s, n)
            log_probs[s:t] = log_prob[: (t - s) * n].reshape(t - s, n)
            return
        for s in range(from_step, t + 1, chunk_steps):
            e = min(s + chunk_steps, t + 1)
            log_prob, value = fn(obs[s:e].reshape(-1, *obs.shape[2:]), actions[s:e].reshape(-1, *actions.shape[2:]))
            values[s:e] = value.reshape(e - s, n)
            m = min(e, t)  # the action paired with obs[t] is a spare row, not a step
            log_probs[s:m] = log_prob[: (m - s) * n].reshape(m - s, n)

    def get_data(self) -> dict[str, Any]:
        """A copy of the rollout so far (all ``num_steps`` unless it was cut short), as numpy
        arrays, and the recorder rolled over for the next one."""
        t, np_ = self.step, self._np
        data = {k: np_[k][: t + 1].copy() for k in ("obs", "values")}
        data.update({k: np_[k][:t].copy() for k in STEP_KEYS})
        np_["obs"][0] = np_["obs"][t]
        if self.state_size:
            data["states"] = np_["states"][: max(t, 1) : self.state_stride].copy()
            data["starts"] = np_["starts"][: t + 1].copy()
            np_["states"][0], np_["starts"][0] = np_["states"][t], np_["starts"][t]
        self.step = 0
        return data

    # --------------------------------------------------------------------------- state

    def state_dict(self) -> dict[str, Any]:
        """The rollout under construction (what a collection worker needs to continue): the next
        observation, and a recurrent actor's state and episode-start flags there (numpy arrays:
        checkpoints store them as tensors)."""
        np_ = self._np
        state: dict[str, Any] = {"obs": np_["obs"][self.step].copy()}
        if self.state_size:
            state["rhs"], state["starts"] = np_["states"][self.step].copy(), np_["starts"][self.step].copy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reset(state["obs"])
        if self.state_size and "rhs" in state:
            self._np["states"][0] = as_numpy(state["rhs"])
            self._np["starts"][0] = as_numpy(state["starts"])


#: storage arguments with a range: ``name -> (kind, low, high)``; ``int``: a whole number, ``float``: any number
_STORAGE_RANGES: dict[str, tuple[type, float, float]] = {
    "num_steps": (int, 1, 1_000_000), "num_envs": (int, 1, 1_000_000), "capacity": (int, 1, 10**10), "n_step": (int, 1, 10_000),
    "gamma": (float, 0.0, 1.0), "gae_lambda": (float, 0.0, 1.0), "state_size": (int, 0, 10**9),
}


def check_storage_arguments(cls: type, kwargs: dict[str, Any]) -> None:
    """A storage factory's keywords, checked where it is made (``create_factory``), not where
    the storage is first used: a name the storage's constructors do not take, a count or rate
    out of range (``num_steps`` 0 would loop for ever), a shape that is not a tuple of sizes.

    :raises InputError: one line naming the storage, the argument, its value and what is allowed.
    """
    from pytorchrl.utils.errors import InputError

    where = f"{cls.__name__}.create_factory"
    names = init_parameters(cls)
    unknown = sorted(set(kwargs) - names)
    if unknown:
        allowed = ", ".join(sorted(names - {"self", "args", "kwargs", "rollout"}))
        raise InputError(f"{where}: unknown argument {unknown[0]!r}; allowed: {allowed}")
    for name, (kind, low, high) in _STORAGE_RANGES.items():
        if name not in kwargs:
            continue
        value = kwargs[name]
        number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
        if not number or (kind is int and float(value) != int(value)) or not low <= value <= high:
            what = "a whole number" if kind is int else "a number"
            raise InputError(f"{where}: {name} = {value!r}: must be {what} in {low:g}..{high:g}")
    for name in ("obs_shape", "action_shape"):
        shape = kwargs.get(name, ())
        if not isinstance(shape, (tuple, list)) or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1 for n in shape):
            raise InputError(f"{where}: {name} = {shape!r}: must be a tuple of sizes >= 1, e.g. (4,) (an env's observation_space.shape)")


def init_parameters(cls: type) -> set[str]:
    """The parameter names of every ``__init__`` along ``cls``'s MRO (a storage passes its
    keywords up through ``**kwargs``)."""
    return {name for klass in cls.__mro__ if "__init__" in vars(klass) for name in inspect.signature(vars(klass)["__init__"]).parameters}
