"""The on-policy storages' common part.

A :class:`RolloutStorage` on a collection worker is a :class:`~.recorder.RolloutRecorder` (the
rollout in numpy: see there for the layout, episode ends and recurrent states) that the acting
policy reads and writes as tensors; on a gradient worker :meth:`RolloutStorage.add_data` receives rollouts from any number of
collection workers (of any length: a preempted rollout is shorter). Subclasses turn the
received rollouts into minibatches: :class:`~.gae_buffer.GAEBuffer` (GAE, shuffled
transitions) and :class:`~.vtrace_buffer.VTraceBuffer` (time-major sequences for V-trace).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from pytorchrl.agent.contracts import ActingPolicy
from pytorchrl.agent.storages.on_policy.demos import DemoReplay, DemoSpec, ReplayingPolicy
from pytorchrl.agent.storages.on_policy.recorder import RolloutRecorder


class RolloutStorage(RolloutRecorder):
    """Rollouts of ``num_envs`` envs, ``num_steps`` steps each: a
    :class:`~.recorder.RolloutRecorder` whose arrays the acting policy reads and writes as
    tensors (views of the same memory), and the gradient side.

    :param device: where minibatches are placed.
    :param demos: replay demonstrations and the agent's best episodes in some episodes (PPOD,
        :mod:`.demos`); read on the collection side only, when the worker wraps its policy
        (:meth:`wrap_policy`).
    :param rollout: :class:`~.recorder.RolloutRecorder`'s arguments.
    """

    #: the settings of the returns this storage computes, which its algorithm's must equal
    #: (:func:`~pytorchrl.agent.algorithms.base.check_shared_settings`; none: the algorithm computes them)
    return_settings: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, device: str | torch.device = "cpu", demos: DemoSpec | None = None, **rollout: Any) -> None:
        super().__init__(**rollout)
        self.device = torch.device(device)
        self.obs_dtype = getattr(torch, self.obs_dtype_name)
        self._received: list[dict[str, torch.Tensor]] = []
        self.demos = demos
        self.demo_replay: DemoReplay | None = None

    def _allocate(self) -> None:
        """The recorder's arrays, and each as a tensor attribute sharing its memory
        (``storage.obs``, ``storage.actions``, ...)."""
        super()._allocate()
        for key, array in self._np.items():
            setattr(self, key, torch.from_numpy(array))

    def _view(self, key: str) -> torch.Tensor:
        return getattr(self, key)

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

    def reset(self, obs: torch.Tensor | np.ndarray) -> None:
        """Start from a fresh observation (after an env reset)."""
        super().reset(obs)
        if self.demos is not None:
            self._demo_replay().restart()

    def _inserted(self, t: int) -> None:
        if self.demo_replay is not None:
            np_ = self._np
            self.demo_replay.observe(np_["actions"][t], np_["rewards"][t], np_["terminated"][t], np_["truncated"][t], np_["valid"][t], np_["obs"][t + 1])

    def get_data(self) -> dict[str, torch.Tensor]:
        """A copy of the rollout so far (all ``num_steps`` unless it was cut short), and the
        storage rolled over for the next one."""
        # copied through numpy: a tenth of the cost of torch slicing and cloning for short rollouts
        return {k: torch.as_tensor(v) for k, v in super().get_data().items()}

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
        state = super().state_dict()
        if self.demo_replay is not None:
            state["demos"] = self.demo_replay.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.demos is not None and "demos" in state:
            self._demo_replay().load_state_dict(state["demos"])

    def load_lasting_state(self, state: dict[str, Any]) -> None:
        """What of :meth:`state_dict` outlives the episodes in progress (PPOD's best episodes and
        counters), for a worker whose envs could not be restored and start anew."""
        if self.demos is not None and "demos" in state:
            self._demo_replay().load_state_dict(state["demos"], episodes=False)

