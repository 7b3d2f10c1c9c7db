"""What a user sees on a terminal (issue 36): the progress line while evaluating and at the end,
``evaluate``'s progress, ``--help`` defaults, ``benchmark --list``, single-point plots, Tune's
console, and MuJoCo rendering without a display."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pytorchrl.cli import _parser, first_sentence, main
from pytorchrl.config import from_dict
from pytorchrl.envs import rendering
from pytorchrl.learner import Learner
from pytorchrl.logging import writers
from pytorchrl.logging.writers import EvaluationProgress, ProgressLine
from pytorchrl.utils.errors import InputError
from tests.conftest import CONFIGS, REPO

TINY = {
    "env": {"num_envs": 4, "num_test_envs": 2},
    "storage": {"num_steps": 16},
    "algorithm": {"name": "ppo", "num_epochs": 1, "minibatch_size": 32},
    "actor": {"hidden_sizes": [16]},
}


class Terminal(io.StringIO):
    """A stream that says it is a terminal (the live, rewritten line)."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch):
    """``time.monotonic`` of the writers module, moved by hand."""
    now = [1000.0]
    monkeypatch.setattr(writers.time, "monotonic", lambda: now[0])
    return now


def _lines(stream: io.StringIO) -> list[str]:
    return [part.replace("\x1b[K", "") for part in re.split(r"[\r\n]", stream.getvalue()) if part.strip()]


# ------------------------------------------------------------------ the progress line


def test_the_progress_line_counts_evaluation_episodes_in_place_of_the_eta(clock):
    out = Terminal()
    line = ProgressLine(10_000, stream=out)
    row = {"env_steps": 10_000, "fps": 812.0, "wall_time_s": 125.0, "train_return_mean": 3.0, "eval_return_mean": None}
    line.evaluating(0, 10, row)
    clock[0] += 0.1
    line.evaluating(2, 10, row)  # within 0.25 s of the last refresh: skipped
    clock[0] += 0.3
    line.evaluating(3, 10, {**row, "wall_time_s": 170.0})
    shown = _lines(out)
    assert len(shown) == 2
    assert shown[0].endswith("| evaluating 0/10 episodes") and "eta" not in shown[0]
    assert "evaluating 3/10 episodes" in shown[1] and "elapsed 2:50" in shown[1] and "fps      812" in shown[1]


def test_the_last_line_shows_the_runs_fps_and_done(clock):
    out = Terminal()
    line = ProgressLine(10_000, stream=out)
    line.update({"env_steps": 10_000, "fps": 0.0, "wall_time_s": 200.0}, force=True)  # the final row's empty interval
    line.close({"env_steps": 10_000, "fps": 50.0, "wall_time_s": 200.0, "eval_return_mean": 21.0})
    last = _lines(out)[-1]
    assert last.endswith("| done") and "fps       50" in last and "eval    21.0" in last and "eta" not in last
    assert out.getvalue().endswith("\n")


def test_the_last_evaluation_stays_on_the_line_and_a_stopped_run_does_not_say_done(clock):
    """Rows between evaluations keep showing the last evaluation's return (not ``-``); a run
    stopped by a signal ends on ``stopped, resumable``."""
    out = io.StringIO()
    line = ProgressLine(1_000, stream=out)
    line.update({"env_steps": 100, "fps": 10.0, "wall_time_s": 5.0}, force=True)  # before any evaluation
    line.update({"env_steps": 200, "fps": 10.0, "wall_time_s": 6.0, "eval_return_mean": 61.1}, force=True)
    line.update({"env_steps": 300, "fps": 10.0, "wall_time_s": 7.0, "eval_return_mean": math.nan}, force=True)
    line.close({"env_steps": 300, "fps": 10.0, "wall_time_s": 7.0}, "stopped, resumable")
    shown = out.getvalue().splitlines()
    assert [text.split("| eval ")[1].split(" |")[0].strip() for text in shown] == ["-", "61.1", "61.1", "61.1"]
    assert shown[-1].endswith("| stopped, resumable")


