"""Normaliser statistics across remote collection workers: each rollout reports what its
normalisers took in, the set merges every worker's, and every worker then normalises with the
merge (ARCHITECTURE.md, "Normalisation statistics across workers")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pytorchrl.envs import VecEnv
from pytorchrl.envs.normalization import ObservationNormalizer, RunningMeanStd, take_since
from tests.envs.test_vec_env import stepped_pendulum
from tests.scheme.test_faults import crashing_learner

PRIOR = RunningMeanStd().count  # the pseudo-count every set of statistics starts from


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


@pytest.mark.timeout(180)
@pytest.mark.parametrize("communication", ["synchronous", "asynchronous"])
def test_remote_workers_normalise_with_the_statistics_of_all_of_them(ray_session, communication):
    """Two remote workers: the set's statistics count every observation and return either
    took in (each worker's own would hold about half), evaluation and checkpoints read them, and
    each worker's next rollout starts from them."""
    learner = crashing_learner(
        {}, {"col_communication": communication}, target_steps=10**9, env={"normalize_obs": True, "normalize_reward": True},
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
        assert workers.state_dict()["merged_statistics"]["obs_rms"]["count"] == merged["obs_rms"]["count"]
        ws = workers.workers
        learner.step()
        learner.step()
        for worker in ws.remote_workers:  # each started its rollout from the merge (and added its own)
            assert ws.get(ws.call(worker, "running_statistics", control=True))["obs_rms"]["count"] > merged["obs_rms"]["count"]
    finally:
        learner.close()


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
