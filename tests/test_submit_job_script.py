"""``scripts/submit_job.sh``'s own checks, before it calls Ray: configs Ray would not ship,
addresses nobody answers at, and the command it hands to ``ray job submit`` (a stand-in ``ray``
that records its arguments). The real job server's run is tests/scheme/test_submit_job.py."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(30)
def test_a_config_outside_the_repository_is_refused_before_submitting(tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text((REPO / "configs" / "ppo" / "cartpole.yaml").read_text())
    proc = subprocess.run([str(REPO / "scripts" / "submit_job.sh"), str(config)], capture_output=True, text=True, timeout=20)
    assert proc.returncode == 2 and "is outside the repository" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.timeout(30)
def test_a_config_git_ignores_is_refused_before_submitting(tmp_path):
    """Ray's upload of the working directory leaves out what .gitignore ignores (run directories)."""
    import shutil
    import tempfile

    runs = REPO / "runs"
    made = not runs.exists()
    runs.mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=runs))
    try:
        (folder / "config.yaml").write_text((REPO / "configs" / "ppo" / "cartpole.yaml").read_text())
        proc = subprocess.run([str(REPO / "scripts" / "submit_job.sh"), str(folder / "config.yaml")], capture_output=True, text=True, timeout=20)
    finally:
        shutil.rmtree(runs if made else folder)
    assert proc.returncode == 2 and "is ignored by git" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.timeout(30)
def test_a_job_server_nobody_answers_at_is_one_line(tmp_path):
    """It was Ray's 119-line traceback (and a head whose dashboard listens on 127.0.0.1 only
    answers other machines the same way)."""
    env = {**os.environ, "RAY_ADDRESS": f"http://127.0.0.1:{_free_port()}"}
    proc = subprocess.run([str(REPO / "scripts" / "submit_job.sh"), "configs/ppo/cartpole.yaml"], capture_output=True, text=True, timeout=20, env=env, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "no Ray job server answers at RAY_ADDRESS=http://127.0.0.1:" in proc.stderr and "--dashboard-host=0.0.0.0" in proc.stderr
    env["RAY_ADDRESS"] = f"127.0.0.1:{_free_port()}"  # a cluster's host:port, as train --address takes: Ray waited 40 s, then a traceback
    proc = subprocess.run([str(REPO / "scripts" / "submit_job.sh"), "configs/ppo/cartpole.yaml"], capture_output=True, text=True, timeout=20, env=env, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "no Ray cluster answers at RAY_ADDRESS=127.0.0.1:" in proc.stderr and "RAY_ADDRESS=http://HEAD:8265" in proc.stderr
    helped = subprocess.run([str(REPO / "scripts" / "submit_job.sh"), "--help"], capture_output=True, text=True, timeout=20)
    assert helped.returncode == 0 and "scripts/submit_job.sh CONFIG.yaml" in helped.stdout


@pytest.mark.timeout(30)
def test_what_ray_leaves_out_is_refused_and_what_it_ships_is_named_plainly(tmp_path):
    """In a repository of its own, with a stand-in ``ray`` that records what it is asked: a
    config git tracks under an ignored folder (Ray's upload matches the patterns, tracked or
    not) and one .rayignore matches are refused; a ``.yml`` config at the top is named
    ``name-<time>``, not ``.-name.yml-<time>``; and an empty option list passes under set -u."""
    import shutil

    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "submit_job.sh", repo / "scripts" / "submit_job.sh")
    (repo / ".gitignore").write_text("runs/\n")
    (repo / ".rayignore").write_text("private/\n")
    for relative in ("runs/c.yaml", "private/p.yaml", "top.yml"):
        (repo / relative).parent.mkdir(exist_ok=True)
        (repo / relative).write_text("run: {seed: 0}\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-f", "."], cwd=repo, check=True)  # runs/c.yaml tracked though ignored
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "ray").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "asked"}\n')
    (stub / "ray").chmod(0o755)
    env = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", "RAY_ADDRESS": "auto", "RUN_ROOT": "/runs"}
    env.pop("NO_WAIT", None)

    def submit(config: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(repo / "scripts" / "submit_job.sh"), config], capture_output=True, text=True, timeout=20, env=env, cwd=repo)

    for config in ("runs/c.yaml", "private/p.yaml"):
        refused = submit(config)
        assert refused.returncode == 2 and "is ignored by git (.gitignore or .rayignore)" in refused.stderr, (config, refused.stderr)
    shipped = submit("top.yml")
    assert shipped.returncode == 0, shipped.stderr
    asked = (tmp_path / "asked").read_text().splitlines()
    assert asked[:2] == ["job", "submit"] and "--no-wait" not in asked
    run_dir = asked[asked.index("--run-dir") + 1]
    assert run_dir.startswith("/runs/top-") and ".yml" not in run_dir
