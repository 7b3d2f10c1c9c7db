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
@pytest.mark.parametrize(
    ("config", "budget", "eval_every"),
    [("ppo/cartpole.yaml", 30_000, 2048), ("a2c/cartpole.yaml", 60_000, 5000)],
    ids=["ppo", "a2c"],
)
def test_cartpole_reaches_200_within_budget(config, budget, eval_every):
    summary = _train(config, f"run.target_steps={budget}", "run.stop_at_return=200", f"run.eval_every={eval_every}")
    assert summary["solved_at_env_steps"] is not None, summary
    assert summary["solved_at_env_steps"] <= budget
