"""The instrumented CartPoles of the benchmarks and the tests: a slow one (a stand-in for an
expensive simulator, ``scaling``) and a crashing one (fault injection, ``fault_tolerance``).

They are not part of the library (an installed wheel does not carry them). Name them as
``env.env_id`` in the ``module:function`` form, which every process resolves by importing this
module (remote Ray workers and the CLI's subprocesses included, where a registration made in the
driver would be unknown), from the root of a checkout::

    pytorchrl train configs/ppo/cartpole_sync_2workers.yaml env.env_id=benchmarks.envs:crashing_cartpole \\
        "env.env_kwargs={p_crash: 0.0002, crash_mode: exit}" "env.eval_env_kwargs={}"
"""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

#: ``env.env_id`` of :func:`slow_cartpole` and :func:`crashing_cartpole`
SLOW_CARTPOLE = f"{__name__}:slow_cartpole"
CRASHING_CARTPOLE = f"{__name__}:crashing_cartpole"
#: CartPole-v1's time limit
CARTPOLE_MAX_EPISODE_STEPS = 500


class SlowCartPoleEnv(CartPoleEnv):
    """CartPole that sleeps ``step_sleep_s`` per step: a stand-in for an expensive simulator."""

    def __init__(self, step_sleep_s: float = 0.001, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_sleep_s = step_sleep_s

    def step(self, action: Any) -> Any:
        time.sleep(self.step_sleep_s)
        return super().step(action)


class EnvCrash(RuntimeError):
    """The failure :class:`CrashingCartPoleEnv` injects with ``crash_mode: exception``."""


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
            raise EnvCrash("CrashingCartPole crashed (injected fault)")
        return super().step(action)


def slow_cartpole(**kwargs: Any) -> gym.Env:
    """:class:`SlowCartPoleEnv` with CartPole-v1's time limit."""
    return gym.wrappers.TimeLimit(SlowCartPoleEnv(**kwargs), CARTPOLE_MAX_EPISODE_STEPS)


def crashing_cartpole(**kwargs: Any) -> gym.Env:
    """:class:`CrashingCartPoleEnv` with CartPole-v1's time limit."""
    return gym.wrappers.TimeLimit(CrashingCartPoleEnv(**kwargs), CARTPOLE_MAX_EPISODE_STEPS)
