"""Work-done progress for loads, fed by the loader's ``Progress`` callback from the worker thread.

``window/workDoneProgress/create`` is sent only when the client declares ``window.workDoneProgress``;
otherwise the callback is a cheap no-op. Reports are throttled (the readers call it often).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import TYPE_CHECKING

from lsprotocol import types

from msprof_lsp.server.escape import visible

if TYPE_CHECKING:
    from .app import MsprofLanguageServer

_TOKENS = itertools.count(1)
MIN_INTERVAL_S = 0.1


class LoadProgress:
    def __init__(self, ls: MsprofLanguageServer, title: str) -> None:
        self.ls = ls
        self.title = title
        self.token: str | None = None
        self._loop = asyncio.get_running_loop()
        self._last = 0.0
        self._last_message = ""
        self._pct = 0  # reported percentages never go back (each loading stage restarts at 0)

    async def begin(self) -> None:
        if not self.ls.caps.work_done_progress:
            return
        token = f"msprof-lsp/load/{next(_TOKENS)}"
        try:
            await asyncio.wait_for(self.ls.work_done_progress.create_async(token), 5.0)
        except Exception:  # noqa: BLE001 - a client that refuses progress still gets its results
            return
        self.token = token
        self.ls.work_done_progress.begin(
            token, types.WorkDoneProgressBegin(title=self.title, message="starting", percentage=0, cancellable=False)
        )

    def __call__(self, message: str, fraction: float | None) -> None:
        """The loader's callback (any thread)."""
        if self.token is None:
            return
        now = time.monotonic()
        if message == self._last_message and now - self._last < MIN_INTERVAL_S and fraction not in (0.0, 1.0):
            return
        self._last, self._last_message = now, message
        self._loop.call_soon_threadsafe(self._report, message, fraction)

    def _report(self, message: str, fraction: float | None) -> None:
        if self.token is None:
            return
        pct = None
        if fraction is not None:
            self._pct = max(self._pct, min(100, int(fraction * 100)))
            pct = self._pct
        self.ls.work_done_progress.report(self.token, types.WorkDoneProgressReport(message=visible(message), percentage=pct))

    def end(self, message: str) -> None:
        if self.token is None:
            return
        # reports queued from the worker thread run before this (same loop, FIFO), then the end
        token, self.token = self.token, None
        self.ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=visible(message)))  # names profile files
        self.ls.work_done_progress.tokens.pop(token, None)
