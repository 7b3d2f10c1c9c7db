"""Rollout storage with Generalised Advantage Estimation.

One class serves both ends of the scheme:

* on a collection worker it is a preallocated ``[num_steps, num_envs]`` rollout that
  :meth:`GAEBuffer.insert` fills and :meth:`GAEBuffer.get_data` hands out;
* on a gradient worker, :meth:`GAEBuffer.add_data` receives rollouts from any number of
  collection workers (of any length: a preempted rollout is shorter),
  :meth:`GAEBuffer.before_gradients` computes each one's advantages and returns and joins
  their valid transitions, and :meth:`GAEBuffer.generate_batches` yields minibatches.

Episode ends follow gymnasium's next-step autoreset (see :mod:`pytorchrl.envs.vec_env`): after
a step ``t`` that ends an episode, ``obs[t + 1]`` is the episode's final observation and step
``t + 1`` is a reset step with ``valid = False``. GAE (Schulman et al. 2016, eq. 16) is then

    delta_t = r_t + gamma * V(obs[t+1]) * (1 - terminated_t) - V(obs[t])
    A_t     = valid_t * (delta_t + gamma * lambda * (1 - terminated_t or truncated_t) * A_{t+1})

so a truncated step bootstraps from the value of its true final observation, a terminated
step does not bootstrap, and reset steps get no advantage and are never sampled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

STEP_KEYS = ("actions", "log_probs", "rewards", "terminated", "truncated", "valid")


class GAEBuffer:
    """On-policy rollout storage computing GAE(lambda) advantages.

    :param num_steps: steps per env in one rollout.
    :param num_envs: envs per collection worker.
    :param obs_shape: shape of one observation.
    :param action_shape: shape of one action (``()`` for Discrete).
    :param discrete: actions are integers.
    :param gamma: discount factor.
    :param gae_lambda: GAE lambda.
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
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        device: str | torch.device = "cpu",
    ) -> None:
        self.num_steps = num_steps
        self.num_envs = num_envs
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.device = torch.device(device)
        self._shapes = (obs_shape, action_shape, discrete)
        self._np: dict[str, np.ndarray] = {}  # numpy views of the rollout tensors, once allocated
        self.step = 0
        self._received: list[dict[str, torch.Tensor]] = []
        self._flat: dict[str, torch.Tensor] | None = None

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
    def create_factory(cls, **kwargs: Any) -> Callable[..., GAEBuffer]:
        """A picklable ``factory(device="cpu") -> GAEBuffer``."""
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

    def before_gradients(self) -> None:
        """Compute every received rollout's advantages and returns and join their valid transitions."""
        if not self._received:
            raise RuntimeError("before_gradients() called with no data added")
        parts = [self._flatten(d) for d in self._received]
        self._flat = parts[0] if len(parts) == 1 else {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

    def _flatten(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One rollout's valid transitions with their advantages and returns, flattened."""
        advantages, returns = compute_gae(
            data["rewards"], data["values"], data["terminated"], data["truncated"], data["valid"],
            gamma=self.gamma, gae_lambda=self.gae_lambda,
        )
        t = data["rewards"].shape[0]
        flat = {
            "obs": data["obs"][:t],
            "actions": data["actions"],
            "log_probs": data["log_probs"],
            "values": data["values"][:t],
            "advantages": advantages,
            "returns": returns,
        }
        keep = data["valid"].reshape(-1)
        return {k: v.reshape(-1, *v.shape[2:])[keep].to(self.device) for k, v in flat.items()}

    @property
    def num_samples(self) -> int:
        """Valid transitions available for gradients (after :meth:`before_gradients`)."""
        return 0 if self._flat is None else int(self._flat["advantages"].shape[0])

    def explained_variance(self) -> float:
        """How much of the variance of the returns the collected values explain (1 is perfect)."""
        if self._flat is None:
            return float("nan")
        target, predicted = self._flat["returns"], self._flat["values"]
        var = target.var(unbiased=False).item()
        return float("nan") if var == 0 else 1.0 - (target - predicted).var(unbiased=False).item() / var

    def num_batches(self, minibatch_size: int) -> int:
        """Minibatches per pass: ``round(num_samples / minibatch_size)``, at least one."""
        return max(1, round(self.num_samples / minibatch_size))

    def generate_batches(self, *, minibatch_size: int, num_epochs: int = 1, shuffle: bool = True) -> Iterator[dict[str, torch.Tensor]]:
        """Yield minibatches of about ``minibatch_size`` valid transitions, ``num_epochs`` passes.

        Each pass splits a fresh permutation into ``round(num_samples / minibatch_size)``
        near-equal parts, so every valid transition is used exactly once per pass.
        """
        if self._flat is None:
            raise RuntimeError("generate_batches() called before before_gradients()")
        n = self.num_samples
        num_batches = self.num_batches(minibatch_size)
        if num_batches == 1:  # one minibatch holds everything: its order cannot matter
            for _ in range(num_epochs):
                yield self._flat
            return
        for _ in range(num_epochs):
            order = torch.randperm(n, device=self.device) if shuffle else torch.arange(n, device=self.device)
            for idx in torch.tensor_split(order, num_batches):
                yield {k: v[idx] for k, v in self._flat.items()}

    def after_gradients(self) -> None:
        """Drop the data used for this round of gradients."""
        self._received = []
        self._flat = None

    def state_dict(self) -> dict[str, Any]:
        """The rollout under construction (what a collection worker needs to continue)."""
        return {"obs": self.obs[self.step].clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reset(state["obs"])


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    valid: torch.Tensor,
    *,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(lambda) advantages and value targets for ``[T, N]`` rollouts (see the module doc).

    :param values: ``[T + 1, N]``: the value of every observation, the last one the bootstrap.
    :return: ``advantages, returns``, both ``[T, N]``; both are 0 / V at reset steps.
    """
    r = rewards.double().numpy()
    v = values.double().numpy()
    not_term = 1.0 - terminated.numpy()
    not_done = 1.0 - (terminated.numpy() | truncated.numpy())
    mask = valid.numpy().astype(np.float64)
    delta = r + gamma * v[1:] * not_term - v[:-1]
    adv = np.zeros_like(r)
    last = np.zeros(r.shape[1])
    for t in range(r.shape[0] - 1, -1, -1):
        last = mask[t] * (delta[t] + gamma * gae_lambda * not_done[t] * last)
        adv[t] = last
    advantages = torch.from_numpy(adv).float()
    return advantages, advantages + values[:-1]
