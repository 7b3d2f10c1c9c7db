"""Versioned checkpoints: this release's checkpoint keeps loading in later releases; older
formats are upgraded; a newer format is one line, never a silent fall-back to an older one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytorchrl.cli import main
from pytorchrl.evaluation import evaluate_checkpoint
from pytorchrl.utils.checkpoint import CheckpointFormatError, load_checkpoint, save_checkpoint, upgrade
from pytorchrl.version import CHECKPOINT_FORMAT, __version__

#: a tiny PPO CartPole run made by pytorchrl 0.1.0 (checkpoint format 2): kept forever
FIXTURE = Path(__file__).resolve().parent / "data" / "ppo_cartpole_format2"


@pytest.mark.timeout(60)
def test_the_format_2_fixture_loads_and_evaluates():
    _state, meta = load_checkpoint(FIXTURE / "checkpoints" / "step_64")
    assert meta["format_version"] == CHECKPOINT_FORMAT and meta["env_steps"] == 64
    result = evaluate_checkpoint(FIXTURE, episodes=2)
    assert result["env_steps"] == 64 and len(result["returns"]) == 2


def test_new_checkpoints_name_both_versions(tmp_path):
    save_checkpoint(tmp_path / "step_1", {"x": 1}, {"env_steps": 1})
    meta = json.loads((tmp_path / "step_1" / "meta.json").read_text())
    assert meta["format_version"] == CHECKPOINT_FORMAT and meta["pytorchrl_version"] == __version__


def test_a_format_1_checkpoint_is_upgraded():
    state, meta = upgrade({"learner": {}}, {"env_steps": 5})  # format 1: no versions in meta.json
    assert meta["format_version"] == CHECKPOINT_FORMAT and meta["env_steps"] == 5 and state == {"learner": {}}


def test_a_future_format_is_one_line_naming_both_versions(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    older = run / "checkpoints" / "step_32"
    shutil.copytree(run / "checkpoints" / "step_64", older)  # an older readable one must not be used instead
    meta_path = run / "checkpoints" / "step_64" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "format_version": CHECKPOINT_FORMAT + 1, "pytorchrl_version": "9.0.0"}))
    with pytest.raises(CheckpointFormatError):
        load_checkpoint(meta_path.parent)
    assert main(["evaluate", str(run), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"has format {CHECKPOINT_FORMAT + 1} (written by pytorchrl 9.0.0)" in err
    meta_path.write_text(json.dumps({**meta, "format_version": "two"}))
    with pytest.raises(CheckpointFormatError, match=rf"has an unknown format_version 'two'; pytorchrl .* reads formats 1 to {CHECKPOINT_FORMAT}"):
        load_checkpoint(meta_path.parent)
    assert f"pytorchrl {__version__} reads formats up to {CHECKPOINT_FORMAT}" in err


def test_a_checkpoint_rewritten_under_its_own_name_survives_an_interrupt(tmp_path, monkeypatch):
    """The final checkpoint can land on the name of the periodic one just written: the old one is
    moved aside, not deleted, until the new one is in place, and put back if the write is
    interrupted between the two moves."""
    import os

    save_checkpoint(tmp_path / "step_8", {"x": 1}, {"env_steps": 8})
    real, calls = os.replace, []

    def interrupted(src, dst):
        calls.append(dst)
        if len(calls) == 2:  # old moved aside; the new one about to take its name
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path / "step_8", {"x": 2}, {"env_steps": 8})
    monkeypatch.setattr(os, "replace", real)
    assert load_checkpoint(tmp_path / "step_8")[0] == {"x": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["step_8"]  # nothing left over
    save_checkpoint(tmp_path / "step_8", {"x": 3}, {"env_steps": 8})
    assert load_checkpoint(tmp_path / "step_8")[0] == {"x": 3} and [p.name for p in tmp_path.iterdir()] == ["step_8"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names an fsync'd descriptor through /proc (Linux)")
def test_a_checkpoint_reaches_the_disk_file_by_file_and_with_its_rename(tmp_path, monkeypatch):
    """Both files are synced before the directory takes its name, and the parent after the
    rename: a power loss after older checkpoints are pruned cannot leave this one half there."""
    import os

    real, synced = os.fsync, []

    def recording(fd):
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        return real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    save_checkpoint(tmp_path / "step_8", {"x": 1}, {"env_steps": 8})
    assert [p.name for p in synced[:2]] == ["state.pt", "meta.json"] and synced[2].name.startswith(".step_8.tmp-")
    assert synced[3:] == [tmp_path.resolve()]  # last, the directory the checkpoint was renamed into
