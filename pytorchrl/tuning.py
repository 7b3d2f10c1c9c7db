"""Hyper-parameter search and population-based training on Ray Tune.

``pytorchrl tune CONFIG.yaml --space SPACE.yaml [--samples N] [--scheduler fifo|asha|pbt]`` and
:func:`tune` (exported as ``pytorchrl.tune``). SPACE.yaml maps dotted config keys to one
distribution each::

    algorithm.lr: {loguniform: [1.0e-4, 3.0e-3]}
    algorithm.clip_range: {uniform: [0.1, 0.3]}
    storage.num_steps: {choice: [64, 128, 256]}
    algorithm.num_epochs: {randint: [3, 11]}      # 3..10, the upper bound excluded (numpy's rule)

Each trial is an ordinary pytorchrl run in ``DIR/trials/<trial>/`` (config.yaml, progress.csv,
TensorBoard, checkpoints, summary.json: ``pytorchrl plot DIR/trials/*`` draws them all); Ray
Tune's own state is in ``DIR/_tune/``. A trial reports every log row that has the metric (for
``eval_return_mean``: every evaluation) with ``env_steps`` as Tune's time axis, so ASHA's rungs
and PBT's intervals are in environment steps.

* ``asha``: ASHA (Li et al. 2020) stops the weaker half of the trials at each rung.
* ``pbt``: population-based training (Jaderberg et al. 2017). The first report of each
  perturbation interval carries a full checkpoint (weights, optimizer, normalisers, RNG streams: the exact-resume kind). A trial in
  the bottom quantile restarts from a top trial's checkpoint with the listed keys perturbed;
  it continues the source's run exactly, with the new hyper-parameters. PBT perturbs
  ``algorithm.*`` keys the algorithm can change while training (:attr:`Algorithm.tunable`).

The best trial's config (by its last reported metric) is written to ``DIR/best_config.yaml``,
ready for ``pytorchrl train``, and every trial's result to ``DIR/trials.csv``.

Trials with remote workers reserve them through a Tune placement group: one bundle for the
trial's learner (``run.torch_threads`` CPUs) and one per remote worker, so their Ray actors are
scheduled into resources Tune already counted. On a multi-node cluster the trial directories
are written on the node each trial runs on (use a shared filesystem to see them in one place).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import difflib
import functools
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from pytorchrl.config import Config, config_to_dict, from_dict, load_config, load_yaml, set_values
from pytorchrl.utils.errors import ConfigError, InputError
from pytorchrl.utils.paths import check_output_dir, make_dir
from pytorchrl.utils.strict_yaml import dump_config

#: distribution name -> what its argument must be
DISTRIBUTIONS = {
    "loguniform": "[low, high] with 0 < low < high",
    "uniform": "[low, high] with low < high",
    "randint": "[low, high) integers with low < high",
    "choice": "a non-empty list of values",
    "grid": "a non-empty list of values, every one tried (times --samples)",
}
SCHEDULERS = ("fifo", "asha", "pbt")
#: progress.csv columns a search may optimise (maximised)
METRICS = ("eval_return_mean", "train_return_mean")
_CHECKPOINT = "pytorchrl_checkpoint"


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` found."""

    directory: Path
    best_config_path: Path
    best_trial: str
    best_metric: float
    best_params: dict[str, Any]
    trials: list[dict[str, Any]]
    wall_time_s: float


# ------------------------------------------------------------------------------ the space


def load_space(path: str | Path) -> dict[str, Any]:
    """Read SPACE.yaml (a mapping of dotted keys to distributions)."""
    raw = load_yaml(path, "search space file")
    if not isinstance(raw, dict) or not raw:
        raise InputError(f"search space file {str(path)!r} must map dotted config keys to distributions, e.g. algorithm.lr: {{loguniform: [1.0e-5, 1.0e-2]}}")
    return raw


