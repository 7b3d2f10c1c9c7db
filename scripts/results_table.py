"""The results table: one row per config of a manifest, generated from run directories.

    python scripts/results_table.py benchmarks/results.yaml [--root RUNS_ROOT ...] [-o RESULTS.md | --into BENCHMARKS.md] [--plots DIR] [--archive DIR]
    python scripts/results_table.py benchmarks/results.yaml --commands [--seeds 0 1 2] [--root RUNS_ROOT ...]

The manifest (YAML) lists, per config, where its runs are and what it is compared with:

    - config: configs/ppo/cartpole.yaml
      runs: ppo-cartpole-seed*          # a glob under --root: one run directory per seed
      threshold: 475                    # steps-to-threshold is counted against this return
      anchor: {return: 500, budget: 100000, source: "rl-baselines3-zoo", protocol: "..."}
      plot: ppo-cartpole                # optional: the figure's file name (default: from config)
      metric: train                     # optional: what the row reports (default: eval)

The anchor's ``protocol`` is its own, in words; the row's "our protocol" column is not typed but
made from the config (:func:`our_protocol`): steps or frames, sticky actions, how evaluation
acts and over how many episodes.

``metric`` says which return a row reports, so that it compares with its anchor on the anchor's
protocol: ``eval`` (the default), the run's last evaluation (``summary.json``'s
``final_eval_return_mean``; deterministic, ``run.eval_episodes`` episodes), its steps to threshold
from ``eval_return_mean``; ``train``, the mean return of the last 100 training episodes
(``train_return_mean``, the sampled policy: what CleanRL and SLM-Lab report), its last value and
the first step it reaches the threshold. A ``train`` row says so in its final-return cell.

``reference`` (optional) names same-protocol reference runs, where the anchor is on another
protocol: ``{runs: GLOB, label: "SB3 TD3"}``, directories that ``scripts/sb3_reference.py``
writes (``settings.json``: the config, its overrides, the steps; ``progress.csv``: the
evaluation curve). One counts when it ran the row's config with the row's overrides for the
row's ``run.target_steps`` (``--steps`` or an override: the resolved values are compared, as a
run's are); its last evaluation goes into the anchor cell, median over seeds.

``published`` (optional) is a published learning curve's value at a step count, for rows that
stop short of their anchor's budget (the SAC and TD3 MuJoCo rows run to 300k of the zoo's 1M or
2M, and the zoo publishes no curves): ``{return: 2311.3, at: 300000, source: "...", settings:
"..."}``; ``settings`` says how that curve's runs differ from the row's config. It joins the
anchor cell as one more figure on the anchor's side.

The last column, "against the anchor" (:func:`against_text`), works the comparisons out: how many
seeds reached the anchor's return within its budget (within the steps run, where a row runs short
of the budget on purpose) in one evaluation at least, and how many ended at or above it where
that differs (the anchor is an agent's return at its budget, not a peak), then the median final return as a share of the anchor's return, of
the published value and of the reference's median (a difference where a return is negative).

``earlier`` (optional) keeps a row's figures from runs made before run records were kept, whose
directories were lost with their machine (the Atari runs of 2026-11-23 to 11-26, hours to days of
CPU each): ``{section: "a BENCHMARKS.md heading", runs: [{seed: 0, return: 35.9, steps: 2500608,
date: "2026-11-26", machine: "...", wall_s: 29207}]}``, each the final return a run of the row's
config reached at ``steps``, as that section reports it. A row with no kept run prints them
instead of "no runs yet", saying where they are typed from and that no record backs them; they
are compared by their final returns alone ("ended at or above", not "reached": the curves are in
the section). Once a kept run counts, the row is made from kept runs alone. ``record`` (optional)
is for a run whose record is kept but whose config has changed since at a key that is not neutral
(the GPU Pong row's ``scheme.max_policy_lag``): it says where the record is and how it differs,
in place of "lost", and the row's seeds say "earlier config".

``seeds`` (optional, default 0, 1 and 2) are the seeds a row is made of: a row with fewer
finished runs says which it lacks, and a run directory not finished (in progress, or stopped to
be resumed) is told on stderr. Files that would make a row wrong without a word (two runs of one
seed, a ``progress.csv`` that goes back in steps, a final return that is not finite or that no
evaluation in ``progress.csv`` backs) stop the table with one line naming the run.

``config`` is the row's label: a shipped config's path, or for a family default the command's
``--algo ALGO --env ENV`` (``benchmarks/defaults.yaml``). ``overrides`` (optional) lists the
``KEY=VALUE`` overrides its runs were made with beyond their seed.

A run counts for a row only when its saved ``config.yaml`` is that config with the row's
overrides and the run's seed, up to keys that change neither what is learned, how it is
evaluated nor when it stops (:data:`NEUTRAL_KEYS`: threads, checkpoints, where Ray runs, what workers reserve). A
run that differs elsewhere (another learning rate, budget, stopping rule or evaluation
protocol) is left out of the row and its figure with a warning naming the first keys that
differ, so that a row never mixes configs.

Each run directory is what ``pytorchrl train`` writes: ``config.yaml`` (env, algorithm, seed),
``progress.csv`` (the evaluation curve) and ``summary.json`` (final evaluation, wall-clock, the
CPU model). A config whose runs are missing still gets its row, saying so, so that the table
shows every config it promises. With ``--plots``, ``pytorchrl plot``'s figure of each config's
runs (mean and min-max band over seeds, and its reference runs' as another curve) is written beside it.

Run directories hold checkpoints (gigabytes for a replay buffer) and live outside the work tree,
so they do not outlive the machine that made them. The table is kept reproducible from the
repository by **run records**: ``--archive DIR`` copies what the table and the figures read of
each counted run (its ``config.yaml``, ``summary.json`` and the curve columns of
``progress.csv``, :data:`RECORD_COLUMNS`) into ``DIR/<run directory name>/``, a few kilobytes a
run. ``--root`` may be given several times; a run directory name found under more than one root
is taken from the first. The default root is the committed records (:data:`RECORDS`), so a
fresh checkout regenerates the table with no run directory at all.

``--into FILE`` writes the table into FILE in place of what stands between the lines
``<!-- results-table:NAME -->`` and ``<!-- /results-table:NAME -->``, NAME the manifest's stem
(``results``, ``defaults``): how BENCHMARKS.md's tables are kept, regenerated, never typed.

``--commands`` prints, instead of the table, the ``pytorchrl train`` command of every seed in
``--seeds`` that has no counted run yet, and the ``scripts/sb3_reference.py`` command of every
seed a row's reference lacks: what is left to run to fill the table. Its run
directory goes under the first ``--root`` given, else under ``runs/`` (never into the records). A
run begun there and stopped (it has a checkpoint) gets its ``--resume`` command instead.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import functools
import json
import math
import shlex
import shutil
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import yaml

REPO = Path(__file__).resolve().parent.parent
#: the committed run records (see the module doc): the default ``--root``
RECORDS = REPO / "benchmarks" / "runs"
#: the progress.csv columns a run record keeps: the table's and the figures' (``pytorchrl plot``
#: draws ``eval_return_mean`` against ``env_steps`` or ``wall_time_s``), and the training return
RECORD_COLUMNS = ("env_steps", "wall_time_s", "eval_return_mean", "eval_return_std", "eval_success_rate", "eval_env_steps", "train_return_mean", "fps")
#: config keys (dotted; a trailing dot: a whole section) a run may change without leaving its
#: row: they decide how fast and where it runs and what else it writes, not what it learns, how
#: its evaluations are made or when it stops. Not here: ``run.target_steps`` (PPO anneals over
#: it), ``run.stop_at_return`` and ``run.max_time_s`` (the final return is taken where the run
#: stops), ``run.log_every`` (a row shows the last evaluation before it, at the row's steps).
NEUTRAL_KEYS = (
    "run.seed", "run.torch_threads", "run.checkpoint_every", "run.keep_checkpoints", "run.prometheus_port", "run.device",
    "storage.checkpoint_buffer", "env.atari.num_threads", "env.vectorization", "scheme.ray.",
    # the same rows as inline evaluation; a return target stops up to eval_every later, on the same evaluation and steps
    "run.eval_parallel",
    # what the workers and servers reserve (the runs before 2026-11-26 saved the servers' num_gpus as 0.0, now null)
    "scheme.col_worker_resources.", "scheme.grad_worker_resources.", "scheme.inference_server.num_cpus", "scheme.inference_server.num_gpus",
)

COLUMNS = (
    "env", "algorithm", "config", "seeds", "final return (median)", "spread (min to max)", "steps to threshold",
    "wall-clock (median)", "CPU", "our protocol", "anchor", "anchor's protocol", "against the anchor",
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
    #: ``run.stop_at_return`` when the run stopped there: its final return is the evaluation that
    #: first reached it (picked for being high), not an agent's at the budget
    stopped_at: float | None = None
    #: the first step whose figure reached the anchor's return (None: never, or no anchor)
    steps_to_anchor: int | None = None


#: a manifest entry's ``metric`` -> the progress.csv column it reads
METRICS = {"eval": "eval_return_mean", "train": "train_return_mean"}


def read_run(run_dir: Path, threshold: float | None, metric: str = "eval", anchor: float | None = None) -> Run:
    """One run directory's figures, by ``metric`` (:data:`METRICS`; see the module doc):
    ``steps_to_threshold`` is the first ``env_steps`` of progress.csv whose metric column is at
    least ``threshold`` (an evaluation's own ``eval_env_steps`` where the run wrote them; None:
    never, or no threshold), ``steps_to_anchor`` the same for the anchor's return ``anchor``."""
    from pytorchrl.plotting import evaluated_steps

    column = METRICS[metric]
    config = _run_config(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    last = None
    reached: dict[float, int] = {}  # return -> the first step at or above it
    targets = [t for t in (threshold, anchor) if t is not None]
    if not (run_dir / "progress.csv").is_file():
        raise RunRecordError(f"{run_dir}: no progress.csv beside its summary.json")
    previous = -1
    with open(run_dir / "progress.csv", newline="") as f:
        for row in csv.DictReader(f):
            steps = int(float(row["env_steps"]))
            if steps <= previous:  # a resume truncates the rows past its checkpoint: two runs' rows here
                raise RunRecordError(f"{run_dir}: progress.csv goes back from {previous:,} to {steps:,} env steps (rows of two runs?)")
            previous = steps
            value = row.get(column) or ""
            if not value:
                continue
            last = float(value)
            if not math.isfinite(last):
                raise RunRecordError(f"{run_dir}: progress.csv has {column} = {value} at {steps:,} env steps")
            for target in targets:
                if target not in reached and last >= target:
                    reached[target] = evaluated_steps(row) if metric == "eval" else steps
    final = summary.get("final_eval_return_mean") if metric == "eval" else last
    if metric == "eval" and final is not None and (not math.isfinite(float(final)) or last is None):
        why = f"final_eval_return_mean = {final}" if last is not None else f"final_eval_return_mean = {final} but progress.csv has no evaluation"
        raise RunRecordError(f"{run_dir}: summary.json says {why}")
    return Run(
        seed=int(config["run"]["seed"]), env_id=config["env"]["env_id"], algorithm=config["algorithm"]["name"],
        final_return=final, steps_to_threshold=None if threshold is None else reached.get(threshold), env_steps=int(summary["env_steps"]),
        wall_time_s=float(summary["wall_time_s"]), machine=summary.get("machine") or "not recorded",
        stopped_at=config["run"].get("stop_at_return") if summary.get("stop_reason") == "stop_at_return" else None,
        steps_to_anchor=None if anchor is None else reached.get(anchor),
    )


@dataclass(frozen=True)
class Reference:
    """What the table needs of one same-protocol reference run (``scripts/sb3_reference.py``)."""

    seed: int
    final_return: float | None
    env_steps: int


def read_reference(run_dir: Path) -> Reference:
    """A reference run's seed, its last evaluation and the step it was made at."""
    settings = json.loads((run_dir / "settings.json").read_text())
    with open(run_dir / "progress.csv", newline="") as f:
        evaluations = [(int(float(row["env_steps"])), float(row["eval_return_mean"])) for row in csv.DictReader(f) if row.get("eval_return_mean")]
    steps, final = evaluations[-1] if evaluations else (int(settings["env_steps"]), None)
    return Reference(seed=int(settings["seed"]), final_return=final, env_steps=steps)


def reference_run_dirs(entry: dict[str, Any], root: Roots, repo: Path = REPO) -> list[Path]:
    """The reference runs of ``entry`` (its ``reference.runs`` glob under ``root``) that ran its
    config with its overrides to its ``run.target_steps``; one line on stderr for each other."""
    accepted = []
    for run_dir in _glob_roots((entry.get("reference") or {}).get("runs"), root, lambda p: (p / "settings.json").is_file()):
        why = _reference_mismatch(entry, json.loads((run_dir / "settings.json").read_text()), repo)
        if why:
            print(f"results_table: {run_dir} left out of {entry['config']!r}'s reference: {why}", file=sys.stderr)
            continue
        accepted.append(run_dir)
    return accepted


def _reference_mismatch(entry: dict[str, Any], settings: dict[str, Any], repo: Path) -> str:
    """Why a reference run's ``settings.json`` is not a run of ``entry`` ("" when it is): another
    config, other values once its overrides and steps are applied, or stopped before its steps."""
    from pytorchrl.config import apply_overrides, config_to_dict, from_dict
    from pytorchrl.utils.errors import InputError

    if settings.get("config") != entry["config"]:
        return f"it ran {settings.get('config')!r}"
    seed, steps = int(settings["seed"]), int(settings["steps"])
    try:
        ran = config_to_dict(from_dict(apply_overrides(_shipped_config(repo / entry["config"]), [*settings.get("overrides", []), f"run.seed={seed}", f"run.target_steps={steps}"])))
    except InputError as error:
        return f"its settings are not a config: {error}"
    differ = _differences(ran, expected_config(entry, seed, repo))
    if differ:
        return "its config differs at " + "; ".join(f"{key} = {value!r}, not {expected!r}" for key, value, expected in differ[:3])
    if int(settings.get("env_steps", 0)) < steps:  # past them: a rollout finished beyond the budget, as train's does
        return f"it stopped at {settings.get('env_steps')} of its {steps} steps"
    return ""


def reference_text(entry: dict[str, Any], references: Sequence[Reference]) -> str:
    """The anchor cell's addition for ``entry``'s reference runs ("" without any)."""
    references = [r for r in references if r.final_return is not None]  # a run with no evaluation says nothing
    if not references:
        return ""
    median = _reference_median(references)
    label = entry["reference"].get("label", "reference")
    seeds = ", ".join(str(r.seed) for r in sorted(references, key=lambda r: r.seed))
    first, last = min(r.env_steps for r in references), max(r.env_steps for r in references)
    at = _number(first) if first == last else f"{_number(first)} to {_number(last)}"
    return f"; same protocol: {label} with this config's settings, {_number(median)} at {at} steps (seed{'s' if len(references) > 1 else ''} {seeds})"


def _reference_median(references: Sequence[Reference]) -> float | None:
    """The median last evaluation of the reference runs that made one (None: none did)."""
    finals = [r.final_return for r in references if r.final_return is not None]
    return statistics.median(finals) if finals else None


def against_text(entry: dict[str, Any], runs: Sequence[Run], references: Sequence[Reference] = (), reached: str = "reached") -> str:
    """The "against the anchor" cell: where the row's runs stand against each figure of the
    anchor cell, worked out rather than left to the reader. First how many seeds reached the
    anchor's return within its budget (or within the steps they ran, where they were run short
    of it on purpose: the SAC and TD3 MuJoCo rows). Then the median final return against the
    anchor's return, the published curve's value and the same-protocol reference's median: a
    percentage where both are returns >= 0 and the other is positive, else the difference. Rows
    whose runs stopped at their first evaluation past a threshold compare steps only: that
    evaluation was picked for being high and is no agent's return at a budget; where they stop
    below the anchor's return, the cell says how many reached the stop instead, and that the
    anchor's return was never asked of them. ``reached`` is the verb of the count (an earlier
    run, known by its final return alone, "ended at or above" it)."""
    anchor = entry.get("anchor") or {}
    finals = [r.final_return for r in runs if r.final_return is not None]
    target, budget = anchor.get("return"), anchor.get("budget")
    if not finals or target is None or not budget:
        return ""
    parts = []
    stop = next((r.stopped_at for r in runs if r.stopped_at is not None), None)
    steps = statistics.median(r.env_steps for r in runs)
    if stop is not None and stop < target:  # a run that reached its stop stopped there
        within = sum(1 for r in runs if r.stopped_at is not None and r.env_steps <= budget)
        parts.append(f"{within}/{len(runs)} reached {_number(stop)}, where they stop, within its {_number(budget)} steps; its {_number(target)} is not asked of them")
    else:
        within = sum(1 for r in runs if r.steps_to_anchor is not None and r.steps_to_anchor <= budget)
        short = stop is None and steps < 0.95 * budget
        span = f"in the {_number(steps)} steps run ({steps / budget:.0%} of its budget)" if short else f"within its {_number(budget)} steps"
        # reached: one evaluation at or above it at some point; the anchor is an agent's at its
        # budget, so where the runs ended is said too
        at_end = sum(1 for f in finals if f >= target)
        ended = f" ({at_end}/{len(runs)} at their end)" if reached == "reached" and at_end != within else ""
        parts.append(f"{within}/{len(runs)} {reached} its {_number(target)} {span}{ended}")
    if stop is not None:
        return "; ".join(parts)
    median = statistics.median(finals)
    parts.append(_relative(median, float(target), "its return"))
    published = entry.get("published")
    if published:
        parts.append(_relative(median, float(published["return"]), f"the published curve at {_number(published['at'])} steps"))
    reference = _reference_median(references)
    if reference is not None:
        parts.append(_relative(median, reference, "the same-protocol reference"))
    return "; ".join(parts)


def _relative(ours: float, theirs: float, what: str) -> str:
    """``ours`` against ``theirs``: a percentage where that reads plainly, else the difference."""
    if theirs > 0 and ours >= 0:
        return f"{ours / theirs:.0%} of {what}"
    if ours == theirs:
        return f"equal to {what}"
    return f"{_number(abs(ours - theirs))} {'above' if ours > theirs else 'below'} {what}"


def published_text(entry: dict[str, Any]) -> str:
    """The anchor cell's addition for ``entry``'s published curve ("" without one)."""
    published = entry.get("published")
    if not published:
        return ""
    settings = f"; {published['settings']}" if published.get("settings") else ""
    return f"; published curve at {_number(published['at'])} steps: {_number(published['return'])} ({published['source']}{settings})"


def table_row(entry: dict[str, Any], runs: Sequence[Run], labels: tuple[str, str] = ("", ""), references: Sequence[Reference] = ()) -> dict[str, str]:
    """The table's row of one manifest entry and its runs (none: a row that says so, with the
    env and algorithm ``labels``; its ``earlier`` runs where it has them) and its same-protocol
    ``references``."""
    if not runs and entry.get("earlier"):
        return earlier_row(entry, labels, references)
    anchor = entry.get("anchor") or {}
    anchor_text = f"{_number(anchor.get('return'))} in {_number(anchor.get('budget'))} steps ({anchor.get('source', 'no source')})" if anchor else "none"
    anchor_text += published_text(entry) + reference_text(entry, references)
    row = dict.fromkeys(COLUMNS, "")
    row.update({"config": entry["config"], "anchor": anchor_text, "anchor's protocol": str(anchor.get("protocol", ""))})
    if not runs:
        row.update(env=labels[0], algorithm=labels[1], seeds="no runs yet")
        return row
    finals = [r.final_return for r in runs if r.final_return is not None]
    reached = [r.steps_to_threshold for r in runs if r.steps_to_threshold is not None]
    steps = "" if entry.get("threshold") is None else f"{len(reached)}/{len(runs)} reached {_number(entry['threshold'])}" + _reached_at(reached, len(runs))
    measured = " (training, last 100 episodes)" if entry.get("metric") == "train" else ""
    stopped = [r.stopped_at for r in runs if r.stopped_at is not None]
    if stopped and entry.get("metric") != "train":  # the anchors are agents at their budget: say what this figure is
        measured += f" ({len(stopped)}/{len(runs)} stopped at their first evaluation >= {_number(stopped[0])}: that evaluation)"
    row.update(
        env=runs[0].env_id, algorithm=runs[0].algorithm, seeds=", ".join(str(r.seed) for r in sorted(runs, key=lambda r: r.seed)),
        **{
            "final return (median)": _number(statistics.median(finals)) + measured if finals else "no evaluation",
            "spread (min to max)": f"{_number(min(finals))} to {_number(max(finals))}" if finals else "",
            "steps to threshold": steps,
            "wall-clock (median)": f"{statistics.median(r.wall_time_s for r in runs):,.0f} s",
            "CPU": "; ".join(sorted({r.machine for r in runs})),
            "against the anchor": against_text(entry, runs, references),
        },
    )
    return row


def earlier_row(entry: dict[str, Any], labels: tuple[str, str], references: Sequence[Reference] = ()) -> dict[str, str]:
    """The row of ``entry``'s ``earlier`` runs (see the module doc): made as a kept run's row from
    their final returns, each counted only by where it ended ("ended at or above", never
    "reached": when it first got there is in the section, not here)."""
    earlier = entry["earlier"]
    runs = [
        Run(
            seed=r["seed"], env_id=labels[0], algorithm=labels[1], final_return=float(r["return"]), steps_to_threshold=None,
            env_steps=r["steps"], wall_time_s=float(r.get("wall_s", 0.0)), machine=r.get("machine", "not typed"),
            steps_to_anchor=r["steps"] if r["return"] >= (entry.get("anchor") or {}).get("return", float("inf")) else None,
        )
        for r in earlier["runs"]
    ]
    row = table_row(entry, runs, labels, references)
    dates = sorted({str(r["date"]) for r in earlier["runs"]})
    steps = sorted({r["steps"] for r in earlier["runs"]})
    kept = earlier.get("record")  # a kept record of the config before a change (see the module doc)
    row["seeds"] += " (earlier config)" if kept else " (earlier runs, no record kept)"
    at = _number(steps[0]) if len(steps) == 1 else f"{_number(steps[0])} to {_number(steps[-1])}"
    lost = f"{'its run directory was' if len(runs) == 1 else 'their run directories were'} lost before run records were kept"
    row["final return (median)"] += f" at {at} steps, from BENCHMARKS.md, \"{earlier['section']}\" ({', '.join(dates)}; {kept or lost})"
    if entry.get("threshold") is not None:
        ended = sum(1 for r in runs if r.final_return is not None and r.final_return >= entry["threshold"])
        row["steps to threshold"] = f"{ended}/{len(runs)} ended at or above {_number(entry['threshold'])} (their curves: that section)"
    if not all("wall_s" in r for r in earlier["runs"]):
        row["wall-clock (median)"] = "not typed (that section)"
    row["against the anchor"] = against_text(entry, runs, references, reached="ended at or above")
    return row


def _reached_at(reached: Sequence[int], seeds: int) -> str:
    """When the seeds that reached the threshold did: the median over them, said to be over
    those alone when some seeds never did (theirs is no step)."""
    if not reached:
        return ""
    if len(reached) == 1 < seeds:
        return f", at {_number(reached[0])}"
    return f", median {_number(statistics.median(reached))}" + ("" if len(reached) == seeds else f" of those {len(reached)}")


Roots = Path | Sequence[Path]


def results_table(manifest: Path, root: Roots, repo: Path = REPO) -> list[dict[str, str]]:
    """Every manifest entry's row (runs found with its ``runs`` glob under ``root`` whose config
    is the entry's: :func:`config_differences`; the others are told on stderr and left out)."""
    return [row for row, _, _ in rows_and_runs(manifest, root, repo)]


def rows_and_runs(manifest: Path, root: Roots, repo: Path = REPO) -> list[tuple[dict[str, str], list[Path], list[Path]]]:
    """Each manifest entry's row, the run directories it counts (what its figure draws) and
    the reference runs it counts."""
    out = []
    for entry in entries(manifest):
        accepted = accepted_run_dirs(entry, root, repo)
        references = reference_run_dirs(entry, root, repo)
        runs = [read_run(p, entry.get("threshold"), entry["metric"], (entry.get("anchor") or {}).get("return")) for p in accepted]
        by_seed: dict[int, Path] = {}
        for run, run_dir in zip(runs, accepted, strict=True):
            if run.seed in by_seed:  # a rerun beside the first: one seed would weigh twice
                raise RunRecordError(f"{entry['config']}: {by_seed[run.seed]} and {run_dir} are both its seed {run.seed}; keep one")
            by_seed[run.seed] = run_dir
        row = table_row(entry, runs, _labels(entry, repo), [read_reference(p) for p in references])
        missing = [seed for seed in entry.get("seeds", SEEDS) if seed not in by_seed]
        if runs and missing:
            row["seeds"] += f" ({len(runs)} of {len(runs) + len(missing)}: seed{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} not finished)"
        row["our protocol"] = ("training returns, the mean of the last 100 episodes (the sampled policy); evaluations: " if entry["metric"] == "train" else "") + our_protocol(entry, repo)
        out.append((row, accepted, references))
    return out


#: the seeds a row is made of (a manifest entry's ``seeds`` says otherwise): fewer are said in the row
SEEDS = (0, 1, 2)


def our_protocol(entry: dict[str, Any], repo: Path = REPO) -> str:
    """The protocol of ``entry``'s runs in words (:func:`pytorchrl.protocol.describe_protocol` of
    its config with its overrides), made from the config, so the column cannot drift from it."""
    from pytorchrl.config import from_dict
    from pytorchrl.protocol import describe_protocol

    return describe_protocol(from_dict(expected_config(entry, 0, repo)))


def accepted_run_dirs(entry: dict[str, Any], root: Roots, repo: Path = REPO) -> list[Path]:
    """The finished runs of ``entry`` whose config is the entry's; one line on stderr for each other."""
    accepted = []
    for run_dir in run_dirs(entry, root):
        differ = config_differences(entry, run_dir, repo)
        if differ:
            shown = "; ".join(f"{key} = {ran!r}, not {expected!r}" for key, ran, expected in differ[:3])
            print(f"results_table: {run_dir} left out of {entry['config']!r}: its config differs at {shown}", file=sys.stderr)
            continue
        accepted.append(run_dir)
    return accepted


def expected_config(entry: dict[str, Any], seed: int, repo: Path = REPO) -> dict[str, Any]:
    """The resolved config (every default written out, as a run saves it) of ``entry``'s config
    or ``--algo ALGO --env ENV`` default, with its overrides and ``run.seed``."""
    from pytorchrl.config import apply_overrides, config_to_dict, from_dict
    from pytorchrl.defaults import choose_config

    overrides = [*entry.get("overrides", []), f"run.seed={seed}"]
    algo_env = _algo_env(entry["config"])
    if algo_env is None:
        return config_to_dict(from_dict(apply_overrides(_shipped_config(repo / entry["config"]), overrides)))
    choice = choose_config(*algo_env, overrides, configs=repo / "configs")
    return config_to_dict(from_dict(apply_overrides(choice.raw, overrides)))


def config_differences(entry: dict[str, Any], run_dir: Path, repo: Path = REPO) -> list[tuple[str, Any, Any]]:
    """``(key, the run's value, the entry's value)`` for each dotted key where the run's saved
    config differs from :func:`expected_config`, leaving out :data:`NEUTRAL_KEYS`."""
    from pytorchrl.config import config_to_dict, from_dict

    ran = config_to_dict(from_dict(_run_config(run_dir)))  # as --resume reads it: keys added since, at their defaults
    return _differences(ran, expected_config(entry, int(ran["run"]["seed"]), repo))


def _differences(ran: dict[str, Any], expected: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    flat_ran, flat_expected = _flatten(ran), _flatten(expected)
    keys = sorted(set(flat_ran) | set(flat_expected))
    return [
        (key, flat_ran.get(key), flat_expected.get(key)) for key in keys
        if flat_ran.get(key) != flat_expected.get(key) and not any(key == n or (n.endswith(".") and key.startswith(n)) for n in NEUTRAL_KEYS)
    ]


def _run_config(run_dir: Path) -> dict[str, Any]:
    """A run directory's saved ``config.yaml`` as written by ``train`` (a file this project made,
    read by libyaml where PyYAML has it: the table reads a hundred of them)."""
    return yaml.load((run_dir / "config.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _shipped_config(path: Path) -> dict[str, Any]:
    """A shipped config's YAML, read strictly once per version of the file (callers copy it:
    ``apply_overrides``)."""
    return _read_config(path, path.stat().st_mtime_ns)


@functools.cache
def _read_config(path: Path, mtime_ns: int) -> dict[str, Any]:
    from pytorchrl.config import read_mapping

    return read_mapping(path, "config file")


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in _flatten(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


def _algo_env(label: str) -> tuple[str, str] | None:
    """``(ALGO, ENV)`` of a ``--algo ALGO --env ENV`` label (None: a config path)."""
    words = label.split()
    if words[:1] != ["--algo"]:
        return None
    return words[1], words[3]


def _labels(entry: dict[str, Any], repo: Path) -> tuple[str, str]:
    """The env id and algorithm a row names, from its config (for a row with no runs yet)."""
    algo_env = _algo_env(entry["config"])
    if algo_env is not None:
        return algo_env[1], algo_env[0]
    config = _shipped_config(repo / entry["config"])
    return config["env"]["env_id"], config["algorithm"]["name"]


class ManifestError(ValueError):
    """A manifest entry the table cannot read."""


def entries(manifest: Path) -> list[dict[str, Any]]:
    """The manifest's entries, each with its ``metric`` (default ``eval``); an unknown one is a
    :class:`ManifestError` naming it."""
    out = yaml.safe_load(manifest.read_text()) or []
    for entry in out:
        entry.setdefault("metric", "eval")
        if entry["metric"] not in METRICS:
            raise ManifestError(f"{manifest}: {entry.get('config')!r} has metric {entry['metric']!r}; allowed: {', '.join(METRICS)}")
        earlier = entry.get("earlier")
        if earlier is not None and not _is_earlier(earlier):
            raise ManifestError(
                f"{manifest}: {entry.get('config')!r} has earlier {earlier!r}; allowed: a mapping with a section (a BENCHMARKS.md heading) "
                "and runs, a non-empty list of {seed: integer, return: number, steps: positive integer, date, machine: text and wall_s: seconds (both optional)}"
            )
        seeds = entry.get("seeds")
        if seeds is not None and not (isinstance(seeds, list) and seeds and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds)):
            raise ManifestError(f"{manifest}: {entry.get('config')!r} has seeds {seeds!r}; allowed: a non-empty list of seeds (integers >= 0)")
        published = entry.get("published")
        if published is not None and not _is_published(published):
            raise ManifestError(
                f"{manifest}: {entry.get('config')!r} has published {published!r}; allowed: a mapping with a numeric return, "
                "a positive integer at (its step count), a source and optionally settings"
            )
    return out


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_earlier(earlier: Any) -> bool:
    """Whether a manifest entry's ``earlier`` is runs the table can print (see the module doc)."""
    def run(r: Any) -> bool:
        return (
            isinstance(r, dict) and {"seed", "return", "steps", "date"} <= set(r) <= {"seed", "return", "steps", "date", "machine", "wall_s"}
            and _is_number(r.get("wall_s", 0)) and r.get("wall_s", 0) >= 0
            and _is_integer(r["seed"]) and _is_number(r["return"]) and _is_integer(r["steps"]) and r["steps"] > 0
            and isinstance(r["date"], str | datetime.date) and isinstance(r.get("machine", ""), str)
        )

    return (
        isinstance(earlier, dict) and {"section", "runs"} <= set(earlier) <= {"section", "runs", "record"}
        and isinstance(earlier["section"], str) and bool(earlier["section"])
        and ("record" not in earlier or (isinstance(earlier["record"], str) and bool(earlier["record"])))
        and isinstance(earlier["runs"], list) and bool(earlier["runs"]) and all(run(r) for r in earlier["runs"])
        and len({r["seed"] for r in earlier["runs"]}) == len(earlier["runs"])
    )


def _is_published(published: Any) -> bool:
    """Whether a manifest entry's ``published`` is a curve's value the table can print."""
    if not isinstance(published, dict) or not set(published) <= {"return", "at", "source", "settings"}:
        return False
    at = published.get("at")
    return (
        _is_number(published.get("return")) and _is_integer(at) and at > 0
        and isinstance(published.get("source"), str) and bool(published["source"])
        and isinstance(published.get("settings", ""), str)
    )


def run_dirs(entry: dict[str, Any], root: Roots) -> list[Path]:
    """The finished runs that ``entry``'s glob finds under ``root`` (one root or several: a name
    found under more than one is taken from the first): a ``summary.json`` that does not say
    ``interrupted`` (a run stopped to be resumed is not finished)."""
    return _glob_roots(entry.get("runs"), root, _counts)


def _counts(run_dir: Path) -> bool:
    """Whether ``run_dir`` is a finished run; one line on stderr for a run directory that is not
    (in progress, or stopped to be resumed): the row's seeds are then fewer, and say so."""
    summary = run_dir / "summary.json"
    if summary.is_file() and _finished(summary):
        return True
    if (run_dir / "config.yaml").is_file():
        state = "stopped to be resumed" if summary.is_file() else "in progress (no summary.json)"
        print(f"results_table: {run_dir} not counted: {state}", file=sys.stderr)
    return False


def _glob_roots(glob: str | None, root: Roots, keep: Callable[[Path], bool]) -> list[Path]:
    """The directories ``glob`` finds under ``root`` (one root or several: a name found under
    more than one is taken from the first) that ``keep`` accepts, by name."""
    if not glob:
        return []
    found: dict[str, Path] = {}
    for base in [root] if isinstance(root, Path) else root:
        for p in sorted(base.glob(glob)):
            if p.name not in found and keep(p):
                found[p.name] = p
    return sorted(found.values(), key=lambda p: p.name)


def archive_run(run_dir: Path, records: Path) -> Path:
    """Write ``run_dir``'s record under ``records`` (see the module doc) and return its path;
    a run that already is a record there is left as it is. Written to a temporary name and
    renamed, so an interrupted archive leaves no half record."""
    target = records / run_dir.name
    if run_dir.resolve() == target.resolve():
        return target
    partial = records / f".{run_dir.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in ("config.yaml", "summary.json", "settings.json"):  # settings.json: a reference run's, in place of the other two
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, partial / name)
    with open(run_dir / "progress.csv", newline="") as f_in, open(partial / "progress.csv", "w", newline="") as f_out:
        reader = csv.DictReader(f_in)
        kept = [c for c in RECORD_COLUMNS if c in (reader.fieldnames or ())]
        writer = csv.DictWriter(f_out, kept, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(reader)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def missing_commands(manifest: Path, root: Roots, seeds: Sequence[int], repo: Path = REPO, run_root: Path | None = None) -> list[str]:
    """The ``pytorchrl train`` command of each seed in ``seeds`` that an entry of ``manifest``
    has no counted run for; its run directory is the entry's glob with the seed, under
    ``run_root`` (default: the first root)."""
    first = run_root or (root if isinstance(root, Path) else root[0])
    commands = []
    for entry in entries(manifest):
        if not entry.get("runs"):
            continue
        have = set()
        for run_dir in accepted_run_dirs(entry, root, repo):
            have.add(int(_run_config(run_dir)["run"]["seed"]))
        for seed in seeds:
            if seed in have:
                continue
            words = [*entry["config"].split(), *entry.get("overrides", []), f"run.seed={seed}"]
            run_dir = first / entry["runs"].replace("*", str(seed))
            if any(p.is_dir() for p in run_dir.glob("checkpoints/step_*")):  # begun and stopped: continued, not started again
                commands.append(shlex.join(["pytorchrl", "train", "--resume", str(run_dir)]))
            else:
                commands.append(shlex.join(["pytorchrl", "train", *words, "--run-dir", str(run_dir)]))
        reference = (entry.get("reference") or {}).get("runs")
        if reference:
            have = {int(json.loads((p / "settings.json").read_text())["seed"]) for p in reference_run_dirs(entry, root, repo)}
            for seed in seeds:
                if seed not in have:
                    out = first / reference.replace("*", str(seed))
                    script = ["python", "scripts/sb3_reference.py", entry["config"], *entry.get("overrides", [])]
                    begun = ["--resume"] if (out / "settings.json").is_file() else []  # its checkpoint's settings
                    commands.append(shlex.join([*script, "--seed", str(seed), "--out", str(out), *begun]))
    return commands


#: the stop reasons of a run that counts: it ran its budget, or stopped at its return target
#: (not interrupted, out of time, or stopped by a non-finite update, with a stale last evaluation)
FINISHED = ("target_steps", "stop_at_return")


def _finished(summary: Path) -> bool:
    return json.loads(summary.read_text()).get("stop_reason") in FINISHED


class RunRecordError(ValueError):
    """A run directory (or record) whose files contradict themselves or each other: the table
    would be wrong without a word, so it is not made."""


class MarkerError(ValueError):
    """A file given to ``--into`` lacks the generated block's markers."""


def markers(name: str) -> tuple[str, str]:
    """The lines that open and close the generated block of table ``name`` in a document."""
    return f"<!-- results-table:{name} -->", f"<!-- /results-table:{name} -->"


def write_into(document: Path, name: str, table: str) -> None:
    """Put ``table`` between ``document``'s markers of ``name`` (:func:`markers`), the rest of
    the file as it was; written to a temporary file and renamed over, so a failure leaves the
    old document whole.

    :raises MarkerError: a marker is missing, repeated or out of order.
    """
    text = document.read_text()
    start, end = markers(name)
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise MarkerError(f"{document} needs the lines {start} and {end}, once each and in that order, around the generated table")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    partial = document.with_name(f".{document.name}.partial")
    partial.write_text(f"{head}{start}\n\n{table}\n{end}{tail}")
    partial.replace(document)


def generated_block(document: Path, name: str) -> str:
    """The table now between ``document``'s markers of ``name``."""
    start, end = markers(name)
    return document.read_text().split(start, 1)[1].split(end, 1)[0].strip("\n") + "\n"


def markdown(rows: Sequence[dict[str, str]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row[c] for c in COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _number(value: Any) -> str:
    """A figure as the prose gives it: whole numbers with thousands commas, three significant
    digits under 100 (9.25, -10.4, 0.6), one decimal under 0.01 (0.0)."""
    if value is None:
        return "?"
    value = float(value)
    if value == int(value) or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) >= 0.01 else f"{value:.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument(
        "--root", type=Path, action="append",
        help=f"where the manifest's run globs start; repeat it to search several (default: the committed records, {RECORDS.relative_to(REPO)})",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("-o", "--output", type=Path, help="write the table there (default: stdout)")
    output.add_argument("--into", type=Path, metavar="FILE", help="write the table into FILE, between its markers for this manifest")
    parser.add_argument("--plots", type=Path, metavar="DIR", help="also write one curve figure per config with runs")
    parser.add_argument("--archive", type=Path, metavar="DIR", help="also write the record of every counted run under DIR")
    parser.add_argument("--commands", action="store_true", help="print the train commands of the seeds that have no run yet, not the table")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the seeds --commands asks for (default: 0 1 2)")
    args = parser.parse_args(argv)
    roots = args.root or [RECORDS]
    try:
        entries(args.manifest)  # a bad entry: one line, before any work
    except ManifestError as error:
        print(f"results_table: error: {error}", file=sys.stderr)
        return 2
    if args.commands:
        run_root = args.root[0] if args.root else Path("runs")  # never the records
        sys.stdout.writelines(line + "\n" for line in missing_commands(args.manifest, roots, args.seeds, run_root=run_root))
        return 0
    try:
        table = rows_and_runs(args.manifest, roots)
    except RunRecordError as error:
        print(f"results_table: error: {error}", file=sys.stderr)
        return 2
    if args.archive:
        for _, found, references in table:
            for run_dir in [*found, *references]:
                archive_run(run_dir, args.archive)
    text = markdown([row for row, _, _ in table])
    if args.into:
        try:
            write_into(args.into, args.manifest.stem, text)
        except (MarkerError, OSError) as error:
            print(f"results_table: error: {error}", file=sys.stderr)
            return 2
    elif args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    if args.plots:
        from pytorchrl.plotting import plot_runs

        args.plots.mkdir(parents=True, exist_ok=True)
        for entry, (_, found, references) in zip(entries(args.manifest), table, strict=True):
            if found:  # the runs the row counts, no other; its references beside them, as one more curve
                name = entry.get("plot") or Path(entry["config"]).with_suffix("").as_posix().replace("/", "-")
                label = (entry.get("reference") or {}).get("label", "reference")
                names = {Path(r): (label, read_reference(Path(r)).seed) for r in references}
                plot_runs([*found, *references], output=args.plots / f"{name}.png", names=names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
