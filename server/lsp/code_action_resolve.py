"""``codeAction/resolve``: fill in the edit of an action returned without one.

The action's ``data`` (payloads.CodeActionData) holds the edits for a known version of each file
(an open buffer's version; a closed file's content stamp). If a file changed since (edited, opened
in the editor, or rewritten on disk), the edit would land on the wrong text: the request fails with
``ContentModified`` (the client shows it and asks for fresh actions) instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcInvalidParams

from msprof_lsp.mapping.profile import safe_io

from . import payloads
from .convert import workspace_edit
from .diagnostics import text_stamp
from .payloads import ChangeData, CodeActionData
from .state.documents import path_of

if TYPE_CHECKING:
    from .state.context import RequestContext


def resolve(ctx: RequestContext, action: types.CodeAction) -> types.CodeAction:
    data = payloads.load(action.data, CodeActionData)
    if data is None or data.changes is None:
        if action.edit is not None:
            return action  # nothing deferred
        raise JsonRpcInvalidParams("msprof-lsp: this code action carries no edit data")
    for change in data.changes:
        why = _changed(ctx, change)
        if why:
            raise JsonRpcContentModified(
                f"msprof-lsp: {change.uri} changed since this fix was computed ({why}); request the code actions again"
            )
    action.edit = workspace_edit(data.changes, ctx.caps)
    return action


def _changed(ctx: RequestContext, change: ChangeData) -> str:
    """Why the file's text is no longer the one the edits were computed on ('' when it is)."""
    doc = ctx.document(change.uri)
    if change.version is not None:
        current = doc.version if doc is not None else None
        return "" if change.version == current else f"version {change.version}, now {current}"
    if doc is not None:
        return "opened in the editor since"  # computed on the disk text; the buffer may differ
    path = path_of(change.uri)
    # read only a file the analysis read (inside the workspace), whatever URI the data names
    if not change.stamp or path is None or path not in ctx.snapshot.texts:
        return "no longer analysed"
    text = safe_io.read_source_text(path)
    return "" if text is not None and text_stamp(text) == change.stamp else "changed on disk"
