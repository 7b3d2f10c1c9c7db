"""A real two-node cluster started with ``ray start`` and token authentication on (what a secure
deployment runs): a driver with the cluster's token trains on it; one without it, or with
another token, gets one line and exit 2 instead of Ray's retry loop."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest

from tests.conftest import CONFIGS
from tests.scheme.ray_processes import ray_start_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(600)]


def _env(token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")}
    return env if token is None else {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}


@pytest.fixture(scope="module")
def token_cluster():
    token = secrets.token_hex(16)
    with ray_start_cluster(["--num-cpus=1", '--resources={"collector": 1}'], env=_env(token)) as address:
        yield address, token


def _train(pytorchrl_cmd, address: str, run_dir: Path, token: str | None) -> subprocess.CompletedProcess:
    cmd = [
        *pytorchrl_cmd, "train", str(CONFIGS / "ppo" / "cartpole.yaml"), "--address", address, "--run-dir", str(run_dir), "--quiet",
        "run.target_steps=2048", "run.eval_every=2048", "scheme.num_col_workers=1", "scheme.col_worker_resources.num_cpus=0.5",
        "scheme.col_worker_resources.resources={collector: 1}",
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=_env(token))


def test_a_driver_with_the_token_trains_on_the_second_node(token_cluster, pytorchrl_cmd, tmp_path):
    address, token = token_cluster
    proc = _train(pytorchrl_cmd, address, tmp_path / "run", token)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["env_steps"] >= 2048


@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_a_driver_without_the_clusters_token_is_told_in_one_line(token_cluster, pytorchrl_cmd, tmp_path, token):
    address, _ = token_cluster
    proc = _train(pytorchrl_cmd, address, tmp_path / "run", token)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    why = "requires token authentication and this driver has no token" if token is None else "refused this driver's token (from RAY_AUTH_TOKEN)"
    assert why in lines[0] and "RAY_AUTH_MODE=token" in lines[0] and "RAY_AUTH_TOKEN_PATH" in lines[0]
    assert not (tmp_path / "run").exists()
