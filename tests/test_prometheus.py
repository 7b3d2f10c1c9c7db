"""`run.prometheus_port`: a real HTTP scrape during a short run equals the progress row; a port in
use is one line and exit 2."""

from __future__ import annotations

import csv
import json
import math
import re
import socket
import urllib.request

import pytest

from pytorchrl.cli import main
from pytorchrl.config import load_config
from pytorchrl.learner import Learner
from pytorchrl.scheme.base.inference_servers import METRICS as INFERENCE_METRICS
from pytorchrl.utils.errors import ConfigError
from tests.conftest import CONFIGS, REPO

parser = pytest.importorskip("prometheus_client.parser")

SHORT = ["env.num_envs=4", "storage.num_steps=32", "run.log_every=128", "run.eval_every=256", "run.eval_episodes=2", "run.target_steps=512"]


def _scrape(url: str) -> dict[str, tuple[dict[str, str], float]]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {s.name: (s.labels, s.value) for family in parser.text_string_to_metric_families(text) for s in family.samples}


def _last_row(path) -> dict[str, str]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))[-1]


def _assert_matches(scraped: dict, row: dict[str, str], run_name: str) -> None:
    checked = 0
    for column, text in row.items():
        if text == "":
            continue
        labels, value = scraped[f"pytorchrl_{column}"]
        assert labels == {"run": run_name}
        assert math.isclose(value, float(text), rel_tol=1e-5, abs_tol=1e-9), column
        checked += 1
    assert checked >= 12  # the counters, returns, fps, losses: not a vacuous comparison


@pytest.mark.timeout(60)
def test_a_scrape_during_the_run_equals_the_progress_row(tmp_path):
    config = load_config(CONFIGS / "ppo" / "cartpole.yaml", [*SHORT, "run.prometheus_port=0"])
    learner = Learner.from_config(config, run_dir=tmp_path / "cartpole-0", progress=False)
    try:
        prometheus = learner.writers[0]
        assert prometheus.url.startswith("http://127.0.0.1:")  # off this machine only unless run.prometheus_host says so
        while not (tmp_path / "cartpole-0" / "progress.csv").is_file():
            learner.step()
        first = _last_row(tmp_path / "cartpole-0" / "progress.csv")
        _assert_matches(_scrape(prometheus.url), first, "cartpole-0")
        learner.train()
        last = _last_row(tmp_path / "cartpole-0" / "progress.csv")
        assert int(last["env_steps"]) > int(first["env_steps"])
        scraped = _scrape(prometheus.url)
        _assert_matches(scraped, last, "cartpole-0")
        assert scraped["pytorchrl_worker_restarts"][1] == 0 and "pytorchrl_policy_lag_mean" in scraped
    finally:
        learner.close()
    with pytest.raises(OSError):  # closed with the learner: the port is free again
        urllib.request.urlopen(prometheus.url, timeout=2)
    dashboard = (REPO / "configs" / "monitoring" / "grafana_dashboard.json").read_text()
    queried = set(re.findall(r"pytorchrl_(\w+)\{", "".join(t["expr"] for p in json.loads(dashboard)["panels"] for t in p["targets"])))
    # the shipped dashboard plots columns runs write (the inference ones, runs with central inference)
    assert len(queried) >= 15 and queried - set(INFERENCE_METRICS) <= set(last)
    assert set(INFERENCE_METRICS) <= queried


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"'run.prometheus_port' = {port}: cannot serve metrics on 127.0.0.1:{port}"):
            Learner.from_config(load_config(CONFIGS / "ppo" / "cartpole.yaml", [f"run.prometheus_port={port}"]))
        code = main(["train", str(CONFIGS / "ppo" / "cartpole.yaml"), f"run.prometheus_port={port}", "--run-dir", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "prometheus_port" in err[0]
    assert not (tmp_path / "r").exists()  # nothing written for a run that could not start


@pytest.mark.parametrize("host", ["not-a-host.invalid", "192.0.2.1"])  # a name that resolves nowhere; an address of no interface here
def test_a_host_it_cannot_serve_on_names_the_host_not_the_port(host):
    with pytest.raises(ConfigError, match=rf"'run.prometheus_host' = '{re.escape(host)}': cannot serve metrics there .*0\.0\.0\.0"):
        Learner.from_config(load_config(CONFIGS / "ppo" / "cartpole.yaml", ["run.prometheus_port=0", f"run.prometheus_host={host}"]))


def test_the_port_must_be_a_tcp_port():
    with pytest.raises(ConfigError, match=r"'run.prometheus_port' = 70000 is out of range: must be <= 65535"):
        load_config(CONFIGS / "ppo" / "cartpole.yaml", ["run.prometheus_port=70000"])


def test_a_writer_that_fails_to_open_lets_the_metrics_port_go_and_leaves_no_run_directory(tmp_path, monkeypatch):
    """TensorBoard failing after the endpoint started (a full disk): the port is served no more
    and the run directory it made is removed, as for any run that could not start."""
    import pytorchrl.run_dir

    opened = []

    class Failing:
        def __init__(self, path):
            opened.append(path)
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(pytorchrl.run_dir, "TensorBoardWriter", Failing)
    with socket.socket() as probe:  # a port free now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(OSError, match="No space left"):
        Learner.from_config(load_config(CONFIGS / "ppo" / "cartpole.yaml", [f"run.prometheus_port={port}"]), run_dir=tmp_path / "r")
    assert opened and not (tmp_path / "r").exists()
    with socket.socket() as again:  # the endpoint let it go
        again.bind(("127.0.0.1", port))
