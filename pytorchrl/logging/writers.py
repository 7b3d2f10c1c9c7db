"""Where metrics go: ``progress.csv``, TensorBoard, and a live progress line."""

from __future__ import annotations

import csv
import math
import sys
import time
from pathlib import Path
from typing import Any, Protocol, TextIO

#: the columns every progress.csv starts with, in this order (DESIGN.md §7)
REQUIRED_COLUMNS = (
    "env_steps", "updates", "wall_time_s", "fps", "train_return_mean", "eval_return_mean",
    "policy_lag_mean", "worker_restarts", "dropped_batches",
)


class Writer(Protocol):
    """Where the learner's log rows go: progress.csv, TensorBoard, Prometheus, Ray Tune."""

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

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def write(self, row: dict[str, Any]) -> None:
        step = int(row["env_steps"])
        for key, value in row.items():
            if key != "env_steps" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(_tb_tag(key), value, step)  # NaN shows as NaN
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
    interval otherwise, so that CI logs and ``ray job logs`` stay readable."""

    def __init__(self, target_steps: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.target = target_steps
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.live = enabled and self.stream.isatty()
        self._last = 0.0

    def due(self) -> bool:
        """Whether a live refresh would be shown now (so callers build the row only then)."""
        return self.enabled and self.live and time.monotonic() - self._last >= 0.25

    def update(self, m: dict[str, Any], *, force: bool = False) -> None:
        if not self.enabled or (not self.live and not force):
            return
        now = time.monotonic()
        if self.live and not force and now - self._last < 0.25:
            return
        self._last = now
        steps, fps = m.get("env_steps", 0), m.get("fps") or 0.0
        eta = max(self.target - steps, 0) / fps if fps > 0 else float("nan")  # a last rollout may overshoot the target
        text = (
            f"steps {steps:>9,}/{self.target:,} ({100 * steps / self.target:5.1f}%) | fps {fps:8,.0f} | "
            f"train {_num(m.get('train_return_mean'))} | eval {_num(m.get('eval_return_mean'))} | "
            f"elapsed {_dur(m.get('wall_time_s', 0.0))} | eta {_dur(eta)}"
        )
        if self.live:
            self.stream.write("\r" + text + "\x1b[K")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.live:
            self.stream.write("\n")
            self.stream.flush()


def _num(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "     -"
    return f"{value:7.1f}"


def _dur(seconds: float) -> str:
    if seconds is None or math.isnan(seconds) or math.isinf(seconds):
        return "-"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else f"{seconds // 60}:{seconds % 60:02d}"
