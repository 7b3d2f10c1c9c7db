"""Learning regression tests: a return reached within an env-step budget (never a wall-clock time).

The full targets (475 on CartPole within 100k steps, median of 3 seeds, and the speed ratios)
belong to ``pytorchrl benchmark``; these catch a broken learner quickly in CI.
"""

from __future__ import annotations

import pytest

from pytorchrl.config import load_config
from pytorchrl.learner import Learner
from tests.conftest import CONFIGS


def _train(config: str, *overrides: str) -> dict:
    cfg = load_config(CONFIGS / config, list(overrides))
    learner = Learner.from_config(cfg, progress=False)
    try:
        return learner.train()
    finally:
        learner.close()


@pytest.mark.learning
@pytest.mark.timeout(300)
def test_ppo_cartpole_reaches_200_within_30k_steps():
    summary = _train("ppo/cartpole.yaml", "run.target_steps=30000", "run.stop_at_return=200", "run.eval_every=2048")
    assert summary["solved_at_env_steps"] is not None, summary
    assert summary["solved_at_env_steps"] <= 30_000


@pytest.mark.learning
@pytest.mark.timeout(300)
def test_a2c_cartpole_reaches_200_within_60k_steps():
    summary = _train("a2c/cartpole.yaml", "run.target_steps=60000", "run.stop_at_return=200", "run.eval_every=5000")
    assert summary["solved_at_env_steps"] is not None, summary
    assert summary["solved_at_env_steps"] <= 60_000
