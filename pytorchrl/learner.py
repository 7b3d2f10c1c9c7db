"""The learner: drives the scheme's update worker to ``run.target_steps``; logs, evaluates,
checkpoints, stops, resumes."""

from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import sys
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from pytorchrl.config import Config, RunConfig, check_section, checked, config_to_dict, load_run_config
from pytorchrl.logging.interval import LogInterval
from pytorchrl.logging.writers import ProgressLine, Writer
from pytorchrl.run_dir import RunDirLock, check_new_run_dir, claim_run_dir, close_writers, open_writers, refuse_if_in_use
from pytorchrl.scheme.scheme import Scheme, build_scheme
from pytorchrl.utils.arrays import to_tensors
from pytorchrl.utils.checkpoint import (
    RUN_STATE_KEYS,
    first_problem,
    list_checkpoints,
    load_checkpoint,
    load_newest_checkpoint,
    nonfinite_tensor,
    prune_checkpoints,
    save_checkpoint,
    tidy_checkpoints,
)
from pytorchrl.utils.errors import CheckpointError, InputError, TrainingDiverged
from pytorchrl.utils.paths import check_run_dir, write_text_atomic
from pytorchrl.utils.runtime import code_version, cpu_model
from pytorchrl.utils.seeding import get_rng_state, seed_everything, set_rng_state
from pytorchrl.utils.signals import StopSignals
from pytorchrl.utils.strict_yaml import dump_config

#: event counters kept over the whole run (and its checkpoints)
_COUNTS = ("dropped_batches", "preempted_batches", "lost_batches", "worker_restarts", "env_restarts", "nonfinite_updates")


