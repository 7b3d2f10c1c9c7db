"""Field readiness (issue 36): paths of the wrong kind, YAML structure, limits that bound work and
rounds larger than the budget are each one line, exit 2, and nothing is written where the input
was refused."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from benchmarks.fuzz import BUDGET, PATH_KINDS, path_argv
from pytorchrl.cli import main
from pytorchrl.config import config_to_dict, from_dict, load_config
from pytorchrl.learner import Learner
from pytorchrl.utils.errors import ConfigError, InputError
from pytorchrl.utils.memory import check_memory, estimate_bytes
from pytorchrl.utils.strict_yaml import MAX_YAML_DEPTH, MAX_YAML_VALUES, dump_config, parse_yaml
from tests.conftest import CONFIGS

CARTPOLE = CONFIGS / "ppo" / "cartpole.yaml"
PONG_OBS = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Everything under ``root``: relative path -> (file type, size); links not followed."""
    out = {}
    for base, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            st = os.lstat(os.path.join(base, name))
            out[os.path.relpath(os.path.join(base, name), root)] = (st.st_mode >> 12, 0 if name in dirs else st.st_size)
    return out


def _refused(capsys, argv: list[str], root: Path) -> str:
    """Run the CLI in-process: exit 2, one ``pytorchrl: error:`` line, no traceback, and nothing
    under ``root`` created or changed. Returns the line."""
    before = _tree(root)
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("pytorchrl: error: ") and "Traceback" not in err, err
    assert _tree(root) == before, "something was written where the input was refused"
    return err


# ------------------------------------------------------------------------------------- paths

#: what each of the fuzzer's path fixtures (:func:`benchmarks.fuzz.path_argv`) must be told
PATH_MESSAGES = {
    "file": "/p' is a regular file, not a directory",
    "under_file": "/p/run' cannot be a directory: '",
    "dev_null": "--run-dir '/dev/null' is a character device, not a directory",
    "long_name": "is 300 bytes long; this filesystem allows at most 255 per name",
    "progress_dir": "its progress.csv is a directory; a run's progress.csv is a regular file",
    "fifo_progress": "its progress.csv is a named pipe; a run's progress.csv is a regular file",
    "checkpoints_file": "its checkpoints is a regular file; a run's checkpoints is a directory",
    "tb_file": "its tb is a regular file; a run's tb is a directory",
    "step_file": "checkpoints/step_8 is a regular file; a checkpoint is a directory",
    "resume_missing": "--resume '{work}/missing' does not exist",
    "resume_file": "--resume '{work}/p' is a regular file, not a directory",
    "resume_list_config": "run config file '{work}/p/config.yaml' must hold a mapping of sections, got list",
    "resume_scalar_config": "run config file '{work}/p/config.yaml' must hold a mapping of sections, got int",
    "resume_alias_config": "alias *x is inside the node it names (a recursive structure) (line 1)",
    "resume_config_dir": "its config.yaml is a directory; a run's config.yaml is a regular file",
    "evaluate_file": "evaluate '{work}/p' is a regular file, not a directory",
    "evaluate_missing": "evaluate '{work}/missing' does not exist",
    "evaluate_long_name": "evaluate: the name 'xxxxxxxxxxxxxxxxxxxx...' in it is 300 bytes long",
    "video_file": "--video '{work}/p' is a regular file, not a directory",
}


def test_every_path_kind_the_fuzzer_makes_has_its_message():
    assert set(PATH_MESSAGES) == set(PATH_KINDS)


@pytest.mark.parametrize("kind", PATH_KINDS)
def test_a_path_of_the_wrong_kind_is_one_line_and_nothing_is_written(kind, tmp_path, capsys):
    argv = path_argv(kind, CARTPOLE, tmp_path)
    assert PATH_MESSAGES[kind].format(work=tmp_path) in _refused(capsys, argv, tmp_path)


