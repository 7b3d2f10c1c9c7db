"""``pytorchrl train | evaluate | plot | tune | benchmark``.

Exit codes: 0 done (a training run stopped by one Ctrl-C or SIGTERM too: it checkpoints), 2 bad
input (config, env id, checkpoint) with one line on stderr naming the key or file, 130 stopped at
once (a second Ctrl-C or SIGTERM in training, a Ctrl-C elsewhere), 1 anything else.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import inspect
import json
import os
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytorchrl.utils.errors import ConfigError, InputError, TrainingDiverged, WorkerFailure
from pytorchrl.utils.runtime import configure_process

if TYPE_CHECKING:
    from pytorchrl.config import Config

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT = 0, 1, 2
#: a run stopped at once by a second Ctrl-C or SIGTERM (the shell's 128 + SIGINT)
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # KEY=VALUE overrides may follow options (`train c.yaml --quiet k=v`), in every command that takes them
        if not hasattr(args, "overrides") or any(a.startswith("-") or "=" not in a for a in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    configure_process()  # before torch's first parallel op, which starts its threads
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    formatwarning, warnings.formatwarning = warnings.formatwarning, _format_warning
    try:
        return int(args.func(args) or EXIT_OK)
    except InputError as exc:
        print(f"pytorchrl: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (WorkerFailure, TrainingDiverged) as exc:
        print(f"pytorchrl: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Interrupted as exc:
        print(f"pytorchrl: {exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:  # Ctrl-C in a command other than train, or before training starts
        print("pytorchrl: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        warnings.formatwarning = formatwarning  # main() called in-process leaves the caller's own


def _format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None) -> str:
    """A warning as the CLI shows it: one line, ``pytorchrl: warning: MESSAGE``, like its errors
    (the warnings module's default adds the file, the line number and a second line of source)."""
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    return f"pytorchrl: warning: {text}\n"


def _parser() -> argparse.ArgumentParser:
    from pytorchrl import __version__

    parser = argparse.ArgumentParser(
        prog="pytorchrl", description="Scalable reinforcement learning with PyTorch on Ray.", formatter_class=_HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"pytorchrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train from a YAML config, or an env's default config with --algo/--env (or resume a run)")
    train.add_argument("config", nargs="?", help="YAML config file, e.g. configs/ppo/cartpole.yaml")
    train.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. algorithm.lr=3e-4 run.seed=3")
    train.add_argument(
        "--resume", metavar="RUN_DIR",
        help="continue RUN_DIR from its newest intact checkpoint (KEY=VALUE overrides change its training settings; `evaluate --help` lists the keys a checkpoint fixes)",
    )
    train.add_argument(
        "--algo", metavar="ALGO",
        help="instead of a CONFIG.yaml, with --env: the shipped config for that env and algorithm, else the default of the env's "
        "family (an algorithm name, e.g. ppo, dqn or sac; the choice is printed on stderr)",
    )
    train.add_argument("--env", metavar="ENV_ID", help="with --algo: the env to train on, e.g. CartPole-v1, LunarLander-v3, ALE/Breakout-v5")
    train.add_argument("--run-dir", help="run directory (default runs/<config folder>-<config name>-<timestamp>, e.g. runs/ppo-cartpole-...; a family default's: runs/<algo>-<env id>-<timestamp>)")
    train.add_argument("--quiet", action="store_true", help="no progress line")
    train.add_argument(
        "--address", metavar="ADDR",
        help="join this Ray cluster (host:port, 'auto' or ray://host:port) instead of starting a local Ray; 'local': a local Ray "
        "whatever RAY_ADDRESS says; default: RAY_ADDRESS if set (a config without remote workers starts no Ray)",
    )
    train.set_defaults(func=_train)

    evaluate = sub.add_parser("evaluate", help="run episodes of a trained policy (deterministic unless its config sets run.eval_deterministic: false)")
    evaluate.add_argument("path", metavar="RUN_DIR|CHECKPOINT", help="a run directory (its newest readable checkpoint) or one of its checkpoints/step_N")
    evaluate.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE",
        help="changes to the run's config, e.g. env.atari.repeat_action_probability=0.25, run.eval_deterministic=true, "
        "env.max_episode_steps=1000, env.env_kwargs={...} (same spaces) or env.num_test_envs=4; keys the checkpoint was trained "
        "with that shape its network or observations are refused (env.env_id, env.normalize_obs, env.clip_obs, env.atari.frame_skip, "
        "screen_size, frame_stack and full_action_space, actor.* but log_std_init, ortho_init and the *_precision keys, algorithm.name, "
        "DQN's rainbow, dueling, noisy_nets, distributional, num_atoms, v_min, v_max, head_hidden_sizes and value_rescaling, SAC's "
        "use_sde, MPC's ensemble_size, and the on-policy algorithms' rnd.enabled, rnd.features and rnd.hidden_sizes), as they are by "
        "train --resume, which also keeps run.seed, storage.capacity and algorithm.prioritized_replay",
    )
    evaluate.add_argument("--episodes", type=int, default=10, metavar="N", help="episodes to run")
    evaluate.add_argument("--video", metavar="DIR", help="also record one episode as DIR/episode.gif")
    evaluate.add_argument(
        "--save-demos", metavar="DIR", help="also write the episodes as demonstrations DIR/demo_NNN.npz (for algorithm.demos: PPO from demonstrations)"
    )
    evaluate.set_defaults(func=_evaluate)

    plot = sub.add_parser("plot", help="learning curves of run directories (seeds of one config: mean and min-max band)")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    plot.add_argument("-o", "--output", default="curves.png", help="image file to write")
    plot.add_argument("--metric", default="eval_return_mean", help="progress.csv column")
    plot.add_argument("--compare", nargs="+", metavar="METRIC", help="several columns side by side (instead of --metric)")
    plot.add_argument("--x", default="env_steps", help="x axis: env_steps or wall_time_s")
    plot.set_defaults(func=_plot)

    tune = sub.add_parser("tune", help="hyper-parameter search or population-based training on Ray Tune")
    tune.add_argument("config", help="YAML config: the base of every trial")
    tune.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides of the base config")
    tune.add_argument("--space", required=True, metavar="SPACE.yaml", help="dotted config keys mapped to distributions (loguniform, uniform, randint, choice, grid)")
    tune.add_argument("--samples", type=int, default=8, metavar="N", help="trials")
    tune.add_argument("--scheduler", default="asha", help="fifo, asha or pbt")
    tune.add_argument("--metric", default="eval_return_mean", help="the return maximised: eval_return_mean or train_return_mean")
    tune.add_argument("--dir", metavar="DIR", help="output directory (default runs/tune-<config name>-<timestamp>)")
    tune.add_argument("--address", metavar="ADDR", help="Ray cluster to run the trials on (default: RAY_ADDRESS, else a local Ray)")
    tune.add_argument("--perturbation-interval", type=int, metavar="STEPS", help="pbt: env steps between exploits (default two evaluations)")
    tune.add_argument("--trial-cpus", type=float, metavar="N", help="CPUs reserved per trial's learner (default run.torch_threads; 0.5 runs two per core)")
    tune.add_argument("--grace-steps", type=int, metavar="STEPS", help="asha: env steps before a trial may be stopped (default an eighth of the budget)")
    tune.set_defaults(func=_tune)

    bench = sub.add_parser("benchmark", help="print the figures of BENCHMARKS.md")
    bench.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (see --list), or all (hours: Pong and MuJoCo included)")
    bench.add_argument("--list", action="store_true", help="list the benchmarks")
    bench.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the learning benchmarks")
    bench.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    bench.set_defaults(func=_benchmark)
    for command in sub.choices.values():  # every subcommand's --help shows each option's default (a formatter is per parser)
        command.formatter_class = _HelpFormatter
    return parser


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Adds ``(default: X)`` to every option that has a default, where its help does not already
    say it: a user should not need the README to learn what an omitted option does."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default is argparse.SUPPRESS  # flags, optional paths
        if not action.option_strings or unset or "default" in text:
            return text
        return super()._get_help_string(action)


