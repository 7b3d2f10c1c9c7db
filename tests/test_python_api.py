"""The Python API as a newcomer uses it (README, "The Python API"): configs and factories built in
Python get the checks a config file gets, hand-built schemes are reproducible, run directories
are not mixed, an env registered in the script reaches remote workers, and a trained policy
answers ``predict`` like Stable-Baselines3's ``model.predict``."""

from __future__ import annotations

import dataclasses
import re
import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch

from pytorchrl import PPO, EncoderSpec, GAEBuffer, Learner, OnPolicyActor, RunConfig, Scheme, SchemeConfig, VecEnv
from pytorchrl.config import ConfigError, check_section, checked, from_dict, load_config
from pytorchrl.evaluation import load_learner
from pytorchrl.utils.errors import CheckpointError, InputError
from tests.conftest import CONFIGS

CARTPOLE = CONFIGS / "ppo" / "cartpole.yaml"
SMALL = ["env.num_envs=2", "env.num_test_envs=1", "storage.num_steps=16", "run.eval_every=0", "run.eval_episodes=1"]


def _hand_built(seed: int, storage: dict | None = None) -> Scheme:
    """The README's scheme from the components' factories (``storage``: changes to the storage factory's keywords)."""
    env_factory, obs_space, action_space = VecEnv.create_factory("CartPole-v1", num_envs=2, seed=seed)
    keywords = {"num_steps": 16, "num_envs": 2, "obs_shape": obs_space.shape, "action_shape": (), "discrete": True, **(storage or {})}
    return Scheme(
        env_factory=env_factory,
        actor_factory=OnPolicyActor.create_factory(obs_space, action_space, encoder=EncoderSpec(hidden_sizes=(16,))),
        algo_factory=PPO.create_factory(lr=1e-3, num_epochs=1, minibatch_size=32),
        storage_factory=GAEBuffer.create_factory(**keywords),
        seed=seed,
    )


def test_a_config_changed_in_python_is_checked_as_a_file_is():
    config = load_config(CARTPOLE)
    assert checked(config) == config
    sync = dataclasses.replace(config, scheme=dataclasses.replace(config.scheme, col_communication="sync"))
    with pytest.raises(ConfigError, match=r"scheme\.col_communication.*'sync'"):  # it once trained asynchronously
        Learner.from_config(sync)
    with pytest.raises(ConfigError, match=r"run\.eval_episodes"):  # it once divided by zero at the first evaluation
        check_section(RunConfig(eval_episodes=0), "run.")
    with pytest.raises(ConfigError, match=r"run\.target_steps"):
        check_section(RunConfig(target_steps="x"), "run.")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"expected a pytorchrl\.config\.Config.*dict"):
        Learner.from_config({"run": {"seed": 1}})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="a config is a mapping of sections"):
        from_dict(["run.seed=1"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"a list of 'section.key=value' strings.*pass \['run.seed=3'\]"):
        load_config(CARTPOLE, "run.seed=3")  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"env\.env_id must be a string"):
        VecEnv.create_factory(lambda: gym.make("CartPole-v1"), num_envs=1)  # type: ignore[arg-type]


