"""Shared fixtures: one session-scoped Ray (for tests that need remote workers) and a guard
that no test leaks global RNG state into the next."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole session, 2 CPUs, no dashboard."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def _no_rng_leak():
    """Tests may seed the global generators; restore them so tests stay order-independent."""
    py, np_state, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    yield
    random.setstate(py)
    np.random.set_state(np_state)
    torch.set_rng_state(torch_state)


@pytest.fixture
def pytorchrl_cmd() -> list[str]:
    """The CLI as a subprocess command line (the installed console script's module)."""
    return [sys.executable, "-m", "pytorchrl.cli"]
