"""Atomic checkpoint directories: ``state.pt`` (tensors and plain data) and ``meta.json``.

A checkpoint is written into a temporary sibling directory and renamed into place, so a crash
while writing leaves the previous checkpoints untouched. It is loaded with
``torch.load(weights_only=True)``: a checkpoint can hold tensors, numbers, strings and
containers, never arbitrary pickled objects.

A checkpoint replaces only a checkpoint of the same name (a directory of ``state.pt`` and
``meta.json``), never a directory holding anything else. While it replaces one, the old one is
moved aside under a hidden name; a process killed between the two renames leaves that complete
old one, which :func:`list_checkpoints` counts in its place and :func:`tidy_checkpoints` (the
run's own writer, holding its lock) puts back. ``state.pt`` is a zip archive whose members carry
CRCs: a corrupted byte is found when it is loaded (and the newest intact checkpoint used).

``meta.json`` names the checkpoint format and the pytorchrl version that wrote it. A checkpoint
of an older format is upgraded in memory when it is loaded (:data:`UPGRADES`, one step per
format); one of a newer format than this release reads is refused with one line naming both.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

from pytorchrl.utils.arrays import to_tensors
from pytorchrl.utils.errors import CheckpointError, InputError
from pytorchrl.version import CHECKPOINT_FORMAT, __version__


class CheckpointFormatError(CheckpointError):
    """A checkpoint this release cannot read at all (a newer format): never skipped for an older one."""


STATE_FILE = "state.pt"
META_FILE = "meta.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")
#: a checkpoint moved aside while a new one of its name was renamed in (complete); a write under way
_MOVED_ASIDE = re.compile(r"^\.(step_(\d+))\.tmp-[^.]+\.old$")
_BEING_WRITTEN = re.compile(r"^\.step_\d+\.tmp-[^.]+$")


def _read_umask() -> int:
    """The process's umask, read once here: setting it to read it is process-wide, so not done
    while other threads (an evaluation, a writer) may be creating files."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


_UMASK = _read_umask()


