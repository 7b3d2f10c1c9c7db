"""The log interval: what one progress row averages, sums and holds since the row before it."""

from __future__ import annotations

from collections import deque
from typing import Any

from pytorchrl.scheme.base.inference_servers import METRICS as INFERENCE_METRICS

#: per-update figures besides the algorithm's diagnostics whose interval means go into a row
UPDATE_METRICS = ("policy_lag_mean", "gradient_staleness", "worker_replace_s", *INFERENCE_METRICS)
#: per-update times summed over the interval
UPDATE_TIMES = ("collect_time_s", "gradient_time_s", "apply_time_s")


class LogInterval:
    """The figures of the log interval in progress: the means of the updates' diagnostics, the
    sums of their times, the evaluation taken in it, the returns and lengths of the last 100
    training episodes (kept across intervals), and where the interval began (env steps and
    wall-clock, for its FPS).

    :param algorithm_metrics: the diagnostics the algorithm's updates report (its ``metrics``):
        columns from the first row on, empty until an update reports them.
    """

    def __init__(self, algorithm_metrics: tuple[str, ...] = ()) -> None:
        self.algorithm_metrics = algorithm_metrics
        self.values: dict[str, list[float]] = {}  # a time_s key holds one running sum
        #: the evaluation columns of the row (empty: no evaluation in this interval)
        self.eval_row: dict[str, Any] = {}
        self.returns: deque[float] = deque(maxlen=100)
        self.lengths: deque[float] = deque(maxlen=100)
        #: the env steps and wall-clock seconds where the interval began
        self.mark = (0, 0.0)

    def add_update(self, info: dict[str, Any]) -> None:
        """One update's diagnostics and times."""
        for key in (*self.algorithm_metrics, *UPDATE_METRICS):
            if key in info and info[key] is not None:
                self.values.setdefault(key, []).append(info[key])
        for key in UPDATE_TIMES:
            if key in info:
                self.add_time(key, info[key])

    def add_time(self, key: str, seconds: float) -> None:
        self.values.setdefault(key, [0.0])[0] += seconds

    def add_episodes(self, returns: list[float], lengths: list[float]) -> None:
        self.returns.extend(returns)
        self.lengths.extend(lengths)

    def train_return_mean(self) -> float | None:
        return _mean(self.returns)

    def row(self, env_steps: int, wall_time_s: float, *, updates: int, episodes: int, policy_version: int, totals: dict[str, Any]) -> dict[str, Any]:
        """This interval's row: the run's position and ``totals`` (event counters, healthy
        workers), the interval's FPS, means and sums, and its evaluation."""
        steps0, wall0 = self.mark
        row: dict[str, Any] = {
            "env_steps": env_steps,
            "updates": updates,
            "wall_time_s": round(wall_time_s, 3),
            "fps": (env_steps - steps0) / (wall_time_s - wall0) if wall_time_s > wall0 else 0.0,
            "train_return_mean": _mean(self.returns),
            "train_length_mean": _mean(self.lengths),
            "episodes": episodes,
            "eval_return_mean": None,
            "eval_return_std": None,
            "eval_success_rate": None,  # goal envs (info["is_success"]); empty for the others
            # the env steps of the weights evaluated: a row logs an evaluation made at or before its
            # own env_steps (one made beside training, or due between two rows, comes in later)
            "eval_env_steps": None,
            "policy_version": policy_version,
            "policy_lag_mean": 0.0,
            **totals,
            "gradient_staleness": 0.0,
            # a column from the first row on (progress.csv's header is fixed by it): filled in an
            # interval in which a dead worker's replacement joined
            "worker_replace_s": None,
            "eval_time_s": 0.0,  # in every row: progress.csv's header is fixed by the first, often before an evaluation
        }
        row.update(dict.fromkeys(self.algorithm_metrics))
        for key, values in self.values.items():
            row[key] = values[0] if key.endswith("_time_s") else _mean(values)
        row.update(self.eval_row)
        return row

    def restart(self, env_steps: int, wall_time_s: float) -> None:
        """A new interval from here (the episodes' window goes on)."""
        self.values = {}
        self.eval_row = {}
        self.mark = (env_steps, wall_time_s)

    def state_dict(self) -> dict[str, Any]:
        """The interval in progress, so that a resumed run writes the rows this one would."""
        return {
            "returns": list(self.returns), "lengths": list(self.lengths), "interval": self.values, "eval_row": self.eval_row,
            "log_mark_steps": self.mark[0], "log_mark_wall_s": self.mark[1],
        }

    def load_state_dict(self, state: dict[str, Any], env_steps: int, wall_time_s: float) -> None:
        """Take :meth:`state_dict`'s keys back (an older checkpoint without the interval's: a new
        one from ``env_steps`` and ``wall_time_s``, the checkpoint's, which overstates the next
        row's FPS)."""
        self.returns.clear()  # the checkpoint's window, not added to what this learner saw before loading it
        self.lengths.clear()
        self.returns.extend(state["returns"])
        self.lengths.extend(state["lengths"])
        self.values = {k: list(v) for k, v in state.get("interval", {}).items()}
        self.eval_row = dict(state.get("eval_row", {}))
        self.mark = (int(state.get("log_mark_steps", env_steps)), float(state.get("log_mark_wall_s", wall_time_s)))


def _mean(values: Any) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None
