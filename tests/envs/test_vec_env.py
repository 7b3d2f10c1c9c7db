"""Vector envs: seeding, next-step autoreset bookkeeping, normalisation state, bad env ids."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl.envs import VecEnv
from pytorchrl.envs.making import RestartOnError
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


def stepped_pendulum(steps: int, seed: int = 0, **normalize: bool) -> VecEnv:
    """Two Pendulum envs, reset and stepped ``steps`` times (``normalize_obs=True``, ...)."""
    env = VecEnv("Pendulum-v1", num_envs=2, seed=seed, **normalize)
    env.reset()
    for _ in range(steps):
        env.step(torch.zeros(2, 1))
    return env


def test_normalisation_statistics_round_trip_and_frozen_test_env():
    env = stepped_pendulum(20, normalize_obs=True, normalize_reward=True)
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


def test_the_reward_scaler_samples_the_return_on_transitions_only():
    """The reset steps of next-step autoreset (``valid`` False, reward 0) add no sample of the
    discounted return: they pulled its variance toward 0 by one sample an episode."""
    env = VecEnv("CartPole-v1", num_envs=3, seed=0, normalize_reward=True)
    env.reset()
    prior = env.reward_scaler.rms.count
    transitions = resets = 0
    for _ in range(200):
        valid = env.step(torch.zeros(3, dtype=torch.long))[4]
        transitions += int(valid.sum())
        resets += int((~valid).sum())
    assert resets > 0  # CartPole pushed one way ends within a dozen steps
    assert env.reward_scaler.rms.count - prior == pytest.approx(transitions)


def test_a_resume_with_other_envs_starts_them_afresh_with_the_statistics_kept():
    """Saved envs that do not fit the new ones are not restored, and the run goes on: another
    ``num_envs`` with reward scaling (the saved per-env discounted returns were loaded whatever
    their length, and the first step failed to broadcast them), and another
    ``restart_failed_envs`` (one more layer per env, or a SyncVectorEnv for CartPole's native
    one: the snapshot's restore raised). A reset zeroes the scaler's returns, as SB3's does."""
    env = VecEnv("CartPole-v1", num_envs=2, seed=0, normalize_reward=True)
    _rollout(env, 20)
    state = env.state_dict()
    for other in (
        VecEnv("CartPole-v1", num_envs=3, seed=0, normalize_reward=True),
        VecEnv("CartPole-v1", num_envs=1, seed=0, normalize_reward=True),
        VecEnv("CartPole-v1", num_envs=2, seed=0, normalize_reward=True, restart_failed_envs=True),
    ):
        assert other.load_state_dict(state) is False  # not restored: reset with fresh seeds
        other.reset_from_state()
        assert other.reward_scaler.rms.count == env.reward_scaler.rms.count  # the statistics kept
        assert not other.reward_scaler.returns.any() and other.reward_scaler.returns.shape == (other.num_envs,)
        for _ in range(5):
            other.step(torch.zeros(other.num_envs, dtype=torch.long))
    same = VecEnv("CartPole-v1", num_envs=2, seed=0, normalize_reward=True)
    assert same.load_state_dict(state) is True  # built the same way: restored, returns and all
    np.testing.assert_array_equal(same.reward_scaler.returns, env.reward_scaler.returns)


def test_box_actions_are_clipped_to_bounds():
    env = VecEnv("Pendulum-v1", num_envs=1, seed=0, vectorization="sync")
    env.reset()
    env.step(torch.tensor([[100.0]]))
    assert env.env.envs[0].unwrapped.last_u == pytest.approx(2.0)


def test_unknown_env_id_suggests_close_ids():
    with pytest.raises(InputError, match=r"'CartPol-v1' is not a registered gymnasium id.*did you mean 'CartPole-v1'"):
        VecEnv.create_factory("CartPol-v1", num_envs=1)


@pytest.mark.parametrize("env_id", [":make_env", ".envs:make_env"])
def test_a_module_path_without_an_absolute_module_is_one_line(env_id):
    with pytest.raises(InputError, match=rf"env.env_id = '{re.escape(env_id)}': 'module:function' needs an absolute module name"):
        VecEnv.create_factory(env_id, num_envs=1)


def _same_step_vector_cartpole(num_envs: int = 1, **kwargs) -> gym.vector.VectorEnv:
    """A native vector env that resets in the same step (gymnasium's other autoreset mode)."""
    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def test_an_explicit_native_vectorization_refuses_a_native_env_that_resets_in_the_same_step():
    """``auto`` falls back to gymnasium's sync vector env there; ``native``, asked for by name, says why not."""
    env_id = "pytorchrl-test/SameStepCartPole-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point="gymnasium.envs.classic_control:CartPoleEnv", vector_entry_point=_same_step_vector_cartpole)
    with pytest.raises(InputError, match=r"env.vectorization = 'native': .* autoreset mode 'SameStep'.*use 'auto' or 'sync'"):
        VecEnv(env_id, num_envs=2, seed=0, vectorization="native")
    env = VecEnv(env_id, num_envs=2, seed=0, vectorization="auto")
    assert isinstance(env.env, gym.vector.SyncVectorEnv) and env.env.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    env.close()


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


class _TupleObsEnv(gym.Env):
    observation_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))
    action_space = gym.spaces.Discrete(2)


