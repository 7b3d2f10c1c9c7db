"""Making envs by id: checking an id (a registered gymnasium id, an ALE id, ``module:function``),
one env or a gymnasium vector env of it, each failure to make one as a one-line
:class:`~pytorchrl.utils.errors.InputError` (a missing extra named with its install command), and
:class:`RestartOnError`, which recreates an env that raises (``env.restart_failed_envs``).
:class:`~pytorchrl.envs.vec_env.VecEnv` builds on these.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from pytorchrl.envs.atari import register_atari
from pytorchrl.envs.masking import MASK_KEY, InfoActionMask
from pytorchrl.envs.rendering import is_opengl_failure, opengl_hint, show_mujoco_warnings_once
from pytorchrl.utils.errors import InputError
from pytorchrl.utils.named import import_named
from pytorchrl.utils.spaces import check_observation_space

SUPPORTED_ACTION_SPACES = (gym.spaces.Discrete, gym.spaces.Box, gym.spaces.MultiDiscrete)
RESTART_INFO_KEY = "env_restarted"
RESET_ATTEMPTS = 3


def resolve_env_fn(env_id: str) -> Callable[..., gym.Env] | None:
    """Return the function named by ``'module:function'``, or None for a registered id."""
    if ":" not in env_id or env_id in gym.registry:
        return None
    module, attr = import_named(env_id, "env.env_id", "module:function", "my_package.envs:make_env")
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise InputError(f"env.env_id = {env_id!r}: module {module.__name__!r} has no function {attr!r}")
    return fn


def check_env_id(env_id: str) -> None:
    """Raise :class:`InputError` naming close registered ids if ``env_id`` is unknown."""
    if not isinstance(env_id, str):
        raise InputError(f"env.env_id must be a string, a registered gymnasium id or 'module:function', got {type(env_id).__name__} {env_id!r}")
    if resolve_env_fn(env_id) is not None:
        return
    if env_id.startswith("ALE/"):
        register_atari(env_id)  # ale-py registers its ids only when imported
    if env_id in gym.registry:
        return
    _import_env_families()
    if env_id in gym.registry:
        return
    near = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(repr(n) for n in near)}?" if near else ""
    raise InputError(f"env.env_id = {env_id!r} is not a registered gymnasium id nor 'module:function'{hint}")


def probe_env(env_id: str, env_kwargs: dict | None = None) -> tuple[gym.Space, gym.Space, bool]:
    """The observation and action spaces of one env of ``env_id`` as made, before any check of
    them (:meth:`VecEnv.create_factory` checks them), and whether it gives its legal actions in
    a reset's ``info["action_mask"]``: what ``train --algo/--env`` picks its default from. ALE
    ids give the raw game's spaces, not the preprocessed frames.

    :raises InputError: for an unknown env id, or an env that cannot be made (one line).
    """
    check_env_id(env_id)
    kwargs = dict(env_kwargs or {})
    with env_errors(env_id, "env.env_kwargs", kwargs):
        env = make_single_env(env_id, kwargs, None)
        spaces = env.observation_space, env.action_space
        masked = info_masks(env)
        env.close()
    return (*spaces, masked)


def info_masks(env: gym.Env) -> bool:
    """Whether ``env`` (of Discrete actions, unwrapped by :class:`InfoActionMask`) gives legal
    actions in its reset's info; it is reset once to see (seed 0). A reset that fails here says
    no: the run's own resets report it, after its spaces are checked."""
    if not isinstance(env.action_space, gym.spaces.Discrete) or isinstance(env, InfoActionMask):
        return False
    try:
        _, info = env.reset(seed=0)
    except Exception:
        return False
    return isinstance(info, dict) and MASK_KEY in info


def _import_env_families() -> None:
    """Register pytorchrl's own envs and ale-py's, if installed."""
    importlib.import_module("pytorchrl.envs.registration")
    register_atari()


def check_spaces(env_id: str, obs_space: gym.Space, act_space: gym.Space) -> None:
    """Raise :class:`InputError` for spaces no actor can handle."""
    problem = check_observation_space(obs_space)
    if problem is not None:
        raise InputError(f"env.env_id = {env_id!r}: {problem}")
    problem = action_space_problem(act_space)
    if problem is not None:
        raise InputError(f"env.env_id = {env_id!r} has action space {act_space}; {problem}")


