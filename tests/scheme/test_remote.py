"""Remote (Ray) workers: equivalence with local workers, every mode, preemption, policy lag.

Every test here uses real Ray actors on the session's 2-CPU local Ray; worker resources are
fractional so that up to six actors fit.
"""

from __future__ import annotations

import itertools
import re
import time
import warnings

import pytest
import torch

from pytorchrl.config import from_dict
from pytorchrl.learner import Learner
from pytorchrl.scheme.collection.collection_worker_set import CollectionWorkerSet
from pytorchrl.scheme.scheme import build_scheme
from pytorchrl.utils.arrays import to_tensors
from pytorchrl.utils.seeding import seed_everything

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SMALL = {
    "env": {"env_id": "CartPole-v1", "num_envs": 4},
    "storage": {"num_steps": 16},
    "algorithm": {"name": "ppo", "num_epochs": 2, "minibatch_size": 32, "lr": 1e-3},
    "run": {"seed": 3, "target_steps": 10_000, "eval_every": 0},
}
FRACTIONAL = {"col_worker_resources": {"num_cpus": 0.1}, "grad_worker_resources": {"num_cpus": 0.1}}


def make_learner(scheme: dict) -> Learner:
    """A small learner; its remote workers have all started when it returns (WorkerSet waits)."""
    raw = {**SMALL, "scheme": {**FRACTIONAL, **scheme}}
    return Learner.from_config(from_dict(raw), progress=False)


def train_updates(scheme: dict, updates: int) -> tuple[Learner, dict]:
    learner = make_learner(scheme)
    info: dict = {}
    for _ in range(updates):
        info = learner.step()
    return learner, info


def weights_of(learner: Learner) -> dict[str, torch.Tensor]:
    return learner.scheme.algorithm.get_weights()


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize(
    "remote",
    [{"num_col_workers": 1}, {"num_grad_workers": 1}, {"num_grad_workers": 1, "num_col_workers": 1, "compress_data": True}],
    ids=["remote-collection", "remote-gradients", "both-compressed"],
)
def test_remote_workers_reach_exactly_the_local_weights(ray_session, remote):
    """Same seeds, same data, same gradients: remote workers change where, not what."""
    local, _ = train_updates({}, 12)
    other, _ = train_updates(remote, 12)
    try:
        assert local.env_steps == other.env_steps == 3 * 64
        assert_same_weights(weights_of(local), weights_of(other))
        assert local.scheme.algorithm.version == other.scheme.algorithm.version == 12
    finally:
        local.close()
        other.close()


def _valid_modes():
    """Each of the six valid communication layouts (decentralised updates need synchronous
    gradients) with two worker counts: (1, 1) and (2, 2), or (1, 2) and (2, 1), alternating.
    Every layout meets one and two collection workers and one and two gradient workers, and each
    of the four count pairs is met by three layouts (the whole product was 24 cases of ~9 s of
    CI, mostly actor start-up, for the same code paths)."""
    layouts = [
        (col, grad, update)
        for col, grad, update in itertools.product(("synchronous", "asynchronous"), ("synchronous", "asynchronous"), ("centralised", "decentralised"))
        if not (update == "decentralised" and grad == "asynchronous")
    ]
    for i, (col, grad, update) in enumerate(layouts):
        for n_col, n_grad in ((1, 1), (2, 2)) if i % 2 == 0 else ((1, 2), (2, 1)):
            yield {
                "col_communication": col, "grad_communication": grad, "update_execution": update,
                "num_col_workers": n_col, "num_grad_workers": n_grad,
            }


MODES = list(_valid_modes())


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(str(v)[:5] for v in m.values()))
def test_every_mode_trains(ray_session, mode):
    learner, _ = train_updates(mode, 6)
    try:
        assert learner.updates == 6
        assert learner.env_steps >= 64 * mode["num_grad_workers"]
        assert learner.scheme.algorithm.version == 6
        assert learner.episodes > 0
        returns = learner.scheme.evaluate(2)
        assert len(returns) == 2 and all(r >= 1 for r in returns)
    finally:
        learner.close()


