"""PPO from demonstrations (PPOD; Libardi et al. 2021, "Guided Exploration with Proximal Policy
Optimization using a Single Demonstration"): some episodes of a collection worker replay a
demonstration's actions, or one of the agent's own best episodes, instead of the policy's.

A *demonstration* is one episode of an env: its observations (``[T + 1, *obs]``, as the rollout
stores them: :func:`~pytorchrl.utils.spaces.obs_layout`), its actions (``[T, *action]``) and
rewards (``[T]``), and the env id it was recorded on, in an ``.npz`` file (:func:`save_demo`;
``pytorchrl evaluate RUN_DIR --save-demos DIR`` writes one per evaluated episode). Replaying one
needs an env that is deterministic from its first observation: Chain-v0, Atari without sticky
actions. So an env replays a demonstration only when its episode starts from the demonstration's
first observation, and hands back to the policy as soon as an observation differs from the
recorded one (counted as ``diverged``) or the recorded actions run out.

At every episode start a worker's env draws (from the worker's seeded acting stream, so local and
remote workers and resumed runs draw alike) what plays the episode: with probability ``rho`` a
demonstration, with ``phi`` one of the agent's best episodes (the paper's buffer of the agent's
top-return episodes, filled as the agent finds them: its share is 0 until the agent has one and
grows as it finds more), else the policy. Replayed steps enter the rollout as ordinary steps:
their log-probabilities are the acting policy's of the replayed actions, so PPO's ratio and
IMPALA's V-trace weights are well defined and the replay goes through the ordinary GAE/V-trace
path. The parts:

- :class:`DemoReplay`: the per-env replay state and the agent's best episodes; the storage feeds
  it every step (:meth:`DemoReplay.observe`) and it forces the actions of replaying envs
  (:meth:`DemoReplay.force`). Its state is the storage's, so checkpoints resume exactly.
- :class:`ReplayingPolicy`: an :class:`~pytorchrl.agent.contracts.ActingPolicy` around the
  worker's own that gives it the actions :class:`DemoReplay` replays with the step (the policy
  keeps those rows and scores them as it acts). The storage wraps the worker's policy with it
  (``RolloutStorage.wrap_policy``): the collection loop is unchanged.
- :class:`EpisodeRecorder`: the evaluated episodes of ``pytorchrl evaluate --save-demos``.
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pytorchrl.agent.contracts import Acted, ActingPolicy, ActionSlots
from pytorchrl.utils.errors import InputError
from pytorchrl.utils.paths import atomic_file

#: the ``format`` entry of a demonstration file
DEMO_FORMAT = "pytorchrl-demo-1"
#: what plays an episode
POLICY, DEMO, AGENT = 0, 1, 2
MODES = ("policy", "demo", "agent")


@dataclass(frozen=True)
class DemoSpec:
    """The ``algorithm.demos`` section as the storage needs it (picklable: it travels to remote
    workers, which read the files themselves).

    :param path: a demonstration file or a directory of them (absolute: a Ray worker's working
        directory is not the driver's).
    :param rho: share of episode starts that replay a demonstration.
    :param phi: share that replay one of the agent's best episodes (when it has any).
    :param buffer_size: the agent's best episodes kept.
    :param min_return: an agent episode's least return to enter the buffer (None: the lowest
        return among the demonstrations).
    :param env_id: the run's env (a demonstration of another env is refused).
    :param obs_shape: ``obs_dtype``, ``action_shape``, ``discrete``, ``num_actions``: the
        rollout's, for :func:`check_demos`.
    """

    path: str
    rho: float
    phi: float
    buffer_size: int
    min_return: float | None
    env_id: str
    obs_shape: tuple[int, ...]
    obs_dtype: str
    action_shape: tuple[int, ...]
    discrete: bool
    num_actions: int | None = None


@dataclass
class Episode:
    """One replayable episode: a demonstration (``obs`` recorded) or the agent's own (``crc``: a
    checksum of each observation after the first, instead of the observations themselves)."""

    obs0: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    name: str = ""
    obs: np.ndarray | None = None
    crc: np.ndarray | None = None

    @property
    def ret(self) -> float:
        return float(self.rewards.sum(dtype=np.float64))

    def state(self) -> dict[str, Any]:
        """As tensors and plain values (checkpoints load with ``weights_only=True``)."""
        out: dict[str, Any] = {"obs0": torch.from_numpy(self.obs0.copy()), "actions": torch.from_numpy(self.actions.copy()),
                               "rewards": torch.from_numpy(self.rewards.copy()), "name": self.name}
        if self.crc is not None:
            out["crc"] = torch.from_numpy(self.crc.copy())
        return out

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Episode:
        crc = state.get("crc")
        return cls(state["obs0"].numpy(), state["actions"].numpy(), state["rewards"].numpy(), state["name"],
                   crc=None if crc is None else crc.numpy())


# ------------------------------------------------------------------------------ files


def save_demo(path: str | Path, *, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, env_id: str) -> Path:
    """Write one demonstration (``obs``: ``[T + 1, ...]`` as the rollout stores them; ``actions``
    ``[T, ...]``; ``rewards`` ``[T]``) to ``path`` (``.npz``)."""
    obs, actions, rewards = np.asarray(obs), np.asarray(actions), np.asarray(rewards, dtype=np.float32)
    if not (len(obs) == len(actions) + 1 == len(rewards) + 1):
        raise ValueError(f"save_demo: {len(obs)} observations, {len(actions)} actions and {len(rewards)} rewards; need T + 1, T and T")
    path = Path(path)
    with atomic_file(path, what="demonstration") as f:  # np.savez would add .npz to a name without it; a full disk leaves no half file
        np.savez_compressed(f, format=np.array(DEMO_FORMAT), env_id=np.array(env_id), obs=obs, actions=actions, rewards=rewards)
    return path


def demo_files(path: str | Path, key: str = "algorithm.demos.path") -> list[Path]:
    """The demonstration files at ``path``: itself, or a directory's ``*.npz`` files in name order.

    :raises InputError: one line: a missing path, a directory without any.
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix == ".npz" and f.is_file())
        if not files:
            raise InputError(f"{key} = {str(path)!r} is a directory without demonstration files (*.npz)")
        return files
    if not p.exists():
        raise InputError(f"{key} = {str(path)!r} does not exist (a demonstration .npz file or a directory of them)")
    if not p.is_file():
        raise InputError(f"{key} = {str(path)!r} is not a file or a directory")
    return [p]


