"""Field readiness (issue 36): keys that do not apply warn once; evaluate and --resume refuse
overrides of what a checkpoint fixes; train's stdout is its JSON summary alone; progress.csv
never repeats a row; a truncated newest checkpoint is one line."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

from pytorchrl.cli import _format_warning, main
from pytorchrl.config import config_to_dict, from_dict, load_run_config
from pytorchrl.config_applicability import IgnoredConfigKeysWarning, check_trained_keys, inapplicable_keys, warn_inapplicable
from pytorchrl.learner import Learner
from pytorchrl.utils.errors import CheckpointError, ConfigError
from tests.conftest import CONFIGS, REPO, checkpointed_run

CARTPOLE = str(CONFIGS / "ppo" / "cartpole.yaml")
VECTOR = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
TINY = {
    "env": {"num_envs": 4, "num_test_envs": 1},
    "storage": {"num_steps": 16},
    "algorithm": {"name": "ppo", "num_epochs": 1, "minibatch_size": 64},
    "actor": {"hidden_sizes": [8]},
}


def _keys(raw: dict, space: gym.Space = VECTOR) -> list[str]:
    return [key for keys, _ in inapplicable_keys(from_dict(raw), space) for key in keys]


# ----------------------------------------------------------------------------- keys that do not apply


def test_keys_that_do_not_apply_are_named_in_one_warning():
    config = from_dict({
        "env": {"env_id": "CartPole-v1", "atari": {"frame_stack": 2, "screen_size": 64}},
        "actor": {"cnn_features": 128, "cnn_precision": "bfloat16", "recurrent": {"hidden_size": 32}},
        "storage": {"capacity": 5},
    })
    with pytest.warns(IgnoredConfigKeysWarning) as caught:
        warn_inapplicable(config, VECTOR)
    assert len(caught) == 1
    text = str(caught[0].message)
    for key in ("env.atari.screen_size", "env.atari.frame_stack", "actor.encoder.features", "actor.encoder.precision",
                "actor.recurrent.hidden_size", "storage.capacity"):
        assert key in text
    assert "'CartPole-v1' is not an ALE" in text and "builds an MLP" in text and "\n" not in text


def test_defaults_and_keys_that_apply_do_not_warn():
    resumed = config_to_dict(from_dict({}))  # a run's config.yaml: every default written out
    assert _keys(resumed) == []
    assert _keys({"env": {"env_id": "ALE/Pong-v5", "atari": {"frame_stack": 2}}, "actor": {"cnn_features": 128}}, IMAGE) == []
    assert _keys({"actor": {"encoder": {"type": "impala_resnet", "channels": [8, 8]}}}, IMAGE) == []
    assert _keys({"actor": {"recurrent": {"type": "gru", "hidden_size": 32}}}) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_inapplicable(from_dict(resumed), VECTOR)


def test_collection_keys_apply_only_to_their_mode():
    """Preemption is a synchronous round's, the lag bound an asynchronous collection's, and
    neither applies when the driver's worker collects alone."""
    remote = {"num_col_workers": 2}
    assert _keys({"scheme": {**remote, "col_communication": "asynchronous", "fraction_workers": 0.5, "max_policy_lag": 4}}) == ["scheme.fraction_workers"]
    assert _keys({"scheme": {**remote, "fraction_samples": 0.5, "max_policy_lag": 4}}) == ["scheme.max_policy_lag"]
    assert _keys({"scheme": {"col_communication": "asynchronous", "max_policy_lag": 4}}) == ["scheme.col_communication", "scheme.max_policy_lag"]


def test_a_run_saved_before_the_servers_gpu_default_was_null_does_not_warn():
    old = config_to_dict(from_dict({}))
    old["scheme"]["inference_server"]["num_gpus"] = 0.0  # its config.yaml
    assert _keys(old) == []
    assert _keys({"scheme": {"inference_server": {"num_gpus": 1.0}}}) == ["scheme.inference_server"]  # set, and no servers


def test_where_ray_runs_applies_only_with_remote_workers():
    """``--address`` (scheme.ray.address) on a run that never starts Ray is named, not ignored in silence."""
    assert _keys({"scheme": {"ray": {"address": "10.0.0.1:6379", "num_cpus": 4}}}) == ["scheme.ray.address", "scheme.ray.num_cpus"]
    assert _keys({"scheme": {"num_col_workers": 2, "ray": {"address": "10.0.0.1:6379"}}}) == []
    assert _keys({"scheme": {"num_grad_workers": 2, "ray": {"num_cpus": 4}}}) == []