def test_a_dangling_link_and_a_fresh_run_into_an_empty_directory(tmp_path, capsys):
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    argv = ["train", CARTPOLE, *BUDGET, "--quiet", "--run-dir", tmp_path / "link"]
    assert "is a symbolic link to a missing target" in _refused(capsys, argv, tmp_path)
    from pytorchrl.utils.paths import check_run_dir

    (tmp_path / "empty").mkdir()
    assert check_run_dir(tmp_path / "empty", "--run-dir") == tmp_path / "empty"  # an existing empty directory is a fine run directory


def test_an_unwritable_directory_is_refused_before_writing(tmp_path, capsys, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.geteuid() == 0:  # root writes whatever the mode (CI runs as root): answer access() as for any other user
        import pytorchrl.utils.paths as paths

        real_access = os.access
        monkeypatch.setattr(paths.os, "access", lambda p, mode: real_access(p, mode) and Path(p) != locked)
    try:
        err = _refused(capsys, ["train", CARTPOLE, *BUDGET, "--quiet", "--run-dir", locked / "run"], tmp_path)
    finally:
        locked.chmod(0o700)
    assert f"cannot be created: the directory '{locked}' is not writable" in err


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux's sysfs, where no one may create a directory")
def test_a_directory_that_cannot_be_created_even_by_root_is_one_line(tmp_path, capsys):
    err = _refused(capsys, ["train", CARTPOLE, *BUDGET, "--quiet", "--run-dir", "/sys/pytorchrl-test-run"], tmp_path)
    assert "'/sys/pytorchrl-test-run' cannot be created" in err and not Path("/sys/pytorchrl-test-run").exists()


def test_tune_dir_naming_a_file_is_refused_before_ray_starts(tmp_path, capsys):
    (tmp_path / "out").write_text("a file\n")
    argv = ["tune", CARTPOLE, "--space", CONFIGS / "tune" / "ppo_cartpole_space.yaml", "--dir", tmp_path / "out"]
    assert f"--dir '{tmp_path / 'out'}' is a regular file, not a directory" in _refused(capsys, argv, tmp_path)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run directory with one checkpoint (of the untrained policy)."""
    learner = Learner.from_config(load_config(CARTPOLE, ["env.num_envs=2", "env.num_test_envs=1"]), run_dir=tmp_path / "run", progress=False)
    try:
        learner.checkpoint()
    finally:
        learner.close()
    return tmp_path / "run"


@pytest.mark.parametrize("text, needle", [("- 1\n- 2\n", "got list"), ("a: &x [*x]\n", "alias *x is inside the node it names"), ("", "is empty")])
def test_evaluate_and_resume_of_a_run_whose_config_is_not_a_mapping(run_dir, capsys, text, needle):
    (run_dir / "config.yaml").write_text(text)
    for argv in (["evaluate", run_dir, "--episodes", "1"], ["train", "--resume", run_dir, "--quiet"]):
        assert needle in _refused(capsys, argv, run_dir.parent)


def test_resume_names_a_wrong_run_file_before_touching_the_run(run_dir, capsys):
    (run_dir / "summary.json").mkdir()
    assert "its summary.json is a directory" in _refused(capsys, ["train", "--resume", run_dir, "run.target_steps=1024", "--quiet"], run_dir.parent)
    shutil.rmtree(run_dir / "summary.json")
    (run_dir / "progress.csv").unlink(missing_ok=True)
    (run_dir / "progress.csv").mkdir()
    assert "its progress.csv is a directory" in _refused(capsys, ["train", "--resume", run_dir, "--quiet"], run_dir.parent)
    (run_dir / "config.yaml").unlink()
    (run_dir / "config.yaml").mkdir()
    assert "config.yaml' is a directory, not a YAML file" in _refused(capsys, ["evaluate", run_dir, "--episodes", "1"], run_dir.parent)


# ---------------------------------------------------------------------------- YAML structure


@pytest.mark.parametrize(
    "text, needle",
    [
        ("env: &a {env_id: CartPole-v1, env_kwargs: *a}\n", "alias *a is inside the node it names (a recursive structure) (line 1)"),
        ("actor:\n  hidden_sizes: &x [64, *x]\n", "alias *x is inside the node it names (a recursive structure) (line 2)"),
        ("env:\n  env_kwargs: {x: " + "[" * 100 + "]" * 100 + "}\n", f"it nests deeper than {MAX_YAML_DEPTH} levels (line 2)"),
        ("env:\n  env_kwargs: {a: 1}\n  env_kwargs: {b: 2}\n", "key 'env_kwargs' is given twice (lines 2 and 3)"),
        ("env:\n  ? [1, 2]\n  : 3\n", "is not valid YAML (line 2): found an unhashable key"),
        ("env: {env_id: [\n", "is not valid YAML"),
    ],
)
def test_yaml_structure_is_one_line_naming_file_and_line(tmp_path, capsys, text, needle):
    (tmp_path / "c.yaml").write_text(text)
    err = _refused(capsys, ["train", tmp_path / "c.yaml", "--quiet", "--run-dir", tmp_path / "run"], tmp_path)
    assert f"config file '{tmp_path / 'c.yaml'}'" in err and needle in err


@pytest.mark.parametrize("kind, needle", [("long", "cannot be read: File name too long"), ("fifo", "is not a regular file"), ("binary", "cannot be read as text")])
def test_a_config_file_that_cannot_be_read_as_yaml_text(tmp_path, capsys, kind, needle):
    path = tmp_path / ("y" * 300 + ".yaml" if kind == "long" else "c.yaml")
    if kind == "fifo":
        os.mkfifo(path)  # reading it would block forever
    elif kind == "binary":
        path.write_bytes(b"\xd4\xff\x00\x81" * 8)
    assert needle in _refused(capsys, ["train", path, "--quiet", "--run-dir", tmp_path / "run"], tmp_path)


@pytest.mark.timeout(10)  # expanded, its 10^8 values would not end in time
def test_a_billion_laughs_is_refused_at_once(tmp_path):
    """Counted from the parsed nodes (an alias at each use), never expanded."""
    levels = ", ".join(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9))
    (tmp_path / "c.yaml").write_text("env:\n  env_kwargs: {x: [&a0 [" + ", ".join(["lol"] * 10) + "], " + levels + "]}\n")
    with pytest.raises(ConfigError, match=rf"holds 111,111 values \(an alias counted at each use\), more than the {MAX_YAML_VALUES:,} a config may hold \(line 2\)"):
        load_config(tmp_path / "c.yaml")


def test_shared_anchors_are_allowed(tmp_path):
    (tmp_path / "c.yaml").write_text(
        "algorithm: {name: ppo}\nenv:\n  env_id: CartPole-v1\n  env_kwargs: &kw {max_episode_steps: 50}\n  eval_env_kwargs: *kw\n"
        "scheme:\n  col_worker_resources: &w {num_cpus: 0.5}\n  grad_worker_resources: *w\n"
    )
    config = load_config(tmp_path / "c.yaml")
    assert config.env.eval_env_kwargs == config.env.env_kwargs == {"max_episode_steps": 50}
    assert config.scheme.grad_worker_resources.num_cpus == config.scheme.col_worker_resources.num_cpus == 0.5


def test_yaml_merge_keys_merge_with_the_explicit_keys_winning_and_a_huge_number_is_one_line(tmp_path):
    """``<<: *base`` is YAML (a merge), not a key: its keys are taken and the mapping's own win;
    a key given twice among the mapping's own is still refused. A float key given an int of
    hundreds of digits is one line, not Python's OverflowError."""
    (tmp_path / "c.yaml").write_text(
        "algorithm: &algo {name: ppo, lr: 0.001}\nenv:\n  <<: {env_id: CartPole-v1, num_envs: 4}\n  num_envs: 8\n"
    )
    config = load_config(tmp_path / "c.yaml")
    assert (config.env.env_id, config.env.num_envs, config.algorithm.lr) == ("CartPole-v1", 8, 0.001)
    (tmp_path / "d.yaml").write_text("algorithm: {name: ppo}\nenv:\n  <<: {env_id: CartPole-v1}\n  num_envs: 8\n  num_envs: 4\n")
    with pytest.raises(ConfigError, match=r"num_envs"):
        load_config(tmp_path / "d.yaml")
    with pytest.raises(ConfigError, match=r"^config key 'algorithm.lr' = 10000000000000000000\.\.\. \(401 digits\) is too large for a float$"):
        load_config(tmp_path / "c.yaml", ["algorithm.lr=1" + "0" * 400])


def test_exponent_numbers_without_a_dot_are_numbers_in_free_form_keys_too(tmp_path):
    """``5e-7`` is a number (YAML 1.2), not the string YAML 1.1 makes of it: in a free-form key
    (env.env_kwargs) the string reached the env, whose first step failed inside its reward."""
    config = load_config(CARTPOLE, ["env.env_kwargs={weight: 5e-7, big: -1E+6, name: v5e3}"])
    assert config.env.env_kwargs == {"weight": 5e-7, "big": -1e6, "name": "v5e3"}
    (tmp_path / "c.yaml").write_text("algorithm: {name: ppo}\nenv: {env_id: CartPole-v1, env_kwargs: {w: 2.5e-3}}\n")  # a file too
    assert load_config(tmp_path / "c.yaml").env.env_kwargs == {"w": 2.5e-3}
    with pytest.raises(ConfigError, match=r"config key 'run.target_steps' = 0.001 has the wrong type: expected int"):
        load_config(CARTPOLE, ["run.target_steps=1e-3"])
    assert load_config(CARTPOLE, ["env.env_kwargs={a: .5e3, b: 1.5e3}"]).env.env_kwargs == {"a": 500.0, "b": 1500.0}  # 1.1 wants e+3


def test_a_saved_config_reads_back_as_it_was_written():
    """A string that now reads as a number (``'1e3'``) is quoted when a config is saved, so a
    resumed or evaluated run gets the string it was given, and numbers stay numbers."""
    config = config_to_dict(load_config(CARTPOLE, ["env.env_kwargs={tag: '1e3', dot: '.5e3', w: 5e-7, name: v5e3}"]))
    assert config["env"]["env_kwargs"] == {"tag": "1e3", "dot": ".5e3", "w": 5e-7, "name": "v5e3"}
    text = dump_config(config)
    assert "tag: '1e3'" in text and parse_yaml(text) == config


@pytest.mark.parametrize("section", ["env", "env.atari", "actor.recurrent", "scheme.col_worker_resources", "scheme.grad_worker_resources", "scheme.ray", "run"])
@pytest.mark.parametrize("value", ["[1, 2]", "[]", "5"])
def test_a_list_or_scalar_where_a_section_belongs_names_the_key(tmp_path, capsys, section, value):
    err = _refused(capsys, ["train", CARTPOLE, f"{section}={value}", "--quiet", "--run-dir", tmp_path / "run"], tmp_path)
    assert f"config key '{section}' = " in err and "is a section, not a value: set its keys" in err
    *parents, last = section.split(".")
    text = "".join(f"{'  ' * i}{p}:\n" for i, p in enumerate(parents)) + f"{'  ' * len(parents)}{last}: {value}\n"
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError, match=rf"config key '{section}' = .* is a section, not a value"):
        load_config(tmp_path / "c.yaml")


