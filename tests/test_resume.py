"""Exact resume and determinism: a synchronous run killed with SIGKILL and resumed from its newest
checkpoint ends with the weights and ``progress.csv`` learning columns of the run that was never
interrupted; two runs of one config and seed are identical, local or with remote workers."""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.config import from_dict
from pytorchrl.envs.snapshot import restore, snapshot
from pytorchrl.learner import Learner
from pytorchrl.utils import checkpoint as ckpt
from pytorchrl.utils.runtime import code_version
from pytorchrl.utils.signals import StopSignals
from tests.conftest import CONFIGS

#: columns that measure time, not learning (they differ between any two runs)
TIMING = ("wall_time_s", "fps")


def learning_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k not in TIMING and not k.endswith("_time_s")} for row in csv.DictReader(f)]


def flat_state(state: object, prefix: str = "") -> dict[str, object]:
    """Every leaf of a checkpoint state, keyed by its path."""
    if isinstance(state, dict):
        return {k: v for key, value in state.items() for k, v in flat_state(value, f"{prefix}/{key}").items()}
    if isinstance(state, (list, tuple)):
        return {k: v for i, value in enumerate(state) for k, v in flat_state(value, f"{prefix}/{i}").items()}
    return {prefix: state}


def copy_up_to(run_dir: Path, into: Path, checkpoint: str) -> Path:
    """``into``: a copy of ``run_dir``'s config, progress.csv and its checkpoint ``checkpoint``
    alone, as if the run had died after writing it (resumed, it continues from there)."""
    (into / "checkpoints" / checkpoint).mkdir(parents=True)
    for name in ("config.yaml", "progress.csv"):
        (into / name).write_bytes((run_dir / name).read_bytes())
    for path in (run_dir / "checkpoints" / checkpoint).iterdir():
        (into / "checkpoints" / checkpoint / path.name).write_bytes(path.read_bytes())
    return into


def assert_resumes_to_the_whole_run(resumed_dir: Path, whole_dir: Path, final: str) -> dict:
    """Resume ``resumed_dir`` to its end and assert that it wrote the rows and the final
    checkpoint (``final``) of the uninterrupted run in ``whole_dir``; returns that checkpoint's state."""
    resumed = Learner.resume(resumed_dir, progress=False)
    try:
        resumed.train()
    finally:
        resumed.close()
    assert learning_rows(resumed_dir / "progress.csv") == learning_rows(whole_dir / "progress.csv")
    final_whole = ckpt.load_checkpoint(whole_dir / "checkpoints" / final)[0]
    assert_same_state(final_whole["scheme"], ckpt.load_checkpoint(resumed_dir / "checkpoints" / final)[0]["scheme"])
    return final_whole


def assert_same_state(a: dict, b: dict) -> None:
    fa, fb = flat_state(a), flat_state(b)
    assert fa.keys() == fb.keys()
    differ = [k for k in fa if not (torch.equal(fa[k], fb[k]) if isinstance(fa[k], torch.Tensor) else fa[k] == fb[k])]
    assert not differ, differ[:5]


@pytest.mark.parametrize("make", [
    lambda: gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="vector_entry_point"),
    lambda: gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 3),
])
def test_env_snapshot_restores_episodes_in_progress(make, tmp_path):
    env, twin = make(), make()
    env.reset(seed=3)
    twin.reset(seed=99)  # a different state everywhere, which restore() overwrites
    actions = [env.action_space.sample() for _ in range(40)]
    for action in actions[:20]:
        env.step(action)
    ckpt.save_checkpoint(tmp_path / "step_1", {"env": snapshot(env)}, {})  # through a weights_only load
    restore(twin, ckpt.load_checkpoint(tmp_path / "step_1")[0]["env"])
    for action in actions[20:]:  # episode ends and autoresets included: the same from here on
        out, out_twin = env.step(action), twin.step(action)
        for x, y in zip(out[:4], out_twin[:4]):
            np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="does not fit an env of layers"):
        restore(gym.make("CartPole-v1"), snapshot(twin))


