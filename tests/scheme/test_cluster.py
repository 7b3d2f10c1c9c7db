"""A real multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): a head node and
two worker nodes, collection workers pinned to the worker nodes by a custom resource, and the
CLI joining it with ``--address``."""

from __future__ import annotations

import json
import subprocess
import sys

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



#: trains a few synchronous central rounds with each transport on the cluster at ``sys.argv[1]``
#: and prints, per transport, the server's socket calls and a digest of the learner's weights
_CENTRAL_ACROSS_NODES = """
import hashlib, json, sys
import ray
from pytorchrl.config import from_dict
from pytorchrl.learner import Learner

ray.init(address=sys.argv[1])
out = {}
for transport in ("auto", "same_node", "ray"):
    raw = {
        "env": {"env_id": "CartPole-v1", "num_envs": 8}, "storage": {"num_steps": 16},
        "algorithm": {"name": "ppo", "num_epochs": 1, "minibatch_size": 128}, "run": {"seed": 5, "eval_every": 0},
        "scheme": {"num_col_workers": 2, "col_worker_resources": {"num_cpus": 0.1, "resources": {"collector": 1}},
                   "inference": "central", "inference_server": {"num_cpus": 0.5, "transport": transport}},
    }
    learner = Learner.from_config(from_dict(raw), progress=False)
    for _ in range(3 * 2):
        learner.step()
    weights = learner.scheme.algorithm.get_weights()
    digest = hashlib.sha256(b"".join(weights[k].numpy().tobytes() for k in sorted(weights))).hexdigest()
    out[transport] = {"calls": ray.get(learner.scheme.inference.handles[0].socket_calls.remote()), "weights": digest}
    learner.close()
print(json.dumps(out))
"""


def test_central_workers_on_other_nodes_call_the_server_over_tcp_and_collect_what_ray_calls_collect(cluster):
    """The two collection workers sit on the two collector nodes, so at least one is on a node
    the server is not on: with ``transport: auto`` it calls over TCP, with ``same_node`` by Ray
    call, and every transport trains to the same weights."""
    proc = subprocess.run([sys.executable, "-c", _CENTRAL_ACROSS_NODES, cluster.address], capture_output=True, text=True, timeout=500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    steps = 3 * 16  # rounds x steps: one act call each, from every worker
    assert runs["auto"]["calls"]["tcp"] >= steps and runs["auto"]["calls"]["unix"] + runs["auto"]["calls"]["tcp"] >= 2 * steps
    assert runs["same_node"]["calls"]["tcp"] == 0
    assert runs["ray"]["calls"] == {"unix": 0, "tcp": 0}
    assert runs["auto"]["weights"] == runs["same_node"]["weights"] == runs["ray"]["weights"]