def action_space_problem(space: gym.Space) -> str | None:
    """None for an action space the actors act in, else why not and what is (one phrase)."""
    if not isinstance(space, SUPPORTED_ACTION_SPACES):
        return "supported: Discrete, Box, MultiDiscrete"
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)) and np.any(np.asarray(space.start) != 0):
        return "the actors' actions are indices from 0 (a Discrete or MultiDiscrete start of 0); wrap the env to shift them (gymnasium.ActionWrapper)"
    if isinstance(space, gym.spaces.Box) and len(space.shape) != 1:
        return "a Box action must have one dimension (a vector); wrap the env to reshape it (gymnasium.ActionWrapper)"
    return None


@contextlib.contextmanager
def env_errors(env_id: str, key: str, env_kwargs: dict) -> Iterator[None]:
    """Whatever making the env raises (a bad keyword, a value its constructor refuses, a missing
    dependency) as one config-error line naming ``key``, the env id and the env's own message."""
    try:
        yield
    except InputError:
        raise
    except Exception as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        message = message.split(" was raised from the environment creator")[0]  # gymnasium's suffix repeats the kwargs
        missing = _missing_extra(env_id, exc, message)
        if missing is not None:  # not the kwargs' fault, whatever they are
            raise InputError(f"env.env_id = {env_id!r} needs {missing}") from None
        if is_opengl_failure(exc):  # MUJOCO_GL names a backend whose library is missing
            message += f"; {opengl_hint()}"
        if env_kwargs:
            raise InputError(f"config key {key!r} = {env_kwargs!r}: {env_id!r} cannot be made with them ({type(exc).__name__}: {message})") from None
        raise InputError(f"env.env_id = {env_id!r}: making the env failed ({type(exc).__name__}: {message})") from None


#: gymnasium's env families whose dependencies are extras of this package: (where their entry
#: points live, what they need, how to install it)
_EXTRAS = (
    ("gymnasium.envs.box2d", "Box2D", "pip install Box2D pygame (in a checkout: pip install -e '.[box2d]')"),
    ("gymnasium.envs.mujoco", "MuJoCo", "pip install 'gymnasium[mujoco]' (in a checkout: pip install -e '.[mujoco]')"),
)


def _missing_extra(env_id: str, exc: Exception, message: str) -> str | None:
    """What to install when making ``env_id`` failed for a package that is not installed (a
    clause for the error line; ``message``: the exception's own line), or None when ``exc`` is
    something else."""
    if not isinstance(exc, (gym.error.DependencyNotInstalled, ImportError)):
        return None
    spec = gym.registry.get(env_id)
    entry = spec.entry_point if spec is not None and isinstance(spec.entry_point, str) else ""
    for module, what, install in _EXTRAS:
        if entry.startswith(module):
            return f"{what}, which is not installed: {install}"
    return f"a package that is not installed ({type(exc).__name__}: {message})"


def make_single_env(env_id: str, env_kwargs: dict, max_episode_steps: int | None, action_mask: str = "none") -> gym.Env:
    show_mujoco_warnings_once(env_id)
    fn = resolve_env_fn(env_id)
    if fn is not None:
        env = fn(**env_kwargs)
        if max_episode_steps is not None:
            env = gym.wrappers.TimeLimit(env, max_episode_steps)
    else:
        if max_episode_steps is not None:
            env_kwargs = {**env_kwargs, "max_episode_steps": max_episode_steps}
        env = gym.make(env_id, **env_kwargs)
    return InfoActionMask(env) if action_mask == "info" else env


