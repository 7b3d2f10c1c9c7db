"""A run directory's files: refusing one that already holds a run, the lock that keeps a second
process out of a run in use, the log-row writers a run gets (progress.csv, TensorBoard,
Prometheus), and progress.csv trimmed back to the checkpoint a run resumes from."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from pytorchrl.config import RunConfig
from pytorchrl.logging.writers import CSVWriter, TensorBoardWriter, Writer
from pytorchrl.utils.checkpoint import list_checkpoints
from pytorchrl.utils.errors import InputError
from pytorchrl.utils.paths import check_run_dir, make_dir


def check_new_run_dir(run_dir: str | Path, what: str) -> Path:
    """:func:`~pytorchrl.utils.paths.check_run_dir` for a new run: a directory that already holds
    a run (its ``config.yaml``) is refused in one line, since the two runs' ``progress.csv`` rows
    and checkpoints would mix (and the old run's, with higher step numbers, prune the new one's),
    and so is one inside the copy of a working directory that Ray makes for a job (a relative
    run directory in a ``ray job submit --working-dir`` job: Ray deletes the copy).

    :param what: how the message names the directory (``--run-dir``, ``run directory``).
    """
    path = check_run_dir(run_dir, what)
    parts = path.resolve().parts
    if "runtime_resources" in parts and "working_dir_files" in parts:  # a Ray job's --working-dir, copied for the job
        raise InputError(
            f"{what} {str(path)!r} is inside Ray's temporary copy of the job's working directory ({path.resolve()}), which Ray "
            "deletes: give the run an absolute --run-dir outside it (scripts/submit_job.sh does, under RUN_ROOT)"
        )
    if (path / "config.yaml").exists():
        refuse_if_in_use(path)
        if not list_checkpoints(path / "checkpoints"):
            raise InputError(
                f"{what} {str(path)!r} already holds a run (its config.yaml) that stopped before its first checkpoint, "
                "so it cannot be resumed: remove the directory or choose a new one"
            )
        python = "" if what.startswith("--") else " (Learner.resume in Python)"  # the CLI's option, or the API
        raise InputError(
            f"{what} {str(path)!r} already holds a run (its config.yaml); continue it with `pytorchrl train --resume {path}`{python}, "
            "or choose a new directory"
        )
    found = [name for name in ("progress.csv", "summary.json", "checkpoints") if (path / name).exists()]
    if found:  # a run built in Python writes no config.yaml: its files mix and prune the same
        raise InputError(
            f"{what} {str(path)!r} already holds a run's files ({', '.join(found)}), which a new run's would mix with "
            "(and prune its checkpoints): choose a new directory or remove them"
        )
    return path


#: the lock file of a run directory in use (:class:`RunDirLock`)
LOCK_FILE = ".pytorchrl.lock"


class RunDirLock:
    """An exclusive lock on a run directory, held while a learner writes into it.

    ``train --resume`` of a run that another process is still training would write that run's
    checkpoints and cut its progress.csv back. The lock refuses it in one line that names the
    other process. The lock is an ``flock`` on :data:`LOCK_FILE`, so the system lets go of it
    when its process ends, however it ends. The file holds the pid, which is only used in the
    message, and it is removed on :meth:`release`. Where ``fcntl`` is missing (Windows) there
    is no lock.

    :param wait_s: how long to wait for a holder to let go before refusing (a Ray Tune trial
        restarted in its directory waits for its previous process to end).
    :raises InputError: when another process holds the directory's lock (after ``wait_s``).
    """

    def __init__(self, run_dir: Path, wait_s: float = 0.0) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None
        try:
            import fcntl
        except ImportError:  # no flock here: no lock
            return
        deadline = time.monotonic() + wait_s
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
                os.close(fd)
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                raise _in_use(run_dir, holder) from None
            except OSError:  # a filesystem without locks (some network mounts): no lock
                os.close(fd)
                with contextlib.suppress(OSError):
                    self.path.unlink()
                return
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:  # released and removed between our open and our lock
                same = False
            if same:
                break
            os.close(fd)  # a file the releasing process has removed: lock the one there now
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        """Let go of the directory (removes the lock file first, then unlocks it)."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self._fd)  # closing the descriptor releases the flock
        self._fd = None


def _in_use(run_dir: Path, holder: str) -> InputError:
    return InputError(
        f"run directory {str(run_dir)!r} is in use by another process (pid {holder}): wait for it to end or stop it first "
        f"(its {LOCK_FILE} is held while a run trains there)"
    )


def refuse_if_in_use(run_dir: Path) -> None:
    """Raise :class:`RunDirLock`'s one line when another process trains in ``run_dir`` (a run
    still before its first checkpoint is in use, not stopped). It only looks: the lock file is
    opened for reading and tried with a shared lock a moment, never created, written or removed."""
    try:
        import fcntl

        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY)
    except (ImportError, OSError):  # no flock here, or no lock file: nobody holds it
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(run_dir, os.read(fd, 32).decode(errors="replace").strip() or "?") from None
    except OSError:  # a filesystem without locks
        pass
    finally:
        os.close(fd)  # and with it the shared lock


def claim_run_dir(run_dir: Path, wait_s: float = 0.0) -> RunDirLock:
    """Make ``run_dir`` (``mkdir -p``) and take its :class:`RunDirLock`, before any file is
    written into it (another process may be training there)."""
    make_dir(run_dir, "run directory")
    return RunDirLock(run_dir, wait_s)


def open_writers(run: RunConfig, run_dir: Path | None) -> list[Writer]:
    """The default log-row writers: progress.csv and TensorBoard in ``run_dir`` (none without
    one), and the Prometheus endpoint when ``run.prometheus_port`` is set."""
    writers: list[Writer] = []
    if run.prometheus_port is not None:
        from pytorchrl.logging.prometheus import PrometheusWriter

        prometheus = PrometheusWriter(run.prometheus_port, run.prometheus_host, run_name=run_dir.name if run_dir else "run")
        print(f"pytorchrl: Prometheus metrics at {prometheus.url}", file=sys.stderr)
        writers.append(prometheus)
    if run_dir is not None:
        try:
            make_dir(run_dir, "run directory")
            writers.append(CSVWriter(run_dir / "progress.csv"))
            writers.append(TensorBoardWriter(run_dir / "tb"))
        except BaseException:  # the endpoint's port and the files opened so far are let go
            close_writers(writers)
            raise
    return writers


def close_writers(writers: list[Writer]) -> None:
    for writer in writers:
        writer.close()

