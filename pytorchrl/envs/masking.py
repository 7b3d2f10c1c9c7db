"""Action masking: where legal actions come from (``env.action_mask``), and an example env.

Masks reach the actors one way only: as the ``action_mask`` key of a Dict observation, packed
into the observation row like any key (:mod:`pytorchrl.utils.spaces`), so they travel through
vector envs, rollouts, replay and Ray with the observation they belong to and need no storage
of their own. An env that gives its mask in ``info["action_mask"]`` instead (``env.action_mask:
info``) is wrapped by :class:`InfoActionMask`, which moves the mask into the observation.
Actors read the mask's slice of the row (:func:`mask_slice`) and give illegal actions a logit
of -inf in effect (:data:`~pytorchrl.agent.actors.distributions.MASKED_LOGIT`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from pytorchrl.utils.spaces import dict_slices

__all__ = ["MASK_KEY", "InfoActionMask", "LegalMovesEnv", "check_mask_space", "mask_slice"]

MASK_KEY = "action_mask"


class InfoActionMask(gym.ObservationWrapper):
    """Moves ``info["action_mask"]`` (of ``reset`` and ``step``) into the observation: a Dict
    ``{"action_mask": mask, "obs": observation}`` (a Dict observation gets the key added)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        n = int(getattr(env.action_space, "n", 0))
        mask_space = gym.spaces.Box(0, 1, (n,), np.int8)
        inner = env.observation_space
        subs = dict(inner.spaces) if isinstance(inner, gym.spaces.Dict) else {"obs": inner}
        self.observation_space = gym.spaces.Dict({**subs, MASK_KEY: mask_space})
        self._mask = np.ones(n, dtype=np.int8)

    def _take(self, info: dict[str, Any]) -> None:
        if MASK_KEY not in info:
            raise ValueError(f"env.action_mask = 'info': the env's info has no {MASK_KEY!r} key (keys: {sorted(info)})")
        mask = np.asarray(info[MASK_KEY], dtype=np.int8)
        if mask.shape != self._mask.shape:
            raise ValueError(f"info['action_mask'] has shape {mask.shape}; a mask of shape {self._mask.shape}, one flag per action, is needed")
        self._mask = mask

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._take(info)
        return self.observation(obs), info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._take(info)
        return self.observation(obs), reward, terminated, truncated, info

    def observation(self, observation: Any) -> dict[str, Any]:
        base = dict(observation) if isinstance(observation, dict) else {"obs": observation}
        return {**base, MASK_KEY: self._mask}


def check_mask_space(observation_space: gym.Space, action_space: gym.Space, source: str) -> str | None:
    """None if masks from ``source`` fit the spaces, else what is wrong (one sentence)."""
    if not isinstance(action_space, gym.spaces.Discrete):
        return f"action masks need a Discrete action space, the env has {action_space}"
    if not isinstance(observation_space, gym.spaces.Dict) or MASK_KEY not in observation_space.spaces:
        return f"the observation space has no {MASK_KEY!r} key (it is {observation_space}); use 'info' for masks in info"
    mask = observation_space.spaces[MASK_KEY]
    shape = getattr(mask, "shape", None)
    if not isinstance(mask, gym.spaces.Box) or shape != (int(action_space.n),):
        where = "info['action_mask']" if source == "info" else f"Dict key {MASK_KEY!r}"
        return f"{where} must be a mask of shape ({int(action_space.n)},), one flag per action; it is {mask}"
    return None


def mask_slice(observation_space: gym.Space) -> slice:
    """Where the mask sits in a packed observation row."""
    assert isinstance(observation_space, gym.spaces.Dict)
    return dict_slices(observation_space)[MASK_KEY]


class LegalMovesEnv(gym.Env):
    """An example of masked actions: ``n`` actions, of which a random subset is legal at each step
    (at least one). Action ``a`` is worth ``(a + 1) / n``; the best play takes the most valuable
    legal action. An illegal action raises (so a run that takes one fails), which makes "a masked
    action is never taken" testable. The mask is given as ``info["action_mask"]`` and, with
    ``dict_obs``, also as the ``action_mask`` key of a Dict observation (the other key, ``values``,
    shows each action's worth times its legality).

    :param n: actions.
    :param p_legal: probability that each action is legal at a step.
    :param episode_length: steps per episode.
    :param dict_obs: a Dict observation with the mask, instead of a Box with the values alone.
    """

    def __init__(self, n: int = 6, p_legal: float = 0.5, episode_length: int = 16, dict_obs: bool = False) -> None:
        self.n, self.p_legal, self.episode_length, self.dict_obs = n, p_legal, episode_length, dict_obs
        self.action_space = gym.spaces.Discrete(n)
        values = gym.spaces.Box(0.0, 1.0, (n,), np.float32)
        self.observation_space = gym.spaces.Dict({MASK_KEY: gym.spaces.Box(0, 1, (n,), np.int8), "values": values}) if dict_obs else values
        self.worth = (np.arange(n, dtype=np.float32) + 1) / n
        self.mask = np.ones(n, dtype=np.int8)
        self.t = 0

    def _draw(self) -> tuple[Any, dict[str, Any]]:
        mask = (self.np_random.random(self.n) < self.p_legal).astype(np.int8)
        mask[int(self.np_random.integers(self.n))] = 1
        self.mask = mask
        values = (self.worth * mask).astype(np.float32)
        obs = {MASK_KEY: mask.copy(), "values": values} if self.dict_obs else values
        return obs, {MASK_KEY: mask.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._draw()

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        a = int(action)
        if not self.mask[a]:
            raise ValueError(f"pytorchrl/LegalMoves-v0: action {a} is illegal here (legal: {np.flatnonzero(self.mask).tolist()})")
        reward = float(self.worth[a])
        self.t += 1
        obs, info = self._draw()
        return obs, reward, self.t >= self.episode_length, False, info


if "pytorchrl/LegalMoves-v0" not in gym.registry:
    gym.register(id="pytorchrl/LegalMoves-v0", entry_point=f"{__name__}:LegalMovesEnv")
