"""A real multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): a head node and
two worker nodes, collection workers pinned to the worker nodes by a custom resource, and the
CLI joining it with ``--address``."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import CONFIGS

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster():
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    c = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        c.add_node(num_cpus=1, resources={"collector": 1})
    c.wait_for_nodes()
    yield c
    c.shutdown()


def _train(pytorchrl_cmd, address, run_dir, *overrides):
    cmd = [
        *pytorchrl_cmd, "train", str(CONFIGS / "ppo" / "cartpole.yaml"), "--address", address, "--run-dir", str(run_dir), "--quiet",
        "run.target_steps=3000", "run.eval_every=2048", "run.checkpoint_every=2048",
        "scheme.num_col_workers=2", "scheme.col_worker_resources.num_cpus=0.5", "scheme.col_worker_resources.resources={collector: 1}",
        *overrides,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=500)


def test_training_across_nodes_writes_a_complete_run_directory(cluster, pytorchrl_cmd, tmp_path):
    run_dir = tmp_path / "run"
    proc = _train(pytorchrl_cmd, cluster.address, run_dir)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["env_steps"] >= 3000
    # each collector resource exists once per worker node: the two workers ran on the two nodes
    assert {p.name for p in run_dir.iterdir()} >= {"config.yaml", "progress.csv", "summary.json", "tb", "checkpoints"}
    assert any((run_dir / "checkpoints").iterdir())
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    rows = (run_dir / "progress.csv").read_text().splitlines()
    assert len(rows) >= 2 and rows[0].startswith("env_steps,")


def test_more_pinned_workers_than_nodes_fail_fast(cluster, pytorchrl_cmd, tmp_path):
    proc = _train(pytorchrl_cmd, cluster.address, tmp_path / "run", "scheme.num_col_workers=3")
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert "ask for 3 collector in all (3 collection workers x 1) but the Ray cluster has 2" in last
    assert "Traceback" not in proc.stderr