def _train(args: argparse.Namespace) -> int:
    from pytorchrl.utils.streams import stdout_to_stderr

    with stdout_to_stderr():  # stdout is the JSON summary alone: Ray's worker output and "worker died" notices go to stderr
        ray_before = _ray_running()
        try:
            summary = _run_training(args)
        finally:
            # a Ray this run started stops here: stopping, Ray prints its last (deduplicated) worker lines to sys.stdout
            if not ray_before and _ray_running():
                sys.modules["ray"].shutdown()
    print(json.dumps(summary))
    return EXIT_OK


def _ray_running() -> bool:
    """Whether Ray is initialised in this process (without importing it: a local run never does)."""
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


def _run_training(args: argparse.Namespace) -> dict[str, Any]:
    """Build or resume the run of ``train``'s arguments and train it; the run's summary."""
    from pytorchrl.config import load_config
    from pytorchrl.learner import Learner
    from pytorchrl.run_dir import check_new_run_dir

    picking = _check_algo_env(args)
    if args.run_dir is not None and not args.run_dir.strip():  # `--run-dir "$UNSET"`
        raise InputError("--run-dir is empty: give a directory, or leave the option out for runs/<config>-<time>")
    if args.resume and args.run_dir is not None:
        raise InputError(f"--resume RUN_DIR continues the run in its own directory: drop --run-dir {args.run_dir!r} (to branch a run, copy its directory and resume the copy)")
    if args.resume and args.config is not None and "=" not in args.config:
        raise InputError(f"--resume RUN_DIR continues the run with its own config.yaml: drop {args.config!r} (change keys with KEY=VALUE overrides)")
    if (args.resume or picking) and args.config is not None:  # `train --resume DIR k=v`, `--algo A --env E k=v`: the first override lands in `config`
        args.overrides, args.config = [args.config, *args.overrides], None
    _check_overrides(args.overrides)
    if args.address:
        args.overrides = [*args.overrides, f"scheme.ray.address={args.address}"]
    if args.resume:
        learner = Learner.resume(args.resume, args.overrides, progress=not args.quiet)
    else:
        if picking:
            config, name = _default_config(args.algo, args.env, args.overrides)
        elif args.config is None:
            raise InputError("train needs a CONFIG.yaml, or --algo ALGO --env ENV_ID (or --resume RUN_DIR)")
        else:
            config, name = load_config(args.config, args.overrides), _config_name(args.config)
        run_dir = Path(args.run_dir) if args.run_dir else _default_run_dir(name)
        check_new_run_dir(run_dir, "--run-dir" if args.run_dir else "run directory")  # in the option's words; from_config checks again
        learner = Learner.from_config(config, run_dir=run_dir, progress=not args.quiet)
    print(f"pytorchrl: run directory {learner.run_dir}", file=sys.stderr)
    if learner.resumed_from is not None:  # which of its checkpoints, and how far the run had come
        print(
            f"pytorchrl: resuming from {learner.resumed_from} ({learner.env_steps:,} env steps, "
            f"{learner.wall_time_s:,.0f} s of the run's wall-clock so far)", file=sys.stderr,
        )
    try:
        return learner.train()  # the first Ctrl-C or SIGTERM stops it at the round's end, with a checkpoint
    except KeyboardInterrupt:  # the second: at once
        newest = learner.newest_checkpoint()
        if newest is None:
            raise Interrupted("stopped at once, before the run's first checkpoint: nothing to resume") from None
        raise Interrupted(
            f"stopped at once: the training after its newest checkpoint, {newest}, is not saved; continue from there with "
            f"`pytorchrl train --resume {learner.run_dir}`"
        ) from None
    finally:
        learner.close()