def test_factories_and_sections_built_in_python_refuse_bad_values():
    with pytest.raises(ConfigError, match=r"algorithm\.num_epochs"):  # a round without minibatches never ended
        PPO.create_factory(num_epochs=0)
    with pytest.raises(ConfigError, match=r"algorithm\.lr"):
        PPO.create_factory(lr="fast")
    with pytest.raises(ConfigError, match=r"scheme\.col_communication.*'sync'"):  # before any factory is called or Ray started
        Scheme(env_factory=None, actor_factory=None, algo_factory=None, storage_factory=None,  # type: ignore[arg-type]
               config=SchemeConfig(num_col_workers=2, col_communication="sync"))
    with pytest.raises(ConfigError, match=r"scheme\.inference"):
        Scheme(env_factory=None, actor_factory=None, algo_factory=None, storage_factory=None,  # type: ignore[arg-type]
               config=SchemeConfig(inference="central"))
    with pytest.raises(InputError, match="unknown encoder 'transformer'; allowed: auto, mlp"):  # every bad input is an InputError
        OnPolicyActor(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), encoder=EncoderSpec(kind="transformer"))
    with pytest.raises(ConfigError, match=r"run\.eval_episodes"):  # checked before the scheme is touched
        Learner(None, run=RunConfig(eval_episodes=0))  # type: ignore[arg-type]
    factories = {name: (lambda *a, **k: None) for name in ("env_factory", "actor_factory", "algo_factory", "storage_factory")}
    for kwargs, message in [
        ({"device": "gpu"}, r"'run.device' = 'gpu' is not a device of this machine; it has: cpu"),
        ({"torch_threads": 0}, r"'run.torch_threads' = 0 is out of range: must be >= 1"),
        ({"seed": "a"}, r"'run.seed' = 'a' has the wrong type: expected int"),
    ]:
        with pytest.raises(ConfigError, match=message):  # the run's keys Scheme takes, before a factory is called
            Scheme(**factories, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_steps": 0}, r"GAEBuffer.create_factory: num_steps = 0: must be a whole number in 1..1e\+06"),  # a round of 0 steps never ended
        ({"num_envs": 2.5}, r"num_envs = 2.5: must be a whole number"),
        ({"gamma": 1.5}, r"gamma = 1.5: must be a number in 0..1"),
        ({"gae_lambda": -0.1}, r"gae_lambda = -0.1: must be a number in 0..1"),
        ({"obs_shape": "4"}, r"obs_shape = '4': must be a tuple of sizes >= 1"),
        ({"num_step": 16}, r"GAEBuffer.create_factory: unknown argument 'num_step'; allowed: .*num_steps"),
    ],
)
def test_a_storage_factory_checks_its_arguments_where_it_is_made(kwargs, message):
    good = {"num_steps": 16, "num_envs": 2, "obs_shape": (4,), "action_shape": (), "discrete": True, "gamma": 0.98, "gae_lambda": 0.8}
    GAEBuffer.create_factory(**good)
    with pytest.raises(InputError, match=message):
        GAEBuffer.create_factory(**{**good, **kwargs})


@pytest.mark.slow
@pytest.mark.parametrize(("storage", "message"), [
    ({"num_envs": 4}, "GAEBuffer was made with num_envs=4, but the envs ('CartPole-v1') need num_envs=2"),
    ({"discrete": False}, "GAEBuffer was made with discrete=False, but the envs ('CartPole-v1') need discrete=True"),
    ({"obs_shape": (5,)}, "GAEBuffer was made with obs_shape=(5,), but the envs ('CartPole-v1') need obs_shape=(4,)"),
])
def test_a_storage_factory_made_for_other_envs_is_one_line(storage, message):
    """It once failed at the first rollout, 14-17 frames deep in numpy or torch."""
    with pytest.raises(InputError, match=re.escape(message)):
        _hand_built(0, storage)


