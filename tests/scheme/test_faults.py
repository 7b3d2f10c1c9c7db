"""Fault tolerance of remote collection workers, on real Ray actors with injected faults
(``benchmarks.envs:crashing_cartpole``): dead workers are replaced, lost rollouts counted, and the
run goes on (or, when it cannot, stops with one clear line)."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time

import pytest
import torch

from benchmarks.envs import EnvCrash, crashing_cartpole
from benchmarks.tools import kill_collection_workers
from pytorchrl.config import ConfigError, from_dict
from pytorchrl.learner import Learner
from pytorchrl.utils.errors import InputError, WorkerFailure

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def crashing_learner(env_kwargs: dict, scheme: dict, *, target_steps: int = 1_536, seed: int = 1, env: dict | None = None) -> Learner:
    raw = {
        # evaluation runs in this process: its envs must not crash it
        "env": {"env_id": "benchmarks.envs:crashing_cartpole", "num_envs": 4, "env_kwargs": env_kwargs, "eval_env_kwargs": {}, **(env or {})},
        "storage": {"num_steps": 32},
        "algorithm": {"name": "ppo", "num_epochs": 1, "minibatch_size": 128},
        "run": {"seed": seed, "target_steps": target_steps, "eval_every": 0},
        "scheme": {
            "num_col_workers": 2, "col_worker_resources": {"num_cpus": 0.1}, "worker_restart_delay_s": 0.0,
            "max_worker_restarts": 50, **scheme,
        },
    }
    return Learner.from_config(from_dict(raw), progress=False)


def train(learner: Learner) -> dict:
    try:
        return learner.train()
    finally:
        learner.close()


@pytest.mark.parametrize("crash_mode", ["exit", "exception"])
@pytest.mark.parametrize("communication", ["synchronous", "asynchronous"])
def test_dead_workers_are_replaced_and_training_completes(ray_session, crash_mode, communication):
    # every worker generation dies in its 4th rollout (32 steps each); the budget needs 12 rollouts
    learner = crashing_learner({"crash_after_steps": 100, "crash_mode": crash_mode}, {"col_communication": communication})
    try:
        summary = learner.train()
        places = learner.scheme.num_collection_workers
    finally:
        learner.close()
    assert summary["env_steps"] >= 1_536  # the budget was reached
    assert learner.worker_restarts >= 1
    # each death loses exactly the rollout that worker was collecting, and nothing else
    assert learner.lost_batches == learner.worker_restarts
    # replacements start in the background: at the end both places are filled, active or starting
    assert 1 <= learner.healthy_workers <= 2 and places == 2
    assert learner.metrics()["worker_restarts"] == learner.worker_restarts


def test_restarts_used_up_stop_the_run_with_one_line(ray_session):
    learner = crashing_learner({"p_crash": 1.0, "crash_mode": "exception"}, {"max_worker_restarts": 2})
    with pytest.raises(WorkerFailure, match=r"remote collection worker \d died \(EnvCrash: .*injected fault\)\) and scheme.max_worker_restarts = 2"):
        train(learner)
    assert learner.scheme is not None


def test_ignoring_failures_goes_on_with_fewer_workers(ray_session):
    learner = crashing_learner({}, {"ignore_worker_failures": True, "col_communication": "asynchronous"})
    try:
        learner.step()
        workers = learner.scheme.collection_workers.workers
        ray_session.kill(workers.remote_workers[0])
        for _ in range(8):
            learner.step()
        assert learner.healthy_workers == 1 and len(workers.remote_workers) == 1
        assert learner.worker_restarts == 0
        assert learner.lost_batches <= 1  # at most the rollout the killed worker had under way
    finally:
        learner.close()


def test_a_stalled_worker_is_treated_as_dead(ray_session):
    # one worker, 4 rollouts of 32 steps: generation 0 hangs in its 4th rollout (step 100), is
    # killed after 3 s, and its replacement collects the 4th rollout
    learner = crashing_learner(
        {"stall_after_steps": 100, "stall_s": 120.0}, {"num_col_workers": 1, "worker_timeout_s": 3.0}, target_steps=512
    )
    summary = train(learner)
    assert summary["env_steps"] == 512
    assert learner.worker_restarts == 1 and learner.lost_batches == 1


def test_crashing_env_is_reproducible_and_checks_its_arguments():
    env = crashing_cartpole(p_crash=0.05)
    crashes = []
    for _ in range(2):
        env.reset(seed=7)
        for step in range(1_000):
            try:
                _, _, terminated, truncated, _ = env.step(step % 2)
            except EnvCrash:
                crashes.append(step)
                break
            if terminated or truncated:
                env.reset()
    assert len(crashes) == 2 and crashes[0] == crashes[1]  # seeded: the same step both times
    with pytest.raises(ValueError, match="crash_mode = 'segfault' is not allowed"):
        crashing_cartpole(crash_mode="segfault")


def test_cli_reports_lost_workers_in_one_line(ray_session, pytorchrl_cmd, tmp_path):
    cmd = [
        *pytorchrl_cmd, "train", "configs/ppo/cartpole.yaml", "--quiet", "--run-dir", str(tmp_path / "run"),
        "env.env_id=benchmarks.envs:crashing_cartpole", "env.env_kwargs={p_crash: 1.0}", "env.eval_env_kwargs={}", "env.num_envs=2",
        "scheme.num_col_workers=1", "scheme.max_worker_restarts=1", "scheme.worker_restart_delay_s=0",
        "scheme.col_worker_resources.num_cpus=0.1", "scheme.ray.num_cpus=1",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("pytorchrl: error: remote collection worker 1 died (EnvCrash:")
    assert "scheme.max_worker_restarts = 1" in last and "Traceback" not in proc.stderr



def test_failing_envs_are_recreated_inside_their_worker(ray_session):
    # every env raises at the 40th step of its life: with restart_failed_envs the worker
    # recreates it and goes on; no worker is replaced and no rollout lost
    learner = crashing_learner(
        {"crash_after_steps": 40, "crash_mode": "exception"}, {"num_col_workers": 1}, target_steps=512,
        env={"restart_failed_envs": True},
    )
    summary = train(learner)
    assert summary["env_steps"] == 512
    assert learner.worker_restarts == 0 and learner.lost_batches == 0
    # 4 envs x 128 steps each, and each env (the new ones too) fails at its 40th step: 3 times
    assert summary["env_restarts"] == learner.env_restarts == 4 * 3


@pytest.mark.parametrize(
    ("communication", "inference"), [("synchronous", "local"), ("asynchronous", "local"), ("asynchronous", "central")]
)
def test_collection_workers_join_and_leave_while_training_runs(ray_session, communication, inference):
    # 1 -> 3 -> 1 remote workers, resized from another thread while the main thread trains
    central = {"inference": "central", "inference_server": {"num_cpus": 0.1}} if inference == "central" else {}
    learner = crashing_learner({}, {"num_col_workers": 1, "col_communication": communication, **central}, target_steps=10**9)
    scheme, stop, seen = learner.scheme, threading.Event(), []

    def after(steps: int) -> None:  # wait until training has collected `steps` more env steps
        start = learner.env_steps
        while learner.env_steps < start + steps and not stop.is_set():
            time.sleep(0.02)

    def resize() -> None:
        try:
            after(256)
            scheme.add_collection_workers(2)
            assert scheme.num_collection_workers == 3
            deadline = time.monotonic() + 120
            while learner.healthy_workers != 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            after(1_024)  # three workers collect together for a while
            seen.append(learner.healthy_workers)
            scheme.remove_collection_workers(2)
            after(1_024)
            seen.append(learner.healthy_workers)
        finally:
            stop.set()

    thread = threading.Thread(target=resize)
    thread.start()
    try:
        while not stop.is_set():
            learner.step()
        thread.join(timeout=200)
        assert seen == [3, 1] and len(scheme.collection_workers.workers.remote_workers) == 1
        with pytest.raises(ValueError, match="cannot remove 1 of 1 remote collection workers: at least one must stay"):
            scheme.remove_collection_workers(1)
    finally:
        stop.set()
        learner.close()
    assert learner.worker_restarts == 0 and learner.lost_batches == 0 and learner.updates > 0
    assert scheme.collection_workers.thin == (inference == "central")


def _per_replica(learner: Learner) -> list[int]:
    """Each remote gradient worker's remote collection workers (active and starting)."""
    replicas = learner.scheme.grad_workers.workers
    return [replicas.get(replicas.call(w, "num_collection_workers")) for w in replicas.remote_workers]