def test_env_snapshot_goes_only_into_envs_made_the_same_way():
    """A snapshot holds settings as well as state (CartPole's time limit): a resume or an evaluation
    that changes how the envs are made resets them instead of restoring the old settings."""
    from pytorchrl.envs.vec_env import VecEnv

    def make(limit: int | None) -> VecEnv:
        return VecEnv.create_factory("CartPole-v1", num_envs=2, max_episode_steps=limit)[0]()

    old = make(None)
    old.reset()
    old.step(torch.zeros(2, dtype=torch.long))
    state = old.state_dict()
    assert make(None).load_state_dict(state)  # made the same way: restored
    short = make(7)
    assert not short.load_state_dict(state)
    short.reset_from_state()
    lengths = []
    for _ in range(8):
        short.step(torch.zeros(2, dtype=torch.long))
        lengths += [length for _, _, length in short.pop_episodes()]
    assert lengths == [7, 7]  # the new time limit holds


def test_envs_with_a_simulator_resume_from_a_reset_not_a_partial_snapshot():
    """A Box2D world is not plain data: restoring LunarLander's plain attributes over a fresh
    world crashed its first step (``assert self.lander is not None``), which stopped a TD3 run's
    resume. Such envs are not snapshotted, and a checkpoint written with a snapshot of them
    (before) resumes from a reset."""
    pytest.importorskip("Box2D")
    from pytorchrl.envs.snapshot import snapshot_gaps
    from pytorchrl.envs.vec_env import VecEnv

    make = VecEnv.create_factory("LunarLanderContinuous-v3", num_envs=2)[0]
    old = make()
    assert "LunarLander.world" in snapshot_gaps(old.env) and not snapshot_gaps(gym.make_vec("CartPole-v1", 2))
    old.reset()
    old.step(torch.zeros(2, 2))
    state = old.state_dict()
    assert "snapshot" not in state
    state.update(snapshot=snapshot(old.env), made_with=old._made_with)  # as the checkpoints written before held it
    resumed = make()
    assert resumed.load_state_dict(state) is False
    resumed.reset_from_state()
    for _ in range(3):
        resumed.step(torch.zeros(2, 2))


TINY = {
    "env": {"num_envs": 4, "num_test_envs": 2},
    "storage": {"num_steps": 32},
    "algorithm": {"name": "ppo", "num_epochs": 2, "minibatch_size": 64},
    "actor": {"hidden_sizes": [16]},
    "run": {"target_steps": 2_048, "log_every": 256, "eval_every": 512, "eval_episodes": 2, "stop_at_return": None},
}


#: TINY with a GRU (states carried across rollouts by the workers, chunked minibatches)
TINY_GRU = {**TINY, "actor": {"hidden_sizes": [16], "recurrent": {"type": "gru", "hidden_size": 16}}, "storage": {"num_steps": 32, "sequence_length": 16}}


def _run(tmp_path: Path, name: str, scheme: dict, base: dict | None = None) -> tuple[list[dict[str, str]], dict]:
    learner = Learner.from_config(from_dict({**(base or TINY), "scheme": scheme}), run_dir=tmp_path / name, progress=False)
    try:
        learner.train()
    finally:
        learner.close()
    return learning_rows(tmp_path / name / "progress.csv"), ckpt.load_newest_checkpoint(tmp_path / name / "checkpoints")[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("scheme", "base"), [
    ({}, TINY),
    ({"num_col_workers": 2, "col_worker_resources": {"num_cpus": 0.5}}, TINY),
    ({"num_col_workers": 2, "col_worker_resources": {"num_cpus": 0.5}}, TINY_GRU),
], ids=["local", "two-remote-workers", "gru-two-remote-workers"])
def test_two_synchronous_runs_are_identical(ray_session, tmp_path, scheme, base):
    rows_a, state_a = _run(tmp_path, "a", scheme, base)
    rows_b, state_b = _run(tmp_path, "b", scheme, base)
    assert len(rows_a) >= 8 and rows_a == rows_b
    assert_same_state(state_a["scheme"], state_b["scheme"])


