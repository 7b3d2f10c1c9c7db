"""`pytorchrl train --algo ALGO --env ENV_ID`: the shipped config, else a family default, and the
bad input around it (README, "Training an env without a config")."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

from pytorchrl.agent.algorithms import ALGORITHMS
from pytorchrl.cli import main
from pytorchrl.config import AtariConfig, apply_overrides, from_dict, load_config
from pytorchrl.config_applicability import inapplicable_keys
from pytorchrl.defaults import (
    ATARI,
    BOX_VECTOR,
    DISCRETE_VECTOR,
    FAMILIES,
    _env_kwarg_defaults,
    _without_defaults,
    choose_config,
    family_config,
    family_for,
    is_short_classic_control,
    shipped_config,
)
from pytorchrl.envs.making import check_env_id
from pytorchrl.utils.errors import InputError
from tests.conftest import CONFIGS

# unit tests run in well under a second each once the modules are imported; their 30 s timeout allows a busy machine

ALL_ALGORITHMS = ", ".join(ALGORITHMS)
VECTOR = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
ATARI_FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


class MultiBinaryActionsEnv(gym.Env):
    """Vector observations and MultiBinary actions: spaces no family covers (``--env`` as
    ``tests.test_algo_env_defaults:MultiBinaryActionsEnv``)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.MultiBinary(4)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(3, np.float32), 0.0, True, False, {}


class ShiftedDiscreteActionsEnv(MultiBinaryActionsEnv):
    """Actions 1, 2 and 3 (``Discrete(3, start=1)``): an actor's index 0 is no action of it."""

    action_space = gym.spaces.Discrete(3, start=1)


class MatrixActionsEnv(MultiBinaryActionsEnv):
    """A Box action of two dimensions: no actor's head outputs one."""

    action_space = gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32)


def _bad(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("pytorchrl: error: ") and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["train", "--algo", "ppo"], ["--algo ppo needs --env ENV_ID", "--env CartPole-v1", "CONFIG.yaml"]),
        (["train", "--algo", "ppo", "run.seed=3"], ["--algo ppo needs --env ENV_ID"]),
        (["train", "--env", "CartPole-v1"], ["--env CartPole-v1 needs --algo ALGO", ALL_ALGORITHMS]),
    ],
)
def test_algo_and_env_need_each_other(capsys, argv, needles):
    err = _bad(capsys, argv)
    assert all(n in err for n in needles), err


@pytest.mark.timeout(30)
def test_algo_env_beside_a_config_or_resume_is_refused(capsys, tmp_path):
    err = _bad(capsys, ["train", str(CONFIGS / "ppo" / "cartpole.yaml"), "--algo", "ppo", "--env", "CartPole-v1"])
    assert "not both" in err and "cartpole.yaml" in err and "--algo and --env" in err
    err = _bad(capsys, ["train", "--resume", str(tmp_path), "--algo", "ppo", "--env", "CartPole-v1"])
    assert "--resume RUN_DIR continues the run with its own config.yaml: drop --algo and --env" in err
    err = _bad(capsys, ["train", "--resume", str(tmp_path), "--env", "CartPole-v1"])
    assert "drop --env " in err
    err = _bad(capsys, ["train", str(CONFIGS / "ppo" / "cartpole.yaml"), "--resume", str(tmp_path)])
    assert "--resume RUN_DIR continues the run with its own config.yaml: drop " in err and "cartpole.yaml" in err
    err = _bad(capsys, ["train", "--resume", str(tmp_path), "--run-dir", str(tmp_path / "other")])
    assert f"--resume RUN_DIR continues the run in its own directory: drop --run-dir {str(tmp_path / 'other')!r}" in err
    err = _bad(capsys, ["train", str(CONFIGS / "ppo" / "cartpole.yaml"), "--run-dir", ""])
    assert "--run-dir is empty" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(30)
def test_unknown_algorithm_lists_the_allowed(capsys):
    err = _bad(capsys, ["train", "--algo", "ppo2", "--env", "CartPole-v1"])
    assert "--algo 'ppo2' is not an algorithm (did you mean 'ppo'?)" in err and err.endswith(f"allowed: {ALL_ALGORITHMS}")