class Interrupted(Exception):
    """A run stopped at once, by a second Ctrl-C or SIGTERM."""


def _check_algo_env(args: argparse.Namespace) -> bool:
    """Whether ``train`` was given ``--algo``/``--env``, refusing them beside ``--resume`` or a
    CONFIG.yaml, and either one without the other (one line each)."""
    if args.algo is None and args.env is None:
        return False
    flags = " and ".join(f for f, v in (("--algo", args.algo), ("--env", args.env)) if v is not None)
    if args.resume:
        raise InputError(f"--resume RUN_DIR continues the run with its own config.yaml: drop {flags} (change keys with KEY=VALUE overrides)")
    if args.config is not None and "=" not in args.config:  # one with `=` is the first override
        raise InputError(f"train takes a CONFIG.yaml or --algo ALGO --env ENV_ID, not both: drop {args.config!r} or {flags}")
    if args.env is None:
        raise InputError(f"--algo {args.algo} needs --env ENV_ID too, e.g. --algo {args.algo} --env CartPole-v1 (or give a CONFIG.yaml instead)")
    if args.algo is None:
        from pytorchrl.agent.algorithms import ALGORITHMS

        raise InputError(f"--env {args.env} needs --algo ALGO too, one of {', '.join(ALGORITHMS)} (or give a CONFIG.yaml instead)")
    return True


