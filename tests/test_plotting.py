"""`pytorchrl plot`: the drawn lines are progress.csv's data; seeds of one config are one band."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import yaml

from pytorchrl.cli import main
from pytorchrl.plotting import plot_runs


def _run_dir(root: Path, name: str, seed: int, rows: list[tuple[int, float, str]], lr: float = 1e-3, **run: int) -> Path:
    path = root / name
    path.mkdir()
    with (path / "progress.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_steps", "wall_time_s", "train_return_mean", "eval_return_mean"])
        for steps, wall, value in rows:
            writer.writerow([steps, wall, 1.0, value])
    config = {"env": {"env_id": "CartPole-v1"}, "algorithm": {"name": "ppo", "lr": lr}, "run": {"seed": seed, **run}}
    (path / "config.yaml").write_text(yaml.safe_dump(config))
    return path


def test_a_single_run_is_drawn_from_its_progress_csv(tmp_path):
    run = _run_dir(tmp_path, "a", 0, [(100, 1.0, ""), (200, 2.0, "10"), (300, 3.0, ""), (400, 4.0, "30")])
    out = tmp_path / "curve.png"
    fig = plot_runs([run], output=out)
    assert out.stat().st_size > 0
    assert np.array_equal(fig.axes[0].lines[0].get_xydata(), [[200, 10], [400, 30]])  # evaluation rows only
    wall = plot_runs([run], x="wall_time_s")
    assert np.array_equal(wall.axes[0].lines[0].get_xydata(), [[2.0, 10], [4.0, 30]])


def test_seeds_of_one_config_are_a_mean_with_a_band_and_configs_get_their_own_line(tmp_path):
    a = _run_dir(tmp_path, "s0", 0, [(100, 1.0, "0"), (200, 2.0, "10")])
    b = _run_dir(tmp_path, "s1", 1, [(100, 1.0, "4"), (200, 2.0, "30"), (300, 3.0, "50")])
    other = _run_dir(tmp_path, "lr", 0, [(100, 1.0, "7")], lr=3e-4)
    fig = plot_runs([a, b, other], metrics=("eval_return_mean", "train_return_mean"))
    ax = fig.axes[0]
    mean, single = ax.lines
    assert np.array_equal(mean.get_xydata(), [[100, 2], [200, 20]])  # up to the shortest run
    assert mean.get_label() == "ppo CartPole-v1 (2 seeds)" and mean.get_color() != single.get_color()
    again = _run_dir(tmp_path, "s0-again", 0, [(100, 1.0, "2"), (200, 2.0, "12")])  # a second run of seed 0
    assert plot_runs([a, again]).axes[0].lines[0].get_label() == "ppo CartPole-v1 (2 runs)"
    band = ax.collections[0].get_paths()[0].vertices
    assert band[:, 1].min() == 0 and band[:, 1].max() == 30  # min-max over the seeds
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "train_return_mean"


def test_a_seed_is_never_held_flat_outside_its_points_and_a_seed_with_nothing_to_draw_is_not_counted(tmp_path):
    """Seeds evaluated at other cadences (``eval_every`` is bookkeeping: one group) are averaged
    where all of them have points, not with a seed's first value carried back to steps before
    it; a seed with no evaluation yet is neither in the legend's count nor in the band."""
    rows = [(5000, 1.0, "0"), (10000, 2.0, "100"), (15000, 3.0, "200"), (20000, 4.0, "300")]
    a = _run_dir(tmp_path, "s0", 0, rows, eval_every=5000)
    b = _run_dir(tmp_path, "s1", 1, [(5000, 1.0, ""), (20000, 4.0, "500")], eval_every=20000)
    later = _run_dir(tmp_path, "s2", 2, [(10000, 2.0, "40"), (15000, 3.0, "60"), (20000, 4.0, "80")], eval_every=5000)
    line = plot_runs([a, b]).axes[0].lines[0]
    assert np.array_equal(line.get_xydata(), [[20000, 400]]) and line.get_label() == "ppo CartPole-v1 (2 seeds)"
    assert np.array_equal(plot_runs([a, later]).axes[0].lines[0].get_xydata(), [[10000, 70], [15000, 130], [20000, 190]])
    apart = _run_dir(tmp_path, "s3", 3, [(30000, 5.0, "600")], eval_every=5000)  # no steps in common: each point where it is
    assert np.array_equal(plot_runs([a, apart]).axes[0].lines[0].get_xydata(), [[5000, 0], [10000, 100], [15000, 200], [20000, 300], [30000, 600]])
    empty = _run_dir(tmp_path, "s4", 4, [(5000, 1.0, "")], eval_every=5000)
    fig = plot_runs([a, empty])
    assert fig.axes[0].lines[0].get_label() == "ppo CartPole-v1" and not fig.axes[0].collections


