"""``codeAction/resolve``: fill in the edit of an action returned without one.

The action's ``data`` (payloads.CodeActionData) holds the edits for a known version of each file. If a file changed since,
the edit would land on the wrong text: the request fails with ``ContentModified`` (the client
shows it and asks for fresh actions) instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcInvalidParams

from . import payloads
from .convert import workspace_edit
from .payloads import CodeActionData

if TYPE_CHECKING:
    from .app import MsprofLanguageServer


def resolve(ls: MsprofLanguageServer, action: types.CodeAction) -> types.CodeAction:
    data = payloads.load(action.data, CodeActionData)
    if data is None or data.changes is None:
        if action.edit is not None:
            return action  # nothing deferred
        raise JsonRpcInvalidParams("msprof-lsp: this code action carries no edit data")
    for change in data.changes:
        doc = ls.documents.get(change.uri)
        current = doc.version if doc is not None else None
        if change.version is not None and change.version != current:
            raise JsonRpcContentModified(
                f"msprof-lsp: {change.uri} changed since this fix was computed "
                f"(version {change.version}, now {current}); request the code actions again"
            )
    action.edit = workspace_edit(data.changes, ls.caps)
    return action