class Learner:
    """Steps a :class:`Scheme` until ``run.target_steps``, ``run.max_time_s`` or ``run.stop_at_return``.

    One :meth:`step` is one gradient update. Logging, evaluation and checkpoints happen at the
    end of a round (once the data of one collection has been used), every ``log_every``,
    ``eval_every`` and ``checkpoint_every`` env steps.

    :param scheme: the workers.
    :param run: budget, logging, evaluation and checkpoint settings.
    :param run_dir: where ``progress.csv``, ``tb/``, ``checkpoints/`` and ``summary.json`` go
        (None: write nothing, e.g. in tests and custom scripts).
    :param progress: print the live progress line.
    :param writers: where each log row goes (default :func:`~pytorchrl.run_dir.open_writers`: progress.csv and
        TensorBoard in ``run_dir``, Prometheus when ``run.prometheus_port`` is set); more can be
        added to :attr:`writers` (e.g. the Ray Tune reporter).
    :param lock: the run directory's :class:`~pytorchrl.run_dir.RunDirLock`, taken by
        :meth:`from_config` and :meth:`resume`; without one, a ``run_dir`` must not hold another
        run, and it is locked here. The lock is released on :meth:`close`.
    :param identity: ``{"algorithm": ..., "env_id": ...}``, which :meth:`from_config` gives: its
        checkpoints record it, and a checkpoint of another is refused (None: not checked).
    """

    def __init__(
        self, scheme: Scheme, *, run: RunConfig | None = None, run_dir: str | Path | None = None, progress: bool = True,
        writers: list[Writer] | None = None, lock: RunDirLock | None = None, identity: dict[str, str] | None = None,
    ) -> None:
        self.run = run = RunConfig() if run is None else check_section(run, "run.")  # one built in Python skips from_dict's checks
        if not isinstance(scheme, Scheme):
            raise InputError(f"Learner(scheme): a pytorchrl.scheme.Scheme, got {type(scheme).__name__} (Learner.from_config builds one from a config)")
        if run_dir is not None and not isinstance(run_dir, (str, os.PathLike)):
            raise InputError(f"Learner(run_dir=...): a path or None, got {type(run_dir).__name__} {run_dir!r}")
        if run_dir is not None and lock is None:  # built in Python: a directory of its own, as from_config gives
            lock = claim_run_dir(check_new_run_dir(run_dir, "run directory"))
        self._lock = lock
        self.scheme = scheme
        self._closed = False
        #: the algorithm and env id of a learner built from a config: its checkpoints record them,
        #: and a checkpoint of another is refused (None: built in Python, not checked)
        self.identity = identity
        self._training = threading.Lock()  # held while train() runs: a second call (another thread) is refused
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.resumed_from: Path | None = None  # the checkpoint :meth:`resume` continued from
        self.env_steps = 0
        self.updates = 0
        self.episodes = 0
        self.policy_version = 0
        #: rollouts dropped (policy lag), preempted, lost with dead workers; workers and envs
        #: replaced; updates skipped for a non-finite gradient
        self.dropped_batches = self.preempted_batches = self.lost_batches = self.worker_restarts = self.env_restarts = 0
        self.nonfinite_updates = 0
        self._nonfinite_streak: list[str] = []  # what was non-finite in each skipped update of the current run of them
        self.healthy_workers: int | None = None  # remote collection workers alive (None: none remote)
        #: how many rollouts were used at each policy lag (versions behind the learner)
        self.policy_lags: Counter[int] = Counter()
        self._said_dropped = False  # lag_drop_warning said once
        #: dropped_batches and updates when this process started counting policy_lags (a resume
        #: restores the counters, not the lags): lag_drop_warning counts from here
        self._lag_base = (0, 0)
        self.wall_time_offset = 0.0
        self.solved_at: tuple[int, float] | None = None
        self.last_eval: float | None = None
        #: share of the last evaluation's episodes that ended with ``info["is_success"]`` (goal envs; None: not reported)
        self.last_eval_success: float | None = None
        self.stop_reason: str | None = None
        #: the code of each stretch of the run, in order (one entry unless resumed on other code)
        self.code: list[str] = [code_version()]
        self._stop_requested = False  # request_stop(): stop at the end of the round
        #: the log row in progress (the algorithm's diagnostics, its ``metrics``, as interval means)
        self._interval = LogInterval(tuple(getattr(scheme.algorithm, "metrics", ())))
        self._round_end = True
        self._round_wall_time_s: float | None = None  # wall_time_s when the last round ended
        self._eval_steps = -1
        #: run.eval_parallel: the env steps of the evaluation under way (None: none), and the log
        #: rows written since it started, held back until its result goes into the first of them
        self._pending_eval: int | None = None
        self._held_rows: list[dict[str, Any]] = []
        #: run.eval_parallel: the return target reached by an evaluation taken in between two of the
        #: points where the run may stop on it (the next evaluation due, a checkpoint, the end)
        self._reached_at: tuple[int, float] | None = None
        self._start: float | None = None
        self._next = {name: every or math.inf for name, every in self._every().items()}
        #: the env steps where the last round ended (None: unknown, a checkpoint that did not keep it)
        self._round_mark: int | None = 0
        self._progress = ProgressLine(run.target_steps, enabled=progress)
        try:
            self.writers: list[Writer] = open_writers(run, self.run_dir) if writers is None else writers
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_config(
        cls, config: Config, *, run_dir: str | Path | None = None, progress: bool = True, reuse_run_dir: bool = False,
        write_config: bool = True, lock_wait_s: float = 0.0,
    ) -> Learner:
        """Seed, build the scheme from ``config`` and, with a ``run_dir``, write ``config.yaml`` there.

        :param config: checked as a config file's values are (:func:`~pytorchrl.config.checked`),
            so one built or changed in Python gets the same one-line errors.
        :param reuse_run_dir: train in a ``run_dir`` that holds another run (its ``config.yaml``),
            as Ray Tune's PBT does when it restarts a trial in its own directory; by default that
            is refused, since the runs' logs and checkpoints would mix (:meth:`resume` continues one).
        :param write_config: write ``config.yaml`` now (:meth:`resume` writes it once the
            checkpoint has loaded, so that a resume that fails leaves the run as it was).
        :param lock_wait_s: how long to wait for another process to let go of ``run_dir``
            (:class:`~pytorchrl.run_dir.RunDirLock`) before refusing it.
        :raises ConfigError: a bad config value, or a layout the Ray cluster cannot hold.
        :raises InputError: a ``run_dir`` that cannot be used or already holds a run.
        """
        config = checked(config)
        seed_everything(config.run.seed)
        if run_dir is not None:  # before a file is written
            run_dir = check_run_dir(run_dir, "run directory") if reuse_run_dir else check_new_run_dir(run_dir, "run directory")
        created = run_dir is not None and not run_dir.exists()
        writers: list[Writer] = []
        lock = None
        try:
            if run_dir is not None:
                lock = claim_run_dir(run_dir, lock_wait_s)
            writers = open_writers(config.run, run_dir)  # first: a port in use fails before Ray starts or a file is written
            scheme = build_scheme(config)
        except BaseException:
            close_writers(writers)
            if lock is not None:
                lock.release()
            if created and run_dir is not None:  # a run that could not start leaves no directory behind
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        if run_dir is not None and write_config:
            _write_config(run_dir, config)
        identity = {"algorithm": config.algorithm.name, "env_id": config.env.env_id}
        return cls(scheme, run=config.run, run_dir=run_dir, progress=progress, writers=writers, lock=lock, identity=identity)

    @classmethod
    def resume(cls, run_dir: str | Path, overrides: list[str] | tuple[str, ...] = (), *, progress: bool = True) -> Learner:
        """Rebuild the run in ``run_dir`` from its ``config.yaml`` (plus ``overrides``, e.g. a larger
        ``run.target_steps``) and continue from its newest readable checkpoint.

        :raises CheckpointError: when the directory has no readable checkpoint.
        :raises InputError: when it is missing, not a directory, has no config or run files of the
            wrong kind (:func:`~pytorchrl.utils.paths.check_run_dir`).
        :raises ConfigError: for an override of a key the checkpoint fixes (its network, algorithm
            or observations: :data:`~pytorchrl.config_applicability.TRAINED_KEYS`).
        """
        run_dir = check_run_dir(run_dir, "--resume", resume=True)
        config = load_run_config(run_dir, overrides, resume=True)  # first: a bad config or override is told before the checkpoints are read
        if not list_checkpoints(run_dir / "checkpoints"):
            refuse_if_in_use(run_dir)  # still training: not stopped
            raise CheckpointError(
                f"--resume {str(run_dir)!r}: the run stopped before its first checkpoint, so there is nothing to resume; "
                "train it again in a new --run-dir (or remove this one)"
            )
        checkpoint, state, meta = load_newest_checkpoint(run_dir / "checkpoints")
        before = set(run_dir.rglob("*"))
        learner = cls.from_config(config, run_dir=run_dir, progress=progress, reuse_run_dir=True, write_config=False)
        try:
            learner.load_state(state, where=checkpoint, meta=meta)
        except BaseException:  # the run stays as it was: its config, and no files of this attempt
            learner.close()
            for path in sorted(set(run_dir.rglob("*")) - before, reverse=True):
                path.rmdir() if path.is_dir() else path.unlink(missing_ok=True)
            raise
        _write_config(run_dir, config)
        learner.resumed_from = checkpoint
        learner.continue_round()
        reached = {  # a run resumed past where it stops stops at once: say why, and what would train on
            "stop_at_return": f"run.stop_at_return = {config.run.stop_at_return} was reached (at {learner.env_steps:,} env steps)",
            "target_steps": f"run.target_steps = {config.run.target_steps:,} is already reached (the run is at {learner.env_steps:,} env steps)",
            "max_time_s": f"run.max_time_s = {config.run.max_time_s} is used up (the run has trained {learner.wall_time_s:,.0f} s)",
        }
        advice = {
            "stop_at_return": "run.stop_at_return=null", "target_steps": f"a larger one, e.g. run.target_steps={2 * learner.env_steps}",
            "max_time_s": "a larger one, or run.max_time_s=null",
        }
        reason = learner._stop_reason()
        if reason is not None:
            warnings.warn(f"{reached[reason]}, so it stops at once; to train on, resume with {advice[reason]}", stacklevel=2)
        return learner

    # ------------------------------------------------------------------------ stepping

    def step(self) -> dict[str, Any]:
        """One gradient update (collecting first when the round's data is used up).

        :return: the update's info: the algorithm's diagnostics, plus collection info
            (``env_steps``, episode returns) on the first update of a round.
        """
        self._check_open("step")
        if self._start is None:
            self._start = time.perf_counter()
        info = self.scheme.update_worker.step()
        if not info.get("skipped"):
            self.updates += 1
        self.policy_version = info.get("policy_version", self.policy_version)
        for key in _COUNTS:  # collection events, and gradients lost with dead gradient workers
            setattr(self, key, getattr(self, key) + info.get(key, 0))
        if "env_steps" in info:
            self._on_collection(info)
        if info.get("nonfinite_updates"):
            self._on_nonfinite(info)
        elif not info.get("skipped"):
            self._nonfinite_streak.clear()
        self._interval.add_update(info)
        self._round_end = bool(info.get("round_end", True))
        if self._round_end:
            # schedules (an annealed learning rate or clip range, exploration, PER's beta) move
            # once a round, from the steps taken so far: every update of a round uses one value,
            # round k of N the value at k / N, as CleanRL's (the last round's learning rate is not 0)
            self.scheme.update_worker.set_progress(min(1.0, self.env_steps / self.run.target_steps))
            self._after_round()
        return info

    def _on_collection(self, info: dict[str, Any]) -> None:
        self.env_steps += info["env_steps"]
        self.episodes += len(info["episode_returns"])
        self.healthy_workers = info.get("healthy_workers", self.healthy_workers)
        self.policy_lags.update(info.get("policy_lags", ()))
        self._interval.add_episodes(info["episode_returns"], info["episode_lengths"])
        if not self._said_dropped and self.dropped_batches > self._lag_base[0]:  # nothing dropped since the base: nothing to tell
            scheme = self.scheme.config  # a replica's info counts its own workers and updates: no estimate from them
            workers = None if scheme.num_grad_workers and scheme.grad_communication == "asynchronous" else self.healthy_workers
            dropped, updates = self.dropped_batches - self._lag_base[0], self.updates - self._lag_base[1]
            said = lag_drop_warning(sum(self.policy_lags.values()), dropped, scheme.max_policy_lag, workers, updates, resumed=self._lag_base != (0, 0))
            if said is not None:
                self._said_dropped = True
                warnings.warn(said, stacklevel=2)

    def _on_nonfinite(self, info: dict[str, Any]) -> None:
        bad = next((f"{k} = {v}" for k, v in info.items() if isinstance(v, float) and not math.isfinite(v)), "the gradient norm")
        self._nonfinite_streak.append(bad)
        if len(self._nonfinite_streak) < self.run.max_nonfinite_updates:
            return
        newest = self.newest_checkpoint()
        where = f"the newest checkpoint, {newest}, is good" if newest else "no checkpoint was written before"
        raise TrainingDiverged(
            f"{type(self.scheme.algorithm).__name__}: {len(self._nonfinite_streak)} updates in a row had a non-finite gradient "
            f"(first: {self._nonfinite_streak[0]}) and were skipped (run.max_nonfinite_updates); {where}"
        )

    def newest_checkpoint(self) -> Path | None:
        """The newest checkpoint written in the run directory (None: none, or no run directory)."""
        directory = self.run_dir / "checkpoints" if self.run_dir is not None else None
        if directory is None or not directory.is_dir():
            return None
        steps = [(int(p.name.split("_")[1]), p) for p in directory.glob("step_*") if p.name.split("_")[1].isdigit()]
        return max(steps)[1] if steps else None

    def continue_round(self) -> None:
        """After :meth:`load_state`: the writers drop what they logged past the checkpoint
        (``progress.csv``'s rows, TensorBoard's points: the run logs them again), and the
        checkpoint's round does what it had left to do (with ``run.eval_parallel`` its checkpoint
        comes before its evaluation starts and its row is written; without, nothing is left)."""
        for writer in self.writers:
            rewind = getattr(writer, "rewind", None)  # optional (Writer): a user's writer may keep nothing
            if rewind is not None:
                rewind(self._interval.mark[0])
        self._after_round(resumed=True)

    def _after_round(self, *, resumed: bool = False) -> None:
        """Evaluate, log and checkpoint what is due at the end of a round. With
        ``run.eval_parallel`` the checkpoint comes first (an evaluation under way is not state a
        checkpoint can hold) and the round's evaluation starts after it, so that a resumed run
        starts it again from the same weights (``resumed``: called once more after loading)."""
        self._round_wall_time_s = self.wall_time_s
        parallel = self._parallel
        if parallel:
            self._settle_evaluation(block=False)
            if not resumed:
                self._checkpoint_if_due()
        log_due = self.env_steps >= self._next["log"]
        # a run's last row holds its final evaluation: made here, before the row is written, when
        # this round ends the run (else finish() would evaluate and write a second row at these
        # steps); a run stopped by its return target keeps the evaluation that reached it
        reason = self._stop_reason()
        final = log_due and reason is not None and reason != "stop_at_return" and self._eval_steps != self.env_steps
        evaluated = False
        if self.env_steps >= self._next["eval"] or final:
            if parallel and not final:
                self._settle_evaluation(block=True, commit=True)
                if self.solved_at is None:  # else the run stops at this round's end, on the evaluation that reached the target
                    self._start_evaluation()
            else:
                self.evaluate()
            self._advance("eval", self.run.eval_every)
            evaluated = True
        # a row holds one evaluation: when the next one comes in a round no later than the next
        # row's (run.eval_every below run.log_every, or rounds that cross both at once), it would
        # take this one's place, so this one gets a row of its own now (held, with
        # run.eval_parallel, until its result is in); the return target reached: in a row at once
        own_row = evaluated and not log_due and self._evaluation_before_row()
        if log_due or own_row or (self._interval.eval_row and self.solved_at is not None):
            self.log()
            self._advance("log", self.run.log_every)
        if not parallel:
            self._checkpoint_if_due()
        if self._progress.due():
            self._progress.update(self.metrics())
        self._round_mark = self.env_steps

    def _evaluation_before_row(self) -> bool:
        """Whether the next evaluation is made in a round no later than the next row's, judged by
        rounds of this round's length (one of another length can still cross both at once)."""
        ahead_eval, ahead_log = self._next["eval"] - self.env_steps, self._next["log"] - self.env_steps
        if math.isinf(ahead_eval):
            return False
        size = self.env_steps - self._round_mark if self._round_mark is not None else 0
        if size <= 0:  # a checkpoint from before the round's length was kept: by the steps
            return ahead_eval <= ahead_log
        return math.ceil(ahead_eval / size) <= math.ceil(ahead_log / size)

    @property
    def _parallel(self) -> bool:
        """Evaluations beside training: ``run.eval_parallel`` with periodic evaluations (the one at
        the end alone would only be waited for)."""
        return self.run.eval_parallel and self.run.eval_every > 0

    def _checkpoint_if_due(self) -> None:
        """The periodic checkpoint, unless this round ends the run: :meth:`finish` writes the
        final one after the last evaluation and row (a replay buffer's checkpoint is gigabytes:
        once is enough)."""
        if self.env_steps >= self._next["checkpoint"]:
            self._advance("checkpoint", self.run.checkpoint_every)  # first: the checkpoint holds the next one due
            ends = self._stop_reason() is not None or self._stop_requested
            if self.run_dir is not None and not ends:
                self.checkpoint()

    def _every(self) -> dict[str, int]:
        """The run's intervals in env steps between log rows, evaluations and checkpoints (0: none)."""
        return {"log": self.run.log_every, "eval": self.run.eval_every, "checkpoint": self.run.checkpoint_every}

    def _advance(self, name: str, every: int) -> None:
        while self._next[name] <= self.env_steps:
            self._next[name] += every

    @property
    def wall_time_s(self) -> float:
        """Seconds of training, over all sessions of a resumed run."""
        running = 0.0 if self._start is None else time.perf_counter() - self._start
        return self.wall_time_offset + running

    def done(self) -> bool:
        """True at the end of a round once the budget, the time limit or the return target is
        reached, or a stop was asked for (:meth:`request_stop`)."""
        if not self._round_end:
            return False
        reason = self._stop_reason() or ("interrupted" if self._stop_requested else None)
        if reason is not None:
            self.stop_reason = reason
        return self.stop_reason is not None

    def request_stop(self) -> None:
        """Stop :meth:`train` at the end of the current round, with a final checkpoint and
        ``stop_reason: interrupted``: what the first Ctrl-C or SIGTERM does. The round's end is where
        the state is whole (all of its updates applied, every rollout counted), so a synchronous
        run resumes exactly, as from a periodic checkpoint (an asynchronous one, as from a
        periodic checkpoint too: rollouts and gradients still in flight are not in it). Safe to
        call from another thread."""
        self._stop_requested = True

    def _stop_reason(self) -> str | None:
        """Why the run stops after the last round (None: it goes on). The time limit is judged at
        the round's end, so that :meth:`done` agrees with the decision :meth:`_after_round` made
        about the final evaluation."""
        wall = self.wall_time_s if self._round_wall_time_s is None else self._round_wall_time_s
        if self.solved_at is not None:
            return "stop_at_return"
        if self.env_steps >= self.run.target_steps:
            return "target_steps"
        if self.run.max_time_s is not None and wall >= self.run.max_time_s:
            return "max_time_s"
        return None

    def train(self, *, stop_signals: bool = True) -> dict[str, Any]:
        """Step until :meth:`done`, then evaluate, checkpoint and summarise.

        With ``stop_signals``, in the main thread, the first SIGINT (Ctrl-C) or SIGTERM asks for
        a stop at the end of the round (:meth:`request_stop`): the final checkpoint then resumes
        exactly. A second one stops at once: ``summary.json`` says ``interrupted``, no checkpoint
        is written (the state may be half way through a round), and the ``KeyboardInterrupt``
        propagates. Without (a Ray Tune trial: its process's signals are Ray's), the handlers
        are left alone.

        :return: the summary (also written to ``summary.json``).
        :raises RuntimeError: when the learner is closed, or ``train`` is already running (in another thread).
        """
        self._check_open("train")
        if not self._training.acquire(blocking=False):
            raise RuntimeError("Learner.train() is already running (in another thread): one run trains once at a time; wait for it, or call request_stop()")
        try:
            return self._train(stop_signals)
        finally:
            self._training.release()

    def _train(self, stop_signals: bool) -> dict[str, Any]:
        with StopSignals(self._on_stop_signal, enabled=stop_signals):
            try:
                while not self.done():
                    self.step()
                return self.finish()
            except KeyboardInterrupt:  # the second signal, in a round or in finish()
                self.stop_reason = "interrupted"
                self._write_held_rows()
                self._write_summary()  # no checkpoint: the newest one is the last whole state
                self._progress.close()
                raise
            except TrainingDiverged:
                self.stop_reason = "nonfinite_updates"
                self._write_held_rows()
                self._write_summary()  # no evaluation and no checkpoint: the newest one stays the good one
                raise

    def _on_stop_signal(self) -> None:
        self.request_stop()
        newline = "\n" if self._progress.live else ""  # below the live progress line
        try:  # in a signal handler: stderr may be closed (`| head`) or in the middle of a write
            print(
                f"{newline}pytorchrl: stopping at the end of this round, with a checkpoint; a second Ctrl-C or SIGTERM stops at once, without one",
                file=sys.stderr, flush=True,
            )
        except (OSError, ValueError, RuntimeError):
            pass

    def finish(self) -> dict[str, Any]:
        """Final evaluation (unless just done), log row, checkpoint and ``summary.json``. A run
        stopped on request (``interrupted``) is not evaluated and gets no extra log row: its
        checkpoint keeps the log interval in progress, so that a resumed run writes the rows an
        uninterrupted one would."""
        interrupted = self.stop_reason == "interrupted"
        self._settle_evaluation(block=True, commit=True)
        reached = self.stop_reason == "stop_at_return"  # with run.eval_parallel, at steps before these: that evaluation stands
        if not interrupted and (self.last_eval is None or (self._eval_steps != self.env_steps and not reached)):
            self.evaluate()
        if not interrupted and (self._interval.eval_row or self._interval.mark[0] != self.env_steps):
            self.log()
        if self.run_dir is not None:
            self.checkpoint()
        summary = self._write_summary()
        stopped = "stopped, resumable" if self.run_dir is not None else "stopped"  # a signal's stop: not "done"
        self._progress.close(self._progress_row(), stopped if interrupted else "done")
        return summary

    def _progress_row(self) -> dict[str, Any]:
        """The progress line's figures while evaluating and at the end: the FPS over the whole
        run (the log row's is the interval's, which may hold only an evaluation: 0)."""
        wall = self.wall_time_s
        return {
            "env_steps": self.env_steps, "wall_time_s": wall, "fps": self.env_steps / wall if wall > 0 else 0.0,
            "train_return_mean": self._interval.train_return_mean(), "eval_return_mean": self.last_eval,
        }

    def _write_summary(self) -> dict[str, Any]:
        summary = {
            "env_steps": self.env_steps,
            "updates": self.updates,
            "wall_time_s": round(self.wall_time_s, 3),
            "final_eval_return_mean": self.last_eval,
            **({} if self.last_eval_success is None else {"final_eval_success_rate": self.last_eval_success}),
            "solved_at_env_steps": self.solved_at[0] if self.solved_at else None,
            "solved_at_wall_time_s": round(self.solved_at[1], 3) if self.solved_at else None,
            "stop_reason": self.stop_reason or "target_steps",
            "worker_restarts": self.worker_restarts,
            "lost_batches": self.lost_batches,
            "dropped_batches": self.dropped_batches,
            "env_restarts": self.env_restarts,
            "nonfinite_updates": self.nonfinite_updates,
            "machine": cpu_model(),
            "code": self.code,
        }
        if self.run_dir is not None:
            write_text_atomic(self.run_dir / "summary.json", json.dumps(summary, indent=2))
        return summary

    # ---------------------------------------------------------------- eval, logging

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool | None = None) -> tuple[Any, Any]:
        """The policy's action for an observation as the env returns it (or a batch of them):
        ``action, state = learner.predict(obs)``, as Stable-Baselines3's ``model.predict``; see
        :meth:`Scheme.predict <pytorchrl.scheme.scheme.Scheme.predict>`. A saved run's policy:
        :func:`pytorchrl.evaluation.load_learner`.

        :param deterministic: the policy's mode (True) or a sample (False); None: as the run
            evaluates (``run.eval_deterministic``: the mode, but sampled for the Atari PPO
            configs, whose argmax policies can stall a game).
        """
        return self.scheme.predict(observation, state, episode_start, self.run.eval_deterministic if deterministic is None else deterministic)

    def evaluate(self) -> float:
        """Mean return over ``run.eval_episodes`` episodes (``run.eval_deterministic``) of the
        current weights; records solving. With ``run.eval_parallel`` the evaluation worker plays
        them (after any evaluation it has under way) and this waits for it."""
        self._check_open("evaluate")
        if self._parallel:
            self._start_evaluation()
            self._settle_evaluation(block=True, commit=True)
            assert self.last_eval is not None
            return self.last_eval
        start = time.perf_counter()
        asked = self.run.eval_episodes

        def show(returns: list[float]) -> None:  # an Atari evaluation takes minutes: the progress line counts its games
            self._progress.evaluating(len(returns), asked, self._progress_row())

        show([])
        returns = self.scheme.evaluate(asked, self.run.eval_deterministic, show)
        self._interval.add_time("eval_time_s", time.perf_counter() - start)
        self._record_evaluation(returns, self.scheme.eval_successes, self.env_steps)
        assert self.last_eval is not None
        return self.last_eval

    def _record_evaluation(self, returns: list[float], successes: list[bool], steps: int, *, commit: bool = True) -> None:
        """Take an evaluation of the weights at ``steps`` env steps: the last evaluation, the
        next row's evaluation columns, and the return target reached (``commit`` False: kept in
        :attr:`_reached_at` until a point where the run may stop on it)."""
        self.last_eval = sum(returns) / len(returns)
        self.last_eval_success = sum(successes) / len(successes) if successes else None
        self._eval_steps = steps
        self._interval.eval_row = {
            "eval_return_mean": self.last_eval, "eval_return_std": _std(returns), "eval_success_rate": self.last_eval_success, "eval_env_steps": steps,
        }
        self._progress.evaluated(self.last_eval)
        target = self.run.stop_at_return
        if target is not None and self.solved_at is None and self._reached_at is None and self.last_eval >= target:
            self._reached_at = (steps, self.wall_time_s)
        if commit:
            self._commit_reached()

    def _commit_reached(self) -> None:
        """The return target an evaluation reached becomes the run's (it stops at this round's end)."""
        self.solved_at, self._reached_at = self.solved_at or self._reached_at, None

    def _start_evaluation(self) -> None:
        """``run.eval_parallel``: start an evaluation of the current weights on the evaluation
        worker (after taking the result of the one under way) and go on training."""
        self._settle_evaluation(block=True)
        self.scheme.start_evaluation(self.run.eval_episodes, self.run.eval_deterministic)
        self._pending_eval = self.env_steps

    def _settle_evaluation(self, *, block: bool, commit: bool = False) -> None:
        """Take the result of the evaluation under way, if any, once it is in (``block``: wait
        for it; the time waited counts as ``eval_time_s``): it goes into the first row logged
        since it started, and the rows held back behind it are written. A return target it
        reaches stops the run only from a ``commit`` point (the next evaluation due, a
        checkpoint, the end), so that where a run stops does not depend on when a result came in."""
        if self._pending_eval is not None and (block or self.scheme.evaluation_ready()):
            start = time.perf_counter()
            steps, self._pending_eval = self._pending_eval, None
            result = self.scheme.evaluation_result()
            self._interval.add_time("eval_time_s", time.perf_counter() - start)
            self._record_evaluation(result["returns"], result["successes"], steps, commit=False)
            if self._held_rows:
                self._held_rows[0].update(self._interval.eval_row)
                self._interval.eval_row = {}
                self._write_held_rows()
        if commit:
            self._commit_reached()

    def _write_held_rows(self) -> None:
        """Write the rows held back for an evaluation (without it where it will not come in: the
        run stops on an error)."""
        held, self._held_rows = self._held_rows, []
        for row in held:
            self._write_row(row)

    def metrics(self) -> dict[str, Any]:
        """The current log row (interval means since the last :meth:`log`)."""
        totals = {**{key: getattr(self, key) for key in _COUNTS}, "healthy_workers": self.healthy_workers}
        return self._interval.row(
            self.env_steps, self.wall_time_s, updates=self.updates, episodes=self.episodes, policy_version=self.policy_version, totals=totals
        )

    def log(self) -> dict[str, Any]:
        """Write the current row to progress.csv and TensorBoard and start a new interval."""
        row = self.metrics()
        if self._pending_eval is not None:  # its result goes into this row: written when it is in
            self._held_rows.append(row)
        else:
            self._write_row(row)
        self._progress.update(row, force=True)
        self._interval.restart(self.env_steps, self.wall_time_s)
        return row

    def _write_row(self, row: dict[str, Any]) -> None:
        for writer in self.writers:
            writer.write(row)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint holds (counters, the scheme's state, the RNG streams): :meth:`load_state` takes it back."""
        counters = {
            "env_steps": self.env_steps, "updates": self.updates, "episodes": self.episodes,
            "policy_version": self.policy_version, "wall_time_s": self.wall_time_s,
            **{key: getattr(self, key) for key in _COUNTS},
            "next": {k: (None if math.isinf(v) else v) for k, v in self._next.items()}, "every": self._every(),
            "solved_at": list(self.solved_at) if self.solved_at else None,
            "last_eval": self.last_eval, "last_eval_success": self.last_eval_success, "eval_steps": self._eval_steps,
            "round_mark": self._round_mark,  # where the round before ended: the checkpoint's round finishes with its length
            **self._interval.state_dict(),  # the log interval in progress, so that a resumed run writes the rows this one would
            "code": list(self.code),
        }
        return {"learner": counters, "scheme": self.scheme.state_dict(), "rng": get_rng_state()}

    def _check_identity(self, meta: dict[str, Any], where: str | Path | None) -> None:
        """Refuse a checkpoint (its ``meta.json``) of another algorithm or env than this learner's
        (:attr:`identity`; checkpoints written before it was recorded are not checked)."""
        mine = self.identity or {}
        theirs = {key: meta[key] for key in mine if key in meta}
        if any(theirs[key] != mine[key] for key in theirs):
            raise CheckpointError(
                f"checkpoint {str(where)!r} is of a {meta.get('algorithm', '?')} run on {meta.get('env_id', '?')}; this learner is "
                f"{mine['algorithm']} on {mine['env_id']}: load a checkpoint of this run"
            )

    def load_state(self, state: dict[str, Any], *, where: str | Path | None = None, meta: dict[str, Any] | None = None) -> None:
        """Continue from a checkpoint's state (counters, weights, optimizer, envs, RNG streams);
        ``where``: the checkpoint, named with the run's config.yaml if it does not fit them;
        ``meta``: its ``meta.json``, refused when it is of another algorithm or env (:attr:`identity`)."""
        if meta is not None:
            self._check_identity(meta, where)
        self._settle_evaluation(block=True)  # one under way is of weights about to be replaced: its rows are written first
        try:
            c = state["learner"]
            self.scheme.load_state_dict(state["scheme"])
            self.env_steps, self.updates, self.episodes = int(c["env_steps"]), int(c["updates"]), int(c["episodes"])
            self.policy_version = int(c["policy_version"])
            for key in _COUNTS:
                setattr(self, key, int(c.get(key, 0)))
            self.wall_time_offset = float(c["wall_time_s"])
            self._start = None  # this session's clock starts again at the next step (a trained learner that loads: not from its first)
            self._next = {k: (math.inf if v is None else v) for k, v in c["next"].items()}
            self.last_eval = c["last_eval"]
            self._resume_schedule(c.get("every"), tuple(c["solved_at"]) if c["solved_at"] else None)
            self.last_eval_success = c.get("last_eval_success")
            before = [str(v) for v in c.get("code", [])]  # older checkpoints: unknown
            self.code = [*before, code_version()] if before[-1:] != [code_version()] else before
            self._interval.load_state_dict(c, self.env_steps, self.wall_time_offset)
            self._eval_steps = int(c.get("eval_steps", -1))
            self._round_mark = None if c.get("round_mark") is None else int(c["round_mark"])
            self.policy_lags.clear()
            self._lag_base = (self.dropped_batches, self.updates)
            set_rng_state(state["rng"])
        except (KeyError, TypeError, RuntimeError, ValueError) as exc:
            config = self.run_dir / "config.yaml" if self.run_dir is not None and (self.run_dir / "config.yaml").is_file() else None
            named = f"checkpoint {str(where)!r}" if where is not None else "checkpoint"
            against = f"this run's config ({str(config)!r})" if config is not None else "this run's config"
            raise CheckpointError(f"{named} does not match {against} ({first_problem(exc)})") from None
        self.scheme.update_worker.set_progress(min(1.0, self.env_steps / self.run.target_steps))

    def _resume_schedule(self, saved_every: dict[str, int] | None, solved_at: tuple[int, float] | None) -> None:
        """What is due next in a resumed run under its own config, which the resume's overrides
        may have changed: an interval kept goes on from the checkpoint's next point, another one
        (or one turned on) from its first multiple past the run's steps, one turned off (0) never
        (older checkpoints kept no intervals: a change shows only where one was turned on or off).
        The return target reached stays reached only if this config's target is one the
        evaluation that reached it meets (``run.stop_at_return=null`` or a higher one trains on)."""
        for name, every in self._every().items():
            if not every:
                self._next[name] = math.inf
            elif math.isinf(self._next[name]) or (saved_every is not None and saved_every.get(name) != every):
                self._next[name] = (self.env_steps // every + 1) * every
        target = self.run.stop_at_return
        reached = target is not None and self.last_eval is not None and self.last_eval >= target
        self.solved_at = solved_at if reached else None  # type: ignore[assignment]

    def load_checkpoint(self, path: str | Path) -> None:
        """Continue from the checkpoint directory ``path`` (one of this learner's algorithm and env)."""
        state, meta = load_checkpoint(path, RUN_STATE_KEYS)
        self.load_state(state, where=path, meta=meta)

    def checkpoint(self, path: str | Path | None = None) -> Path:
        """Write a checkpoint atomically (default ``run_dir/checkpoints/step_N``) and prune old ones.
        Taken at a round's end (after :meth:`train`, or a :meth:`step` that ended one:
        :attr:`round_end`), so that it resumes exactly; mid-round it is refused, as the state of the
        round under way (its batches, the rest of its updates) is no part of it.

        :raises InputError: mid-round, or a ``path`` that holds something other than a checkpoint."""
        self._check_open("checkpoint")
        if not self._round_end:
            raise InputError(
                f"Learner.checkpoint(): mid-round ({self.updates} updates, the round's collection used in part), a checkpoint would not "
                "resume exactly; step() until learner.round_end, or checkpoint after train()"
            )
        self._settle_evaluation(block=True, commit=True)  # an evaluation under way is no state a checkpoint can hold
        if path is None:
            if self.run_dir is None:
                raise ValueError("checkpoint() needs a path when the learner has no run_dir")
            path = self.run_dir / "checkpoints" / f"step_{self.env_steps}"
        meta = {
            **(self.identity or {}),
            "env_steps": self.env_steps, "updates": self.updates, "policy_version": self.policy_version,
            "wall_time_s": round(self.wall_time_s, 3), "created": datetime.datetime.now().isoformat(timespec="seconds"),
        }
        state = to_tensors(self.state_dict())  # workers without torch send numpy arrays
        bad = nonfinite_tensor(state["scheme"])
        if bad is not None:  # never write (and rotate in) a poisoned checkpoint
            newest = self.newest_checkpoint()
            raise TrainingDiverged(
                f"checkpoint at {self.env_steps} env steps not written: {bad} holds NaN or infinite values; "
                + (f"the newest checkpoint, {newest}, is good" if newest else "no checkpoint was written before")
            )
        out = save_checkpoint(path, state, meta)
        if self.run_dir is not None and Path(path).parent == self.run_dir / "checkpoints":
            tidy_checkpoints(self.run_dir / "checkpoints")  # this learner holds the run's lock: what a killed write left goes
            prune_checkpoints(self.run_dir / "checkpoints", self.run.keep_checkpoints)
        return out

    @property
    def round_end(self) -> bool:
        """Whether the last :meth:`step` ended a round (a checkpoint may be taken)."""
        return self._round_end

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the log writers and the scheme (its envs and remote workers); rows held for an
        evaluation still under way are written without it. Training after this is refused
        (:meth:`predict` still acts); closing twice does nothing more."""
        if self._closed:
            return
        self._closed = True
        try:
            self._write_held_rows()
            close_writers(self.writers)
            self.scheme.close()
        finally:
            if self._lock is not None:  # the run directory is free for a resume
                self._lock.release()

    def _check_open(self, what: str) -> None:
        if self._closed:
            resumable = self.run_dir is not None and (self.run_dir / "config.yaml").is_file()  # a learner built in Python writes none
            where = f"; continue the run with Learner.resume({str(self.run_dir)!r})" if resumable else ""
            raise RuntimeError(f"Learner.{what}(): the learner is closed (its workers and log files are){where}")


def _write_config(run_dir: Path, config: Config) -> None:
    write_text_atomic(run_dir / "config.yaml", dump_config(config_to_dict(config)))


def _std(values: list[float]) -> float:
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def lag_drop_warning(kept: int, dropped: int, bound: int | None, workers: int | None, updates: int, *, resumed: bool = False) -> str | None:
    """What to tell when ``scheme.max_policy_lag`` has dropped half or more of the first 20 or more
    rollouts (None: nothing to tell). Their env steps count towards ``run.target_steps`` and the
    FPS, yet nothing trains on them, so such a run looks fast and learns from a fraction of its
    frames. A rollout's lag counts from the oldest weights that chose one of its actions: while
    one of ``workers`` asynchronous workers collects, the others' rollouts are trained, U updates
    each (``updates`` over the kept rollouts whose updates are done), so it arrives about
    ``(workers - 1) x U`` versions old even when the learner keeps up (12 workers of a 16-update
    APPO rollout: 176). A bound of B keeps at most about ``min(workers, B // U + 1)`` of every
    ``workers`` rollouts, whatever the learner's speed. ``resumed``: the counts start at a resume."""
    seen = kept + dropped
    if bound is None or seen < 20 or 2 * dropped < seen:
        return None
    per_rollout = updates / max(kept - 1, 1)  # called with the newest kept rollout's first update made
    arrival = ""
    if workers is not None and workers > 1:
        arrival = (
            f"; with {workers} collection workers and {per_rollout:.0f} update{'' if round(per_rollout) == 1 else 's'} per rollout, a rollout is about "
            f"{(workers - 1) * per_rollout:.0f} versions old when it arrives even when the learner keeps up"
        )
    return (
        f"scheme.max_policy_lag = {bound} has dropped {dropped:,} of the first {seen:,} rollouts{' since the resume' if resumed else ''} ({100 * dropped / seen:.0f}%): their env steps "
        f"count towards run.target_steps and the FPS, but nothing trains on them{arrival}; raise scheme.max_policy_lag, or use fewer collection workers"
    )