def test_runs_of_other_budgets_are_other_lines_and_bookkeeping_keys_are_one(tmp_path):
    """A budget is part of the experiment (annealing schedules are fractions of it); seeds,
    checkpoints and evaluation cadence are not."""
    rows = [(100, 1.0, "1"), (200, 2.0, "2")]
    a = _run_dir(tmp_path, "a", 0, rows, target_steps=200, checkpoint_every=100)
    b = _run_dir(tmp_path, "b", 1, rows, target_steps=200, eval_every=50)
    longer = _run_dir(tmp_path, "c", 0, rows, target_steps=400)
    lines = plot_runs([a, b, longer]).axes[0].lines
    assert [line.get_label() for line in lines] == ["ppo CartPole-v1 (2 seeds)", "ppo CartPole-v1 (c)"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["nowhere"], "run directory 'nowhere' does not exist"),
        (["RUN/progress.csv"], "progress.csv' is a file, not a run directory"),
        (["RUN/tb"], "tb' has no progress.csv"),
        (["RUN", "--metric", "eval_retrun_mean"], "--metric = 'eval_retrun_mean' is not a progress.csv column (did you mean 'eval_return_mean'?)"),
        (["RUN", "--x", "updates"], "--x = 'updates' is not allowed; allowed: env_steps, wall_time_s"),
        (["RUN", "-o", "OUT/x.jpgx"], "'jpgx' is not an image format matplotlib writes; allowed: "),
        (["RUN", "-o", "OUT/nodir/c.png"], "-o 'OUT/nodir/c.png': the directory 'OUT/nodir' does not exist"),
        (["RUN", "-o", "RUN/progress.csv/c.png"], "the directory 'RUN/progress.csv' is a regular file, not a directory"),
        (["RUN", "-o", "RUN/tb.png"], "-o 'RUN/tb.png' is a directory, not a file"),
        (["RUN", "--compare", "eval_return_mean", "nope"], "--compare = 'nope' is not a progress.csv column"),
        (["EMPTY"], "nothing to draw: no row of 'EMPTY/progress.csv' has both env_steps and eval_return_mean as numbers (yet)"),
        (["BINARY"], "BINARY/progress.csv' is not text (byte 0xb5 at offset 0); is it a pytorchrl progress.csv?"),
        (["LONG"], "LONG/progress.csv' line 3 has 5 fields where its header has 4; is it a pytorchrl progress.csv?"),
        (["RUN", "-o", "OUT/figures/"], "-o 'OUT/figures/' names a directory; give the image's file name, e.g. 'OUT/figures/curves.png'"),
        (["RUN", "-o", "/proc/c.png"], "-o '/proc/c.png' cannot be written: "),  # /proc takes no new files, even as root
    ],
)
def test_bad_plot_input_is_one_line_and_exit_2(tmp_path, capsys, args, needle):
    run = _run_dir(tmp_path, "a", 0, [(100, 1.0, "1")])
    (run / "tb").mkdir()  # a directory without progress.csv
    (run / "tb.png").mkdir()  # a directory where the figure would go
    empty = _run_dir(tmp_path, "empty", 0, [(100, 1.0, "")])  # no evaluation yet
    binary = _run_dir(tmp_path, "binary", 0, [])
    (binary / "progress.csv").write_bytes(b"\xb5\x00\xff garbage")
    long = _run_dir(tmp_path, "long", 0, [(100, 1.0, "1")])
    with (long / "progress.csv").open("a") as f:
        f.write("200,2.0,1.0,2,7\n")  # a row with a field more than the header
    paths = {"RUN": str(run), "OUT": str(tmp_path), "EMPTY": str(empty), "BINARY": str(binary), "LONG": str(long)}
    for key, value in paths.items():
        args, needle = [a.replace(key, value) for a in args], needle.replace(key, value)
    code = main(["plot", *args, *([] if "-o" in args else ["-o", str(tmp_path / "x.png")])])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "x.png").exists()