def check_space(space: Mapping[str, Any], base: dict[str, Any], where: str = "search space") -> dict[str, tuple[str, Any]]:
    """Validate ``space`` against the config ``base`` (a nested dict): every key must be a config
    key and every value a distribution whose bounds (or choices) make valid configs.

    :return: ``{key: (distribution, argument)}``.
    :raises ConfigError: one line naming the key, the bad distribution or value, and what is allowed.
    """
    parsed: dict[str, tuple[str, Any]] = {}
    for key, spec in space.items():
        if not isinstance(key, str):
            raise ConfigError(f"{where}: key {key!r} ({type(key).__name__}) must be a dotted config key string, e.g. algorithm.lr")
        if not isinstance(spec, dict) or len(spec) != 1:
            raise ConfigError(f"{where}: {key!r} must map to one distribution, e.g. {{loguniform: [1.0e-5, 1.0e-2]}}; got {spec!r}")
        (dist, arg), = spec.items()
        if dist not in DISTRIBUTIONS and isinstance(arg, dict):  # a section written as YAML nesting
            raise ConfigError(f"{where}: keys are dotted config keys (e.g. '{key}.{dist}'), not sections; got the section {key!r}")
        if dist not in DISTRIBUTIONS:
            near = difflib.get_close_matches(str(dist), list(DISTRIBUTIONS), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"{where}: {key!r} has unknown distribution {dist!r}{hint}; allowed: {', '.join(DISTRIBUTIONS)}")
        values = _check_argument(key, dist, arg, where)
        for value in values:  # the bounds or choices must make valid configs (names the key if it is unknown)
            try:
                from_dict(set_values(base, {key: value}))
            except ConfigError as exc:
                raise ConfigError(f"{where}: {key!r}: {exc}") from None
        if dist in ("uniform", "loguniform"):  # it samples fractions: the key must take them
            try:
                from_dict(set_values(base, {key: _a_fraction_between(dist, *values)}))
            except ConfigError:
                raise ConfigError(f"{where}: {key!r} takes whole numbers, and {dist} samples fractions: use randint or choice") from None
        parsed[key] = (dist, arg)
    return parsed


def _a_fraction_between(dist: str, low: float, high: float) -> float:
    """A value that is not a whole number, between ``low`` and ``high`` (as ``dist`` samples them)."""
    value = low * (high / low) ** 0.37 if dist == "loguniform" else low + 0.37 * (high - low)
    return value if not float(value).is_integer() else value + 1e-3 * (high - low)


def _check_argument(key: str, dist: str, arg: Any, where: str) -> list[Any]:
    """The values of ``arg`` that must be valid config values (bounds or choices)."""
    shown = [float(v) if isinstance(v, str) and _is_number(v) else v for v in arg] if isinstance(arg, list) else arg  # YAML's '1e-4' strings as numbers
    bad = ConfigError(f"{where}: {key!r}: {dist} needs {DISTRIBUTIONS[dist]}; got {shown!r}")
    if dist in ("choice", "grid"):
        if not isinstance(arg, list) or not arg:
            raise bad
        return list(arg)
    if not (isinstance(arg, list) and len(arg) == 2 and all(_is_number(v) for v in arg)):
        raise bad
    low, high = (float(v) for v in arg)
    if low >= high or (dist == "loguniform" and low <= 0) or (dist == "randint" and not all(float(v).is_integer() for v in arg)):
        raise bad
    if dist == "randint":
        return [int(low), int(high) - 1]
    return [low, high]


def _is_number(value: Any) -> bool:
    if isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
        try:
            float(value)
        except ValueError:
            return False
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def import_ray_tune() -> Any:
    """``ray.tune``; where Tune's own dependencies (pandas, pyarrow: plain ``ray`` lacks them) are
    missing, one line saying how to install them.

    :raises InputError: when ``ray.tune`` cannot be imported.
    """
    import importlib

    try:
        return importlib.import_module("ray.tune")
    except ImportError as exc:
        cause = exc.__cause__ or exc.__context__ or exc
        raise InputError(f"tune needs Ray Tune's dependencies ({cause}): pip install 'ray[tune]' (in a checkout: pip install -e '.[tune]')") from None


