"""Central inference as a scheme mode (``scheme.inference: central``): Ray inference servers act
for remote collection workers that hold no network.

Real Ray actors on the session's 2-CPU local Ray; workers and servers reserve a tenth of a CPU
so that they all fit.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import threading

import pytest
import ray
import torch

from pytorchrl.cli import main
from pytorchrl.config import from_dict
from pytorchrl.learner import Learner
from pytorchrl.scheme.base import compression
from pytorchrl.scheme.base.inference_servers import METRICS, call_surviving

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# 8 envs per worker: every request is a multiple of 4 rows, which the core found bitwise in any batch
SMALL = {
    "env": {"env_id": "CartPole-v1", "num_envs": 8},
    "storage": {"num_steps": 16},
    "algorithm": {"name": "ppo", "num_epochs": 2, "minibatch_size": 64, "lr": 1e-3},
    "run": {"seed": 3, "target_steps": 10_000, "eval_every": 0},
}
LOCAL = {"num_col_workers": 2, "col_worker_resources": {"num_cpus": 0.1}}
CENTRAL = {**LOCAL, "inference": "central", "inference_server": {"num_cpus": 0.1}}
#: 2 workers x 8 envs x 16 steps = 256 samples a round, 2 epochs of 4 minibatches: 8 updates
ROUND_UPDATES = 8


def assert_same_run(first: Learner, second: Learner) -> None:
    """The two learners' weights are bitwise equal and they saw the same episodes."""
    a, b = first.scheme.algorithm.get_weights(), second.scheme.algorithm.get_weights()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert first.episodes == second.episodes


def train(scheme: dict, updates: int, **sections: dict) -> tuple[Learner, list[dict]]:
    raw = {**SMALL, **sections, "scheme": scheme}
    learner = Learner.from_config(from_dict(raw), progress=False)
    infos = [learner.step() for _ in range(updates)]
    return learner, infos


@pytest.mark.parametrize("transport", ["auto", "ray"])
def test_central_collects_what_local_collects_and_reaches_the_same_weights(ray_session, transport):
    """Same seed, two remote workers: acting on a server changes where, not what, whether the
    workers reach it over the same-node socket (auto, on this one-node cluster) or Ray calls."""
    local, _ = train(LOCAL, 3 * ROUND_UPDATES)
    central, infos = train({**CENTRAL, "inference_server": {**CENTRAL["inference_server"], "transport": transport}}, 3 * ROUND_UPDATES)
    try:
        assert local.env_steps == central.env_steps == 3 * 2 * 8 * 16
        assert_same_run(local, central)
        assert all(key in infos[0] for key in METRICS)
        assert infos[0]["inference_batch_mean"] >= 8
        socket_calls = ray.get(central.scheme.inference.handles[0].socket_calls.remote())
        assert socket_calls["tcp"] == 0  # one node
        assert socket_calls["unix"] > 3 * 2 * 16 if transport == "auto" else socket_calls["unix"] == 0  # every step of every rollout
    finally:
        local.close()
        central.close()


R2D2 = {  # an LSTM Q-network over windows of stored states: the server keeps each env's state
    "env": {"env_id": "pytorchrl/CartPoleNoVelocity-v1", "num_envs": 8},
    "actor": {"hidden_sizes": [16], "recurrent": {"type": "lstm", "hidden_size": 16}},
    "storage": {"capacity": 4096, "sequence_length": 8, "burn_in": 2},
    "algorithm": {"name": "dqn", "n_step": 3, "double_q": True, "prioritized_replay": True, "minibatch_size": 8,
                  "update_every": 16, "updates_per_step": 0.125, "start_steps": 256, "target_update_interval": 8},
}
APEX = {  # per-worker epsilon: the server runs one policy call per exploration rate in a batch
    "env": {"env_id": "CartPole-v1", "num_envs": 8},
    "storage": {"capacity": 4096},
    "algorithm": {"name": "dqn", "exploration_initial_eps": 0.4, "exploration_final_eps": 0.4, "apex_epsilon_alpha": 7.0,
                  "prioritized_replay": True, "actor_priorities": True, "n_step": 3, "minibatch_size": 16,
                  "update_every": 16, "updates_per_step": 0.25, "start_steps": 256, "target_update_interval": 8},
}


