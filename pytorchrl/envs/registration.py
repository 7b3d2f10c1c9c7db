"""pytorchrl's own registered envs: a slow CartPole (a stand-in for an expensive simulator) and a
crashing one (fault injection, so anyone can reproduce the fault-tolerance runs)."""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class SlowCartPoleEnv(CartPoleEnv):
    """CartPole that sleeps ``step_sleep_s`` per step: a stand-in for an expensive simulator."""

    def __init__(self, step_sleep_s: float = 0.001, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_sleep_s = step_sleep_s

    def step(self, action: Any) -> Any:
        time.sleep(self.step_sleep_s)
        return super().step(action)


class EnvCrash(RuntimeError):
    """The failure ``pytorchrl/CrashingCartPole-v1`` injects with ``crash_mode: exception``."""


class CrashingCartPoleEnv(CartPoleEnv):
    """CartPole that fails at random: each ``step`` crashes with probability ``p_crash`` and
    stalls for ``stall_s`` seconds with probability ``p_stall``.

    The draws come from the env's own generator (seeded by ``reset(seed=...)``), so a seeded run
    crashes at the same steps every time.

    :param p_crash: crash probability per step.
    :param crash_mode: ``exception`` raises :class:`EnvCrash` from ``step``; ``exit`` ends the
        whole process at once (``os._exit``), as a segfault or an OOM kill would: use it in remote
        workers, it ends a local run.
    :param p_stall: probability per step of sleeping ``stall_s`` seconds first (a hung simulator).
    :param stall_s: length of a stall.
    :param crash_after_steps: also crash, for certain, at this step of the env's life (counted
        over episodes): a fault that comes back at the same point in every replacement.
    :param stall_after_steps: also stall, for certain, at this step of the env's life.
    """

    def __init__(
        self,
        p_crash: float = 0.0,
        crash_mode: str = "exception",
        p_stall: float = 0.0,
        stall_s: float = 0.0,
        crash_after_steps: int | None = None,
        stall_after_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        if crash_mode not in ("exception", "exit"):
            raise ValueError(f"crash_mode = {crash_mode!r} is not allowed: must be 'exception' or 'exit'")
        for name, p in (("p_crash", p_crash), ("p_stall", p_stall)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} = {p} is out of range: must be in [0, 1]")
        super().__init__(**kwargs)
        self.p_crash, self.crash_mode, self.p_stall, self.stall_s = p_crash, crash_mode, p_stall, stall_s
        self.crash_after_steps, self.stall_after_steps = crash_after_steps, stall_after_steps
        self.steps_taken = 0

    def step(self, action: Any) -> Any:
        self.steps_taken += 1
        if (self.p_stall and self.np_random.random() < self.p_stall) or self.steps_taken == self.stall_after_steps:
            time.sleep(self.stall_s)
        if (self.p_crash and self.np_random.random() < self.p_crash) or self.steps_taken == self.crash_after_steps:
            if self.crash_mode == "exit":
                os._exit(13)
            raise EnvCrash("pytorchrl/CrashingCartPole-v1 crashed (injected fault)")
        return super().step(action)


# CartPole's registration, under pytorchrl's names
for _name, _cls in (("SlowCartPole-v1", SlowCartPoleEnv), ("CrashingCartPole-v1", CrashingCartPoleEnv)):
    if f"pytorchrl/{_name}" not in gym.registry:
        gym.register(id=f"pytorchrl/{_name}", entry_point=f"{__name__}:{_cls.__name__}", max_episode_steps=500, reward_threshold=475.0)