def test_the_encoder_decides_the_cnn_keys():
    assert _keys({"actor": {"encoder": "mlp", "cnn_features": 64}}, IMAGE) == ["actor.encoder.features"]  # the old flat key, read as the nested one
    assert _keys({"actor": {"encoder": {"channels": [8, 8]}}}, IMAGE) == ["actor.encoder.channels"]  # auto: a Nature CNN
    assert _keys({"actor": {"cnn_features": 64}}, gym.spaces.Dict({"image": IMAGE, "x": VECTOR})) == []


@pytest.mark.parametrize(("algorithm", "expected"), [
    ({"name": "td3", "ou_theta": 0.3, "target_policy_noise": 0.0, "target_noise_clip": 0.1}, ["algorithm.ou_theta", "algorithm.target_noise_clip"]),
    ({"name": "td3", "exploration_noise_type": "ou", "ou_theta": 0.3}, []),
    ({"name": "dqn", "num_atoms": 11, "per_alpha": 0.5, "apex_epsilon_alpha": 7.0}, ["algorithm.per_alpha", "algorithm.num_atoms", "algorithm.apex_epsilon_alpha"]),
    ({"name": "dqn", "rainbow": True, "num_atoms": 11, "per_alpha": 0.5, "exploration_final_eps": 0.1}, ["algorithm.exploration_final_eps"]),
    ({"name": "sac", "learn_ent_coef": False, "target_entropy": -1.0}, ["algorithm.target_entropy"]),
    ({"name": "sac", "sde_sample_freq": 8, "sde_log_std_init": -2.0}, ["algorithm.sde_sample_freq", "algorithm.sde_log_std_init"]),
    ({"name": "sac", "use_sde": True, "sde_sample_freq": 8, "sde_log_std_init": -2.0}, []),
])
def test_algorithm_keys_switched_off_by_others(algorithm, expected):
    assert _keys({"algorithm": algorithm, "env": {"env_id": "Pendulum-v1"}}) == expected


@pytest.mark.parametrize(("algorithm", "expected"), [
    ({"name": "ppo"}, []),
    ({"name": "sac", "use_sde": True}, ["actor.log_std_init", "actor.ortho_init"]),  # gSDE's noise starts at algorithm.sde_log_std_init
    ({"name": "sac"}, ["actor.log_std_init", "actor.ortho_init"]),
    ({"name": "td3"}, ["actor.log_std_init", "actor.ortho_init"]),
])
def test_the_on_policy_actors_options_are_named_on_a_replay_algorithm(algorithm, expected):
    assert _keys({"algorithm": algorithm, "env": {"env_id": "Pendulum-v1"}, "actor": {"log_std_init": -3.0, "ortho_init": False}}) == expected


def test_the_cli_shows_a_warning_in_one_line():
    text = _format_warning(IgnoredConfigKeysWarning("a\n  b"), IgnoredConfigKeysWarning, "/x/y.py", 3, "warnings.warn(...)")
    assert text == "pytorchrl: warning: a b\n"


