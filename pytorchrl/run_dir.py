"""A run directory's files: refusing one that already holds a run, the log-row writers a run
gets (progress.csv, TensorBoard, Prometheus), and progress.csv trimmed back to the checkpoint a
run resumes from."""

from __future__ import annotations

import sys
from pathlib import Path

from pytorchrl.config import RunConfig
from pytorchrl.logging.writers import CSVWriter, TensorBoardWriter, Writer
from pytorchrl.utils.checkpoint import list_checkpoints
from pytorchrl.utils.errors import InputError
from pytorchrl.utils.paths import check_run_dir, make_dir, write_text_atomic


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
    return path


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


def truncate_progress(path: Path, env_steps: int) -> None:
    """Drop progress.csv rows written after the checkpoint a run resumes from (they will be redone)."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    if not lines:
        return
    keep = [lines[0]] + [ln for ln in lines[1:] if ln.split(",", 1)[0].isdigit() and int(ln.split(",", 1)[0]) <= env_steps]
    write_text_atomic(path, "".join(keep))