def tune_domains(parsed: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """The parsed space as Ray Tune search domains."""
    from ray import tune as ray_tune

    domains: dict[str, Any] = {}
    for key, (dist, arg) in parsed.items():
        if dist == "loguniform":
            domains[key] = ray_tune.loguniform(float(arg[0]), float(arg[1]))
        elif dist == "uniform":
            domains[key] = ray_tune.uniform(float(arg[0]), float(arg[1]))
        elif dist == "randint":
            domains[key] = ray_tune.randint(int(float(arg[0])), int(float(arg[1])))
        elif dist == "choice":
            domains[key] = ray_tune.choice(list(arg))
        else:
            domains[key] = ray_tune.grid_search(list(arg))
    return domains


def pbt_mutations(parsed: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """What PBT perturbs, as it perturbs each kind: a ``choice`` as the list of its values (PBT
    shifts a value to a neighbour or resamples; given a domain it multiplied the value by 0.8 or
    1.2, off the list, and failed on a string or null), the ranges as their domains."""
    domains = tune_domains(parsed)
    return {key: list(arg) if dist == "choice" else domains[key] for key, (dist, arg) in parsed.items()}


def within_space(config: dict[str, Any], *, parsed: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """PBT's explore step, kept inside the space: a range's value multiplied by 0.8 or 1.2 is
    clipped to the range (``randint``: an integer below its upper bound), so a perturbed trial
    never asks for a value the space, and often the config, does not allow."""
    for key, (dist, arg) in parsed.items():
        if dist in ("uniform", "loguniform") and key in config:
            config[key] = min(max(float(config[key]), float(arg[0])), float(arg[1]))
        elif dist == "randint" and key in config:
            config[key] = min(max(round(float(config[key])), int(float(arg[0]))), int(float(arg[1])) - 1)
    return config


def check_pbt_keys(parsed: dict[str, tuple[str, Any]], algorithm: str) -> None:
    """PBT perturbs a running trial: only hyper-parameters its algorithm can change mid-run."""
    from pytorchrl.agent.algorithms import ALGORITHMS

    tunable = ALGORITHMS[algorithm].tunable
    for key, (dist, _) in parsed.items():
        section, _, name = key.partition(".")
        if section != "algorithm" or name not in tunable:
            allowed = ", ".join(f"algorithm.{t}" for t in tunable)
            raise ConfigError(
                f"search space: {key!r} cannot be perturbed by pbt (a trial continues from another's checkpoint); "
                f"{algorithm} can change {allowed}"
            )
        if dist == "grid":
            raise ConfigError(f"search space: {key!r}: pbt samples and perturbs; use loguniform, uniform, randint or choice, not grid")


# ----------------------------------------------------------------------------- the trial


#: the reported count of PBT's perturbation intervals, PBT's ``time_attr`` (one interval = 1)
PBT_TIME = "pbt_intervals"


class TuneReporter:
    """A learner writer that reports each log row with the metric to Ray Tune, with a
    checkpoint of the learner on the first report of every ``checkpoint_every`` env steps (PBT's
    perturbation interval: one checkpoint per decision, not one per report).

    PBT decides at the first report of each interval too: the rows carry :data:`PBT_TIME`
    (``env_steps // checkpoint_every``), its ``time_attr``, with a perturbation interval of 1.
    (With ``env_steps`` and the interval in steps, PBT counted from the steps of its last
    decision, off the checkpoints' grid, and skipped the exploits that found no checkpoint.) A
    trial restarted from another's checkpoint checkpoints at its first report: PBT may decide
    there, when the source was an interval ahead of it.
    """

    def __init__(self, learner: Any, metric: str, checkpoint_every: int | None = None, *, restored: bool = False) -> None:
        self.learner = learner
        self.metric = metric
        self.checkpoint_every = checkpoint_every
        self._bucket = learner.env_steps // checkpoint_every - int(restored) if checkpoint_every else 0

    def write(self, row: dict[str, Any]) -> None:
        from ray import tune as ray_tune

        value = row.get(self.metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        metrics = {k: v for k, v in row.items() if v is not None}
        bucket = row["env_steps"] // self.checkpoint_every if self.checkpoint_every else 0
        if self.checkpoint_every:
            metrics[PBT_TIME] = bucket
        if bucket <= self._bucket:
            ray_tune.report(metrics)
            return
        self._bucket = bucket
        with tempfile.TemporaryDirectory(prefix="pytorchrl-tune-") as tmp:
            self.learner.checkpoint(Path(tmp) / _CHECKPOINT)
            ray_tune.report(metrics, checkpoint=ray_tune.Checkpoint.from_directory(tmp))

    def close(self) -> None:
        pass


def run_trial(params: dict[str, Any], *, base: dict[str, Any], root: str, metric: str, checkpoint_every: int | None) -> None:
    """One trial: the base config with ``params`` set, trained as an ordinary run in
    ``root/trials/<trial>``; continues from Tune's checkpoint when PBT restarted it."""
    from ray import tune as ray_tune

    from pytorchrl.learner import Learner
    from pytorchrl.utils.checkpoint import RUN_STATE_KEYS, load_checkpoint
    from pytorchrl.utils.runtime import configure_process

    config = from_dict(set_values(base, params))
    configure_process(config.run.torch_threads)
    run_dir = Path(root) / "trials" / ray_tune.get_context().get_trial_name()
    # PBT restarts a trial in its directory: its previous process may still be ending
    learner = Learner.from_config(config, run_dir=run_dir, progress=False, reuse_run_dir=True, lock_wait_s=60.0)
    try:
        checkpoint = ray_tune.get_checkpoint()
        if checkpoint is not None:  # PBT: continue the source trial's run with the perturbed values
            with checkpoint.as_directory() as directory:
                state, _ = load_checkpoint(Path(directory) / _CHECKPOINT, RUN_STATE_KEYS)
            restore(learner, state, params)
        learner.writers.append(TuneReporter(learner, metric, checkpoint_every, restored=checkpoint is not None))
        if checkpoint is not None:
            learner.continue_round()
        learner.train(stop_signals=False)  # the trial's process is a Ray worker: its SIGTERM is Ray's
    finally:
        learner.close()


def restore(learner: Any, state: dict[str, Any], params: dict[str, Any]) -> None:
    """Load another trial's checkpoint ``state`` into ``learner`` exactly, then set this trial's
    ``algorithm.*`` values of ``params`` (the checkpoint's optimizer holds the source's
    learning rate)."""
    learner.load_state(state)
    values = {key.partition(".")[2]: value for key, value in params.items() if key.startswith("algorithm.")}
    if values:
        learner.scheme.update_worker.set_hyperparameters(values)


# ---------------------------------------------------------------------------- the search


def tune(
    config: str | Path | Config | dict[str, Any],
    space: str | Path | Mapping[str, Any],
    *,
    directory: str | Path | None = None,
    samples: int = 8,
    scheduler: str = "asha",
    metric: str = "eval_return_mean",
    overrides: list[str] | tuple[str, ...] = (),
    address: str | None = None,
    perturbation_interval: int | None = None,
    grace_steps: int | None = None,
    trial_cpus: float | None = None,
    verbose: bool = True,
) -> TuneResult:
    """Search hyper-parameters of a pytorchrl run on Ray Tune (see the module doc).

    :param config: a YAML path, a :class:`Config` or its nested dict: the base of every trial.
    :param space: SPACE.yaml's path, or its mapping of dotted keys to distributions.
    :param directory: where trials, Tune's state, trials.csv and best_config.yaml go
        (default ``runs/tune-<config name>-<timestamp>``).
    :param samples: trials (times the grid, if the space has ``grid`` keys).
    :param scheduler: ``fifo`` (all trials to the end), ``asha`` or ``pbt``.
    :param metric: the progress.csv column maximised.
    :param overrides: dotted ``key=value`` overrides of the base config.
    :param address: Ray cluster to run on (default: ``RAY_ADDRESS``, else a local Ray).
    :param perturbation_interval: PBT: env steps between exploit/explore decisions (default 2
        evaluations).
    :param grace_steps: ASHA: env steps before a trial can be stopped (default an eighth of the
        budget, at least one evaluation).
    :param trial_cpus: CPUs Tune reserves for each trial's learner (default ``run.torch_threads``);
        e.g. 0.5 runs a PBT population of 4 side by side on 2 cores.
    :param verbose: a line per trial event on stderr (:class:`TrialLines`); Tune's own output is off.
    :raises InputError: for a bad config, space, scheduler or metric (one line).
    """
    base = _base_dict(config, overrides)
    base_config = from_dict(base)
    if scheduler not in SCHEDULERS:
        raise InputError(_choice("--scheduler", scheduler, SCHEDULERS))
    if metric not in METRICS:
        raise InputError(_choice("--metric", metric, METRICS))
    if samples < 1:
        raise InputError(f"--samples = {samples} is out of range: must be >= 1")
    if trial_cpus is not None and trial_cpus <= 0:
        raise InputError(f"--trial-cpus = {trial_cpus} is out of range: must be > 0")
    budget = base_config.run.target_steps
    for option, steps, meant_for in (("--grace-steps", grace_steps, "asha"), ("--perturbation-interval", perturbation_interval, "pbt")):
        if steps is None:
            continue
        if scheduler != meant_for:  # silently unused otherwise: the user believes it shaped the search
            raise InputError(f"{option} applies to --scheduler {meant_for} only, not {scheduler}")
        if not 1 <= steps < budget:  # at the budget or past it, ASHA never stops a trial and PBT never perturbs one
            raise InputError(f"{option} = {steps} is out of range: must be >= 1 and below run.target_steps = {budget} (env steps)")
    where = str(space) if isinstance(space, (str, Path)) else "search space"
    raw_space = load_space(space) if isinstance(space, (str, Path)) else dict(space)
    parsed = check_space(raw_space, base, where)
    if scheduler == "pbt":
        check_pbt_keys(parsed, base_config.algorithm.name)
    run = base_config.run
    if scheduler == "pbt" and (run.eval_parallel or "run.eval_parallel" in parsed):
        # a row's evaluation comes in rounds after its weights were taken: the checkpoint PBT
        # keeps with its score would hold later weights than the ones scored
        raise InputError("--scheduler pbt needs run.eval_parallel = false: an evaluation made beside training reports its score after the weights it scored have moved on")
    if run.prometheus_port not in (None, 0):
        raise InputError(
            f"config key 'run.prometheus_port' = {run.prometheus_port}: trials run side by side and cannot share one port; use 0 (a free port each) or null"
        )
    if metric == "eval_return_mean" and run.eval_every == 0 and scheduler != "fifo":
        raise InputError(f"--scheduler {scheduler} needs evaluations during the run: run.eval_every = 0 evaluates only at the end")
    where = "--dir" if directory else "tune directory"
    ray_tune = import_ray_tune()  # before the directory is made
    root = check_output_dir(directory or _default_directory(config), where).resolve()  # before Ray starts or a trial writes
    held = [name for name in ("trials.csv", "_tune", "trials") if (root / name).exists()]
    if held:  # a search's results are not mixed with another's, as train refuses a run's directory
        raise InputError(f"{where} {str(root)!r} already holds a search (its {held[0]}): choose a new directory, or remove this one")
    from pytorchrl.scheme.base.ray_runtime import configure_ray, ensure_ray

    if verbose:  # Ray takes seconds to start: say what is coming
        print(f"pytorchrl: tune: {samples} samples ({scheduler}) into {root}; starting Ray", file=sys.stderr, flush=True)
    configure_ray(address=address or base_config.scheme.ray.address, num_cpus=base_config.scheme.ray.num_cpus)
    ensure_ray()
    for shape in trial_shapes(base, parsed):  # the base config, and each value of a key that sizes a trial
        check_trial_fits(shape, trial_cpus)
    make_dir(root, where)
    start = time.perf_counter()
    report_every = run.eval_every or run.log_every
    interval = (2 * report_every if perturbation_interval is None else perturbation_interval) if scheduler == "pbt" else None
    trainable = ray_tune.with_resources(
        ray_tune.with_parameters(run_trial, base=base, root=str(root), metric=metric, checkpoint_every=interval),
        functools.partial(trial_resources_of, base=base, learner_cpus=trial_cpus),  # per trial: its values may size it
    )
    tuner = ray_tune.Tuner(
        trainable,
        param_space=tune_domains(parsed),
        tune_config=ray_tune.TuneConfig(
            metric=metric, mode="max", num_samples=samples,
            scheduler=_scheduler(scheduler, base_config, parsed, interval, grace_steps),
            search_alg=_searcher(run.seed),
            trial_name_creator=_trial_name, trial_dirname_creator=_trial_name,
        ),
        run_config=ray_tune.RunConfig(
            # Tune's own tables (pages of them, on stdout) give way to a line per trial event on stderr
            name="_tune", storage_path=str(root), verbose=0,
            callbacks=[_status_callback(TrialLines(metric, root))] if verbose else [],
            # PBT clones a trial's newest checkpoint; keeping 4 (one per perturbation interval)
            # leaves it in place while the exploiting trial restarts
            checkpoint_config=ray_tune.CheckpointConfig(num_to_keep=4),
            failure_config=ray_tune.FailureConfig(max_failures=0),
        ),
    )
    with _legacy_tune_output():
        grid = tuner.fit()
    wall = time.perf_counter() - start
    results = [grid[i] for i in range(len(grid))]
    trials = _trial_rows(results, parsed, metric, root, run.target_steps)
    ok = [t for t in trials if t[metric] is not None and t["status"] != "error"]  # a trial that failed is no best
    if not ok:
        errors = [str(r.error).strip().splitlines()[-1] for r in results if r.error is not None]
        raise InputError(f"tune: no trial reported {metric!r}" + (f"; first error: {errors[0]}" if errors else ""))
    best = max(ok, key=lambda t: t[metric])
    best_params = {k: best[k] for k in parsed}
    best_path = root / "best_config.yaml"
    header = f"# best of {len(trials)} trials ({scheduler}, {metric} = {best[metric]:.6g}, trial {best['trial']})\n"
    best_path.write_text(header + dump_config(config_to_dict(from_dict(set_values(base, best_params)))))
    _write_trials(root / "trials.csv", trials)
    return TuneResult(root, best_path, best["trial"], float(best[metric]), best_params, trials, wall)


class TrialLines:
    """A line per trial event on stderr, in place of Tune's tables: a trial starts (with its
    values), reports (at most every :attr:`REPORT_EVERY` seconds per trial), ends (its run's stop
    reason, or stopped early by the scheduler) or fails (where its traceback is).

    :param root: the search's directory (a trial whose run ended wrote its ``summary.json`` there).
    """

    REPORT_EVERY = 10.0

    def __init__(self, metric: str, root: Path, stream: TextIO | None = None) -> None:
        self.metric = metric
        self.root = root
        self.stream = stream  # None: sys.stderr when writing (Tune pickles its callbacks, and a stream with them)
        self._reported: dict[str, float] = {}

    def started(self, trial: str, params: Mapping[str, Any]) -> None:
        values = " ".join(f"{key}={_cell(value)}" for key, value in params.items())
        self._reported[trial] = time.monotonic()  # its first report line after REPORT_EVERY seconds
        self._say(f"trial {trial} started: {values}")

    def reported(self, trial: str, row: Mapping[str, Any]) -> None:
        now = time.monotonic()
        if now - self._reported.get(trial, -math.inf) >= self.REPORT_EVERY:
            self._reported[trial] = now
            self._say(f"trial {trial}: {self._figures(row)}")

    def ended(self, trial: str, row: Mapping[str, Any], error_file: str | None = None) -> None:
        reason = _stop_reason(self.root, trial)
        if error_file is not None:
            self._say(f"trial {trial} failed: its error is in {error_file}")
        elif reason is None:
            self._say(f"trial {trial} stopped by the scheduler: {self._figures(row)}")
        else:
            self._say(f"trial {trial} finished ({reason}): {self._figures(row)}")

    def _figures(self, row: Mapping[str, Any]) -> str:
        steps = row.get("env_steps")
        return f"{self.metric} {_cell(row.get(self.metric))} at {steps if steps is None else f'{steps:,}'} env steps"

    def _say(self, text: str) -> None:
        print(f"pytorchrl: {text}", file=self.stream or sys.stderr, flush=True)


def _status_callback(lines: TrialLines) -> Any:
    """``lines`` as a Ray Tune callback (made here: ``import pytorchrl`` does not import Tune)."""
    from ray.tune import Callback

    class TrialStatus(Callback):
        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            lines.started(str(trial), trial.config)

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any) -> None:
            lines.reported(str(trial), result)

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            lines.ended(str(trial), trial.last_result or {})

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            lines.ended(str(trial), trial.last_result or {}, error_file=trial.error_file or "the trial's directory")

    return TrialStatus()


@contextlib.contextmanager
def _legacy_tune_output() -> Iterator[None]:
    """Tune's older output engine while fitting: at ``verbose=0`` it prints nothing, where the
    newer one still prints its experiment table and paths on stdout (the one JSON line's stream)."""
    previous = os.environ.get("RAY_AIR_NEW_OUTPUT")
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["RAY_AIR_NEW_OUTPUT"]
        else:
            os.environ["RAY_AIR_NEW_OUTPUT"] = previous


def trial_resources_of(params: dict[str, Any], *, base: dict[str, Any], learner_cpus: float | None = None) -> Any:
    """:func:`trial_resources` of the trial with ``params`` (a space may set its worker counts,
    their resources, ``run.torch_threads`` or ``run.device``)."""
    return trial_resources(from_dict(set_values(base, params)), learner_cpus)


#: the config keys (and sections) whose values change what a trial reserves
_SIZING = ("scheme.", "run.torch_threads", "run.device")


def trial_shapes(base: dict[str, Any], parsed: dict[str, tuple[str, Any]]) -> list[Config]:
    """The base config, and one config per value a sizing key of the space can take (a
    ``choice``'s or ``grid``'s values, a range's ends), the others at the base's: what
    :func:`check_trial_fits` checks before the search starts."""
    shapes = [from_dict(base)]
    for key, (dist, arg) in parsed.items():
        if key.startswith(_SIZING):
            values = list(arg) if dist in ("choice", "grid") else [arg[0], int(float(arg[1])) - 1 if dist == "randint" else arg[1]]
            shapes += [from_dict(set_values(base, {key: value})) for value in values]
    return shapes


def trial_resources(config: Config, learner_cpus: float | None = None) -> Any:
    """A Tune placement group for one trial: its learner (``learner_cpus``, default
    ``run.torch_threads``), then each remote worker's bundle."""
    from ray import tune as ray_tune

    from pytorchrl.scheme.base.worker_set import total_resources

    bundles: list[dict[str, float]] = []
    for name, count, resources in trial_groups(config, learner_cpus):
        bundle = {k: v for k, v in total_resources([(name, 1, resources)]).items() if v > 0}
        bundles += [bundle] * count if bundle else []
    return ray_tune.PlacementGroupFactory(bundles, strategy="PACK")


def trial_groups(config: Config, learner_cpus: float | None = None) -> list[tuple[str, int, dict[str, Any]]]:
    """``(name, count, resources)`` of what one trial reserves: its learner (with ``run.device:
    cuda``, a GPU, less the share its central inference servers reserve on it; ``auto`` reserves
    none, so Tune counts a learner's GPU only with ``cuda``), then its remote workers."""
    from pytorchrl.scheme.scheme import remote_worker_groups, with_server_gpus

    scheme = with_server_gpus(config.scheme, config.run.device)
    learner: dict[str, Any] = {"num_cpus": float(config.run.torch_threads if learner_cpus is None else learner_cpus)}
    if config.run.device.startswith("cuda"):
        servers = scheme.inference_server.num_servers * (scheme.inference_server.num_gpus or 0.0) if scheme.inference == "central" else 0.0
        learner["num_gpus"] = max(0.0, 1.0 - servers)
    return [("trial learner (--trial-cpus)", 1, learner), *remote_worker_groups(scheme)]


def check_trial_fits(config: Config, learner_cpus: float | None = None) -> None:
    """Raise :class:`InputError` when one trial's placement group cannot fit the running Ray
    cluster: Tune would leave such a trial pending forever."""
    from pytorchrl.scheme.base.worker_set import check_fits, cluster_resources

    problem = check_fits(trial_groups(config, learner_cpus), *cluster_resources(), where="tune", who="each trial's learner and remote workers")
    if problem is not None:
        raise InputError(problem)


def _scheduler(name: str, config: Config, parsed: dict[str, tuple[str, Any]], interval: int | None, grace: int | None) -> Any:
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, PopulationBasedTraining

    run = config.run
    report_every = run.eval_every or run.log_every
    if name == "asha":
        grace = max(report_every, run.target_steps // 8) if grace is None else grace
        # stop_last_trials False: a trial that reaches target_steps ends its run (summary.json, final checkpoint)
        return ASHAScheduler(time_attr="env_steps", max_t=run.target_steps, grace_period=grace, reduction_factor=2, stop_last_trials=False)
    if name == "pbt":
        return PopulationBasedTraining(
            time_attr=PBT_TIME, perturbation_interval=1,  # the checkpoints' grid: TuneReporter
            hyperparam_mutations=pbt_mutations(parsed), custom_explore_fn=functools.partial(within_space, parsed=parsed),
            quantile_fraction=0.25, resample_probability=0.25,
        )
    return FIFOScheduler()


def _searcher(seed: int) -> Any:
    from ray.tune.search import BasicVariantGenerator

    return BasicVariantGenerator(random_state=seed)  # the same space and seed sample the same trials


def _trial_name(trial: Any) -> str:
    return f"trial_{trial.trial_id}"


def _trial_rows(results: list[Any], parsed: dict[str, tuple[str, Any]], metric: str, root: Path, target_steps: int) -> list[dict[str, Any]]:
    rows = []
    for result in results:
        metrics = result.metrics or {}
        config = result.config or {}
        history = result.metrics_dataframe
        best = float(history[metric].max()) if history is not None and metric in history else None
        rows.append({
            "trial": Path(result.path).name if result.path else "?",
            **{key: config.get(key) for key in parsed},
            metric: metrics.get(metric),
            f"best_{metric}": best,
            "env_steps": metrics.get("env_steps"),
            "wall_time_s": metrics.get("wall_time_s"),
            "status": _status(result, root, target_steps),
        })
    return rows


def _status(result: Any, root: Path, target_steps: int) -> str:
    """``error``, the run's own stop reason (``target_steps``, ``stop_at_return``: it finished;
    ASHA ends a trial at its budget before the run writes its summary), or ``stopped`` (the
    scheduler ended it early)."""
    if result.error is not None:
        return "error"
    reason = _stop_reason(root, Path(result.path).name) if result.path else None
    if reason is not None:
        return reason
    return "target_steps" if (result.metrics or {}).get("env_steps", 0) >= target_steps else "stopped"


def _stop_reason(root: Path, trial: str) -> str | None:
    """The stop reason in a trial run's ``summary.json`` (None: the run did not end by itself)."""
    summary = root / "trials" / trial / "summary.json"
    return str(json.loads(summary.read_text()).get("stop_reason", "target_steps")) if summary.is_file() else None


def _write_trials(path: Path, trials: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(trials[0]))
        writer.writeheader()
        writer.writerows(trials)


def format_table(result: TuneResult, metric: str) -> str:
    """The trials as a text table, best first."""
    rows = sorted(result.trials, key=lambda t: -math.inf if t[metric] is None else -t[metric])
    columns = list(rows[0])
    cells = [[_cell(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    return "\n".join([line] + ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def _base_dict(config: str | Path | Config | dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    from pytorchrl.config import apply_overrides

    if isinstance(config, (str, Path)):
        loaded = load_config(config, overrides)
        return config_to_dict(loaded)
    raw = config_to_dict(config) if isinstance(config, Config) else dict(config)
    return config_to_dict(from_dict(apply_overrides(raw, overrides)))


def _default_directory(config: Any) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = "-".join(Path(config).with_suffix("").parts[-2:]) if isinstance(config, (str, Path)) else "config"
    return Path("runs") / f"tune-{name}-{stamp}"


def _choice(option: str, value: Any, allowed: tuple[str, ...]) -> str:
    near = difflib.get_close_matches(str(value), list(allowed), n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return f"{option} {value!r} is not allowed{hint}; allowed: {', '.join(allowed)}"


__all__ = ["DISTRIBUTIONS", "SCHEDULERS", "TuneResult", "check_space", "format_table", "load_space", "tune"]