def _default_config(algo: str, env_id: str, overrides: list[str]) -> tuple[Config, str]:
    """The config ``train --algo --env`` trains (the shipped one, else the env family's default,
    with the overrides on top, checked as a YAML config is), and its run name; prints the choice."""
    from pytorchrl.config import apply_overrides, from_dict
    from pytorchrl.defaults import choose_config, shown_path

    choice = choose_config(algo, env_id, overrides)
    try:
        config = from_dict(apply_overrides(choice.raw, overrides))
    except ConfigError as exc:  # the default itself is valid: an override is at fault, or its clash with the default's values
        origin = shown_path(choice.path) if choice.path is not None else f"the {algo} {choice.family} family default"
        raise ConfigError(f"{origin} with your overrides: {exc}") from None
    print(f"pytorchrl: {choice.message}", file=sys.stderr)
    if choice.path is not None:
        return config, _config_name(str(choice.path))
    assert choice.run_name is not None  # a family default names its run
    return config, choice.run_name


def _check_overrides(overrides: list[str]) -> None:
    given: dict[str, str] = {}
    for item in overrides:
        if "=" not in item:
            raise InputError(f"argument {item!r} is not a KEY=VALUE override (e.g. run.seed=3)")
        key = item.split("=", 1)[0].strip()
        if key in given:  # scripts put their defaults first and a user's changes after: the last one counts, and says so
            warnings.warn(f"override {key!r} is given twice ({given[key]!r}, then {item!r}): the last one is used", stacklevel=2)
        given[key] = item


def _config_name(config_path: str) -> str:
    """A config's name in its run directory's: its folder and file name (``ppo-cartpole``)."""
    parts = Path(config_path).with_suffix("").parts
    return "-".join(parts[-2:]) if len(parts) >= 2 else parts[-1]