def tuple_obs_env() -> gym.Env:
    return _TupleObsEnv()


def test_unsupported_observation_space_is_an_input_error():
    with pytest.raises(InputError, match=r"the observation space is Tuple\(Discrete\(2\), Discrete\(3\)\); supported: Box, Discrete, or a Dict of those"):
        VecEnv.create_factory("tests.envs.test_vec_env:tuple_obs_env", num_envs=1)


@pytest.mark.slow
def test_async_subprocess_envs_match_sync_for_the_same_seed():
    sync = _rollout(VecEnv("CartPole-v1", num_envs=2, seed=3, vectorization="sync"), steps=40)
    env = VecEnv("CartPole-v1", num_envs=2, seed=3, vectorization="async")
    try:
        assert torch.equal(_rollout(env, steps=40), sync)
    finally:
        env.close()


# ------------------------------------------------------------------ restart_failed_envs

CRASHING = "benchmarks.envs:crashing_cartpole"


def _crashing(num_envs: int = 2, crash_after_steps: int = 7, seed: int = 0, **kwargs) -> VecEnv:
    return VecEnv(
        CRASHING, num_envs=num_envs, seed=seed, restart_failed_envs=True,
        env_kwargs={"crash_mode": "exception", "crash_after_steps": crash_after_steps}, **kwargs,
    )


def test_failed_step_is_cut_as_truncation_at_the_last_observation_and_counted():
    env = _crashing(num_envs=2, crash_after_steps=7)
    last = env.reset()
    zeros = torch.zeros(2, dtype=torch.long)
    for step in range(1, 8):
        obs, reward, term, trunc, valid = env.step(zeros)
        if step < 7:
            last = obs
    # both envs crash at their 7th step (CartPole pushed left lasts longer than 7 steps)
    assert trunc.all() and not term.any() and not valid.any() and torch.equal(reward, torch.zeros(2))
    assert torch.equal(obs, last)
    assert env.pop_env_restarts() == 2 and env.pop_env_restarts() == 0 and env.env_restarts_total == 2
    assert env.pop_episodes() == []  # cut episodes are partial: no return statistic
    *_, valid = env.step(zeros)  # the next-step autoreset of the new envs
    assert not valid.any()
    _, _, _, _, valid = env.step(zeros)
    assert valid.all() and env.pop_env_restarts() == 0


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_many_steps_with_recurring_crashes_never_raise(vectorization):
    env = _crashing(num_envs=3, crash_after_steps=5, vectorization=vectorization)
    try:
        env.reset()
        g = torch.Generator().manual_seed(0)
        for _ in range(200):
            env.step(torch.randint(0, 2, (3,), generator=g))
        # every env crashes at step 5 of each life (4 steps, the crash, the reset step): 33 times in 200
        assert env.pop_env_restarts() == 3 * 33
        assert env.pop_episodes() == []  # CartPole cannot fall in 4 steps: every episode was cut
    finally:
        env.close()


def test_restarts_are_reproducible_for_a_seed():
    a = _rollout(_crashing(num_envs=2, crash_after_steps=4, seed=5), steps=40)
    b = _rollout(_crashing(num_envs=2, crash_after_steps=4, seed=5), steps=40)
    c = _rollout(_crashing(num_envs=2, crash_after_steps=4, seed=6), steps=40)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_without_restart_the_env_exception_propagates():
    from benchmarks.envs import EnvCrash

    env = VecEnv(CRASHING, num_envs=1, vectorization="sync", env_kwargs={"crash_mode": "exception", "crash_after_steps": 2})
    env.reset()
    env.step(torch.zeros(1, dtype=torch.long))
    with pytest.raises(EnvCrash):
        env.step(torch.zeros(1, dtype=torch.long))