@pytest.mark.slow
@pytest.mark.timeout(600)  # the sum of its runs' own limits (240 + 120 + 240 s)
def test_sigkill_then_resume_equals_the_uninterrupted_run(tmp_path):
    args = [
        str(CONFIGS / "ppo" / "cartpole.yaml"), "--quiet", "run.target_steps=16384", "run.log_every=512",
        "run.eval_every=2048", "run.eval_episodes=3", "run.checkpoint_every=1024", "run.keep_checkpoints=3",
        "run.stop_at_return=null",
    ]
    cli = [sys.executable, "-m", "pytorchrl.cli", "train"]
    whole = subprocess.run([*cli, *args, "--run-dir", str(tmp_path / "whole")], capture_output=True, text=True, timeout=240)
    assert whole.returncode == 0, whole.stderr[-2000:]

    killed = tmp_path / "killed"
    proc = subprocess.Popen([*cli, *args, "--run-dir", str(killed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (killed / "checkpoints" / "step_4096").is_dir() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)  # somewhere past the 4th checkpoint, maybe mid-write of a later one
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (killed / "summary.json").exists()  # killed mid-run
    assert ckpt.list_checkpoints(killed / "checkpoints")  # something to resume from

    resumed = subprocess.run([*cli, "--resume", str(killed), "--quiet"], capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert learning_rows(killed / "progress.csv") == learning_rows(tmp_path / "whole" / "progress.csv")
    final_whole, _ = ckpt.load_checkpoint(tmp_path / "whole" / "checkpoints" / "step_16384")
    final_killed, _ = ckpt.load_checkpoint(killed / "checkpoints" / "step_16384")
    assert_same_state(final_whole["scheme"], final_killed["scheme"])
    assert final_whole["learner"]["updates"] == final_killed["learner"]["updates"]


def _signal_after(learner: Learner, update: int, *signums: int) -> None:
    """Raise ``signums`` in this process, one after the other, right after the learner's
    ``update``-th update."""
    step, made = learner.scheme.update_worker.step, [0]

    def stepping() -> dict:
        info = step()
        made[0] += 1
        if made[0] == update:
            for signum in signums:
                signal.raise_signal(signum)
        return info

    learner.scheme.update_worker.step = stepping


def test_stop_signals_install_their_handlers_only_when_enabled_and_hand_them_back():
    """A Ray Tune trial trains with ``stop_signals=False``: its process's SIGTERM stays Ray's."""
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals(lambda: None, enabled=False):
        assert signal.getsignal(signal.SIGTERM) is before
    with StopSignals(lambda: None) as stops:
        assert signal.getsignal(signal.SIGTERM) == stops._handle
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_second_stop_signal_interrupts_and_later_ones_let_the_cleanup_finish():
    """Ctrl-C pressed again and again: the first asks for a clean stop, the second stops at
    once, and a third does not cut short the writing of what the run keeps (summary.json)."""
    firsts = []
    stops = StopSignals(lambda: firsts.append(1))
    stops._handle(signal.SIGINT, None)
    assert firsts == [1]
    with pytest.raises(KeyboardInterrupt):
        stops._handle(signal.SIGINT, None)
    stops._handle(signal.SIGINT, None)  # ignored
    stops._handle(signal.SIGTERM, None)
    assert firsts == [1] and stops.received == 4


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_run_stopped_by_a_signal_mid_round_resumes_to_the_whole_run(tmp_path, monkeypatch):
    """TINY's rounds are 128 env steps and 4 updates: a SIGTERM after the 18th update lets the
    fifth round finish (20 updates, 640 steps: no log row falls there), checkpoints it, and the
    resumed run writes the rows and ends with the weights of the run that was never stopped. Its
    summary names the code of each stretch (here the resumed one ran "other" code)."""
    whole_rows, whole_state = _run(tmp_path, "whole", {})
    previous = signal.getsignal(signal.SIGTERM)
    learner = Learner.from_config(from_dict({**TINY, "scheme": {}}), run_dir=tmp_path / "stopped", progress=False)
    _signal_after(learner, 18, signal.SIGTERM)
    try:
        summary = learner.train()
    finally:
        learner.close()
    assert signal.getsignal(signal.SIGTERM) is previous  # handed back
    assert summary["stop_reason"] == "interrupted" and (summary["env_steps"], summary["updates"]) == (640, 20)
    assert summary["code"] == [code_version()] and code_version().startswith("pytorchrl ")
    _, _, meta = ckpt.load_newest_checkpoint(tmp_path / "stopped" / "checkpoints")
    assert (meta["env_steps"], meta["updates"]) == (640, 20)
    assert [row["env_steps"] for row in learning_rows(tmp_path / "stopped" / "progress.csv")] == ["256", "512"]  # no extra row
    monkeypatch.setattr("pytorchrl.learner.code_version", lambda: "pytorchrl other")
    again = Learner.resume(tmp_path / "stopped", progress=False)
    try:
        resumed = again.train()
    finally:
        again.close()
    assert resumed["stop_reason"] == "target_steps" and resumed["code"] == [code_version(), "pytorchrl other"]
    assert learning_rows(tmp_path / "stopped" / "progress.csv") == whole_rows
    assert_same_state(whole_state["scheme"], ckpt.load_newest_checkpoint(tmp_path / "stopped" / "checkpoints")[1]["scheme"])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_second_signal_stops_at_once_without_a_checkpoint(tmp_path):
    raw = {**TINY, "run": {**TINY["run"], "checkpoint_every": 256}}
    learner = Learner.from_config(from_dict(raw), run_dir=tmp_path / "run", progress=False)
    _signal_after(learner, 18, signal.SIGTERM, signal.SIGTERM)
    summary, meta = _stopped_at_once(learner)
    assert summary["stop_reason"] == "interrupted" and summary["updates"] < 20  # mid-round
    assert (meta["env_steps"], meta["updates"]) == (512, 16)  # the last whole state, written on schedule


def _stopped_at_once(learner: Learner) -> tuple[dict, dict]:
    """``train()`` stopped at once by a second signal: its summary, and the newest checkpoint's meta."""
    try:
        with pytest.raises(KeyboardInterrupt):
            learner.train()
    finally:
        learner.close()
    assert learner.run_dir is not None
    return json.loads((learner.run_dir / "summary.json").read_text()), ckpt.load_newest_checkpoint(learner.run_dir / "checkpoints")[2]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_second_signal_in_finish_still_writes_the_summary(tmp_path):
    """Two signals as the final checkpoint is about to be written (a run at its target): the
    summary says interrupted, and the newest checkpoint is the last periodic one, whole (the one
    due at the target is finish()'s alone, written once)."""
    raw = {**TINY, "run": {**TINY["run"], "target_steps": 512, "checkpoint_every": 256}}
    learner = Learner.from_config(from_dict(raw), run_dir=tmp_path / "run", progress=False)
    checkpoint, steps = learner.checkpoint, []

    def checkpointing(*args, **kwargs):
        steps.append(learner.env_steps)
        if learner.env_steps == 512:  # finish()'s
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)
        return checkpoint(*args, **kwargs)

    learner.checkpoint = checkpointing
    summary, meta = _stopped_at_once(learner)
    assert steps == [256, 512]
    assert summary["stop_reason"] == "interrupted" and summary["env_steps"] == 512 and meta["env_steps"] == 256


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_cli_stopped_at_once_exits_130_and_names_the_checkpoint_to_resume(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "pytorchrl.cli", "train", str(CONFIGS / "ppo" / "cartpole.yaml"), "--quiet", "--run-dir", str(run_dir),
        "run.target_steps=10000000", "run.stop_at_return=null", "run.checkpoint_every=1",
        "storage.num_steps=1024", "algorithm.num_epochs=100",  # rounds of seconds: the second signal comes within one
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 90
    # a whole first checkpoint (its step_N in place): `checkpoints/` appears before, with the
    # checkpoint's temporary sibling in it, and the second signal may land while it is written
    while not ckpt.list_checkpoints(run_dir / "checkpoints") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    lines = [proc.stderr.readline() for _ in range(2)]  # the run directory, then the notice that it is stopping
    assert "stopping at the end of this round" in lines[1]
    proc.send_signal(signal.SIGTERM)  # the second, once the first was seen (two pending at once would merge into one)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("pytorchrl: stopped at once") and f"--resume {run_dir}" in last and "Traceback" not in err
    newest = ckpt.load_newest_checkpoint(run_dir / "checkpoints")[0]
    assert str(newest) in last
    assert json.loads((run_dir / "summary.json").read_text())["stop_reason"] == "interrupted" and out == ""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_async_env_processes_leave_a_stop_signal_to_the_learner(tmp_path):
    """A terminal's Ctrl-C (SIGINT) and a stop sent to the whole process tree (SIGTERM: `ray job
    stop`, Slurm) reach the async vector env's processes too, here in the middle of a
    collection: they ignore both, so the learner finishes the round with them, then stops."""
    raw = {**TINY, "env": {**TINY["env"], "vectorization": "async", "num_envs": 2}}
    learner = Learner.from_config(from_dict(raw), run_dir=tmp_path / "run", progress=False)
    envs = learner.scheme.collection_workers.local_worker.envs
    step, steps = envs.step_arrays, [0]
    signalled: list = []  # the env processes sent the signals

    def stepping(actions):
        steps[0] += 1
        if steps[0] == 80:  # the third round's collection (32 steps a round), half way
            signalled.extend(multiprocessing.active_children())
            for child in signalled:
                os.kill(child.pid, signal.SIGINT)
                os.kill(child.pid, signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)
        return step(actions)

    envs.step_arrays = stepping
    try:
        summary = learner.train()
        assert len(signalled) == 2 and all(child.is_alive() for child in signalled)  # one process per env, both signalled, both alive
    finally:
        learner.close()
    assert summary["stop_reason"] == "interrupted" and (summary["env_steps"], summary["updates"]) == (192, 6)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_resume_without_snapshot_falls_back_to_a_reset(tmp_path):
    # a checkpoint of envs that cannot be snapshot (subprocess envs) resumes from a reset
    raw = {**TINY, "env": {**TINY["env"], "vectorization": "async", "num_envs": 2}, "run": {**TINY["run"], "target_steps": 64}}
    learner = Learner.from_config(from_dict(raw), run_dir=tmp_path / "run", progress=False)
    try:
        learner.train()
        worker = learner.scheme.collection_workers.local_worker
        assert worker.envs is not None and "snapshot" not in worker.envs.state_dict()
    finally:
        learner.close()
    again = Learner.resume(tmp_path / "run", ["run.target_steps=128"], progress=False)
    try:
        assert again.train()["env_steps"] == 128
    finally:
        again.close()


def _ray_worker_pids(root: int) -> set[int]:
    """Processes hosting pytorchrl's remote workers (Ray names them ``ray::_WorkerHost``) that
    descend from process ``root`` (the driver starts the raylet, which starts them): other Ray
    sessions on the machine, a test's own included, do not count."""
    parent, hosts = {}, set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if b"_WorkerHost" in (entry / "cmdline").read_bytes():
                    hosts.add(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    found = set()
    for pid in hosts:
        ancestor = pid
        while ancestor > 1 and ancestor != root:
            ancestor = parent.get(ancestor, 1)
        if ancestor == root:
            found.add(pid)
    return found


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc")
@pytest.mark.parametrize("group", [False, True], ids=["sigterm-to-the-driver", "ctrl-c-to-the-process-group"])
def test_a_stop_signal_writes_a_whole_round_checkpoint_and_leaves_no_worker_processes(tmp_path, group):
    """SIGTERM to the driver (a scheduler), or SIGINT to its whole process group (a terminal's
    Ctrl-C, which Ray's own processes receive too): the run ends its round, checkpoints and exits 0."""
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "pytorchrl.cli", "train", str(CONFIGS / "ppo" / "cartpole_sync_2workers.yaml"), "--quiet",
        "--run-dir", str(run_dir), "run.target_steps=10000000", "run.log_every=512", "run.stop_at_return=null",
        "scheme.ray.num_cpus=2", "scheme.col_worker_resources.num_cpus=0.5",
    ]
    # its own session, as a terminal's foreground job, with SIGINT as a terminal leaves it (a test
    # runner started in the background may ignore it, and that would be inherited)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        rows = (run_dir / "progress.csv").read_text().splitlines() if (run_dir / "progress.csv").is_file() else []
        if len(rows) >= 3:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    workers = _ray_worker_pids(proc.pid)
    assert len(workers) == 2  # the two collection workers are running
    if group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    assert "stopping at the end of this round" in err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["stop_reason"] == "interrupted"
    _path, state, meta = ckpt.load_newest_checkpoint(run_dir / "checkpoints")
    assert meta["env_steps"] == summary["env_steps"] and len(state["scheme"]["local_gradient_worker"]["collection"]["remote"]) == 2
    # whole rounds: 2 workers x 16 envs x 16 steps, then 20 epochs of one minibatch
    assert meta["env_steps"] % 512 == 0 and meta["updates"] == 20 * meta["env_steps"] // 512
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)  # no orphan worker processes


DQN_TINY = {
    "env": {"num_envs": 4, "num_test_envs": 2},
    "actor": {"hidden_sizes": [16], "activation": "relu"},
    "storage": {"num_steps": 16, "capacity": 2_000, "checkpoint_buffer": True},
    "algorithm": {"name": "dqn", "start_steps": 128, "minibatch_size": 32, "updates_per_step": 0.25, "target_update_interval": 8,
                  "prioritized_replay": True, "n_step": 3},
    "run": {"target_steps": 1_536, "log_every": 128, "eval_every": 512, "eval_episodes": 2, "checkpoint_every": 512,
            "keep_checkpoints": 5, "stop_at_return": None},
}
# every Rainbow part: noisy nets draw fresh noise from the torch generator each step, C51, dueling
RAINBOW_TINY = {**DQN_TINY, "algorithm": {**DQN_TINY["algorithm"], "rainbow": True, "num_atoms": 11, "v_min": -10.0, "v_max": 10.0}}
R2D2_TINY = {
    **DQN_TINY,
    "env": {"env_id": "pytorchrl/CartPoleNoVelocity-v1", "num_envs": 4, "num_test_envs": 2},
    "actor": {"hidden_sizes": [16], "activation": "relu", "recurrent": {"type": "lstm", "hidden_size": 16}},
    "storage": {"num_steps": 16, "capacity": 2_000, "checkpoint_buffer": True, "sequence_length": 8, "burn_in": 2},
    "algorithm": {**DQN_TINY["algorithm"], "minibatch_size": 8, "updates_per_step": 0.125, "double_q": True},
}
# RND: the predictor, its normalisation statistics and the intrinsic value head
RND_TINY = {
    "env": {"env_id": "pytorchrl/Chain-v0", "num_envs": 4, "num_test_envs": 1},
    "actor": {"hidden_sizes": [16]},
    "storage": {"num_steps": 16},
    "algorithm": {"name": "ppo", "num_epochs": 2, "minibatch_size": 32, "rnd": {"enabled": True, "features": 8, "hidden_sizes": [16]}},
    "run": DQN_TINY["run"],
}
# MPO: its duals, target policy and the action samples of its E-step
MPO_TINY = {
    **DQN_TINY,
    "env": {"env_id": "Pendulum-v1", "num_envs": 2, "num_test_envs": 2},
    "algorithm": {"name": "mpo", "start_steps": 128, "minibatch_size": 32, "updates_per_step": 0.25, "num_action_samples": 4},
}
# gSDE's noise matrices: actor state, redrawn mid-rollout (sde_sample_freq) and at each rollout's start
SAC_SDE_TINY = {
    **MPO_TINY,
    "actor": {"hidden_sizes": [16], "activation": "relu"},
    "algorithm": {"name": "sac", "start_steps": 128, "minibatch_size": 32, "updates_per_step": 0.25, "use_sde": True, "sde_sample_freq": 4,
                  "sde_log_std_init": -2.0},
}
# the model's normalisation statistics and the planners' draws from the acting streams
MPC_TINY = {
    "env": {"env_id": "Pendulum-v1", "num_envs": 2, "num_test_envs": 1},
    "actor": {"hidden_sizes": [16]},
    "storage": {"capacity": 2_000, "checkpoint_buffer": True},
    "algorithm": {"name": "mpc", "update_every": 64, "start_steps": 128, "minibatch_size": 32, "updates_per_step": 0.125, "ensemble_size": 2,
                  "num_candidates": 20, "horizon": 4, "cem_iterations": 2, "num_elites": 4},
    "run": {**DQN_TINY["run"], "eval_episodes": 1},
}
# PPOD: each env's replay in progress, the agent's best episodes and the replay draws' stream
PPOD_TINY = {
    **RND_TINY,
    "env": {"env_id": "pytorchrl/Chain-v0", "env_kwargs": {"length": 20}, "max_episode_steps": 40, "num_envs": 4, "num_test_envs": 1},
    "algorithm": {"name": "ppo", "num_epochs": 2, "minibatch_size": 32,
                  "demos": {"enabled": True, "path": str(CONFIGS / "ppo" / "demos" / "chain"), "rho": 0.4, "phi": 0.4, "min_return": 0.05}},
}
PPO_GRU_TINY = {
    **TINY_GRU,
    "run": {"target_steps": 1_536, "log_every": 128, "eval_every": 512, "eval_episodes": 2, "checkpoint_every": 512,
            "keep_checkpoints": 5, "stop_at_return": None},
}


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "raw", [DQN_TINY, RAINBOW_TINY, R2D2_TINY, PPO_GRU_TINY, RND_TINY, MPO_TINY, SAC_SDE_TINY, MPC_TINY, PPOD_TINY],
    ids=["dqn", "rainbow", "r2d2", "ppo-gru", "ppo-rnd", "mpo", "sac-gsde", "mpc", "ppod"],
)
def test_a_run_resumed_mid_way_equals_the_whole_run(tmp_path, raw):
    """Replay buffers (R2D2's windows and stream tails included), recurrent states carried by the
    workers between rollouts, random streams: a run resumed from its middle checkpoint ends
    exactly where the uninterrupted run ends."""
    whole = Learner.from_config(from_dict(raw), run_dir=tmp_path / "whole", progress=False)
    try:
        whole.train()
    finally:
        whole.close()
    resumed_dir = copy_up_to(tmp_path / "whole", tmp_path / "resumed", "step_1024")  # resume from the middle of the run
    final_whole = assert_resumes_to_the_whole_run(resumed_dir, tmp_path / "whole", "step_1536")
    assert ("replay_buffer" in final_whole["scheme"]["local_gradient_worker"]) == from_dict(raw).algorithm.replay


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("scheme", "merged"),
    [
        ({"num_col_workers": 2, "col_worker_resources": {"num_cpus": 0.5}}, lambda scheme: scheme["local_gradient_worker"]["collection"]["merged_statistics"]),
        ({"num_grad_workers": 2, "grad_worker_resources": {"num_cpus": 0.5}}, lambda scheme: scheme["merged_statistics"]),
    ],
    ids=["remote-collection-workers", "remote-gradient-workers"],
)
def test_a_run_with_remote_workers_merging_their_normalisation_resumed_mid_way_equals_the_whole_run(ray_session, tmp_path, scheme, merged):
    """Two remote collection workers, or two replicas collecting locally (their rounds in step),
    normalising observations and returns: the merged statistics and each worker's own go
    through the checkpoint, so the resumed run normalises, and learns, as the whole one."""
    raw = {
        **PPO_GRU_TINY, "actor": {"hidden_sizes": [16]}, "storage": {"num_steps": 32},
        "env": {"env_id": "Pendulum-v1", "num_envs": 2, "num_test_envs": 1, "normalize_obs": True, "normalize_reward": True},
        "scheme": scheme,
    }
    whole = Learner.from_config(from_dict(raw), run_dir=tmp_path / "whole", progress=False)
    try:
        whole.train()
    finally:
        whole.close()
    resumed_dir = copy_up_to(tmp_path / "whole", tmp_path / "resumed", "step_1024")
    final_whole = assert_resumes_to_the_whole_run(resumed_dir, tmp_path / "whole", "step_1536")
    # every worker's returns (one worker's would be about half), less the reset steps (one an episode of 200)
    assert 0.95 * 1536 < float(merged(final_whole["scheme"])["ret_rms"]["count"]) <= 1536.0001


