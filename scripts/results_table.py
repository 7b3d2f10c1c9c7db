"""The results table: one row per config of a manifest, generated from run directories.

    python scripts/results_table.py benchmarks/results.yaml --root RUNS_ROOT [-o RESULTS.md] [--plots DIR]

The manifest (YAML) lists, per config, where its runs are and what it is compared with:

    - config: configs/ppo/cartpole.yaml
      runs: ppo-cartpole-seed*          # a glob under --root: one run directory per seed
      threshold: 475                    # steps-to-threshold is counted against this return
      anchor: {return: 500, budget: 100000, source: "rl-baselines3-zoo", protocol: "..."}
      plot: ppo-cartpole                # optional: the figure's file name (default: from config)

``config`` is the row's label: a shipped config's path, or for a family default the command's
``--algo ALGO --env ENV`` (``benchmarks/defaults.yaml``).

Each run directory is what ``pytorchrl train`` writes: ``config.yaml`` (env, algorithm, seed),
``progress.csv`` (the evaluation curve) and ``summary.json`` (final evaluation, wall-clock, the
CPU model). A config whose runs are missing still gets its row, saying so, so that the table
shows every config it promises. With ``--plots``, ``pytorchrl plot``'s figure of each config's
runs (mean and min-max band over seeds) is written beside it.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

COLUMNS = (
    "env", "algorithm", "config", "seeds", "final return (median)", "spread (min to max)", "steps to threshold",
    "wall-clock (median)", "CPU", "anchor", "protocol",
)


@dataclass(frozen=True)
class Run:
    """What the table needs of one run directory."""

    seed: int
    env_id: str
    algorithm: str
    final_return: float | None
    steps_to_threshold: int | None
    env_steps: int
    wall_time_s: float
    machine: str


def read_run(run_dir: Path, threshold: float | None) -> Run:
    """One run directory's figures; ``steps_to_threshold``: the first ``env_steps`` of
    progress.csv whose ``eval_return_mean`` is at least ``threshold`` (None: never, or no threshold)."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    reached = None
    if threshold is not None:
        with open(run_dir / "progress.csv", newline="") as f:
            for row in csv.DictReader(f):
                value = row.get("eval_return_mean") or ""
                if value and float(value) >= threshold:
                    reached = int(float(row["env_steps"]))
                    break
    return Run(
        seed=int(config["run"]["seed"]), env_id=config["env"]["env_id"], algorithm=config["algorithm"]["name"],
        final_return=summary.get("final_eval_return_mean"), steps_to_threshold=reached, env_steps=int(summary["env_steps"]),
        wall_time_s=float(summary["wall_time_s"]), machine=summary.get("machine") or "not recorded",
    )


def table_row(entry: dict[str, Any], runs: Sequence[Run]) -> dict[str, str]:
    """The table's row of one manifest entry and its runs (none: a row that says so)."""
    anchor = entry.get("anchor") or {}
    anchor_text = f"{_number(anchor.get('return'))} in {_number(anchor.get('budget'))} steps ({anchor.get('source', 'no source')})" if anchor else "none"
    row = dict.fromkeys(COLUMNS, "")
    row.update(config=entry["config"], anchor=anchor_text, protocol=str(anchor.get("protocol", "")))
    if not runs:
        row.update(env="", algorithm="", seeds="no runs yet")
        return row
    finals = [r.final_return for r in runs if r.final_return is not None]
    reached = [r.steps_to_threshold for r in runs if r.steps_to_threshold is not None]
    steps = "" if entry.get("threshold") is None else (
        f"{len(reached)}/{len(runs)} reached {_number(entry['threshold'])}" + (f", median {_number(statistics.median(reached))}" if reached else "")
    )
    row.update(
        env=runs[0].env_id, algorithm=runs[0].algorithm, seeds=", ".join(str(r.seed) for r in sorted(runs, key=lambda r: r.seed)),
        **{
            "final return (median)": _number(statistics.median(finals)) if finals else "no evaluation",
            "spread (min to max)": f"{_number(min(finals))} to {_number(max(finals))}" if finals else "",
            "steps to threshold": steps,
            "wall-clock (median)": f"{statistics.median(r.wall_time_s for r in runs):,.0f} s",
            "CPU": "; ".join(sorted({r.machine for r in runs})),
        },
    )
    return row


def results_table(manifest: Path, root: Path) -> list[dict[str, str]]:
    """Every manifest entry's row (runs found with its ``runs`` glob under ``root``)."""
    return [table_row(entry, [read_run(p, entry.get("threshold")) for p in run_dirs(entry, root)]) for entry in entries(manifest)]


def entries(manifest: Path) -> list[dict[str, Any]]:
    return yaml.safe_load(manifest.read_text()) or []


def run_dirs(entry: dict[str, Any], root: Path) -> list[Path]:
    """The finished runs that ``entry``'s glob finds under ``root``: a ``summary.json`` that does
    not say ``interrupted`` (a run stopped to be resumed is not finished)."""
    if not entry.get("runs"):
        return []
    return sorted(p for p in root.glob(entry["runs"]) if (p / "summary.json").is_file() and _finished(p / "summary.json"))


def _finished(summary: Path) -> bool:
    return json.loads(summary.read_text()).get("stop_reason") != "interrupted"


def markdown(rows: Sequence[dict[str, str]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row[c] for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _number(value: Any) -> str:
    if value is None:
        return "?"
    value = float(value)
    return f"{value:,.0f}" if value == int(value) or abs(value) >= 100 else f"{value:,.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--root", type=Path, default=Path("."), help="where the manifest's run globs start (default: .)")
    parser.add_argument("-o", "--output", type=Path, help="write the table there (default: stdout)")
    parser.add_argument("--plots", type=Path, metavar="DIR", help="also write one curve figure per config with runs")
    args = parser.parse_args(argv)
    rows = results_table(args.manifest, args.root)
    text = markdown(rows)
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    if args.plots:
        from pytorchrl.plotting import plot_runs

        args.plots.mkdir(parents=True, exist_ok=True)
        for entry in entries(args.manifest):
            if found := run_dirs(entry, args.root):
                name = entry.get("plot") or Path(entry["config"]).with_suffix("").as_posix().replace("/", "-")
                plot_runs(found, output=args.plots / f"{name}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