def test_decentralised_replicas_stay_identical(ray_session):
    learner, _ = train_updates({"num_grad_workers": 2, "update_execution": "decentralised"}, 9)
    try:
        master = weights_of(learner)
        replicas = learner.scheme.update_worker.replica_weights()
        assert len(replicas) == 2
        for replica in replicas:
            assert_same_weights(master, replica)
        assert any(not torch.equal(v, w) for v, w in zip(master.values(), weights_of(make_learner({})).values(), strict=True))
    finally:
        learner.close()


def test_async_collection_drops_batches_older_than_max_policy_lag(ray_session):
    learner = make_learner({"num_col_workers": 3, "col_communication": "asynchronous", "max_policy_lag": 0})
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for _ in range(600):  # 24 rollouts drop some on a quiet machine; a loaded one can serialise the workers for longer
                learner.step()
                if sum(learner.policy_lags.values()) + learner.dropped_batches >= 24 and learner.dropped_batches:
                    break
        assert learner.dropped_batches > 0
        assert set(learner.policy_lags) == {0}  # nothing older than the bound was used
        assert learner.metrics()["dropped_batches"] == learner.dropped_batches
        # told at most once, at the first collection where half or more of 20 or more rollouts
        # were dropped: so told when that holds at the end, and what it told holds that
        seen = sum(learner.policy_lags.values()) + learner.dropped_batches
        told = [str(w.message) for w in said if "scheme.max_policy_lag = 0 has dropped" in str(w.message)]
        assert len(told) <= 1
        if seen >= 20 and 2 * learner.dropped_batches >= seen:
            assert told
        if told:
            dropped_then, seen_then = (int(n.replace(",", "")) for n in re.search(r"dropped ([\d,]+) of the first ([\d,]+) rollouts", told[0]).groups())
            assert seen_then >= 20 and 2 * dropped_then >= seen_then and dropped_then <= learner.dropped_batches
        assert learner.finish()["dropped_batches"] == learner.dropped_batches  # summary.json counts them
    finally:
        learner.close()


def test_rollouts_dropped_for_policy_lag_still_count_their_env_steps(ray_session):
    """A dropped rollout's data is not trained on, but its env steps and episodes happened: they
    count in ``env_steps`` (and so ``target_steps``) and the return statistics. A new version
    before every collection makes the other worker's rollout one version too old."""
    learner = make_learner({"num_col_workers": 2, "col_communication": "asynchronous", "max_policy_lag": 0})
    try:
        col = learner.scheme.collection_workers
        weights = learner.scheme.algorithm.get_weights(acting=True)
        steps, calls = 0, 0
        for version in range(1, 40):
            col.sync_weights(weights, version)
            _, info = col.collect()
            steps, calls = steps + info["env_steps"], calls + 1
            assert set(info["policy_lags"]) == {0}  # the dropped ones' lag is not what training used
            if col.dropped_batches >= 2:
                break
        assert col.dropped_batches >= 2
        assert steps == 4 * 16 * (calls + col.dropped_batches)  # 4 envs x 16 steps a rollout, the dropped ones too
    finally:
        learner.close()


def test_async_collection_logs_policy_lag(ray_session):
    learner = make_learner({"num_col_workers": 2, "col_communication": "asynchronous"})
    try:
        for _ in range(40):
            learner.step()
        assert learner.dropped_batches == 0
        assert max(learner.policy_lags) >= 1  # a rollout older than the newest policy was used
        assert learner.metrics()["policy_lag_mean"] is not None
    finally:
        learner.close()


def test_async_gradients_log_staleness(ray_session):
    learner, _ = train_updates({"num_grad_workers": 2, "grad_communication": "asynchronous"}, 1)
    try:
        stale = [learner.step().get("gradient_staleness") for _ in range(10)]
        assert max(stale) >= 1  # the other worker's gradient arrives computed on older weights
    finally:
        learner.close()


