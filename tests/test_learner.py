"""The learner in-process: stop conditions, metrics, checkpoints without a run directory."""

from __future__ import annotations

import csv
import io
import math
import subprocess
import sys
import warnings

import pytest
import torch

from pytorchrl.config import from_dict
from pytorchrl.learner import Learner, lag_drop_warning
from pytorchrl.logging.writers import ProgressLine
from tests.conftest import CONFIGS

TINY = {
    "env": {"num_envs": 4, "num_test_envs": 2},
    "storage": {"num_steps": 16},
    "algorithm": {"name": "ppo", "num_epochs": 2, "minibatch_size": 32},
    "actor": {"hidden_sizes": [16]},
}


def _learner(run: dict, run_dir=None) -> Learner:
    return Learner.from_config(from_dict({**TINY, "run": run}), run_dir=run_dir, progress=False)


def test_periodic_checkpoints_without_run_dir_are_skipped_not_fatal():
    learner = _learner({"target_steps": 256, "checkpoint_every": 64, "eval_every": 0, "eval_episodes": 1})
    summary = learner.train()
    assert summary["env_steps"] == 256 and summary["stop_reason"] == "target_steps"
    with pytest.raises(ValueError, match="needs a path"):
        learner.checkpoint()


def test_the_run_s_last_checkpoint_is_written_once_when_the_budget_is_a_multiple_of_checkpoint_every(tmp_path):
    """The periodic checkpoint due at the round that ends the run is left to finish(), which
    writes it after the final evaluation: a replay buffer's checkpoint is written once, not twice."""
    learner = _learner({"target_steps": 256, "checkpoint_every": 128, "eval_every": 0, "eval_episodes": 1}, run_dir=tmp_path / "run")
    written = []
    save = learner.checkpoint
    learner.checkpoint = lambda *a, **k: written.append(learner.env_steps) or save(*a, **k)
    learner.train()
    assert written == [128, 256]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step_*")) == ["step_128", "step_256"]


def test_a_lag_bound_that_drops_half_the_rollouts_is_told_with_what_a_rollout_is_old_on_arrival():
    # the H200 pair of 2026-11-30: 12 workers, APPO's 16 updates a rollout, 206 of 493 rollouts kept
    said = lag_drop_warning(206, 287, 64, 12, 16 * 205 + 1)
    assert said is not None
    assert "scheme.max_policy_lag = 64" in said and "287 of the first 493 rollouts (58%)" in said
    assert "12 collection workers and 16 updates per rollout" in said and "about 176 versions old" in said
    assert "\n" not in said  # one line
    assert "6 collection workers and 1 update per rollout, a rollout is about 5 versions old" in lag_drop_warning(59, 61, 2, 6, 58)
    assert "collection workers and" not in lag_drop_warning(5, 20, 8, None, 40)  # no remote workers known: no estimate
    assert "collection workers and" not in lag_drop_warning(5, 20, 8, 1, 40)  # one worker: its rollouts wait on no other
    assert lag_drop_warning(10, 9, 64, 12, 160) is None  # under half dropped
    assert lag_drop_warning(5, 15, 64, 12, 64) is not None and lag_drop_warning(5, 14, 64, 12, 64) is None  # 20 seen first
    assert lag_drop_warning(0, 50, None, 12, 0) is None  # no bound: nothing is dropped for lag


def test_a_resumed_run_tells_of_lag_drops_counted_since_it_resumed_not_before():
    """A checkpoint restores the run's dropped_batches but not the lags of the rollouts it kept,
    so the warning counts both from the load: drops of the run's earlier stretch are not told
    again, as if nothing had been kept, while drops after the resume are."""
    config = from_dict({**TINY, "run": {"target_steps": 10_000, "eval_every": 0, "eval_episodes": 1}, "scheme": {"max_policy_lag": 8}})
    before = Learner.from_config(config, progress=False)
    before.step()
    before.dropped_batches = 500  # an earlier stretch's drops, as a checkpoint holds them
    state = before.state_dict()
    resumed = Learner.from_config(config, progress=False)
    resumed.load_state(state)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for _ in range(8):  # 2 rounds of 4 updates
            resumed.step()
        assert resumed.dropped_batches == 500 and not [w for w in said if "has dropped" in str(w.message)]
        resumed.dropped_batches += 30  # 30 rollouts dropped since the resume
        for _ in range(4):
            resumed.step()
    told = [str(w.message) for w in said if "has dropped" in str(w.message)]
    assert len(told) == 1 and "has dropped 30 of the first 33 rollouts since the resume (91%)" in told[0]  # and the 3 kept since