def load_demo(path: Path, key: str = "algorithm.demos.path") -> tuple[Episode, str]:
    """One demonstration file and the env id it was recorded on.

    :raises InputError: one line naming the file, when it is not a demonstration.
    """
    what = f"{key}: {str(path)!r} is not a demonstration (an .npz file of obs, actions and rewards, as `pytorchrl evaluate --save-demos` writes)"
    try:
        with np.load(path, allow_pickle=False) as npz:
            data = {k: npz[k] for k in npz.files}
    except Exception as exc:  # zipfile.BadZipFile, ValueError, OSError, EOFError...: all "not a demonstration"
        raise InputError(f"{what}: {type(exc).__name__}") from None
    missing = [k for k in ("obs", "actions", "rewards") if k not in data]
    if missing:
        raise InputError(f"{what}: no {', '.join(missing)}")
    obs, actions, rewards = data["obs"], data["actions"], data["rewards"]
    if rewards.ndim != 1 or not len(actions) or not (len(obs) == len(actions) + 1 == len(rewards) + 1):
        raise InputError(
            f"{what}: {len(obs)} observations, {len(actions)} actions and rewards of shape {rewards.shape}; "
            "an episode of T >= 1 steps has T + 1, T and (T,)"
        )
    if not np.issubdtype(rewards.dtype, np.number) or not np.isfinite(rewards.astype(np.float64)).all():
        raise InputError(f"{what}: its rewards are not all finite numbers")
    env_id = str(data["env_id"]) if "env_id" in data else ""
    return Episode(obs[0], actions, rewards.astype(np.float32), path.name, obs=obs), env_id


