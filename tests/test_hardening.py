"""Bad input a hostile but fair user gives: each is one line naming the key or file, before any
env, worker or Ray process starts."""

from __future__ import annotations

import pytest

from pytorchrl.cli import main
from pytorchrl.config import load_config
from pytorchrl.envs import VecEnv
from pytorchrl.scheme.scheme import resolve_device
from pytorchrl.tuning import load_space
from pytorchrl.utils.errors import ConfigError, InputError
from tests.conftest import CONFIGS

CARTPOLE = CONFIGS / "ppo" / "cartpole.yaml"


@pytest.mark.parametrize("override", ["algorithm.lr=.nan", "algorithm.gamma=.nan", "algorithm.adam_eps=.nan", "scheme.worker_timeout_s=.inf",
                                      "algorithm.clip_range=.inf", "env.reward_gamma=-.inf"])
def test_non_finite_floats_are_refused(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"config key '{key}' = -?(nan|inf) is not a finite number"):
        load_config(CARTPOLE, [override])


def test_infinity_is_accepted_where_it_means_no_limit():
    config = load_config(CARTPOLE, ["run.max_time_s=.inf", "env.clip_obs=.inf"])
    assert config.run.max_time_s == float("inf") and config.env.clip_obs == float("inf")


@pytest.mark.parametrize(
    "override, message",
    [
        ("run.seed=18446744073709551616", r"'run.seed' = 18446744073709551616 is out of range: must be <= 18446744073709551615"),
        ("actor.hidden_sizes=[10000000, 10000000]", r"'actor.hidden_sizes' = \[10000000, 10000000\] is out of range: every width must be in 1..65,536"),
        ("storage.num_steps=10000000000", r"'storage.num_steps' = 10000000000 is out of range: must be <= 1000000"),
        ("algorithm.num_epochs=1000000000000", r"'algorithm.num_epochs' = 1000000000000 is out of range: must be <= 10000"),
        ("run=5", r"config key 'run' = 5 is a section, not a value: set its keys \(e.g. run.seed=...\)"),
        ("algorithm=ppo", r"config key 'algorithm' = 'ppo' is a section, not a value"),
    ],
)
def test_absurd_values_and_sections_given_values_are_named(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(CARTPOLE, [override])


def test_the_largest_seed_is_accepted():
    assert load_config(CARTPOLE, ["run.seed=18446744073709551615"]).run.seed == 2**64 - 1


def test_yaml_files_a_directory_an_empty_file_and_a_key_given_twice(tmp_path):
    with pytest.raises(ConfigError, match=r"config file '.*' is a directory, not a YAML file"):
        load_config(tmp_path)
    (tmp_path / "empty.yaml").write_text("# nothing\n")
    with pytest.raises(ConfigError, match=r"empty.yaml' is empty"):
        load_config(tmp_path / "empty.yaml")
    (tmp_path / "twice.yaml").write_text("env:\n  env_id: CartPole-v1\n  num_envs: 4\nrun:\n  seed: 1\nenv:\n  num_envs: 8\n")
    with pytest.raises(ConfigError, match=r"twice.yaml': key 'env' is given twice \(lines 1 and 6\)"):
        load_config(tmp_path / "twice.yaml")
    (tmp_path / "space.yaml").write_text("algorithm.lr: {loguniform: [1.0e-4, 1.0e-3]}\nalgorithm.lr: {uniform: [0.1, 0.2]}\n")
    with pytest.raises(ConfigError, match=r"search space file '.*space.yaml': key 'algorithm.lr' is given twice \(lines 1 and 2\)"):
        load_space(tmp_path / "space.yaml")


@pytest.mark.parametrize("device", ["cuda:99", "tpu", ""])
def test_a_device_this_machine_lacks_names_the_ones_it_has(device):
    with pytest.raises(ConfigError, match=rf"'run.device' = '{device}' is not a device of this machine; it has: cpu.*, auto"):
        resolve_device(device)
    assert resolve_device("cpu") == "cpu" and resolve_device("auto") in ("cpu", "cuda")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"env_kwargs": {"no_such_kwarg": 1}}, r"config key 'env.env_kwargs' = \{'no_such_kwarg': 1\}: 'CartPole-v1' cannot be made with them "
                                               r"\(TypeError: .*unexpected keyword argument 'no_such_kwarg'\)$"),
        ({"env_kwargs": {"max_episode_steps": -5}}, r"'env.env_kwargs' = \{'max_episode_steps': -5\}: 'CartPole-v1' cannot be made with them \(ValueError"),
        ({"eval_env_kwargs": {"bad": 2}}, r"config key 'env.eval_env_kwargs' = \{'bad': 2\}: 'CartPole-v1' cannot be made with them"),
    ],
)
def test_env_construction_errors_are_config_errors(kwargs, message):
    with pytest.raises(InputError, match=message):
        VecEnv.create_factory("CartPole-v1", num_envs=1, **kwargs)


@pytest.mark.parametrize("override", ["run.device=tpu", "env.env_kwargs={no_such_kwarg: 1}", "algorithm.lr=.nan"])
def test_the_cli_says_one_line_and_writes_nothing(override, tmp_path, capsys):
    code = main(["train", str(CARTPOLE), override, "--run-dir", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("pytorchrl: error: config key"), err
    assert not (tmp_path / "run").exists()