@pytest.mark.parametrize("sections", [R2D2, APEX], ids=["r2d2", "apex"])
def test_recurrent_and_apex_replay_layouts_learn_centrally_as_locally(ray_session, sections):
    """Through Ray, for the replay layouts: the recurrent states the server keeps per (worker,
    env), and one policy call per epsilon group, give the data and weights of local inference."""
    local, _ = train(LOCAL, 12, **sections)
    central, _ = train(CENTRAL, 12, **sections)
    try:
        assert local.env_steps == central.env_steps > 256  # past start_steps: the learner has trained
        assert central.scheme.algorithm.version == local.scheme.algorithm.version > 0
        assert_same_run(local, central)
    finally:
        local.close()
        central.close()


def test_two_central_runs_of_one_seed_are_identical(ray_session):
    first, _ = train(CENTRAL, 2 * ROUND_UPDATES)
    second, _ = train(CENTRAL, 2 * ROUND_UPDATES)
    try:
        assert_same_run(first, second)
    finally:
        first.close()
        second.close()


def test_remote_workers_act_with_the_servers_weights_of_the_round_and_hold_no_torch(ray_session):
    """The servers got the round's weights, and the master has moved on by one update since; the
    remote collection workers never imported torch (thin workers: numpy only)."""
    learner = Learner.from_config(from_dict({**SMALL, "scheme": CENTRAL}), progress=False)
    try:
        start = learner.scheme.algorithm.get_weights(acting=True)
        learner.step()
        col = learner.scheme.collection_workers
        assert type(col.local_worker.policy).__name__ == "LocalPolicy"  # evaluation keeps a local copy
        for name in learner.scheme.inference.names:  # synchronous rounds hold the weights: an MLP scores its rollouts at their end
            assert compression.unpack(call_surviving(name, lambda h: h.call.remote("array_spec"), 30)) == {"scores_while_acting": False}
        assert col.thin and col.workers.ask_all("imports_torch") == [False, False]
        for name in learner.scheme.inference.names:
            weights = compression.unpack(call_surviving(name, lambda h: h.call.remote("get_weights"), 30))
            assert all(torch.equal(weights[k], start[k]) for k in start)
        moved = learner.scheme.algorithm.get_weights(acting=True)
        assert not all(torch.equal(moved[k], start[k]) for k in start)
        # Ray starts its workers at niceness 15; a server takes the driver's where it may (as root, CI)
        driver, may = os.getpriority(os.PRIO_PROCESS, 0), os.geteuid() == 0
        for name in learner.scheme.inference.names:
            reniced, threads = call_surviving(name, lambda h: h.niceness.remote(), 30)
            assert reniced or not may
            assert threads == {driver} if reniced else max(threads) > driver
    finally:
        learner.close()


def test_weight_sync_every_holds_the_servers_weights_back_and_policy_lag_counts_it(ray_session):
    """weight_sync_every 16 with 8 updates a round: the servers get weights for rounds 1 and 3
    only, so round 2 acts with version 0 at version 8."""
    scheme = {**CENTRAL, "inference_server": {"num_cpus": 0.1, "weight_sync_every": 2 * ROUND_UPDATES}}
    learner, infos = train(scheme, 3 * ROUND_UPDATES)
    learner.close()
    lags = [i["policy_lag_mean"] for i in infos if "policy_lag_mean" in i]
    assert lags == [0, ROUND_UPDATES, 0]


