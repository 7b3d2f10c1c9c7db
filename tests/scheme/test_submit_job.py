"""``scripts/submit_job.sh`` against a real Ray job server (a one-node local cluster with its dashboard).

One node only: ``ray.cluster_utils`` nodes on one machine share a session directory, and a
second node's runtime-env agent may clean up the job's working directory under the driver.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(600)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def job_server():
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    port = _free_port()
    # its own agent port too: the session's Ray (other tests) already holds the default one, and a
    # head whose job agent cannot bind answers every submission with "No available agent"
    head = {"num_cpus": 2, "include_dashboard": True, "dashboard_port": port, "dashboard_agent_listen_port": _free_port()}
    c = cluster_utils.Cluster(initialize_head=True, head_node_args=head)
    address = f"http://127.0.0.1:{port}"
    _wait_for_job_agent(address)
    yield address
    c.shutdown()


def _wait_for_job_agent(address: str, timeout_s: float = 120.0) -> None:
    """The job server answers before its agent can run jobs ("No available agent"): wait for it."""
    env = {**os.environ, "RAY_ADDRESS": address}
    if (Path.home() / ".ray" / "auth_token").is_file():
        env.setdefault("RAY_AUTH_MODE", "token")
    deadline = time.monotonic() + timeout_s
    while True:
        proc = subprocess.run(["ray", "job", "submit", "--", "true"], capture_output=True, text=True, env=env, timeout=120)
        if proc.returncode == 0 or time.monotonic() > deadline:
            return
        time.sleep(2)


def test_submit_job_script_runs_on_the_cluster(job_server, tmp_path):
    env = {**os.environ, "RAY_ADDRESS": job_server, "RUN_ROOT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    for _ in range(3):  # a loaded job server may still answer "No available agent": Ray says to retry
        proc = subprocess.run(
            # from configs/, with the config's path relative to there: the script names it inside the repository it ships
            [str(REPO / "scripts" / "submit_job.sh"), "ppo/cartpole_sync_2workers.yaml", "run.target_steps=2000", "scheme.col_worker_resources.num_cpus=0.5"],
            capture_output=True, text=True, timeout=500, env=env, cwd=REPO / "configs",
        )
        if "No available agent" not in proc.stdout + proc.stderr:
            break
        time.sleep(5)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-12000:]
    (run_dir,) = list(tmp_path.iterdir())
    assert run_dir.name.startswith("ppo-cartpole_sync_2workers-")
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] >= 2000
    assert {p.name for p in run_dir.iterdir()} >= {"config.yaml", "progress.csv", "summary.json", "tb", "checkpoints"}
