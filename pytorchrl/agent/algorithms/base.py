"""What every algorithm shares: the actor, the optimizer, gradients in and out, versions."""

from __future__ import annotations

import copy
import dataclasses
import functools
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import torch
from torch import nn

from pytorchrl.agent.policy import ModuleWeights

if TYPE_CHECKING:
    from pytorchrl.agent.algorithms.wiring import Wiring
    from pytorchrl.config import AlgorithmConfig, Config


class Algorithm:
    """Owns an actor and its optimizer; turns batches into gradients and applies them.

    An algorithm never touches an environment. ``compute_gradients`` leaves the gradients in
    the parameters' ``.grad``; :meth:`get_gradients` copies them out for other processes and
    :meth:`apply_gradients` (optionally given gradients from elsewhere) steps the optimizer and
    bumps the policy ``version``.

    Its hyper-parameters are its config's (:attr:`config_class`, defined in the algorithm's
    module with their defaults, written once), read as ``self.config.<key>``: ``max_grad_norm``
    clips the global norm of the gradient that is actually stepped (so of the average, when
    gradients of several workers are averaged); ``anneal_lr`` decays the learning rate linearly
    to 0 over training (see :meth:`set_progress`).
    """

    #: the algorithm's own config dataclass (``algorithm.name`` picks it)
    config_class: ClassVar[type[AlgorithmConfig]]
    #: the action spaces it acts in
    action_spaces: ClassVar[tuple[type[gym.Space], ...]] = (gym.spaces.Discrete, gym.spaces.Box, gym.spaces.MultiDiscrete)
    #: hyper-parameters (``algorithm.*`` keys of :attr:`config`) that may change while it
    #: trains (:meth:`set_hyperparameters`; what population-based training perturbs)
    tunable: ClassVar[tuple[str, ...]] = ("lr", "max_grad_norm")
    #: the diagnostics its updates report (keys of an update's info, averaged over a log
    #: interval into progress.csv, TensorBoard and Prometheus; a column from the first row on;
    #: an instance may report more, e.g. with RND)
    metrics: tuple[str, ...] = ()
    #: keywords of its constructor that are not hyper-parameters (DQN's and SAC's ``burn_in``)
    constructor_keys: ClassVar[tuple[str, ...]] = ()
    #: whether the first loss's figures were checked against ``metrics`` (:meth:`_warn_undeclared`)
    _metrics_checked = False
    #: leading steps of a replayed window that only warm a recurrent state up, with no loss on
    #: them (DQN's and SAC's, from ``storage.burn_in``): a minibatch's gradient weighs in the
    #: replicas' average by its valid steps after them
    burn_in: int = 0
    #: takes a recurrent core (``actor.recurrent``) and action masks (``env.action_mask``)
    recurrent: ClassVar[bool] = False
    action_masks: ClassVar[bool] = False
    #: the class (by name, or one deriving from it) of the actor and the storage it works with; a
    #: scheme built by hand from other parts is refused in one line where they meet
    #: (:func:`check_parts`), not with an error from inside the first update
    actor_kind: ClassVar[str | None] = None
    storage_kind: ClassVar[str | None] = None

    @classmethod
    def wire(cls, config: Config, observation_space: gym.Space, action_space: gym.Space) -> Wiring:
        """The factories of this algorithm's actor, storage and itself, from ``config``'s
        sections (see :mod:`pytorchrl.agent.algorithms.wiring`; call it through ``wiring.wire``,
        which checks the spaces first)."""
        raise NotImplementedError

    @classmethod
    def check_action_space(cls, action_space: gym.Space) -> str | None:
        """None if the algorithm acts in ``action_space``, else what it needs ("a Discrete action space")."""
        if isinstance(action_space, cls.action_spaces):
            return None
        return " or ".join(f"a {space.__name__}" for space in cls.action_spaces) + " action space"

    @property
    def lr(self) -> float:
        """The learning rate now."""
        return float(self.config.lr)

    @property
    def max_grad_norm(self) -> float | None:
        """The global gradient-norm clip now (None: off)."""
        return getattr(self.config, "max_grad_norm", None)

    @property
    def num_epochs(self) -> int:
        """Passes over each batch of collected data (1 unless the config says)."""
        return int(getattr(self.config, "num_epochs", 1))

    @property
    def minibatch_size(self) -> int | None:
        """Transitions per gradient step (None: the whole batch, unless the config says)."""
        return getattr(self.config, "minibatch_size", None)

    @classmethod
    def resolve_config(cls, config: AlgorithmConfig | None = None, overrides: dict[str, Any] | None = None) -> Any:
        """``config`` (default: the config class's defaults) with ``overrides`` replacing its values.

        :raises TypeError: a config of another algorithm, or an override that is not one of its keys.
        :raises ConfigError: a value a config file could not hold (a type, range or choice), in one
            line naming ``algorithm.<key>``: ``PPO.create_factory(num_epochs=0)`` is refused here,
            not found out as a round that never ends.
        """
        from pytorchrl.config import check_section  # the config module imports the algorithms

        config = cls.config_class() if config is None else config
        if not isinstance(config, cls.config_class):
            raise TypeError(f"{cls.__name__} takes a {cls.config_class.__name__}, not a {type(config).__name__}")
        keys = [f.name for f in dataclasses.fields(config) if f.name != "name"]
        unknown = sorted(set(overrides or ()) - set(keys))
        if unknown:
            raise TypeError(f"{cls.__name__} has no hyper-parameter {unknown[0]!r}; it has {', '.join(keys)}")
        return check_section(dataclasses.replace(config, **(overrides or {})), "algorithm.")

    def __init__(self, actor: nn.Module, device: str | torch.device = "cpu", config: AlgorithmConfig | None = None, **overrides: Any) -> None:
        """:param actor: the network.
        :param device: torch device of the actor.
        :param config: the hyper-parameters (default: the config class's defaults), read as
            ``self.config.<key>``; needs ``lr``, and reads ``adam_eps``, ``max_grad_norm``,
            ``anneal_lr``, ``num_epochs`` and ``minibatch_size`` where it has them.
        :param overrides: hyper-parameters replacing the config's (``PPO(actor, lr=1e-3)``).
        """
        #: the hyper-parameters as they are now: a frozen config, replaced when one changes
        #: (:meth:`update_algorithm_parameter`, schedules, population-based training)
        self.config = self.resolve_config(config, overrides)
        # duck-typed: on-policy and off-policy actors offer different methods (get_action, evaluate_actions, ...)
        self.actor: Any = actor
        self.device = torch.device(device)
        self.initial_lr = self.lr
        self.params: list[torch.Tensor] = [p for p in actor.parameters() if p.requires_grad]
        # Every parameter is a view into one flat buffer and every .grad a view into another:
        # autograd accumulates into existing grads in place, so zeroing, clipping, copying out and
        # applying a gradient are one op each, and Adam steps a few flat segments instead of
        # every tensor (its per-tensor overhead was a tenth of a small network's update).
        numel = sum(p.numel() for p in self.params)
        self.flat_params = torch.empty(numel, device=self.device)
        self.flat_grad = torch.zeros(numel, device=self.device)
        offset, self._offsets = 0, {}
        for p in self.params:
            self.flat_params[offset : offset + p.numel()].copy_(p.detach().flatten())
            p.data = self.flat_params[offset : offset + p.numel()].view_as(p)
            p.grad = self.flat_grad[offset : offset + p.numel()].view_as(p)
            self._offsets[id(p)] = offset
            offset += p.numel()
        self.segments = self._segments()
        self._targets = self._flat_targets()
        # fused Adam: one kernel per segment
        self.optimizer = torch.optim.Adam(self.segments, lr=self.lr, eps=getattr(self.config, "adam_eps", 1e-8), fused=True)
        self.version = 0
        self._weights = ModuleWeights(self.actor)
        self.stop_round = False
        self.progress = 0.0

    def param_groups(self) -> list[list[torch.Tensor]]:
        """Parameters in groups that Adam may step separately (consecutive runs of
        ``actor.parameters()``); one group unless an algorithm steps parts of the actor alone (TD3)."""
        return [self.params]

    def _segments(self) -> list[torch.Tensor]:
        """The flat slices of :meth:`param_groups`, each with its slice of the flat gradient."""
        groups = self.param_groups()
        if [id(p) for group in groups for p in group] != [id(p) for p in self.params]:
            raise ValueError(f"{type(self).__name__}.param_groups() must split the trainable parameters into consecutive runs, in order")
        segments, offset = [], 0
        for group in groups:
            numel = sum(p.numel() for p in group)
            segment = self.flat_params[offset : offset + numel]
            segment.grad = self.flat_grad[offset : offset + numel]
            segments.append(segment)
            offset += numel
        return segments

    def _flat_targets(self) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """Per ``(target, online)`` pair of ``actor.target_pairs()``: the target's parameters
        as one flat buffer (they become views of it, like the trainable ones), beside the flat
        slice of the online network's, so that a polyak update is one op per pair. None (the
        actor's own ``update_target`` then) without targets, or when an online network is not
        one consecutive run of the flat parameters."""
        pairs = getattr(self.actor, "target_pairs", None)
        if pairs is None:
            return None
        flat: list[tuple[torch.Tensor, torch.Tensor]] = []
        for target_net, online_net in pairs():
            target, online = list(target_net.parameters()), list(online_net.parameters())
            if not online:
                continue
            start = end = self._offsets.get(id(online[0]), -1)
            for p in online:
                if self._offsets.get(id(p)) != end:
                    return None
                end += p.numel()
            if [p.shape for p in target] != [p.shape for p in online]:
                return None
            buffer = torch.cat([p.detach().flatten() for p in target])
            offset = 0
            for p in target:
                p.data = buffer[offset : offset + p.numel()].view_as(p)
                offset += p.numel()
            flat.append((buffer, self.flat_params[start:end]))
        return flat

    @torch.no_grad()
    def update_targets(self, tau: float) -> None:
        """Move the target networks towards the online ones: ``target += tau * (online - target)`` (``tau >= 1``: a copy)."""
        if self._targets is None:
            self.actor.update_target(tau)
            return
        for target, online in self._targets:
            if tau >= 1.0:
                target.copy_(online)
            else:
                target.lerp_(online, tau)

    @classmethod
    def create_factory(cls, config: AlgorithmConfig | None = None, **kwargs: Any) -> Callable[..., Algorithm]:
        """A picklable ``factory(actor, device="cpu") -> Algorithm`` with ``config`` and keywords
        (hyper-parameters replacing the config's, and the constructor's own), checked here."""
        cls.resolve_config(config, {k: v for k, v in kwargs.items() if k not in cls.constructor_keys})
        return functools.partial(cls, config=config, **kwargs)

    # ---------------------------------------------------------------------------- acting

    @torch.no_grad()
    def acting_step(self, obs: torch.Tensor, rhs: Any = None, done: torch.Tensor | None = None, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor], Any]:
        """The actor's action for ``obs``, without gradients."""
        return self.actor.get_action(obs, rhs, done, deterministic)

    # ------------------------------------------------------------------------- learning

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, dict[str, float]]:
        """The loss of one minibatch and its diagnostics; None skips the step (early stop)."""
        raise NotImplementedError

    def evaluate_transitions(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """``log_prob, entropy, value`` of a GAE minibatch's actions under the current actor, and
        the batch's per-transition fields beside them: shuffled transitions as they are;
        recurrent sequences (``states`` in the batch) re-run from their stored states and
        flattened to their valid steps, so a loss over them needs no special case."""
        if "states" not in batch:
            return (*self.actor.evaluate_actions(batch["obs"], batch["actions"]), batch)
        log_prob, entropy, value = self.actor.evaluate_actions(batch["obs"], batch["actions"], batch["states"], batch["starts"])
        keep = batch["valid"].reshape(-1)
        flat = {k: batch[k].reshape(-1)[keep] for k in ("log_probs", "values", "advantages", "returns")}
        return log_prob[keep], entropy[keep], value[keep], flat

    def compute_gradients(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """Backpropagate one minibatch's loss into ``.grad``; returns diagnostics.

        Sets ``info["skipped"] = 1.0`` when the algorithm decided not to step (e.g. target KL).
        """
        loss, info = self.compute_loss(batch)
        if not self._metrics_checked:
            self._metrics_checked = True
            self._warn_undeclared(info)
        self.flat_grad.zero_()
        if loss is None:
            info["skipped"] = 1.0
            return info
        loss.backward()
        return info

    def _warn_undeclared(self, info: dict[str, Any]) -> None:
        """Once: the figures a first loss reports that ``metrics`` does not declare, which the log
        leaves out (an algorithm written outside the package; the built-in ones are tested)."""
        undeclared = sorted(k for k, v in info.items() if isinstance(v, float) and k not in self.metrics)
        if undeclared:
            name = type(self).__name__
            warnings.warn(
                f"{name}.compute_loss reports {', '.join(undeclared)}, which {name}.metrics does not declare: "
                f"they are not logged; add them to {name}.metrics",
                stacklevel=3,
            )

    def get_gradients(self) -> torch.Tensor:
        """A copy of the current gradient: one flat tensor, parameters in ``actor.parameters()`` order."""
        return self.flat_grad.detach().cpu().clone()

    def apply_gradients(self, gradients: torch.Tensor | None = None, computed_at: int | None = None) -> bool:
        """Clip the global norm, step the optimizer on ``gradients`` (a flat gradient from
        :meth:`get_gradients`, e.g. an average over workers) or on what ``.grad`` holds, and bump the version.

        A gradient with a NaN or an infinity anywhere (its norm is not finite) is not applied:
        weights, optimizer moments and the version stay as they are.

        :param computed_at: the policy version the gradient was computed with, when older than
            this one (asynchronous gradient workers): a step whose kind follows the version
            (TD3's delayed policy step) is the kind its gradient was computed as.

        :return: whether the update was applied.
        """
        if gradients is not None:
            self.flat_grad.copy_(gradients)
        if not self._clip_gradient():
            return False
        self._adam_step()
        self.version += 1
        return True

    def _clip_gradient(self) -> bool:
        """Clip the gradient's global norm to ``max_grad_norm``; False (and the gradient zeroed)
        when it is not finite."""
        norm = torch.linalg.vector_norm(self.flat_grad)
        if not bool(torch.isfinite(norm)):
            self.flat_grad.zero_()
            return False
        max_norm = self.max_grad_norm
        if max_norm is not None:
            self.flat_grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return True

    def _adam_step(self) -> None:
        """``optimizer.step()`` without its per-call Python bookkeeping, which costs as much as
        the kernel on a small network: the fused kernel runs directly on the segments that have
        a gradient once their state exists (the first step goes through ``step()``)."""
        live = [(s, grad) for s in self.segments if (grad := s.grad) is not None]
        if not all(s in self.optimizer.state for s, _ in live):
            self.optimizer.step()
            return
        group = self.optimizer.param_groups[0]
        states = [self.optimizer.state[s] for s, _ in live]
        steps = [st["step"] for st in states]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            [s for s, _ in live], [grad for _, grad in live], [st["exp_avg"] for st in states], [st["exp_avg_sq"] for st in states], [], steps,
            amsgrad=False, lr=group["lr"], beta1=group["betas"][0], beta2=group["betas"][1], weight_decay=group["weight_decay"],
            eps=group["eps"], maximize=False, grad_scale=None, found_inf=None,
        )

    def set_warmup(self, warming_up: bool) -> None:
        """Told before each collection whether the storage is still filling up (off-policy ``start_steps``)."""

    def _end_uniform_acting(self, warming_up: bool) -> None:
        """For actors that act uniformly at random (their ``uniform`` buffer) until the replay
        buffer first holds ``start_steps`` transitions. Only ever switches it off: a run resumed
        without its buffer (``storage.checkpoint_buffer: false``) refills it with its trained
        policy, not at random (it takes no gradient step until the buffer holds ``start_steps``
        again)."""
        if not warming_up:
            self.actor.uniform.fill_(False)

    def prepare_round(self, storage: Any) -> None:
        """Told once per round, after the round's data reached ``storage`` (``before_gradients``) and
        before its minibatches are drawn: a place to annotate the data with the learner's current
        policy (APPO's proximal policy)."""

    def pop_priorities(self) -> torch.Tensor | None:
        """New replay priorities of the last minibatch's transitions (prioritized replay), if any."""
        return None

    # --------------------------------------------------------------------- parameters

    def set_progress(self, progress: float) -> None:
        """Tell the algorithm how far training is (0 to 1 of ``run.target_steps``) for schedules."""
        self.progress = progress
        if getattr(self.config, "anneal_lr", False):
            self.update_algorithm_parameter("lr", self.initial_lr * max(0.0, 1.0 - progress))

    def update_algorithm_parameter(self, name: str, value: Any) -> None:
        """Set a hyper-parameter (``lr``, ``clip_range``, ...) while training."""
        if name == "name" or name not in {f.name for f in dataclasses.fields(self.config)}:
            raise AttributeError(f"{type(self).__name__} has no parameter {name!r}")
        self.config = dataclasses.replace(self.config, **{name: value})
        if name == "lr":
            for group in self.optimizer.param_groups:
                group["lr"] = value

    def set_hyperparameters(self, values: dict[str, Any]) -> None:
        """Change :attr:`tunable` hyper-parameters mid-run (after a checkpoint is loaded, whose
        optimizer state carries the old learning rate). A scheduled parameter (``anneal_lr``,
        ``anneal_clip_range``) restarts its schedule from the new value at the current progress."""
        for name, value in values.items():
            if name not in self.tunable:
                raise ValueError(f"{type(self).__name__} cannot change {name!r} while training; it can change {', '.join(self.tunable)}")
            if hasattr(self, f"initial_{name}"):
                setattr(self, f"initial_{name}", value)
            self.update_algorithm_parameter(name, value)
        self.set_progress(self.progress)

    # ----------------------------------------------------------------------- weights

    def get_weights(self, acting: bool = False, copy: bool = True) -> dict[str, torch.Tensor]:
        """The actor's parameters and buffers, detached copies on the CPU (see
        :meth:`~pytorchrl.agent.policy.ModuleWeights.get`: ``acting`` only what collection needs,
        ``copy=False`` the live tensors for a consumer in this process that copies them at once)."""
        return self._weights.get(acting, copy)

    def set_weights(self, weights: dict[str, torch.Tensor], version: int | None = None) -> None:
        """Copy ``weights`` (from :meth:`get_weights`, all of them or the acting ones) into the actor in place."""
        self._weights.set(weights)
        if version is not None:
            self.version = version

    def state_dict(self) -> dict[str, Any]:
        state = {"actor": self.get_weights(), "optimizer": self.optimizer.state_dict(), "version": self.version, "lr": self.lr, "progress": self.progress}
        rnd = getattr(self.actor, "rnd", None)
        if rnd is not None:  # RND's running sums of intrinsic rewards: the learner's, not weights
            state["rnd_forward_sums"] = [sums.clone() for sums in rnd.forward_sums]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        # a copy: torch keeps a state's tensors that already fit, so a state taken in this process
        # (another algorithm's, Learner.load_state(other.state_dict())) would share its moments
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.version = int(state["version"])
        # the config's learning rate, not the state's "lr": a resume may change it as any training
        # hyper-parameter (the optimizer's moments are kept), and a schedule sets it from the
        # state's progress, as the run that wrote the state had it (a replica taking the
        # master's state then steps with the master's learning rate)
        self.update_algorithm_parameter("lr", self.initial_lr)
        self.set_progress(float(state.get("progress", self.progress)))
        rnd = getattr(self.actor, "rnd", None)
        if rnd is not None:  # a checkpoint from before they were kept: the sums start again at 0
            rnd.forward_sums = [torch.as_tensor(sums, dtype=torch.float64).clone() for sums in state.get("rnd_forward_sums", [])]



def normalized(values: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``values`` at zero mean and unit std (statistics over the entries where ``mask`` is True,
    the others set to 0); unchanged when fewer than two entries count."""
    kept = values if mask is None else values[mask]
    if kept.numel() < 2:
        return values
    out = (values - kept.mean()) / (kept.std() + 1e-8)
    return out if mask is None else out * mask


def check_parts(algorithm_class: Any, *, actor: Any = None, storage: Any = None) -> None:
    """Refuse an ``actor`` or ``storage`` of another kind than ``algorithm_class`` works with
    (its :attr:`Algorithm.actor_kind` and :attr:`Algorithm.storage_kind`): a scheme assembled
    by hand from factories that do not belong together.

    :raises InputError: naming the algorithm, the kind it needs and the kind it got.
    """
    from pytorchrl.utils.errors import InputError

    for part, attribute, obj in (("actor", "actor_kind", actor), ("storage", "storage_kind", storage)):
        need = getattr(algorithm_class, attribute, None)
        if need is None or obj is None or need in {k.__name__ for k in type(obj).__mro__}:
            continue
        article = "an" if part == "actor" else "a"
        raise InputError(
            f"{algorithm_class.__name__} takes {article} {part} made by {need}.create_factory; the scheme's {part}_factory makes "
            f"{type(obj).__name__} (it does not belong with the algo_factory)"
        )


def check_shared_settings(algorithm: Algorithm, storage: Any, given: Iterable[str] = ()) -> None:
    """Refuse a return setting chosen for ``algorithm`` that its ``storage`` was made without,
    among those the storage makes the returns with (its ``return_settings``: a GAE buffer's
    ``gamma`` and ``gae_lambda``, a replay storage's ``gamma`` and ``n_step``; none where the
    algorithm computes them, V-trace's and replayed sequences'): the storage uses its own, so
    ``PPO.create_factory(gamma=0.9)`` beside ``GAEBuffer.create_factory()`` would train with
    0.99 and say nothing. A setting counts as chosen when it is in ``given`` (the factory's
    keywords) or differs from the algorithm's default (a config passed whole, DQN's ``rainbow``
    raising ``n_step``); an algorithm left at its default takes the storage's value.

    :raises InputError: naming the algorithm, the setting, both values and the fix.
    """
    from pytorchrl.utils.errors import InputError

    defaults = type(algorithm).config_class()
    for name in getattr(storage, "return_settings", ()):
        mine, theirs = getattr(algorithm.config, name, None), getattr(storage, name, None)
        if mine is None or theirs is None or mine == theirs:
            continue
        if name not in given and mine == getattr(defaults, name, None):
            continue
        kind = type(storage).__name__
        raise InputError(
            f"{type(algorithm).__name__} was given {name}={mine!r}, but its storage {kind} was made with {name}={theirs!r}, "
            f"and the storage makes the returns with its own: pass {name}={mine!r} to {kind}.create_factory too"
        )