def load_demos(spec: DemoSpec, key: str = "algorithm.demos.path") -> list[Episode]:
    """Every demonstration at ``spec.path``, checked against the run's env (:func:`check_demos`)."""
    demos = []
    for f in demo_files(spec.path, key):
        demo, env_id = load_demo(f, key)
        check_demo(demo, env_id, spec, f, key)
        demos.append(demo)
    return demos


def check_demo(demo: Episode, env_id: str, spec: DemoSpec, path: Path, key: str = "algorithm.demos.path") -> None:
    """A demonstration fits the run: its env, its observations' and actions' shapes, dtypes and
    range (:class:`InputError`, one line naming the file, both shapes and the env)."""
    where = f"{key}: demonstration {str(path)!r}"
    if env_id and env_id != spec.env_id:
        raise InputError(f"{where} was recorded on env {env_id!r}; this run's env.env_id is {spec.env_id!r}")
    assert demo.obs is not None
    obs_shape, action_shape = tuple(demo.obs.shape[1:]), tuple(demo.actions.shape[1:])
    if obs_shape != spec.obs_shape:
        raise InputError(f"{where} has observations of shape {obs_shape}; env {spec.env_id!r} has {spec.obs_shape}")
    if action_shape != spec.action_shape:
        raise InputError(f"{where} has actions of shape {action_shape}; env {spec.env_id!r} has {spec.action_shape}")
    numeric = np.issubdtype(demo.obs.dtype, np.number) or demo.obs.dtype == np.bool_
    if not numeric or (spec.obs_dtype == "uint8" and demo.obs.dtype != np.uint8):
        raise InputError(f"{where} has observations of dtype {demo.obs.dtype}; env {spec.env_id!r} stores {spec.obs_dtype}")
    if spec.discrete:
        if not np.issubdtype(demo.actions.dtype, np.integer):
            raise InputError(f"{where} has actions of dtype {demo.actions.dtype}; env {spec.env_id!r} has integer actions")
        if spec.num_actions is not None and (demo.actions.min() < 0 or demo.actions.max() >= spec.num_actions):
            raise InputError(
                f"{where} has actions from {demo.actions.min()} to {demo.actions.max()}; env {spec.env_id!r} has {spec.num_actions} (0 to {spec.num_actions - 1})"
            )
    elif not np.issubdtype(demo.actions.dtype, np.floating) or not np.isfinite(demo.actions).all():
        raise InputError(f"{where} has actions of dtype {demo.actions.dtype} (or not finite); env {spec.env_id!r} has float actions")


def _crc(row: np.ndarray) -> int:
    """A checksum of one observation that is the same in every process (``hash`` of bytes is salted per process)."""
    return zlib.crc32(np.ascontiguousarray(row).view(np.uint8).data)


# ------------------------------------------------------------------------------ replay


#: episode starts drawn for a demonstration, none of which could start one, before a warning says so
UNMATCHED_WARNING = 20


