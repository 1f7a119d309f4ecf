"""``textDocument/didOpen``, ``didChange``, ``didClose``: keep the buffers, follow edits at once
(line maps), re-analyse after a quiet moment, and load the job of a file whose job is not held yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from .guard import spawn
from .state.linemap import LineMap

if TYPE_CHECKING:
    from .app import MsprofLanguageServer


def did_open(ls: MsprofLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
    item = params.text_document
    doc = ls.documents.open(item.uri, item.version)  # pygls' workspace holds the text
    snap = ls.snapshot
    analysed = snap.texts.get(doc.path) if doc.path else None
    doc.rebase(snap.generation, analysed)
    if doc.path and analysed is not None and analysed != item.text:
        ls.loader.mark_dirty(doc.path, item.text)
    ls.publisher.schedule(item.uri, 0.0)
    ls.loader.wake()  # a parked workspace pull reports the opened file now
    ls.loader.announce_analysed([doc])  # when the analysis already saw this text
    if doc.path:  # served by its own job, loaded now if no file of that job was open yet
        spawn(ls, ls.loader.follow([doc.path]), f"loading the job of {doc.path}")


def did_change(ls: MsprofLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    doc = ls.documents.get(uri)
    if doc is None:
        return
    text = ls.workspace.get_text_document(uri).source  # pygls applied the changes already
    doc.update(params.text_document.version, _steps(params.content_changes))
    if doc.path:
        ls.loader.mark_dirty(doc.path, text)
    ls.publisher.schedule(uri)
    ls.loader.wake()  # a parked workspace pull reports the new version now, analysed or not


def _steps(changes: list) -> LineMap | None:  # type: ignore[type-arg]
    """Several range changes in one notification: their line maps composed in order (each range
    is relative to the text after the previous ones); None (diff the texts) otherwise."""
    if len(changes) < 2 or not all(isinstance(c, types.TextDocumentContentChangePartial) for c in changes):
        return None
    step = LineMap.identity()
    for c in changes:
        r = c.range
        step = step.then(LineMap.edit(r.start.line + 1, r.start.character, r.end.line + 1, r.end.character, c.text))
    return step


def did_close(ls: MsprofLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    doc = ls.documents.close(uri)
    ls.publisher.forget(uri)
    ls.loader.wake()
    if doc is not None and doc.path:
        if doc.path in ls.snapshot.paths():
            ls.loader.mark_dirty(doc.path, None)  # back to the file on disk
        ls.publisher.publish(uri)