def test_synchronous_round_preempts_a_slow_worker(ray_session):
    """A remote worker told to stop mid-rollout sends the shorter, still on-policy rollout."""
    raw = {
        **SMALL,
        "env": {"env_id": "benchmarks.envs:slow_cartpole", "num_envs": 1, "env_kwargs": {"step_sleep_s": 0.002}},
        "storage": {"num_steps": 2000},
        "scheme": {**FRACTIONAL, "num_col_workers": 1},
    }
    seed_everything(0)
    scheme = build_scheme(from_dict(raw))
    try:
        col: CollectionWorkerSet = scheme.collection_workers
        col.sync_weights(scheme.algorithm.get_weights(), 0)
        ws = col.workers
        worker = ws.remote_workers[0]
        ref = ws.call(worker, "collect_data", None, None, 1)
        time.sleep(1.0)
        ws.call(worker, "preempt", 1, control=True)
        data, info = ws.get(ref)
        assert info["preempted"]
        assert 1 <= info["env_steps"] < 2000
        assert data["rewards"].shape[0] == info["env_steps"] and data["obs"].shape[0] == info["env_steps"] + 1
    finally:
        scheme.close()


def test_fraction_workers_ends_rounds_early(ray_session):
    """With fraction_workers 0.5 the first of 2 workers to finish ends the round; the other's
    shorter rollout is used too."""
    # the envs stall 50 ms at random (seeded, different per worker) steps, so that one worker is
    # well behind the other in most rounds, whatever the machine's speed
    raw = {
        **SMALL,
        "env": {
            "env_id": "benchmarks.envs:crashing_cartpole", "num_envs": 1, "env_kwargs": {"p_stall": 0.1, "stall_s": 0.05},
            "eval_env_kwargs": {},
        },
        "storage": {"num_steps": 64},
        "scheme": {**FRACTIONAL, "num_col_workers": 2, "fraction_workers": 0.5},
    }
    scheme = build_scheme(from_dict(raw))
    try:
        col: CollectionWorkerSet = scheme.collection_workers
        sizes = []
        for version in range(6):
            col.sync_weights(scheme.algorithm.get_weights(), version)
            data, info = col.collect()
            assert info["num_batches"] == 2 and len(data) == 2  # the preempted rollout is not thrown away
            sizes.append(sorted(d["rewards"].shape[0] for d in data))
            assert info["env_steps"] == sum(sizes[-1])
        shortened = [s for s in sizes if s[0] < 64]
        assert shortened and all(s[1] == 64 for s in sizes)  # one full rollout per round, the other cut
        assert col.preempted_batches == len(shortened)
    finally:
        scheme.close()


def test_workers_that_cannot_fit_the_cluster_fail_fast(ray_session):
    raw = {**SMALL, "scheme": {"num_col_workers": 2, "col_worker_resources": {"num_gpus": 1}}}
    with pytest.raises(Exception, match=r"asks for 1 GPU but no node of the Ray cluster has more than 0"):
        build_scheme(from_dict(raw))
    raw = {**SMALL, "scheme": {"num_col_workers": 3, "col_worker_resources": {"num_cpus": 1}}}
    with pytest.raises(Exception, match=r"ask for 3 CPU in all \(3 collection workers x 1\) but the Ray cluster has 2"):
        build_scheme(from_dict(raw))


def _rhs_tensors(state: object) -> list[torch.Tensor]:
    """Every recurrent state a checkpoint holds (the collection storages' ``rhs``)."""
    if isinstance(state, dict):
        return [t for k, v in state.items() for t in ([v] if k == "rhs" and isinstance(v, torch.Tensor) else _rhs_tensors(v))]
    if isinstance(state, (list, tuple)):
        return [t for v in state for t in _rhs_tensors(v)]
    return []