def test_plot_says_the_file_it_wrote_and_leaves_out_rows_without_steps_with_a_warning(tmp_path, capsys):
    run = _run_dir(tmp_path, "a", 0, [(100, 1.0, "1"), (200, 2.0, "3")])
    with (run / "progress.csv").open("a") as f:
        f.write("abc,def,1,9\n")
    with pytest.warns(UserWarning, match=r"progress.csv': 1 of its 3 rows have no number in env_steps and are left out"):
        assert main(["plot", str(run), "-o", str(tmp_path / "curves")]) == 0
    assert f"wrote {tmp_path / 'curves.png'}" in capsys.readouterr().err and (tmp_path / "curves.png").stat().st_size > 0


def test_a_run_config_with_a_recursive_alias_is_one_line(tmp_path, capsys):
    run = _run_dir(tmp_path, "a", 0, [(100, 1.0, "5")])
    (run / "config.yaml").write_text("env: &loop\n  inner: *loop\n")
    assert main(["plot", str(run), "-o", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "config.yaml" in err[0] and not (tmp_path / "c.png").exists()


def test_a_run_recorded_before_a_key_existed_groups_with_runs_that_write_its_default(tmp_path):
    """Run records keep the config each run wrote: one from before a key was added lacks it.
    Compared with every default written out, the seeds are one curve (the results table's
    figures drew seed 0 of TD3 Hopper apart from seeds 1 and 2)."""
    old = _run_dir(tmp_path, "s0", 0, [(100, 1.0, "1"), (200, 2.0, "2")])
    new = _run_dir(tmp_path, "s1", 1, [(100, 1.0, "3"), (200, 2.0, "4")])
    config = yaml.safe_load((new / "config.yaml").read_text())
    config["run"]["eval_parallel"] = False  # the default, written by the newer code
    (new / "config.yaml").write_text(yaml.safe_dump(config))
    assert [line.get_label() for line in plot_runs([old, new]).axes[0].lines] == ["ppo CartPole-v1 (2 seeds)"]


def test_an_evaluation_is_drawn_at_the_steps_it_evaluated_and_its_time_at_the_row_that_logged_it(tmp_path):
    """An evaluation made at 2,560 steps and logged in the row of 3,072: its return belongs at
    2,560, but eval_time_s is the time the row's interval spent (as in TensorBoard), at 3,072."""
    path = tmp_path / "run"
    path.mkdir()
    with (path / "progress.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_steps", "wall_time_s", "eval_return_mean", "eval_env_steps", "eval_time_s"])
        writer.writerow([2048, 1.0, "", "", 0.0])
        writer.writerow([3072, 2.0, 50.0, 2560, 0.4])
    (path / "config.yaml").write_text(yaml.safe_dump({"env": {"env_id": "CartPole-v1"}, "algorithm": {"name": "ppo"}, "run": {"seed": 0}}))
    returns = plot_runs([path], metrics=("eval_return_mean",))
    assert np.array_equal(returns.axes[0].lines[0].get_xydata(), [[2560, 50.0]])
    times = plot_runs([path], metrics=("eval_time_s",))
    assert np.array_equal(times.axes[0].lines[0].get_xydata(), [[2048, 0.0], [3072, 0.4]])
