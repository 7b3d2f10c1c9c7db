"""MuJoCo configs run end to end (a few hundred steps; the learning targets are benchmarks)."""

from __future__ import annotations

import math

import pytest

from pytorchrl.config import load_config
from pytorchrl.learner import Learner
from tests.conftest import CONFIGS


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("config", "overrides"),
    [
        ("sac/halfcheetah.yaml", ["algorithm.start_steps=256"]),
        ("td3/hopper.yaml", ["algorithm.start_steps=256"]),
        ("ppo/walker2d.yaml", ["storage.num_steps=128"]),
    ],
)
def test_mujoco_configs_train_and_evaluate(tmp_path, config, overrides):
    cfg = load_config(CONFIGS / config, [*overrides, "run.target_steps=512", "run.eval_every=0", "run.eval_episodes=1",
                                         "env.num_test_envs=1", "env.max_episode_steps=100", "run.torch_threads=1"])
    learner = Learner.from_config(cfg, run_dir=tmp_path, progress=False)
    try:
        summary = learner.train()
    finally:
        learner.close()
    assert summary["env_steps"] == 512 and learner.updates > 0
    assert math.isfinite(summary["final_eval_return_mean"])


@pytest.mark.learning
@pytest.mark.timeout(180)
def test_ppo_balances_mujocos_inverted_pendulum():
    """The MuJoCo family's CI learning test: a Gaussian policy in a physics env, in seconds."""
    cfg = load_config(CONFIGS / "ppo/cartpole.yaml", ["env.env_id=InvertedPendulum-v5", "run.target_steps=40000", "run.stop_at_return=500",
                                                      "run.eval_every=2048"])
    learner = Learner.from_config(cfg, progress=False)
    try:
        summary = learner.train()
    finally:
        learner.close()
    assert summary["solved_at_env_steps"] is not None and summary["solved_at_env_steps"] <= 40000, summary