@pytest.mark.parametrize(
    "override, needle",
    [
        ("env.env_kwargs={a: 1", "override 'env.env_kwargs={a: 1' is not valid YAML (expected ',' or '}', but got '<stream end>')"),
        ("actor.hidden_sizes=[64, 64", "override 'actor.hidden_sizes=[64, 64' is not valid YAML"),
        ("env.env_id='CartPole-v1", "is not valid YAML (found unexpected end of stream); close its brackets, braces and quotes"),
        ("env.env_kwargs=&a [*a]", "override 'env.env_kwargs=&a [*a]': alias *a is inside the node it names"),
        ("env.env_kwargs={a: 1, a: 2}", "override 'env.env_kwargs={a: 1, a: 2}': key 'a' is given twice"),
    ],
)
def test_an_override_yaml_cannot_parse_names_the_override(tmp_path, capsys, override, needle):
    assert needle in _refused(capsys, ["train", CARTPOLE, override, "--quiet", "--run-dir", tmp_path / "run"], tmp_path)


def test_plain_override_strings_stay_strings():
    config = load_config(CARTPOLE, ["env.env_id=CartPole-v1", "run.device=cpu", "run.prometheus_host=@bind", "env.env_kwargs={}"])
    assert (config.env.env_id, config.run.device, config.run.prometheus_host) == ("CartPole-v1", "cpu", "@bind")