# ----------------------------------------------------------------------- keys a checkpoint fixes


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A run directory with a config.yaml (every default written) and one checkpoint, untrained."""
    learner = Learner.from_config(from_dict(TINY), run_dir=tmp_path / "run", progress=False)
    try:
        learner.checkpoint()
    finally:
        learner.close()
    return tmp_path / "run"


@pytest.mark.parametrize(("override", "message"), [
    ("actor.hidden_sizes=[4]", r"override 'actor.hidden_sizes=\[4\]' changes actor.hidden_sizes to \[4\] \(trained with \[8\]\)"),
    ("env.normalize_obs=true", r"override 'env.normalize_obs=true' changes env.normalize_obs to true \(trained with false\)"),
    ("algorithm.name=dqn", r"^override 'algorithm.name=dqn' changes algorithm.name to 'dqn' \(trained with 'ppo'\)"),
    ("actor={hidden_sizes: [4]}", r"override 'actor=\{hidden_sizes: \[4\]\}' changes actor.hidden_sizes to \[4\] \(trained with \[8\]\)"),
])
def test_overrides_of_what_the_checkpoint_fixes_are_refused(run_dir, override, message):
    with pytest.raises(ConfigError, match=message):
        load_run_config(run_dir, [override])


def test_an_algorithms_own_trained_keys_are_fixed_too():
    raw = config_to_dict(from_dict({"env": {"env_id": "CartPole-v1"}, "algorithm": {"name": "dqn", "value_rescaling": True}}))
    trained = from_dict(raw)
    changed = {**raw, "algorithm": {**raw["algorithm"], "value_rescaling": False}}
    with pytest.raises(ConfigError, match=r"changes algorithm.value_rescaling to false \(trained with true\)"):
        check_trained_keys(trained, changed, ["algorithm.value_rescaling=false"], "run/config.yaml")
    kept = {**raw, "algorithm": {**raw["algorithm"], "lr": 1e-3}}  # a key the network does not depend on
    assert check_trained_keys(trained, kept, ["algorithm.lr=0.001"], "run/config.yaml").algorithm.lr == 1e-3


def test_a_resume_also_keeps_its_seed_and_replay_buffer_and_evaluate_help_names_every_fixed_key(run_dir, capsys):
    """A resumed run carries on its checkpoint's random streams: ``run.seed=5`` would change only
    its config.yaml, making a second copy of seed 0 count as seed 5 in plots and the table. The
    replay buffer's shape must fit the checkpoint's, and RND's networks are the actor's. Each is
    one line naming the key, not a state-dict dump; ``evaluate`` may still change the seed."""
    from pytorchrl.agent.algorithms import ALGORITHMS
    from pytorchrl.cli import main
    from pytorchrl.config_applicability import RESUME_KEYS, TRAINED_KEYS

    with pytest.raises(ConfigError, match=r"^override 'run.seed=5' changes run.seed to 5 \(trained with 0\).*a resumed run also its seed and its replay buffer"):
        load_run_config(run_dir, ["run.seed=5"], resume=True)
    assert load_run_config(run_dir, ["run.seed=5"]).run.seed == 5  # evaluate: another seed's episodes
    with pytest.raises(ConfigError, match=r"changes algorithm.rnd.enabled to true \(trained with false\)"):
        load_run_config(run_dir, ["algorithm.rnd.enabled=true"], resume=True)
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    names = {*TRAINED_KEYS, *RESUME_KEYS, *(key for cls in ALGORITHMS.values() for key in cls.config_class.trained_keys)}
    covered = [key for key in names if key.rsplit(".", 1)[-1] in shown or (key.startswith("actor.") and "actor.*" in shown)]
    assert sorted(names - set(covered)) == []


def test_evaluation_settings_stay_open_and_bad_overrides_are_blamed(run_dir):
    config = load_run_config(run_dir, ["env.atari.repeat_action_probability=0", "run.eval_deterministic=false", "env.max_episode_steps=9"])
    assert config.env.max_episode_steps == 9 and not config.run.eval_deterministic
    with pytest.raises(ConfigError, match=r"^overrides of .*config.yaml: config key 'run.seed' = -1 is out of range"):
        load_run_config(run_dir, ["run.seed=-1"])
    raw = yaml.safe_load((run_dir / "config.yaml").read_text())
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**raw, "run": {**raw["run"], "seed": -1}}))
    with pytest.raises(ConfigError, match=r"config.yaml: config key 'run.seed' = -1"):  # the file's own fault
        load_run_config(run_dir, [])


@pytest.mark.parametrize("command", ["evaluate", "resume"])
def test_evaluate_and_resume_refuse_a_new_network_in_one_line(run_dir, capsys, command):
    argv = ["evaluate", str(run_dir), "--episodes", "1"] if command == "evaluate" else ["train", "--resume", str(run_dir), "--quiet"]
    assert main([*argv, "actor.hidden_sizes=[4]"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "actor.hidden_sizes to [4] (trained with [8])" in err[0]


def test_a_checkpoint_of_another_network_is_one_line(run_dir):
    learner = Learner.from_config(from_dict({**TINY, "actor": {"hidden_sizes": [4, 4]}}), progress=False)
    try:
        with pytest.raises(CheckpointError) as info:
            learner.load_checkpoint(run_dir / "checkpoints" / "step_0")
    finally:
        learner.close()
    text = str(info.value)
    assert "\n" not in text and "in loading state_dict for OnPolicyActor: Missing key(s)" in text and re.search(r"\(and \d+ more\)\)$", text)


# ------------------------------------------------------------------------------ progress.csv rows


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("eval_every", [0, 64, 128, 1000])
@pytest.mark.parametrize("log_every", [64, 128, 192, 1000])
def test_progress_never_repeats_a_row(tmp_path, eval_every, log_every):
    rows, last_eval = _train_rows(tmp_path, {"target_steps": 256, "eval_every": eval_every, "log_every": log_every})
    steps = [int(r["env_steps"]) for r in rows]
    assert steps == sorted(set(steps)) and steps[-1] == 256
    assert float(rows[-1]["eval_return_mean"]) == pytest.approx(last_eval, rel=1e-5)  # the final evaluation, in the last row
    # every evaluation in a row, each once: with eval_every below log_every, not only an interval's last
    made = sorted({*range(eval_every, 257, eval_every), 256}) if eval_every else [256]
    assert [int(r["eval_env_steps"]) for r in rows if r.get("eval_env_steps")] == made


def _train_rows(run_dir: Path, run: dict) -> tuple[list[dict[str, str]], float | None]:
    """progress.csv's rows of a TINY run with ``run`` (one evaluation episode, no checkpoints), and its last evaluation."""
    learner = Learner.from_config(from_dict({**TINY, "run": {"eval_episodes": 1, "checkpoint_every": 0, **run}}), run_dir=run_dir, progress=False)
    try:
        learner.train()
    finally:
        learner.close()
    return _rows(run_dir / "progress.csv"), learner.last_eval


