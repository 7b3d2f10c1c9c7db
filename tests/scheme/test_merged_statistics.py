"""Normaliser statistics across remote collection workers: each rollout reports what its
normalisers took in, the set merges every worker's, and every worker then normalises with the
merge; across remote gradient workers, each replica's set reports its merge's new moments to the
update worker, which merges them in turn (ARCHITECTURE.md, "Normalisation statistics across
workers")."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from pytorchrl.config import from_dict
from pytorchrl.envs import VecEnv
from pytorchrl.envs.normalization import MergedStatistics, ObservationNormalizer, RunningMeanStd, take_since
from pytorchrl.learner import Learner
from tests.envs.test_vec_env import stepped_pendulum
from tests.scheme.test_faults import crashing_learner

PRIOR = RunningMeanStd().count  # the pseudo-count every set of statistics starts from
#: episodes that never end within a test: every env step is a transition, so the return
#: statistics (which skip next-step autoreset's reset steps) count exactly the run's env steps
ENDLESS = {"env_id": "Pendulum-v1", "max_episode_steps": 1_000_000}


def test_statistics_merged_from_two_streams_are_those_of_one_stream_that_saw_both():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(8, 3)) for _ in range(6)]
    whole = RunningMeanStd((3,))
    halves = ObservationNormalizer((3,), clip=10.0), ObservationNormalizer((3,), clip=10.0)
    for i, batch in enumerate(batches):
        whole.update(batch)
        halves[i % 2].normalize(batch, update=True)
    merged = RunningMeanStd((3,))
    for half in halves:
        merged.merge(take_since(half))
    np.testing.assert_allclose(merged.mean, whole.mean, rtol=1e-12)
    np.testing.assert_allclose(merged.var, whole.var, rtol=1e-12)
    assert merged.count == pytest.approx(whole.count)
    assert take_since(halves[0])["count"] == 0  # taken: it starts again from nothing


def test_envs_adopt_a_merge_on_top_of_what_they_took_in_since_they_reported():
    env = stepped_pendulum(5, normalize_obs=True, normalize_reward=True)
    reported = env.take_new_statistics()
    assert set(reported) == {"obs_rms", "ret_rms"} and reported["obs_rms"]["count"] == pytest.approx(2 * 6)  # the reset and 5 steps
    for _ in range(3):
        env.step(torch.zeros(2, 1))
    elsewhere = RunningMeanStd((3,))
    elsewhere.update(np.full((100, 3), 5.0))
    env.adopt_merged_statistics({"obs_rms": elsewhere.state_dict()})
    assert env.obs_normalizer.rms.count == pytest.approx(elsewhere.count + 2 * 3)  # not yet reported: kept
    restored = VecEnv("Pendulum-v1", num_envs=2, seed=0, normalize_obs=True, normalize_reward=True)
    restored.load_state_dict(env.state_dict())
    assert restored.take_new_statistics()["obs_rms"]["count"] == pytest.approx(2 * 3)  # a checkpoint keeps what is not reported yet
    joiner = VecEnv("Pendulum-v1", num_envs=2, seed=2, normalize_obs=True)
    joiner.adopt_statistics(env.running_statistics())  # a worker joining takes another's: not its own to report
    assert joiner.take_new_statistics()["obs_rms"]["count"] == 0


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("communication", ["synchronous", "asynchronous"])
def test_remote_workers_normalise_with_the_statistics_of_all_of_them(ray_session, communication):
    """Two remote workers: the set's statistics count every observation and return either
    took in (each worker's own would hold about half), evaluation and checkpoints read them, and
    each worker's next rollout starts from them."""
    learner = crashing_learner(
        {}, {"col_communication": communication}, target_steps=10**9, env={"normalize_obs": True, "normalize_reward": True, **ENDLESS},
    )
    try:
        workers = learner.scheme.collection_workers
        num_envs, resets = 4, []  # each worker's first rollout also reports its reset's observations
        for _ in range(40):  # until both workers' rollouts have come in (asynchronous: one may be slow to start)
            learner.step()
            merged = workers.running_statistics()
            assert merged["ret_rms"]["count"] == pytest.approx(PRIOR + learner.env_steps)
            resets.append(round((merged["obs_rms"]["count"] - PRIOR - learner.env_steps) / num_envs, 6))
            if resets[-1] == 2 and len(resets) >= 4:
                break
        assert set(resets) <= {1, 2} and resets[-1] == 2, resets
        assert workers.normalization_state()["count"] == merged["obs_rms"]["count"]  # what evaluation normalises with
        state = workers.state_dict()
        # asynchronous: one rollout is under way, and a worker's state is read after it: the
        # checkpoint's merge holds its report, and its ``spent`` what it collected, which the resumed run counts
        under_way = sum(done["env_steps"] for done in state.get("spent", []))
        assert (under_way > 0) == (communication == "asynchronous"), state.get("spent")
        assert workers.running_statistics()["obs_rms"]["count"] == merged["obs_rms"]["count"]  # the live merge is left as it was
        checkpointed = state["merged_statistics"]["ret_rms"]["count"]
        assert checkpointed == pytest.approx(PRIOR + learner.env_steps + under_way)
        workers.load_state_dict(state)
        _, info = workers.collect()
        assert info["env_steps"] == pytest.approx(under_way + workers.running_statistics()["ret_rms"]["count"] - checkpointed)
        merged = workers.running_statistics()
        ws = workers.workers
        for _ in range(20):  # each worker's next rollout starts from the merge (and adds its own); asynchronous:
            learner.step()  # one worker may deliver several rollouts before the other's next one starts
            counts = [ws.get(ws.call(worker, "running_statistics", control=True))["obs_rms"]["count"] for worker in ws.remote_workers]
            if all(count > merged["obs_rms"]["count"] for count in counts):
                break
        assert all(count > merged["obs_rms"]["count"] for count in counts), (counts, merged["obs_rms"]["count"])
    finally:
        learner.close()
    local = crashing_learner({}, {"num_col_workers": 0}, target_steps=10**9, env={"normalize_obs": True, "normalize_reward": True, **ENDLESS})
    try:  # resumed without remote workers: the local worker's first collection counts the rollouts under way too
        workers = local.scheme.collection_workers
        workers.load_state_dict(state)
        counts = [workers.collect()[1]["env_steps"] for _ in range(2)]
        assert counts[0] == counts[1] + under_way
    finally:
        local.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_local_runs_statistics_go_on_in_remote_workers_that_resume_it(ray_session):
    env = {"normalize_obs": True, "normalize_reward": True}
    local = crashing_learner({}, {"num_col_workers": 0}, target_steps=10**9, env=env)
    try:
        for _ in range(3):
            local.step()
        state = local.scheme.collection_workers.state_dict()
    finally:
        local.close()
    remote = crashing_learner({}, {}, target_steps=10**9, env=env)
    try:
        workers = remote.scheme.collection_workers
        workers.load_state_dict(state)
        merged = workers.running_statistics()
        for key in ("obs_rms", "ret_rms"):  # the local worker's, not fresh ones
            assert merged[key]["count"] == pytest.approx(float(state["local"]["envs"][key]["count"])) and merged[key]["count"] > 100
    finally:
        remote.close()


def test_a_checkpoint_keeps_what_a_set_has_not_reported_up_with_the_reports_under_way():
    """A remote gradient worker's set reports up what it merged since it last did. Its checkpoint
    holds the merge with the reports of the rollouts under way (their workers count them as sent)
    and what of it was reported: loaded, and checkpointed and loaded again before any report,
    what was not reported (merged since the last report, or under way) goes up with the next
    report, once."""
    rng = np.random.default_rng(0)
    parts = [{"obs_rms": RunningMeanStd((2,)).state_dict()} for _ in range(3)]  # reported, merged since, under way
    for i, part in enumerate(parts):
        rms = RunningMeanStd((2,))
        rms.update(rng.normal(i, size=(20 + 10 * i, 2)))
        part["obs_rms"] = rms.state_dict()
    live, whole = MergedStatistics(), MergedStatistics()
    live.merge(parts[0])
    live.take_new()  # reported up
    live.merge(parts[1])
    for part in parts:
        whole.merge(part)
    before = live.state()["obs_rms"]["count"]
    first = MergedStatistics()
    first.set(live.state(parts[2]), live.reported())
    assert live.state()["obs_rms"]["count"] == before  # the live merge is left as it was
    second = MergedStatistics()  # checkpointed again before it reported, with nothing under way
    second.set(first.state(), first.reported())
    np.testing.assert_allclose(second.state()["obs_rms"]["mean"], whole.state()["obs_rms"]["mean"], rtol=1e-12)
    new = second.take_new()["obs_rms"]
    assert new["count"] == pytest.approx(parts[1]["obs_rms"]["count"] + parts[2]["obs_rms"]["count"])
    assert second.take_new()["obs_rms"]["count"] == pytest.approx(0.0, abs=1e-9)


def test_sets_reporting_their_merges_up_a_level_give_the_statistics_of_one_stream():
    """Remote gradient workers: each replica's set merges its workers' reports and reports what
    it merged since it last did to the update worker, whose merge each set then goes on from."""
    rng = np.random.default_rng(1)
    whole = RunningMeanStd((2,))
    workers = [[ObservationNormalizer((2,), clip=10.0) for _ in range(2)] for _ in range(2)]
    sets, master = [MergedStatistics(), MergedStatistics()], MergedStatistics()
    for _ in range(3):
        for replica, normalizers in zip(sets, workers, strict=True):
            for normalizer in normalizers:
                batch = rng.normal(-1.0, 3.0, size=(5, 2))
                whole.update(batch)
                normalizer.normalize(batch, update=True)
                replica.merge({"obs_rms": take_since(normalizer)})
            master.merge(replica.take_new())
        for replica in sets:
            replica.rebase(master.state())
    merged = master.state()["obs_rms"]
    np.testing.assert_allclose(merged["mean"], whole.mean, rtol=1e-12)
    np.testing.assert_allclose(merged["var"], whole.var, rtol=1e-12)
    assert merged["count"] == pytest.approx(whole.count)
    for replica in sets:  # rebased on the merge, with nothing of their own left to report
        assert replica.state()["obs_rms"]["count"] == pytest.approx(whole.count)
        assert replica.take_new()["obs_rms"]["count"] == pytest.approx(0.0, abs=1e-9)
    sets[0].merge({"obs_rms": {"mean": np.ones(2), "var": np.ones(2), "count": 4.0}})
    sets[0].rebase(master.state())  # what it merged since it reported stays on top of the merge
    assert sets[0].state()["obs_rms"]["count"] == pytest.approx(whole.count + 4)
    assert sets[0].take_new()["obs_rms"]["count"] == pytest.approx(4.0)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "scheme", [{"num_col_workers": 0}, {"num_col_workers": 1, "grad_communication": "asynchronous"}],
    ids=["replicas-collect-locally", "async-replicas-with-remote-collectors"],
)
def test_remote_gradient_workers_normalise_with_the_statistics_of_every_replica(ray_session, scheme):
    """Two replicas: the update worker's merge counts every return either replica's envs took in,
    each replica goes on from it (so each holds about twice its own), the steps under way when
    the replicas reload the master's state still count, evaluation and checkpoints read it, and
    a checkpoint from before the merge starts it from a replica's statistics, counted once."""
    raw = {
        "env": {**ENDLESS, "num_envs": 2, "normalize_obs": True, "normalize_reward": True},
        "storage": {"num_steps": 16},
        "algorithm": {"name": "ppo", "num_epochs": 1, "minibatch_size": 32},  # a round is one step
        "run": {"seed": 2, "target_steps": 10**9, "eval_every": 0},
        "scheme": {
            "num_grad_workers": 2, "grad_worker_resources": {"num_cpus": 0.1},
            **({"col_worker_resources": {"num_cpus": 0.1}} if scheme["num_col_workers"] else {}), **scheme,
        },
    }
    learner = Learner.from_config(from_dict(raw), progress=False)
    try:
        grad = learner.scheme.grad_workers
        for _ in range(12):
            learner.step()
        merged = grad.merged_statistics()
        assert merged["ret_rms"]["count"] == pytest.approx(PRIOR + learner.env_steps)  # both replicas' returns
        ws = grad.workers
        own = [ws.get(ws.call(w, "running_statistics"))["ret_rms"]["count"] for w in ws.remote_workers]
        assert sum(own) > 1.5 * merged["ret_rms"]["count"], own  # each replica's own would sum to the merge
        assert learner.scheme.collection_workers.normalization_state()["count"] == merged["obs_rms"]["count"]  # what evaluation uses
        updates = learner.scheme.update_worker
        updates.set_hyperparameters({"lr": 1e-4})  # the replicas reload the master's state: steps under way are waited for
        steps = learner.env_steps
        for _ in range(3):
            learner.step()
        merged = grad.merged_statistics()  # their collections count, and their reports are merged
        assert merged["ret_rms"]["count"] == pytest.approx(PRIOR + learner.env_steps) and learner.env_steps > steps
        state = updates.state_dict()  # asynchronous: with what the steps under way took, which the replicas' states hold
        under_way = sum(done["env_steps"] for done in state.get("spent", []))
        assert (under_way > 0) == (scheme.get("grad_communication") == "asynchronous"), state.get("spent")
        assert grad.merged_statistics()["ret_rms"]["count"] == merged["ret_rms"]["count"]  # the live merge is left as it was
        checkpointed = state["merged_statistics"]["ret_rms"]["count"]
        assert checkpointed == pytest.approx(PRIOR + learner.env_steps + under_way)
        learner.step()
        updates.load_state_dict(state)
        assert grad.merged_statistics()["ret_rms"]["count"] == pytest.approx(checkpointed)
        info = updates.step()  # the resumed run's first step counts the checkpoint's steps under way
        assert info["env_steps"] == pytest.approx(under_way + grad.merged_statistics()["ret_rms"]["count"] - checkpointed)
        # a checkpoint from before the merge: a replica's statistics go on as the merge; a lone
        # collecting worker had reported nothing then, and must not report what it holds again
        for key in ("merged_statistics", "spent"):  # nor the steps under way: they came with the merge
            state.pop(key, None)
        for replica in state["remote_gradient_workers"]:
            envs = replica["collection"]["local"].get("envs")
            if isinstance(envs, dict) and "reported" in envs:
                envs["reported"] = {key: RunningMeanStd(np.shape(moments["mean"])).state_dict() for key, moments in envs["reported"].items()}
        updates.load_state_dict(state)
        first = ws.get(ws.call(ws.remote_workers[0], "running_statistics"))["ret_rms"]["count"]
        assert grad.merged_statistics()["ret_rms"]["count"] == first
        steps = learner.env_steps
        learner.step()
        assert grad.merged_statistics()["ret_rms"]["count"] == pytest.approx(first + learner.env_steps - steps)  # once each
    finally:
        learner.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_replicas_collecting_asynchronously_keep_their_rollouts_under_way_through_two_checkpoints(ray_session):
    """Two remote gradient workers, each with two asynchronous collection workers: a checkpoint
    holds the replicas' rollouts under way, and one taken right after loading it (a stop before
    the first round ends, then a second resume) still holds what the replicas had not reported
    up: the update worker's merge counts every return either replica's envs took in."""
    raw = {
        "env": {**ENDLESS, "num_envs": 2, "normalize_obs": True, "normalize_reward": True},
        "storage": {"num_steps": 16},
        "algorithm": {"name": "ppo", "num_epochs": 1, "minibatch_size": 32},
        "run": {"seed": 2, "target_steps": 10**9, "eval_every": 0},
        "scheme": {
            "num_grad_workers": 2, "grad_worker_resources": {"num_cpus": 0.1}, "num_col_workers": 2,
            "col_worker_resources": {"num_cpus": 0.1}, "col_communication": "asynchronous",
        },
    }
    learner = Learner.from_config(from_dict(raw), progress=False)
    try:
        grad = learner.scheme.grad_workers
        for _ in range(6):
            learner.step()
        first = copy.deepcopy(learner.state_dict())
        replicas = first["scheme"]["remote_gradient_workers"]
        assert all(sum(done["env_steps"] for done in r["collection"].get("spent", [])) > 0 for r in replicas)  # rollouts under way
        learner.load_state(copy.deepcopy(first))
        learner.load_state(copy.deepcopy(learner.state_dict()))  # checkpointed again before any replica reported
        for _ in range(2):
            learner.step()
        assert grad.merged_statistics()["ret_rms"]["count"] == pytest.approx(PRIOR + learner.env_steps)
    finally:
        learner.close()
