"""The collection half shared by the on-policy storages.

A :class:`RolloutStorage` on a collection worker is a preallocated ``[num_steps, num_envs]``
rollout that :meth:`RolloutStorage.insert` fills and :meth:`RolloutStorage.get_data` hands out;
on a gradient worker :meth:`RolloutStorage.add_data` receives rollouts from any number of
collection workers (of any length: a preempted rollout is shorter). Subclasses turn the
received rollouts into minibatches: :class:`~.gae_buffer.GAEBuffer` (GAE, shuffled
transitions) and :class:`~.vtrace_buffer.VTraceBuffer` (time-major sequences for V-trace).

Episode ends follow gymnasium's next-step autoreset (see :mod:`pytorchrl.envs.vec_env`): after
a step ``t`` that ends an episode, ``obs[t + 1]`` is the episode's final observation and step
``t + 1`` is a reset step with ``valid = False``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

STEP_KEYS = ("actions", "log_probs", "rewards", "terminated", "truncated", "valid")


class RolloutStorage:
    """Rollouts of ``num_envs`` envs, ``num_steps`` steps each.

    :param num_steps: steps per env in one rollout.
    :param num_envs: envs per collection worker.
    :param obs_shape: shape of one observation.
    :param action_shape: shape of one action (``()`` for Discrete).
    :param discrete: actions are integers.
    :param device: where minibatches are placed.
    """

    def __init__(
        self,
        *,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        discrete: bool,
        device: str | torch.device = "cpu",
    ) -> None:
        self.num_steps = num_steps
        self.num_envs = num_envs
        self.device = torch.device(device)
        self._shapes = (obs_shape, action_shape, discrete)
        self._np: dict[str, np.ndarray] = {}  # numpy views of the rollout tensors, once allocated
        self.step = 0
        self._received: list[dict[str, torch.Tensor]] = []

    def _allocate(self) -> None:
        """The rollout tensors, made on first use: a gradient worker's storage never needs them."""
        (obs_shape, action_shape, discrete), t, n = self._shapes, self.num_steps, self.num_envs
        self.obs = torch.zeros((t + 1, n, *obs_shape))
        self.values = torch.zeros((t + 1, n))
        self.actions = torch.zeros((t, n, *action_shape), dtype=torch.long if discrete else torch.float32)
        self.log_probs = torch.zeros((t, n))
        self.rewards = torch.zeros((t, n))
        self.terminated = torch.zeros((t, n), dtype=torch.bool)
        self.truncated = torch.zeros((t, n), dtype=torch.bool)
        self.valid = torch.ones((t, n), dtype=torch.bool)
        # numpy views of the same memory: a numpy row assignment costs a fraction of a torch one
        self._np = {k: getattr(self, k).numpy() for k in ("obs", "values", *STEP_KEYS)}

    @classmethod
    def create_factory(cls, **kwargs: Any) -> Callable[..., Any]:
        """A picklable ``factory(device="cpu") -> storage``."""
        return functools.partial(cls, **kwargs)

    # ------------------------------------------------------------------ collection side

    def reset(self, obs: torch.Tensor) -> None:
        """Start from a fresh observation (after an env reset)."""
        if not self._np:
            self._allocate()
        self.obs[0].copy_(obs)
        self.step = 0

    @property
    def full(self) -> bool:
        return self.step >= self.num_steps

    def insert(
        self,
        *,
        action: torch.Tensor,
        log_prob: torch.Tensor,
        value: torch.Tensor,
        reward: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        valid: torch.Tensor,
        next_obs: torch.Tensor,
    ) -> None:
        """Store one step of every env: what was done at ``obs[step]`` and what came of it.

        The tensors must be on the CPU (acting happens there; see :class:`CollectionWorker`).
        """
        t, np_ = self.step, self._np
        np_["actions"][t] = action.numpy()
        np_["log_probs"][t] = log_prob.numpy()
        np_["values"][t] = value.numpy()
        np_["rewards"][t] = reward.numpy()
        np_["terminated"][t] = terminated.numpy()
        np_["truncated"][t] = truncated.numpy()
        np_["valid"][t] = valid.numpy()
        np_["obs"][t + 1] = next_obs.numpy()
        self.step = t + 1

    def set_bootstrap_value(self, value: torch.Tensor) -> None:
        """The value of ``obs[num_steps]``, computed once the rollout is full."""
        self.values[self.num_steps] = value

    def get_data(self) -> dict[str, torch.Tensor]:
        """A copy of the rollout so far (all ``num_steps`` unless it was cut short), and the
        storage rolled over for the next one."""
        t = self.step
        data = {k: getattr(self, k)[: t + 1].clone() for k in ("obs", "values")}
        data.update({k: getattr(self, k)[:t].clone() for k in STEP_KEYS})
        self.obs[0].copy_(self.obs[t])
        self.step = 0
        return data

    @property
    def last_obs(self) -> torch.Tensor:
        return self.obs[self.step]

    # -------------------------------------------------------------------- gradient side

    def add_data(self, data: dict[str, torch.Tensor]) -> None:
        """Receive a rollout from a collection worker (see :meth:`get_data`)."""
        self._received.append(data)

    def after_gradients(self) -> None:
        """Drop the data used for this round of gradients."""
        self._received = []

    def state_dict(self) -> dict[str, Any]:
        """The rollout under construction (what a collection worker needs to continue)."""
        return {"obs": self.obs[self.step].clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reset(state["obs"])