@pytest.mark.timeout(30)
def test_unknown_env_id_gets_the_message_of_a_configs_env_id(capsys):
    with pytest.raises(InputError) as raised:
        check_env_id("CartPol-v1")
    err = _bad(capsys, ["train", "--algo", "ppo", "--env", "CartPol-v1"])
    assert err == f"pytorchrl: error: {raised.value}" and "did you mean 'CartPole-v1'" in err


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("env_id", "what"),
    [
        ("Blackjack-v1", "observations are Tuple("),
        ("tests.envs_for_tests:DictTargetEnv", "observations are Dict("),
        (f"{__name__}:MultiBinaryActionsEnv", "actions MultiBinary(4)"),
        (f"{__name__}:ShiftedDiscreteActionsEnv", "actions Discrete(3, start=1) (the actors' actions are indices from 0"),
        (f"{__name__}:MatrixActionsEnv", "actions Box(shape (2, 2), float32) (a Box action must have one dimension"),
    ],
)
def test_spaces_no_family_covers_name_the_families(capsys, env_id, what):
    err = _bad(capsys, ["train", "--algo", "ppo", "--env", env_id])
    assert f"no family default covers --env {env_id!r}" in err and what in err, err
    assert "atari for Atari ids" in err and "box-vector for Box actions with vector observations" in err
    assert "discrete-vector for discrete actions with vector observations" in err


@pytest.mark.timeout(30)
def test_an_algorithm_that_does_not_fit_the_actions_names_those_that_do(capsys):
    err = _bad(capsys, ["train", "--algo", "dqn", "--env", "Pendulum-v1"])
    assert "--algo dqn needs a Discrete action space" in err
    assert "the algorithms that fit Box actions are ppo, a2c, impala, appo, sac, td3, ddpg, mpo" in err
    assert "with a default for 'Pendulum-v1': ppo, sac, td3, ddpg" in err
    err = _bad(capsys, ["train", "--algo", "td3", "--env", "MountainCar-v0"])
    assert (
        "--algo td3 needs a bounded Box action space" in err
        and "fit Discrete actions are ppo, a2c, impala, appo, dqn, sac" in err
    )


@pytest.mark.timeout(30)
def test_an_env_with_legal_actions_in_info_gets_masks_or_a_line_naming_who_takes_them(capsys):
    """The family default of an env whose reset gives ``info["action_mask"]`` reads the masks
    (``env.action_mask: info``, said in the choice); an algorithm that takes none is refused."""
    choice = choose_config("a2c", "pytorchrl/LegalMoves-v0")
    assert choice.raw["env"]["action_mask"] == "info" and "legal actions from info['action_mask']" in choice.message
    assert from_dict(choice.raw).env.action_mask == "info"
    assert choose_config("a2c", "CartPole-v1").raw["env"].get("action_mask", "none") == "none"  # no mask in CartPole's info
    err = _bad(capsys, ["train", "--algo", "sac", "--env", "pytorchrl/LegalMoves-v0"])
    assert "gives its legal actions in info['action_mask'], and sac takes no action masks; these do: ppo, a2c, dqn" in err


@pytest.mark.timeout(30)
def test_an_algorithm_without_a_default_for_the_family_names_those_with_one(capsys):
    err = _bad(capsys, ["train", "--algo", "appo", "--env", "MountainCar-v0"])
    assert "no appo default for discrete actions with vector observations" in err
    assert "with a default for 'MountainCar-v0': ppo, a2c, dqn, sac" in err


@pytest.mark.timeout(30)
def test_overrides_that_contradict_algo_or_env_are_refused(capsys):
    err = _bad(capsys, ["train", "--algo", "ppo", "--env", "CartPole-v1", "algorithm.name=dqn"])
    assert err.endswith("override algorithm.name=dqn contradicts --algo ppo: use --algo dqn instead")
    err = _bad(capsys, ["train", "--algo", "ppo", "--env", "CartPole-v1", "--quiet", "env.env_id=Acrobot-v1"])
    assert "contradicts --env CartPole-v1: use --env Acrobot-v1" in err


