"""Learning curves from run directories: ``pytorchrl plot RUN_DIR... [-o FILE.png]``.

Each run's ``progress.csv`` gives the curve. Runs whose resolved configs differ only in
``run.seed`` (and the bookkeeping keys below) are one group: a mean line with a min-max band
over the seeds, on the x values every run of the group reached (each run is interpolated onto
them). Different groups get different colours and a legend entry; ``metrics`` of more than one
name put one panel per metric side by side (``--compare``).
"""

from __future__ import annotations

import csv
import difflib
import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pytorchrl.utils.errors import InputError
from pytorchrl.utils.paths import check_output_file
from pytorchrl.utils.strict_yaml import load_yaml

#: keys that differ between runs of one experiment without making it another (not
#: ``target_steps``: annealed learning rates, clip ranges and epsilons are fractions of it)
RUN_KEYS = ("seed", "max_time_s", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints", "stop_at_return")
X_AXES = ("env_steps", "wall_time_s")
#: a curve of at most this many points gets a marker on each (a one-point line draws nothing)
MARKERS_UP_TO = 10


@dataclass
class Run:
    """One run directory's curve data."""

    path: Path
    columns: dict[str, list[float]]
    config: dict[str, Any] = field(default_factory=dict)
    #: the legend's label, where the caller names the run (a reference run of another library)
    name: str | None = None

    @property
    def group_key(self) -> str:
        config = json.loads(json.dumps(_resolved(self.config), default=str))
        for key in RUN_KEYS:
            config.get("run", {}).pop(key, None)
        return json.dumps([self.name, config], sort_keys=True)

    @property
    def label(self) -> str:
        if self.name is not None:
            return self.name
        algo, env = self.config.get("algorithm", {}).get("name"), self.config.get("env", {}).get("env_id")
        return f"{algo} {env}" if algo and env else self.path.name

    def series(self, x: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """The rows where ``metric`` has a value (evaluations are every few rows); an evaluation
        is drawn at the env steps of the weights it evaluated (``eval_env_steps``, where the run
        wrote it: the row that logs it may come later)."""
        xs, ys = np.asarray(self.columns[x]), np.asarray(self.columns[metric])
        evaluated = metric.startswith("eval_") and metric != "eval_time_s"  # the time is the row's interval's, as in TensorBoard
        if x == "env_steps" and evaluated and "eval_env_steps" in self.columns:
            made_at = np.asarray(self.columns["eval_env_steps"])
            xs = np.where(np.isnan(made_at), xs, made_at)
        keep = ~np.isnan(ys) & ~np.isnan(xs)
        return xs[keep], ys[keep]


def evaluated_steps(row: dict[str, str]) -> int:
    """The env steps of the weights a progress.csv row's evaluation evaluated: its
    ``eval_env_steps``, or the row's own steps where the run wrote none (an older run)."""
    return int(float(row.get("eval_env_steps") or row["env_steps"]))


def load_run(path: str | Path) -> Run:
    """Read ``progress.csv`` (and ``config.yaml``, for grouping) of a run directory.

    :raises InputError: when the directory has no readable ``progress.csv``.
    """
    path = Path(path)
    csv_path = path / "progress.csv"
    if not path.is_dir():
        raise InputError(f"run directory {str(path)!r} does not exist" if not path.exists() else f"{str(path)!r} is a file, not a run directory")
    if not csv_path.is_file():
        raise InputError(f"run directory {str(path)!r} has no progress.csv (is it a run directory of pytorchrl train?)")
    try:
        with csv_path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
    except UnicodeDecodeError as exc:
        raise InputError(f"{str(csv_path)!r} is not text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); is it a pytorchrl progress.csv?") from None
    long = next((i for i, row in enumerate(rows) if None in row), None)  # csv puts the fields past the header under None
    if long is not None:
        fields = len(reader.fieldnames or ()) + len(rows[long][None])  # type: ignore[index]
        raise InputError(f"{str(csv_path)!r} line {long + 2} has {fields} fields where its header has {len(reader.fieldnames or ())}; is it a pytorchrl progress.csv?")
    if not rows:
        raise InputError(f"{str(csv_path)!r} has no rows yet")
    columns = {name: [_number(row.get(name)) for row in rows] for name in rows[0]}
    x_name = next(iter(rows[0]))  # env_steps: a row without it as a number is drawn nowhere
    garbled = sum(1 for row in rows if row.get(x_name) not in (None, "") and math.isnan(_number(row.get(x_name))))
    if garbled:
        warnings.warn(f"{str(csv_path)!r}: {garbled} of its {len(rows)} rows have no number in {x_name} and are left out", stacklevel=2)
    config_path = path / "config.yaml"
    config = (load_yaml(config_path, "run config") or {}) if config_path.is_file() else {}  # the loader train uses: a recursive alias is one line
    return Run(path, columns, config)


def _resolved(config: dict[str, Any]) -> dict[str, Any]:
    """A run's config with every default written out, so that a run recorded before a key was
    added (at its default) groups with the runs made since; as recorded where it no longer
    reads (a key since removed), or where it is no pytorchrl config (a reference run's)."""
    if not config.get("env") or not config.get("algorithm"):
        return config
    from pytorchrl.config import ConfigError, config_to_dict, from_dict

    try:
        return config_to_dict(from_dict(config))
    except ConfigError:  # a config this release cannot read is compared as written
        return config


def figure_path(output: str | Path) -> Path:
    """Where matplotlib writes a figure saved as ``output``: a name without a suffix gets ``.png``."""
    output = Path(output)
    return output if output.suffix else output.with_name(output.name + ".png")


def _runs_csv(runs: list[Run]) -> str:
    """The progress.csv files of ``runs``, for a message: one named, or how many."""
    return repr(str(runs[0].path / "progress.csv")) if len(runs) == 1 else f"the {len(runs)} runs' progress.csv"


def _number(text: str | None) -> float:
    try:
        return float(text) if text not in (None, "") else math.nan
    except ValueError:
        return math.nan


def group_runs(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs by experiment (config without the seed), labelled, in the order first seen."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.group_key, []).append(run)
    labelled: dict[str, list[Run]] = {}
    for members in groups.values():
        label = members[0].label
        while label in labelled:  # two configs of one algorithm and env: tell them apart by directory
            label = f"{label} ({members[0].path.name})"
        labelled[label] = members
    return labelled


def _members(runs: list[Run]) -> str:
    """A group's legend suffix: ``(3 seeds)``, or ``(2 runs)`` when runs share a seed."""
    if len(runs) < 2:
        return ""
    seeds = {run.config.get("run", {}).get("seed") for run in runs}
    return f" ({len(runs)} seeds)" if len(seeds) == len(runs) else f" ({len(runs)} runs)"


def band(runs: list[Run], x: str, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x, mean, min, max)`` of ``metric`` over the ``runs`` that have it, on the first such
    run's x values within the range every run covers (from the latest first point to the earliest
    last one; their union there when the first run has none of them), each run interpolated
    linearly onto them: a run is never held flat past its own points. Runs with no range in common
    are averaged where they are: each point over the runs that cover it."""
    series = [(xs, ys) for xs, ys in (run.series(x, metric) for run in runs) if len(xs)]
    if not series:
        return (np.empty(0),) * 4  # type: ignore[return-value]
    start, end = max(xs[0] for xs, _ in series), min(xs[-1] for xs, _ in series)
    every = np.unique(np.concatenate([xs for xs, _ in series]))
    first = series[0][0]
    grid = first[(first >= start) & (first <= end)]
    if not len(grid):
        grid = every[(every >= start) & (every <= end)] if start <= end else every
    values = np.stack([np.where((grid >= xs[0]) & (grid <= xs[-1]), np.interp(grid, xs, ys), np.nan) for xs, ys in series])
    return grid, np.nanmean(values, 0), np.nanmin(values, 0), np.nanmax(values, 0)


def plot_runs(
    run_dirs: list[str | Path], *, metrics: tuple[str, ...] = ("eval_return_mean",), x: str = "env_steps", output: str | Path | None = None,
    names: dict[Path, tuple[str, int]] | None = None, metric_option: str = "--metric",
) -> Any:
    """Draw the curves of ``run_dirs`` (see the module doc) and save them to ``output`` if given.

    :param names: ``{run directory: (legend label, seed)}`` for runs without a pytorchrl
        ``config.yaml`` (the results table's same-protocol references): one group per label.
    :param metric_option: how the caller named the metrics, for messages (``--metric``, ``--compare``).

    :return: the matplotlib figure (its lines hold the plotted data).
    :raises InputError: for a directory without ``progress.csv``, an unknown metric or x axis, an
        ``output`` that cannot be written, nothing to draw, or matplotlib missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("plot needs matplotlib: pip install matplotlib") from None
    if x not in X_AXES:
        raise InputError(f"--x = {x!r} is not allowed; allowed: {', '.join(X_AXES)}")
    if output is not None:  # before any run is read: a typo in -o is found at once
        from matplotlib.backend_bases import FigureCanvasBase

        output = figure_path(output)
        kind, formats = output.suffix[1:].lower(), FigureCanvasBase.get_supported_filetypes()
        if kind not in formats:
            raise InputError(f"-o {str(output)!r}: {kind!r} is not an image format matplotlib writes; allowed: {', '.join(sorted(formats))}")
        check_output_file(output, "-o")
    runs = [load_run(d) for d in run_dirs]
    for run in runs:
        if names and run.path in names:
            run.name, seed = names[run.path]
            run.config = {"run": {"seed": seed}}
    for metric in metrics:
        if all(metric not in run.columns for run in runs):
            known = sorted({c for run in runs for c in run.columns})
            near = difflib.get_close_matches(metric, known, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else f"; columns: {', '.join(known)}"
            raise InputError(f"{metric_option} = {metric!r} is not a progress.csv column{hint}")
    for metric in metrics:
        if not any(len(run.series(x, metric)[0]) for run in runs if metric in run.columns):
            raise InputError(f"nothing to draw: no row of {_runs_csv(runs)} has both {x} and {metric} as numbers (yet)")
    fig, axes = plt.subplots(1, len(metrics), figsize=(6.4 * len(metrics), 4.2), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for i, (label, members) in enumerate(group_runs(runs).items()):
            usable = [r for r in members if metric in r.columns and len(r.series(x, metric)[0])]  # the runs that draw
            if not usable:
                continue
            grid, mean, low, high = band(usable, x, metric)
            colour = f"C{i % 10}"
            seeds = _members(usable)
            ax.plot(grid, mean, color=colour, label=label + seeds, marker="o" if len(grid) <= MARKERS_UP_TO else None, markersize=4)
            if len(usable) > 1 and len(grid) == 1:  # a band of one point has no area: a min-max bar instead
                ax.vlines(grid, low, high, color=colour, alpha=0.4)
            elif len(usable) > 1:
                ax.fill_between(grid, low, high, color=colour, alpha=0.2, linewidth=0)
        ax.set_xlabel(x)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    if output is not None:
        try:
            fig.savefig(output, dpi=110)
        except OSError as exc:  # a directory that went away, a full disk, a path the checks could not foresee
            raise InputError(f"-o {str(output)!r} cannot be written: {exc.strerror or exc}") from None
        finally:
            plt.close(fig)
    return fig
