"""The evaluation worker beside training (``run.eval_parallel``): a Ray actor that plays the
evaluation episodes of a snapshot of the weights while the learner goes on training."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytorchrl.scheme.base.ray_runtime import ensure_ray
from pytorchrl.scheme.base.worker_set import _WorkerHost, actor_options, failure_reason
from pytorchrl.utils.errors import WorkerFailure
from pytorchrl.utils.runtime import cap_threads

#: an evaluation worker runs in bursts: it reserves no CPU, so that it never waits for one that
#: collection workers hold (Ray would queue it without a word on a full cluster)
EVALUATOR_RESOURCES: dict[str, Any] = {"num_cpus": 0}


@dataclass
class EvaluationRequest:
    """What one evaluation plays: the weights of policy ``version`` with the observation
    statistics ``normalization``, for ``num_episodes`` episodes (``deterministic``: the mode)."""

    weights: dict[str, Any]
    version: int
    normalization: dict[str, Any] | None
    num_episodes: int
    deterministic: bool
    #: the actor call under way (a Ray object ref)
    ref: Any = field(default=None, repr=False)


class Evaluator:
    """One remote evaluation worker, built by ``worker_factory(0, local=True)`` (the recipe of the
    driver's own non-collecting worker, so its test envs are seeded as the driver's are, and the
    same weights score the same in either place) and one evaluation under way at most.

    The actor starts with the first evaluation (Ray too, where the scheme has no remote workers),
    never earlier: a state loaded before then (a resumed run) is kept and handed to it when it
    starts. A worker that dies is replaced by one built the same way (its test envs and stream
    start afresh, from the same seeds: evaluating twice is harmless, unlike collecting twice): during
    an evaluation, which the new one plays again from the start, once per evaluation (a second
    death raises :class:`WorkerFailure`); between two, at the next evaluation or checkpoint.

    :param worker_factory: ``worker_factory(index, local=..., generation=...) -> CollectionWorker``; picklable.
    """

    def __init__(self, worker_factory: Callable[..., Any]) -> None:
        self._factory = worker_factory
        self._actor: Any = None
        self._state: dict[str, Any] | None = None  # a loaded state for the actor to start from
        self.request: EvaluationRequest | None = None
        #: replacements started over the evaluator's life
        self.restarts = 0

    def _host(self) -> Any:
        if self._actor is None:
            ray = ensure_ray()
            cls = ray.remote(**actor_options(EVALUATOR_RESOURCES))(_LocalRecipeHost)
            self._actor = cls.remote(self._factory, self._state)
            self._state = None
        return self._actor

    def start(self, request: EvaluationRequest) -> None:
        """Start ``request`` (the previous one must be finished: :meth:`result`)."""
        if self.request is not None:
            raise RuntimeError("an evaluation is already under way: take its result first")
        self.request = request
        self._send(request)

    def _send(self, request: EvaluationRequest) -> None:
        request.ref = self._host().evaluation.remote(request.weights, request.version, request.normalization, request.num_episodes, request.deterministic)

    @property
    def pending(self) -> bool:
        """Whether an evaluation is under way."""
        return self.request is not None

    @property
    def started(self) -> bool:
        """Whether the worker's actor is up (it starts with the first evaluation)."""
        return self._actor is not None

    @property
    def in_use(self) -> bool:
        """Whether it has a state a checkpoint keeps: its actor is up, or a loaded state waits for it."""
        return self._actor is not None or self._state is not None

    def ready(self) -> bool:
        """Whether the evaluation under way has finished (or failed: :meth:`result` says which)."""
        if self.request is None:
            return False
        import ray  # started by the evaluation

        done, _ = ray.wait([self.request.ref], timeout=0)
        return bool(done)

    def result(self) -> dict[str, Any]:
        """The evaluation's ``returns``, ``successes`` and ``duration_s``, waiting for it.

        :raises WorkerFailure: when the worker died twice during it.
        """
        request = self.request
        if request is None:
            raise RuntimeError("no evaluation is under way")
        import ray

        failures = (ray.exceptions.RayActorError, ray.exceptions.RayTaskError)
        try:
            try:
                return dict(ray.get(request.ref))
            except failures as error:
                self._replace(error, "playing the evaluation again on a new one")
                self._send(request)
            try:
                return dict(ray.get(request.ref))
            except failures as error:
                self._retire()
                raise WorkerFailure(f"the evaluation worker died twice during one evaluation (last: {failure_reason(error)})") from None
        finally:
            self.request = None

    def _replace(self, error: BaseException, then: str) -> None:
        """Retire a worker that died (its replacement starts when next asked for), and say so."""
        self._retire()
        self.restarts += 1
        warnings.warn(f"the evaluation worker died ({failure_reason(error)}); {then}", stacklevel=3)

    def _retire(self) -> None:
        self.kill()
        self._actor = None

    def state_dict(self) -> dict[str, Any]:
        """The worker's test envs and evaluation stream (taken with no evaluation under way; a
        worker that died since its last one leaves none: its replacement starts afresh)."""
        if self.request is not None:
            raise RuntimeError("an evaluation is under way: take its result before the state")
        if self._actor is None:
            return dict(self._state or {})
        import ray

        try:
            # a deep copy: arrays from Ray's object store are read-only, and a checkpoint makes tensors of them
            return dict(copy.deepcopy(ray.get(self._actor.state.remote())))
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as error:
            self._replace(error, "a new one starts with the next evaluation")
            return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start from ``state``: now if the worker is up, else when it starts."""
        if self._actor is None:
            self._state = dict(state)
            return
        import ray

        ray.get(self._actor.load_state.remote(state))

    def kill(self) -> None:
        """Stop the worker process now (a test's stand-in for a crash; :meth:`result` replaces it)."""
        if self._actor is None:  # never started: nothing to stop, and no need to import Ray
            return
        import ray

        if ray.is_initialized():  # never start a Ray to stop a worker of one that is gone
            ray.kill(self._actor, no_restart=True)

    def close(self) -> None:
        """Stop the worker and drop an evaluation under way."""
        self.kill()
        self._actor = None
        self.request = None


class _LocalRecipeHost(_WorkerHost):
    """:class:`_WorkerHost` of a worker built as a scheme's local one (index 0, ``local=True``),
    with its few methods called directly (their arguments and results are plain tensors)."""

    def __init__(self, worker_factory: Callable[..., Any], state: dict[str, Any] | None = None) -> None:
        cap_threads(1)  # it reserves no CPU: one thread, whatever run.torch_threads gives the learner
        self.worker = worker_factory(0, local=True)
        self.compress = False
        if state:
            self.worker.load_state_dict(state)

    def evaluation(self, *args: Any) -> dict[str, Any]:
        return dict(self.worker.evaluation(*args))

    def state(self) -> dict[str, Any]:
        return dict(self.worker.state_dict())

    def load_state(self, state: dict[str, Any]) -> None:
        self.worker.load_state_dict(state)
