"""`pytorchrl tune`: search spaces are checked against the config before Ray starts; PBT's exploit
continues the source trial exactly with the new hyper-parameters; a 2-trial search on a tiny
budget writes trial runs, trials.csv and a ready best config."""

from __future__ import annotations

import csv
import sys

import pytest
import torch
import yaml

from pytorchrl.cli import main
from pytorchrl.config import config_to_dict, load_config
from pytorchrl.learner import Learner
from pytorchrl.tuning import check_pbt_keys, check_space, load_space, restore, tune, tune_domains
from pytorchrl.utils.checkpoint import load_checkpoint
from pytorchrl.utils.errors import ConfigError, InputError
from tests.conftest import CONFIGS

BASE = config_to_dict(load_config(CONFIGS / "ppo" / "cartpole.yaml"))


def test_a_space_maps_keys_to_distributions_that_sample_inside_their_bounds():
    space = {
        "algorithm.lr": {"loguniform": [1e-4, "3e-3"]},  # YAML 1.1 reads 3e-3 as a string
        "algorithm.clip_range": {"uniform": [0.1, 0.3]},
        "algorithm.num_epochs": {"randint": [4, 11]},
        "storage.num_steps": {"choice": [16, 32]},
        "run.seed": {"grid": [0, 1]},
    }
    parsed = check_space(space, BASE)
    domains = tune_domains(parsed)
    for _ in range(50):
        assert 1e-4 <= domains["algorithm.lr"].sample() <= 3e-3
        assert 0.1 <= domains["algorithm.clip_range"].sample() <= 0.3
        assert 4 <= domains["algorithm.num_epochs"].sample() <= 10
        assert domains["storage.num_steps"].sample() in (16, 32)
    assert domains["run.seed"] == {"grid_search": [0, 1]}


@pytest.mark.parametrize(
    "space, message",
    [
        ({"algorithm.lrr": {"loguniform": [1e-4, 1e-3]}}, r"unknown config key 'algorithm.lrr'; did you mean 'algorithm.lr'\?"),
        ({"algorithm.lr": {"loguniforn": [1e-4, 1e-3]}}, r"unknown distribution 'loguniforn' \(did you mean 'loguniform'\?\)"),
        ({"algorithm.lr": {"loguniform": [0, 1e-3]}}, r"'algorithm.lr': loguniform needs \[low, high\] with 0 < low < high; got \[0, 0.001\]"),
        ({"algorithm.clip_range": {"uniform": [-0.1, 0.3]}}, r"'algorithm.clip_range' = -0.1 is out of range: must be > 0"),
        ({"algorithm.num_epochs": {"randint": [1.5, 4]}}, r"randint needs \[low, high\) integers"),
        ({"algorithm.num_epochs": {"choice": []}}, r"choice needs a non-empty list"),
        ({"algorithm.lr": 0.001}, r"'algorithm.lr' must map to one distribution"),
        ({"env.vectorization": {"choice": ["sync", "asynch"]}}, r"'env.vectorization' = 'asynch' is not allowed \(did you mean 'async'\?\)"),
        ({"algorithm.num_epochs": {"uniform": [1, 10]}}, r"'algorithm.num_epochs' takes whole numbers, and uniform samples fractions: use randint or choice"),
        ({"storage.num_steps": {"loguniform": [1, 100]}}, r"'storage.num_steps' takes whole numbers, and loguniform samples fractions"),
        ({"algorithm": {"lr": {"uniform": [1e-4, 1e-3]}}}, r"keys are dotted config keys \(e.g. 'algorithm.lr'\), not sections; got the section 'algorithm'"),
        ({"algorithm.lr": {"loguniform": ["3e-3", "1e-4"]}}, r"loguniform needs \[low, high\] with 0 < low < high; got \[0.003, 0.0001\]$"),
        ({1: {"choice": [1, 2]}}, r"key 1 \(int\) must be a dotted config key string, e.g. algorithm.lr$"),
    ],
)
def test_a_bad_space_is_one_line_naming_the_key(space, message):
    with pytest.raises(ConfigError, match=message):
        check_space(space, BASE)


@pytest.mark.parametrize("space, config, scheduler", [("ppo_cartpole_space", "ppo/cartpole", "asha"), ("ppo_pendulum_pbt_space", "ppo/pendulum", "pbt")])
def test_the_shipped_spaces_fit_their_configs(space, config, scheduler):
    base = config_to_dict(load_config(CONFIGS / f"{config}.yaml"))
    parsed = check_space(load_space(CONFIGS / "tune" / f"{space}.yaml"), base)
    assert len(parsed) >= 2
    if scheduler == "pbt":
        check_pbt_keys(parsed, "ppo")


