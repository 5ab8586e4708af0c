"""Graceful stop: SIGINT/SIGTERM ask the loop to finish its step, checkpoint and exit."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any


class StopRequest:
    """A flag set by SIGINT/SIGTERM (a second signal raises KeyboardInterrupt at once).

    Handlers are installed only from the main thread and restored on `uninstall`.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.signum = signum

    def __enter__(self) -> StopRequest:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()