def test_native_vectorization_cannot_restart_and_auto_falls_back_to_sync():
    with pytest.raises(InputError, match=r"env.vectorization = 'native' cannot be combined with env.restart_failed_envs"):
        VecEnv("CartPole-v1", num_envs=2, vectorization="native", restart_failed_envs=True)
    env = VecEnv("CartPole-v1", num_envs=2, restart_failed_envs=True)
    assert isinstance(env.env, gym.vector.SyncVectorEnv)


class _FlakyResetEnv(gym.Wrapper):
    """CartPole whose next ``resets_to_fail`` resets (counted over every instance) raise."""

    resets_to_fail = 0

    def reset(self, **kwargs):
        if _FlakyResetEnv.resets_to_fail > 0:
            _FlakyResetEnv.resets_to_fail -= 1
            raise RuntimeError("flaky reset")
        return super().reset(**kwargs)


def make_flaky_reset_cartpole() -> gym.Env:
    return _FlakyResetEnv(gym.make("CartPole-v1"))


def test_failed_reset_is_retried_on_new_envs_then_raises():
    env_id = "tests.envs.test_vec_env:make_flaky_reset_cartpole"
    expected = VecEnv("CartPole-v1", num_envs=1, seed=0, vectorization="sync").reset()
    try:
        _FlakyResetEnv.resets_to_fail = 2  # the first env and its first replacement fail
        env = VecEnv(env_id, num_envs=1, seed=0, restart_failed_envs=True)
        assert torch.equal(env.reset(), expected)  # the reset seed is kept across replacements
        assert env.pop_env_restarts() == 2
        _FlakyResetEnv.resets_to_fail = 4  # the first env and all 3 replacements fail
        env = VecEnv(env_id, num_envs=1, seed=0, restart_failed_envs=True)
        with pytest.raises(RuntimeError, match=r"3 new envs failed to reset in a row; last error: RuntimeError\('flaky reset'\)"):
            env.reset()
    finally:
        _FlakyResetEnv.resets_to_fail = 0


def test_factory_passes_restart_to_train_and_test_envs():
    factory, _, _ = VecEnv.create_factory(
        CRASHING, num_envs=2, num_test_envs=3, vectorization="auto", restart_failed_envs=True,
        env_kwargs={"crash_after_steps": 3}, eval_env_kwargs={},
    )
    for env in (factory(worker_index=0), factory(worker_index=0, test=True)):
        assert all(isinstance(e, RestartOnError) for e in env.env.envs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_envs": -1}, r"'env.num_envs' = -1 is out of range: must be >= 1"),
        ({"num_envs": 2.5}, r"'env.num_envs' = 2.5 has the wrong type: expected int"),
        ({"num_envs": 2, "seed": -1}, r"'run.seed' = -1 is out of range: must be >= 0"),
        ({"num_envs": 2, "num_test_envs": 0}, r"'env.num_test_envs' = 0 is out of range: must be >= 1"),  # was replaced by num_envs silently
        ({"num_envs": 2, "env_kwargs": [1]}, r"'env.env_kwargs' = \[1\] has the wrong type: expected dict"),
        ({"num_envs": 2, "bogus": 1}, r"VecEnv.create_factory: unknown argument 'bogus'; allowed: action_mask, atari"),
    ],
)
def test_a_factory_built_by_hand_checks_its_arguments_as_a_config_does(kwargs, message):
    from pytorchrl.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        VecEnv.create_factory("CartPole-v1", **kwargs)


def test_envs_reset_after_a_load_normalise_with_the_loaded_statistics_alone():
    """``pytorchrl evaluate`` loads a checkpoint's statistics into envs that then reset: merging
    the reset's observations made it evaluate with other statistics than the run's layout."""
    trained = stepped_pendulum(10, normalize_obs=True)
    loaded = VecEnv("Pendulum-v1", num_envs=2, seed=1, normalize_obs=True)
    assert loaded.load_state_dict({"obs_rms": trained.obs_normalizer.rms.state_dict()}) is False
    loaded.reset_from_state()
    assert loaded.obs_normalizer.rms.count == trained.obs_normalizer.rms.count and not loaded.obs_normalizer.frozen
    loaded.step(torch.zeros(2, 1))
    assert loaded.obs_normalizer.rms.count == trained.obs_normalizer.rms.count + 2  # training goes on merging