# ------------------------------------------------------------------------- work and budget


@pytest.mark.parametrize(
    "config, override, message",
    [
        ("ppo/cartpole.yaml", f"actor.hidden_sizes=[{', '.join(['1'] * 65)}]", r"'actor.hidden_sizes' has 65 layers: at most 64 are allowed$"),
        ("dqn/cartpole.yaml", f"algorithm.head_hidden_sizes=[{', '.join(['8'] * 65)}]", r"'algorithm.head_hidden_sizes' has 65 layers: at most 64"),
        ("ppo/cartpole.yaml", "actor.cnn_channels=[16, 16, 16, 16, 16, 16, 16, 16, 16]", r"'actor.encoder.channels' has 9 layers: at most 8 are allowed"),
        ("ppo/cartpole.yaml", "actor.cnn_channels=[4096]", r"'actor.encoder.channels' = \[4096\] is out of range: every width must be in 1..1,024"),
        ("ppo/atari_pong.yaml", "env.atari.noop_max=100000000", r"'env.atari.noop_max' = 100000000 is out of range: must be <= 1000"),
        ("ppo/atari_pong.yaml", "env.atari.max_episode_frames=100000000000", r"'env.atari.max_episode_frames' = 100000000000 is out of range: must be <= 10000000"),
        ("ppo/atari_pong.yaml", "env.max_episode_steps=1000000000000", r"'env.max_episode_steps' = 1000000000000 is out of range: must be <= 100000000"),
        ("ppo/atari_pong.yaml", "env.atari.frame_skip=1000", r"'env.atari.frame_skip' = 1000 is out of range: must be <= 16"),
        ("ppo/cartpole.yaml", "actor.recurrent={type: lstm, hidden_size: 16384}", r"'actor.recurrent.hidden_size' = 16384 is out of range: must be <= 4096"),
        ("ppo/cartpole.yaml", "actor.recurrent={type: gru, hidden_size: 4096, num_layers: 4}",
         r"'actor.recurrent.hidden_size' = 4096 x actor.recurrent.num_layers = 4 is 16,384 recurrent units: at most 8,192 are allowed"),
    ],
)
def test_limits_that_bound_work_are_one_line(config, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(CONFIGS / config, [override])


def test_the_maxima_themselves_are_accepted():
    config = load_config(CONFIGS / "ppo" / "atari_pong.yaml", ["env.atari.noop_max=1000", "env.atari.max_episode_frames=10000000", "env.max_episode_steps=100000000",
                                                               f"actor.hidden_sizes=[{', '.join(['8'] * 64)}]", "actor.recurrent={type: lstm, hidden_size: 2048, num_layers: 4}",
                                                               "actor.encoder=impala_resnet", "actor.cnn_channels=[1024, 16, 16, 16, 16, 16, 16, 16]"])
    assert config.env.atari.noop_max == 1000 and len(config.actor.hidden_sizes) == 64 and len(config.actor.encoder.channels or ()) == 8


def test_work_limits_through_the_cli_write_nothing(tmp_path, capsys):
    for override in ("actor.hidden_sizes=[" + ", ".join(["1"] * 300) + "]", "env.atari.noop_max=100000000"):
        assert "config key" in _refused(capsys, ["train", CARTPOLE, override, "--quiet", "--run-dir", tmp_path / "run"], tmp_path)


def test_the_memory_floor_counts_cnn_encoders_and_recurrent_cores():
    from pytorchrl.agent.actors.networks.encoders import ImpalaResNet, NatureCNN
    from pytorchrl.agent.actors.networks.recurrent import RecurrentCore

    impala = load_config(CONFIGS / "ppo" / "atari_pong.yaml", ["actor.encoder=impala_resnet", "actor.cnn_channels=[8, 16]", "actor.cnn_features=0"])
    assert impala.actor.encoder.channels == (8, 16) and impala.actor.encoder.features == 0  # the old flat keys, read as the nested form
    size = ImpalaResNet.size(PONG_OBS, {"channels": impala.actor.encoder.channels, "features": 0})
    assert size[0] == sum(p.numel() for p in ImpalaResNet(PONG_OBS, channels=(8, 16), features=0).parameters())
    assert NatureCNN.size(PONG_OBS, {}) == (sum(p.numel() for p in NatureCNN(PONG_OBS).parameters()), 512)
    lstm = load_config(CARTPOLE, ["actor.recurrent={type: lstm, hidden_size: 16, num_layers: 3}", "actor.hidden_sizes=[20]"])
    core = sum(p.numel() for p in RecurrentCore(20, kind="lstm", hidden_size=16, num_layers=3).parameters())
    assert estimate_bytes(lstm, gym.spaces.Box(-1, 1, (4,)))["recurrent cores"][2] == core * 2 * 16  # policy and value core, 16 bytes a parameter


@pytest.mark.parametrize(
    "config, override, space, key",
    [
        ("ppo/cartpole.yaml", "actor.recurrent={type: lstm, hidden_size: 4096, num_layers: 2}", gym.spaces.Box(-1, 1, (4,)), "actor.recurrent.hidden_size"),
        ("ppo/atari_pong.yaml", "actor.encoder=impala_resnet", PONG_OBS, "actor.encoder.channels"),
    ],
)
def test_a_network_too_big_for_memory_is_refused_naming_its_part(config, override, space, key):
    cfg = load_config(CONFIGS / config, [override, "actor.cnn_channels=[1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024]"])
    with pytest.raises(ConfigError, match=rf"config key '{key}' = .*: the run needs at least .* GiB \((recurrent cores|CNN encoders): .*lower it"):
        check_memory(cfg, space, available=1 << 30)


@pytest.mark.parametrize(
    "config, space, kind",
    [("sac/halfcheetah.yaml", gym.spaces.Box(-1, 1, (17,)), "MuJoCo"), ("dqn/atari_pong.yaml", PONG_OBS, "Atari")],
)
def test_tens_of_thousands_of_envs_that_would_not_fit_are_refused(config, space, kind):
    """The fuzzer's finding: 65,536 HalfCheetah envs (a round within SAC's budget) made MuJoCo
    fail with "Could not allocate memory" after taking 24 GiB; the floor counts the envs now."""
    pytest.importorskip("mujoco" if kind == "MuJoCo" else "ale_py")
    cfg = load_config(CONFIGS / config, ["env.num_envs=65536"])
    with pytest.raises(ConfigError, match=rf"config key 'env.num_envs' = 65536: the run needs at least .* GiB \(65,5\d\d {kind} envs of 0.5\d MiB"):
        check_memory(cfg, space, available=16 << 30)
    check_memory(load_config(CONFIGS / config), space, available=16 << 30)  # the shipped config fits


@pytest.mark.parametrize(
    "config, overrides, product",
    [
        ("ppo/cartpole.yaml", ["env.num_envs=65536"], "env.num_envs x storage.num_steps x max(1, scheme.num_col_workers) = 65536 x 32 x 1 = 2,097,152"),
        ("ppo/cartpole_sync_2workers.yaml", ["run.target_steps=256"], "storage.num_steps x max(1, scheme.num_col_workers) = 16 x 16 x 2 = 512"),
        ("dqn/cartpole.yaml", ["algorithm.update_every=100000", "storage.num_steps=100000"], "algorithm.update_every x max(1, scheme.num_col_workers) = 8 x 100000 x 1"),
        ("sac/pendulum.yaml", ["env.num_envs=4096", "algorithm.update_every=8"], "algorithm.update_every x max(1, scheme.num_col_workers) = 4096 x 8 x 1 = 32,768"),
    ],
)
def test_a_round_larger_than_the_budget_is_refused(config, overrides, product):
    with pytest.raises(ConfigError, match=r"^config keys env.num_envs x .* env steps in one round, more than run.target_steps = [\d,]+ \(the whole budget\); lower them or raise run.target_steps$") as info:
        load_config(CONFIGS / config, overrides)
    assert product in str(info.value)


def test_a_round_the_size_of_the_budget_is_accepted_and_the_cli_refusal_writes_nothing(tmp_path, capsys):
    assert from_dict({"env": {"num_envs": 4}, "storage": {"num_steps": 16}, "run": {"target_steps": 64}}).run.target_steps == 64
    err = _refused(capsys, ["train", CARTPOLE, "env.num_envs=65536", "--quiet", "--run-dir", tmp_path / "run"], tmp_path)
    assert "2,097,152 env steps in one round, more than run.target_steps = 100,000" in err


def test_a_file_written_atomically_is_whole_or_as_it_was(tmp_path):
    """summary.json, a resumed run's progress.csv, an evaluation's video and demonstrations: a
    write cut short (a signal, a full disk) leaves the old file and no stray temporary file; a
    disk that refuses it is one line naming the file."""
    import errno

    import numpy as np

    from pytorchrl.agent.storages.on_policy.demos import save_demo
    from pytorchrl.utils.paths import atomic_file, write_text_atomic

    path = tmp_path / "summary.json"
    write_text_atomic(path, "old")
    for failure, raised in [(KeyboardInterrupt(), KeyboardInterrupt), (OSError(errno.ENOSPC, "No space left on device"), InputError)]:
        with pytest.raises(raised), atomic_file(path, "w", what="summary") as f:
            f.write("new t")
            raise failure
        assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]
    with pytest.raises(InputError, match=rf"^summary '{re.escape(str(path))}' cannot be written: No space left on device$"), atomic_file(path, "w", what="summary"):
        raise OSError(errno.ENOSPC, "No space left on device")
    write_text_atomic(path, "new text")
    assert path.read_text() == "new text"
    demo = tmp_path / "demo_000.npz"
    save_demo(demo, obs=np.zeros((3, 2)), actions=np.zeros(2), rewards=np.zeros(2), env_id="x")
    before = demo.read_bytes()
    with pytest.raises(ValueError):
        save_demo(demo, obs=np.zeros((3, 2)), actions=np.zeros(5), rewards=np.zeros(2), env_id="x")
    assert demo.read_bytes() == before


