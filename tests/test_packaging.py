"""What an installed wheel carries: the library, and no benchmarks, fuzzer, test envs or configs
(they live in the checkout: benchmarks/, tests/, configs/); ``pytorchrl benchmark`` runs from a
checkout and says so in one line elsewhere."""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pytorchrl.cli import main
from pytorchrl.utils import checkout
from tests.conftest import REPO

#: what only a checkout has: module names (or folders) that must not be in the wheel
CHECKOUT_ONLY = ("benchmarks", "fuzz", "bench", "envs_for_tests", "tests", "configs", "conftest")


def _checkout_only(path: str) -> list[str]:
    """The parts of a path in the wheel (``pytorchrl/envs/vec_env.py``) that only a checkout may have."""
    parts = [Path(p).stem for p in Path(path).parts]
    return [p for p in parts if p in CHECKOUT_ONLY or p.startswith("benchmarks")]


def test_setup_packages_only_the_library(monkeypatch):
    import setuptools

    declared: dict = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: declared.update(kwargs))
    monkeypatch.chdir(REPO)  # find_packages() looks in the working directory
    runpy.run_path(str(REPO / "setup.py"))
    packages, package_data = declared["packages"], declared.get("package_data") or {}
    assert packages and all(p == "pytorchrl" or p.startswith("pytorchrl.") for p in packages), packages
    modules = [str(f.relative_to(REPO)) for p in packages for f in (REPO / p.replace(".", "/")).glob("*.py")]
    assert modules and not [m for m in modules if _checkout_only(m)]
    assert not [f for files in package_data.values() for f in files if _checkout_only(f)]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_wheel_carries_no_benchmarks_and_benchmark_says_where_they_run(tmp_path):
    # built from a copy of the tracked files, so nothing is written into the checkout
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=False)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    src = tmp_path / "src"
    for name in filter(None, tracked.stdout.split("\0")):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist")],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("pytorchrl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pytorchrl/cli.py" in names and "pytorchrl/envs/registration.py" in names
    assert not [n for n in names if _checkout_only(n)], names

    # the wheel alone, run outside any checkout
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytorchrl.cli", "benchmark", "--list"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("pytorchrl: error: benchmarks run from a source checkout")
    probe = "import pytorchrl, pytorchrl.defaults as d; print(pytorchrl.__file__, d.CONFIGS)"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.split() == [str(site / "pytorchrl" / "__init__.py"), "None"], proc.stderr


def test_benchmark_outside_a_checkout_is_refused_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(checkout, "benchmarks_checkout", lambda cwd=None: None)
    assert main(["benchmark", "--list"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"pytorchrl: error: {checkout.BENCHMARKS_HINT}\n"


def test_the_checkout_is_found_from_the_working_directory(tmp_path, monkeypatch):
    """An installed package (its parent no checkout) run inside a clone uses the clone's benchmarks."""
    clone = tmp_path / "clone"
    for name in ("setup.py", "pytorchrl/__init__.py", "benchmarks/__init__.py"):
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        (clone / name).write_text("")
    (clone / "configs" / "ppo").mkdir(parents=True)
    monkeypatch.setattr(checkout, "PACKAGE_PARENT", tmp_path / "site-packages")
    assert checkout.package_checkout() is None
    assert checkout.benchmarks_checkout(clone / "configs" / "ppo") == clone.resolve()
    assert checkout.benchmarks_checkout(tmp_path) is None
    monkeypatch.setattr(checkout, "PACKAGE_PARENT", REPO)  # the package's own checkout comes first
    assert checkout.package_checkout() == REPO and checkout.benchmarks_checkout(clone) == REPO


def test_use_checkout_reaches_workers_and_subprocesses(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    checkout.use_checkout(tmp_path)
    checkout.use_checkout(tmp_path)
    assert sys.path[0] == str(tmp_path) and sys.path.count(str(tmp_path)) == 1
    assert os.environ["PYTHONPATH"] == os.pathsep.join([str(tmp_path), "/elsewhere"])


@pytest.mark.slow  # a fresh interpreter: seconds
@pytest.mark.timeout(60)
def test_a_central_collection_worker_imports_no_torch():
    """What a thin collection worker's process imports (its class, its envs, its recorder, its
    policy and transport, the package itself) pulls in no torch; the public API still resolves."""
    code = (
        "import sys\n"
        "import pytorchrl, pytorchrl.scheme, pytorchrl.envs\n"
        "from pytorchrl.scheme.collection.thin_worker import ThinCollectionWorker, make_collection_worker\n"
        "from pytorchrl.scheme.base.inference_servers import ServerCall, remote_policy\n"
        "from pytorchrl.scheme.base.worker_set import WorkerSet\n"
        "from pytorchrl.agent.storages.on_policy.recorder import RolloutRecorder\n"
        "from pytorchrl.agent.storages.off_policy.recorder import ReplayRecorder\n"
        "from pytorchrl.envs.vec_env import VecEnv\n"
        "envs = VecEnv('CartPole-v1', num_envs=2)\n"
        "rec = RolloutRecorder(num_steps=4, num_envs=2, obs_shape=(4,), action_shape=(), discrete=True)\n"
        "rec.reset(envs.reset_arrays())\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "assert pytorchrl.Learner.__name__ == 'Learner' and 'torch' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=50)
