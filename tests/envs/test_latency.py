"""pytorchrl/Latency-v0: the slow simulator's stand-in of the scale benchmarks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import pytorchrl.envs  # noqa: F401  (registers pytorchrl/* ids)
from pytorchrl.envs.latency import LatencyEnv

pytestmark = pytest.mark.timeout(30)


def test_it_shows_atari_shaped_frames_rewards_the_frame_index_and_ends_its_episodes():
    env = gym.make("pytorchrl/Latency-v0", step_ms=0, episode_steps=5, num_actions=3)
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    t = env.unwrapped.t
    rewards, ends = [], []
    for i in range(5):
        right = (t + i) % 3  # the rewarded action: the frame's index modulo the actions
        obs, reward, terminated, truncated, _ = env.step(right if i % 2 == 0 else (right + 1) % 3)
        rewards.append(reward)
        ends.append(terminated)
        assert not truncated
    assert rewards == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert ends == [False] * 4 + [True]


def test_seeds_start_episodes_at_their_own_frame_and_a_smaller_shape_is_allowed():
    starts = {LatencyEnv(step_ms=0).reset(seed=s)[0].tobytes() for s in range(20)}
    assert len(starts) > 1
    small = LatencyEnv(step_ms=0, obs_shape=(3,))
    assert small.reset(seed=0)[0].shape == (3,)


@pytest.mark.parametrize("kwargs", [{"step_ms": -1}, {"episode_steps": 0}, {"num_actions": 0}])
def test_impossible_settings_are_refused(kwargs):
    with pytest.raises(ValueError, match="LatencyEnv"):
        LatencyEnv(**kwargs)