@pytest.mark.timeout(30)
@pytest.mark.parametrize("quiet_first", [False, True])  # overrides before or after the options: both reach the config
def test_a_bad_override_names_the_default_it_applies_to(capsys, quiet_first):
    options = ["--algo", "ppo", "--env", "CartPole-v1", "--quiet"]
    err = _bad(capsys, ["train", *options, "algorithm.lrr=1"] if quiet_first else ["train", "algorithm.lrr=1", *options])
    assert (
        "configs/ppo/cartpole.yaml with your overrides: unknown config key 'algorithm.lrr'; did you mean 'algorithm.lr'?" in err
    )
    err = _bad(capsys, ["train", "--algo", "ddpg", "--env", "MountainCarContinuous-v0", "run.target_steps=256"])
    assert "the ddpg box-vector family default with your overrides: config key 'algorithm.start_steps' = 1000" in err


# ----------------------------------------------------------------------------- shipped configs


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("algo", "env_id", "path"),
    [
        ("ppo", "CartPole-v1", "ppo/cartpole.yaml"),  # not the 2-worker, central-inference or cluster ones
        ("sac", "Pendulum-v1", "sac/pendulum.yaml"),
        ("dqn", "CartPole-v1", "dqn/cartpole.yaml"),  # not Rainbow (more keys) nor Ape-X (remote workers)
        ("appo", "CartPole-v1", "ppo/cartpole_async_2workers.yaml"),  # by its algorithm.name, not its folder
        ("sac", "CartPole-v1", "sac/discrete_cartpole.yaml"),
        ("ppo", "ALE/Pong-v5", "ppo/atari_pong.yaml"),
    ],
)
def test_the_plainest_shipped_config_is_chosen(algo, env_id, path):
    choice = choose_config(algo, env_id)
    assert choice.path == CONFIGS / path and choice.family is None
    assert choice.message.startswith("using ") and choice.message.endswith(f"configs/{path} (shipped for {env_id})")
    assert choice.raw == yaml.safe_load((CONFIGS / path).read_text())


@pytest.mark.timeout(30)
def test_shipped_configs_are_found_by_their_contents_not_their_names(tmp_path):
    def write(root: str, relative: str, text: str) -> Path:
        path = tmp_path / root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    remote_text = "env: {env_id: CartPole-v1}\nalgorithm: {name: ppo}\nscheme: {num_col_workers: 2}\n"
    only_remote = write("one", "a/remote.yaml", remote_text)
    assert shipped_config("ppo", "CartPole-v1", tmp_path / "one") == only_remote  # preferred, not required, to be plain
    misnamed = write("two", "ppo/cartpole.yaml", "env: {env_id: Acrobot-v1}\nalgorithm: {name: ppo}\n")
    write("two", "a/remote.yaml", remote_text)
    plain = write(
        "two", "b/plain.yaml", "env: {env_id: CartPole-v1, num_envs: 4}\nalgorithm: {name: ppo, lr: 1.0e-3}\nrun: {seed: 1}\n"
    )
    write("two", "tune/space.yaml", "algorithm.lr: {loguniform: [1.0e-4, 1.0e-2]}\n")  # not a run config: skipped
    assert shipped_config("ppo", "CartPole-v1", tmp_path / "two") == plain  # plain before remote workers, though it has more keys
    assert shipped_config("ppo", "Acrobot-v1", tmp_path / "two") == misnamed
    assert shipped_config("dqn", "CartPole-v1", tmp_path / "two") is None


# ----------------------------------------------------------------------------- family defaults


