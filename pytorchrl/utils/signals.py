"""Stopping a run on SIGINT or SIGTERM: the first signal asks for a clean stop, a second stops at once."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any


class StopSignals:
    """SIGINT and SIGTERM, while a run trains in the main thread, call ``on_first`` the first
    time (the learner then stops at the end of its round) and raise ``KeyboardInterrupt`` the
    second; later ones are ignored until the run has written what it keeps. The previous
    handlers come back on exit. A signal the process ignores (SIGINT in a
    shell's background job) stays ignored, one whose handler was not set from Python is left
    alone, and in another thread nothing is installed (Python delivers signals to the main
    thread only)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, on_first: Callable[[], None], *, enabled: bool = True) -> None:
        self._on_first = on_first
        self._enabled = enabled
        self._previous: dict[int, Any] = {}
        self.received = 0

    def __enter__(self) -> StopSignals:
        if self._enabled and threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                if signal.getsignal(sig) not in (signal.SIG_IGN, None):  # None: a handler not set from Python, left alone
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received += 1
        if self.received == 2:
            raise KeyboardInterrupt
        if self.received == 1:
            self._on_first()
        # a third and later: ignored, so that the cleanup the second one started (the held log
        # rows, summary.json) is not cut short by a user pressing Ctrl-C again

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