def test_the_memory_floor_counts_what_a_replay_buffer_fills_when_made_at_its_capacity():
    """Observations cost memory once written (``np.empty``), so a buffer counts what the run
    fills; a priority tree's minima (+inf) and HER's episode links (-1) are written whole when
    the buffer is made, so they count at the capacity whatever the budget."""
    from pytorchrl.agent.storages.off_policy.sum_tree import SumTree

    def parts(config: str, *overrides: str) -> dict:
        return estimate_bytes(load_config(CONFIGS / config, list(overrides)), PONG_OBS if "atari" in config else gym.spaces.Box(-1, 1, (4,)))

    made = "the replay buffer's priority tree, made whole"
    rainbow = parts("dqn/atari_pong.yaml", "storage.capacity=1000000", "run.target_steps=30000")
    assert rainbow[made] == ("storage.capacity", 1_000_000, SumTree.eager_bytes(1_000_000))
    assert 8 * 1_000_000 < SumTree.eager_bytes(1_000_000) < 9 * 1_000_000  # the leaves and the levels above, 16 to a node
    assert rainbow["replay buffer, the 30,000 transitions it holds by the run's end (storage.capacity 1,000,000)"][2] == 30_000 * 4 * 84 * 84
    assert not [p for p in parts("dqn/cartpole.yaml", "storage.capacity=1000000") if "made whole" in p]  # uniform replay
    her = parts("sac/pendulum.yaml", "storage.capacity=1000000", "storage.her={strategy: episode}")
    assert her["the replay buffer's episode links, made whole"][2] == 8 * 1_000_000
