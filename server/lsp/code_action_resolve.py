"""``codeAction/resolve``: fill in the edit of an action returned without one.

The action's ``data`` holds the edits for a known version of each file. If a file changed since,
the edit would land on the wrong text: the request fails with ``ContentModified`` (the client
shows it and asks for fresh actions) instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcInvalidParams

from .convert import workspace_edit

if TYPE_CHECKING:
    from .app import MsprofLanguageServer


def resolve(ls: MsprofLanguageServer, action: types.CodeAction) -> types.CodeAction:
    data = action.data if isinstance(action.data, dict) else None
    changes = data.get("changes") if data else None
    if not isinstance(changes, list):
        if action.edit is not None:
            return action  # nothing deferred
        raise JsonRpcInvalidParams("msprof-lsp: this code action carries no edit data")
    for change in changes:
        version = change.get("version")
        doc = ls.documents.get(change.get("uri", ""))
        current = doc.version if doc is not None else None
        if version is not None and version != current:
            raise JsonRpcContentModified(
                f"msprof-lsp: {change.get('uri')} changed since this fix was computed "
                f"(version {version}, now {current}); request the code actions again"
            )
    action.edit = workspace_edit(changes, ls.caps)
    return action
