"""scripts/results_table.py on hand-made run directories: the rows, exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pytorchrl.config import config_to_dict, load_config
from tests.conftest import CONFIGS, REPO, load_script

results_table = load_script("results_table")


def _run(
    root: Path, name: str, seed: int, curve: list[tuple[int, float | None]], wall: float, machine: str = "CPU X, 2 cores",
    overrides: tuple[str, ...] = (), train: list[float | None] | None = None, stop_reason: str = "target_steps",
) -> None:
    """A run directory of configs/ppo/cartpole.yaml (with ``overrides``), as ``train`` writes one;
    ``train``: a training-return column beside the curve, one value per row."""
    run = root / name
    run.mkdir(parents=True)
    config = config_to_dict(load_config(CONFIGS / "ppo" / "cartpole.yaml", [f"run.seed={seed}", *overrides]))
    (run / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    def cell(value: float | None) -> str:
        return "" if value is None else str(value)

    if train is None:
        rows = ["env_steps,eval_return_mean"] + [f"{steps},{cell(value)}" for steps, value in curve]
    else:
        rows = ["env_steps,train_return_mean,eval_return_mean"] + [f"{steps},{cell(t)},{cell(value)}" for (steps, value), t in zip(curve, train, strict=True)]
    (run / "progress.csv").write_text("\n".join(rows) + "\n")
    final = next(value for _, value in reversed(curve) if value is not None)
    (run / "summary.json").write_text(json.dumps({
        "env_steps": curve[-1][0], "wall_time_s": wall, "final_eval_return_mean": final, "machine": machine, "stop_reason": stop_reason,
    }))


def test_two_run_directories_make_exact_rows_and_a_config_without_runs_says_so(tmp_path):
    _run(tmp_path, "ppo-cartpole-seed0", 0, [(1000, 100.0), (2000, None), (3000, 480.0), (4000, 500.0)], 12.0)
    _run(tmp_path, "ppo-cartpole-seed1", 1, [(1000, 50.0), (2000, 200.0), (4000, 300.7)], 20.0)
    (tmp_path / "ppo-cartpole-seed2").mkdir()  # a run that never finished: no summary.json, not counted
    _run(tmp_path, "ppo-cartpole-seed3", 3, [(1000, 10.0)], 5.0, stop_reason="interrupted")  # stopped to be resumed: not counted either
    _run(tmp_path, "ppo-cartpole-seed4", 4, [(1000, 490.0)], 5.0, stop_reason="nonfinite_updates")  # diverged: its evaluation is stale
    manifest = tmp_path / "results.yaml"
    manifest.write_text(yaml.safe_dump([
        {"config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 475,
         "anchor": {"return": 500, "budget": 100000, "source": "zoo", "protocol": "agent steps"}},
        {"config": "configs/ppo/acrobot.yaml", "runs": "ppo-acrobot-seed*", "threshold": -100},
    ]))
    rows = results_table.results_table(manifest, tmp_path)
    assert rows[0] == {
        "env": "CartPole-v1", "algorithm": "ppo", "config": "configs/ppo/cartpole.yaml", "seeds": "0, 1 (2 of 3: seed 2 not finished)",
        "final return (median)": "400", "spread (min to max)": "301 to 500", "steps to threshold": "1/2 reached 475, at 3,000",
        "wall-clock (median)": "16 s", "CPU": "CPU X, 2 cores", "anchor": "500 in 100,000 steps (zoo)", "anchor's protocol": "agent steps",
        "our protocol": "agent steps; deterministic evaluation, 10 episodes every 4,096 steps",  # from the config's run section
        # seed 0's 500 at 4,000 steps; both ran 4,000 of the anchor's 100,000
        "against the anchor": "1/2 reached its 500 in the 4,000 steps run (4% of its budget); 80% of its return",
    }
    assert rows[1]["seeds"] == "no runs yet" and rows[1]["against the anchor"] == "" and rows[1]["anchor"] == "none" and rows[1]["config"] == "configs/ppo/acrobot.yaml"
    assert (rows[1]["env"], rows[1]["algorithm"]) == ("Acrobot-v1", "ppo")  # named from the config
    text = results_table.markdown(rows)
    assert text.splitlines()[2].startswith("| CartPole-v1 | ppo | configs/ppo/cartpole.yaml | 0, 1 (2 of 3: seed 2 not finished) | 400 |")


def test_a_run_stopped_at_its_return_target_says_its_final_figure_is_that_evaluation(tmp_path):
    """A run stopped at the first evaluation at or above ``run.stop_at_return`` reports that
    evaluation, which is picked for being high; the anchors are agents at their budget."""
    _run(tmp_path, "ppo-cartpole-seed0", 0, [(1000, 100.0), (2000, 480.0)], 12.0, stop_reason="stop_at_return")
    _run(tmp_path, "ppo-cartpole-seed1", 1, [(1000, 50.0), (4000, 470.0)], 20.0)
    _run(tmp_path, "ppo-cartpole-seed2", 2, [(1000, 490.0), (4000, 495.0)], 20.0, stop_reason="stop_at_return")
    manifest = tmp_path / "results.yaml"
    manifest.write_text(yaml.safe_dump([{"config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 475}]))
    (row,) = results_table.results_table(manifest, tmp_path)
    assert row["final return (median)"] == "480 (2/3 stopped at their first evaluation >= 475: that evaluation)"
    assert row["steps to threshold"] == "2/3 reached 475, median 1,500 of those 2"


def test_steps_to_threshold_are_the_evaluated_weights_steps_where_the_run_wrote_them(tmp_path):
    """A row that logs an evaluation made earlier (beside training, or due between two rows)
    names its steps in ``eval_env_steps``: the threshold was reached there, not at the row."""
    _run(tmp_path, "ppo-cartpole-seed0", 0, [(1000, 100.0), (2000, 480.0)], 12.0)
    progress = tmp_path / "ppo-cartpole-seed0" / "progress.csv"
    progress.write_text("env_steps,eval_return_mean,eval_env_steps\n1000,100.0,1000\n2000,480.0,1500\n")
    manifest = tmp_path / "results.yaml"
    manifest.write_text(yaml.safe_dump([{"config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 475}]))
    (row,) = results_table.results_table(manifest, tmp_path)
    assert row["steps to threshold"] == "1/1 reached 475, median 1,500"
    record = results_table.archive_run(tmp_path / "ppo-cartpole-seed0", tmp_path / "records")
    assert "eval_env_steps" in (record / "progress.csv").read_text().splitlines()[0]  # the record keeps them


def test_the_shipped_manifest_names_shipped_configs():
    entries = results_table.entries(REPO / "benchmarks" / "results.yaml")
    assert entries and all((REPO / entry["config"]).is_file() for entry in entries)


def test_every_shipped_training_config_has_a_row_or_says_it_has_none():
    rows = {entry["config"] for entry in results_table.entries(REPO / "benchmarks" / "results.yaml")}
    configs = sorted(path.relative_to(REPO).as_posix() for path in (REPO / "configs").rglob("*.yaml") if path.parent.name != "tune")
    silent = [c for c in configs if c not in rows and "An example without a result in the results table" not in (REPO / c).read_text()]
    assert len(configs) > 40 and silent == []


def test_earlier_runs_fill_a_row_without_a_kept_run_and_say_what_backs_them(tmp_path, capsys):
    """``earlier``: runs whose directories were lost before records were kept fill a row that
    has no kept run, saying where their figures are typed from and comparing their final
    returns alone; a kept run replaces them; a malformed entry is one line naming it."""
    runs = tmp_path / "runs"
    runs.mkdir()
    entry = {
        "config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 450,
        "anchor": {"return": 500, "budget": 100000, "source": "zoo", "protocol": "agent steps"},
        "earlier": {"section": "Old runs", "runs": [
            {"seed": 0, "return": 480.0, "steps": 100000, "date": "2026-11-23", "machine": "CPU X, 2 cores"},
            {"seed": 1, "return": 500, "steps": 100000, "date": "2026-11-24"},
        ]},
    }
    manifest = tmp_path / "results.yaml"
    manifest.write_text(yaml.safe_dump([entry]))
    row = results_table.results_table(manifest, [runs])[0]
    assert {k: row[k] for k in ("env", "algorithm", "seeds", "final return (median)", "spread (min to max)", "steps to threshold", "wall-clock (median)", "CPU", "against the anchor")} == {
        "env": "CartPole-v1", "algorithm": "ppo", "seeds": "0, 1 (earlier runs, no record kept)",
        "final return (median)": '490 at 100,000 steps, from BENCHMARKS.md, "Old runs" (2026-11-23, 2026-11-24; their run directories were lost before run records were kept)',
        "spread (min to max)": "480 to 500", "steps to threshold": "2/2 ended at or above 450 (their curves: that section)",
        "wall-clock (median)": "not typed (that section)", "CPU": "CPU X, 2 cores; not typed",
        # seed 1 ended at the anchor's 500; seed 0 may have passed it before its end: "ended", not "reached"
        "against the anchor": "1/2 ended at or above its 500 within its 100,000 steps; 98% of its return",
    }
    for run, wall in zip(entry["earlier"]["runs"], (100.0, 300.0), strict=True):
        run["wall_s"] = wall
    manifest.write_text(yaml.safe_dump([entry]))
    assert results_table.results_table(manifest, [runs])[0]["wall-clock (median)"] == "200 s"  # typed for every run: their median
    _run(runs, "ppo-cartpole-seed0", 0, [(1000, 100.0), (2000, 300.0)], 12.0)  # a kept run: the row is made from it alone
    row = results_table.results_table(manifest, [runs])[0]
    assert row["seeds"] == "0 (1 of 3: seeds 1, 2 not finished)" and row["final return (median)"] == "300" and row["wall-clock (median)"] == "12 s"

    # a kept record of the config before a change says so, in place of "lost"
    manifest.write_text(yaml.safe_dump([{**entry, "earlier": {**entry["earlier"], "record": "benchmarks/runs/x: lr 3e-4 then"}}]))
    row = results_table.results_table(manifest, [runs / "none"])[0]
    assert row["seeds"] == "0, 1 (earlier config)" and row["final return (median)"].endswith('"Old runs" (2026-11-23, 2026-11-24; benchmarks/runs/x: lr 3e-4 then)')

    good = entry["earlier"]["runs"][0]
    for bad in ({"runs": [good]}, {"section": "s", "runs": [good], "record": ""}, {"section": "s", "runs": [good], "record": 3}, {"section": "", "runs": [good]}, {"section": "s", "runs": []}, {"section": "s", "runs": [{**good, "steps": 0}]},
                {"section": "s", "runs": [{**good, "return": "480"}]}, {"section": "s", "runs": [good, good]},
                {"section": "s", "runs": [{**good, "wall": 3}]}, {"section": "s", "runs": [{**good, "wall_s": -1}]}, [good]):
        manifest.write_text(yaml.safe_dump([{**entry, "earlier": bad}]))
        capsys.readouterr()
        assert results_table.main([str(manifest), "--root", str(runs)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "configs/ppo/cartpole.yaml" in err and "earlier" in err and "BENCHMARKS.md heading" in err


def test_the_shipped_earlier_runs_are_in_the_benchmarks_md_section_they_name():
    """Each row's ``earlier`` runs point at the BENCHMARKS.md section that reports them, and that
    section holds each typed return and wall-clock (as it writes them: 4,712 for 4712)."""
    sections: dict[str, list[str]] = {}
    for line in (REPO / "BENCHMARKS.md").read_text().splitlines():
        if line.startswith("#"):
            sections[line.lstrip("#").strip()] = []
        elif sections:
            sections[next(reversed(sections))].append(line)
    earlier = [entry for entry in results_table.entries(REPO / "benchmarks" / "results.yaml") if entry.get("earlier")]
    assert earlier
    for entry in earlier:
        text = "\n".join(sections.get(entry["earlier"]["section"], []))
        assert text, f"{entry['config']}: no section {entry['earlier']['section']!r}"
        for run in entry["earlier"]["runs"]:
            assert f"{abs(run['return']):g}" in text and f"{run['steps']:,}" in text, (entry["config"], run)
            assert "wall_s" not in run or f"{run['wall_s']:,}" in text, (entry["config"], run)


def test_a_run_of_another_config_is_left_out_and_told(tmp_path, capsys, monkeypatch):
    """A row never mixes configs: a run whose saved config differs at a key that changes what is
    learned (or how it is evaluated) is left out with one line naming the key; one that differs
    only at neutral keys (threads, checkpoints, resources) counts; the entry's own overrides count as its."""
    _run(tmp_path, "ppo-cartpole-seed0", 0, [(1000, 500.0)], 3.0, overrides=(
        "run.torch_threads=1", "run.checkpoint_every=5000", "scheme.inference_server.num_gpus=0.0",  # as runs saved before its null default
    ))
    _run(tmp_path, "ppo-cartpole-seed1", 1, [(1000, 500.0)], 3.0, overrides=("algorithm.lr=0.01",))
    _run(tmp_path, "ppo-cartpole-seed2", 2, [(1000, 500.0)], 3.0, overrides=("run.eval_episodes=3",))
    _run(tmp_path, "ppo-cartpole-seed3", 3, [(1000, 20.0)], 3.0, overrides=("run.max_time_s=5",))  # its final return is where it was cut
    manifest = tmp_path / "results.yaml"
    manifest.write_text(yaml.safe_dump([{"config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 475}]))
    assert results_table.results_table(manifest, tmp_path)[0]["seeds"] == "0 (1 of 3: seeds 1, 2 not finished)"
    told = capsys.readouterr().err.splitlines()
    assert len(told) == 3
    assert "ppo-cartpole-seed1 left out" in told[0] and "algorithm.lr = 0.01, not 0.002" in told[0]
    assert "ppo-cartpole-seed2 left out" in told[1] and "run.eval_episodes = 3, not 10" in told[1]
    assert "ppo-cartpole-seed3 left out" in told[2] and "run.max_time_s = 5" in told[2]
    drawn = []  # the figure draws the runs the row counts, no other
    monkeypatch.setattr("pytorchrl.plotting.plot_runs", lambda runs, output, names: drawn.append([p.name for p in runs]))
    assert results_table.main([str(manifest), "--root", str(tmp_path), "-o", str(tmp_path / "t.md"), "--plots", str(tmp_path / "plots")]) == 0
    assert drawn == [["ppo-cartpole-seed0"]]
    manifest.write_text(yaml.safe_dump([
        {"config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 475, "overrides": ["algorithm.lr=0.01"]},
    ]))
    assert results_table.results_table(manifest, tmp_path)[0]["seeds"] == "1 (1 of 3: seeds 0, 2 not finished)"  # now the other way round


def test_every_shipped_row_resolves_its_config():
    """Each manifest entry of both shipped tables names a config (or an --algo/--env default)
    that loads with its overrides: what runs are compared with."""
    for manifest in ("results.yaml", "defaults.yaml"):
        for entry in results_table.entries(REPO / "benchmarks" / manifest):
            config = results_table.expected_config(entry, 0)
            assert config["run"]["seed"] == 0 and config["algorithm"]["name"]


def test_run_records_keep_the_row_when_the_run_directories_are_gone(tmp_path):
    """--archive writes a few-kilobyte record of each counted run; with the run directories
    deleted, the records alone give the same row. Under several roots a name is taken from the
    first; --commands names the seeds still missing, with their run directories under the first root."""
    runs, records = tmp_path / "runs", tmp_path / "records"
    _run(runs, "ppo-cartpole-seed0", 0, [(1000, 100.0), (3000, 480.0)], 12.0)
    _run(runs, "ppo-cartpole-seed1", 1, [(1000, 50.0), (2000, 300.0)], 20.0)
    (runs / "ppo-cartpole-seed0" / "checkpoints").mkdir()  # not part of a record
    curve = runs / "ppo-cartpole-seed0" / "progress.csv"  # with a column no record keeps
    curve.write_text("".join(line + (",value_loss\n" if i == 0 else ",0.5\n") for i, line in enumerate(curve.read_text().splitlines())))
    manifest = tmp_path / "results.yaml"
    manifest.write_text(yaml.safe_dump([{"config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 475}]))
    table = tmp_path / "t.md"
    assert results_table.main([str(manifest), "--root", str(runs), "-o", str(table), "--archive", str(records)]) == 0
    before = table.read_text()
    assert sorted(p.name for p in (records / "ppo-cartpole-seed0").iterdir()) == ["config.yaml", "progress.csv", "summary.json"]
    assert not list(records.glob(".*"))  # no partial record left behind
    assert (records / "ppo-cartpole-seed0" / "progress.csv").read_text() == "env_steps,eval_return_mean\n1000,100.0\n3000,480.0\n"
    import shutil

    shutil.rmtree(runs)
    assert results_table.main([str(manifest), "--root", str(records), "-o", str(table)]) == 0
    assert table.read_text() == before and "| 0, 1 (2 of 3: seed 2 not finished) | 390 | 300 to 480 | 1/2 reached 475, at 3,000 |" in before

    _run(runs, "ppo-cartpole-seed1", 1, [(1000, 500.0)], 1.0)  # a newer run of seed 1 beside its record
    assert results_table.results_table(manifest, [runs, records])[0]["final return (median)"] == "490"  # 480 and 500
    assert results_table.results_table(manifest, [records, runs])[0]["final return (median)"] == "390"  # 480 and 300
    commands = results_table.missing_commands(manifest, [runs, records], [0, 1, 2, 3])
    assert commands == [
        f"pytorchrl train configs/ppo/cartpole.yaml run.seed={seed} --run-dir {runs / f'ppo-cartpole-seed{seed}'}" for seed in (2, 3)
    ]
    assert results_table.missing_commands(manifest, [records], [2], run_root=Path("runs")) == [
        "pytorchrl train configs/ppo/cartpole.yaml run.seed=2 --run-dir runs/ppo-cartpole-seed2"  # never into the records
    ]
    (runs / "ppo-cartpole-seed3" / "checkpoints" / "step_512").mkdir(parents=True)  # begun and stopped
    assert results_table.missing_commands(manifest, [runs, records], [2, 3])[1] == f"pytorchrl train --resume {runs / 'ppo-cartpole-seed3'}"


@pytest.fixture(scope="module")
def committed_tables() -> dict[str, list[tuple[dict[str, str], list[Path], list[Path]]]]:
    """Each shipped manifest's rows and counted runs, from the committed records alone."""
    return {name: results_table.rows_and_runs(REPO / "benchmarks" / f"{name}.yaml", [results_table.RECORDS]) for name in ("results", "defaults")}


def test_the_committed_records_are_counted_runs_of_their_rows(committed_tables):
    """Every committed run record belongs to a row of a shipped manifest and matches its config
    (a record the generator would leave out, or one no row reads, is a stale file)."""
    counted = {run.name for table in committed_tables.values() for _, found, references in table for run in [*found, *references]}
    present = {p.name for p in results_table.RECORDS.iterdir() if p.is_dir()} if results_table.RECORDS.is_dir() else set()
    assert present, "no run records in benchmarks/runs: the tables cannot be regenerated (is the folder ignored by git?)"
    # a record of a config since changed is kept where a row's earlier runs name it (their ``record``)
    earlier = [(entry.get("earlier") or {}).get("record", "") for entry in results_table.entries(REPO / "benchmarks" / "results.yaml")]
    named = {name for name in present if any(f"benchmarks/runs/{name}," in record for record in earlier)}
    assert present == counted | named, f"records no row counts: {sorted(present - counted - named)}"
    assert not counted & named, f"records counted and named as of an earlier config: {sorted(counted & named)}"


def test_into_replaces_the_marked_block_and_nothing_else(tmp_path, capsys):
    """--into FILE swaps the table between the manifest's markers, keeps the text around them,
    and refuses (exit 2, one line naming the file and the markers) a file without them."""
    runs = tmp_path / "runs"
    _run(runs, "ppo-cartpole-seed0", 0, [(1000, 100.0), (3000, 480.0)], 12.0)
    manifest = tmp_path / "results.yaml"
    manifest.write_text(yaml.safe_dump([{"config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 475}]))
    start, end = results_table.markers("results")
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(f"# Before\n\n{start}\n\n| an old | table |\n\n{end}\n\nAfter, with {results_table.markers('defaults')[0]} kept.\n")
    assert results_table.main([str(manifest), "--root", str(runs), "--into", str(doc)]) == 0
    text = doc.read_text()
    table = results_table.markdown(results_table.results_table(manifest, [runs]))
    assert text == f"# Before\n\n{start}\n\n{table}\n{end}\n\nAfter, with {results_table.markers('defaults')[0]} kept.\n"
    assert results_table.generated_block(doc, "results") == table
    assert "an old" not in text and not list(tmp_path.glob(".*.partial"))

    bare = tmp_path / "bare.md"
    bare.write_text(f"no markers here but {end}\n")
    capsys.readouterr()
    assert results_table.main([str(manifest), "--root", str(runs), "--into", str(bare)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bare) in err and start in err and end in err
    assert bare.read_text() == f"no markers here but {end}\n"  # untouched


def test_benchmarks_md_holds_the_tables_the_records_generate(committed_tables):
    """BENCHMARKS.md's results tables are generated, not typed: each is exactly what the
    committed records give (after new runs, regenerate with --into BENCHMARKS.md)."""
    for name, table in committed_tables.items():
        expected = results_table.markdown([row for row, _, _ in table])
        assert results_table.generated_block(REPO / "BENCHMARKS.md", name) == expected, (
            f"BENCHMARKS.md's {name} table is not what benchmarks/runs generates: "
            f"python scripts/results_table.py benchmarks/{name}.yaml --into BENCHMARKS.md"
        )


def test_a_training_return_row_reads_the_training_column_and_says_so(tmp_path, capsys):
    """``metric: train`` (an anchor that reports training returns): the final return is the last
    training return, steps to threshold the first row where it reaches it, and the cell says
    what was measured; an unknown metric is one line naming the entry and what is allowed."""
    runs = tmp_path / "runs"
    # evaluations 100 then 480; training returns 50, 300, then 460 at the last row (no evaluation there)
    _run(runs, "ppo-cartpole-seed0", 0, [(1000, 100.0), (2000, 480.0), (3000, None)], 12.0, train=[50.0, 300.0, 460.0])
    _run(runs, "ppo-cartpole-seed1", 1, [(1000, 200.0), (2000, 490.0), (3000, None)], 14.0, train=[None, 420.0, 440.0])
    entry = {"config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 450}
    manifest = tmp_path / "results.yaml"
    manifest.write_text(yaml.safe_dump([{**entry, "metric": "train"}]))
    row = results_table.results_table(manifest, [runs])[0]
    assert row["final return (median)"] == "450 (training, last 100 episodes)"  # 460 and 440
    assert row["spread (min to max)"] == "440 to 460"
    assert row["steps to threshold"] == "1/2 reached 450, at 3,000"
    manifest.write_text(yaml.safe_dump([entry]))  # the default: evaluations
    row = results_table.results_table(manifest, [runs])[0]
    assert (row["final return (median)"], row["steps to threshold"]) == ("485", "2/2 reached 450, median 2,000")

    manifest.write_text(yaml.safe_dump([{**entry, "metric": "training"}]))
    capsys.readouterr()
    assert results_table.main([str(manifest), "--root", str(runs)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'training'" in err and "configs/ppo/cartpole.yaml" in err and "eval, train" in err
    assert results_table.main([str(manifest), "--root", str(runs), "--commands"]) == 2  # the same line, not a traceback
    assert capsys.readouterr().err.strip() == err


def test_a_published_curves_value_joins_the_anchor_cell_and_a_malformed_one_is_one_line(tmp_path, capsys):
    """``published``: a curve's value at a step count (where a row stops short of its anchor's
    budget) goes into the anchor cell with its source and how its settings differ; one the
    table cannot print is one line naming the entry and what is allowed."""
    runs = tmp_path / "runs"
    _run(runs, "ppo-cartpole-seed0", 0, [(1000, 100.0), (2000, 480.0)], 12.0)
    entry = {
        "config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 450,
        "anchor": {"return": 500, "budget": 100000, "source": "zoo", "protocol": "agent steps"},
        "published": {"return": 2311.3341, "at": 300000, "source": "a curve, 10 seeds", "settings": "its own lr"},
    }
    manifest = tmp_path / "results.yaml"
    manifest.write_text(yaml.safe_dump([entry]))
    row = results_table.results_table(manifest, [runs])[0]
    assert row["anchor"] == "500 in 100,000 steps (zoo); published curve at 300,000 steps: 2,311 (a curve, 10 seeds; its own lr)"
    assert row["anchor's protocol"] == "agent steps"
    del entry["published"]["settings"]  # optional
    manifest.write_text(yaml.safe_dump([entry]))
    assert results_table.results_table(manifest, [runs])[0]["anchor"].endswith("published curve at 300,000 steps: 2,311 (a curve, 10 seeds)")

    for bad in ({"return": "2311", "at": 300000, "source": "s"}, {"return": 1.0, "at": 0, "source": "s"},
                {"return": 1.0, "at": 300000}, {"return": 1.0, "at": 300000, "source": "s", "step": 1},
                {"return": 1.0, "at": 300000, "source": "s", "settings": 3}, [1.0, 300000]):
        manifest.write_text(yaml.safe_dump([{**entry, "published": bad}]))
        capsys.readouterr()
        assert results_table.main([str(manifest), "--root", str(runs)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "configs/ppo/cartpole.yaml" in err and "published" in err and "positive integer at" in err


def test_against_the_anchor_works_out_each_comparison_the_anchor_cell_offers(tmp_path):
    """The "against the anchor" cell: seeds that reached the anchor's return within its budget
    (or within the steps run, where that was short of it), then the median final return as a
    share of the anchor's return, the published curve's value and the reference's median, a
    difference where a share would mislead (a negative return); a row stopped at a threshold
    below the anchor's return says that return was not asked of it."""
    runs = tmp_path / "runs"
    target = load_config(CONFIGS / "ppo" / "cartpole.yaml").run.target_steps
    _run(runs, "ppo-cartpole-seed0", 0, [(50_000, 100.0), (target, 400.0)], 12.0)
    _run(runs, "ppo-cartpole-seed1", 1, [(50_000, 520.0), (target, 500.0)], 12.0)  # past 500 at 50k
    _reference(runs, "sb3-ppo-cartpole-seed0", 0, [20.0, 360.0], target)
    entry = {
        "config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": None,
        "anchor": {"return": 500, "budget": target, "source": "zoo", "protocol": "agent steps"},
        "published": {"return": 300.0, "at": target, "source": "a curve"},
        "reference": {"runs": "sb3-ppo-cartpole-seed*", "label": "SB3 PPO"},
    }
    manifest = tmp_path / "results.yaml"

    def cell(**changes):
        manifest.write_text(yaml.safe_dump([{**entry, **changes}]))
        return results_table.results_table(manifest, [runs])[0]["against the anchor"]

    # median 450: 90% of 500, 150% of 300, 125% of 360
    assert cell() == f"1/2 reached its 500 within its {target:,} steps; 90% of its return; 150% of the published curve at {target:,} steps; 125% of the same-protocol reference"
    # the anchor's budget four times the steps run (a row run short of it on purpose)
    short = {**entry["anchor"], "budget": 4 * target}
    assert cell(anchor=short, published=None, reference=None) == f"1/2 reached its 500 in the {target:,} steps run (25% of its budget); 90% of its return"
    # negative returns: the difference, not a share
    assert cell(anchor={**entry["anchor"], "return": -100}, published=None, reference=None) == f"2/2 reached its -100 within its {target:,} steps; 550 above its return"
    assert cell(anchor=None) == ""  # nothing to stand against

    # runs stopped at a threshold below the anchor's return: steps only, and the anchor's return is said not to be asked
    _run(runs, "ppo-cartpole-seed2", 2, [(10_000, 480.0)], 5.0, overrides=("run.stop_at_return=475",), stop_reason="stop_at_return")
    manifest.write_text(yaml.safe_dump([{**entry, "runs": "ppo-cartpole-seed2", "overrides": ["run.stop_at_return=475"], "threshold": 475, "reference": None}]))
    assert results_table.results_table(manifest, [runs])[0]["against the anchor"] == f"1/1 reached 475, where they stop, within its {target:,} steps; its 500 is not asked of them"


def _reference(
    root: Path, name: str, seed: int, evaluations: list[float | None], steps: int, overrides: tuple[str, ...] = (), made: int | None = None
) -> None:
    """A reference run directory as ``scripts/sb3_reference.py`` writes one, of configs/ppo/cartpole.yaml,
    run for ``steps`` (``--steps``) and stopped at ``made`` (default: all of them)."""
    run = root / name
    run.mkdir(parents=True)
    made = steps if made is None else made
    settings = {"config": "configs/ppo/cartpole.yaml", "overrides": list(overrides), "seed": seed, "steps": steps, "env_steps": made}
    (run / "settings.json").write_text(json.dumps(settings))
    # evaluated evenly up to where it stopped
    rows = ["env_steps,wall_time_s,eval_return_mean"] + [f"{made * (i + 1) // len(evaluations)},{i}.5,{'' if v is None else v}" for i, v in enumerate(evaluations)]
    (run / "progress.csv").write_text("\n".join(rows) + "\n")


def test_a_same_protocol_reference_goes_into_the_anchor_cell_only_when_it_ran_the_rows_config(tmp_path, capsys, monkeypatch):
    """``reference``: runs of another implementation with the row's config, overrides and steps
    (scripts/sb3_reference.py); their last evaluation's median joins the anchor cell, a reference
    that ran something else is left out with one line, and --archive keeps the counted ones."""
    runs = tmp_path / "runs"
    target = load_config(CONFIGS / "ppo" / "cartpole.yaml").run.target_steps
    _run(runs, "ppo-cartpole-seed0", 0, [(1000, 100.0), (2000, 480.0)], 12.0)
    _reference(runs, "sb3-ppo-cartpole-seed0", 0, [20.0, None, 300.0], target)
    # the row's budget as an override rather than --steps: the same run
    _reference(runs, "sb3-ppo-cartpole-seed1", 1, [40.0, 500.0], target, overrides=(f"run.target_steps={target}",), made=target + 512)  # a rollout past it
    _reference(runs, "sb3-ppo-cartpole-seed2", 2, [40.0, 9.0], target, made=target // 2)  # stopped halfway: not counted
    _reference(runs, "sb3-ppo-cartpole-seed3", 3, [40.0, 9.0], target, overrides=("algorithm.lr=0.1",))  # another config: not counted
    _reference(runs, "sb3-ppo-cartpole-seed4", 4, [40.0, 9.0], target // 2)  # another budget: not counted
    manifest = tmp_path / "results.yaml"
    anchor = {"return": 500, "budget": 100000, "source": "zoo", "protocol": "agent steps"}
    manifest.write_text(yaml.safe_dump([
        {"config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 475, "anchor": anchor,
         "reference": {"runs": "sb3-ppo-cartpole-seed*", "label": "SB3 PPO"}},
    ]))
    capsys.readouterr()
    (row,) = results_table.results_table(manifest, [runs])
    assert row["anchor"] == f"500 in 100,000 steps (zoo); same protocol: SB3 PPO with this config's settings, 400 at {target:,} to {target + 512:,} steps (seeds 0, 1)"
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and "sb3-ppo-cartpole-seed2" in err[0] and f"stopped at {target // 2} of its {target}" in err[0]
    assert "sb3-ppo-cartpole-seed3" in err[1] and "algorithm.lr = 0.1" in err[1]
    assert "sb3-ppo-cartpole-seed4" in err[2] and f"run.target_steps = {target // 2}" in err[2]

    records = tmp_path / "records"
    assert results_table.main([str(manifest), "--root", str(runs), "--archive", str(records), "-o", str(tmp_path / "t.md")]) == 0
    assert sorted(p.name for p in records.iterdir()) == ["ppo-cartpole-seed0", "sb3-ppo-cartpole-seed0", "sb3-ppo-cartpole-seed1"]
    assert sorted(p.name for p in (records / "sb3-ppo-cartpole-seed0").iterdir()) == ["progress.csv", "settings.json"]
    # the records alone give the same row
    assert results_table.results_table(manifest, [records]) == [row]
    # the figure: the row's runs, and the references as one curve under the manifest's label, their seeds counted
    from pytorchrl import plotting

    legends = []
    real = plotting.plot_runs

    def drawn(*args, **kwargs):
        figure = real(*args, **kwargs)
        legends.append([line.get_label() for line in figure.axes[0].get_lines()])
        return figure

    monkeypatch.setattr(plotting, "plot_runs", drawn)
    assert results_table.main([str(manifest), "--root", str(records), "-o", str(tmp_path / "t.md"), "--plots", str(tmp_path / "plots")]) == 0
    assert legends == [["ppo CartPole-v1", "SB3 PPO (2 seeds)"]]
    # --commands: the reference's missing seeds too, with the row's overrides
    assert results_table.missing_commands(manifest, [records], [1, 2], run_root=Path("runs")) == [
        "pytorchrl train configs/ppo/cartpole.yaml run.seed=1 --run-dir runs/ppo-cartpole-seed1",
        "pytorchrl train configs/ppo/cartpole.yaml run.seed=2 --run-dir runs/ppo-cartpole-seed2",
        "python scripts/sb3_reference.py configs/ppo/cartpole.yaml --seed 2 --out runs/sb3-ppo-cartpole-seed2",
    ]
    assert (runs / "sb3-ppo-cartpole-seed2" / "settings.json").is_file()  # stopped half way: continued
    assert results_table.missing_commands(manifest, [runs], [2])[-1] == (
        f"python scripts/sb3_reference.py configs/ppo/cartpole.yaml --seed 2 --out {runs / 'sb3-ppo-cartpole-seed2'} --resume"
    )


def _github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but hyphens dropped, spaces
    to hyphens."""
    return "".join(c for c in heading.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")


def test_benchmarks_md_contents_lists_every_section_with_its_link():
    """BENCHMARKS.md's contents list is its ``##`` sections, in order, each linked to its
    anchor: a section added without an entry (or an entry left after its section moved) fails."""
    sections, contents, fenced = [], [], False
    for line in (REPO / "BENCHMARKS.md").read_text().splitlines():
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("## "):
            sections.append(line[3:].strip())
        if line.startswith("- [") and "](#" in line and not sections:
            title, _, link = line[3:].partition("](#")
            contents.append((title, link.rstrip(")")))
    assert contents == [(title, _github_anchor(title)) for title in sections]


@pytest.mark.parametrize(
    ("value", "shown"),
    [(None, "?"), (500.0, "500"), (1234.4, "1,234"), (-94.7, "-94.7"), (9.25, "9.25"), (-7.75, "-7.75"), (-10.38, "-10.4"), (0.625, "0.625"), (0.004, "0.0")],
)
def test_figures_read_as_the_prose_gives_them(value, shown):
    """Whole numbers at 100 and over, three significant digits under 100: the table's -7.75 is
    the -7.75 its section reports, not a rounded -7.8."""
    assert results_table._number(value) == shown


def test_run_files_that_would_make_a_wrong_row_stop_the_table_naming_the_run(tmp_path, capsys):
    """A duplicate seed, rows of two runs in one progress.csv, a non-finite or unbacked final
    return: each is one line naming the run, exit 2, and no table; a run not finished is told
    on stderr and the row says which seeds it lacks."""
    manifest = tmp_path / "results.yaml"
    manifest.write_text(yaml.safe_dump([{"config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-*", "threshold": 475,
                                         "anchor": {"return": 490, "budget": 100000, "source": "zoo", "protocol": "agent steps"}}]))

    def table_error(root: Path) -> str:
        code = results_table.main([str(manifest), "--root", str(root), "-o", str(tmp_path / "table.md")])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and not (tmp_path / "table.md").exists(), err
        return err[-1]

    cases = {
        "twice": lambda root: _run(root, "ppo-cartpole-seed0-rerun", 0, [(1000, 480.0)], 5.0),
        "back": lambda root: (root / "ppo-cartpole-seed1" / "progress.csv").write_text("env_steps,eval_return_mean\n1000,10\n2000,490\n1000,20\n"),
        "nan": lambda root: (root / "ppo-cartpole-seed1" / "summary.json").write_text(json.dumps(
            {"env_steps": 2000, "wall_time_s": 5.0, "final_eval_return_mean": float("nan"), "machine": "CPU X", "stop_reason": "target_steps"})),
        "empty": lambda root: (root / "ppo-cartpole-seed1" / "progress.csv").write_text("env_steps,eval_return_mean\n"),
    }
    messages = {
        "twice": "are both its seed 0; keep one", "back": "progress.csv goes back from 2,000 to 1,000 env steps",
        "nan": "summary.json says final_eval_return_mean = nan", "empty": "but progress.csv has no evaluation",
    }
    for name, spoil in cases.items():
        root = tmp_path / name
        _run(root, "ppo-cartpole-seed0", 0, [(1000, 100.0), (2000, 495.0), (3000, 480.0)], 12.0)
        _run(root, "ppo-cartpole-seed1", 1, [(1000, 50.0), (2000, 300.0)], 20.0)
        spoil(root)
        line = table_error(root)
        assert line.startswith("results_table: error: ") and messages[name] in line and str(root) in line, line
    root = tmp_path / "fine"
    _run(root, "ppo-cartpole-seed0", 0, [(1000, 100.0), (2000, 495.0), (3000, 480.0)], 12.0)
    _run(root, "ppo-cartpole-seed1", 1, [(1000, 50.0), (2000, 300.0)], 20.0)
    _run(root, "ppo-cartpole-seed2", 2, [(1000, 50.0)], 20.0, stop_reason="interrupted")
    (row,) = results_table.results_table(manifest, root)
    assert f"{root / 'ppo-cartpole-seed2'} not counted: stopped to be resumed" in capsys.readouterr().err
    assert row["seeds"] == "0, 1 (2 of 3: seed 2 not finished)"
    # seed 0 reached 490 once and ended below it: said beside the count
    assert row["against the anchor"].startswith("1/2 reached its 490 in the 2,500 steps run (2% of its budget) (0/2 at their end)")


def test_a_row_of_training_returns_says_so_in_its_protocol(tmp_path):
    _run(tmp_path, "ppo-cartpole-seed0", 0, [(1000, 100.0), (2000, 400.0)], 12.0, train=[80.0, 350.0])
    manifest = tmp_path / "results.yaml"
    manifest.write_text(yaml.safe_dump([{"config": "configs/ppo/cartpole.yaml", "runs": "ppo-cartpole-seed*", "threshold": 300, "metric": "train", "seeds": [0]}]))
    (row,) = results_table.results_table(manifest, tmp_path)
    assert row["our protocol"].startswith("training returns, the mean of the last 100 episodes (the sampled policy); evaluations: agent steps")
    assert row["seeds"] == "0" and row["final return (median)"] == "350 (training, last 100 episodes)"