def test_off_a_terminal_evaluation_writes_a_line_every_few_seconds_only(clock):
    out = io.StringIO()
    line = ProgressLine(100, stream=out)
    row = {"env_steps": 100, "fps": 10.0, "wall_time_s": 5.0}
    line.update(row, force=True)
    line.evaluating(0, 4, row)
    clock[0] += 1
    line.evaluating(1, 4, row)
    clock[0] += ProgressLine.LOG_EVALUATION_EVERY
    line.evaluating(2, 4, row)
    assert [text.rsplit("| ", 1)[1] for text in out.getvalue().splitlines()] == ["eta 0:00", "evaluating 2/4 episodes"]


def test_off_a_terminal_a_first_evaluation_before_any_row_waits_its_turn_too(clock):
    """A run's first evaluation can come before its first row (eval_every below log_every): a
    tenth of a second's evaluation wrote a line of its own, the line's clock starting at 0."""
    out = io.StringIO()
    line = ProgressLine(100, stream=out)
    line.evaluating(1, 4, {"env_steps": 0})
    assert out.getvalue() == ""
    clock[0] += ProgressLine.LOG_EVALUATION_EVERY
    line.evaluating(2, 4, {"env_steps": 0})
    assert out.getvalue().rstrip().endswith("evaluating 2/4 episodes")


def test_a_run_shows_its_evaluations_and_ends_on_done_with_a_nonzero_fps():
    learner = Learner.from_config(from_dict({**TINY, "run": {"target_steps": 128, "eval_every": 64, "eval_episodes": 3}}), progress=False)
    out = Terminal()
    learner._progress = ProgressLine(128, stream=out)
    try:
        learner.train()
    finally:
        learner.close()
    shown = _lines(out)
    assert any(text.endswith("evaluating 0/3 episodes") for text in shown)
    assert any(text.endswith("evaluating 3/3 episodes") for text in shown)
    fps = float(re.search(r"fps\s+([\d,]+)", shown[-1]).group(1).replace(",", ""))
    assert shown[-1].endswith("| done") and fps > 0 and "steps       128/128" in shown[-1]


# --------------------------------------------------------------- pytorchrl evaluate


def test_evaluation_progress_counts_episodes_and_their_mean(monkeypatch, clock):
    out = Terminal()
    progress = EvaluationProgress(4, stream=out)
    progress([])
    clock[0] += 0.1
    progress([1.0])  # throttled
    clock[0] += 0.3
    progress([1.0, 3.0])
    progress([1.0, 3.0, 5.0, 7.0])  # the last always
    progress.close()
    assert _lines(out) == [
        "evaluating 0/4 episodes | return mean - | elapsed 0:00",
        "evaluating 2/4 episodes | return mean 2.0 | elapsed 0:00",
        "evaluating 4/4 episodes | return mean 4.0 | elapsed 0:00",
    ]
    assert out.getvalue().endswith("\n")


def test_evaluate_prints_progress_on_stderr_and_one_json_line_on_stdout(tmp_path, capsys):
    learner = Learner.from_config(from_dict({**TINY, "run": {"target_steps": 64, "eval_every": 0, "eval_episodes": 1}}), run_dir=tmp_path / "run", progress=False)
    try:
        learner.train()
    finally:
        learner.close()
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "run"), "--episodes", "3"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 1 and len(json.loads(captured.out)["returns"]) == 3
    assert "evaluating 0/3 episodes" in captured.err and "evaluating 3/3 episodes | return mean" in captured.err


# ------------------------------------------------------------------------- --help


def test_every_option_with_a_default_shows_it_in_help():
    parser = _parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(subparsers) == {"train", "evaluate", "plot", "tune", "benchmark"}
    for name, sub in subparsers.items():
        text = " ".join(sub.format_help().split())  # argparse wraps the help column
        for action in sub._actions:
            if not action.option_strings or action.default in (None, False, argparse.SUPPRESS):
                continue
            assert f"default: {action.default}" in text, (name, action.option_strings, action.default)
    evaluate = " ".join(subparsers["evaluate"].format_help().split())
    assert "--episodes N episodes to run (default: 10)" in evaluate


# --------------------------------------------------------------------- benchmark --list