def _default_run_dir(name: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return Path("runs") / f"{name}-{stamp}"


def _evaluate(args: argparse.Namespace) -> int:
    from pytorchrl.evaluation import evaluate_checkpoint
    from pytorchrl.logging.writers import EvaluationProgress

    if args.episodes < 1:
        raise InputError(f"--episodes = {args.episodes} is out of range: must be >= 1")
    _check_overrides(args.overrides)
    progress = EvaluationProgress(args.episodes)  # on stderr: stdout is the one JSON line
    try:
        result = evaluate_checkpoint(
            args.path, episodes=args.episodes, video_dir=args.video, overrides=args.overrides, on_episode=progress, demos_dir=args.save_demos
        )
    finally:
        progress.close()
    print(json.dumps(result))
    return EXIT_OK


def _plot(args: argparse.Namespace) -> int:
    from pytorchrl.plotting import figure_path, plot_runs
    from pytorchrl.utils.paths import check_output_file

    if args.output.endswith(("/", os.sep)):
        raise InputError(f"-o {args.output!r} names a directory; give the image's file name, e.g. {os.path.join(args.output, 'curves.png')!r}")
    output = check_output_file(figure_path(args.output), "-o")  # where matplotlib writes it: a name without a suffix gets .png
    plot_runs(args.run_dirs, metrics=tuple(args.compare or [args.metric]), x=args.x, output=output, metric_option="--compare" if args.compare else "--metric")
    print(f"pytorchrl: wrote {output}", file=sys.stderr)
    return EXIT_OK


def _tune(args: argparse.Namespace) -> int:
    from pytorchrl.tuning import format_table, tune
    from pytorchrl.utils.streams import stdout_to_stderr

    _check_overrides(args.overrides)
    with stdout_to_stderr():  # stdout is the JSON result alone: the trials' worker output goes to stderr, as train's does
        ray_before = _ray_running()
        try:
            result = tune(
                args.config, args.space, directory=args.dir, samples=args.samples, scheduler=args.scheduler, metric=args.metric,
                overrides=args.overrides, address=args.address, perturbation_interval=args.perturbation_interval, grace_steps=args.grace_steps,
                trial_cpus=args.trial_cpus,
            )
        finally:
            if not ray_before and _ray_running():  # stopping, Ray prints its last worker lines to sys.stdout
                sys.modules["ray"].shutdown()
    print(format_table(result, args.metric), file=sys.stderr)
    print(f"pytorchrl: best trial {result.best_trial} ({args.metric} {result.best_metric:.6g}); wrote {result.best_config_path}", file=sys.stderr)
    print(json.dumps({
        "directory": str(result.directory), "best_config": str(result.best_config_path), "best_trial": result.best_trial,
        "best_metric": result.best_metric, "best_params": result.best_params, "trials": len(result.trials),
        "wall_time_s": round(result.wall_time_s, 1),
    }))
    return EXIT_OK


def _benchmark(args: argparse.Namespace) -> int:
    BENCHMARKS, run_benchmarks = _benchmarks_suite()
    if args.list:
        width = max(map(len, BENCHMARKS))
        for name, bench in BENCHMARKS.items():
            print(f"{name:{width}s}  {first_sentence(bench.__doc__ or '')}")
        return EXIT_OK
    if not args.names:  # all of them take hours: only when asked for by name
        raise InputError(f"benchmark needs the names of the benchmarks to run (pytorchrl benchmark --list), or all ({len(BENCHMARKS)}, hours: Pong and MuJoCo included)")
    if "all" in args.names and len(args.names) > 1:
        raise InputError(f"benchmark all runs every benchmark: give it alone, or names without it (got {' '.join(args.names)})")
    names = list(BENCHMARKS) if args.names == ["all"] else args.names
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        near = difflib.get_close_matches(unknown[0], list(BENCHMARKS), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise InputError(f"unknown benchmark {unknown[0]!r}{hint}; allowed: {', '.join(BENCHMARKS)}, or all")
    bad_seed = next((seed for seed in args.seeds if not 0 <= seed < 2**64), None)  # run.seed's range
    if bad_seed is not None:
        raise InputError(f"--seeds {bad_seed} is out of range: must be in 0..{2**64 - 1}")
    twice = next((seed for i, seed in enumerate(args.seeds) if seed in args.seeds[:i]), None)
    if twice is not None:
        raise InputError(f"--seeds {' '.join(map(str, args.seeds))}: seed {twice} is given twice (a benchmark counts each seed once)")
    if args.json:  # before hours of benchmarks whose figures it keeps
        from pytorchrl.utils.paths import check_output_file

        check_output_file(args.json, "--json")
    def keep(results: dict[str, Any]) -> None:  # whole after each benchmark, never half written
        from pytorchrl.utils.paths import write_text_atomic

        write_text_atomic(Path(args.json), json.dumps(results, indent=2, default=str))

    run_benchmarks(names, seeds=args.seeds, on_result=keep if args.json else None)
    return EXIT_OK


def _benchmarks_suite() -> tuple[dict[str, Any], Any]:
    """``BENCHMARKS`` and ``run_benchmarks`` of the ``benchmarks`` package of a source checkout
    (:func:`~pytorchrl.utils.checkout.benchmarks_checkout`), which an installed wheel does not carry.

    :raises InputError: one line saying how to get them, when there is no checkout.
    """
    import importlib

    from pytorchrl.utils.checkout import BENCHMARKS_HINT, benchmarks_checkout, use_checkout

    root = benchmarks_checkout()
    if root is None:
        raise InputError(BENCHMARKS_HINT)
    use_checkout(root)
    try:
        suite = importlib.import_module("benchmarks.suite")
    except ModuleNotFoundError as exc:
        if exc.name not in ("benchmarks", "benchmarks.suite"):
            raise
        suite = None
    found = Path(getattr(suite, "__file__", None) or "").resolve()
    if suite is None or not found.is_relative_to(root / "benchmarks"):  # another module named 'benchmarks' came first
        raise InputError(f"the module 'benchmarks.suite' imported is not {root / 'benchmarks' / 'suite.py'}; {BENCHMARKS_HINT}")
    return suite.BENCHMARKS, suite.run_benchmarks


#: reST roles (:func:`~a.b`) and literals (``x``, `x`), shown as their plain text
_MARKUP = re.compile(r"(?::[\w:]+:)?`{1,2}~?([^`]+?)`{1,2}")
#: a sentence ends at . ! or ? before a space or the end, except after these abbreviations
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\betc)(?<!\bcf)[.!?](?=\s|$)")


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring, joined across its lines, without reST markup
    (``benchmark --list``: one complete, readable sentence per benchmark)."""
    paragraph = " ".join(inspect.cleandoc(doc).split("\n\n", 1)[0].split())
    text = _MARKUP.sub(r"\1", paragraph)
    end = _SENTENCE_END.search(text)
    return text[: end.end()] if end else text


if __name__ == "__main__":
    sys.exit(main())