def test_a_checkpoint_keeps_the_workers_added_while_training_and_resumes_exactly_with_them(ray_session, tmp_path):
    """Two workers added mid-run and one taken out: the checkpoint holds which workers ran
    (indices 1 and 2, the next one added 4), a run resumed from it under the same config starts
    them again and pairs each with its state, and trains on as the run that wrote it did (it
    once resumed with the config's one worker, the added one's state dropped without a word)."""
    def make() -> Learner:
        return crashing_learner({}, {"num_col_workers": 1}, target_steps=10**9)

    whole = make()
    ws = whole.scheme.collection_workers.workers
    deadline = time.monotonic() + 120
    try:
        whole.step()
        whole.scheme.add_collection_workers(2)
        whole.scheme.remove_collection_workers(1)  # the newest, index 3
        while (len(ws.remote_workers) < 2 or not whole.round_end) and time.monotonic() < deadline:
            whole.step()
        path = whole.checkpoint(tmp_path / "checkpoint")
        layout = ws.layout()
        for _ in range(3):
            whole.step()
        expected = whole.scheme.algorithm.get_weights()
    finally:
        whole.close()
    assert layout == {"indices": [1, 2], "next_index": 4, "configured": 1}
    resumed = make()
    try:
        resumed.load_checkpoint(path)
        again = resumed.scheme.collection_workers.workers
        assert again.layout() == layout and [again.index_of(w) for w in again.remote_workers] == [1, 2]
        for _ in range(3):
            resumed.step()
        weights = resumed.scheme.algorithm.get_weights()
    finally:
        resumed.close()
    assert all(torch.equal(weights[k], expected[k]) for k in expected)