def test_asynchronous_collection_trains_and_logs_policy_lag(ray_session):
    """Asynchronous collection changes the servers' weights under rollouts in progress, so the
    workers score each step as they act (the MLP actor would score its rollout when it ends,
    with whatever weights the servers hold then: log-probabilities of weights that never acted)."""
    scheme = {**CENTRAL, "col_communication": "asynchronous"}
    algorithm = {"name": "appo", "num_epochs": 1, "minibatch_size": 128, "lr": 1e-3}
    learner, infos = train(scheme, 10, algorithm=algorithm)
    try:
        for name in learner.scheme.inference.names:
            spec = compression.unpack(call_surviving(name, lambda h: h.call.remote("array_spec"), 30))
            assert spec == {"scores_while_acting": True}
        assert learner.scheme.algorithm.version == 10
        lags = [i["policy_lag_mean"] for i in infos if "policy_lag_mean" in i]
        assert lags and max(lags) > 0  # the servers' weights changed under some rollout in progress
        assert "policy_lag_mean" in learner.metrics()
    finally:
        learner.close()


def test_a_killed_server_is_started_again_with_the_newest_weights_and_the_run_goes_on(ray_session, recwarn):
    """SIGKILL the server between rounds, then again while its workers wait on it: Ray starts it
    again, it takes the round's weights from the box before it answers, the requests it was
    serving are sent again, and the restarts count as worker restarts and are told."""
    env = {"env_id": "benchmarks.envs:slow_cartpole", "num_envs": 8, "env_kwargs": {"step_sleep_s": 0.004}}  # ~0.5 s rounds
    # The restarted server imports torch before it answers: more than the default 60 s of
    # worker_timeout_s on a loaded 2-core machine, where the waiting workers would then be
    # counted as restarted too. Their own timeout is another fault (tests/scheme/test_faults.py).
    scheme = {**CENTRAL, "worker_timeout_s": 240.0}
    learner = Learner.from_config(from_dict({**SMALL, "env": env, "scheme": scheme}), progress=False)
    algorithm, server = learner.scheme.algorithm, learner.scheme.inference.handles[0]

    def kill() -> None:
        os.kill(ray.get(server.pid.remote()), signal.SIGKILL)

    def round_with_server_weights_checked() -> dict:
        acting = algorithm.get_weights(acting=True)
        info = learner.step()  # a round's first step: new weights to the servers, then a whole collection
        served = ray.get(server.call.remote("get_weights"))
        assert all(torch.equal(served[k], acting[k]) for k in acting)
        infos.append(info)
        infos.extend(learner.step() for _ in range(ROUND_UPDATES - 1))
        return info

    infos: list[dict] = []
    try:
        round_with_server_weights_checked()
        first_pid = ray.get(server.pid.remote())
        kill()  # between rounds
        round_with_server_weights_checked()
        killer = threading.Timer(0.25, kill)  # mid-collection, with requests waiting on it
        killer.start()
        round_with_server_weights_checked()
        killer.join()
        assert ray.get(server.pid.remote()) != first_pid
        told = [str(w.message) for w in recwarn.list if "inference server" in str(w.message)]
        assert told and all("died and Ray started it again" in m for m in told), told
        assert sum(i.get("worker_restarts", 0) for i in infos) == 2
        assert learner.env_steps == 3 * 2 * 8 * 16  # every round collected whole
        assert all(i["lost_batches"] == 0 for i in infos if "lost_batches" in i)
    finally:
        learner.close()


