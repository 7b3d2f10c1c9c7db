"""Checks of the directories a command writes to or reads a run from, made before anything is
written: ``train --run-dir``, ``train --resume``, ``evaluate``, ``evaluate --video`` and
``tune --dir``.

Without them a bad path fails late and in the middle of a run: a regular file or ``/dev/null``
as ``--run-dir`` is a ``FileExistsError`` from ``mkdir``, a name longer than the filesystem's
``NAME_MAX`` an ``OSError`` from the first ``stat``, a ``checkpoints`` that is a regular file
fails the first checkpoint after the whole budget was trained, and a FIFO ``progress.csv``
blocks the first log row forever. Each is one :class:`InputError` line here, naming the flag,
the path and what it is, before a directory or file is created.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytorchrl.utils.errors import InputError

__all__ = ["RUN_FILES", "check_output_dir", "check_run_dir", "describe", "make_dir"]

#: what a run directory holds: name -> whether it is a directory (else a regular file)
RUN_FILES = {"config.yaml": False, "progress.csv": False, "summary.json": False, "checkpoints": True, "tb": True}
_STEP_DIR = re.compile(r"^step_\d+$")
#: POSIX minimums, used where the filesystem does not say (pathconf fails)
_NAME_MAX, _PATH_MAX = 255, 4096


def describe(mode: int) -> str:
    """What a ``stat`` mode is, in words: ``a regular file``, ``a directory``, ``a character device``..."""
    kinds = (
        (stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def check_output_dir(path: str | Path, what: str, *, must_exist: bool = False, writable: bool = True) -> Path:
    """Check that ``path`` is a directory a command can use: an existing directory, or (unless
    ``must_exist``) one that can be created because its nearest existing ancestor is a writable
    directory and every name in it fits the filesystem.

    :param what: how the user gave the path, for the message (``--run-dir``, ``evaluate``).
    :param writable: the directory (or the ancestor it is created in) must be writable.
    :raises InputError: one line naming ``what``, the path and what is wrong with it.
    """
    path = Path(path)
    _check_name_lengths(path, what)
    mode = _mode(path, what)
    if mode is None:
        if must_exist:
            raise InputError(f"{what} {str(path)!r} does not exist")
        _check_creatable(path, what, writable)
        return path
    if not stat.S_ISDIR(mode):
        raise InputError(f"{what} {str(path)!r} is {describe(mode)}, not a directory")
    if writable and not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"{what} {str(path)!r} is a directory this user cannot write to")
    return path


def check_output_file(path: str | Path, what: str) -> Path:
    """Check that a command can write the file ``path`` (``-o``, ``--json``) before it does the
    work whose result goes there: not a directory or another kind of file, in a directory that
    exists and that this user can write to.

    :raises InputError: one line naming ``what``, the path and what is wrong with it.
    """
    path = Path(path)
    _check_name_lengths(path, what)
    check_output_dir(path.parent, f"{what} {str(path)!r}: the directory", must_exist=True)
    mode = _mode(path, what)
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):  # /dev/stdout and pipes write too
        raise InputError(f"{what} {str(path)!r} is {describe(mode)}, not a file")
    if mode is not None and not os.access(path, os.W_OK):
        raise InputError(f"{what} {str(path)!r} is a file this user cannot write to")
    return path


def check_run_dir(path: str | Path, what: str, *, resume: bool = False, writable: bool = True) -> Path:
    """:func:`check_output_dir` for a run directory, and the run files already in it of the kind
    the run reads and writes (:data:`RUN_FILES`; ``checkpoints/step_N`` directories).

    :param resume: the run must be there: the directory and its ``config.yaml`` exist.
    :raises InputError: one line naming ``what``, the path and the file of the wrong kind.
    """
    path = check_output_dir(path, what, must_exist=resume, writable=writable)
    for name, is_dir in RUN_FILES.items():
        mode = _mode(path / name, what)
        if mode is None:
            if resume and name == "config.yaml":
                raise InputError(f"{what} {str(path)!r}: no config.yaml there (not a pytorchrl run directory)")
            continue
        if (stat.S_ISDIR(mode) if is_dir else stat.S_ISREG(mode)) is False:
            want = "a directory" if is_dir else "a regular file"
            raise InputError(f"{what} {str(path)!r}: its {name} is {describe(mode)}; a run's {name} is {want}")
    checkpoints = path / "checkpoints"
    if checkpoints.is_dir():
        for entry in os.scandir(checkpoints):
            if _STEP_DIR.match(entry.name) and not entry.is_dir():
                kind = describe(entry.stat(follow_symlinks=False).st_mode)
                raise InputError(f"{what} {str(path)!r}: checkpoints/{entry.name} is {kind}; a checkpoint is a directory")
    return path


def _mode(path: Path, what: str) -> int | None:
    """``path``'s ``st_mode`` (following links), None when nothing is there; a component that is
    not a directory, a dangling link or a loop is one line."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.lexists(path):
            raise InputError(f"{what} {str(path)!r} is a symbolic link to a missing target") from None
        return None
    except NotADirectoryError:
        parent = next((p for p in reversed(path.parents) if os.path.exists(p) and not os.path.isdir(p)), None)
        kind = f"{str(parent)!r} is {describe(os.stat(parent).st_mode)}" if parent is not None else "a part of it is not a directory"
        raise InputError(f"{what} {str(path)!r} cannot be a directory: {kind}") from None
    except OSError as exc:
        raise InputError(f"{what} {str(path)!r} cannot be used: {exc.strerror or exc}") from None