@contextlib.contextmanager
def _resumed(make, path):
    """A learner made by ``make`` that loaded the checkpoint ``path``; it takes a step after the block (it trains on)."""
    learner = make()
    try:
        learner.load_checkpoint(path)
        yield learner
        learner.step()
    finally:
        learner.close()


def test_a_worker_lost_while_failures_are_ignored_is_back_after_a_resume(ray_session, tmp_path):
    """``scheme.ignore_worker_failures`` goes on with fewer workers; a resume starts the run's
    processes anew, so its lost worker is back (the checkpoint's layout holds the set's members,
    not its survivors: a resume once ended the fresh worker of that index)."""
    def make() -> Learner:
        return crashing_learner({}, {"ignore_worker_failures": True, "col_communication": "asynchronous"}, target_steps=10**9)

    first = make()
    workers = first.scheme.collection_workers.workers
    deadline = time.monotonic() + 120
    try:
        first.step()
        ray_session.kill(workers.remote_workers[0])
        while (first.healthy_workers != 1 or not first.round_end) and time.monotonic() < deadline:
            first.step()
        path = first.checkpoint(tmp_path / "checkpoint")
    finally:
        first.close()
    with _resumed(make, path) as resumed:
        again = resumed.scheme.collection_workers.workers
        assert sorted(again.index_of(w) for w in again.remote_workers) == [1, 2] and again.layout()["indices"] == [1, 2]