def make_vector_env(
    env_id: str, num_envs: int, vectorization: str, env_kwargs: dict, max_episode_steps: int | None, restart_failed_envs: bool,
    action_mask: str = "none",
) -> gym.vector.VectorEnv:
    fn = resolve_env_fn(env_id)
    spec = None if fn is not None else gym.spec(env_id)
    has_native = spec is not None and spec.vector_entry_point is not None and action_mask != "info"
    if vectorization == "native" and not has_native:
        raise InputError(f"env.vectorization = 'native': {env_id!r} has no native vector implementation; use 'sync' or 'async'")
    if vectorization == "native" and restart_failed_envs:
        raise InputError(
            "env.vectorization = 'native' cannot be combined with env.restart_failed_envs = true "
            "(a native vector env cannot recreate one of its envs); use 'sync' or 'async'"
        )
    if vectorization in ("native", "auto") and has_native and not restart_failed_envs:
        kwargs = dict(env_kwargs)
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = max_episode_steps
        env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if mode == AutoresetMode.NEXT_STEP:
            return env
        env.close()  # a native env with another autoreset mode: 'auto' falls back to sync
        if vectorization == "native":
            raise InputError(
                f"env.vectorization = 'native': {env_id!r}'s native vector env resets in autoreset mode {getattr(mode, 'value', mode)!r}, "
                "and pytorchrl steps envs that reset on the next step; use 'auto' or 'sync'"
            )
    make: Callable[[], gym.Env] = functools.partial(make_single_env, env_id, env_kwargs, max_episode_steps, action_mask)
    if restart_failed_envs:
        make = RestartOnError.wrap(make)
    if vectorization == "async":
        # a terminal's Ctrl-C, and a SIGTERM sent to the whole process tree (`ray job stop`, Slurm),
        # reach the env processes too: they leave it to the learner, which finishes its round with
        # them before it stops (they end when it closes their pipes, or on EOF if it dies)
        make = functools.partial(_ignoring_stop_signals, make, os.getpid())
        return gym.vector.AsyncVectorEnv([make] * num_envs, autoreset_mode=AutoresetMode.NEXT_STEP)
    return gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=AutoresetMode.NEXT_STEP)


def _ignoring_stop_signals(make: Callable[[], gym.Env], builder_pid: int) -> gym.Env:
    """``make()``; in an async vector env's process (not ``builder_pid``, the process that built
    the vector env, which also makes one env to read its spaces), SIGINT and SIGTERM are
    ignored from then on."""
    if os.getpid() != builder_pid:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    return make()


class RestartOnError(gym.Wrapper):
    """Recreates its env when ``step`` or ``reset`` raises an exception (``restart_failed_envs``).

    A failed ``step`` returns ``(last good observation, 0.0, False, True, {"env_restarted": n})``:
    the episode is cut as a truncation, and the vector env's next-step autoreset resets the new
    env. A failed ``reset`` is answered by the new env's reset, its info with ``env_restarted``.
    ``n`` is the number of envs made: a new env whose reset fails is replaced too, up to
    :data:`RESET_ATTEMPTS` in all. Unless ``reset`` was given a seed, a new env is seeded from
    the broken env's generator, so a seeded run stays reproducible.

    :param make_env: builds the env, and each replacement.
    """

    def __init__(self, make_env: Callable[[], gym.Env]) -> None:
        super().__init__(make_env())
        self._make_env = make_env
        self._last_obs: Any = None

    @classmethod
    def wrap(cls, make_env: Callable[[], gym.Env]) -> Callable[[], gym.Env]:
        """``make_env`` made into a constructor of restarting envs."""
        return functools.partial(cls, make_env)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        try:
            obs, info = self.env.reset(seed=seed, options=options)
        except Exception as exc:
            obs, info, made = self._replace(exc, seed, options)
            info = {**info, RESTART_INFO_KEY: made}
        self._last_obs = obs
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        if self._last_obs is None:  # stepped before any reset: a usage error, not an env failure
            return self.env.step(action)
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as exc:
            last = self._last_obs
            self._last_obs, _, made = self._replace(exc, None, None)
            return last, 0.0, False, True, {RESTART_INFO_KEY: made}
        self._last_obs = obs
        return obs, reward, terminated, truncated, info

    def _replace(self, error: Exception, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict[str, Any], int]:
        """Close the broken env and make new ones until one resets: ``(obs, info, envs made)``."""
        for made in range(1, RESET_ATTEMPTS + 1):
            new_seed = self._next_seed() if seed is None else seed
            try:
                self.env.close()
            except Exception:
                pass  # it is broken already
            try:
                self.env = self._make_env()
                obs, info = self.env.reset(seed=new_seed, options=options)
            except Exception as exc:
                error = exc
                continue
            return obs, info, made
        raise RuntimeError(
            f"env.restart_failed_envs: {RESET_ATTEMPTS} new envs failed to reset in a row; last error: {error!r}"
        ) from error

    def _next_seed(self) -> int | None:
        """A seed drawn from the current env's generator, or None if it has none to give."""
        try:
            return int(self.env.unwrapped.np_random.integers(2**31))
        except Exception:
            return None