def test_step_counts_updates_and_rounds():
    learner = _learner({"target_steps": 64})
    info = learner.step()
    assert info["env_steps"] == 64 and learner.env_steps == 64
    updates_per_round = 2 * round(64 / 32)
    for _ in range(updates_per_round - 1):
        info = learner.step()
    assert info["round_end"] and learner.updates == updates_per_round == learner.policy_version
    assert learner.done() and learner.stop_reason == "target_steps"


def test_stop_at_return_and_max_time():
    learner = _learner({"target_steps": 10_000, "stop_at_return": -math.inf, "eval_every": 64, "eval_episodes": 1})
    summary = learner.train()
    assert summary["stop_reason"] == "stop_at_return" and summary["solved_at_env_steps"] == 64
    learner = _learner({"target_steps": 10_000_000, "max_time_s": 0.01, "eval_every": 0, "eval_episodes": 1})
    summary = learner.train()
    assert summary["stop_reason"] == "max_time_s" and summary["env_steps"] < 10_000_000


def test_checkpoint_round_trip_restores_weights_optimizer_counters(tmp_path):
    a = _learner({"target_steps": 128, "eval_every": 0, "eval_episodes": 1}, run_dir=tmp_path / "a")
    a.train()
    b = _learner({"target_steps": 256, "eval_every": 0, "eval_episodes": 1})
    b.load_checkpoint(tmp_path / "a" / "checkpoints" / "step_128")
    assert (b.env_steps, b.updates, b.policy_version) == (a.env_steps, a.updates, a.policy_version)
    for pa, pb in zip(a.scheme.algorithm.actor.parameters(), b.scheme.algorithm.actor.parameters()):
        assert torch.equal(pa, pb)
    sa, sb = a.scheme.algorithm.optimizer.state_dict(), b.scheme.algorithm.optimizer.state_dict()
    assert torch.equal(sa["state"][0]["exp_avg"], sb["state"][0]["exp_avg"])