@pytest.mark.parametrize(
    ("algorithm", "scheme"),
    [
        ("ppo", {"num_col_workers": 2}),
        ("appo", {"num_col_workers": 2, "col_communication": "asynchronous"}),
        ("ppo", {"num_grad_workers": 2, "num_col_workers": 1}),
    ],
    ids=["sync-collection", "async-collection", "remote-gradients"],
)
def test_recurrent_policies_train_in_remote_modes(ray_session, algorithm, scheme):
    """A GRU policy with remote workers: each remote worker carries its envs' states between
    rollouts (they are in its checkpoint state, not zero), and asynchronous rollouts are tagged
    with their policy lag."""
    raw = {
        **SMALL,
        "actor": {"hidden_sizes": [16], "recurrent": {"type": "gru", "hidden_size": 8}},
        "storage": {"num_steps": 16, "sequence_length": 8},
        "algorithm": {**SMALL["algorithm"], "name": algorithm},
        "scheme": {**FRACTIONAL, **scheme},
    }
    learner = Learner.from_config(from_dict(raw), progress=False)
    try:
        for _ in range(12):
            learner.step()
        assert learner.updates == 12 and learner.episodes > 0
        states = _rhs_tensors(to_tensors(learner.scheme.state_dict()))  # as a checkpoint holds them
        workers = scheme["num_col_workers"] * scheme.get("num_grad_workers", 1)
        assert len(states) >= workers and all(s.shape[-1] == 16 for s in states)  # policy and value cores, 8 each
        assert all(s.abs().sum() > 0 for s in states)
        if scheme.get("col_communication") == "asynchronous":
            assert learner.metrics()["policy_lag_mean"] is not None
        returns = learner.scheme.evaluate(2)
        assert len(returns) == 2 and all(r >= 1 for r in returns)
    finally:
        learner.close()


@pytest.mark.parametrize("kind", ["col", "grad"])
def test_remote_workers_run_no_more_threads_than_their_cpus(ray_session, kind):
    """run.torch_threads sizes the learner; a remote worker with a 0.1-CPU reservation runs one
    thread, so that the learner's threads are not fought for."""
    raw = {**SMALL, "run": {**SMALL["run"], "torch_threads": 2}, "scheme": {**FRACTIONAL, f"num_{kind}_workers": 1}}
    before = torch.get_num_threads()
    scheme = build_scheme(from_dict(raw))
    try:
        assert torch.get_num_threads() == 2  # the learner's process
        ws = scheme.collection_workers.workers if kind == "col" else scheme.grad_workers.workers
        assert len(ws.remote_workers) == 1
        assert ray_session.get(ws.remote_workers[0].threads.remote()) == 1
    finally:
        scheme.close()
        torch.set_num_threads(before)


def test_remote_threads_from_reserved_cpus():
    from pytorchrl.scheme.base.worker_set import remote_threads

    assert remote_threads({}) == 1
    assert remote_threads({"num_cpus": 0.1}) == 1
    assert remote_threads({"num_cpus": 0}) == 1
    assert remote_threads({"num_cpus": 3.5}) == 3


@pytest.mark.slow
def test_workers_that_fit_a_joined_cluster_but_not_its_free_resources_are_told(ray_session, monkeypatch):
    """A second job on a full cluster: Ray waited silently for the first job's CPUs."""
    from pytorchrl.scheme.base.worker_set import busy_resources

    workers = [("collection worker", 2, {"num_cpus": 0.5, "num_gpus": 0.0, "memory": None, "resources": {}})]
    assert busy_resources(workers) is None  # a Ray of the run's own: its resources are its own
    monkeypatch.setenv("RAY_ADDRESS", "auto")  # as inside a Ray job
    ray = ray_session

    @ray.remote(num_cpus=1.5)
    class Holder:
        def ready(self) -> bool:
            return True

    holder = Holder.remote()
    try:
        ray.get(holder.ready.remote())
        deadline = time.monotonic() + 10  # the available view lags the actor's start a little
        while ray.available_resources().get("CPU", 0.0) > 0.5 + 1e-9 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert busy_resources(workers) == (
            "the workers ask for 1 CPU in all; the Ray cluster has that many but only 0.5 free now "
            "(other jobs or runs hold the rest), so the run waits until they are freed"
        )
        ray.kill(holder)  # as a scheme closed a moment ago: its resources come back within the grace, no warning
        assert busy_resources(workers) is None
    finally:
        ray.kill(holder)