def test_a_resumed_run_keeps_the_collection_workers_added_to_every_gradient_worker(ray_session, tmp_path):
    """Remote gradient workers: the collection worker added to each replica is in the
    checkpoint, each replica of the resumed run starts it again, and a replica that joins
    later is resized alike (``collectors_added`` is kept)."""
    def make() -> Learner:
        return crashing_learner({}, {"num_grad_workers": 2, "num_col_workers": 1, "grad_worker_resources": {"num_cpus": 0.1}}, target_steps=10**9)

    first = make()
    try:
        first.step()
        first.scheme.add_collection_workers(1)
        path = first.checkpoint(tmp_path / "checkpoint")
    finally:
        first.close()
    with _resumed(make, path) as resumed:
        assert _per_replica(resumed) == [2, 2] and resumed.scheme.grad_workers.collectors_added == 1


def test_taking_out_more_workers_than_a_replica_holds_is_refused_and_kills_no_replica(ray_session):
    """A replica holding fewer collection workers than the others (one lost under
    ``scheme.ignore_worker_failures`` leaves it so; here one is taken out of it directly):
    a removal that would leave it none is refused with one line, checked against the fewest a
    replica holds. It was checked against the nominal count, and the replica's refusal, raised
    inside it, was taken for its death: the replica was killed without a word or a restart."""
    learner = crashing_learner(
        {}, {"num_grad_workers": 2, "num_col_workers": 2, "grad_worker_resources": {"num_cpus": 0.1}}, target_steps=10**9,
    )
    replicas = learner.scheme.grad_workers.workers
    try:
        learner.step()
        replicas.get(replicas.call(replicas.remote_workers[0], "remove_collection_workers", 1))
        with pytest.raises(ValueError, match=r"^cannot remove 1 of 1 remote collection workers: at least one must stay"):
            learner.scheme.remove_collection_workers(1)
        assert _per_replica(learner) == [1, 2] and len(replicas.remote_workers) == 2
        learner.step()
    finally:
        learner.close()
    assert learner.worker_restarts == 0


def test_collection_workers_the_cluster_cannot_place_are_refused_in_one_line(ray_session):
    """Added workers that could never be placed (the start-time check, over the workers running
    and the new ones) are one line, not workers that never join; a count that is not a whole
    number of workers is one line too."""
    learner = crashing_learner({}, {"num_col_workers": 1, "col_worker_resources": {"num_cpus": 1}}, target_steps=10**9)
    try:
        with pytest.raises(ConfigError, match=r"^add_collection_workers: the workers ask for 3 CPU in all \(3 collection workers x 1\) but the Ray cluster has 2;"):
            learner.scheme.add_collection_workers(2)
        with pytest.raises(InputError, match=r"^Scheme.add_collection_workers\(1.5\): the number of workers must be an int >= 1$"):
            learner.scheme.add_collection_workers(1.5)
        assert learner.scheme.num_collection_workers == 1
    finally:
        learner.close()


@pytest.mark.parametrize(("communication", "execution"), [("synchronous", "decentralised"), ("asynchronous", "centralised")])
def test_a_dead_gradient_worker_is_replaced(ray_session, communication, execution):
    # two remote gradient workers, each with one collection worker; one is killed mid-run
    # (its collection worker dies with it): its replacement starts from the master's state
    learner = crashing_learner(
        {}, {"num_grad_workers": 2, "num_col_workers": 1, "grad_communication": communication, "update_execution": execution,
             "grad_worker_resources": {"num_cpus": 0.1}}, target_steps=2_048,
    )
    grad_workers = learner.scheme.grad_workers.workers
    deadline = time.monotonic() + 240  # within the test's 300 s: a loaded CI machine starts a replacement process slowly
    try:
        for _ in range(3):
            learner.step()
        ray_session.kill(grad_workers.remote_workers[0])
        summary = learner.train()
        weights = learner.scheme.update_worker.replica_weights()
        while len(weights) < 2 and time.monotonic() < deadline:
            learner.step()  # the replacement joins at a step once it is up
            weights = learner.scheme.update_worker.replica_weights()
    finally:
        learner.close()
    assert summary["env_steps"] >= 2_048 and learner.worker_restarts == 1 and learner.lost_batches >= 1
    assert len(weights) == 2
    if execution == "decentralised":  # every replica applies the same updates: the master's weights
        master = learner.scheme.algorithm.get_weights()
        for replica in weights:
            assert all(torch.equal(replica[k], master[k]) for k in master)


