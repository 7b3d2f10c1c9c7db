"""The command line and the run directory (DESIGN.md §7): files, resume, evaluate, bad input."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import shlex
import subprocess
import warnings

import pytest
import torch
import yaml

from pytorchrl.cli import main
from pytorchrl.config import Config
from pytorchrl.config_applicability import IgnoredConfigKeysWarning
from pytorchrl.logging.writers import REQUIRED_COLUMNS
from pytorchrl.utils import checkpoint as ckpt
from tests.conftest import CONFIGS, REPO

TINY = ["run.target_steps=2048", "run.eval_every=1024", "run.log_every=512", "run.checkpoint_every=1024", "run.eval_episodes=2", "run.stop_at_return=null"]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """One tiny subprocess training run shared by the tests that read its run directory."""
    run_dir = tmp_path_factory.mktemp("run") / "ppo"
    proc = subprocess.run(
        ["pytorchrl", "train", str(CONFIGS / "ppo" / "cartpole.yaml"), *TINY, "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=100, cwd=REPO,  # within the first test's 120 s
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return run_dir, proc


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_train_writes_every_run_directory_file(trained_run):
    run_dir, proc = trained_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == summary
    assert summary["env_steps"] == 2048 and summary["stop_reason"] == "target_steps"
    assert summary["solved_at_env_steps"] is None and summary["solved_at_wall_time_s"] is None
    assert isinstance(summary["final_eval_return_mean"], float) and summary["wall_time_s"] > 0
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    for section in dataclasses.fields(Config):  # every default written out
        assert set(resolved[section.name]) == {f.name for f in dataclasses.fields(getattr(Config(), section.name))}
    rows = _rows(run_dir / "progress.csv")
    assert list(rows[0])[: len(REQUIRED_COLUMNS)] == list(REQUIRED_COLUMNS)
    steps = [int(r["env_steps"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] == 2048 and len(steps) >= 4
    assert any(r["eval_return_mean"] for r in rows) and any(not r["eval_return_mean"] for r in rows)
    assert float(rows[-1]["fps"]) > 0 and rows[-1]["policy_loss"]
    assert [p.name for p in ckpt.list_checkpoints(run_dir / "checkpoints")] == ["step_1024", "step_2048"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "train/return_mean" in tags and "eval/return_mean" in tags and "time/fps" in tags
    assert events.Scalars("learner/updates")[-1].step == 2048


@pytest.mark.slow
def test_resume_continues_counters_and_progress(trained_run, tmp_path, capsys):
    src, _ = trained_run
    run_dir = tmp_path / "resumed"
    import shutil

    shutil.copytree(src, run_dir)
    before = json.loads((run_dir / "summary.json").read_text())
    assert main(["train", "--resume", str(run_dir), "run.target_steps=3072", "--quiet"]) == 0
    assert f"pytorchrl: resuming from {run_dir / 'checkpoints' / 'step_2048'} (2,048 env steps, " in capsys.readouterr().err
    after = json.loads((run_dir / "summary.json").read_text())
    assert after["env_steps"] == 3072 and after["updates"] > before["updates"]
    assert after["wall_time_s"] > before["wall_time_s"]
    steps = [int(r["env_steps"]) for r in _rows(run_dir / "progress.csv")]
    assert steps == sorted(steps) and len(steps) == len(set(steps)) and steps[-1] == 3072
    state, meta = ckpt.load_checkpoint(run_dir / "checkpoints" / "step_3072")
    assert meta["policy_version"] == after["updates"] == state["learner"]["updates"]


@pytest.mark.slow
def test_resume_past_its_target_says_so(trained_run, tmp_path):
    src, _ = trained_run
    import shutil

    shutil.copytree(src, tmp_path / "r")
    with pytest.warns(UserWarning) as told:
        assert main(["train", "--resume", str(tmp_path / "r"), "run.target_steps=1024", "--quiet"]) == 0
    assert [str(w.message) for w in told] == [
        "run.target_steps = 1,024 is already reached (the run is at 2,048 env steps), so it stops at once; "
        "to train on, resume with a larger one, e.g. run.target_steps=4096"
    ]


@pytest.mark.slow
def test_evaluate_checkpoint_and_run_dir(trained_run, capsys):
    run_dir, _ = trained_run
    assert main(["evaluate", str(run_dir / "checkpoints" / "step_1024"), "--episodes", "3"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["env_steps"] == 1024 and len(result["returns"]) == 3
    assert main(["evaluate", str(run_dir), "--episodes", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["checkpoint"].endswith("step_2048") and result["return_mean"] > 0


@pytest.mark.slow
def test_evaluate_overrides_the_runs_config(trained_run, capsys):
    """The same checkpoint under a changed env (here a 7-step time limit) and a bad override."""
    run_dir, _ = trained_run
    assert main(["evaluate", str(run_dir), "env.max_episode_steps=7", "--episodes", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["returns"] == [7.0, 7.0]
    assert main(["evaluate", str(run_dir), "--episodes", "1", "env.max_episode_steps=5"]) == 0  # after the options too
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["returns"] == [5.0]
    err = _bad(capsys, ["evaluate", str(run_dir), "env.max_episode_stepz=7"])
    assert "config.yaml" in err and "did you mean 'env.max_episode_steps'" in err


@pytest.mark.slow
def test_evaluate_names_the_overrides_it_does_not_read(trained_run, capsys):
    """An override an evaluation does not read is one warning naming it (they were ignored
    without a word): a training key (``run.eval_episodes``: ``--episodes`` sets that) and one
    the config's rules find does not apply; the keys the one-process layout sets are not named."""
    run_dir, _ = trained_run

    def ignored(overrides: list[str]) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert main(["evaluate", str(run_dir), "--episodes", "1", *overrides]) == 0
        assert len(json.loads(capsys.readouterr().out.strip().splitlines()[-1])["returns"]) == 1  # --episodes, not run.eval_episodes
        return [str(w.message) for w in caught if issubclass(w.category, IgnoredConfigKeysWarning)]

    assert ignored(["run.eval_episodes=2", "env.atari.repeat_action_probability=0.1"]) == [
        "evaluate: run.eval_episodes, env.atari.repeat_action_probability do not apply to an evaluation and are ignored (--episodes sets how many episodes)"
    ]
    assert ignored(["env.atari={repeat_action_probability: 0.1}"]) == [  # a section given whole
        "evaluate: env.atari.repeat_action_probability does not apply to an evaluation and is ignored"
    ]
    assert ignored(["run={eval_deterministic: false}", "env.max_episode_steps=9"]) == []  # read; the layout's own keys (scheme.*) are not named


