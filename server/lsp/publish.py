"""Push diagnostics (``textDocument/publishDiagnostics``) for clients that do not pull.

Debounced per URI: one asyncio task per URI, cancelled and restarted by every change, so a burst
of keystrokes ends in one publish that matches the final text.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from lsprotocol import types

from . import diagnostics
from .guard import spawn

if TYPE_CHECKING:
    from .app import MsprofLanguageServer

CHANGE_DELAY_S = 0.02  # after didChange: long enough to fold a burst, short next to a keystroke


class Publisher:
    def __init__(self, ls: MsprofLanguageServer) -> None:
        self.ls = ls
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._sent: dict[str, str] = {}  # uri -> digest of what the client has

    @property
    def active(self) -> bool:
        return not self.ls.caps.pull_diagnostics

    def schedule(self, uri: str, delay: float = CHANGE_DELAY_S) -> None:
        if not self.active:
            return
        old = self._tasks.pop(uri, None)
        if old is not None:
            old.cancel()
        self._tasks[uri] = spawn(self.ls, self._later(uri, delay), f"publishing diagnostics of {uri}")

    async def _later(self, uri: str, delay: float) -> None:
        await asyncio.sleep(delay)
        self._tasks.pop(uri, None)
        self.publish(uri, force=True)

    def publish(self, uri: str, *, force: bool = False) -> None:
        """Send the file's diagnostics (``force``: even when the client already has them)."""
        if not self.active:
            return
        ctx = self.ls.context()
        path = diagnostics.doc_path(ctx, uri)
        view, diags = diagnostics.compute(ctx, path)
        key = diagnostics.digest(view, diags)
        if not force and self._sent.get(uri, "" if diags else key) == key:
            return
        self._sent[uri] = key
        doc = ctx.document(uri)
        self.ls.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diags, version=doc.version if doc else None)
        )

    def publish_all(self) -> None:
        """After a new snapshot: every file with findings, every open file, and every file the
        client still shows diagnostics for (cleared with an empty list when they are gone)."""
        if not self.active:
            return
        ctx = self.ls.context()
        uris = {diagnostics.uri_for(ctx, p) for p in diagnostics.all_paths(ctx)}
        uris.update(self._sent)
        for uri in sorted(uris):
            self.publish(uri)

    def forget(self, uri: str) -> None:
        task = self._tasks.pop(uri, None)
        if task is not None:
            task.cancel()

    def cancel_all(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()
