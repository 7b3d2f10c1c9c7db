"""An algorithm outside the package (tests/custom_algorithm.py), named ``'module:Class'`` in a
config: trained, resumed and evaluated from the CLI; bad names are one line."""

from __future__ import annotations

import csv
import json
import warnings

import pytest
import yaml

from pytorchrl.agent.algorithms import ALGORITHMS, BUILT_IN, register_algorithm
from pytorchrl.cli import main
from pytorchrl.config import ConfigError, from_dict
from tests.custom_algorithm import Reinforce

NAME = "tests.custom_algorithm:Reinforce"
SMALL = {"num_envs": 2}


@pytest.fixture(autouse=True)
def _built_in_only():
    """Each test starts and ends with the built-in registry (a name registered stays for the process)."""
    for name in [n for n in ALGORITHMS if n not in BUILT_IN]:
        del ALGORITHMS[name]
    yield
    for name in [n for n in ALGORITHMS if n not in BUILT_IN]:
        del ALGORITHMS[name]


@pytest.mark.slow  # three in-process runs: seconds
@pytest.mark.timeout(60)
def test_an_algorithm_named_module_class_trains_resumes_and_evaluates_from_the_cli(tmp_path, capsys):
    config = tmp_path / "reinforce.yaml"
    config.write_text(yaml.safe_dump({
        "env": {"env_id": "CartPole-v1", **SMALL}, "storage": {"num_steps": 64},
        "algorithm": {"name": NAME, "baseline_coef": 0.25},
        "run": {"target_steps": 512, "log_every": 256, "eval_every": 0, "eval_episodes": 1, "checkpoint_every": 256},
    }))
    run = tmp_path / "run"
    assert main(["train", str(config), "--run-dir", str(run), "--quiet"]) == 0
    assert ALGORITHMS[NAME] is Reinforce
    with open(run / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["env_steps"]) for r in rows] == [256, 512] and all(r["baseline_loss"] for r in rows)  # its own metric, logged
    assert yaml.safe_load((run / "config.yaml").read_text())["algorithm"]["baseline_coef"] == 0.25
    del ALGORITHMS[NAME]  # a new process: the run's config.yaml names it again
    assert main(["train", "--resume", str(run), "run.target_steps=768", "--quiet"]) == 0
    assert json.loads((run / "summary.json").read_text())["env_steps"] == 768
    capsys.readouterr()
    assert main(["evaluate", str(run), "--episodes", "1"]) == 0


@pytest.mark.parametrize(("name", "says"), [
    ("no_such_module:Reinforce", "algorithm.name = 'no_such_module:Reinforce': cannot import module 'no_such_module' (No module named 'no_such_module'); is it on PYTHONPATH?"),
    ("tests.custom_algorithm:Missing", "algorithm.name = 'tests.custom_algorithm:Missing': module 'tests.custom_algorithm' has no 'Missing'"),
    ("tests.custom_algorithm:NotAnAlgorithm", "is not a subclass of pytorchrl.agent.algorithms.Algorithm"),
    ("tests.custom_algorithm:UndecoratedReinforce", "Undecorated declares extra_coef but is not a dataclass of its own; decorate it with @dataclass(frozen=True)"),
    (".relative:Reinforce", "'module:Class' needs an absolute module name and a class"),
    ("reinforce", "'algorithm.name' = 'reinforce' is not allowed"),
])
def test_a_bad_algorithm_name_is_one_line(name, says):
    with pytest.raises(ConfigError) as info:
        from_dict({"algorithm": {"name": name}})
    assert says in str(info.value) and "\n" not in str(info.value)
    assert set(ALGORITHMS) == set(BUILT_IN)


def test_register_algorithm_from_python_and_its_refusals():
    register_algorithm("reinforce", Reinforce)
    config = from_dict({"algorithm": {"name": "reinforce", "baseline_coef": 2.0}})
    assert config.algorithm.baseline_coef == 2.0
    with pytest.raises(ConfigError, match="'ppo' is a built-in algorithm's name; choose another"):
        register_algorithm("ppo", Reinforce)

    class Again(Reinforce):
        pass

    with pytest.warns(UserWarning, match=r"^register_algorithm: 'reinforce' named Reinforce; it names .*Again now$"):
        register_algorithm("reinforce", Again)
    with pytest.raises(ConfigError, match=r"config key 'algorithm\.baseline_coef' does not apply to algorithm\.name = 'ppo'; it is a key of reinforce"):
        from_dict({"algorithm": {"name": "ppo", "baseline_coef": 2.0}})


def test_a_figure_an_algorithm_reports_but_does_not_declare_is_warned_of_once():
    """A loss's figure missing from ``metrics`` never reaches progress.csv: the first update
    says so, naming it and where to declare it (it was left out without a word)."""
    from pytorchrl import Learner

    class Forgetful(Reinforce):
        metrics = ("policy_loss", "lr")  # baseline_loss reported, not declared

    register_algorithm("forgetful", Forgetful)
    config = from_dict({"env": SMALL, "storage": {"num_steps": 16}, "algorithm": {"name": "forgetful"}, "run": {"target_steps": 64, "eval_every": 0}})
    with Learner.from_config(config, progress=False) as learner:
        with pytest.warns(UserWarning, match=r"^Forgetful.compute_loss reports baseline_loss, which Forgetful.metrics does not declare: they are not logged; add them to Forgetful.metrics$"):
            learner.step()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            learner.step()  # once
