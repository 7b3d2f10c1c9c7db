"""Node loss on a real multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``):
a worker node removed during training leaves the run going with the workers left; when a node
is added back, the collection workers are restored to the configured count."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import CONFIGS

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(600)]


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _wait_for(predicate, what: str, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"training ended while waiting for {what}: {proc.stderr.read()[-2000:] if proc.stderr else ''}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_training_survives_node_loss_and_regrows_when_a_node_returns(pytorchrl_cmd, tmp_path):
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = [cluster.add_node(num_cpus=1, resources={"collector": 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    run_dir = tmp_path / "run"
    cmd = [
        *pytorchrl_cmd, "train", str(CONFIGS / "ppo" / "cartpole.yaml"), "--address", cluster.address, "--run-dir", str(run_dir),
        "--quiet", "run.target_steps=100000000", "run.max_time_s=400", "run.log_every=512", "run.eval_every=0",
        "run.stop_at_return=null", "scheme.num_col_workers=2", "scheme.col_worker_resources.num_cpus=0.5",
        "scheme.col_worker_resources.resources={collector: 1}", "scheme.worker_restart_delay_s=0", "scheme.worker_timeout_s=30",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    progress = run_dir / "progress.csv"
    try:
        _wait_for(lambda: len(_rows(progress)) >= 2, "the first log rows", proc)
        cluster.remove_node(nodes[0])  # one collection worker dies with its node
        lost_at = len(_rows(progress))
        _wait_for(lambda: any(r["healthy_workers"] == "1" for r in _rows(progress)[lost_at:]), "a row with one worker", proc)
        one = len(_rows(progress))
        # training goes on with the worker left: several more rounds are logged
        _wait_for(lambda: len(_rows(progress)) >= one + 3, "training to go on with one worker", proc)
        assert all(r["healthy_workers"] == "1" for r in _rows(progress)[one:])  # the replacement has nowhere to start
        cluster.add_node(num_cpus=1, resources={"collector": 1})  # a node is back: the replacement starts there
        back = len(_rows(progress))
        _wait_for(lambda: any(r["healthy_workers"] == "2" for r in _rows(progress)[back:]), "a row with two workers again", proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.shutdown()
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["worker_restarts"] == 1 and summary["lost_batches"] == 1
    steps = [int(r["env_steps"]) for r in _rows(progress)]
    assert steps == sorted(steps) and steps[-1] == summary["env_steps"]