@pytest.mark.slow
def test_evaluate_records_a_gif(trained_run, capsys, tmp_path, monkeypatch):
    pytest.importorskip("pygame")
    from PIL import Image

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    run_dir, _ = trained_run
    assert main(["evaluate", str(run_dir), "--episodes", "1", "--video", str(tmp_path / "video")]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    with Image.open(result["video"]) as gif:
        assert gif.n_frames > 5 and gif.size == (600, 400)


@pytest.mark.slow
def test_evaluate_records_a_gif_of_a_continuous_policy_and_says_when_an_env_draws_nothing(capsys, tmp_path, monkeypatch):
    """A Box policy's action is an output of its graph: the GIF's episode acts without one (it
    raised "Can't call numpy() on Tensor that requires grad"). An env whose constructor takes no
    render_mode is one line without the OpenGL advice."""
    pytest.importorskip("pygame")
    from PIL import Image

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    small = ["run.target_steps=256", "run.eval_every=0", "run.eval_episodes=1", "env.num_envs=2", "storage.num_steps=64", "algorithm.minibatch_size=64"]
    for config, name in (("ppo/pendulum.yaml", "pendulum"), ("ppo/rnd_chain.yaml", "chain")):
        assert main(["train", str(CONFIGS / config), *small, "--run-dir", str(tmp_path / name), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "pendulum"), "--episodes", "1", "--video", str(tmp_path / "video")]) == 0
    with Image.open(json.loads(capsys.readouterr().out.strip().splitlines()[-1])["video"]) as gif:
        assert gif.n_frames == 201  # the first frame and 200 steps
    err = _bad(capsys, ["evaluate", str(tmp_path / "chain"), "--episodes", "1", "--video", str(tmp_path / "video2")])
    assert "--video: env 'pytorchrl/Chain-v0' does not render: it takes no render_mode" in err and "MUJOCO_GL" not in err


