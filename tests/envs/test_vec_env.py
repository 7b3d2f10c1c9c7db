"""Vector envs: seeding, next-step autoreset bookkeeping, normalisation state, bad env ids."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.envs import VecEnv
from pytorchrl.utils.errors import InputError


def _rollout(env: VecEnv, steps: int = 30) -> torch.Tensor:
    obs = [env.reset()]
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        o, *_ = env.step(torch.randint(0, 2, (env.num_envs,), generator=g))
        obs.append(o)
    return torch.stack(obs)


@pytest.mark.parametrize("vectorization", ["native", "sync"])
def test_same_seed_same_trajectories_different_workers_different(vectorization):
    a = _rollout(VecEnv("CartPole-v1", num_envs=3, seed=7, vectorization=vectorization))
    b = _rollout(VecEnv("CartPole-v1", num_envs=3, seed=7, vectorization=vectorization))
    c = _rollout(VecEnv("CartPole-v1", num_envs=3, seed=7, worker_index=1, vectorization=vectorization))
    d = _rollout(VecEnv("CartPole-v1", num_envs=3, seed=8, vectorization=vectorization))
    assert torch.equal(a, b)
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[0], d[0])
    # no two envs of one worker start alike
    assert len({tuple(row.tolist()) for row in a[0]}) == 3


def test_test_envs_use_their_own_stream():
    train = VecEnv("CartPole-v1", num_envs=2, seed=0, vectorization="sync")
    test = VecEnv("CartPole-v1", num_envs=2, seed=0, vectorization="sync", test=True)
    assert not torch.equal(train.reset(), test.reset())


def test_next_step_reset_is_marked_invalid_and_episode_stats_exclude_it():
    env = VecEnv("CartPole-v1", num_envs=1, seed=0, max_episode_steps=5, vectorization="sync")
    env.reset()
    valids, truncs = [], []
    for _ in range(12):
        _, _, term, trunc, valid = env.step(torch.zeros(1, dtype=torch.long))
        valids.append(bool(valid[0]))
        truncs.append(bool(trunc[0] or term[0]))
    first_end = truncs.index(True)
    assert valids[first_end + 1] is False and all(valids[: first_end + 1])
    episodes = env.pop_episodes()
    assert episodes[0][0] == 0 and episodes[0][2] == first_end + 1
    assert episodes[0][1] == pytest.approx(first_end + 1)  # CartPole pays 1 per real step


def test_normalisation_statistics_round_trip_and_frozen_test_env():
    env = VecEnv("Pendulum-v1", num_envs=2, seed=0, normalize_obs=True, normalize_reward=True)
    env.reset()
    for _ in range(20):
        env.step(torch.zeros(2, 1))
    state = env.state_dict()
    other = VecEnv("Pendulum-v1", num_envs=2, seed=0, normalize_obs=True, normalize_reward=True)
    other.load_state_dict(state)
    assert np.allclose(other.obs_normalizer.rms.mean, env.obs_normalizer.rms.mean)
    assert other.reward_scaler.rms.count == env.reward_scaler.rms.count
    test = VecEnv("Pendulum-v1", num_envs=2, seed=0, normalize_obs=True, test=True)
    test.copy_normalization_from(env)
    before = test.obs_normalizer.rms.count
    test.reset()
    test.step(torch.zeros(2, 1))
    assert test.obs_normalizer.rms.count == before and test.reward_scaler is None


def test_box_actions_are_clipped_to_bounds():
    env = VecEnv("Pendulum-v1", num_envs=1, seed=0, vectorization="sync")
    env.reset()
    env.step(torch.tensor([[100.0]]))
    assert env.env.envs[0].unwrapped.last_u == pytest.approx(2.0)


def test_unknown_env_id_suggests_close_ids():
    with pytest.raises(InputError, match=r"'CartPol-v1' is not a registered gymnasium id.*did you mean 'CartPole-v1'"):
        VecEnv.create_factory("CartPol-v1", num_envs=1)


def make_short_cartpole(length: int = 3) -> gym.Env:
    return gym.wrappers.TimeLimit(gym.make("CartPole-v1").unwrapped, length)


def test_env_function_by_module_path():
    factory, _, _ = VecEnv.create_factory(
        "tests.envs.test_vec_env:make_short_cartpole", num_envs=2, env_kwargs={"length": 2}
    )
    env = factory(worker_index=0)
    env.reset()
    for _ in range(3):
        *_, valid = env.step(torch.zeros(2, dtype=torch.long))
    assert env.pop_episodes()[0][2] == 2 and not bool(valid[0])
    with pytest.raises(InputError, match=r"has no function 'nope'"):
        VecEnv.create_factory("tests.envs.test_vec_env:nope", num_envs=1)


def test_unsupported_observation_space_is_an_input_error():
    with pytest.raises(InputError, match=r"observation space Discrete\(500\); supported: Box"):
        VecEnv.create_factory("Taxi-v4", num_envs=1)


@pytest.mark.slow
def test_async_subprocess_envs_match_sync_for_the_same_seed():
    sync = _rollout(VecEnv("CartPole-v1", num_envs=2, seed=3, vectorization="sync"), steps=40)
    env = VecEnv("CartPole-v1", num_envs=2, seed=3, vectorization="async")
    try:
        assert torch.equal(_rollout(env, steps=40), sync)
    finally:
        env.close()
