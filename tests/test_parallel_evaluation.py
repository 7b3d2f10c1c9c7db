"""Evaluation beside training (``run.eval_parallel``): the same rows as the driver's own
evaluation, exact resume, a dead evaluation worker replaced, the return target."""

from __future__ import annotations

import csv
import io
import json
import re
import warnings

import gymnasium as gym
import pytest

from pytorchrl.config import from_dict
from pytorchrl.config_applicability import IgnoredConfigKeysWarning, inapplicable_keys
from pytorchrl.learner import Learner
from pytorchrl.logging.writers import ProgressLine
from pytorchrl.utils import checkpoint as ckpt
from tests.test_resume import assert_resumes_to_the_whole_run, copy_up_to, learning_rows

# sampled evaluation (its own stream), evaluations every 3rd log row, checkpoints at evaluations'
# steps (their evaluations start after them) and between two (waiting for the one under way)
TINY = {
    "env": {"env_id": "CartPole-v1", "num_envs": 2, "num_test_envs": 2},
    "actor": {"hidden_sizes": [16]},
    "storage": {"num_steps": 32},
    "algorithm": {"name": "ppo", "num_epochs": 2, "minibatch_size": 32},
    "run": {
        "target_steps": 1_536, "log_every": 128, "eval_every": 384, "eval_episodes": 3, "eval_deterministic": False,
        "checkpoint_every": 256, "keep_checkpoints": 10, "stop_at_return": None,
    },
}