@pytest.mark.slow
def test_a_local_run_never_imports_ray():
    code = (
        "import sys\n"
        "from pytorchrl import Learner, load_config\n"
        "learner = Learner.from_config(load_config(sys.argv[1], ['run.target_steps=600', 'env.num_envs=4']), progress=False)\n"
        "learner.train(); learner.close()\n"
        "print('ray' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(CONFIGS / "ppo" / "cartpole.yaml")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("deterministic", [True, False])
def test_evaluation_acts_as_run_eval_deterministic_says(deterministic):
    learner = _learner({"target_steps": 64, "eval_episodes": 2, "eval_deterministic": deterministic})
    actor = learner.scheme.collection_workers.local_worker.policy.actor
    asked: list[bool] = []
    get_action = actor.get_action

    def spy(*args, **kwargs):
        asked.append(kwargs["deterministic"])
        return get_action(*args, **kwargs)

    actor.get_action = spy
    try:
        assert math.isfinite(learner.evaluate())
    finally:
        learner.close()
    assert asked and set(asked) == {deterministic}


def test_progress_line_after_an_overshooting_last_rollout_shows_no_negative_eta():
    out = io.StringIO()
    ProgressLine(2_500_000, stream=out).update({"env_steps": 2_500_608, "fps": 600.0, "wall_time_s": 4711.0}, force=True)
    line = out.getvalue()
    assert "eta 0:00" in line and "-" not in line.split("eta")[1]


@pytest.mark.timeout(60)
def test_an_evaluation_logged_in_a_later_row_says_and_is_drawn_at_the_steps_it_evaluated(tmp_path):
    """Rounds of 64 steps, rows every 128, evaluations every 96: the one due at 192 is made at
    192 and logged in the row at 256, which names 192; plots and TensorBoard place it there. The
    one made at 320 is followed by 384's before the next row: it gets a row of its own."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from pytorchrl.plotting import load_run

    learner = _learner({"target_steps": 384, "log_every": 128, "eval_every": 96, "eval_episodes": 1, "stop_at_return": None}, run_dir=tmp_path)
    learner.train()
    learner.close()
    with open(tmp_path / "progress.csv", newline="") as f:
        rows = [(int(r["env_steps"]), r["eval_env_steps"]) for r in csv.DictReader(f)]
    assert rows == [(128, "128"), (256, "192"), (320, "320"), (384, "384")]
    xs, _ = load_run(tmp_path).series("env_steps", "eval_return_mean")
    assert list(xs) == [128, 192, 320, 384]
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/return_mean")] == [128, 192, 320, 384]
    assert [e.step for e in events.Scalars("train/return_mean")][:2] == [128, 256]


@pytest.mark.timeout(60)
def test_a_resumed_run_redraws_its_tensorboard_points_and_csv_rows_past_the_checkpoint_once(tmp_path):
    """A run that logged past its newest checkpoint (a crash, a second Ctrl-C) logs those steps
    again when resumed: its writers (TensorBoard, progress.csv) drop the first ones, and each
    tag's steps and the CSV's rows go up once."""
    import csv
    import shutil

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = {"target_steps": 256, "log_every": 64, "checkpoint_every": 128, "eval_every": 128, "eval_episodes": 1, "stop_at_return": None}
    learner = _learner(run, run_dir=tmp_path)
    learner.train()
    learner.close()
    shutil.rmtree(tmp_path / "checkpoints" / "step_256")  # the run died after the rows at 192 and 256, before their checkpoint
    resumed = Learner.resume(tmp_path, progress=False)
    resumed.train()
    resumed.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("time/fps")] == [64, 128, 192, 256]
    assert [e.step for e in events.Scalars("eval/return_mean")] == [128, 256]
    with open(tmp_path / "progress.csv", newline="") as f:
        assert [int(row["env_steps"]) for row in csv.DictReader(f)] == [64, 128, 192, 256]


@pytest.mark.timeout(60)
def test_a_learner_that_loads_a_checkpoint_after_training_on_takes_its_clock_and_episode_window(tmp_path):
    """Learner.load_checkpoint on a learner that trained past the checkpoint (a rollback): its
    training time and its window of recent episodes are the checkpoint's, not the checkpoint's
    plus what this learner did since its first step. Rows have worker_replace_s from the first
    on (progress.csv's header is fixed by it), empty while no replacement joined."""
    learner = _learner({"target_steps": 10**6, "eval_every": 0})
    try:
        for _ in range(8):
            learner.step()
        before = learner.wall_time_s
        path = learner.checkpoint(tmp_path / "checkpoint")  # holds the training time at some moment of this call
        after, saved_window, saved_episodes = learner.wall_time_s, list(learner._interval.returns), learner.episodes
        for _ in range(40):
            learner.step()
        assert learner.episodes > saved_episodes
        learner.load_checkpoint(path)
        assert before - 1e-3 <= learner.wall_time_s <= after + 1e-3
        assert list(learner._interval.returns) == saved_window and learner.episodes == saved_episodes
        row = learner.metrics()
        assert "worker_replace_s" in row and row["worker_replace_s"] is None
    finally:
        learner.close()


@pytest.mark.timeout(60)
def test_an_annealed_learning_rate_moves_once_a_round_and_never_reaches_zero():
    """Every update of a round uses one learning rate, round k of N the rate at k / N (CleanRL's
    schedule): the first round the full rate, the last 1 / N of it, not 0."""
    learner = Learner.from_config(from_dict({**TINY, "algorithm": {**TINY["algorithm"], "lr": 1e-3, "anneal_lr": True},
                                             "run": {"target_steps": 256, "eval_every": 0}}), progress=False)
    rates: list[list[float]] = [[]]
    try:
        while not learner.done():
            info = learner.step()
            rates[-1].append(info["lr"])
            if info["round_end"]:
                rates.append([])
    finally:
        learner.close()
    rounds = rates[:-1]  # 256 steps in rounds of 64: 4 rounds of 2 epochs x 2 minibatches
    assert [len(r) for r in rounds] == [4, 4, 4, 4]
    for k, rates_of_round in enumerate(rounds):
        assert rates_of_round == pytest.approx([1e-3 * (1 - k / 4)] * 4, rel=1e-6), k


def _loaded(run: dict, state: dict, algorithm: dict | None = None) -> Learner:
    """A learner of TINY (``algorithm`` merged into its algorithm section) that took ``state``."""
    config = from_dict({**TINY, "algorithm": {**TINY["algorithm"], **(algorithm or {})}, "run": run})
    learner = Learner.from_config(config, progress=False)
    learner.load_state(state)
    return learner


@pytest.mark.timeout(60)
def test_a_resume_trains_with_the_learning_rate_its_config_gives():
    """The learning rate is a training hyper-parameter a resume may change: the config's, not
    the checkpoint's, at the run's progress where it is annealed."""
    run = {"target_steps": 1024, "eval_every": 0, "eval_episodes": 1}
    before = _learner(run)
    before.step()
    state = before.state_dict()
    progress = before.env_steps / 1024
    for anneal, expected in ((False, 5e-5), (True, 5e-5 * (1 - progress))):
        algo = _loaded(run, state, {"lr": 5e-5, "anneal_lr": anneal}).scheme.update_worker.algo
        assert algo.lr == pytest.approx(expected)
        assert [group["lr"] for group in algo.optimizer.param_groups] == pytest.approx([expected] * len(algo.optimizer.param_groups))
    # a replica taking the master's state steps with the master's annealed learning rate at once
    master = _loaded(run, state, {"anneal_lr": True}).scheme.update_worker.algo
    master.set_progress(0.5)
    replica = _loaded(run, state, {"anneal_lr": True}).scheme.update_worker.algo
    replica.load_state_dict(master.state_dict())
    assert replica.lr == pytest.approx(master.lr) and master.lr == pytest.approx(master.initial_lr * 0.5)


@pytest.mark.timeout(60)
def test_a_resume_keeps_its_schedule_and_takes_a_changed_interval_from_its_own_steps():
    """Intervals kept go on from the checkpoint's next points (an exact resume); a changed one
    from its first multiple past the run's steps; one turned off (0) never comes, where it once
    made the resumed run loop for ever."""
    run = {"target_steps": 640, "log_every": 64, "eval_every": 128, "checkpoint_every": 256, "eval_episodes": 1}
    before = _learner(run)
    for _ in range(5 * 4):  # 5 rounds of 64 env steps (4 updates each)
        before.step()
    assert before.env_steps == 320
    state, kept = before.state_dict(), dict(before._next)
    assert _loaded(run, state)._next == kept
    changed = _loaded({**run, "log_every": 100, "eval_every": 0, "checkpoint_every": 0}, state)
    assert changed._next == {"log": 400, "eval": math.inf, "checkpoint": math.inf}
    summary = changed.train()  # to its 640 steps, not round and round at 320
    assert summary["env_steps"] == 640 and summary["stop_reason"] == "target_steps"
    off = _loaded({**run, "eval_every": 0}, state)
    assert _loaded({**run, "eval_every": 200}, off.state_dict())._next["eval"] == 400  # turned on again
    del state["learner"]["every"]  # a checkpoint from before the intervals were kept
    older = _loaded({**run, "eval_every": 0, "log_every": 100}, state)
    assert older._next == {**kept, "eval": math.inf}  # the interval turned off is seen; the other change is not


@pytest.mark.timeout(60)
def test_a_run_that_reached_its_return_target_trains_on_when_resumed_with_another():
    """A run stopped by run.stop_at_return resumed with ``run.stop_at_return=null`` (what its
    warning advises) or a target its last evaluation does not meet trains on; with a target it
    meets it stops at once, as before."""
    run = {"target_steps": 1024, "eval_every": 0, "eval_episodes": 1, "stop_at_return": 30}
    before = _learner(run)
    before.step()
    before.solved_at, before.last_eval = (before.env_steps, 1.0), 31.0
    state = before.state_dict()
    for target, stops in ((30, True), (20, True), (40, False), (None, False)):
        resumed = _loaded({**run, "stop_at_return": target}, state)
        assert (resumed._stop_reason() == "stop_at_return") is stops
        assert (resumed.solved_at is not None) is stops
