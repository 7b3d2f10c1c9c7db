"""Shared fixtures: one session-scoped Ray (for tests that need remote workers) and a guard
that no test leaks global RNG state into the next."""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"


def load_script(name: str):
    """The module of ``scripts/NAME.py``, loaded from its file and registered under ``name`` (a
    script's dataclasses look their module up in ``sys.modules``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules[name] = script
    spec.loader.exec_module(script)
    return script


@pytest.fixture(scope="session")
def ray_session():
    """One private local Ray for the whole session, 2 CPUs, no dashboard (``address="local"``:
    never a cluster that ``ray start`` left on the machine)."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def idle_ray(ray_session):
    """The session's Ray with every CPU free: for a test that reserves the whole cluster, so
    that a lease an earlier test has not yet handed back (Ray releases them asynchronously)
    cannot leave its work pending; one still held after 60 s fails naming what holds it."""
    from ray._private import state
    from ray.util import placement_group_table

    deadline = time.monotonic() + 60
    while ray_session.available_resources().get("CPU", 0.0) < ray_session.cluster_resources().get("CPU", 0.0):
        if time.monotonic() > deadline:
            alive = [a.get("ActorClassName") for a in state.actors().values() if a.get("State") != "DEAD"]
            groups = [g.get("bundles") for g in placement_group_table().values() if g.get("state") != "REMOVED"]
            pytest.fail(f"the session's Ray still has CPUs in use after 60 s: actors {alive}, placement groups {groups}")
        time.sleep(0.2)
    return ray_session


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI (``CI`` set, as ``.ci/run`` runs), a test skipped because a module could not be
    imported fails instead: the ``test`` extra must install everything the suite imports, and a
    skip would hide a missing dependency as a green run."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and call.excinfo is not None:
        reason = str(call.excinfo.value)
        if "could not import" in reason:
            report.outcome = "failed"
            report.longrepr = f"missing test dependency in CI: {reason} (add it to the 'test' extra in setup.py)"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same for a module that skips as it is collected (a module-level ``importorskip``)."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and "could not import" in str(report.longrepr):
        report.outcome = "failed"
        report.longrepr = f"missing test dependency in CI: {report.longrepr} (add it to the 'test' extra in setup.py)"


def checkpointed_run(config, run_dir: Path, steps: tuple[int, ...] = (0, 1, 2)) -> Path:
    """A run directory with a checkpoint at each of ``steps`` (env steps set by hand, no training),
    for tests that damage some of them."""
    from pytorchrl.learner import Learner

    learner = Learner.from_config(config, run_dir=run_dir, progress=False)
    try:
        for step in steps:
            learner.env_steps = step
            learner.checkpoint()
    finally:
        learner.close()
    return run_dir
