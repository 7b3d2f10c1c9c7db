"""Atari through ale-py: registration, the standard preprocessing, and whole-game scores.

``ALE/...`` ids are registered only when ale-py is imported (ale-py >= 0.9), so
:func:`register_atari` imports it on demand, and an ALE id without ale-py installed is one line
naming the extra to install. Preprocessing follows the usual protocol (Mnih et al. 2015 with
Machado et al. 2018's sticky actions, as in the v5 ids): noop reset (up to 30 no-ops), frame
skip 4 with max-pooling of the last two frames, 84x84 grey frames, 4 frames stacked (channels
first, ``uint8``), sticky actions with probability 0.25, FIRE pressed after each reset where
``env.atari.fire_reset`` asks (Breakout), and for training envs only: a life
lost ends the learner's episode while the game goes on, and rewards are clipped to their sign.
Evaluation envs play whole games with raw rewards.

Two implementations, chosen by ``env.vectorization``:

- ``native`` (``auto``'s choice): ale-py's ``AtariVectorEnv``, a C++ vector env with the
  preprocessing built in, stepped by its own threads (``env.atari.num_threads``);
- ``sync`` / ``async``: gymnasium's ``AtariPreprocessing`` and ``FrameStackObservation``
  around each env.

Both play whole games with raw rewards; :class:`~pytorchrl.envs.vec_env.VecEnv` makes the
training episodes: a drop in ``info["lives"]`` ends the learner's episode (the step after it is
masked like a reset step, as SB3's ``EpisodicLifeEnv`` spends a no-op there) while the game goes
on, and rewards are clipped after they are added to the game's score. Neither library's own
life-loss option does this: gymnasium's ``terminal_on_life_loss`` and ale-py's
``episodic_life`` both reset the whole game after the first life lost, which would train on
first lives only. ``progress.csv`` and evaluations show the score of whole games, never the
clipped per-life return.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from pytorchrl.utils.errors import InputError

EXTRA = "pip install ale-py opencv-python-headless (in a checkout: pip install -e '.[atari]')"


def is_atari_id(env_id: str) -> bool:
    """Whether ``env_id`` names an ale-py env (``ALE/...``, or a registered id served by ale-py)."""
    if env_id.startswith("ALE/"):
        return True
    spec = gym.registry.get(env_id)
    return spec is not None and "ale_py" in str(spec.entry_point)


def register_atari(env_id: str | None = None) -> bool:
    """Register ale-py's ids (a no-op once done); False if ale-py is not installed.

    :raises InputError: when ``env_id`` is an ALE id and ale-py is missing.
    """
    try:
        import ale_py
    except ImportError:
        if env_id is not None and env_id.startswith("ALE/"):
            raise InputError(f"env.env_id = {env_id!r} needs ale-py, which is not installed: {EXTRA}") from None
        return False
    gym.register_envs(ale_py)
    return True


def atari_spaces(env_id: str, atari: dict[str, Any], env_kwargs: dict[str, Any]) -> tuple[gym.Space, gym.Space]:
    """The preprocessed observation space (``frame_stack`` grey ``screen_size`` squares, ``uint8``)
    and the action space of an ALE id, without building the preprocessing."""
    register_atari(env_id)
    env = gym.make(env_id, full_action_space=atari["full_action_space"], **env_kwargs)
    action_space = env.action_space
    env.close()
    size = atari["screen_size"]
    return gym.spaces.Box(0, 255, (atari["frame_stack"], size, size), np.uint8), action_space


def make_atari_env(env_id: str, atari: dict[str, Any], *, env_kwargs: dict[str, Any], max_episode_steps: int | None) -> gym.Env:
    """One preprocessed env of an ALE id, with gymnasium's wrappers (see the module doc)."""
    register_atari(env_id)  # also in subprocesses that were spawned, not forked
    frames = atari["max_episode_frames"] if max_episode_steps is None else max_episode_steps * atari["frame_skip"]
    env = gym.make(
        env_id, frameskip=1, repeat_action_probability=atari["repeat_action_probability"], full_action_space=atari["full_action_space"],
        max_num_frames_per_episode=frames, **env_kwargs,
    )
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=atari["noop_max"], frame_skip=atari["frame_skip"], screen_size=atari["screen_size"], terminal_on_life_loss=False
    )
    if atari["fire_reset"]:
        env = FireReset(env)
    return gym.wrappers.FrameStackObservation(env, atari["frame_stack"])