def _bad(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("pytorchrl: error: ") and "Traceback" not in err
    return err


CARTPOLE = "configs/ppo/cartpole.yaml"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["scheme.inference=central"], "'scheme.inference' = 'central' needs remote collection workers"),
        (["scheme.inference=central", "scheme.num_col_workers=1", "scheme.inference_server.num_servers=2"],
         "'scheme.inference_server.num_servers' = 2 is more than scheme.num_col_workers = 1"),
        (["scheme.inference=central", "scheme.num_col_workers=1", "scheme.inference_server.max_batch_size=0"],
         "'scheme.inference_server.max_batch_size' = 0 is out of range"),
        (["scheme.inference=central", "scheme.num_col_workers=1", "scheme.inference_server.max_wait_ms=-1"],
         "'scheme.inference_server.max_wait_ms' = -1.0 is out of range"),
        (["scheme.inference=central", "scheme.num_col_workers=1", "scheme.num_grad_workers=1"], "central inference serves the collection workers of one learner; set scheme.num_grad_workers = 0"),
        (["scheme.inference=centre"], "'scheme.inference' = 'centre' is not allowed"),
        (["scheme.inference=central", "scheme.num_col_workers=1", "scheme.col_communication=asynchronous", "scheme.inference_server.weight_sync_every=4",
          "scheme.max_policy_lag=2"], "'scheme.max_policy_lag' = 2 is below scheme.inference_server.weight_sync_every - 1 = 3"),
        (["scheme.inference=central", "scheme.num_col_workers=1", "scheme.inference_server.num_cpus=64"],
         "one inference server asks for 64 CPU"),
    ],
)
def test_bad_central_input_exits_2_with_one_line(capsys, tmp_path, args, needle):
    err = _bad(capsys, ["train", CARTPOLE, *args, "--run-dir", str(tmp_path / "r"), "--quiet"])
    assert needle in err


@pytest.mark.parametrize(
    ("config", "override", "needle"),
    [
        ("configs/dqn/cartpole.yaml", "algorithm.noisy_nets=true", "noisy"),
        ("configs/ddpg/pendulum.yaml", "algorithm.exploration_noise_type=ou", "ornstein"),
    ],
)
def test_an_actor_the_server_cannot_serve_is_refused_at_scheme_build(capsys, tmp_path, config, override, needle):
    args = ["scheme.inference=central", "scheme.num_col_workers=1", override]
    err = _bad(capsys, ["train", config, *args, "--run-dir", str(tmp_path / "r"), "--quiet"])
    assert "'scheme.inference' = 'central' cannot serve this actor" in err
    assert needle.lower() in err.lower()