@pytest.mark.timeout(30)
def test_family_for_picks_by_id_then_spaces():
    # an ALE id is Atari by its id alone: no Atari env is made
    assert family_for("ALE/Breakout-v5", gym.spaces.Box(0, 255, (210, 160, 3), np.uint8), gym.spaces.Discrete(4)) is ATARI
    assert family_for("LunarLander-v3", VECTOR, gym.spaces.Discrete(4)) is DISCRETE_VECTOR
    assert family_for("MountainCarContinuous-v0", VECTOR, gym.spaces.Box(-1.0, 1.0, (1,), np.float32)) is BOX_VECTOR
    assert family_for("CarRacing-v3", gym.spaces.Box(0, 255, (96, 96, 3), np.uint8), gym.spaces.Box(-1.0, 1.0, (3,))) is None
    assert family_for("x:y", gym.spaces.Dict({"a": VECTOR}), gym.spaces.Discrete(2)) is None
    assert family_for("x:y", VECTOR, gym.spaces.MultiBinary(3)) is None
    assert family_for("x:y", VECTOR, gym.spaces.MultiDiscrete([2, 3])) is None
    assert family_for("x:y", VECTOR, gym.spaces.Discrete(3, start=1)) is None
    assert family_for("x:y", VECTOR, gym.spaces.Box(-1.0, 1.0, (2, 2))) is None


@pytest.mark.timeout(30)
def test_envs_without_a_shipped_config_get_their_family_default(tmp_path):
    for algo in ("ppo", "dqn"):
        choice = choose_config(algo, "LunarLander-v3", configs=tmp_path)  # no shipped configs at all
        assert choice.path is None and choice.family == "discrete-vector" and choice.run_name == f"{algo}-LunarLander-v3"
        assert choice.message.startswith(
            f"no shipped config for {algo} on LunarLander-v3; using the {algo} family default for discrete actions with vector observations ("
        )
        assert choice.raw["env"]["env_id"] == "LunarLander-v3" and choice.raw["algorithm"]["name"] == algo
        assert choice.raw["run"]["target_steps"] == DISCRETE_VECTOR["target_steps"] == 100_000
    sac = choose_config("sac", "MountainCarContinuous-v0", configs=tmp_path)
    assert sac.family == "box-vector" and sac.raw["algorithm"]["start_steps"] == 1000  # short classic control
    assert "algorithm.start_steps 1000 on a short classic-control env" in sac.message
    # env.env_kwargs can change the spaces: LunarLander's continuous variant has Box actions (and is not classic control)
    continuous = choose_config("sac", "LunarLander-v3", ["env.env_kwargs={continuous: true}"], configs=tmp_path)
    assert continuous.family == "box-vector" and continuous.raw["algorithm"]["start_steps"] == 10_000
    assert continuous.raw["run"]["target_steps"] == 1_000_000


@pytest.mark.timeout(30)
def test_a_shipped_config_matches_on_env_kwargs_too():
    """LunarLander-v3 with continuous actions is another env than without: the shipped
    continuous SAC config serves the first only."""
    assert choose_config("sac", "LunarLander-v3", ["env.env_kwargs={continuous: true}"]).path == CONFIGS / "sac" / "lunarlander_continuous.yaml"
    assert choose_config("sac", "LunarLander-v3").path is None
    assert choose_config("dqn", "LunarLander-v3").path == CONFIGS / "dqn" / "lunarlander.yaml"
    # keywords at the env's own defaults make the same env: continuous=false is LunarLander-v3 itself
    assert choose_config("dqn", "LunarLander-v3", ["env.env_kwargs={continuous: false}"]).path == CONFIGS / "dqn" / "lunarlander.yaml"


@pytest.mark.timeout(30)
def test_a_shipped_config_whose_env_kwargs_are_the_envs_defaults_serves_the_bare_id():
    """configs/sac/her_bitflip.yaml names n_bits 15, the bit-flipping env's default: it is the
    shipped config of the bare id too, and not of another width."""
    her = CONFIGS / "sac" / "her_bitflip.yaml"
    assert choose_config("sac", "pytorchrl/BitFlipping-v0").path == her
    assert choose_config("sac", "pytorchrl/BitFlipping-v0", ["env.env_kwargs={n_bits: 15}"]).path == her
    assert shipped_config("sac", "pytorchrl/BitFlipping-v0", env_kwargs={"n_bits": 10}) is None
    assert shipped_config("sac", "pytorchrl/BitFlipping-v0", env_kwargs={"continuous": True}) is None


