"""Bad input a hostile but fair user gives: each is one line naming the key or file, before any
env, worker or Ray process starts."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from pytorchrl.cli import main
from pytorchrl.config import from_dict, load_config
from pytorchrl.envs import VecEnv
from pytorchrl.learner import Learner
from pytorchrl.logging.writers import CSVWriter
from pytorchrl.run_dir import LOCK_FILE, RunDirLock
from pytorchrl.scheme.scheme import build_scheme, resolve_device
from pytorchrl.tuning import load_space
from pytorchrl.utils.checkpoint import load_checkpoint, load_newest_checkpoint, nonfinite_tensor
from pytorchrl.utils.errors import CheckpointError, ConfigError, InputError, TrainingDiverged
from tests.conftest import CONFIGS, checkpointed_run

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
        ("algorithm=ppo", r"config key 'algorithm' = 'ppo' is a section, not a value: set its keys \(e.g. algorithm.name=ppo\)"),
        ("algorithm=5", r"config key 'algorithm' = 5 is a section, not a value: set its keys \(e.g. algorithm.name=ppo\)"),
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


@pytest.mark.parametrize(
    ("env_id", "cls", "kwargs", "needs"),
    [
        ("LunarLander-v3", "gymnasium.envs.box2d.lunar_lander.LunarLander", {"continuous": True}, "needs Box2D, which is not installed: pip install Box2D"),
        ("HalfCheetah-v5", "gymnasium.envs.mujoco.half_cheetah_v5.HalfCheetahEnv", {}, "needs MuJoCo, which is not installed: pip install 'gymnasium[mujoco]'"),
    ],
)
def test_a_missing_env_dependency_names_the_extra_not_the_kwargs(monkeypatch, env_id, cls, kwargs, needs):
    """An env whose package is missing: the extra to install, never its kwargs blamed (nor
    gymnasium's own hint, which builds Box2D from source)."""
    module, name = cls.rsplit(".", 1)

    def missing(self, *args, **kw):
        raise gym.error.DependencyNotInstalled(f"{name} is not installed, run `pip install swig`")

    monkeypatch.setattr(f"{module}.{name}.__init__", missing)
    with pytest.raises(InputError) as error:
        VecEnv.create_factory(env_id, num_envs=1, env_kwargs=kwargs)
    message = str(error.value)
    assert message.startswith(f"env.env_id = {env_id!r} {needs}") and "env_kwargs" not in message and "swig" not in message


@pytest.mark.parametrize("override", ["run.device=tpu", "env.env_kwargs={no_such_kwarg: 1}", "algorithm.lr=.nan"])
def test_the_cli_says_one_line_and_writes_nothing(override, tmp_path, capsys):
    code = main(["train", str(CARTPOLE), override, "--run-dir", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("pytorchrl: error: config key"), err
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------- non-finite training


class _NaNRewards(gym.Wrapper):
    def __init__(self, env: gym.Env, after: int) -> None:
        super().__init__(env)
        self.after, self.steps = after, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return obs, float("nan") if self.steps > self.after else reward, terminated, truncated, info


def nan_reward_cartpole(after: int = 0) -> gym.Env:
    """CartPole whose rewards turn NaN after ``after`` steps of an env (what a broken simulator does)."""
    return _NaNRewards(gym.make("CartPole-v1"), after)


def test_a_non_finite_gradient_is_never_applied():
    scheme = build_scheme(from_dict({"env": {"num_envs": 1, "num_test_envs": 1}}))
    try:
        algo = scheme.algorithm
        algo.apply_gradients(torch.ones_like(algo.flat_grad) * 1e-3)  # Adam's state exists
        weights = {k: v.clone() for k, v in algo.actor.state_dict().items()}
        moments = [s["exp_avg_sq"].clone() for s in algo.optimizer.state.values()]
        version = algo.version
        poisoned = torch.ones_like(algo.flat_grad)
        poisoned[7] = float("nan")
        assert algo.apply_gradients(poisoned) is False and algo.version == version
        assert all(torch.equal(v, weights[k]) for k, v in algo.actor.state_dict().items())
        assert all(torch.equal(s["exp_avg_sq"], m) for s, m in zip(algo.optimizer.state.values(), moments, strict=True))
        assert algo.apply_gradients(torch.ones_like(algo.flat_grad)) is True and algo.version == version + 1
    finally:
        scheme.close()


@pytest.mark.timeout(60)
def test_nan_rewards_stop_the_run_naming_the_good_checkpoint(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main([
        "train", str(CARTPOLE), "env.env_id=tests.test_hardening:nan_reward_cartpole", "env.env_kwargs={after: 300}", "env.num_envs=4",
        "storage.num_steps=32", "algorithm.num_epochs=2", "algorithm.minibatch_size=64", "run.log_every=128", "run.eval_every=0",
        "run.checkpoint_every=256", "run.max_nonfinite_updates=3", "run.stop_at_return=null", "--run-dir", str(run_dir), "--quiet",
    ])
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("pytorchrl: error")]
    assert code == 1 and len(err) == 1
    assert re.search(r"PPO: 3 updates in a row had a non-finite gradient \(first: .*= nan\) and were skipped \(run.max_nonfinite_updates\); "
                     r"the newest checkpoint, .*step_(\d+), is good", err[0]), err[0]
    newest = Path(re.search(r"the newest checkpoint, (.*), is good", err[0]).group(1))
    state, meta = load_checkpoint(newest)
    assert nonfinite_tensor(state["scheme"]) is None and meta["env_steps"] <= 4 * 300 + 128
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "nonfinite_updates" and summary["nonfinite_updates"] == 3


@pytest.mark.timeout(120)
def test_nan_rewards_stop_a_rainbow_run_in_one_line(tmp_path, capsys):
    """C51's projection and prioritized replay's sum tree take NaN returns without a traceback:
    the updates are skipped and counted like PPO's."""
    code = main([
        "train", str(CONFIGS / "dqn" / "rainbow_cartpole.yaml"), "env.env_id=tests.test_hardening:nan_reward_cartpole",
        "env.env_kwargs={after: 64}", "env.num_envs=4", "actor.hidden_sizes=[32]", "algorithm.start_steps=128", "algorithm.update_every=16",
        "run.max_nonfinite_updates=3", "run.stop_at_return=null", "run.eval_every=0", "--run-dir", str(tmp_path / "run"), "--quiet",
    ])
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("pytorchrl: error")]
    assert code == 1 and len(err) == 1
    assert re.search(r"DQN: 3 updates in a row had a non-finite gradient \(first: .*= nan\) and were skipped", err[0]), err[0]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stop_reason"] == "nonfinite_updates"


def test_a_checkpoint_with_non_finite_weights_is_refused(tmp_path):
    learner = Learner.from_config(load_config(CARTPOLE, ["env.num_envs=2", "env.num_test_envs=1"]), run_dir=tmp_path / "run", progress=False)
    try:
        learner.checkpoint()
        with torch.no_grad():
            next(learner.scheme.algorithm.actor.parameters()).view(-1)[0] = float("inf")
        with pytest.raises(TrainingDiverged, match=r"checkpoint at 0 env steps not written: .* holds NaN or infinite values; the newest checkpoint, .*step_0, is good"):
            learner.checkpoint(tmp_path / "run" / "checkpoints" / "step_1")
        assert not (tmp_path / "run" / "checkpoints" / "step_1").exists()
    finally:
        learner.close()


def test_nan_is_written_as_nan_not_as_an_empty_cell(tmp_path):
    writer = CSVWriter(tmp_path / "progress.csv")
    writer.write({"env_steps": 1, "policy_loss": float("nan"), "eval_return_mean": None})
    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
    assert rows[0]["policy_loss"] == "nan" and rows[0]["eval_return_mean"] == ""


def test_every_checkpoint_corrupt_is_one_line_without_warnings(tmp_path, capsys):
    checkpointed_run(load_config(CARTPOLE, ["env.num_envs=2", "env.num_test_envs=1"]), tmp_path / "run")
    for state in (tmp_path / "run" / "checkpoints").glob("step_*/state.pt"):
        state.write_bytes(state.read_bytes()[:100])  # truncated, as by a full disk
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for argv in (["evaluate", str(tmp_path / "run")], ["train", "--resume", str(tmp_path / "run"), "--quiet"]):
            assert main(argv) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert err == [err[0]] and "all 3 checkpoints are unreadable; the newest: checkpoint file" in err[0] and "step_2" in err[0]
    assert not [w for w in caught if "checkpoint" in str(w.message)]


def test_a_meta_file_that_is_not_an_object_and_a_state_of_another_kind_are_skipped_as_unreadable(tmp_path, capsys):
    """Valid JSON that is not an object, and a torch file that is not a run's state: named as
    the checkpoint's fault (not the config's), and an older readable checkpoint is used."""
    run_dir = checkpointed_run(load_config(CARTPOLE, ["env.num_envs=2", "env.num_test_envs=1"]), tmp_path / "run")
    (run_dir / "checkpoints" / "step_2" / "meta.json").write_text("null")
    torch.save({}, run_dir / "checkpoints" / "step_1" / "state.pt")
    with pytest.warns(UserWarning, match=r"skipping 2 unreadable checkpoints \(checkpoint file .*step_2/meta.json' is not a JSON object \(it holds a NoneType\); "
                      r"checkpoint file .*step_1/state.pt' is not a pytorchrl run's checkpoint \(no 'learner' entry\)\); using the newest readable one, .*step_0"):
        checkpoint, _, _ = load_newest_checkpoint(run_dir / "checkpoints")
    assert checkpoint.name == "step_0"
    assert main(["evaluate", str(run_dir / "checkpoints" / "step_1")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and "is not a pytorchrl run's checkpoint (no 'learner' entry)" in err[0]


def test_a_resume_that_fails_to_load_its_checkpoint_leaves_the_run_as_it_was(tmp_path, monkeypatch):
    """Nothing is lost: the run's config.yaml is rewritten (with the overrides) only once the
    checkpoint has loaded, and the attempt leaves no files of its own (a TensorBoard file)."""
    run_dir = checkpointed_run(load_config(CARTPOLE, ["env.num_envs=2", "env.num_test_envs=1"]), tmp_path / "run", steps=(0,))
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    def broken(self, state, where=None, meta=None):
        raise CheckpointError("checkpoint does not match this run's config (as a test)")

    monkeypatch.setattr(Learner, "load_state", broken)
    with pytest.raises(CheckpointError, match="as a test"):
        Learner.resume(run_dir, ["run.target_steps=4096"], progress=False)
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_a_run_resumed_with_another_number_of_envs_starts_them_afresh(tmp_path):
    """env.num_envs stays open on resume: the saved envs (another count) are not restored into
    the new ones, which start fresh episodes."""
    run_dir = checkpointed_run(load_config(CARTPOLE, ["env.num_envs=4", "env.num_test_envs=1", "storage.num_steps=8"]), tmp_path / "run", steps=(0,))
    learner = Learner.from_config(load_config(CARTPOLE, ["env.num_envs=4", "env.num_test_envs=1", "storage.num_steps=8"]), progress=False)
    try:
        learner.step()  # the envs have started: their state is in the checkpoint
        while not learner.round_end:  # a checkpoint is taken at a round's end
            learner.step()
        learner.checkpoint(run_dir / "checkpoints" / "step_32")
    finally:
        learner.close()
    resumed = Learner.resume(run_dir, ["env.num_envs=2"], progress=False)
    try:
        assert resumed.env_steps == 32 and resumed.scheme.collection_workers.local_worker.envs.num_envs == 2
        resumed.step()
        assert resumed.env_steps > 32
    finally:
        resumed.close()
    assert "num_envs: 2" in (run_dir / "config.yaml").read_text()


@pytest.mark.parametrize(
    "config, overrides, message",
    [
        ("ppo/cartpole.yaml", ["actor.hidden_sizes=[65536, 65536]"], r"config key 'actor.hidden_sizes' = \[65536, 65536\]: the run needs at least 128.0 GiB \(networks"),
        ("dqn/atari_pong.yaml", ["storage.capacity=1000000000", "run.target_steps=2000000000"], r"config key 'storage.capacity' = 1000000000: the run needs at least 26,293.6 GiB \(replay buffer: 26,285.6 GiB"),
        # a buffer larger than the run's budget takes what the budget fills (np.empty: pages cost once written)
        ("dqn/atari_pong.yaml", ["storage.capacity=1000000000"], r"config key 'run.target_steps' = 2500000: the run needs at least 73.7 GiB \(replay buffer, the 2,500,000 transitions it holds by the run's end \(storage.capacity 1,000,000,000\): 65.7 GiB"),
    ],
)
def test_a_run_that_cannot_fit_in_memory_is_refused_before_allocating(config, overrides, message):
    from pytorchrl.utils.memory import check_memory

    cfg = load_config(CONFIGS / config, overrides)
    _, obs_space, _ = VecEnv.create_factory(cfg.env.env_id, num_envs=1, atari=dataclasses.asdict(cfg.env.atari))
    with pytest.raises(ConfigError, match=message + r".*more than the 16.0 GiB this machine has available; lower it"):
        check_memory(cfg, obs_space, available=16 << 30)
    check_memory(load_config(CONFIGS / config), obs_space, available=16 << 30)  # the shipped config fits
    if overrides[0].startswith("storage.capacity"):  # a short run of the huge buffer fits: 100,000 transitions (2.6 GiB) and the priority tree's 7.9 GiB
        check_memory(load_config(CONFIGS / config, [overrides[0], "run.target_steps=100000"]), obs_space, available=16 << 30)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fuzzed_configs_train_or_are_refused_in_one_line():
    from benchmarks.fuzz import run

    outcomes = run(seed=0, mutations=120, cli=4, verbose=False)
    failures = [f"{o.mutation.config} [{o.mutation.kind}] {o.mutation.what}: {o.detail}" for o in outcomes if o.result == "failure"]
    assert not failures, failures
    kinds = {o.mutation.kind for o in outcomes}
    assert len(kinds) >= 8 and sum(o.result == "refused" for o in outcomes) >= 60  # the mutations do reach the checks
    assert {o.result for o in outcomes[120:]} <= {"trained", "refused"} and len(outcomes) == 124


def test_a_learning_rate_that_drives_the_loss_to_inf_stops_the_run(tmp_path, capsys):
    code = main(["train", str(CARTPOLE), "algorithm.lr=1e30", "algorithm.anneal_lr=false", "run.max_nonfinite_updates=3",
                 "run.stop_at_return=null", "--run-dir", str(tmp_path / "run"), "--quiet"])
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("pytorchrl: error")]
    assert code == 1 and len(err) == 1 and re.search(r"PPO: 3 updates in a row had a non-finite gradient \(first: \w+ = (inf|nan)\)", err[0]), err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["nonfinite_updates"] == 3


def test_a_run_in_use_before_its_first_checkpoint_is_said_to_be_in_use_not_stopped(tmp_path, capsys):
    """A run still training before its first checkpoint (most of a CartPole run, hours of an
    Atari one): --resume and train --run-dir name the process that holds it, as they do once a
    checkpoint is written; they said it had stopped and to remove the directory."""
    config = load_config(CARTPOLE, ["env.num_envs=2", "env.num_test_envs=1"])
    run = tmp_path / "run"
    with Learner.from_config(config, run_dir=run, progress=False):
        for argv in (["train", "--resume", str(run)], ["train", str(CARTPOLE), "--run-dir", str(run)]):
            assert main(argv) == 2
            err = capsys.readouterr().err.strip()
            assert f"is in use by another process (pid {os.getpid()})" in err and "stopped" not in err and len(err.splitlines()) == 1
    assert main(["train", "--resume", str(run)]) == 2  # closed: it stopped before its first checkpoint
    assert "stopped before its first checkpoint" in capsys.readouterr().err


def test_a_run_directory_in_use_is_refused_to_a_second_learner_until_the_first_closes(tmp_path):
    """Resuming a run another process still trains would write its checkpoints and cut its
    progress.csv back: refused in one line naming the holder, until the first lets go."""
    config = load_config(CARTPOLE, ["env.num_envs=2", "env.num_test_envs=1"])
    first = Learner.from_config(config, run_dir=tmp_path / "run", progress=False)
    try:
        first.checkpoint()
        files = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
        with pytest.raises(InputError, match=rf"run directory '.*run' is in use by another process \(pid {os.getpid()}\)"):
            Learner.resume(tmp_path / "run", progress=False)
        with pytest.raises(InputError, match="is in use by another process"):
            Learner.from_config(config, run_dir=tmp_path / "run", progress=False, reuse_run_dir=True)
        assert {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == files  # nothing written, nothing cut
    finally:
        first.close()
    assert not (tmp_path / "run" / LOCK_FILE).exists()
    with pytest.raises(RuntimeError, match=r"Learner.checkpoint\(\): the learner is closed"):
        first.checkpoint()
    with pytest.raises(RuntimeError, match=r"Learner.evaluate\(\): the learner is closed"):
        first.evaluate()
    second = Learner.resume(tmp_path / "run", progress=False)
    second.close()


def test_a_learner_built_in_python_gets_a_run_directory_of_its_own(tmp_path):
    """``Learner(scheme, run_dir=...)``: the checks from_config makes (a directory that holds a
    run is refused, the lock), and a scheme that is not one is named."""
    Learner.from_config(load_config(CARTPOLE, ["env.num_envs=2", "env.num_test_envs=1"]), run_dir=tmp_path / "taken", progress=False).close()
    scheme = build_scheme(from_dict({"env": {"num_envs": 1, "num_test_envs": 1}}))
    try:
        with pytest.raises(InputError, match=r"run directory '.*taken' already holds a run"):
            Learner(scheme, run_dir=tmp_path / "taken")
        with pytest.raises(InputError, match=r"Learner\(run_dir=...\): a path or None, got int 123"):
            Learner(scheme, run_dir=123)  # type: ignore[arg-type]
    finally:
        scheme.close()
    with pytest.raises(InputError, match=r"Learner\(scheme\): a pytorchrl.scheme.Scheme, got str"):
        Learner("scheme")  # type: ignore[arg-type]


def test_a_lock_waits_its_time_for_the_holder_to_let_go(tmp_path):
    """A Ray Tune trial restarted in its directory waits for its previous process to end."""
    import threading

    held = RunDirLock(tmp_path)
    threading.Timer(0.3, held.release).start()
    waited = RunDirLock(tmp_path, wait_s=10.0)  # taken once the holder lets go
    try:
        with pytest.raises(InputError, match="is in use by another process"):
            RunDirLock(tmp_path, wait_s=0.3)
    finally:
        waited.release()
    assert not (tmp_path / LOCK_FILE).exists()


SMALL_CARTPOLE = ["env.num_envs=2", "env.num_test_envs=1", "storage.num_steps=8", "algorithm.minibatch_size=8", "algorithm.num_epochs=2"]


@pytest.mark.timeout(60)
def test_a_checkpoint_replaces_only_a_checkpoint_and_is_readable_by_the_runs_other_users(tmp_path):
    """``learner.checkpoint("models/")``, as SB3's ``save`` is used, must not wipe a folder of
    other files (or the run directory itself); one line names the path and what it holds."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with Learner.from_config(load_config(CARTPOLE, SMALL_CARTPOLE), run_dir=tmp_path / "run", progress=False) as learner:
        for where in (folder, learner.run_dir):
            with pytest.raises(InputError, match=rf"^checkpoint path '{re.escape(str(where))}' holds .*a checkpoint replaces only a checkpoint \(state.pt, meta.json\); give a new path$"):
                learner.checkpoint(where)
        assert (folder / "notes.txt").read_text() == "keep me" and (learner.run_dir / "config.yaml").is_file()
        path = learner.checkpoint(tmp_path / "ckpt")
        assert learner.checkpoint(path) == path  # a checkpoint is replaced by the newer one
        umask = os.umask(0)
        os.umask(umask)
        assert path.stat().st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0o700
    assert learner._closed  # the with block closed it


@pytest.mark.timeout(60)
def test_a_write_killed_between_its_renames_leaves_the_old_checkpoint_found_and_put_back(tmp_path):
    """Replacing step_N moves the old one aside, then renames the new one in: a process killed
    between the two leaves no step_N. The moved-aside one is complete: it is listed in its
    place (evaluate, resume), and the run's next checkpoint puts it back and removes writes that
    never finished."""
    from pytorchrl.utils.checkpoint import list_checkpoints

    run_dir = checkpointed_run(load_config(CARTPOLE, SMALL_CARTPOLE), tmp_path / "run", steps=(0, 8))
    checkpoints = run_dir / "checkpoints"
    aside = checkpoints / ".step_8.tmp-abc123.old"
    os.replace(checkpoints / "step_8", aside)
    (checkpoints / ".step_16.tmp-def456").mkdir()  # a write that never finished
    assert list_checkpoints(checkpoints) == [checkpoints / "step_0", aside]
    path, _, meta = load_newest_checkpoint(checkpoints)
    assert path == aside and meta["env_steps"] == 8
    resumed = Learner.resume(run_dir, ["run.target_steps=64"], progress=False)
    try:
        assert resumed.env_steps == 8
        while not resumed.round_end or resumed.env_steps == 8:
            resumed.step()
        resumed.checkpoint()
    finally:
        resumed.close()
    assert sorted(p.name for p in checkpoints.iterdir()) == sorted(["step_0", "step_8", f"step_{resumed.env_steps}"])


@pytest.mark.timeout(60)
def test_a_flipped_byte_in_state_pt_is_found_and_the_newest_intact_checkpoint_used(tmp_path):
    """torch.load reads a damaged tensor as data; the archive's CRCs do not match it."""
    import zipfile

    run_dir = checkpointed_run(load_config(CARTPOLE, SMALL_CARTPOLE), tmp_path / "run", steps=(0, 8))
    state = run_dir / "checkpoints" / "step_8" / "state.pt"
    with zipfile.ZipFile(state) as archive:
        member = max(archive.infolist(), key=lambda i: i.file_size)  # a tensor's bytes
    data = bytearray(state.read_bytes())
    at = member.header_offset + 30 + len(member.filename.encode()) + len(member.extra) + member.file_size // 2
    data[at : at + 8] = bytes(b ^ 0xFF for b in data[at : at + 8])
    state.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"checkpoint file '{re.escape(str(state))}' is corrupt \(its member '.*' fails its CRC\)"):
        load_checkpoint(state.parent)
    with pytest.warns(UserWarning, match="fails its CRC"):
        path, _, _ = load_newest_checkpoint(run_dir / "checkpoints")
    assert path.name == "step_0"


@pytest.mark.timeout(60)
def test_a_checkpoint_of_another_algorithm_or_a_mid_round_one_is_refused_in_one_line(tmp_path):
    """A checkpoint records its algorithm and env: an A2C one loaded into a PPO learner is
    refused, naming both. A checkpoint mid-round would not resume exactly (the round under way
    is no part of it): refused until the round ends."""
    a2c = checkpointed_run(load_config(CONFIGS / "a2c" / "cartpole.yaml", ["env.num_envs=2", "env.num_test_envs=1"]), tmp_path / "a2c", steps=(0,))
    with Learner.from_config(load_config(CARTPOLE, SMALL_CARTPOLE), progress=False) as learner:
        with pytest.raises(CheckpointError, match=r"is of a a2c run on CartPole-v1; this learner is ppo on CartPole-v1: load a checkpoint of this run$"):
            learner.load_checkpoint(a2c / "checkpoints" / "step_0")
        learner.step()
        assert not learner.round_end  # 2 epochs of 2 minibatches a round
        with pytest.raises(InputError, match=r"^Learner.checkpoint\(\): mid-round .* step\(\) until learner.round_end"):
            learner.checkpoint(tmp_path / "mid")
        assert not (tmp_path / "mid").exists()
        while not learner.round_end:
            learner.step()
        assert (learner.checkpoint(tmp_path / "end") / "state.pt").is_file()


@pytest.mark.timeout(60)
def test_a_learner_built_in_python_refuses_a_directory_that_holds_a_runs_files(tmp_path):
    """A hand-built Learner writes no config.yaml: the next one given its directory mixed its
    progress.csv rows into them and pruned its own newest checkpoint for the old run's."""
    config = load_config(CARTPOLE, SMALL_CARTPOLE)
    first = Learner(build_scheme(config), run=config.run, run_dir=tmp_path / "run", progress=False)
    try:
        first.checkpoint()
    finally:
        first.close()
    scheme = build_scheme(config)
    try:
        with pytest.raises(InputError, match=r"already holds a run's files \(checkpoints\), which a new run's would mix with"):
            Learner(scheme, run=config.run, run_dir=tmp_path / "run", progress=False)
    finally:
        scheme.close()
