"""``evaluate`` rebuilds a run in one process: a run trained with remote workers (or on a cluster
that is not there) evaluates without them, with the episodes the full layout would play."""

from __future__ import annotations

import socket

import pytest
import yaml

from pytorchrl.config import from_dict, load_run_config
from pytorchrl.evaluation import evaluate_checkpoint, evaluation_state
from pytorchrl.learner import Learner
from pytorchrl.utils import checkpoint as ckpt
from pytorchrl.utils.errors import InputError
from tests.conftest import CONFIGS

TINY = {"target_steps": 2048, "eval_every": 0, "log_every": 1024, "checkpoint_every": 2048, "eval_episodes": 2, "stop_at_return": None}


def _train(run_dir, **scheme):
    raw = yaml.safe_load((CONFIGS / "ppo" / "cartpole.yaml").read_text())
    raw["run"].update(TINY)
    raw["env"]["normalize_obs"] = True  # statistics that the remote workers hold, not the driver
    raw["scheme"] = scheme
    learner = Learner.from_config(from_dict(raw), run_dir=run_dir, progress=False)
    try:
        learner.train()
    finally:
        learner.close()


def _full_layout_returns(run_dir, episodes):
    """The returns of the run's own layout, remote workers and all (what ``evaluate`` once built)."""
    learner = Learner.from_config(load_run_config(run_dir), progress=False)
    try:
        _, state, _ = ckpt.load_newest_checkpoint(run_dir / "checkpoints")
        learner.load_state(state)
        return learner.scheme.evaluate(episodes, True)
    finally:
        learner.close()


SMALL = {"num_cpus": 0.1}  # beside other tests' workers on the session's 2 CPUs


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("layout", "collected"),
    [
        ({"num_col_workers": 2, "col_worker_resources": SMALL}, lambda scheme: scheme["local_gradient_worker"]["collection"]["merged_statistics"]),
        ({"num_col_workers": 2, "col_worker_resources": SMALL, "inference": "central", "inference_server": SMALL},
         lambda scheme: scheme["local_gradient_worker"]["collection"]["merged_statistics"]),
        ({"num_grad_workers": 2, "grad_worker_resources": SMALL}, lambda scheme: scheme["merged_statistics"]),
    ],
    ids=["remote-collection", "central-inference", "remote-gradients"],
)
def test_a_run_with_remote_workers_evaluates_in_one_process_as_in_its_layout(ray_session, tmp_path, layout, collected):
    """The driver's worker did not collect, so the one-process layout takes the statistics the
    run's own layout evaluates with: the remote collection workers' merged ones (central
    inference's workers report them as numpy arrays, torch workers' too), or the update
    worker's merge of the remote gradient workers'."""
    run_dir = tmp_path / "remote"
    _train(run_dir, **layout)
    _, state, _ = ckpt.load_newest_checkpoint(run_dir / "checkpoints")
    assert "envs" not in state["scheme"]["local_gradient_worker"]["collection"]["local"]  # the driver's worker did not collect
    local = evaluation_state(state)["scheme"]["local_gradient_worker"]["collection"]["local"]
    rms = local["envs"]["obs_rms"]
    assert rms == collected(state["scheme"])["obs_rms"] and float(rms["count"]) > 1000  # trained statistics, not fresh ones

    result = evaluate_checkpoint(run_dir, episodes=6)
    assert result["returns"] == _full_layout_returns(run_dir, 6)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_cluster_run_evaluates_without_its_cluster_or_its_metrics_port(tmp_path):
    """A config naming 64 remote workers on a cluster that does not answer, and a Prometheus port
    that another process holds (the training run, say): the checkpoint still evaluates here."""
    run_dir = tmp_path / "local"
    _train(run_dir)
    before = evaluate_checkpoint(run_dir, episodes=4)
    config_path = run_dir / "config.yaml"
    raw = yaml.safe_load(config_path.read_text())
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        raw["run"].update(prometheus_port=busy.getsockname()[1], target_steps=10_000_000)
        raw["scheme"].update(num_col_workers=64, inference="central", col_communication="asynchronous")
        raw["scheme"]["ray"]["address"] = "127.0.0.1:1"
        raw["scheme"]["inference_server"]["num_servers"] = 2
        config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
        after = evaluate_checkpoint(run_dir, episodes=4)
    assert after["returns"] == before["returns"] and after["env_steps"] == 2048


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_evaluate_reports_the_success_rate_of_a_goal_env_and_none_for_others(tmp_path):
    """A goal env's episodes report info["is_success"]: evaluate gives their rate beside the
    returns (training's eval_success_rate, for a checkpoint); an env without goals gets no such key."""
    goal = from_dict({
        "env": {"env_id": "pytorchrl/BitFlipping-v0", "env_kwargs": {"n_bits": 2}, "num_envs": 2, "num_test_envs": 2},
        "actor": {"hidden_sizes": [16]}, "storage": {"capacity": 1000, "her": {"strategy": "future"}},
        "algorithm": {"name": "dqn", "minibatch_size": 16, "start_steps": 32},
        "run": {"target_steps": 256, "eval_every": 0, "log_every": 256, "checkpoint_every": 256, "eval_episodes": 2, "stop_at_return": None},
    })
    learner = Learner.from_config(goal, run_dir=tmp_path / "goal", progress=False)
    try:
        learner.train()
    finally:
        learner.close()
    result = evaluate_checkpoint(tmp_path / "goal", episodes=6)
    # an episode succeeds where it ends before its 2 steps run out: a return above -2 (-1 a step, 0 on success)
    assert len(result["returns"]) == 6
    assert result["success_rate"] == pytest.approx(sum(r > -2 for r in result["returns"]) / 6)
    _train(tmp_path / "cartpole")
    assert "success_rate" not in evaluate_checkpoint(tmp_path / "cartpole", episodes=2)


@pytest.mark.parametrize("episodes", [0, -1, 2.5, True])
def test_evaluate_checkpoint_refuses_a_count_of_episodes_that_is_no_count(tmp_path, episodes):
    """Before anything is loaded: zero episodes once ended in a ZeroDivisionError after the run was rebuilt."""
    with pytest.raises(InputError, match=rf"episodes={episodes!r}\).*at least 1"):
        evaluate_checkpoint(tmp_path / "no-run", episodes=episodes)