@pytest.mark.parametrize("communication", ["synchronous", "asynchronous"])
def test_remote_td3_replicas_end_the_masters_warm_up_and_step_its_policy(ray_session, communication):
    """The master's actor runs no round of its own, so it leaves uniform acting when a replica's
    gradient arrives (evaluation, checkpoints and replacements act with the policy); and stale
    asynchronous gradients are applied as the step they were computed for, so the delayed
    policy step keeps its gradient (applied as the master's own step, it lost it)."""
    raw = {
        "env": {"env_id": "Pendulum-v1", "num_envs": 1},
        "actor": {"hidden_sizes": [16]},
        "storage": {"capacity": 1000},
        "algorithm": {"name": "td3", "minibatch_size": 16, "start_steps": 32, "update_every": 1},
        "run": {"seed": 5, "target_steps": 10_000, "eval_every": 0},
        "scheme": {"grad_worker_resources": {"num_cpus": 0.1}, "num_grad_workers": 2, "grad_communication": communication},
    }
    learner = Learner.from_config(from_dict(raw), progress=False)
    try:
        master = learner.scheme.algorithm
        policy = master.actor.policy_head.weight.detach().clone()
        assert bool(master.actor.uniform)
        for _ in range(12):
            learner.step()
        assert not bool(master.actor.uniform)
        assert not bool(learner.state_dict()["scheme"]["local_gradient_worker"]["algorithm"]["actor"]["uniform"])
        assert not torch.equal(policy, master.actor.policy_head.weight)
    finally:
        learner.close()


def test_hyperparameters_changed_mid_run_reach_the_remote_gradient_workers(ray_session):
    """The replicas compute the losses, so a changed ``clip_range`` must reach them (the master's
    state they reload carries the learning rate only); PPO reports the clip range it used."""
    learner, info = train_updates({"num_grad_workers": 2}, 2)
    try:
        assert info["clip_range"] == pytest.approx(0.2)
        learner.scheme.update_worker.set_hyperparameters({"clip_range": 0.05, "lr": 1e-4})
        info = learner.step()
        assert info["clip_range"] == pytest.approx(0.05) and info["lr"] == pytest.approx(1e-4)
    finally:
        learner.close()


def test_hyperparameters_changed_under_asynchronous_gradients_drain_the_steps_under_way_and_count_them(ray_session, monkeypatch):
    """A change drains the replicas' steps under way (their gradients were computed from weights
    every replica leaves). One that started no round carries no collection info: the next step
    got env_steps without episode lists, and the learner raised KeyError 'episode_returns'
    (rounds of several minibatches). What the drained steps collected still counts: on endless
    episodes the merged return statistics hold one sample per env step, the learner's count."""
    from pytorchrl.envs.normalization import RunningMeanStd
    from pytorchrl.scheme.updates.update_worker import UpdateWorker

    drained: list[int] = []
    drain = UpdateWorker._drain

    def counting(self):
        drained.append(len(self._pending))
        drain(self)

    monkeypatch.setattr(UpdateWorker, "_drain", counting)
    raw = {
        "env": {"env_id": "Pendulum-v1", "max_episode_steps": 1_000_000, "num_envs": 1, "normalize_reward": True},
        "storage": {"num_steps": 16}, "algorithm": {"name": "ppo", "num_epochs": 2, "minibatch_size": 8},
        "run": {"seed": 0, "target_steps": 10**7, "eval_every": 0},
        "scheme": {**FRACTIONAL, "num_grad_workers": 2, "grad_communication": "asynchronous"},
    }
    learner = Learner.from_config(from_dict(raw), progress=False)
    try:
        for i in range(24):
            learner.step()
            if i % 3 == 2:
                learner.scheme.update_worker.set_hyperparameters({"lr": 1e-4})
        learner.step()  # the last change's drain
        assert sum(drained) > 0  # steps under way were drained
        merged = learner.scheme.grad_workers.merged_statistics()
        assert merged["ret_rms"]["count"] == pytest.approx(RunningMeanStd().count + learner.env_steps)
    finally:
        learner.close()


@pytest.mark.parametrize("communication", ["synchronous", "asynchronous"])
def test_healthy_workers_counts_the_run_s_collection_workers_not_one_replica_s(ray_session, communication):
    """Two gradient replicas of one remote collection worker each: an asynchronous step is one
    replica's, and its info counted that replica's workers alone (1 of 2)."""
    learner, _ = train_updates({"num_grad_workers": 2, "grad_communication": communication, "num_col_workers": 1}, 6)
    try:
        assert learner.scheme.grad_workers.num_collection_workers == 2
        assert learner.healthy_workers == 2
    finally:
        learner.close()
