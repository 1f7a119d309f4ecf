"""Pull diagnostics (``textDocument/diagnostic``, ``workspace/diagnostic``) for LSP 3.17 clients.

Registered only when the client declares pull support (lifecycle.py); such clients get no pushes.
A workspace pull whose files all match the client's previous result ids is parked until the
next analysis or the next buffer change (or a timeout), so a client that re-asks right away does
not spin, and an edit that brings no analysis (a text that does not parse yet) is still reported
at once with its version, not after the timeout.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from lsprotocol import types

from . import diagnostics

if TYPE_CHECKING:
    from .state.context import Contextual, RequestContext

IDENTIFIER = "msprof-lsp"
PARK_S = 60.0


def _result_id(ctx: RequestContext, view, diags) -> str:  # noqa: ANN001
    return f"{ctx.snapshot.generation}-{diagnostics.digest(view, diags)}"


def document_diagnostic(ctx: RequestContext, params: types.DocumentDiagnosticParams):  # noqa: ANN201
    uri = params.text_document.uri
    view, diags = diagnostics.compute(ctx, diagnostics.doc_path(ctx, uri))
    rid = _result_id(ctx, view, diags)
    if params.previous_result_id == rid:
        return types.RelatedUnchangedDocumentDiagnosticReport(result_id=rid)
    return types.RelatedFullDocumentDiagnosticReport(items=diags, result_id=rid)


def _workspace_items(ctx: RequestContext, previous: dict[str, str]) -> tuple[list, bool]:
    items: list[types.WorkspaceDocumentDiagnosticReport] = []
    changed = False
    for path in diagnostics.all_paths(ctx):
        uri = diagnostics.uri_for(ctx, path)
        view, diags = diagnostics.compute(ctx, path)
        rid = _result_id(ctx, view, diags)
        version = view.version if view else None
        if previous.get(uri) == rid:
            items.append(types.WorkspaceUnchangedDocumentDiagnosticReport(uri=uri, version=version, result_id=rid))
        else:
            changed = True
            items.append(types.WorkspaceFullDocumentDiagnosticReport(uri=uri, version=version, items=diags, result_id=rid))
    # files the client knows that have nothing now: report them empty so they are cleared
    known = {i.uri for i in items}
    for uri in previous:
        if uri not in known:
            changed = True
            items.append(types.WorkspaceFullDocumentDiagnosticReport(uri=uri, version=None, items=[], result_id="cleared"))
    return items, changed


async def workspace_diagnostic(ls: Contextual, params: types.WorkspaceDiagnosticParams):  # noqa: ANN201
    """Parks until something changes when the client already has every report (a new context
    then); takes the server (``ls``: pygls passes it by that name) to wait on it."""
    previous = {p.uri: p.value for p in params.previous_result_ids or []}
    items, changed = _workspace_items(ls.context(), previous)
    if previous and not changed:
        try:
            await asyncio.wait_for(ls.next_change(), PARK_S)
        except asyncio.TimeoutError:
            pass
        items, _ = _workspace_items(ls.context(), previous)
    return types.WorkspaceDiagnosticReport(items=items)