def save_checkpoint(directory: str | Path, state: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Write ``state`` and ``meta`` to ``directory`` atomically (replacing an existing one); numpy
    arrays in ``state`` are written as tensors (:func:`~pytorchrl.utils.arrays.to_tensors`)."""
    directory = Path(directory)
    meta = {**meta, "format_version": CHECKPOINT_FORMAT, "pytorchrl_version": __version__}
    if directory.exists() or directory.is_symlink():
        kept = sorted(p.name for p in directory.iterdir()) if directory.is_dir() and not directory.is_symlink() else None
        if kept is None or not set(kept) <= {STATE_FILE, META_FILE}:
            what = "is not a directory" if kept is None else f"holds {', '.join(n for n in kept if n not in (STATE_FILE, META_FILE))[:200]}"
            raise InputError(f"checkpoint path {str(directory)!r} {what}: a checkpoint replaces only a checkpoint ({STATE_FILE}, {META_FILE}); give a new path")
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp's 0o700 would keep the checkpoint from the run's other readers
    old = None  # a checkpoint of the same name, moved aside (not deleted) until the new one is in place
    try:
        with open(tmp / STATE_FILE, "wb") as f:
            torch.save(to_tensors(state), f)
            _synced(f)
        with open(tmp / META_FILE, "w") as f:
            f.write(json.dumps(meta, indent=2, sort_keys=True))
            _synced(f)
        _sync_dir(tmp)
        if directory.exists():
            old = tmp.with_name(tmp.name + ".old")
            os.replace(directory, old)
        os.replace(tmp, directory)
        _sync_dir(directory.parent)  # the rename itself on disk: a power loss after pruning leaves this one whole
    except BaseException:  # an interrupt included: the old checkpoint goes back where it was
        if old is not None and old.exists() and not directory.exists():
            os.replace(old, directory)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return directory


def _synced(f: Any) -> None:
    f.flush()
    os.fsync(f.fileno())


def _sync_dir(path: Path) -> None:
    """Make a directory's entries (files written or renamed into it) durable, where the platform
    can (not on Windows, nor on some network filesystems)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


#: what a run's checkpoint holds (:meth:`~pytorchrl.learner.Learner.state_dict`)
RUN_STATE_KEYS = ("learner", "scheme", "rng")


def load_checkpoint(directory: str | Path, required: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read a checkpoint directory; :class:`CheckpointError` names the file if it is unreadable,
    or if its state lacks one of the ``required`` entries (a run's: :data:`RUN_STATE_KEYS`)."""
    directory = Path(directory)
    state_path, meta_path = directory / STATE_FILE, directory / META_FILE
    for path in (state_path, meta_path):
        if not path.is_file():
            raise CheckpointError(f"checkpoint file {str(path)!r} is missing")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint file {str(meta_path)!r} is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"checkpoint file {str(meta_path)!r} is not a JSON object (it holds a {type(meta).__name__})")
    try:
        with zipfile.ZipFile(state_path) as archive:
            damaged = archive.testzip()  # every member against its CRC: torch.load would read a flipped byte as data
        if damaged is not None:
            raise CheckpointError(f"checkpoint file {str(state_path)!r} is corrupt (its member {damaged!r} fails its CRC)")
        state = torch.load(state_path, map_location="cpu", weights_only=True)
    except CheckpointError:
        raise
    except Exception as exc:  # truncated, corrupt or foreign files raise many kinds of errors
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
        if not zipfile.is_zipfile(state_path):  # torch's own message would be about weights_only
            text = "not a complete torch checkpoint archive"
        reason = text.splitlines()[0][:100] if text else type(exc).__name__
        raise CheckpointError(f"checkpoint file {str(state_path)!r} is truncated or corrupt ({reason})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint file {str(state_path)!r} does not hold a pytorchrl state")
    missing = [key for key in required if key not in state]
    if missing:
        raise CheckpointError(f"checkpoint file {str(state_path)!r} is not a pytorchrl run's checkpoint (no {missing[0]!r} entry)")
    return upgrade(state, meta, directory)


def _upgrade_1(state: dict[str, Any], meta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Format 1 to 2: nothing to convert (env states without ``reseeds`` count as never reseeded,
    and their old generator states are ignored); the versions are recorded."""
    return state, {**meta, "pytorchrl_version": meta.get("pytorchrl_version", "0.1.0 or older")}


#: format N -> the function that turns a format-N checkpoint into format N + 1
UPGRADES = {1: _upgrade_1}


def upgrade(state: dict[str, Any], meta: dict[str, Any], where: str | Path = "checkpoint") -> tuple[dict[str, Any], dict[str, Any]]:
    """``state, meta`` in this release's format (:data:`CHECKPOINT_FORMAT`).

    :raises CheckpointError: for a format newer than this release reads, or an unknown one.
    """
    version = meta.get("format_version", 1)
    if not isinstance(version, int) or version < 1:
        raise CheckpointFormatError(f"checkpoint {str(where)!r} has an unknown format_version {version!r}; pytorchrl {__version__} reads formats 1 to {CHECKPOINT_FORMAT}")
    if version > CHECKPOINT_FORMAT:
        raise CheckpointFormatError(
            f"checkpoint {str(where)!r} has format {version} (written by pytorchrl {meta.get('pytorchrl_version', '?')}); "
            f"pytorchrl {__version__} reads formats up to {CHECKPOINT_FORMAT}: upgrade pytorchrl"
        )
    while version < CHECKPOINT_FORMAT:
        state, meta = UPGRADES[version](state, meta)
        version += 1
    return state, {**meta, "format_version": version}


def list_checkpoints(checkpoints_dir: str | Path) -> list[Path]:
    """``step_N`` directories under ``checkpoints_dir``, oldest first; where ``step_N`` is missing
    and a complete one was moved aside for it (a write killed between its renames), that one."""
    root = Path(checkpoints_dir)
    if not root.is_dir():
        return []
    entries = [p for p in root.iterdir() if p.is_dir()]
    found = {int(m.group(1)): p for p in entries if (m := _STEP_DIR.match(p.name))}
    for p in entries:
        m = _MOVED_ASIDE.match(p.name)
        if m and int(m.group(2)) not in found:
            found[int(m.group(2))] = p
    return [found[step] for step in sorted(found)]


def tidy_checkpoints(checkpoints_dir: str | Path) -> None:
    """Put back a checkpoint moved aside whose replacement never arrived, and remove writes that
    never finished and old ones left behind: for the run's own writer, which holds its lock."""
    root = Path(checkpoints_dir)
    if not root.is_dir():
        return
    for p in sorted(root.iterdir()):
        moved = _MOVED_ASIDE.match(p.name)
        if moved and p.is_dir() and not (root / moved.group(1)).exists():
            os.replace(p, root / moved.group(1))
        elif moved or _BEING_WRITTEN.match(p.name):
            shutil.rmtree(p, ignore_errors=True)


def load_newest_checkpoint(checkpoints_dir: str | Path, required: tuple[str, ...] = RUN_STATE_KEYS) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """The newest readable checkpoint of a run (one whose state holds the ``required`` entries);
    unreadable newer ones are skipped with a warning.

    :raises CheckpointError: when there is no readable checkpoint.
    :raises CheckpointFormatError: when the newest is of a format this release cannot read (an
        older checkpoint is then not silently resumed instead).
    """
    candidates = list_checkpoints(checkpoints_dir)
    if not candidates:
        raise CheckpointError(f"no checkpoint in {str(checkpoints_dir)!r} (expected step_N directories)")
    errors = []
    for path in reversed(candidates):
        try:
            state, meta = load_checkpoint(path, required)
        except CheckpointFormatError:
            raise
        except CheckpointError as exc:
            errors.append(str(exc))
            continue
        if errors:  # told only when an older one is used instead, in one warning; none readable is one line below
            skipped = f"{len(errors)} unreadable checkpoints ({'; '.join(errors)})" if len(errors) > 1 else f"unreadable checkpoint: {errors[0]}"
            warnings.warn(f"skipping {skipped}; using the newest readable one, {str(path)!r}", stacklevel=2)
        return path, state, meta
    every = f"all {len(candidates)} checkpoints are unreadable" if len(candidates) > 1 else "its checkpoint is unreadable"
    raise CheckpointError(f"no readable checkpoint in {str(checkpoints_dir)!r}: {every}; the newest: {errors[0]}")


def prune_checkpoints(checkpoints_dir: str | Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints."""
    for path in list_checkpoints(checkpoints_dir)[:-keep]:
        shutil.rmtree(path, ignore_errors=True)


def nonfinite_tensor(state: Any, prefix: str = "") -> str | None:
    """The key of the first floating-point tensor in a nested state that has a NaN or an infinity."""
    if isinstance(state, torch.Tensor):
        return prefix or "state" if state.is_floating_point() and not bool(torch.isfinite(state).all()) else None
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, (list, tuple)) else ()
    for key, value in items:
        found = nonfinite_tensor(value, f"{prefix}.{key}" if prefix else str(key))
        if found is not None:
            return found
    return None


def first_problem(exc: Exception) -> str:
    """One line of ``exc``: torch's state_dict mismatch lists every parameter on its own line
    (a tab-indented line each); the first names the module and the shapes, the count says the rest."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = " ".join(lines[:2])
    more = f" (and {len(lines) - 2} more)" if len(lines) > 2 else ""
    return f"{type(exc).__name__}: {text}{more}"