def test_a_gradient_worker_dead_at_a_checkpoint_is_replaced_and_its_replacement_keeps_the_added_collection_workers(ray_session, tmp_path):
    """Two gradient workers with a collection worker each, one added to each mid-run; then one
    gradient worker dies. The next checkpoint is written all the same (the dead one is left out
    and replaced), and its replacement joins with two collection workers, as the others have."""
    learner = crashing_learner(
        {}, {"num_grad_workers": 2, "num_col_workers": 1, "grad_worker_resources": {"num_cpus": 0.1}}, target_steps=10**9,
    )
    scheme, replicas = learner.scheme, learner.scheme.grad_workers.workers
    deadline = time.monotonic() + 240  # within the test's 300 s: a loaded CI machine starts processes slowly

    def step_until(done) -> None:
        while not done() and time.monotonic() < deadline:
            learner.step()

    def per_replica() -> list[int]:
        return [replicas.get(replicas.call(w, "num_collection_workers")) for w in replicas.remote_workers]

    try:
        learner.step()
        scheme.add_collection_workers(1)
        assert scheme.num_collection_workers == 4
        ray_session.kill(replicas.remote_workers[0])
        path = learner.checkpoint(tmp_path / "checkpoint")  # the dead one is found here
        assert (path / "meta.json").exists()
        assert scheme.num_collection_workers == 4  # the replacement's two counted while it starts
        step_until(lambda: len(replicas.remote_workers) == 2)
        assert per_replica() == [2, 2]
        learner.step()
    finally:
        learner.close()
    assert learner.worker_restarts == 1


def test_a_collection_worker_found_dead_by_a_checkpoint_has_its_rollout_counted_lost(ray_session, tmp_path):
    """Asynchronous collection: the worker with a rollout under way dies between two steps and a
    checkpoint is the first to find it. Its rollout is lost and counted with the next step's
    report, beside its restart."""
    learner = crashing_learner({}, {"col_communication": "asynchronous", "worker_timeout_s": 600}, target_steps=10**9)
    try:
        for _ in range(2):
            learner.step()
        col = learner.scheme.collection_workers
        (busy, _), = col._pending.values()  # the other worker's rollout was taken: it waits for the next step
        ray_session.kill(busy)
        learner.checkpoint(tmp_path / "checkpoint")
        info = learner.step()
    finally:
        learner.close()
    assert info["lost_batches"] == 1 and learner.lost_batches == learner.worker_restarts == 1


@pytest.mark.parametrize("communication", ["synchronous", "asynchronous"])
def test_every_sigkilled_worker_is_counted_once_and_its_replacement_timed(ray_session, communication):
    # the drill of a hostile user: SIGKILL a collection worker's process N times, the next one
    # once the last replacement has joined; every death is one restart, training goes on
    kills = 3
    # (no timeout restarts on a loaded machine: only the kills may count)
    learner = crashing_learner({}, {"col_communication": communication, "worker_restart_delay_s": 0.5, "worker_timeout_s": 600}, target_steps=10**6)
    try:
        replace_s = kill_collection_workers(learner, kills)
        steps = learner.env_steps
        for _ in range(8):
            learner.step()
        row = learner.metrics()
    finally:
        learner.close()
    assert learner.worker_restarts == kills and row["worker_restarts"] == kills
    assert learner.healthy_workers == 2 and learner.env_steps > steps  # all places filled, and it trains on
    assert len(replace_s) == kills and all(s >= 0.5 for s in replace_s)  # measured from the death, the 0.5 s delay included