class DemoReplay:
    """The replay state of a collection worker's envs and the agent's best episodes.

    :param spec: the demonstrations and shares (:class:`DemoSpec`).
    :param num_envs: envs of the worker.
    :param demos: the demonstrations (None: read from ``spec.path``).
    """

    def __init__(self, spec: DemoSpec, num_envs: int, demos: list[Episode] | None = None) -> None:
        self.spec, self.num_envs = spec, num_envs
        self.demos = load_demos(spec) if demos is None else demos
        self.min_return = spec.min_return if spec.min_return is not None else min(d.ret for d in self.demos)
        #: the agent's best episodes, highest return first (ties: the older first)
        self.best: list[Episode] = []
        #: episodes started per mode (policy, demo, agent), and replays handed back for a differing observation
        self.started = [0, 0, 0]
        self.diverged = 0
        #: episode starts drawn for a demonstration where none starts at the env's first observation
        self.unmatched = 0
        self._warned = False
        self._record = spec.buffer_size > 0 and spec.phi > 0
        self.restart()

    def restart(self) -> None:
        """Every env starts a new episode at its current observation (the envs were reset)."""
        n = self.num_envs
        self.pending = np.ones(n, dtype=bool)  # an episode starts at the observation acted on next
        self.mode = np.zeros(n, dtype=np.int64)  # what plays the rest of the current episode
        self.pos = np.zeros(n, dtype=np.int64)  # the replayed episode's next action
        self.current: list[Episode | None] = [None] * n
        # the policy's own episode so far (a candidate for the buffer): first observation, actions, rewards, checksums
        self.own: list[tuple[np.ndarray, list[np.ndarray], list[float], list[int]] | None] = [None] * n

    # ---------------------------------------------------------------- per step

    def force(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor | None:
        """Decide what plays the episodes that start at ``obs``, and write the replayed actions
        into ``actions`` (the step's rows, before the policy acts). Draws from torch's current generator
        (the worker's acting stream). :return: the rows replayed (a bool tensor), or None."""
        if self.pending.any():
            self._start(obs)
        replaying = self.mode != POLICY
        if not replaying.any():
            return None
        rows = actions.numpy()
        for i in np.flatnonzero(replaying):
            episode = self.current[i]
            assert episode is not None
            rows[i] = episode.actions[self.pos[i]]
        return torch.from_numpy(replaying)

    def _start(self, obs: torch.Tensor) -> None:
        spec, starting = self.spec, np.flatnonzero(self.pending)
        draws = torch.rand(len(starting), 2).numpy()  # the mode, then which episode of it
        obs_np = obs.numpy()
        for i, (u, v) in zip(starting.tolist(), draws):
            first = obs_np[i]
            mode, pool = POLICY, []
            if u < spec.rho:
                mode, pool = DEMO, [d for d in self.demos if np.array_equal(d.obs0, first)]
                self.unmatched += not pool
            elif u < spec.rho + spec.phi:
                mode, pool = AGENT, [e for e in self.best if np.array_equal(e.obs0, first)]
            if not pool:
                mode = POLICY  # nothing to replay from here (no agent episode yet, or another start)
            self.mode[i], self.pos[i], self.pending[i] = mode, 0, False
            self.current[i] = pool[min(int(v * len(pool)), len(pool) - 1)] if pool else None
            self.own[i] = (first.copy(), [], [], []) if mode == POLICY and self._record else None
            self.started[mode] += 1
        if not self._warned and self.started[DEMO] == 0 and self.unmatched >= UNMATCHED_WARNING:
            self._warned = True
            warnings.warn(
                f"algorithm.demos: none of the {len(self.demos)} demonstrations in {spec.path!r} starts at the observations "
                f"{spec.env_id} starts its episodes at ({self.unmatched} episode starts drawn for one, none matched): a "
                "demonstration replays only from its own first observation, so PPOD needs an env whose episodes start "
                "the same way (a fixed start, as pytorchrl/Chain-v0's); the run goes on without them",
                stacklevel=2,
            )

    def observe(self, actions: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, valid: np.ndarray, next_obs: np.ndarray) -> None:
        """One step of every env (as the storage received it; ``actions``: the row taken)."""
        valid = np.asarray(valid, dtype=bool)
        replaying = (self.mode != POLICY) & valid
        for i in np.flatnonzero(replaying):
            episode, k = self.current[i], int(self.pos[i])
            assert episode is not None
            if episode.obs is not None:
                same = np.array_equal(next_obs[i], episode.obs[k + 1])
            else:
                assert episode.crc is not None
                same = _crc(next_obs[i]) == int(episode.crc[k])
            self.pos[i] = k + 1
            if not same:
                self.diverged += 1
            if not same or k + 1 >= len(episode.actions):  # the policy plays on (not a candidate for the buffer)
                self.mode[i], self.current[i] = POLICY, None
        if self._record:
            for i in np.flatnonzero(valid):
                own = self.own[i]
                if own is not None:
                    own[1].append(np.array(actions[i]))
                    own[2].append(float(reward[i]))
                    own[3].append(_crc(next_obs[i]))
        ends = valid & (np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool))
        for i in np.flatnonzero(ends):
            own = self.own[i]
            if own is not None:
                self._offer(Episode(own[0], np.stack(own[1]), np.asarray(own[2], dtype=np.float32), crc=np.asarray(own[3], dtype=np.int64)))
            self.mode[i], self.current[i], self.own[i] = POLICY, None, None  # the reset step after it is no one's
        for i in np.flatnonzero(~valid):  # a reset step: an episode starts at next_obs (a restarted env cuts one short)
            self.pending[i], self.mode[i], self.current[i], self.own[i] = True, POLICY, None, None

    def _offer(self, episode: Episode) -> None:
        """Keep ``episode`` if it is among the ``buffer_size`` best (and not one already kept)."""
        ret, size = episode.ret, self.spec.buffer_size
        if ret < self.min_return or (len(self.best) >= size and ret <= self.best[-1].ret):
            return
        if any(e.ret == ret and np.array_equal(e.actions, episode.actions) and np.array_equal(e.obs0, episode.obs0) for e in self.best):
            return  # the same episode again: a copy would only weigh it more
        at = next((j for j, e in enumerate(self.best) if e.ret < ret), len(self.best))
        self.best.insert(at, episode)
        del self.best[size:]

    # ------------------------------------------------------------------- state

    def info(self) -> dict[str, Any]:
        """Counters since the start: episodes per mode, divergences, the buffer."""
        return {
            "demo_episodes": self.started[DEMO], "agent_replay_episodes": self.started[AGENT], "policy_episodes": self.started[POLICY],
            "replays_diverged": self.diverged, "best_episodes": len(self.best), "best_return": self.best[0].ret if self.best else None,
        }

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain values: the buffer, the counters and each env's episode in progress
        (a demonstration by its file name, an agent episode whole)."""
        envs = []
        for i in range(self.num_envs):
            episode, own = self.current[i], self.own[i]
            env: dict[str, Any] = {"pending": bool(self.pending[i]), "mode": int(self.mode[i]), "pos": int(self.pos[i])}
            if episode is not None:
                env["episode"] = {"name": episode.name} if self.mode[i] == DEMO else episode.state()
            if own is not None:
                env["own"] = {
                    "obs0": torch.from_numpy(own[0].copy()), "rewards": torch.tensor(own[2], dtype=torch.float64), "crc": torch.tensor(own[3], dtype=torch.int64),
                    "actions": torch.from_numpy(np.stack(own[1])) if own[1] else None,
                }
            envs.append(env)
        return {"best": [e.state() for e in self.best], "started": list(self.started), "diverged": self.diverged, "envs": envs}

    def load_state_dict(self, state: dict[str, Any], episodes: bool = True) -> None:
        """Restore; ``episodes=False``: only what outlives an episode (the buffer, the counters),
        for envs that could not be restored and start anew."""
        self.best = [Episode.from_state(e) for e in state["best"]]
        self.started, self.diverged = list(state["started"]), int(state["diverged"])
        if not episodes or len(state["envs"]) != self.num_envs:
            self.restart()
            return
        by_name = {d.name: d for d in self.demos}
        for i, env in enumerate(state["envs"]):
            self.pending[i], self.mode[i], self.pos[i] = env["pending"], env["mode"], env["pos"]
            saved = env.get("episode")
            episode = None if saved is None else by_name.get(saved["name"]) if self.mode[i] == DEMO else Episode.from_state(saved)
            if saved is not None and episode is None:
                self.mode[i] = POLICY  # its demonstration is gone from the directory: the policy plays on
            self.current[i] = episode
            own = env.get("own")
            self.own[i] = None if own is None else (
                own["obs0"].numpy(), [] if own["actions"] is None else list(own["actions"].numpy()),
                own["rewards"].tolist(), own["crc"].tolist(),
            )


class ReplayingPolicy:
    """The worker's :class:`~pytorchrl.agent.contracts.ActingPolicy` with :class:`DemoReplay`
    choosing the actions of the envs that replay an episode.

    The replayed actions are written into the step's slots first and given to the policy as
    such (:attr:`ActionSlots.given <pytorchrl.agent.contracts.ActionSlots>`): it still acts for
    every env (its noise stream is consumed as without replay), keeps the given rows, and a
    policy that scores while it acts scores them in the same pass, with the weights that acted.
    Until 2026-11-30 the replayed rows were overwritten after the act and scored by a second
    call: under asynchronous central inference the server's weights could change between the
    two, and a recurrent policy scored its whole rollout afterwards, with whatever weights the
    server held then.
    """

    def __init__(self, inner: ActingPolicy, replay: DemoReplay) -> None:
        self.inner, self.replay = inner, replay
        self.is_recurrent = inner.is_recurrent
        self.scores_while_acting = inner.scores_while_acting

    @property
    def version(self) -> int:
        return self.inner.version

    def act(self, obs: torch.Tensor, noise: torch.Tensor, slots: ActionSlots, state: torch.Tensor | None = None) -> Acted:
        forced = self.replay.force(obs, slots.action)
        return self.inner.act(obs, noise, slots if forced is None else slots._replace(given=forced), state)

    def __getattr__(self, name: str) -> Any:
        # everything else (draw_noise, score, evaluation_step, weights, a remote policy's extras) is the policy's own
        return getattr(self.__dict__["inner"], name)


# ------------------------------------------------------------------------------ recording


class EpisodeRecorder:
    """The episodes of a vector env, step by step, for ``evaluate --save-demos``: observations
    as the envs return them, actions as the policy chose them, rewards; next-step autoreset
    (a step with ``valid`` False is a reset step: an episode starts at its observation)."""

    def __init__(self) -> None:
        self._open: list[tuple[list[np.ndarray], list[np.ndarray], list[float]] | None] = []
        self._done: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        #: the kept episodes: ``(obs, actions, rewards)``
        self.episodes: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def reset(self, obs: torch.Tensor) -> None:
        self._open = [([np.array(o)], [], []) for o in obs.numpy()]
        self._done = {}

    def step(self, actions: torch.Tensor, next_obs: torch.Tensor, reward: torch.Tensor, done: torch.Tensor, valid: torch.Tensor) -> None:
        for i, ok in enumerate(valid.tolist()):
            ep = self._open[i]
            if not ok:  # a reset step: a new episode starts at next_obs
                self._open[i] = ([np.array(next_obs[i].numpy())], [], [])
            elif ep is not None:
                ep[0].append(np.array(next_obs[i].numpy()))
                ep[1].append(np.array(actions[i].numpy()))
                ep[2].append(float(reward[i]))
                if bool(done[i]):
                    self._done[i] = (np.stack(ep[0]), np.stack(ep[1]), np.asarray(ep[2], dtype=np.float32))
                    self._open[i] = None

    def keep(self, env_index: int) -> None:
        """The episode env ``env_index`` just finished counts."""
        episode = self._done.pop(env_index, None)
        if episode is not None:
            self.episodes.append(episode)

    def save(self, directory: Path, env_id: str) -> list[Path]:
        """Write the kept episodes as ``demo_NNN.npz``, numbered after the files already there."""
        directory.mkdir(parents=True, exist_ok=True)
        taken = {p.name for p in directory.iterdir()}
        paths, k = [], 0
        for obs, actions, rewards in self.episodes:
            while f"demo_{k:03d}.npz" in taken:
                k += 1
            paths.append(save_demo(directory / f"demo_{k:03d}.npz", obs=obs, actions=actions, rewards=rewards, env_id=env_id))
            taken.add(paths[-1].name)
        return paths


def record_scripted(env: Any, choose: Callable[[Any, np.ndarray], Any], *, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One episode of a gymnasium ``env`` whose observations are stored as they are (Box floats)
    with the scripted ``choose(env, obs) -> action``: ``(obs, actions, rewards)`` for :func:`save_demo`."""
    obs, _ = env.reset(seed=seed)
    observations, actions, rewards = [np.asarray(obs)], [], []
    done = False
    while not done:
        action = choose(env, obs)
        obs, reward, terminated, truncated, _ = env.step(action)
        observations.append(np.asarray(obs))
        actions.append(np.asarray(action))
        rewards.append(float(reward))
        done = terminated or truncated
    return np.stack(observations), np.stack(actions), np.asarray(rewards, dtype=np.float32)