@pytest.mark.timeout(30)
def test_a_shipped_config_chosen_for_algo_and_env_finds_its_files_from_any_working_directory(tmp_path, monkeypatch):
    """configs/ppo/ppod_chain.yaml names its demonstrations from the checkout's top; under
    --algo/--env the user chose no file, and from another directory the run was refused with a
    path they never gave. The config run by its path keeps the path as written."""
    monkeypatch.chdir(tmp_path)
    choice = choose_config("ppo", "pytorchrl/Chain-v0", ["env.env_kwargs={length: 20}"])
    assert choice.path == CONFIGS / "ppo" / "ppod_chain.yaml"
    path = Path(choice.raw["algorithm"]["demos"]["path"])
    assert path.is_absolute() and path == CONFIGS.parent / "configs" / "ppo" / "demos" / "chain" and path.is_dir()
    monkeypatch.chdir(CONFIGS.parent)  # from the top, as the config says: left as written
    assert choose_config("ppo", "pytorchrl/Chain-v0", ["env.env_kwargs={length: 20}"]).raw["algorithm"]["demos"]["path"] == "configs/ppo/demos/chain"


_ARRAY_DEFAULT = np.zeros(2)


class _WithDefaults(gym.Env):
    def __init__(self, size: int = 3, arr: Any = _ARRAY_DEFAULT) -> None:
        self.size, self.arr = size, arr


def test_an_envs_keyword_defaults_come_from_any_entry_point_and_its_registration():
    """Class and callable entry points give their signature's defaults, the registration's kwargs
    win over them, an entry point that cannot be imported gives its registration's only, and an
    array default never breaks the comparison with a config's list (it is just not equal)."""
    ids = {"Defaults-class-v0": _WithDefaults, "Defaults-lambda-v0": lambda size=5: _WithDefaults(size)}
    try:
        for env_id, entry_point in ids.items():
            gym.register(env_id, entry_point=entry_point)
        gym.register("Defaults-registered-v0", entry_point=_WithDefaults, kwargs={"size": 7})
        gym.register("Defaults-missing-v0", entry_point="no_such_module_anywhere:Env", kwargs={"size": 9})
        assert _env_kwarg_defaults("Defaults-class-v0")["size"] == 3
        assert _env_kwarg_defaults("Defaults-lambda-v0") == {"size": 5}
        assert _env_kwarg_defaults("Defaults-registered-v0")["size"] == 7
        assert _env_kwarg_defaults("Defaults-missing-v0") == {"size": 9}
        assert _env_kwarg_defaults("Never-registered-v0") == {}
        defaults = _env_kwarg_defaults("Defaults-class-v0")
        assert _without_defaults({"size": 3, "arr": [0, 0], "other": 1}, defaults) == {"arr": [0, 0], "other": 1}
    finally:
        for env_id in [*ids, "Defaults-registered-v0", "Defaults-missing-v0"]:
            gym.registry.pop(env_id, None)