def test_pbt_perturbs_only_what_a_running_algorithm_can_change():
    check_pbt_keys(check_space({"algorithm.lr": {"loguniform": [1e-4, 1e-3]}, "algorithm.clip_range": {"uniform": [0.1, 0.3]}}, BASE), "ppo")
    with pytest.raises(ConfigError, match=r"'storage.num_steps' cannot be perturbed by pbt.*ppo can change algorithm.lr"):
        check_pbt_keys(check_space({"storage.num_steps": {"choice": [16, 32]}}, BASE), "ppo")


def test_pbt_refuses_evaluations_made_beside_training(tmp_path):
    """PBT keeps a checkpoint with each score: one made beside training scores weights the
    learner has moved on from by the time the score comes in."""
    with pytest.raises(InputError, match=r"^--scheduler pbt needs run.eval_parallel = false: an evaluation made beside training"):
        tune(CONFIGS / "ppo" / "cartpole.yaml", {"algorithm.lr": {"loguniform": [1e-4, 1e-3]}}, scheduler="pbt",
             overrides=["run.eval_parallel=true"], directory=tmp_path / "t")
    assert not (tmp_path / "t").exists()


def test_bad_tune_input_is_exit_2_with_one_line(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("algorithm.lrr: {loguniform: [1.0e-4, 1.0e-3]}\n")
    cases = [
        ["--space", str(space)],
        ["--space", str(tmp_path / "missing.yaml")],
        ["--space", str(space), "--scheduler", "ashha"],
        ["--space", str(space), "--metric", "eval_return"],
        ["--space", str(space), "--grace-steps", "-5"],
        ["--space", str(space), "--scheduler", "pbt", "--perturbation-interval", "0"],
        ["--space", str(space), "--scheduler", "pbt", "--perturbation-interval", "100000"],  # cartpole's whole budget
        ["--space", str(space), "--grace-steps", "4096", "--scheduler", "pbt"],
    ]
    expected = [
        "did you mean 'algorithm.lr'", "missing.yaml' does not exist", "(did you mean 'asha'?)", "(did you mean 'eval_return_mean'?)",
        "--grace-steps = -5 is out of range: must be >= 1", "--perturbation-interval = 0 is out of range: must be >= 1",
        "--perturbation-interval = 100000 is out of range: must be >= 1 and below run.target_steps = 100000",
        "--grace-steps applies to --scheduler asha only, not pbt",
    ]
    for args, text in zip(cases, expected, strict=True):
        space.write_text("algorithm.lrr: {loguniform: [1.0e-4, 1.0e-3]}\n" if args == cases[0] else "algorithm.lr: {loguniform: [1.0e-4, 1.0e-3]}\n")
        code = main(["tune", str(CONFIGS / "ppo" / "cartpole.yaml"), *args, "--dir", str(tmp_path / "t")])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and text in err[0], err
    assert not (tmp_path / "t").exists()  # checked before anything is written or Ray starts
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "trials.csv").write_text("trial\n")  # a search that ran here
    code = main(["tune", str(CONFIGS / "ppo" / "cartpole.yaml"), "--space", str(space), "--dir", str(tmp_path / "t")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "already holds a search (its trials.csv): choose a new directory" in err[0], err
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["trials.csv"]


def test_tune_without_ray_tunes_dependencies_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    """Plain ``ray`` lacks Tune's dependencies (pandas): one line saying what to install, before
    the directory is made."""
    space = tmp_path / "space.yaml"
    space.write_text("algorithm.lr: {loguniform: [1.0e-4, 1.0e-3]}\n")
    monkeypatch.setitem(sys.modules, "ray.tune", None)  # the import fails as it does without pandas
    code = main(["tune", str(CONFIGS / "ppo" / "cartpole.yaml"), "--space", str(space), "--dir", str(tmp_path / "t")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "tune needs Ray Tune's dependencies" in err[0] and "pip install -e '.[tune]'" in err[0], err
    assert not (tmp_path / "t").exists()


@pytest.mark.slow
def test_a_pbt_exploit_continues_the_source_trial_exactly_with_the_new_values(tmp_path):
    overrides = ["env.env_id=Pendulum-v1", "env.normalize_obs=true", "env.normalize_reward=true", "env.num_envs=2", "storage.num_steps=64",
                 "algorithm.minibatch_size=64", "algorithm.num_epochs=2", "run.eval_every=0", "run.log_every=128", "run.stop_at_return=null"]
    source = Learner.from_config(load_config(CONFIGS / "ppo" / "cartpole.yaml", overrides), progress=False)
    target = None
    try:
        for _ in range(12):
            source.step()
        source.checkpoint(tmp_path / "ckpt")
        state, _ = load_checkpoint(tmp_path / "ckpt")
        params = {"algorithm.lr": 1.234e-4, "algorithm.clip_range": 0.123}
        target = Learner.from_config(load_config(CONFIGS / "ppo" / "cartpole.yaml", [*overrides, "algorithm.lr=1.234e-4", "algorithm.clip_range=0.123"]), progress=False)
        restore(target, state, params)
        a, b = source.scheme.algorithm, target.scheme.algorithm
        for key, value in a.actor.state_dict().items():
            assert torch.equal(value, b.actor.state_dict()[key]), key
        moments_a, moments_b = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
        assert moments_a.keys() == moments_b.keys() and moments_a
        for key in moments_a:
            assert torch.equal(moments_a[key]["exp_avg_sq"], moments_b[key]["exp_avg_sq"])
        assert (target.env_steps, target.updates, target.policy_version) == (source.env_steps, source.updates, source.policy_version)
        assert target.scheme.state_dict().keys() == source.scheme.state_dict().keys()
        norm_a = source.scheme.collection_workers.local_worker.state_dict()["envs"]
        norm_b = target.scheme.collection_workers.local_worker.state_dict()["envs"]
        assert repr(norm_a) == repr(norm_b)  # observation and return normalisers, env RNG streams
        # the new values, not the source's (its optimizer state carried lr = 2e-3, annealed)
        progress = target.env_steps / target.run.target_steps  # both anneal linearly (the base config's schedules)
        assert b.lr == pytest.approx(1.234e-4 * (1 - progress)) and b.config.clip_range == pytest.approx(0.123 * (1 - progress))
        assert all(group["lr"] == b.lr for group in b.optimizer.param_groups)
        assert b.initial_lr == 1.234e-4 and b.initial_clip_range == 0.123
        assert a.lr != b.lr
    finally:
        source.close()
        if target is not None:
            target.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_two_trial_search_writes_runs_trials_and_a_ready_best_config(tmp_path, idle_ray):
    space = {"algorithm.lr": {"loguniform": [5e-4, 3e-3]}, "algorithm.num_epochs": {"randint": [4, 11]}}
    result = tune(
        CONFIGS / "ppo" / "cartpole.yaml", space, directory=tmp_path / "t", samples=2, scheduler="asha",
        overrides=["run.target_steps=2048", "run.log_every=512", "run.eval_every=1024", "run.eval_episodes=2"], verbose=False,
    )
    with open(tmp_path / "t" / "trials.csv", newline="") as f:
        trials = list(csv.DictReader(f))
    assert len(trials) == 2 and {t["status"] for t in trials} <= {"target_steps", "stopped"}
    for trial in trials:
        with open(tmp_path / "t" / "trials" / trial["trial"] / "progress.csv", newline="") as f:
            evals = [row["eval_return_mean"] for row in csv.DictReader(f) if row["eval_return_mean"]]
        assert float(evals[-1]) == pytest.approx(float(trial["eval_return_mean"]), rel=1e-5)  # the run's own record
        config = yaml.safe_load((tmp_path / "t" / "trials" / trial["trial"] / "config.yaml").read_text())
        assert config["algorithm"]["lr"] == pytest.approx(float(trial["algorithm.lr"]))
    assert result.best_metric == max(float(t["eval_return_mean"]) for t in trials)
    best = load_config(result.best_config_path)  # ready for `pytorchrl train`
    assert best.algorithm.lr == pytest.approx(result.best_params["algorithm.lr"]) and best.run.target_steps == 2048


def test_a_trial_reserves_its_learner_and_each_remote_worker():
    from pytorchrl.tuning import trial_resources

    config = load_config(CONFIGS / "ppo" / "cartpole.yaml", ["scheme.num_col_workers=2", "scheme.col_worker_resources.num_cpus=0.5"])
    assert trial_resources(config).bundles == [{"CPU": 1.0}, {"CPU": 0.5}, {"CPU": 0.5}]
    assert trial_resources(load_config(CONFIGS / "ppo" / "cartpole.yaml"), 0.5).bundles == [{"CPU": 0.5}]
    # a CUDA learner reserves its GPU (Tune counted none), less what its central servers take on it
    assert trial_resources(load_config(CONFIGS / "ppo" / "cartpole.yaml", ["run.device=cuda"])).bundles == [{"CPU": 1.0, "GPU": 1.0}]
    central = load_config(CONFIGS / "ppo" / "cartpole.yaml", ["run.device=cuda", "scheme.inference=central", "scheme.num_col_workers=1"])
    assert trial_resources(central).bundles == [{"CPU": 1.0, "GPU": 0.5}, {"CPU": 1.0}, {"CPU": 1.0, "GPU": 0.5}]


def test_a_trials_values_size_its_placement_group():
    """A space that sets the worker count gives each trial the group its own values need."""
    from pytorchrl.tuning import trial_resources_of

    assert trial_resources_of({"scheme.num_col_workers": 2}, base=BASE).bundles == [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}]
    assert trial_resources_of({"algorithm.lr": 1e-3}, base=BASE).bundles == [{"CPU": 1.0}]


def test_a_space_whose_worker_count_cannot_fit_is_checked_at_its_largest_value():
    from pytorchrl.tuning import trial_shapes

    parsed = check_space({"scheme.num_col_workers": {"choice": [0, 4]}, "algorithm.lr": {"loguniform": [1e-4, 1e-3]}}, BASE)
    assert [c.scheme.num_col_workers for c in trial_shapes(BASE, parsed)] == [0, 0, 4]
    parsed = check_space({"scheme.num_col_workers": {"randint": [1, 5]}}, BASE)
    assert [c.scheme.num_col_workers for c in trial_shapes(BASE, parsed)] == [0, 1, 4]


def test_pbt_shifts_a_choice_along_its_values_and_keeps_ranges_inside_their_bounds():
    """Given a domain, Ray's PBT multiplied a choice's value by 0.8 or 1.2 (off the list; a
    string or null failed); a range's perturbed value could leave the range and the config's bounds."""
    import random

    from ray.tune.schedulers.pbt import _explore

    from pytorchrl.tuning import pbt_mutations, within_space

    parsed = check_space(
        {"algorithm.target_kl": {"choice": [None, 0.01, 0.02]}, "algorithm.clip_range": {"uniform": [0.1, 0.3]}, "algorithm.num_epochs": {"randint": [2, 5]}},
        BASE,
    )
    mutations = pbt_mutations(parsed)
    assert mutations["algorithm.target_kl"] == [None, 0.01, 0.02]
    random.seed(0)
    config = {"algorithm.target_kl": 0.01, "algorithm.clip_range": 0.3, "algorithm.num_epochs": 4}
    for _ in range(50):
        explored, _ = _explore(config, mutations, 0.25, (1.2, 0.8), lambda c: within_space(c, parsed=parsed))
        assert explored["algorithm.target_kl"] in (None, 0.01, 0.02)
        assert 0.1 <= explored["algorithm.clip_range"] <= 0.3
        assert explored["algorithm.num_epochs"] in (2, 3, 4)


def test_pbt_decides_and_checkpoints_on_one_grid_of_intervals(monkeypatch, tmp_path):
    """Every report carries the interval count PBT decides on, and the first report of each
    interval carries a checkpoint; a trial restored from another's checkpoints at its first report."""
    from ray import tune as ray_tune

    from pytorchrl.tuning import PBT_TIME, TuneReporter

    reports = []
    monkeypatch.setattr(ray_tune, "report", lambda metrics, checkpoint=None: reports.append((metrics[PBT_TIME], checkpoint is not None)))
    learner = type("L", (), {"env_steps": 0, "checkpoint": lambda self, path: path.mkdir()})()
    reporter = TuneReporter(learner, "eval_return_mean", 1000)
    for steps in (400, 800, 1200, 1600, 2000, 3100):
        reporter.write({"env_steps": steps, "eval_return_mean": 1.0})
    assert reports == [(0, False), (0, False), (1, True), (1, False), (2, True), (3, True)]
    reports.clear()
    learner.env_steps = 2000
    restored = TuneReporter(learner, "eval_return_mean", 1000, restored=True)
    for steps in (2000, 2400, 3000):
        restored.write({"env_steps": steps, "eval_return_mean": 1.0})
    assert reports == [(2, True), (2, False), (3, True)]


@pytest.mark.slow
@pytest.mark.timeout(420)  # past the worker start-up limit (300 s): a worker that never starts fails the trial with its reason
def test_a_trial_with_a_remote_worker_runs_inside_its_placement_group(tmp_path, idle_ray):
    # the trial reserves every CPU of the session's Ray (its learner the rest, beside the worker's
    # one): a worker scheduled outside the trial's placement group would never start. Verbose:
    # if it hangs, Tune's status lines (pending or running) are in the captured output
    learner_cpus = idle_ray.cluster_resources()["CPU"] - 1
    result = tune(
        CONFIGS / "ppo" / "cartpole.yaml", {"algorithm.lr": {"choice": [1e-3]}}, directory=tmp_path / "t", samples=1, scheduler="fifo",
        overrides=["scheme.num_col_workers=1", "run.target_steps=1024", "run.log_every=512", "run.eval_every=1024", "run.eval_episodes=2",
                   "run.stop_at_return=null"], verbose=True, trial_cpus=learner_cpus,
    )
    (trial,) = result.trials
    assert trial["status"] == "target_steps" and trial["env_steps"] >= 1024
    with open(tmp_path / "t" / "trials" / trial["trial"] / "progress.csv", newline="") as f:
        assert {row["healthy_workers"] for row in csv.DictReader(f)} == {"1"}


@pytest.mark.slow
def test_a_trial_bigger_than_the_cluster_is_one_line_before_tune_starts(tmp_path, ray_session):
    # a learner CPU + one CPU per collection worker for each of the cluster's CPUs: Tune would leave it pending forever
    cpus = int(ray_session.cluster_resources()["CPU"])
    with pytest.raises(InputError, match=rf"^tune: each trial's learner and remote workers ask for {cpus + 1} CPU in all "
                                         rf"\(1 trial learner \(--trial-cpus\) x 1 \+ {cpus} collection workers x 1\) but the Ray cluster has {cpus}; "):
        tune(CONFIGS / "ppo" / "cartpole.yaml", {"algorithm.lr": {"choice": [1e-3]}}, directory=tmp_path / "t", samples=1, scheduler="fifo",
             overrides=[f"scheme.num_col_workers={cpus}"], verbose=False)
    with pytest.raises(InputError, match=rf"^tune: one trial learner \(--trial-cpus\) asks for {cpus + 1} CPU but no node of the Ray cluster has more than {cpus}"):
        tune(CONFIGS / "ppo" / "cartpole.yaml", {"algorithm.lr": {"choice": [1e-3]}}, directory=tmp_path / "t", samples=1, scheduler="fifo",
             verbose=False, trial_cpus=cpus + 1)
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("name, env_id", [("ppo", "CartPole-v1"), ("a2c", "CartPole-v1"), ("impala", "CartPole-v1"), ("appo", "CartPole-v1"),
                                          ("dqn", "CartPole-v1"), ("sac", "Pendulum-v1"), ("td3", "Pendulum-v1"), ("ddpg", "Pendulum-v1")])
def test_every_tunable_hyperparameter_is_one_the_algorithm_reads(name, env_id):
    from pytorchrl.config import from_dict
    from pytorchrl.scheme import build_scheme

    config = from_dict({"env": {"env_id": env_id, "num_envs": 1, "num_test_envs": 1}, "algorithm": {"name": name}})
    scheme = build_scheme(config)
    try:
        algo = scheme.algorithm
        # the algorithm's classes and their modules' helpers (a loss function may read the key)
        import inspect
        import sys

        modules = {cls.__module__ for cls in type(algo).__mro__ if cls.__module__.startswith("pytorchrl")}
        source = "".join(inspect.getsource(sys.modules[name]) for name in modules)
        for key in type(algo).tunable:
            assert key in type(config.algorithm).__dataclass_fields__, key  # an algorithm.* config key
            assert f"config.{key}" in source or f'"{key}"' in source, key  # read where the algorithm is written
        algo.set_hyperparameters({"lr": 1.5e-4})
        assert algo.lr == 1.5e-4 and all(group["lr"] == 1.5e-4 for group in algo.optimizer.param_groups)
        with pytest.raises(ValueError, match="cannot change 'gamma' while training"):
            algo.set_hyperparameters({"gamma": 0.5})
    finally:
        scheme.close()
