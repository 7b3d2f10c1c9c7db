"""Keeping a command's stdout for its result alone."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send whatever is written to stdout inside the block to stderr, so that a command's stdout
    holds only the result it prints after the block (``train``'s JSON summary, which scripts
    parse).

    Both levels are redirected: ``sys.stdout`` (Python's prints; Ray's driver prints its workers'
    output and its "worker died" notices to whatever ``sys.stdout`` is when they arrive) and file
    descriptor 1 (C extensions, env banners, subprocesses started meanwhile). Both are restored
    when the block ends, also on an exception. Where file descriptor 1 cannot be duplicated (a
    closed stdout), only ``sys.stdout`` is redirected.
    """
    python_stdout = sys.stdout
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or detached streams
            stream.flush()
    try:
        saved_fd: int | None = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        saved_fd = None
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        sys.stdout = python_stdout
        if saved_fd is not None:
            os.dup2(saved_fd, 1)
            os.close(saved_fd)
