"""Every diagnostic an algorithm's updates report reaches progress.csv (and so TensorBoard and
Prometheus, which write the same rows): each algorithm declares them (``Algorithm.metrics``)."""

from __future__ import annotations

import csv
import math

import pytest

from pytorchrl.agent.algorithms import BUILT_IN
from pytorchrl.config import from_dict
from pytorchrl.learner import Learner

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ON_POLICY = {"env": {"env_id": "CartPole-v1", "num_envs": 4}, "storage": {"num_steps": 16}}
REPLAY = {"storage": {"capacity": 2048}}
CONFIGS = {
    "ppo": {**ON_POLICY, "algorithm": {"name": "ppo", "minibatch_size": 32}},
    "a2c": {**ON_POLICY, "algorithm": {"name": "a2c"}},
    "impala": {**ON_POLICY, "algorithm": {"name": "impala"}},
    "appo": {**ON_POLICY, "algorithm": {"name": "appo", "minibatch_size": 32}},
    "dqn": {**REPLAY, "env": {"env_id": "CartPole-v1", "num_envs": 4}, "algorithm": {"name": "dqn", "start_steps": 64, "minibatch_size": 32}},
    **{
        name: {**REPLAY, "env": {"env_id": "Pendulum-v1", "num_envs": 1}, "algorithm": {"name": name, "start_steps": 64, "minibatch_size": 32}}
        for name in ("sac", "td3", "ddpg", "mpo")
    },
    # a round of 64 steps, 32 of them planned, before the 150 updates: the statistics and the planner run too
    "mpc": {**REPLAY, "env": {"env_id": "Pendulum-v1", "num_envs": 1}, "algorithm": {
        "name": "mpc", "start_steps": 32, "minibatch_size": 32, "update_every": 32, "updates_per_step": 1.0, "num_candidates": 50, "horizon": 5}},
}
#: what a scheme (not an algorithm) adds to an update's info
SCHEME_KEYS = {"collect_time_s", "gradient_time_s", "apply_time_s", "policy_lag_mean", "gradient_staleness", "worker_replace_s"}


def test_every_algorithm_is_covered():
    assert set(CONFIGS) == set(BUILT_IN)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_what_an_algorithm_reports_is_declared_and_reaches_progress_csv(name, tmp_path):
    config = from_dict({**CONFIGS[name], "run": {"target_steps": 100_000, "eval_every": 0, "log_every": 10**9, "seed": 0}})
    learner = Learner.from_config(config, run_dir=tmp_path / "run", progress=False)
    try:
        declared = type(learner.scheme.algorithm).metrics
        reported: set[str] = set()
        for _ in range(150):  # past start_steps: updates have run
            info = learner.step()
            reported |= {k for k, v in info.items() if isinstance(v, float) and k not in SCHEME_KEYS}
        assert reported and reported <= set(declared), f"{name} reports {sorted(reported - set(declared))} without declaring them"
        learner.log()
    finally:
        learner.close()
    with open(tmp_path / "run" / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    for key in declared:
        assert key in rows[-1] and math.isfinite(float(rows[-1][key])), (name, key)