SAC_TINY = {
    "env": {"env_id": "Pendulum-v1", "num_envs": 2, "num_test_envs": 1},
    "actor": {"hidden_sizes": [16]},
    "storage": {"num_steps": 16, "capacity": 2_000, "checkpoint_buffer": False},
    "algorithm": {"name": "sac", "start_steps": 128, "minibatch_size": 32, "updates_per_step": 0.25},
    "run": {"target_steps": 256, "log_every": 32, "eval_every": 0, "checkpoint_every": 256, "stop_at_return": None},
}


@pytest.mark.timeout(60)
def test_a_run_resumed_without_its_replay_buffer_refills_it_with_its_policy(tmp_path):
    """Without ``storage.checkpoint_buffer`` the buffer starts empty again: the resumed run acts
    with its trained policy (not uniformly at random, as a fresh run's first ``start_steps`` do) and
    takes its next gradient step once the buffer holds ``start_steps`` again."""
    first = Learner.from_config(from_dict(SAC_TINY), run_dir=tmp_path, progress=False)
    try:
        first.train()
        updates = first.updates
        assert updates > 0 and not bool(first.scheme.algorithm.actor.uniform)
    finally:
        first.close()
    resumed = Learner.resume(tmp_path, ["run.target_steps=512"], progress=False)
    try:
        actor = resumed.scheme.algorithm.actor
        assert resumed.env_steps == 256 and not bool(actor.uniform)
        seen = []
        while resumed.env_steps < 512:
            resumed.step()
            seen.append((resumed.env_steps, resumed.updates, bool(actor.uniform)))
    finally:
        resumed.close()
    assert not any(uniform for _, _, uniform in seen)
    # the refill (128 transitions) earns no gradient step; the rest of the run learns
    assert all(n == updates for steps, n, _ in seen if steps <= 256 + 128 - 32)
    assert seen[-1][1] > updates