class FireReset(gym.Wrapper):
    """Press FIRE (action 1) once after every reset, as ale-py's ``use_fire_reset`` does in its
    native vector env (``env.atari.fire_reset``): games such as Breakout stand still until it is
    pressed. Should that step end the game, the env is reset again."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
        if len(meanings) < 2 or meanings[1] != "FIRE":
            raise InputError(f"env.atari.fire_reset = true: this game has no FIRE action (its actions: {', '.join(meanings)})")

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(1)
        if terminated or truncated:
            return self.env.reset(**kwargs)
        return obs, info


#: the ALE's keyword arguments that ``env.atari`` keys set (the env's own name: the key's)
ATARI_SETS = {
    "frameskip": "frame_skip", "repeat_action_probability": "repeat_action_probability", "full_action_space": "full_action_space",
    "max_num_frames_per_episode": "max_episode_frames",
}


def _native_kwargs() -> set[str]:
    """The keyword arguments ale-py's ``AtariVectorEnv`` takes beyond those this module sets."""
    import inspect

    from ale_py.vector_env import AtariVectorEnv

    set_here = {
        "self", "game", "num_envs", "num_threads", "img_height", "img_width", "stack_num", "noop_max", "episodic_life",
        "reward_clipping", "use_fire_reset", *ATARI_SETS,
    }
    return set(inspect.signature(AtariVectorEnv.__init__).parameters) - set_here


def make_atari_vector_env(
    env_id: str, num_envs: int, *, atari: dict[str, Any], vectorization: str, env_kwargs: dict[str, Any],
    max_episode_steps: int | None, wrap: Callable[[Callable[[], gym.Env]], Callable[[], gym.Env]] | None = None,
) -> gym.vector.VectorEnv:
    """The preprocessed vector env of an ALE id (see the module doc).

    :param atari: the ``env.atari`` section as a dict.
    :param vectorization: ``auto`` / ``native``: ale-py's ``AtariVectorEnv``; ``sync`` / ``async``: gymnasium's.
    :param wrap: wraps each single-env constructor (``restart_failed_envs``; sync/async only).
    """
    register_atari(env_id)
    taken = {k: ATARI_SETS[k] for k in env_kwargs if k in ATARI_SETS}
    if taken:
        raise InputError(
            "env.env_kwargs " + ", ".join(f"{k!r} is env.atari.{key}'s to set" for k, key in taken.items())
            + ": set " + " and ".join(f"env.atari.{key}" for key in taken.values()) + " instead"
        )
    if env_kwargs.get("obs_type") == "ram":
        raise InputError("env.env_kwargs obs_type 'ram': pytorchrl's Atari preprocessing (env.atari) reads the screen; allowed: 'rgb' (the default) or 'grayscale'")
    if vectorization == "native" and wrap is not None:
        raise InputError(
            "env.vectorization = 'native' cannot be combined with env.restart_failed_envs = true "
            "(ale-py's vector env cannot recreate one of its envs); use 'sync' or 'async'"
        )
    native_kwargs = _native_kwargs()
    foreign = sorted(set(env_kwargs) - native_kwargs)
    if vectorization == "native" and foreign:
        raise InputError(
            f"env.env_kwargs {', '.join(map(repr, foreign))}: ale-py's vector env (env.vectorization = 'native') does not take "
            f"{'it' if len(foreign) == 1 else 'them'} (it takes {', '.join(sorted(native_kwargs))}); use env.vectorization 'sync' or 'async', whose gym.make does"
        )
    if vectorization in ("auto", "native") and wrap is None and not foreign:  # auto with keys only gym.make takes (mode, obs_type): sync
        from ale_py.vector_env import AtariVectorEnv

        game = gym.spec(env_id).kwargs.get("game")
        if game is None:
            raise InputError(f"env.env_id = {env_id!r} is not an ale-py game id; use env.vectorization 'sync'")
        frames = atari["max_episode_frames"] if max_episode_steps is None else max_episode_steps * atari["frame_skip"]
        return AtariVectorEnv(
            game, num_envs, num_threads=atari["num_threads"], frameskip=atari["frame_skip"], img_height=atari["screen_size"],
            img_width=atari["screen_size"], stack_num=atari["frame_stack"], noop_max=atari["noop_max"], episodic_life=False,
            reward_clipping=False, repeat_action_probability=atari["repeat_action_probability"], full_action_space=atari["full_action_space"],
            max_num_frames_per_episode=frames, use_fire_reset=atari["fire_reset"], **env_kwargs,
        )
    make: Callable[[], gym.Env] = functools.partial(
        make_atari_env, env_id, atari, env_kwargs=env_kwargs, max_episode_steps=max_episode_steps
    )
    if wrap is not None:
        make = wrap(make)
    cls = gym.vector.AsyncVectorEnv if vectorization == "async" else gym.vector.SyncVectorEnv
    return cls([make] * num_envs, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