@pytest.mark.timeout(30)
def test_short_classic_control_envs():
    assert is_short_classic_control("Pendulum-v1") and is_short_classic_control("MountainCarContinuous-v0")  # 200, 999 steps
    assert not is_short_classic_control("Pendulum-v1", max_episode_steps=2000)
    assert not is_short_classic_control("LunarLander-v3")  # Box2D, not classic control
    assert not is_short_classic_control("tests.test_algo_env_defaults:MultiBinaryActionsEnv")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("family", "algo"), [pytest.param(f, a, id=f"{f['name']}-{a}") for f in FAMILIES for a in f["algorithms"]]
)
def test_every_family_default_loads_and_sets_only_keys_that_apply(family, algo):
    env_id = "ALE/Breakout-v5" if family is ATARI else "Some-v0"
    config = from_dict(apply_overrides(family_config(family, algo, env_id), []))
    assert (config.env.env_id, config.algorithm.name, config.run.target_steps) == (env_id, algo, family["target_steps"])
    assert config.scheme.num_col_workers == 0 and config.actor.recurrent.type == "none"
    observations = ATARI_FRAMES if family is ATARI else VECTOR
    assert inapplicable_keys(config, observations) == []
    assert family["source"] and family["algorithms"][algo]["source"]
    for dotted, value in family["classic_control"].get(algo, {}).items():
        section, key = dotted.split(".")
        short = from_dict(family_config(family, algo, env_id, classic_control=True))
        assert getattr(getattr(short, section), key) == value != getattr(getattr(config, section), key)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("family", "algo", "shipped", "sections", "changes"),
    [
        (ATARI, "ppo", "ppo/atari_pong.yaml", ("actor", "storage", "algorithm"), {}),
        # the replay buffer stays out of checkpoints (null: 2.8 GB is over the 1 GiB that puts it in;
        # the Pong config sets true)
        (ATARI, "dqn", "dqn/atari_pong.yaml", ("actor", "storage", "algorithm"), {"storage": {"checkpoint_buffer": None}}),
        (
            DISCRETE_VECTOR,
            "ppo",
            "ppo/cartpole.yaml",
            ("actor", "storage", "algorithm"),
            {"algorithm": {"lr": 1e-3, "minibatch_size": 256}},
        ),
        (DISCRETE_VECTOR, "dqn", "dqn/cartpole.yaml", ("actor", "storage", "algorithm"), {}),
        (DISCRETE_VECTOR, "a2c", "a2c/cartpole.yaml", ("actor", "storage", "algorithm"), {}),
        (DISCRETE_VECTOR, "sac", "sac/discrete_cartpole.yaml", ("actor", "storage", "algorithm"), {}),
        (BOX_VECTOR, "sac", "sac/halfcheetah.yaml", ("actor", "storage", "algorithm"), {}),
        (BOX_VECTOR, "td3", "td3/halfcheetah.yaml", ("actor", "storage", "algorithm"), {}),
    ],
    ids=lambda value: value["name"] if isinstance(value, dict) and "name" in value else None,
)
def test_family_defaults_keep_the_hyper_parameters_of_the_configs_they_cite(family, algo, shipped, sections, changes):
    """A change to a cited config shows here: the family's source would no longer be true."""
    assert shipped in family["algorithms"][algo]["source"]
    ours = from_dict(family_config(family, algo, "Some-v0"))
    theirs = load_config(CONFIGS / shipped)
    for section in sections:
        expected = getattr(theirs, section)
        assert getattr(ours, section) == dataclasses.replace(expected, **changes.get(section, {})), section
    if family is ATARI:
        assert ours.env.atari == AtariConfig()  # the preprocessing defaults (the Pong configs only add threads)
    if (family, algo) == (DISCRETE_VECTOR, "ppo"):
        assert (ours.env.num_envs, ours.env.normalize_obs, ours.env.normalize_reward) == (8, False, False)


# ------------------------------------------------------------------------------------- training


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_train_with_a_family_default_saves_its_config(capsys, tmp_path):
    run_dir = tmp_path / "run"
    argv = [
        "train",
        "--algo",
        "ppo",
        "--env",
        "CartPole-v0",  # no shipped config (CartPole-v1 has them)
        "run.target_steps=256",
        "run.eval_every=0",
        "--quiet",
        "--run-dir",
        str(run_dir),
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert (
        "pytorchrl: no shipped config for ppo on CartPole-v0; using the ppo family default for discrete actions with vector "
        "observations (rl-zoo's CartPole-v1 PPO (configs/ppo/cartpole.yaml with 8 envs, lr 1e-3" in err
    )
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    family = DISCRETE_VECTOR["algorithms"]["ppo"]["config"]
    for section in ("env", "storage", "algorithm"):
        assert {k: saved[section][k] for k in family[section]} == family[section], section
    assert saved["env"]["env_id"] == "CartPole-v0"
    assert (saved["run"]["target_steps"], saved["run"]["eval_every"]) == (256, 0)  # the overrides, on top of the family's
