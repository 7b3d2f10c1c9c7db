"""scripts/results_table.py on hand-made run directories: the rows, exactly."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import yaml

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("results_table", REPO / "scripts" / "results_table.py")
assert _spec is not None and _spec.loader is not None
results_table = importlib.util.module_from_spec(_spec)
sys.modules["results_table"] = results_table  # its dataclasses look their module up there
_spec.loader.exec_module(results_table)


def _run(root: Path, name: str, seed: int, curve: list[tuple[int, float | None]], wall: float, machine: str = "CPU X, 2 cores") -> None:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"env": {"env_id": "CartPole-v1"}, "algorithm": {"name": "ppo"}, "run": {"seed": seed}}))
    rows = ["env_steps,eval_return_mean"] + [f"{steps},{'' if value is None else value}" for steps, value in curve]
    (run / "progress.csv").write_text("\n".join(rows) + "\n")
    final = next(value for _, value in reversed(curve) if value is not None)
    (run / "summary.json").write_text(json.dumps({"env_steps": curve[-1][0], "wall_time_s": wall, "final_eval_return_mean": final, "machine": machine}))


def test_two_run_directories_make_exact_rows_and_a_config_without_runs_says_so(tmp_path):
    _run(tmp_path, "ppo-cartpole-seed0", 0, [(1000, 100.0), (2000, None), (3000, 480.0), (4000, 500.0)], 12.0)
    _run(tmp_path, "ppo-cartpole-seed1", 1, [(1000, 50.0), (2000, 200.0), (4000, 300.7)], 20.0)
    (tmp_path / "ppo-cartpole-seed2").mkdir()  # a run that never finished: no summary.json, not counted
    _run(tmp_path, "ppo-cartpole-seed3", 3, [(1000, 10.0)], 5.0)  # stopped to be resumed: not counted either
    summary = tmp_path / "ppo-cartpole-seed3" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "stop_reason": "interrupted"}))
    manifest = tmp_path / "results.yaml"
    manifest.write_text(yaml.safe_dump([
        {"config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 475,
         "anchor": {"return": 500, "budget": 100000, "source": "zoo", "protocol": "agent steps"}},
        {"config": "configs/ppo/acrobot.yaml", "runs": "ppo-acrobot-seed*", "threshold": -100},
    ]))
    rows = results_table.results_table(manifest, tmp_path)
    assert rows[0] == {
        "env": "CartPole-v1", "algorithm": "ppo", "config": "configs/ppo/cartpole.yaml", "seeds": "0, 1",
        "final return (median)": "400", "spread (min to max)": "301 to 500", "steps to threshold": "1/2 reached 475, median 3,000",
        "wall-clock (median)": "16 s", "CPU": "CPU X, 2 cores", "anchor": "500 in 100,000 steps (zoo)", "protocol": "agent steps",
    }
    assert rows[1]["seeds"] == "no runs yet" and rows[1]["anchor"] == "none" and rows[1]["config"] == "configs/ppo/acrobot.yaml"
    text = results_table.markdown(rows)
    assert text.splitlines()[2].startswith("| CartPole-v1 | ppo | configs/ppo/cartpole.yaml | 0, 1 | 400 |")


def test_the_shipped_manifest_names_shipped_configs():
    entries = results_table.entries(REPO / "benchmarks" / "results.yaml")
    assert entries and all((REPO / entry["config"]).is_file() for entry in entries)