@pytest.mark.parametrize("communication", ["synchronous", "asynchronous"])
def test_a_joining_collection_worker_normalises_with_the_runs_statistics(ray_session, communication):
    """A worker added mid-run (as a replacement does) takes an established worker's observation
    and return statistics before its first rollout: with fresh ones (mean 0, std 1) its
    observations would be far from what the policy learned on, until thousands of steps later."""
    learner = crashing_learner(
        {}, {"num_col_workers": 1, "col_communication": communication}, target_steps=10**9, env={"normalize_obs": True, "normalize_reward": True},
    )
    try:
        ws = learner.scheme.collection_workers.workers
        for _ in range(4):
            learner.step()
        (first,) = ws.remote_workers
        before = ws.get(ws.call(first, "running_statistics"))
        assert set(before) == {"obs_rms", "ret_rms"} and before["obs_rms"]["count"] >= 4 * 128
        learner.scheme.add_collection_workers(1)
        deadline = time.monotonic() + 120
        while len(ws.remote_workers) < 2 and time.monotonic() < deadline:
            learner.step()  # the new worker joins at a collection once it is up
        (joined,) = [w for w in ws.remote_workers if w is not first]
        after = ws.get(ws.call(joined, "running_statistics"))
        for key in ("obs_rms", "ret_rms"):  # what the first had built up, and more; fresh: 1e-4 and its own steps
            assert after[key]["count"] >= before[key]["count"]
    finally:
        learner.close()


def test_a_gradient_worker_passes_its_collection_statistics_on():
    """What a replacement gradient worker gets from a surviving one (``pass_on``): its collection
    workers' statistics, which its own collection workers then normalise with."""
    def learner_with(seed: int) -> Learner:
        raw = {
            "env": {"env_id": "CartPole-v1", "num_envs": 2, "normalize_obs": True}, "storage": {"num_steps": 16},
            "algorithm": {"name": "ppo", "num_epochs": 1, "minibatch_size": 32}, "run": {"seed": seed, "target_steps": 10**6, "eval_every": 0},
        }
        return Learner.from_config(from_dict(raw), progress=False)

    trained, fresh = learner_with(1), learner_with(2)
    try:
        for _ in range(3):
            trained.step()
        survivor, joiner = trained.scheme.grad_workers.local_worker, fresh.scheme.grad_workers.local_worker
        statistics = survivor.running_statistics()
        assert statistics["obs_rms"]["count"] >= 3 * 32
        joiner.adopt_statistics(statistics)
        adopted = joiner.running_statistics()["obs_rms"]
        assert adopted["count"] == statistics["obs_rms"]["count"]
        assert (adopted["mean"] == statistics["obs_rms"]["mean"]).all()
    finally:
        trained.close()
        fresh.close()


def test_a_checkpoint_does_not_wait_forever_on_a_worker_whose_rollout_hangs(ray_session):
    """Asynchronous collection keeps a rollout under way, and a worker's state is read after it:
    one that hangs (its 4th rollout stalls at step 100 for two minutes) held the checkpoint as
    long. Past scheme.worker_timeout_s the worker counts as dead: replaced, its rollout lost, and
    the checkpoint goes on without its state."""
    learner = crashing_learner(
        {"stall_after_steps": 100, "stall_s": 120.0}, {"num_col_workers": 1, "worker_timeout_s": 3.0, "col_communication": "asynchronous"},
        target_steps=10**6,
    )
    try:
        workers = learner.scheme.collection_workers
        for _ in range(3):  # three rollouts trained on
            learner.step()
        (worker,) = workers._idle  # one worker restarts at the next collection; as one of several would be, now:
        workers._submit(worker)  # its fourth rollout under way, stalling at step 100
        workers._idle = []
        state = workers.state_dict()
        assert state["remote"] == [] and workers.lost_batches == 1
        assert learner.step() is not None  # and training goes on with the replacement
    finally:
        learner.close()