def test_a_central_runs_progress_csv_has_the_inference_columns(ray_session, capsys, tmp_path):
    run_dir = tmp_path / "run"
    overrides = [f"scheme.{k}={v}" for k, v in {"inference": "central", "num_col_workers": 2, "col_worker_resources.num_cpus": 0.1,
                                                   "inference_server.num_cpus": 0.1}.items()]
    code = main(["train", CARTPOLE, *overrides, "run.target_steps=2048", "run.log_every=512", "run.eval_every=0",
                 "--run-dir", str(run_dir), "--quiet"])
    assert code == 0, capsys.readouterr().err
    json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    with open(run_dir / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for key in METRICS:
        assert all(row[key] != "" for row in rows), key
    assert float(rows[-1]["inference_batch_mean"]) >= 16


@pytest.mark.timeout(240)
def test_a_central_run_resumed_mid_way_ends_where_the_whole_run_ends(ray_session, tmp_path):
    """The thin workers' envs, recorders and acting streams (numpy, tensors in the checkpoint)
    go back into new workers: the resumed run ends with the whole run's weights."""
    run = {**SMALL["run"], "target_steps": 3 * 256, "checkpoint_every": 256, "keep_checkpoints": 5, "log_every": 256}
    whole = Learner.from_config(from_dict({**SMALL, "run": run, "scheme": CENTRAL}), run_dir=tmp_path / "whole", progress=False)
    try:
        whole.train()
    finally:
        whole.close()
    resumed_dir = tmp_path / "resumed"
    (resumed_dir / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "progress.csv"):
        (resumed_dir / name).write_bytes((tmp_path / "whole" / name).read_bytes())
    shutil.copytree(tmp_path / "whole" / "checkpoints" / "step_512", resumed_dir / "checkpoints" / "step_512")
    resumed = Learner.resume(resumed_dir, progress=False)
    try:
        assert resumed.scheme.collection_workers.thin
        resumed.train()
    finally:
        resumed.close()
    assert (resumed.env_steps, resumed.episodes) == (whole.env_steps, whole.episodes)
    a, b = whole.scheme.algorithm.get_weights(), resumed.scheme.algorithm.get_weights()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_live_central_run_that_loads_an_older_checkpoint_acts_with_its_weights(ray_session, tmp_path):
    """Loading a checkpoint of an earlier version into a running learner (a rollback) sends the
    loaded weights to the servers at the next round, though their version is below the servers'."""
    learner = Learner.from_config(from_dict({**SMALL, "scheme": CENTRAL}), progress=False)
    try:
        for _ in range(ROUND_UPDATES):
            learner.step()
        path = learner.checkpoint(tmp_path / "round1")
        for _ in range(2 * ROUND_UPDATES):
            learner.step()
        learner.load_checkpoint(path)
        acting = learner.scheme.algorithm.get_weights(acting=True)
        info = learner.step()
        for name in learner.scheme.inference.names:
            served = compression.unpack(call_surviving(name, lambda h: h.call.remote("get_weights"), 30))
            assert all(torch.equal(served[k], acting[k]) for k in acting)
        assert info["policy_lags"] == [0, 0]  # collected with the loaded version, not one from its future
    finally:
        learner.close()


def test_a_scheme_refused_after_its_workers_started_leaves_no_actor_behind(ray_session):
    """Parts that do not fit (an IMPALA algorithm on PPO's storage) are refused once the servers
    and the remote collection workers are up: they end with the error, as a notebook that tries
    again needs (they would hold their CPUs, and the next try would wait for them)."""
    import time

    from pytorchrl import GAEBuffer, OnPolicyActor, Scheme, VecEnv
    from pytorchrl.agent.algorithms import ALGORITHMS
    from pytorchrl.utils.errors import InputError

    def ours() -> list[str]:
        return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("pytorchrl-inference-")]

    time.sleep(1.0)  # actors of the tests before give their CPUs back
    before, servers_before = ray.available_resources().get("CPU", 0.0), ours()
    env_factory, obs_space, action_space = VecEnv.create_factory("CartPole-v1", num_envs=2, seed=0)
    config = from_dict({"scheme": CENTRAL}).scheme
    with pytest.raises(InputError, match=r"IMPALA takes a storage made by VTraceBuffer\.create_factory"):
        Scheme(
            env_factory=env_factory, actor_factory=OnPolicyActor.create_factory(obs_space, action_space),
            algo_factory=ALGORITHMS["impala"].create_factory(),
            storage_factory=GAEBuffer.create_factory(num_steps=16, num_envs=2, obs_shape=(4,), action_shape=(), discrete=True),
            config=config,
        )
    assert ours() == servers_before
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0.0) < before - 1e-6 and time.monotonic() < deadline:
        time.sleep(0.2)  # Ray frees a killed actor's CPUs within moments
    assert ray.available_resources().get("CPU", 0.0) >= before - 1e-6


@pytest.mark.parametrize(("inference", "device", "num_servers", "num_gpus", "expected"), [
    ("central", "cuda", 1, None, 0.5),  # run.device: cuda puts the server on the learner's GPU
    ("central", "cuda:1", 2, None, 0.25),
    ("central", "cpu", 1, None, 0.0),
    ("central", "auto", 1, None, 0.5 if torch.cuda.is_available() else 0.0),  # run.device unresolved (tune's trials)
    ("local", "cuda", 1, None, 0.0),  # no servers to place
    ("central", "cuda", 1, 0.0, 0.0),  # set by the user: kept (the server acts on the CPU)
    ("central", "cpu", 1, 1.0, 1.0),
])
def test_the_servers_gpu_share_follows_the_learners_device_unless_set(inference, device, num_servers, num_gpus, expected):
    from pytorchrl.scheme.scheme import remote_worker_groups, with_server_gpus

    config = from_dict({"scheme": {"inference": inference, "num_col_workers": 2,
                                   "inference_server": {"num_servers": num_servers, "num_gpus": num_gpus}}}).scheme
    resolved = with_server_gpus(config, device)
    assert resolved.inference_server.num_gpus == expected
    servers = remote_worker_groups(resolved)[-1]
    assert servers[2]["num_gpus"] == expected and servers[1] == (num_servers if inference == "central" else 0)