@pytest.mark.slow
def test_train_refuses_a_run_dir_that_holds_a_run(trained_run, capsys):
    run_dir, _ = trained_run
    before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()}
    err = _bad(capsys, ["train", CARTPOLE, "--run-dir", str(run_dir), "--quiet"])
    assert f"--run-dir {str(run_dir)!r} already holds a run" in err and "--resume" in err
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()} == before  # nothing written there


def _bad(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("pytorchrl: error: ") and "Traceback" not in err
    return err


CARTPOLE = str(CONFIGS / "ppo" / "cartpole.yaml")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["algorithm.lrr=0.1"], "did you mean 'algorithm.lr'"),
        (["algorithm.lr=-1"], "'algorithm.lr' = -1.0 is out of range"),
        (["env.num_envs=0"], "'env.num_envs' = 0 is out of range"),
        (["env.num_envs=many"], "'env.num_envs' = 'many' has the wrong type"),
        (["env.env_id=CartPol-v1"], "did you mean 'CartPole-v1'"),
        (["scheme.num_col_workers=-2"], "'scheme.num_col_workers' = -2 is out of range"),
        (["run.seed"], "'run.seed' is not a KEY=VALUE override"),
        (["scheme.col_communication=semi"], "'scheme.col_communication' = 'semi' is not allowed"),
        (["scheme.max_worker_restarts=-1"], "'scheme.max_worker_restarts' = -1 is out of range: must be >= 0"),
        (["scheme.worker_timeout_s=0"], "'scheme.worker_timeout_s' = 0.0 is out of range"),
        (["env.eval_env_kwargs=3"], "'env.eval_env_kwargs' = 3 has the wrong type: expected dict"),
        (["scheme.update_execution=decentralised", "scheme.grad_communication=asynchronous"], "needs scheme.grad_communication 'synchronous'"),
        (["scheme.num_col_workers=1", "scheme.col_worker_resources.num_gpus=4"], "one collection worker asks for 4 GPU but no node"),
        (["scheme.num_col_workers=1", "--address", "127.0.0.1:1"], "Ray address '127.0.0.1:1': no Ray cluster answers there (Connection refused); it is --address / scheme.ray.address (a resumed run keeps its own): scheme.ray.address=null (or --address local)"),
    ],
)
def test_bad_train_input_exits_2_with_one_line(capsys, tmp_path, args, needle):
    err = _bad(capsys, ["train", CARTPOLE, *args, "--run-dir", str(tmp_path / "r"), "--quiet"])
    assert needle in err


def test_a_dead_ray_address_from_the_environment_is_named_with_the_way_around_it(capsys, tmp_path, monkeypatch):
    """An exported RAY_ADDRESS (as Ray's docs have users do for `ray job submit`) is where the
    address came from; scheme.ray.address=null cannot help, unsetting it or --address local can."""
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    err = _bad(capsys, ["train", CARTPOLE, "scheme.num_col_workers=1", "--run-dir", str(tmp_path / "r"), "--quiet"])
    assert "it is the environment variable RAY_ADDRESS: unset RAY_ADDRESS, or pass --address local, to train on a local Ray instead" in err
    assert "scheme.ray.address=null" not in err


def test_an_override_given_twice_is_said_and_the_last_one_counts(capsys, tmp_path):
    """A script's defaults come first and a user's changes after them: the last one is used,
    and a warning says which."""
    with pytest.warns(UserWarning, match=r"override 'run.seed' is given twice \('run.seed=1', then 'run.seed=4'\): the last one is used"):
        code = main(["train", CARTPOLE, "run.seed=1", "run.seed=4", "run.target_steps=512", "run.eval_every=0", "--run-dir", str(tmp_path / "r"), "--quiet"])
    assert code == 0 and "seed: 4" in (tmp_path / "r" / "config.yaml").read_text()


