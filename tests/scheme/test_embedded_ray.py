"""A run with no Ray address gets a private embedded Ray even when a cluster that ``ray start``
left runs on the same machine (Ray's own default would join that cluster, or fail in a long
traceback when asked for ``num_cpus``); it joins a cluster only when pointed at one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CONFIGS
from tests.scheme.ray_processes import ray_start_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(600)]

_COUNT_DRIVERS = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
mark = "-m pytorchrl" + ".cli"  # built here so that this script's own command line does not hold it
print(sum(mark in job["Entrypoint"] for job in ray._private.state.jobs()))  # training runs that ever joined
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    return {**env, **extra}


#: the ray-start cluster and the drivers that join it on purpose run without token authentication
#: (Ray turns it on by default once ~/.ray/auth_token exists; tests/scheme/test_token_auth.py covers it)
_OPEN = _env(RAY_AUTH_MODE="disabled")


def _drivers_seen(address: str) -> int:
    proc = subprocess.run([sys.executable, "-c", _COUNT_DRIVERS, address], capture_output=True, text=True, timeout=120, env=_OPEN)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return int(proc.stdout.strip().splitlines()[-1])


def _train(pytorchrl_cmd, run_dir: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        *pytorchrl_cmd, "train", str(CONFIGS / "ppo" / "cartpole.yaml"), "--run-dir", str(run_dir), "--quiet",
        "run.target_steps=2048", "run.eval_every=2048", "scheme.num_col_workers=1", "scheme.col_worker_resources.num_cpus=0.5", *extra,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env)


def test_a_run_without_an_address_stays_on_its_own_ray_beside_a_ray_start_cluster(pytorchrl_cmd, tmp_path):
    with ray_start_cluster(env=_OPEN, own_temp_dir=False) as address:
        assert _drivers_seen(address) == 0

        alone = _train(pytorchrl_cmd, tmp_path / "alone", _env())
        assert alone.returncode == 0, alone.stderr[-2000:]
        assert json.loads(alone.stdout.strip().splitlines()[-1])["env_steps"] >= 2048
        assert _drivers_seen(address) == 0, "a run without an address joined the ray-start cluster"

        # the same count notices a run that was pointed at the cluster
        joined = _train(pytorchrl_cmd, tmp_path / "joined", _env(RAY_ADDRESS=address, RAY_AUTH_MODE="disabled"))
        assert joined.returncode == 0, joined.stderr[-2000:]
        assert _drivers_seen(address) == 1

        # --address local: an embedded Ray though RAY_ADDRESS names the cluster (a shell that exported it)
        local = _train(pytorchrl_cmd, tmp_path / "local", _env(RAY_ADDRESS=address, RAY_AUTH_MODE="disabled"), "--address", "local")
        assert local.returncode == 0, local.stderr[-2000:]
        assert _drivers_seen(address) == 1, "--address local joined the cluster RAY_ADDRESS names"


def test_an_http_port_as_the_cluster_address_is_one_line_not_a_hang():
    """The dashboard's port (8265, what `ray job submit` takes) given as --address: Ray's driver
    retried its gRPC connection forever; an HTTP answer is told at once."""
    import http.server
    import threading

    from pytorchrl.scheme.base.ray_runtime import _check_reachable
    from pytorchrl.utils.errors import InputError

    class Quiet(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        with pytest.raises(InputError, match=r"answers HTTP, as Ray's dashboard .* the head's GCS port, 6379 by default .*e\.g\. 127\.0\.0\.1:6379"):
            _check_reachable(address)
    finally:
        server.shutdown()
