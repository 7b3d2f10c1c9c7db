"""Atari: ale-py registration, the preprocessing, and raw whole-game scores in both vector envs."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
import torch

from pytorchrl.config import AtariConfig, load_config
from pytorchrl.envs.atari import register_atari
from pytorchrl.envs.making import check_env_id
from pytorchrl.envs.vec_env import VecEnv
from pytorchrl.utils.errors import InputError
from tests.conftest import CONFIGS

ATARI = dataclasses.asdict(AtariConfig())


def _play_games(env: VecEnv, games: int, max_steps: int = 20_000) -> tuple[list[tuple[int, float, int]], list[list[float]], np.ndarray]:
    """Random play until ``games`` games finished: ``(episodes, rewards per env, learner episode ends per env)``."""
    rng = np.random.default_rng(0)
    env.reset()
    finished: list[tuple[int, float, int]] = []
    rewards: list[list[float]] = [[] for _ in range(env.num_envs)]
    ends = np.zeros(env.num_envs, dtype=np.int64)
    for _ in range(max_steps):
        _, reward, terminated, truncated, valid = env.step_arrays(rng.integers(env.action_space.n, size=env.num_envs))
        for i in range(env.num_envs):
            if valid[i]:
                rewards[i].append(float(reward[i]))
        ends += terminated | truncated
        finished += env.pop_episodes()
        if len(finished) >= games:
            return finished, rewards, ends
    raise AssertionError(f"fewer than {games} games finished in {max_steps} steps")


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("vectorization", ["native", "sync"])
def test_training_envs_clip_rewards_and_end_on_lives_but_report_raw_whole_games(vectorization):
    env = VecEnv("ALE/Breakout-v5", num_envs=1, seed=0, vectorization=vectorization, atari=ATARI)
    try:
        obs = env.reset()
        assert obs.shape == (1, 4, 84, 84) and obs.dtype == torch.uint8
        episodes, rewards, ends = _play_games(env, 1)
    finally:
        env.close()
    assert set(rewards[0]) <= {-1.0, 0.0, 1.0}  # clipped for the learner
    assert ends[0] == 5  # Breakout has 5 lives: 5 learner episodes in one game
    # one game, every step of it: the learner's steps and the masked one after each of 4 lives lost
    assert len(episodes) == 1 and episodes[0][2] == len(rewards[0]) + 4
    assert episodes[0][1] >= sum(rewards[0]) and float(episodes[0][1]).is_integer()


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("vectorization", ["native", "sync"])
def test_evaluation_envs_play_whole_games_with_raw_rewards(vectorization):
    env = VecEnv("ALE/Breakout-v5", num_envs=2, seed=0, test=True, vectorization=vectorization, atari=ATARI)
    try:
        episodes, rewards, ends = _play_games(env, 2)
    finally:
        env.close()
    for index, score, length in episodes[:2]:
        assert ends[index] >= 1 and length >= 5  # ended by the game, not by a life
        assert score == sum(rewards[index][:length])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_pong_scores_are_whole_games_of_21_points():
    env = VecEnv("ALE/Pong-v5", num_envs=2, seed=0, vectorization="native", atari=ATARI)
    try:
        episodes, rewards, _ = _play_games(env, 1)
    finally:
        env.close()
    index, score, length = episodes[0]
    assert score == sum(rewards[index][:length]) and -21 <= score <= -15  # random play loses a whole game


def test_an_ale_id_without_ale_py_names_the_packages(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py raises ImportError
    # the packages by name: `pip install 'pytorchrl[atari]'` would fetch PyPI's unrelated pytorchrl
    with pytest.raises(InputError, match=r"needs ale-py, which is not installed: pip install ale-py opencv-python-headless \(in a checkout"):
        register_atari("ALE/Qbert-v5")
    assert register_atari() is False


def test_ale_ids_are_registered_on_demand():
    check_env_id("ALE/Pong-v5")  # no "not a registered gymnasium id"


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("config", "overrides"),
    [
        ("appo/atari_pong.yaml", ["scheme.num_col_workers=2", "storage.num_steps=16", "run.target_steps=128"]),
        ("dqn/atari_pong.yaml", ["algorithm.start_steps=64", "algorithm.update_every=8", "storage.capacity=1000", "run.target_steps=128"]),
    ],
    ids=["appo_2_remote_async", "rainbow_dqn"],
)
def test_atari_configs_of_other_schemes_train(ray_session, tmp_path, config, overrides):
    from pytorchrl.learner import Learner

    cfg = load_config(CONFIGS / config, [*overrides, "env.num_envs=2", "run.eval_every=0", "run.eval_episodes=1", "env.num_test_envs=1",
                                         "env.max_episode_steps=100", "run.torch_threads=1"])
    learner = Learner.from_config(cfg, run_dir=tmp_path / "run", progress=False)
    try:
        summary = learner.train()
    finally:
        learner.close()
    assert summary["env_steps"] >= 128 and learner.updates > 0
    assert float(summary["final_eval_return_mean"]).is_integer()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_atari_ppo_config_trains_and_evaluates_raw_scores(tmp_path):
    from pytorchrl.evaluation import evaluate_checkpoint
    from pytorchrl.learner import Learner

    cfg = load_config(
        CONFIGS / "ppo/atari_pong.yaml",
        ["storage.num_steps=16", "env.num_envs=2", "run.target_steps=64", "run.eval_every=0", "run.eval_episodes=1", "env.num_test_envs=1",
         "env.max_episode_steps=200", "run.torch_threads=1"],
    )
    learner = Learner.from_config(cfg, run_dir=tmp_path / "run", progress=False)
    try:
        summary = learner.train()
    finally:
        learner.close()
    assert summary["env_steps"] == 64 and summary["final_eval_return_mean"] is not None
    result = evaluate_checkpoint(tmp_path / "run", episodes=1, video_dir=tmp_path / "video")
    assert (tmp_path / "video" / "episode.gif").stat().st_size > 0
    assert float(result["returns"][0]).is_integer()  # a raw score: whole points


def test_a_dict_of_uint8_vectors_is_stored_as_floats():
    import gymnasium as gym

    from pytorchrl.agent.actors.networks import EncoderSpec
    from pytorchrl.utils.spaces import obs_layout, pack_dict

    space = gym.spaces.Dict({"counts": gym.spaces.Box(0, 255, (3,), np.uint8)})
    assert obs_layout(space).dtype == np.float32  # a uint8 row would reach the MLP as bytes
    packed = torch.from_numpy(pack_dict(space, {"counts": np.array([[1, 2, 3]], np.uint8)}, 1))
    assert EncoderSpec(hidden_sizes=(4,)).build(space)(packed).shape == (1, 4)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_resumed_atari_envs_get_fresh_seeds():
    env = VecEnv("ALE/Breakout-v5", num_envs=1, seed=0, vectorization="native", atari=ATARI)
    try:
        first = env.reset()
        _play_games(env, 1)
        state = env.state_dict()
    finally:
        env.close()
    resumed = VecEnv("ALE/Breakout-v5", num_envs=1, seed=0, vectorization="native", atari=ATARI)
    try:
        assert resumed.load_state_dict(state) is False  # ALE's state is in C: no snapshot
        again = resumed.reset_from_state()
        assert state["reseeds"] == 0 and resumed.state_dict()["reseeds"] == 1
        assert resumed._seeds != env._seeds and again.shape == first.shape  # not the streams the run started with
    finally:
        resumed.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("vectorization", ["native", "sync"])
def test_fire_reset_starts_breakout_without_the_agent_pressing_fire(vectorization):
    """Breakout stands still until FIRE: with ``env.atari.fire_reset`` the ball is launched at
    every reset, so a policy that only ever plays NOOP loses its first life; without it nothing
    happens in the same 300 steps. Without sticky actions: ale-py's native press is one frame,
    which a sticky NOOP can swallow (the sync wrapper holds FIRE for a whole agent step)."""
    lost = {}
    for fire in (True, False):
        atari = {**ATARI, "fire_reset": fire, "repeat_action_probability": 0.0}
        env = VecEnv("ALE/Breakout-v5", num_envs=1, seed=0, vectorization=vectorization, atari=atari)
        try:
            env.reset()
            ends = 0
            for _ in range(300):
                _, _, terminated, truncated, _ = env.step_arrays(np.zeros(1, dtype=np.int64))
                ends += int(terminated[0] | truncated[0])
            lost[fire] = ends
        finally:
            env.close()
    assert lost[True] >= 1 and lost[False] == 0, lost


@pytest.mark.timeout(60)
def test_ale_keywords_that_the_native_vector_env_lacks_take_gymnasiums_and_bad_ones_are_one_line():
    """``env.env_kwargs`` that gym.make takes and ale-py's vector env does not (``mode``) make
    ``auto`` build gymnasium's vector env; ``native`` refuses them, naming what it takes. Keywords
    that ``env.atari`` sets, and RAM observations (the preprocessing reads the screen), are one
    line naming the key to set instead."""
    env = VecEnv("ALE/Pong-v5", num_envs=1, seed=0, atari=ATARI, env_kwargs={"mode": 0})
    try:
        assert env.reset().shape == (1, 4, 84, 84)
    finally:
        env.close()
    for kwargs, vectorization, message in [
        ({"mode": 0}, "native", r"^env.env_kwargs 'mode': ale-py's vector env \(env.vectorization = 'native'\) does not take it \(it takes .*grayscale"),
        ({"frameskip": 2}, "auto", r"^env.env_kwargs 'frameskip' is env.atari.frame_skip's to set: set env.atari.frame_skip instead$"),
        ({"obs_type": "ram"}, "sync", r"^env.env_kwargs obs_type 'ram': .* reads the screen; allowed: 'rgb' \(the default\) or 'grayscale'$"),
    ]:
        with pytest.raises(InputError, match=message):
            VecEnv("ALE/Pong-v5", num_envs=1, seed=0, atari=ATARI, env_kwargs=kwargs, vectorization=vectorization)