def test_first_sentence_joins_lines_and_drops_markup():
    doc = """Milliseconds per step (``configs/sac/pendulum.yaml``, e.g. one
    env step) of :func:`~pytorchrl.benchmarks.sac_step` and `x`. Then more.

    A second paragraph."""
    assert first_sentence(doc) == "Milliseconds per step (configs/sac/pendulum.yaml, e.g. one env step) of pytorchrl.benchmarks.sac_step and x."
    assert first_sentence("No full stop\nacross two lines\n\nParagraph.") == "No full stop across two lines"


def test_benchmark_list_gives_one_complete_sentence_each(capsys):
    from benchmarks.suite import BENCHMARKS

    assert main(["benchmark", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(BENCHMARKS)
    assert not any("`" in line for line in lines)
    described = dict(line.split(None, 1) for line in lines)
    assert described["resume_after_kill"].endswith("(final steps, env steps redone, weights equal).")  # was cut at "compare"
    assert described["sac_step"].startswith("Milliseconds per SAC step (one Pendulum-v1 env step and one gradient step, configs/sac/pendulum.yaml)")


def test_benchmark_runs_what_is_named_and_all_only_when_asked(capsys, monkeypatch):
    """No name is one line (all of them take hours); ``all`` runs every one, in the list's order."""
    import benchmarks.suite as suite

    ran: list[list[str]] = []
    monkeypatch.setattr(suite, "run_benchmarks", lambda names, seeds, on_result=None: ran.append(names) or {})
    assert main(["benchmark"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pytorchrl benchmark --list" in err[0] and "or all" in err[0] and not ran
    assert main(["benchmark", "ppo_cartpole", "nope"]) == 2 and "unknown benchmark 'nope'" in capsys.readouterr().err and not ran
    assert main(["benchmark", "all"]) == 0 and main(["benchmark", "compression"]) == 0
    assert ran == [list(suite.BENCHMARKS), ["compression"]]


def test_benchmark_arguments_are_checked_before_anything_runs(tmp_path, capsys, monkeypatch):
    """Hours of benchmarks are not spent before a bad seed, a typo or a --json path that cannot be
    written is found."""
    import benchmarks.suite as suite

    ran: list[list[str]] = []
    monkeypatch.setattr(suite, "run_benchmarks", lambda names, seeds, on_result=None: ran.append(names) or (on_result and on_result({"compression": {"x": 1}})) or {"compression": {"x": 1}})
    (tmp_path / "afile").write_text("")
    cases = [
        (["all", "ppo_cartpol"], "benchmark all runs every benchmark: give it alone, or names without it (got all ppo_cartpol)"),
        (["ppo_cartpol"], "unknown benchmark 'ppo_cartpol' (did you mean 'ppo_cartpole'?)"),
        (["compression", "--seeds", "-1"], "--seeds -1 is out of range: must be in 0..18446744073709551615"),
        (["compression", "--seeds", "0", "0"], "--seeds 0 0: seed 0 is given twice"),
        (["compression", "--json", str(tmp_path / "afile" / "x.json")], f"the directory {str(tmp_path / 'afile')!r} is a regular file, not a directory"),
        (["compression", "--json", str(tmp_path)], f"--json {str(tmp_path)!r} is a directory, not a file"),
    ]
    for args, needle in cases:
        assert main(["benchmark", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (args, err)
    assert not ran
    assert main(["benchmark", "compression", "--json", str(tmp_path / "out.json")]) == 0
    assert ran == [["compression"]] and (tmp_path / "out.json").read_text().startswith("{")


# ---------------------------------------------------------------------------- plot


def _run(root: Path, name: str, evaluations: list[float]) -> Path:
    path = root / name
    path.mkdir()
    with (path / "progress.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_steps", "wall_time_s", "eval_return_mean"])
        writer.writerows([(100 * (i + 1), float(i), value) for i, value in enumerate(evaluations)])
    (path / "config.yaml").write_text(yaml.safe_dump({"env": {"env_id": "CartPole-v1"}, "algorithm": {"name": "ppo"}, "run": {"seed": 0}}))
    return path


def test_a_single_evaluation_is_drawn_as_a_marker_and_long_curves_as_lines(tmp_path):
    from pytorchrl.plotting import MARKERS_UP_TO, plot_runs

    single = plot_runs([_run(tmp_path, "one", [42.0])]).axes[0].lines[0]
    assert single.get_marker() not in (None, "None", "", " ") and single.get_xydata().tolist() == [[100.0, 42.0]]
    long = plot_runs([_run(tmp_path, "long", [float(i) for i in range(MARKERS_UP_TO + 1)])]).axes[0].lines[0]
    assert long.get_marker() in (None, "None", "", " ")


# ------------------------------------------------------------------------------ tune


def test_trial_lines_say_started_progress_and_how_each_trial_ended(tmp_path, clock, monkeypatch):
    from pytorchrl import tuning

    monkeypatch.setattr(tuning.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    lines = tuning.TrialLines("eval_return_mean", tmp_path, stream=out)
    lines.started("trial_a", {"algorithm.lr": 0.000123456})
    lines.reported("trial_a", {"env_steps": 1024, "eval_return_mean": 20.0})  # right after its start: no line
    clock[0] += tuning.TrialLines.REPORT_EVERY
    lines.reported("trial_a", {"env_steps": 2048, "eval_return_mean": 30.0})
    (tmp_path / "trials" / "trial_a").mkdir(parents=True)
    (tmp_path / "trials" / "trial_a" / "summary.json").write_text(json.dumps({"stop_reason": "stop_at_return"}))
    lines.ended("trial_a", {"env_steps": 3072, "eval_return_mean": 475.0})
    lines.ended("trial_b", {"env_steps": 512, "eval_return_mean": 9.0})
    lines.ended("trial_c", {}, error_file="/x/error.txt")
    assert out.getvalue().splitlines() == [
        "pytorchrl: trial trial_a started: algorithm.lr=0.0001235",
        "pytorchrl: trial trial_a: eval_return_mean 30 at 2,048 env steps",
        "pytorchrl: trial trial_a finished (stop_at_return): eval_return_mean 475 at 3,072 env steps",
        "pytorchrl: trial trial_b stopped by the scheduler: eval_return_mean 9 at 512 env steps",
        "pytorchrl: trial trial_c failed: its error is in /x/error.txt",
    ]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tune_prints_its_trials_on_stderr_and_only_the_json_line_on_stdout(tmp_path, capsys, idle_ray):
    code = main([
        "tune", str(CONFIGS / "ppo" / "cartpole.yaml"), "--space", str(CONFIGS / "tune" / "ppo_cartpole_space.yaml"),
        "--samples", "2", "--scheduler", "fifo", "run.target_steps=1024", "--dir", str(tmp_path / "t"),
    ])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    assert len(captured.out.splitlines()) == 1 and json.loads(captured.out)["trials"] == 2  # no Tune tables
    err = captured.err.splitlines()
    assert sum(" started: " in line for line in err) == 2 and sum(" finished (target_steps)" in line for line in err) == 2
    assert err[-1].startswith("pytorchrl: best trial") and not any("Trial status" in line for line in err)


# ---------------------------------------------------------------------- MuJoCo rendering


@pytest.fixture
def environ(monkeypatch):
    """A private copy of the environment, without a display or a chosen OpenGL backend."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "PYOPENGL_PLATFORM")}
    monkeypatch.setattr(os, "environ", env)
    return env


def test_without_a_display_mujoco_gets_a_headless_backend(environ, monkeypatch):
    monkeypatch.setattr(rendering.ctypes.util, "find_library", lambda name: "libOSMesa.so" if name == "OSMesa" else None)
    assert rendering.use_headless_gl() == "osmesa"
    assert environ["MUJOCO_GL"] == "osmesa" and environ["PYOPENGL_PLATFORM"] == "osmesa"
    monkeypatch.setattr(rendering.ctypes.util, "find_library", lambda name: f"lib{name}.so")
    environ["MUJOCO_GL"] = "glfw"  # the user's choice stays
    assert rendering.use_headless_gl() == "glfw"
    del environ["MUJOCO_GL"]
    environ["DISPLAY"] = ":0"  # a display: GLFW, MuJoCo's default
    assert rendering.use_headless_gl() is None and "MUJOCO_GL" not in environ
    del environ["DISPLAY"], environ["PYOPENGL_PLATFORM"]
    assert rendering.use_headless_gl() == "egl"


def test_a_failed_render_is_one_line_naming_mujoco_gl(monkeypatch):
    from pytorchrl.evaluation import _render_env

    class Broken:
        def reset(self, seed=None):
            return None, {}

        def render(self):
            raise RuntimeError("Traceback...\nmujoco.FatalError: an OpenGL platform library has not been loaded")

    learner = Learner.from_config(from_dict({**TINY, "run": {"target_steps": 64}}), progress=False)
    try:
        envs = learner.scheme.collection_workers.local_worker.envs
        monkeypatch.setattr(envs, "make_render_env", lambda: Broken())
        with pytest.raises(InputError) as error:
            _render_env(learner)
    finally:
        learner.close()
    message = str(error.value)
    assert "\n" not in message and "MUJOCO_GL" in message and "OpenGL platform library has not been loaded" in message


def test_an_env_that_cannot_render_fails_evaluate_video_before_any_episode(monkeypatch, tmp_path):
    """``evaluate --video`` on an env that cannot render: one line naming the extra, before the
    episodes are played (an Atari evaluation would otherwise run its games first)."""
    import gymnasium as gym

    from pytorchrl import evaluation
    from pytorchrl.envs.vec_env import VecEnv
    from pytorchrl.scheme.scheme import Scheme

    run = tmp_path / "run"
    learner = Learner.from_config(from_dict({**TINY, "run": {"target_steps": 64}}), run_dir=run, progress=False)
    learner.train()
    learner.close()

    def no_pygame(self):
        raise gym.error.DependencyNotInstalled("pygame is not installed")

    def played(*args, **kwargs):
        raise AssertionError("episodes were played before the render check")

    monkeypatch.setattr(VecEnv, "make_render_env", no_pygame)
    monkeypatch.setattr(Scheme, "evaluate", played)
    with pytest.raises(InputError) as error:
        evaluation.evaluate_checkpoint(run, episodes=3, video_dir=tmp_path / "video")
    message = str(error.value)
    assert "\n" not in message and "cannot render (pygame is not installed)" in message and "pip install -e '.[video]'" in message


def test_opengl_failures_are_told_apart_by_where_they_were_raised():
    def raised_in(filename: str) -> BaseException:
        try:
            exec(compile("raise AttributeError(\"'NoneType' object has no attribute 'glGetError'\")", filename, "exec"))
        except AttributeError as exc:
            return exc
        raise AssertionError("not raised")

    assert rendering.is_opengl_failure(raised_in(os.path.join("site-packages", "OpenGL", "raw", "GL", "_errors.py")))
    assert rendering.is_opengl_failure(raised_in(os.path.join("site-packages", "mujoco", "egl", "__init__.py")))
    assert not rendering.is_opengl_failure(raised_in(os.path.join("site-packages", "gymnasium", "envs", "mujoco", "half_cheetah_v5.py")))


def test_a_mujoco_warning_is_shown_once(monkeypatch, capsys):
    monkeypatch.setattr(rendering, "_shown", set())
    for _ in range(3):
        rendering._warn_once("compiler attribute 'settotalmass' is deprecated\n")
    assert capsys.readouterr().err.count("settotalmass") == 1


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_halfcheetah_renders_without_a_display_and_warns_once():
    pytest.importorskip("mujoco")
    pytest.importorskip("imageio")  # gymnasium[mujoco]'s renderer needs it
    script = (
        "from pytorchrl.envs.vec_env import VecEnv\n"
        "envs = VecEnv('HalfCheetah-v5', num_envs=2, seed=0)\n"
        "env = envs.make_render_env(); env.reset(seed=0)\n"
        "print(env.render().shape)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "PYOPENGL_PLATFORM")}
    if not any(rendering.ctypes.util.find_library(library) for _, library in rendering.HEADLESS_BACKENDS):
        pytest.skip("neither libEGL nor libOSMesa is installed")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=110, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "(480, 480, 3)"
    assert proc.stderr.count("settotalmass") <= 1  # mujoco 4.0 warns per model compiled: 3 envs made here
