"""The collection half shared by the on-policy storages.

A :class:`RolloutStorage` on a collection worker is a preallocated ``[num_steps, num_envs]``
rollout that :meth:`RolloutStorage.insert` fills, :meth:`RolloutStorage.score` completes with the
acting policy's log-probabilities and values, and :meth:`RolloutStorage.get_data` hands out;
on a gradient worker :meth:`RolloutStorage.add_data` receives rollouts from any number of
collection workers (of any length: a preempted rollout is shorter). Subclasses turn the
received rollouts into minibatches: :class:`~.gae_buffer.GAEBuffer` (GAE, shuffled
transitions) and :class:`~.vtrace_buffer.VTraceBuffer` (time-major sequences for V-trace).

Episode ends follow gymnasium's next-step autoreset (see :mod:`pytorchrl.envs.vec_env`): after
a step ``t`` that ends an episode, ``obs[t + 1]`` is the episode's final observation and step
``t + 1`` is a reset step with ``valid = False``.

Recurrent policies (``state_size > 0``): the storage also keeps, per step, the state the actor
acts on (``states[t]``, zeroed where an episode starts) and ``starts[t]`` (a new episode starts
at ``obs[t]``: the step before was a reset step, or the envs were just reset). The state after
a rollout's last step and its flag roll over into the next rollout, so a worker's envs keep
their memory across rollouts. A rollout sends ``starts`` for every step and the state at the
start of every ``state_stride`` steps (the first step of each training sequence).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from pytorchrl.agent.contracts import ActingPolicy
from pytorchrl.agent.storages.on_policy.demos import DemoReplay, DemoSpec, ReplayingPolicy

STEP_KEYS = ("actions", "log_probs", "rewards", "terminated", "truncated", "valid")
#: the keys of a recurrent rollout beyond the memoryless ones
RECURRENT_KEYS = ("states", "starts")


class RolloutStorage:
    """Rollouts of ``num_envs`` envs, ``num_steps`` steps each.

    :param num_steps: steps per env in one rollout.
    :param num_envs: envs per collection worker.
    :param obs_shape: shape of one observation (as stored, see :func:`~pytorchrl.utils.spaces.obs_layout`).
    :param obs_dtype: ``float32``, or ``uint8`` for images: they stay ``uint8`` in the rollout,
        in transport and in minibatches, and are scaled by the encoder on the learner's device.
    :param action_shape: shape of one action (``()`` for Discrete).
    :param discrete: actions are integers.
    :param device: where minibatches are placed.
    :param state_size: a recurrent actor's state width (0: memoryless).
    :param state_stride: steps between the states a rollout sends (None: the rollout's length,
        i.e. only its initial state).
    :param demos: replay demonstrations and the agent's best episodes in some episodes (PPOD,
        :mod:`.demos`); read on the collection side only, when the worker wraps its policy
        (:meth:`wrap_policy`).
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
        device: str | torch.device = "cpu",
        state_size: int = 0,
        state_stride: int | None = None,
        demos: DemoSpec | None = None,
    ) -> None:
        self.state_size = state_size
        self.state_stride = state_stride or num_steps
        self.num_steps = num_steps
        self.num_envs = num_envs
        self.device = torch.device(device)
        self._shapes = (obs_shape, action_shape, discrete)
        self.obs_dtype = getattr(torch, obs_dtype)
        self._np: dict[str, np.ndarray] = {}  # numpy views of the rollout tensors, once allocated
        self.step = 0
        self._received: list[dict[str, torch.Tensor]] = []
        self.demos = demos
        self.demo_replay: DemoReplay | None = None

    def _allocate(self) -> None:
        """The rollout tensors, made on first use: a gradient worker's storage never needs them."""
        (obs_shape, action_shape, discrete), t, n = self._shapes, self.num_steps, self.num_envs
        self.obs = torch.zeros((t + 1, n, *obs_shape), dtype=self.obs_dtype)
        self.values = torch.zeros((t + 1, n))
        # one spare row, so that obs[s:e] and actions[s:e] always pair up in score()
        self.actions = torch.zeros((t + 1, n, *action_shape), dtype=torch.long if discrete else torch.float32)
        self.log_probs = torch.zeros((t, n))
        self.rewards = torch.zeros((t, n))
        self.terminated = torch.zeros((t, n), dtype=torch.bool)
        self.truncated = torch.zeros((t, n), dtype=torch.bool)
        self.valid = torch.ones((t, n), dtype=torch.bool)
        keys: tuple[str, ...] = ("obs", "values", *STEP_KEYS)
        if self.state_size:
            self.states = torch.zeros((t + 1, n, self.state_size))
            self.starts = torch.ones((t + 1, n), dtype=torch.bool)
            keys = (*keys, *RECURRENT_KEYS)
        # numpy views of the same memory: a numpy row assignment costs a fraction of a torch one
        self._np = {k: getattr(self, k).numpy() for k in keys}

    @classmethod
    def create_factory(cls, **kwargs: Any) -> Callable[..., Any]:
        """A picklable ``factory(device="cpu") -> storage``."""
        return functools.partial(cls, **kwargs)

    # ------------------------------------------------------------------ collection side

    def wrap_policy(self, policy: ActingPolicy) -> ActingPolicy:
        """The policy a collection worker acts through: ``policy`` itself, or with demonstrations
        a :class:`~.demos.ReplayingPolicy` that lets this storage's :class:`~.demos.DemoReplay`
        choose the actions of the envs that replay an episode (the demonstration files are read
        here, in the worker's process)."""
        if self.demos is None:
            return policy
        return ReplayingPolicy(policy, self._demo_replay())

    def _demo_replay(self) -> DemoReplay:
        if self.demo_replay is None:
            assert self.demos is not None
            self.demo_replay = DemoReplay(self.demos, self.num_envs)
        return self.demo_replay

    def reset(self, obs: torch.Tensor) -> None:
        """Start from a fresh observation (after an env reset)."""
        if not self._np:
            self._allocate()
        if self.demos is not None:
            self._demo_replay().restart()
        self.obs[0].copy_(obs)
        if self.state_size:
            self.states[0].zero_()
            self.starts[0].fill_(True)
        self.step = 0

    def recurrent_state(self, step: int) -> torch.Tensor:
        """The state a recurrent actor acts on at ``step`` (zero where an episode starts there)."""
        return self.states[step]

    @property
    def full(self) -> bool:
        return self.step >= self.num_steps

    def acting_slots(self) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """``(step, obs, action)`` for each step left in the rollout: the observation to act
        on and the row the actions are written into in place. :meth:`insert` advances."""
        obs_rows, action_rows = self.obs.unbind(0), self.actions.unbind(0)  # views, made once
        while self.step < self.num_steps:
            yield self.step, obs_rows[self.step], action_rows[self.step]

    def scoring_rows(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``(log_prob, value)`` rows of ``step``, for an actor that scores while it acts
        (then :meth:`score` with ``from_step`` adds only the bootstrap value)."""
        return self.log_probs[step], self.values[step]

    def insert(
        self,
        *,
        reward: torch.Tensor | np.ndarray,
        terminated: torch.Tensor | np.ndarray,
        truncated: torch.Tensor | np.ndarray,
        valid: torch.Tensor | np.ndarray,
        next_obs: torch.Tensor | np.ndarray,
        action: torch.Tensor | np.ndarray | None = None,
        next_state: torch.Tensor | None = None,
    ) -> None:
        """Store one step of every env: what came of the actions taken at ``obs[step]``.

        The actions are already in place (:meth:`acting_slots`) unless given here; log-probabilities and
        values are added for the whole rollout by :meth:`score`. Tensors must be on the CPU
        (acting happens there; see :class:`CollectionWorker`); numpy arrays are stored as they are.
        ``next_state``: a recurrent actor's state after the step (zeroed here where the step was
        a reset step, i.e. a new episode starts at ``next_obs``).
        """
        t, np_ = self.step, self._np
        if next_state is not None:
            start = ~as_array(valid).astype(bool)
            np_["starts"][t + 1] = start
            np_["states"][t + 1] = as_array(next_state) * ~start[:, None]
        if action is not None:
            np_["actions"][t] = as_array(action)
        np_["rewards"][t] = as_array(reward)
        np_["terminated"][t] = as_array(terminated)
        np_["truncated"][t] = as_array(truncated)
        np_["valid"][t] = as_array(valid)
        np_["obs"][t + 1] = as_array(next_obs)
        if self.demo_replay is not None:
            self.demo_replay.observe(np_["actions"][t], np_["rewards"][t], np_["terminated"][t], np_["truncated"][t], np_["valid"][t], np_["obs"][t + 1])
        self.step = t + 1

    def score(
        self, fn: Callable[..., tuple[torch.Tensor, torch.Tensor]], chunk_steps: int = 256, from_step: int = 0
    ) -> None:
        """Fill the log-probabilities of the actions taken so far and the values of every
        observation, the last one (the bootstrap value) included.

        :param fn: ``fn(obs, actions) -> (log_prob, value)`` on flat batches (the acting policy);
            with recurrent states ``fn(obs, actions, state, starts)`` on ``[T, N]`` sequences
            from the stored state at ``from_step`` (one call: the recurrence runs in order).
        :param chunk_steps: steps per batch: big enough to amortise the per-call cost, small
            enough to stay in cache.
        :param from_step: the steps before it are scored already (see :meth:`scoring_rows`).
        """
        t, n = self.step, self.num_envs
        if self.state_size:
            s = from_step
            log_prob, value = fn(self.obs[s : t + 1], self.actions[s : t + 1], self.states[s], self.starts[s : t + 1])
            self.values[s : t + 1] = value.view(t + 1 - s, n)
            self.log_probs[s:t] = log_prob[: (t - s) * n].view(t - s, n)
            return
        for s in range(from_step, t + 1, chunk_steps):
            e = min(s + chunk_steps, t + 1)
            log_prob, value = fn(self.obs[s:e].flatten(0, 1), self.actions[s:e].flatten(0, 1))
            self.values[s:e] = value.view(e - s, n)
            m = min(e, t)  # the action paired with obs[t] is a spare row, not a step
            self.log_probs[s:m] = log_prob[: (m - s) * n].view(m - s, n)

    def get_data(self) -> dict[str, torch.Tensor]:
        """A copy of the rollout so far (all ``num_steps`` unless it was cut short), and the
        storage rolled over for the next one."""
        t, np_ = self.step, self._np
        # copied through the numpy views: a tenth of the cost of torch slicing and cloning for short rollouts
        data = {k: torch.from_numpy(np_[k][: t + 1].copy()) for k in ("obs", "values")}
        data.update({k: torch.from_numpy(np_[k][:t].copy()) for k in STEP_KEYS})
        np_["obs"][0] = np_["obs"][t]
        if self.state_size:
            data["states"] = torch.from_numpy(np_["states"][: max(t, 1) : self.state_stride].copy())
            data["starts"] = torch.from_numpy(np_["starts"][: t + 1].copy())
            np_["states"][0], np_["starts"][0] = np_["states"][t], np_["starts"][t]
        self.step = 0
        return data

    # -------------------------------------------------------------------- gradient side

    def add_data(self, data: dict[str, torch.Tensor]) -> None:
        """Receive a rollout from a collection worker (see :meth:`get_data`)."""
        self._received.append(data)

    def after_gradients(self) -> None:
        """Drop the data used for this round of gradients."""
        self._received = []

    @property
    def warming_up(self) -> bool:
        """Whether acting should be uniformly random for now (off-policy ``start_steps``; never here)."""
        return False

    def set_progress(self, progress: float) -> None:
        """How far training is (0 to 1), for schedules of the gradient side (none here)."""

    @property
    def uses_priorities(self) -> bool:
        """Whether the gradient side wants each minibatch's TD errors (prioritized replay; never here)."""
        return False

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """New priorities of sampled transitions (prioritized replay; nothing here)."""

    def buffer_state(self) -> dict[str, Any] | None:
        """What of the gradient side a checkpoint keeps (nothing: a round's data is used up)."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """The rollout under construction (what a collection worker needs to continue): the next
        observation, and a recurrent actor's state and episode-start flags there."""
        state: dict[str, Any] = {"obs": self.obs[self.step].clone()}
        if self.state_size:
            state["rhs"], state["starts"] = self.states[self.step].clone(), self.starts[self.step].clone()
        if self.demo_replay is not None:
            state["demos"] = self.demo_replay.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reset(state["obs"])
        if self.state_size and "rhs" in state:
            self.states[0].copy_(state["rhs"])
            self.starts[0].copy_(state["starts"])
        if self.demos is not None and "demos" in state:
            self._demo_replay().load_state_dict(state["demos"])

    def load_lasting_state(self, state: dict[str, Any]) -> None:
        """What of :meth:`state_dict` outlives the episodes in progress (PPOD's best episodes and
        counters), for a worker whose envs could not be restored and start anew."""
        if self.demos is not None and "demos" in state:
            self._demo_replay().load_state_dict(state["demos"], episodes=False)


def as_array(x: torch.Tensor | np.ndarray) -> np.ndarray:
    """``x`` as a numpy array: itself, the memory of a CPU tensor, or a copy from another device."""
    if isinstance(x, np.ndarray):
        return x
    if x.is_cpu and not x.requires_grad:
        return x.numpy()  # no detach or cpu op: each costs microseconds per call on the collection path
    return x.detach().cpu().numpy()