def _crossed(every: int, rounds: list[int]) -> list[int]:
    """The round ends at which an interval of ``every`` steps comes due."""
    due, out = every, []
    for steps in rounds:
        if steps >= due:
            out.append(steps)
            while due <= steps:
                due += every
    return out


@pytest.mark.parametrize(("eval_every", "log_every"), [(96, 160), (150, 100), (64, 192), (100, 150)])
def test_every_evaluation_reaches_a_row_when_intervals_and_rounds_do_not_line_up(tmp_path, eval_every, log_every):
    """Rounds of 64 steps: an evaluation made at 128 (due at 96) whose successor comes due at
    192, in the round where a row (due at 160) is written, gets a row of its own at 128; it was
    replaced before any row took it. Every evaluation is in a row, at the steps it evaluated."""
    rows, _ = _train_rows(tmp_path, {"target_steps": 384, "eval_every": eval_every, "log_every": log_every})
    steps = [int(r["env_steps"]) for r in rows]
    made = sorted({*_crossed(eval_every, list(range(64, 385, 64))), 384})
    assert steps == sorted(set(steps)) and [int(r["eval_env_steps"]) for r in rows if r.get("eval_env_steps")] == made


def test_a_time_limited_run_ends_with_one_row(tmp_path):
    run = {"target_steps": 10_000_000, "max_time_s": 0.01, "eval_every": 0, "log_every": 64, "eval_episodes": 1, "checkpoint_every": 0}
    learner = Learner.from_config(from_dict({**TINY, "run": run}), run_dir=tmp_path, progress=False)
    try:
        summary = learner.train()
    finally:
        learner.close()
    rows = _rows(tmp_path / "progress.csv")
    steps = [int(r["env_steps"]) for r in rows]
    assert summary["stop_reason"] == "max_time_s" and steps == sorted(set(steps)) and steps[-1] == summary["env_steps"]
    assert float(rows[-1]["eval_return_mean"]) == pytest.approx(summary["final_eval_return_mean"], rel=1e-5)


# ------------------------------------------------------------------------------- checkpoints


def test_a_truncated_newest_checkpoint_is_one_warning_line(tmp_path, capsys):
    checkpointed_run(from_dict(TINY), tmp_path / "run")
    for step in (1, 2):
        state = tmp_path / "run" / "checkpoints" / f"step_{step}" / "state.pt"
        state.write_bytes(state.read_bytes()[:100])
    with pytest.warns(UserWarning) as caught:
        assert main(["evaluate", str(tmp_path / "run"), "--episodes", "1"]) == 0
    skipped = [str(w.message) for w in caught if "checkpoint" in str(w.message)]
    assert len(skipped) == 1 and "skipping 2 unreadable checkpoints" in skipped[0]
    assert "step_2/state.pt" in skipped[0] and "step_1/state.pt" in skipped[0] and skipped[0].endswith("step_0'")
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["env_steps"] == 0


# ------------------------------------------------------------------------------------ stdout

NOISY_ENV = '''
import os
import gymnasium as gym


def make():
    print("noisy env: a print")
    os.write(1, b"noisy env: file descriptor 1\\n")
    return gym.make("CartPole-v1")
'''


@pytest.mark.slow
def test_train_stdout_is_the_json_summary_alone(tmp_path):
    """Prints of the env in the driver and in Ray workers (forwarded by Ray's log_to_driver, its
    deduplicated repeats flushed when Ray stops) all go to stderr; the one warning is one line."""
    (tmp_path / "noisy_env_module.py").write_text(NOISY_ENV)
    proc = subprocess.run(
        [sys.executable, "-m", "pytorchrl.cli", "train", CARTPOLE, "--quiet", "--run-dir", str(tmp_path / "run"),
         "env.env_id=noisy_env_module:make", "env.num_envs=2", "scheme.num_col_workers=2", "scheme.ray.num_cpus=2",
         "run.target_steps=512", "run.eval_episodes=1", "env.atari.frame_stack=2"],
        capture_output=True, text=True, timeout=110, cwd=REPO, env={**_environ(), "PYTHONPATH": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)  # exactly one JSON document, nothing around it
    assert summary["env_steps"] == 512 and proc.stdout.count("\n") == 1
    assert "noisy env: a print" in proc.stderr and "noisy env: file descriptor 1" in proc.stderr
    warning = [line for line in proc.stderr.splitlines() if "do not apply" in line]
    assert warning == ["pytorchrl: warning: config keys that do not apply to this run are ignored: env.atari.frame_stack "
                       "(env.env_id 'noisy_env_module:make' is not an ALE (Atari) id)"]


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)