def _check_name_lengths(path: Path, what: str) -> None:
    """Every name in ``path`` within the filesystem's ``NAME_MAX`` and the whole within ``PATH_MAX``."""
    anchor = next((p for p in (path, *path.parents) if os.path.isdir(p)), Path("."))
    name_max, path_max = _pathconf(anchor, "PC_NAME_MAX", _NAME_MAX), _pathconf(anchor, "PC_PATH_MAX", _PATH_MAX)
    for name in path.parts:
        size = len(os.fsencode(name))
        if size > name_max and name != path.anchor:
            short = name if len(name) <= 24 else f"{name[:20]}..."
            raise InputError(f"{what}: the name {short!r} in it is {size} bytes long; this filesystem allows at most {name_max} per name")
    size = len(os.fsencode(os.path.abspath(path)))
    if size >= path_max:
        raise InputError(f"{what}: the path is {size} bytes long; this system allows less than {path_max}")


def _pathconf(path: Path, name: str, default: int) -> int:
    try:
        return int(os.pathconf(path, name))
    except (OSError, ValueError):
        return default


def _check_creatable(path: Path, what: str, writable: bool) -> None:
    """The nearest existing ancestor of a missing ``path`` is a directory this user can write to."""
    for parent in path.parents:
        mode = _mode(parent, what)
        if mode is None:
            continue
        if not stat.S_ISDIR(mode):
            raise InputError(f"{what} {str(path)!r} cannot be created: {str(parent)!r} is {describe(mode)}, not a directory")
        if writable and not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(f"{what} {str(path)!r} cannot be created: the directory {str(parent)!r} is not writable")
        return


def make_dir(path: Path, what: str) -> None:
    """``mkdir -p path``, an ``OSError`` (a read-only filesystem, permissions checked too late,
    a disk that is full) one :class:`InputError` line naming ``what``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.EEXIST, errno.ENOTDIR):
            reason = "a file of that name is in the way"
        raise InputError(f"{what} {str(path)!r} cannot be created: {reason}") from None


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: the text goes to a new file beside it, which then
    replaces it (an interrupted write, or a full disk, leaves the old file as it was)."""
    with atomic_file(path, "w") as f:
        f.write(text)


@contextlib.contextmanager
def atomic_file(path: Path, mode: str = "wb", what: str = "file") -> Iterator[Any]:
    """An open file that becomes ``path`` whole or not at all (written beside it, then renamed
    over it: an interrupted write or a full disk leaves the old file as it was, or none).

    :raises InputError: when it cannot be written (a full disk, no permission), naming ``what`` and the path.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, mode) as f:
            yield f
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"{what} {str(path)!r} cannot be written: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