def test_hand_built_parts_that_do_not_belong_together_are_one_line():
    """An actor made for other spaces (swapped, or another env's), and an algorithm given an
    actor or a storage of another kind: refused where the parts meet, not by torch inside the
    first update."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    from pytorchrl.agent.storages.on_policy.vtrace_buffer import VTraceBuffer

    env_factory, obs_space, action_space = VecEnv.create_factory("CartPole-v1", num_envs=2, seed=0)
    rollout = {"num_steps": 16, "num_envs": 2, "obs_shape": obs_space.shape, "action_shape": (), "discrete": True}
    parts = {
        "env_factory": env_factory, "actor_factory": OnPolicyActor.create_factory(obs_space, action_space),
        "algo_factory": PPO.create_factory(), "storage_factory": GAEBuffer.create_factory(**rollout),
    }
    pendulum = gym.make("Pendulum-v1")
    cases = [
        ({"actor_factory": OnPolicyActor.create_factory(action_space, obs_space)}, r"OnPolicyActor was made for observation_space Discrete\(2\), but the envs \('CartPole-v1'\) have Box"),
        ({"actor_factory": OnPolicyActor.create_factory(pendulum.observation_space, pendulum.action_space)}, r"was made for observation_space Box\(.*\(3,\)"),
        ({"algo_factory": ALGORITHMS["impala"].create_factory()}, r"IMPALA takes a storage made by VTraceBuffer.create_factory; the scheme's storage_factory makes GAEBuffer"),
        ({"storage_factory": VTraceBuffer.create_factory(**rollout)}, r"PPO takes a storage made by GAEBuffer.create_factory; the scheme's storage_factory makes VTraceBuffer"),
        ({"algo_factory": ALGORITHMS["dqn"].create_factory()}, r"DQN takes an actor made by OffPolicyActor.create_factory; the scheme's actor_factory makes OnPolicyActor"),
    ]
    for change, message in cases:
        with pytest.raises(InputError, match=message):
            Scheme(**{**parts, **change})


def test_a_return_setting_given_to_the_algorithm_but_not_its_storage_is_one_line():
    """The storage makes the returns with its own gamma, gae_lambda and n_step: one chosen for the
    algorithm alone once trained with the storage's value and said nothing. An algorithm left at
    its defaults takes the storage's (the README's example), and agreeing values pass."""
    from pytorchrl.agent.actors.off_policy import OffPolicyActor
    from pytorchrl.agent.algorithms import ALGORITHMS
    from pytorchrl.agent.storages.off_policy.replay_storage import ReplayStorage
    from pytorchrl.agent.storages.on_policy.vtrace_buffer import VTraceBuffer

    env_factory, obs_space, action_space = VecEnv.create_factory("CartPole-v1", num_envs=2, seed=0)
    rollout = {"num_steps": 16, "num_envs": 2, "obs_shape": obs_space.shape, "action_shape": (), "discrete": True}
    on_policy = {"env_factory": env_factory, "actor_factory": OnPolicyActor.create_factory(obs_space, action_space)}
    off_policy = {"env_factory": env_factory, "actor_factory": OffPolicyActor.create_factory(obs_space, action_space)}
    dqn, replay = ALGORITHMS["dqn"], {"capacity": 1000, "start_steps": 64, **rollout}
    refused = [
        ({**on_policy, "algo_factory": PPO.create_factory(gamma=0.9), "storage_factory": GAEBuffer.create_factory(**rollout)},
         "PPO was given gamma=0.9, but its storage GAEBuffer was made with gamma=0.99, and the storage makes the returns with its own: "
         "pass gamma=0.9 to GAEBuffer.create_factory too"),
        ({**on_policy, "algo_factory": PPO.create_factory(dataclasses.replace(PPO.config_class(), gae_lambda=0.8)),
          "storage_factory": GAEBuffer.create_factory(**rollout)}, "PPO was given gae_lambda=0.8, but its storage GAEBuffer was made with gae_lambda=0.95"),
        ({**off_policy, "algo_factory": dqn.create_factory(rainbow=True), "storage_factory": ReplayStorage.create_factory(**replay)},
         "DQN was given n_step=3, but its storage ReplayStorage was made with n_step=1"),
        ({**on_policy, "algo_factory": PPO.create_factory(gamma=0.99), "storage_factory": GAEBuffer.create_factory(gamma=0.98, **rollout)},
         "PPO was given gamma=0.99, but its storage GAEBuffer was made with gamma=0.98"),
    ]
    for parts, message in refused:
        with pytest.raises(InputError, match=re.escape(message)):
            Scheme(**parts)
    accepted = [
        {**on_policy, "algo_factory": PPO.create_factory(), "storage_factory": GAEBuffer.create_factory(gamma=0.98, gae_lambda=0.8, **rollout)},
        {**on_policy, "algo_factory": PPO.create_factory(gamma=0.9), "storage_factory": GAEBuffer.create_factory(gamma=0.9, **rollout)},
        {**off_policy, "algo_factory": dqn.create_factory(n_step=3), "storage_factory": ReplayStorage.create_factory(n_step=3, **replay)},
        # V-trace's and replayed sequences' returns are the algorithm's own: the storage's gamma is no setting of theirs
        {**on_policy, "algo_factory": ALGORITHMS["impala"].create_factory(gamma=0.9), "storage_factory": VTraceBuffer.create_factory(**rollout)},
    ]
    for parts in accepted:
        Scheme(**parts).close()  # built: not refused


def test_a_scheme_factory_that_is_not_callable_is_one_line():
    env_factory, obs_space, action_space = VecEnv.create_factory("CartPole-v1", num_envs=2, seed=0)
    with pytest.raises(InputError, match=r"^Scheme\(algo_factory=None\): algo_factory must be a callable, e\.g\. what PPO\.create_factory\(\.\.\.\) returns$"):
        Scheme(
            env_factory=env_factory, actor_factory=OnPolicyActor.create_factory(obs_space, action_space), algo_factory=None,
            storage_factory=GAEBuffer.create_factory(num_steps=16, num_envs=2, obs_shape=obs_space.shape, action_shape=(), discrete=True),
        )


def test_a_closed_learner_refuses_to_train_and_a_running_one_to_train_twice(tmp_path):
    """``train`` while ``train`` runs (another thread) is refused, the running one finishes as
    alone; after ``close`` training is refused in one line naming how to continue, and closing
    again does nothing."""
    import threading

    learner = Learner.from_config(load_config(CARTPOLE, [*SMALL, "run.target_steps=1000000"]), run_dir=tmp_path / "run", progress=False)
    result: list[dict] = []
    thread = threading.Thread(target=lambda: result.append(learner.train(stop_signals=False)))
    thread.start()
    while learner.updates == 0 and thread.is_alive():
        pass
    try:
        with pytest.raises(RuntimeError, match=r"^Learner.train\(\) is already running"):
            learner.train(stop_signals=False)
    finally:
        learner.request_stop()
        thread.join(timeout=60)
    assert result and result[0]["stop_reason"] == "interrupted" and result[0]["env_steps"] == learner.env_steps
    learner.close()
    learner.close()
    checkpoints = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    for call in (learner.train, learner.step):
        with pytest.raises(RuntimeError, match=r"the learner is closed .*; continue the run with Learner.resume\("):
            call()
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == checkpoints  # nothing written after close
    with pytest.raises(RuntimeError, match=r"^Scheme.add_collection_workers\(\): the scheme is closed$"):
        learner.scheme.add_collection_workers(1)


@pytest.mark.slow
def test_hand_built_schemes_of_one_seed_start_from_the_same_weights():
    def weights(seed: int) -> list[torch.Tensor]:
        scheme = _hand_built(seed)
        try:
            return [w.clone() for w in scheme.algorithm.get_weights().values()]
        finally:
            scheme.close()

    first, again, other = weights(1), weights(1), weights(2)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.slow
def test_from_config_refuses_a_directory_that_holds_a_run(tmp_path):
    config = load_config(CARTPOLE, [*SMALL, "run.target_steps=64", "run.checkpoint_every=64", "run.log_every=32"])
    learner = Learner.from_config(config, run_dir=tmp_path, progress=False)
    try:
        learner.train()
    finally:
        learner.close()
    before = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    with pytest.raises(InputError, match=r"already holds a run .*pytorchrl train --resume .*Learner.resume"):
        Learner.from_config(dataclasses.replace(config, run=dataclasses.replace(config.run, seed=7)), run_dir=tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == before and "seed: 0" in (tmp_path / "config.yaml").read_text()
    shutil.rmtree(tmp_path / "checkpoints")  # as a run killed before its first checkpoint leaves it
    with pytest.raises(InputError, match="stopped before its first checkpoint"):
        Learner.from_config(config, run_dir=tmp_path, progress=False)


def test_a_run_directory_in_rays_copy_of_a_jobs_working_directory_is_refused(tmp_path):
    """`ray job submit --working-dir . -- pytorchrl train CONFIG` once wrote the run where Ray
    deletes it (the job's cwd is Ray's copy of the working directory)."""
    from pytorchrl.run_dir import check_new_run_dir

    copy = tmp_path / "session_1" / "runtime_resources" / "working_dir_files" / "_ray_pkg_0123"
    with pytest.raises(InputError, match="inside Ray's temporary copy of the job's working directory"):
        check_new_run_dir(copy / "runs" / "ppo-cartpole", "run directory")
    assert check_new_run_dir(tmp_path / "runs" / "ppo-cartpole", "run directory") == tmp_path / "runs" / "ppo-cartpole"


def test_a_failed_worker_start_names_the_exception_it_raised():
    from ray.exceptions import ActorDiedError, RayTaskError

    from pytorchrl.scheme.base.worker_set import failure_reason

    message = "env.env_id = 'Mine-v0' is not a registered gymnasium id nor 'module:function'"
    cause = RayTaskError("_WorkerHost.__init__", f"Traceback (most recent call last):\n  ...\npytorchrl.utils.errors.InputError: {message}", InputError(message))
    assert failure_reason(ActorDiedError(cause)) == f"it raised InputError as it started: {message}"
    assert failure_reason(ActorDiedError()) == "its process died"


class Corridor(gym.Env):
    """Step right to the end of a corridor (reward 1 there)."""

    observation_space = gym.spaces.Box(0, 1, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return np.eye(4, dtype=np.float32)[self.pos], {}

    def step(self, action):
        self.pos = min(3, max(0, self.pos + (1 if action == 1 else -1)))
        return np.eye(4, dtype=np.float32)[self.pos], float(self.pos == 3), self.pos == 3, False, {}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_env_registered_in_the_script_reaches_remote_workers(ray_session):
    """A remote worker's fresh interpreter does not have the script's gym.register; the env
    factory carries the registration there (it once failed with "its process died")."""
    env_id = "PytorchrlTestCorridor-v0"
    gym.register(env_id, entry_point=Corridor, max_episode_steps=20)
    try:
        raw = {"env": {"env_id": env_id, "num_envs": 2, "num_test_envs": 1}, "storage": {"num_steps": 16},
               "algorithm": {"name": "ppo", "num_epochs": 1, "minibatch_size": 32},
               "run": {"target_steps": 64, "eval_every": 0, "eval_episodes": 1, "log_every": 32},
               "scheme": {"num_col_workers": 1, "col_worker_resources": {"num_cpus": 0.1}, "max_worker_restarts": 0}}
        learner = Learner.from_config(from_dict(raw), progress=False)
        try:
            summary = learner.train()
        finally:
            learner.close()
        assert summary["env_steps"] == 64 and learner.worker_restarts == 0
    finally:
        gym.registry.pop(env_id, None)


@pytest.fixture(scope="module")
def pendulum_run(tmp_path_factory):
    """A few updates of PPO on Pendulum with observation normalisation, saved."""
    run_dir = tmp_path_factory.mktemp("predict") / "run"
    config = load_config(CONFIGS / "ppo" / "pendulum.yaml", [*SMALL, "run.target_steps=128", "run.checkpoint_every=128", "run.log_every=64"])
    assert config.env.normalize_obs
    learner = Learner.from_config(config, run_dir=run_dir, progress=False)
    learner.train()
    yield learner, run_dir
    learner.close()


@pytest.mark.slow
def test_predict_acts_as_evaluation_does_on_raw_observations(pendulum_run):
    learner, run_dir = pendulum_run
    envs = learner.scheme.collection_workers.local_worker.envs
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, size=(3, 3)).astype(np.float32)
    with torch.no_grad():
        expected = [learner.scheme.collection_workers.local_worker.policy.evaluation_step(envs.single_obs(o), None, None, True)[0][0].numpy() for o in obs]
    single, state = learner.predict(obs[0])
    assert single.shape == (1,) and state is None
    np.testing.assert_allclose(single, expected[0], rtol=1e-6)
    batch, _ = learner.predict(obs)
    assert batch.shape == (3, 1)
    np.testing.assert_allclose(batch, np.stack(expected), rtol=1e-6)
    with torch.no_grad():
        raw = learner.scheme.algorithm.actor.get_action(torch.from_numpy(obs[:1]), deterministic=True)[0].numpy()[0]
    assert not np.allclose(raw, single)  # the raw observation, unnormalised, would act otherwise
    with pytest.raises(InputError, match=r"shape \(2,\); the env's observations have shape \(3,\)"):
        learner.predict(np.zeros(2))
    loaded = load_learner(run_dir)
    try:
        np.testing.assert_allclose(loaded.predict(obs)[0], batch, rtol=1e-6)
    finally:
        loaded.close()


def test_predict_gives_box_actions_within_the_bounds_evaluation_steps_the_env_with():
    """A Gaussian policy's mode can leave the action space; the envs are stepped with it clipped
    (as Stable-Baselines3's predict clips), and predict gives what they are stepped with."""
    raw = {"env": {"env_id": "Pendulum-v1", "num_envs": 2}, "storage": {"num_steps": 16}, "algorithm": {"name": "ppo", "minibatch_size": 32}}
    learner = Learner.from_config(from_dict(raw), progress=False)
    try:
        with torch.no_grad():
            learner.scheme.algorithm.actor.action_head.linear.bias.fill_(50.0)  # a mode far past Pendulum's [-2, 2]
        single, _ = learner.predict(np.zeros(3, np.float32))
        batch, _ = learner.predict(np.zeros((4, 3), np.float32))
    finally:
        learner.close()
    assert single.tolist() == [2.0] and batch.tolist() == [[2.0]] * 4


@pytest.mark.parametrize("eval_deterministic", [True, False])
def test_predict_acts_as_the_run_evaluates_unless_told(eval_deterministic):
    """By default predict takes the mode or samples as the run's evaluations do
    (``run.eval_deterministic``: the Atari PPO configs sample); ``deterministic`` overrides it."""
    raw = {"env": {"env_id": "Pendulum-v1", "num_envs": 2}, "storage": {"num_steps": 16}, "algorithm": {"name": "ppo", "minibatch_size": 32},
           "run": {"eval_deterministic": eval_deterministic}}
    learner = Learner.from_config(from_dict(raw), progress=False)
    obs = np.full((64, 3), 0.1, np.float32)  # one observation, 64 times
    try:
        default, mode, sampled = learner.predict(obs)[0], learner.predict(obs, deterministic=True)[0], learner.predict(obs, deterministic=False)[0]
    finally:
        learner.close()
    assert len(np.unique(mode)) == 1 and len(np.unique(sampled)) > 1
    assert (len(np.unique(default)) == 1) == eval_deterministic


def test_predict_carries_a_recurrent_state_and_resets_it_at_episode_starts():
    config = load_config(CONFIGS / "ppo" / "cartpole_masked_gru.yaml", SMALL)
    learner = Learner.from_config(config, progress=False)
    try:
        obs = np.array([[0.1, -0.2], [0.0, 0.3]], dtype=np.float32)
        first, state = learner.predict(obs)
        assert first.shape == (2,) and state is not None
        _, restarted = learner.predict(obs, state, episode_start=[True, True])  # as from no state at all
        _, carried = learner.predict(obs, state, episode_start=[False, True])  # row 0 goes on from its state
        assert torch.equal(restarted, state)
        assert not torch.equal(carried[..., 0, :], state[..., 0, :]) and torch.equal(carried[..., 1, :], state[..., 1, :])
        assert torch.equal(learner.predict(obs, state.numpy(), episode_start=[0, 1])[1], carried)  # numpy state and 0/1 starts too
        width = state.shape[1]
        for args, kwargs, message in [
            ((obs, state[:1]), {}, rf"state has shape \(1, {width}\); for 2 observation\(s\) this policy's state is 2 x {width}"),
            ((obs, [1, 2]), {}, r"state is the one the previous call returned \(2 x \d+ for 2 observation\(s\)\), got list"),
            ((obs, state), {"episode_start": np.zeros(5, bool)}, r"episode_start has 5 values for 2 observation\(s\)"),
            ((obs, state), {"episode_start": "yes"}, r"episode_start is a bool per observation, got 'yes'"),
            ((obs,), {"deterministic": "no"}, r"deterministic is True or False, got 'no'"),
        ]:
            with pytest.raises(InputError, match=message):
                learner.predict(*args, **kwargs)
    finally:
        learner.close()
    memoryless = Learner.from_config(load_config(CARTPOLE, ["env.num_envs=2", "env.num_test_envs=1"]), progress=False)
    try:
        assert memoryless.predict(np.zeros(4, np.float32), episode_start=True)[1] is None  # ignored, as Stable-Baselines3 does
        with pytest.raises(InputError, match=r"this policy has no recurrent state: pass state=None \(got ndarray\)"):
            memoryless.predict(np.zeros(4, np.float32), np.zeros(7))
    finally:
        memoryless.close()


def test_elastic_calls_and_load_learner_on_what_is_not_a_run_say_so(tmp_path):
    """A scheme without remote collection workers has none to take out (not "allowed: 0..-1"),
    and load_learner names a directory that is not a run, pointing up from its checkpoints/."""
    learner = Learner.from_config(load_config(CARTPOLE, ["env.num_envs=2", "env.num_test_envs=1"]), run_dir=tmp_path / "run", progress=False)
    try:
        with pytest.raises(ValueError, match=r"removing remote collection workers needs a set started with remote ones"):
            learner.scheme.remove_collection_workers(1)
        learner.checkpoint()
    finally:
        learner.close()
    with pytest.raises(CheckpointError, match=rf"'{re.escape(str(tmp_path / 'run' / 'checkpoints'))}' is neither a run directory .* "
                       rf"the run directory above it is '{re.escape(str(tmp_path / 'run'))}'"):
        load_learner(tmp_path / "run" / "checkpoints")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"'.*empty' is neither a run directory \(no config.yaml, no checkpoints/\) nor a checkpoint directory"):
        load_learner(tmp_path / "empty")


@pytest.mark.timeout(10)
def test_predict_refuses_fractional_values_for_integer_observations_and_an_empty_dict_batch():
    """Frames given as floats in [0, 1] were cast to uint8 zeros and acted on without a word;
    whole-valued floats stay accepted (an env that returns float64 zeros). An empty batch of a
    Dict space is one line, as an empty Box batch is."""
    import gymnasium as gym

    from pytorchrl.scheme.scheme import as_observation_batch
    from pytorchrl.utils.errors import InputError

    frames = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)
    with pytest.raises(InputError, match=r"^predict: the observation holds fractional values, and the env's observations are uint8"):
        as_observation_batch(np.full((4, 36, 36), 0.5), frames)
    assert as_observation_batch(np.zeros((2, 4, 36, 36)), frames)[1] is False
    with pytest.raises(InputError, match=r"the observation key 'image' holds fractional values"):
        as_observation_batch({"image": np.full((4, 36, 36), 0.5)}, gym.spaces.Dict({"image": frames}))
    with pytest.raises(InputError, match=r"^predict: observation shapes \{'a': \(0, 2\)\} fit neither"):
        as_observation_batch({"a": np.zeros((0, 2))}, gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,))}))