def test_missing_config_and_bad_resume_dirs(capsys, tmp_path):
    assert "does not exist" in _bad(capsys, ["train", str(tmp_path / "missing.yaml")])
    assert "no config.yaml there" in _bad(capsys, ["train", "--resume", str(tmp_path)])
    (tmp_path / "config.yaml").write_text("{}\n")  # a run stopped before its first checkpoint: each message says so
    assert "stopped before its first checkpoint, so there is nothing to resume" in _bad(capsys, ["train", "--resume", str(tmp_path)])
    err = _bad(capsys, ["train", CARTPOLE, "--run-dir", str(tmp_path), "--quiet"])
    assert "stopped before its first checkpoint" in err and "remove the directory or choose a new one" in err and "--resume" not in err
    assert f"evaluate '{tmp_path / 'nope'}' does not exist" in _bad(capsys, ["evaluate", str(tmp_path / "nope")])


@pytest.mark.slow
def test_truncated_checkpoint_is_a_clear_error_and_skipped_on_resume(trained_run, capsys, tmp_path):
    import shutil

    run_dir = tmp_path / "corrupt"
    shutil.copytree(trained_run[0], run_dir)
    newest = run_dir / "checkpoints" / "step_2048" / "state.pt"
    newest.write_bytes(newest.read_bytes()[:100])
    err = _bad(capsys, ["evaluate", str(newest.parent)])
    assert "state.pt' is truncated or corrupt" in err
    with pytest.warns(UserWarning, match="skipping unreadable checkpoint"):
        path, _, meta = ckpt.load_newest_checkpoint(run_dir / "checkpoints")
    assert path.name == "step_1024" and meta["env_steps"] == 1024
    older = run_dir / "checkpoints" / "step_1024" / "state.pt"
    older.write_bytes(b"")
    assert "no readable checkpoint" in _bad(capsys, ["train", "--resume", str(run_dir)])


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "checkpoints" / "step_1"
    ckpt.save_checkpoint(target, {"w": torch.ones(2)}, {"env_steps": 1})

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError):
        ckpt.save_checkpoint(target, {"w": torch.zeros(2)}, {"env_steps": 2})
    state, meta = ckpt.load_checkpoint(target)
    assert torch.equal(state["w"], torch.ones(2)) and meta["env_steps"] == 1
    assert [p.name for p in target.parent.iterdir()] == ["step_1"]  # no temp dir left


def test_checkpoint_rejects_arbitrary_pickles(tmp_path):
    target = tmp_path / "step_1"
    ckpt.save_checkpoint(target, {"w": torch.ones(1)}, {})
    import argparse

    torch.save({"evil": argparse.Namespace(x=1)}, target / "state.pt")  # any non-allowlisted object
    with pytest.raises(ckpt.CheckpointError, match="truncated or corrupt"):
        ckpt.load_checkpoint(target)


@pytest.mark.slow
def test_bad_input_in_a_real_subprocess_has_no_traceback(tmp_path):
    proc = subprocess.run(
        ["pytorchrl", "train", CARTPOLE, "algorithm.gamma=2", "--run-dir", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "pytorchrl: error: config key 'algorithm.gamma' = 2.0 is out of range: must be <= 1"


@pytest.mark.slow
def test_custom_scheme_script_trains(tmp_path):
    proc = subprocess.run(["python", str(REPO / "scripts" / "custom_scheme.py"), "1024"], capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = eval(proc.stdout.strip().splitlines()[-1], {})  # the script prints the summary dict
    assert summary["env_steps"] >= 1024 and summary["final_eval_return_mean"] > 0


def test_version(capsys):
    from pytorchrl import __version__
    from pytorchrl.cli import main

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"pytorchrl {__version__}"


def _readme_error_examples() -> list[tuple[str, str]]:
    """The README's ``$ pytorchrl ...`` examples followed by the ``pytorchrl: error:`` line they
    print (those that do not depend on the machine's CPU count)."""
    lines = (REPO / "README.md").read_text().splitlines()
    return [
        (line[2:], after) for line, after in itertools.pairwise(lines)
        if line.startswith("$ pytorchrl ") and after.startswith("pytorchrl: error:") and "Ray cluster has" not in after
    ]


def test_the_readme_shows_error_examples():
    assert len(_readme_error_examples()) >= 3  # a change of the README's format must not empty the test below


@pytest.mark.parametrize(("command", "printed"), _readme_error_examples())
def test_the_readme_error_examples_print_what_the_readme_shows(capsys, monkeypatch, command, printed):
    monkeypatch.chdir(REPO)  # the examples name configs/ from the checkout's root
    assert main(shlex.split(command)[1:]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == printed