class _WhenWritten:
    """A log-row writer that notes, for each row, the learner's env steps when it was written."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self.rows: list[tuple[int, int]] = []  # (the row's env steps, the learner's when written)

    def write(self, row: dict) -> None:
        self.rows.append((row["env_steps"], self.learner.env_steps))

    def close(self) -> None:
        pass


def _train(raw: dict, run_dir, written: list | None = None, **run: object) -> dict:
    config = from_dict({**raw, "run": {**raw["run"], **run}})
    learner = Learner.from_config(config, run_dir=run_dir, progress=False)
    recorder = _WhenWritten(learner)
    learner.writers.append(recorder)
    try:
        return learner.train()
    finally:
        learner.close()
        if written is not None:
            written.extend(recorder.rows)


def _eval_rows(path) -> list[tuple[str, str]]:
    with open(path, newline="") as f:
        return [(row["env_steps"], row["eval_return_mean"]) for row in csv.DictReader(f) if row["eval_return_mean"]]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_parallel_evaluation_writes_the_rows_the_drivers_own_evaluation_writes(ray_session, tmp_path):
    """The evaluation worker is seeded as the driver's own evaluating worker and evaluating
    draws from a stream of its own, so the same run evaluated either way writes the same
    progress.csv, sampled evaluation returns included (training is not moved by evaluating)."""
    inline = _train(TINY, tmp_path / "inline")
    written: list[tuple[int, int]] = []
    parallel = _train(TINY, tmp_path / "parallel", written, eval_parallel=True)
    # the row at the first evaluation's steps waits for it while the learner trains on
    assert (384, 384) not in written and any(row == 384 and at > 384 for row, at in written)
    assert [row for row, _ in written] == sorted(row for row, _ in written)  # in order all the same
    rows = learning_rows(tmp_path / "parallel" / "progress.csv")
    assert rows == learning_rows(tmp_path / "inline" / "progress.csv")
    evaluated = _eval_rows(tmp_path / "parallel" / "progress.csv")
    assert [steps for steps, _ in evaluated] == ["384", "768", "1152", "1536"]
    assert len({value for _, value in evaluated}) > 1  # four evaluations, not one value copied
    assert parallel["final_eval_return_mean"] == inline["final_eval_return_mean"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_evaluations_more_often_than_rows_each_get_a_row_in_parallel_as_inline(ray_session, tmp_path):
    """With ``run.eval_every`` below ``run.log_every`` each evaluation gets a row at its steps
    (a row holds one: the next would have taken its place); beside training that row is held
    until its result is in, and the file is the inline run's."""
    often = {**TINY, "run": {**TINY["run"], "eval_every": 128, "log_every": 384, "target_steps": 768}}
    _train(often, tmp_path / "inline")
    _train(often, tmp_path / "parallel", eval_parallel=True)
    evaluated = _eval_rows(tmp_path / "parallel" / "progress.csv")
    assert [int(steps) for steps, _ in evaluated] == list(range(128, 769, 128))
    assert evaluated == _eval_rows(tmp_path / "inline" / "progress.csv")
    assert learning_rows(tmp_path / "parallel" / "progress.csv") == learning_rows(tmp_path / "inline" / "progress.csv")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_progress_line_shows_a_parallel_evaluations_result_once_it_is_in(ray_session, tmp_path):
    """A parallel evaluation's result goes into a row held back (written to progress.csv once it
    is in) that the progress line had shown already: the line shows it from its next row on, as
    it shows an inline evaluation's (it once said "eval -" until the run's last line)."""
    config = from_dict({**TINY, "run": {**TINY["run"], "eval_parallel": True}})
    learner = Learner.from_config(config, run_dir=tmp_path, progress=True)
    stream = io.StringIO()
    learner._progress = ProgressLine(config.run.target_steps, stream)
    try:
        learner.train()
    finally:
        learner.close()
    lines = stream.getvalue().splitlines()
    assert lines[-1].endswith("done")
    before_the_last_evaluation = [line for line in lines if "1,536/1,536" not in line]  # evaluated at 384, 768 and 1,152 too
    assert any(re.search(r"\| eval +-?\d", line) for line in before_the_last_evaluation), lines


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_parallel_evaluation_run_resumed_mid_way_equals_the_whole_run(ray_session, tmp_path):
    """The checkpoint at 768 steps is taken before that round's evaluation starts; the resumed
    run starts it again from the same weights and the evaluation worker's saved streams."""
    _train(TINY, tmp_path / "whole", eval_parallel=True)
    resumed_dir = copy_up_to(tmp_path / "whole", tmp_path / "resumed", "step_768")
    saved = ckpt.load_checkpoint(resumed_dir / "checkpoints" / "step_768")[0]
    assert saved["learner"]["next"]["eval"] == 768  # due, not yet started: the resumed run starts it
    whole_final = assert_resumes_to_the_whole_run(resumed_dir, tmp_path / "whole", "step_1536")
    assert "evaluator" in whole_final["scheme"]["local_gradient_worker"]["collection"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_parallel_runs_checkpoint_starts_no_evaluation_worker_until_one_is_asked_for(ray_session, tmp_path):
    """Resumed with ``run.eval_parallel=false``, the checkpoint's evaluation worker state is kept
    for a worker that is never started: the run evaluates inline (Ray's settings are honoured
    in a run that has no remote workers, as Ray is not started before an evaluation asks for it)."""
    _train(TINY, tmp_path / "whole", eval_parallel=True, target_steps=768)
    learner = Learner.resume(tmp_path / "whole", ["run.eval_parallel=false", "run.target_steps=1152"], progress=False)
    try:
        evaluator = learner.scheme.collection_workers.evaluator
        assert evaluator.in_use and evaluator.state_dict()["eval_rng"] is not None
        learner.train()
        assert not evaluator.started
    finally:
        learner.close()
    assert [steps for steps, _ in _eval_rows(tmp_path / "whole" / "progress.csv")] == ["384", "768", "1152"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_dead_evaluation_worker_is_replaced_and_the_evaluation_played_again(ray_session):
    """Killed in the middle of an evaluation, the worker is replaced with a warning and the
    evaluation is played from its start by the new one: the returns the driver's own evaluation
    of the same weights gives."""
    config = from_dict({**TINY, "run": {**TINY["run"], "eval_deterministic": True}})
    learner = Learner.from_config(config, progress=False)
    try:
        scheme = learner.scheme
        expected = scheme.evaluate(4, deterministic=True)
        scheme.start_evaluation(4, deterministic=True)
        evaluator = scheme.collection_workers.evaluator
        assert evaluator.started
        evaluator.kill()
        with pytest.warns(UserWarning, match="evaluation worker died"):
            result = scheme.evaluation_result()
        assert evaluator.restarts == 1
        assert result["returns"] == expected
    finally:
        learner.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_return_target_reached_by_a_parallel_evaluation_stops_the_run_and_keeps_that_evaluation(ray_session, tmp_path):
    """``stop_at_return: -.inf`` stops after the first evaluation: the run trains on while it
    plays and stops at the next point where it waits for it (here the checkpoint at 512 steps,
    whenever the result came in: where a run stops is reproducible), reporting it, at the steps
    of the weights it played, as its final evaluation (no second one of the newer weights)."""
    summary = _train(TINY, tmp_path, eval_parallel=True, stop_at_return=float("-inf"), target_steps=100_000)
    assert summary["stop_reason"] == "stop_at_return"
    assert summary["solved_at_env_steps"] == 384
    assert summary["env_steps"] == 512
    evaluated = _eval_rows(tmp_path / "progress.csv")
    assert evaluated and evaluated[0][0] == "384" and len(evaluated) == 1
    assert json.loads((tmp_path / "summary.json").read_text())["final_eval_return_mean"] == pytest.approx(float(evaluated[0][1]), rel=1e-4)


@pytest.mark.timeout(60)
def test_eval_parallel_without_periodic_evaluations_evaluates_inline(tmp_path):
    """Only the final evaluation, which the run would wait for: no evaluation worker is made."""
    config = from_dict({**TINY, "run": {**TINY["run"], "eval_every": 0, "eval_parallel": True, "target_steps": 256}})
    with pytest.warns(IgnoredConfigKeysWarning, match=r"run\.eval_parallel"):
        learner = Learner.from_config(config, run_dir=tmp_path, progress=False)
    try:
        summary = learner.train()
        assert not learner.scheme.collection_workers.evaluator.started
    finally:
        learner.close()
    assert summary["final_eval_return_mean"] is not None


def test_eval_parallel_is_named_as_unused_without_periodic_evaluations():
    """Evaluating only at the end, there is nothing to overlap: the key is reported as ignored;
    with evaluations, it applies, and it takes ``scheme.ray`` into use even without remote workers."""
    space = gym.spaces.Box(-1, 1, (4,))
    ignored = inapplicable_keys(from_dict({"run": {"eval_every": 0, "eval_parallel": True}}), space)
    assert any(keys == ["run.eval_parallel"] for keys, _ in ignored)
    used = inapplicable_keys(from_dict({"run": {"eval_parallel": True}, "scheme": {"ray": {"num_cpus": 2}}}), space)
    assert not any("run.eval_parallel" in keys or "scheme.ray.num_cpus" in keys for keys, _ in used)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert from_dict({"run": {"eval_parallel": True}}).run.eval_parallel is True
