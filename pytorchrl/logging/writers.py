"""Where metrics go: ``progress.csv``, TensorBoard, and a live progress line."""

from __future__ import annotations

import csv
import math
import sys
import time
from pathlib import Path
from typing import Any, Protocol, TextIO

from pytorchrl.utils.paths import write_text_atomic

#: the columns every progress.csv starts with, in this order (DESIGN.md §7)
REQUIRED_COLUMNS = (
    "env_steps", "updates", "wall_time_s", "fps", "train_return_mean", "eval_return_mean",
    "policy_lag_mean", "worker_restarts", "dropped_batches",
)


class Writer(Protocol):
    """Where the learner's log rows go: progress.csv, TensorBoard, Prometheus, Ray Tune.

    A writer that keeps what it wrote may also have ``rewind(env_steps)``: a resumed run calls it
    with its checkpoint's steps, and the writer drops the rows past them, which the run writes
    again (``progress.csv`` and TensorBoard do; a writer without it is left as it is)."""

    def write(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class CSVWriter:
    """Appends one row per log interval; the header is fixed by the first row (or the existing file)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.columns: list[str] | None = None
        if self.path.is_file() and self.path.stat().st_size > 0:
            with open(self.path, newline="") as f:
                self.columns = next(csv.reader(f), None)

    def write(self, row: dict[str, Any]) -> None:
        new = self.columns is None
        if self.columns is None:
            extra = sorted(k for k in row if k not in REQUIRED_COLUMNS)
            self.columns = [*REQUIRED_COLUMNS, *extra]
        with open(self.path, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore", restval="")
            if new:
                writer.writeheader()
            writer.writerow({k: _fmt(v) for k, v in row.items()})

    def rewind(self, env_steps: int) -> None:
        """A resume from a checkpoint at ``env_steps``: the rows past it go (they are written again)."""
        if not self.path.is_file():
            return
        lines = self.path.read_text().splitlines(keepends=True)
        if not lines:
            return
        keep = [lines[0]] + [ln for ln in lines[1:] if ln.split(",", 1)[0].isdigit() and int(ln.split(",", 1)[0]) <= env_steps]
        write_text_atomic(self.path, "".join(keep))

    def close(self) -> None:
        pass


def _fmt(value: Any) -> Any:
    if value is None:  # not measured in this interval (an evaluation not due)
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


class TensorBoardWriter:
    """Scalars under ``tb/``, keyed by env steps. Imports TensorBoard only when used."""

    def __init__(self, log_dir: str | Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = str(log_dir)
        self.writer = SummaryWriter(log_dir=self.log_dir)

    def rewind(self, env_steps: int) -> None:
        """The run goes on from a checkpoint at ``env_steps`` (a resume): the points logged past
        it, which the run now logs again, are dropped. A new event file starts with a session
        start at ``env_steps + 1``, from which TensorBoard purges what earlier files hold past it
        (as ``progress.csv`` is cut back)."""
        from torch.utils.tensorboard import SummaryWriter

        self.writer.close()
        self.writer = SummaryWriter(log_dir=self.log_dir, purge_step=env_steps + 1)

    def write(self, row: dict[str, Any]) -> None:
        step = int(row["env_steps"])
        evaluated_at = row.get("eval_env_steps")  # an evaluation goes at the steps of the weights it evaluated
        for key, value in row.items():
            if key not in ("env_steps", "eval_env_steps") and isinstance(value, (int, float)) and not isinstance(value, bool):
                at = int(evaluated_at) if key.startswith("eval_") and key != "eval_time_s" and evaluated_at is not None else step
                self.writer.add_scalar(_tb_tag(key), value, at)  # NaN shows as NaN
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def _tb_tag(key: str) -> str:
    if key.startswith(("train_", "eval_")):
        return key.replace("_", "/", 1)
    if key.endswith("_time_s") or key in ("fps", "wall_time_s"):
        return f"time/{key}"
    return f"learner/{key}"


class ProgressLine:
    """One live line (env steps, FPS, train/eval return, ETA) on a terminal; a line per log
    interval otherwise, so that CI logs and ``ray job logs`` stay readable.

    While the learner evaluates, the ETA gives way to ``evaluating 3/10 episodes`` (an Atari
    evaluation can take minutes: the line must show that it is alive); the last line, written by
    :meth:`close`, shows the run's overall figures and ``done``.
    """

    #: seconds between two lines while evaluating when the stream is not a terminal (a log file
    #: gets a sign of life, not a line per episode)
    LOG_EVALUATION_EVERY = 10.0

    def __init__(self, target_steps: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.target = target_steps
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self._last = time.monotonic()  # off a terminal, the first evaluation line also waits LOG_EVALUATION_EVERY
        self._last_eval: float | None = None  # shown until the next evaluation replaces it

    def due(self) -> bool:
        """Whether a live refresh would be shown now (so callers build the row only then)."""
        return self.enabled and self.live and time.monotonic() - self._last >= 0.25

    def format(self, m: dict[str, Any], status: str | None = None) -> str:
        """The line for the log row ``m``; ``status`` (e.g. ``evaluating 3/10 episodes``, ``done``)
        replaces the ETA."""
        steps, fps = m.get("env_steps", 0), m.get("fps") or 0.0
        if status is None:
            eta = max(self.target - steps, 0) / fps if fps > 0 else float("nan")  # a last rollout may overshoot the target
            status = f"eta {_dur(eta)}"
        evaluated = m.get("eval_return_mean")
        if evaluated is not None and not (isinstance(evaluated, float) and math.isnan(evaluated)):
            self._last_eval = evaluated
        return (
            f"steps {steps:>9,}/{self.target:,} ({100 * steps / self.target:5.1f}%) | fps {fps:8,.0f} | "
            f"train {_num(m.get('train_return_mean'))} | eval {_num(self._last_eval)} | "
            f"elapsed {_dur(m.get('wall_time_s', 0.0))} | {status}"
        )

    def evaluated(self, mean_return: float) -> None:
        """An evaluation's mean return, shown from the next line on: a parallel evaluation's result
        comes in between rows, into a row already held back, which the line has shown already."""
        self._last_eval = mean_return

    def update(self, m: dict[str, Any], *, force: bool = False) -> None:
        if not self.enabled or (not self.live and not force):
            return
        if self.live and not force and time.monotonic() - self._last < 0.25:
            return
        self._write(self.format(m))

    def evaluating(self, done: int, asked: int, m: dict[str, Any]) -> None:
        """Show evaluation progress: ``done`` of ``asked`` episodes, with the run's figures ``m``.
        Throttled like :meth:`update`; off a terminal, a line at most every
        :attr:`LOG_EVALUATION_EVERY` seconds."""
        if not self.enabled:
            return
        since = time.monotonic() - self._last
        if self.live:  # the first and last counts always: a short evaluation still shows both
            show = done in (0, asked) or since >= 0.25
        else:
            show = done > 0 and since >= self.LOG_EVALUATION_EVERY
        if not show:
            return
        self._write(self.format(m, f"evaluating {done}/{asked} episodes"))

    def _write(self, text: str) -> None:
        self._last = time.monotonic()
        _emit(self.stream, text, self.live)

    def close(self, final: dict[str, Any] | None = None, status: str = "done") -> None:
        """End the line; with ``final`` (the run's last row, its ``fps`` over the whole run), write
        it first with ``status`` (``done``, or why the run stopped short) in place of the ETA."""
        if not self.enabled:
            return
        if final is not None:
            self._write(self.format(final, status))
        if self.live:
            self.stream.write("\n")
            self.stream.flush()


class EvaluationProgress:
    """``evaluating 3/10 episodes | return mean 12.3 | elapsed 0:41`` for ``pytorchrl evaluate``,
    on stderr so that stdout keeps its one JSON line: live on a terminal, else a line every
    :attr:`LOG_EVERY` seconds and the last. Called with the returns so far (the ``on_episode``
    callback of :func:`pytorchrl.evaluation.evaluate_checkpoint`); ``[]`` when evaluation starts.
    """

    LOG_EVERY = 5.0

    def __init__(self, episodes: int, stream: TextIO | None = None) -> None:
        self.episodes = episodes
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self._start = time.monotonic()
        self._last = -math.inf
        self._shown = False

    def __call__(self, returns: list[float]) -> None:
        now = time.monotonic()
        last = len(returns) == self.episodes
        if not last and now - self._last < (0.25 if self.live else self.LOG_EVERY):
            return
        self._last, self._shown = now, True
        mean = f"{sum(returns) / len(returns):.1f}" if returns else "-"
        text = f"evaluating {len(returns)}/{self.episodes} episodes | return mean {mean} | elapsed {_dur(now - self._start)}"
        _emit(self.stream, text, self.live)

    def close(self) -> None:
        """End the live line (before the result, or an error line)."""
        if self.live and self._shown:
            self.stream.write("\n")
            self.stream.flush()


def _emit(stream: TextIO, text: str, live: bool) -> None:
    """Write ``text`` over the current terminal line (``live``), else as a line of its own."""
    stream.write("\r" + text + "\x1b[K" if live else text + "\n")
    stream.flush()


def _num(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "     -"
    return f"{value:7.1f}"


def _dur(seconds: float) -> str:
    if seconds is None or math.isnan(seconds) or math.isinf(seconds):
        return "-"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else f"{seconds // 60}:{seconds % 60:02d}"