@pytest.mark.parametrize(
    ("env", "target_steps", "override", "included"),
    [
        ("Pendulum-v1", 100_000, None, True),  # 100k x 3 float32: 1.2 MB
        ("Pendulum-v1", 100_000, False, False),
        ("atari", 100_000, None, False),  # 100k stacked frames before the run ends: 2.8 GB
        ("atari", 100_000, True, True),
        ("Humanoid-v5", 300_000, None, True),  # the run ends at 300k x 348 float32: 0.42 GB
        ("Humanoid-v5", 1_000_000, None, False),  # the 1M buffer fills: 1.39 GB
        ("Humanoid-v5", 5_000_000, None, False),
    ],
)
def test_the_replay_buffer_goes_into_checkpoints_when_what_it_holds_in_the_run_is_small_or_asked_for(env, target_steps, override, included):
    from pytorchrl.utils.memory import checkpoints_buffer

    if env == "atari":
        space, capacity = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), 1_000_000
    else:
        space = gym.spaces.Box(-1.0, 1.0, (348 if env == "Humanoid-v5" else 3,), np.float32)
        capacity = 1_000_000 if env == "Humanoid-v5" else 100_000
    raw = {
        "algorithm": {"name": "dqn" if env == "atari" else "sac"},
        "storage": {"capacity": capacity},
        "run": {"target_steps": target_steps},
    }
    if override is not None:
        raw["storage"]["checkpoint_buffer"] = override
    assert checkpoints_buffer(from_dict(raw), space) is included


def test_numpy_state_goes_through_a_checkpoint_with_its_shapes_and_dtypes(tmp_path):
    """Workers without torch hold numpy state; checkpoints store it as tensors and give it back
    with the same shapes (a 0-d running mean stays 0-d), dtypes and values."""
    from pytorchrl.utils.arrays import to_arrays

    state = {
        "mean": np.array(-313.7178), "counts": np.arange(3, dtype=np.int32), "flags": np.array([True, False]),
        "strided": np.arange(12.0).reshape(3, 4)[:, ::2], "nested": [{"x": np.float32(2.5), "name": "a"}],
    }
    ckpt.save_checkpoint(tmp_path / "c", {"state": state}, {})
    back = to_arrays(ckpt.load_checkpoint(tmp_path / "c")[0]["state"])
    for key in ("mean", "counts", "flags", "strided"):
        assert back[key].shape == state[key].shape and back[key].dtype == state[key].dtype, key
        assert np.array_equal(back[key], state[key]), key
    assert back["nested"] == [{"x": 2.5, "name": "a"}]
