"""A one-line progress display on stderr for ``--check`` (only on a terminal)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from msprof_lsp.server.escape import visible


class ProgressLine:
    """Callable matching ``mapping.locations.Progress``; redraws at most ~10 times a second."""

    def __init__(self, stream: TextIO | None = None, width: int = 80) -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self._last = 0.0
        self._shown = False

    def __call__(self, message: str, fraction: float | None) -> None:
        now = time.monotonic()
        if now - self._last < 0.1 and fraction not in (0.0, 1.0):
            return
        self._last = now
        message = visible(message)  # a profile's file name: its controls must not reach the terminal
        if fraction is None:
            text = message
        else:
            filled = int(max(0.0, min(1.0, fraction)) * 20)
            text = f"[{'#' * filled}{'.' * (20 - filled)}] {fraction * 100:5.1f}% {message}"
        text = text[: self.width - 1]
        self.stream.write("\r" + text.ljust(self.width - 1))
        self.stream.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self.stream.write("\r" + " " * (self.width - 1) + "\r")
            self.stream.flush()
            self._shown = False
