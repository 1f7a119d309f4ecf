"""``textDocument/codeAction``: each diagnostic's quick fixes, "Disable for this line", and
``source.fixAll.msprof-lsp`` (every safe fix of the file).

The fixes come from the diagnostics' ``data`` (computed at publish time, in client units, with the
document version), so nothing is recomputed here. A diagnostic published for an older version of
the buffer is followed to its line now (the buffer keeps line maps of recent versions) and
matched to the current diagnostic of that code there; if there is none, it gets no fix. Clients with ``codeAction/resolve`` for ``edit`` get the actions without edits first.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from msprof_lsp.hints import suppress

from ..protocol import DIAGNOSTIC_SOURCE, FIX_ALL_KIND
from . import diagnostics
from .convert import FileView, local_edit_payload, merge_changes, workspace_edit

if TYPE_CHECKING:
    from .app import MsprofLanguageServer

QUICKFIX = types.CodeActionKind.QuickFix.value


def wanted(kind: str, only: list[str] | None) -> bool:
    """LSP kinds match by dotted prefix: ``source`` asks for ``source.fixAll.msprof-lsp`` too."""
    if not only:
        return True
    return any(kind == o or kind.startswith(o + ".") for o in map(str, only))


def fix_title(code: str, title: str) -> str:
    return f"msprof ({code}): {title}"


def make_action(
    ls: MsprofLanguageServer,
    title: str,
    kind: str,
    changes: list[dict[str, Any]],
    *,
    diagnostics_: list[types.Diagnostic] | None = None,
    preferred: bool = False,
    group: str | None = None,
) -> types.CodeAction:
    action = types.CodeAction(
        title=title,
        kind=kind,
        diagnostics=diagnostics_,
        is_preferred=True if preferred else None,
    )
    data: dict[str, Any] = {"group": group} if group else {}
    if ls.caps.code_action_resolve_edit:
        data["changes"] = changes  # resolve turns it into the edit (after a version check)
    else:
        action.edit = workspace_edit(changes, ls.caps)
    action.data = data or None
    return action


def _match(current: list[types.Diagnostic], code: str, line: int) -> types.Diagnostic | None:
    for d in current:
        if str(d.code) == code and d.range.start.line == line:
            return d
    return None


def _fixes_of(d: types.Diagnostic) -> list[dict[str, Any]]:
    data = d.data if isinstance(d.data, dict) else {}
    fixes = data.get("fixes")
    return fixes if isinstance(fixes, list) else []


def _suppression(ls: MsprofLanguageServer, view: FileView, code: str, line0: int,
                 d: types.Diagnostic) -> types.CodeAction | None:
    if not 0 <= line0 < len(view.lines):
        return None
    start, end = d.range.start, d.range.end
    if (start.line, start.character, end.line, end.character) == (0, 0, 0, 0):
        # a finding about the file (anchored at its start): `# msprof: ignore-file[CODE]` after
        # the docstring; a comment on line 1 could land inside that docstring
        whole = suppress.file_suppression_edit("\n".join(view.lines), code, view.path)
        if whole is None:
            return None
        changes = [local_edit_payload(view, whole, ls.caps.position_encoding)]
        return make_action(ls, fix_title(code, "Disable for this file"), QUICKFIX, changes, diagnostics_=[d])
    # only the diagnostic's line is tokenized (the whole file costs ~10 ms per 1,000 lines); a
    # diagnostic sits on code, never inside a multi-line string, so the line alone decides
    one = suppress.suppression_edit(view.lines[line0], 1, code, view.path)
    if one is None:
        return None
    edit = dataclasses.replace(one, line=line0 + 1, end_line=line0 + 1)
    changes = [local_edit_payload(view, edit, ls.caps.position_encoding)]
    return make_action(ls, fix_title(code, "Disable for this line"), QUICKFIX, changes, diagnostics_=[d])


def code_action(ls: MsprofLanguageServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    uri = params.text_document.uri
    doc = ls.documents.get(uri)
    path = diagnostics.doc_path(ls, uri)
    only = [str(k) for k in params.context.only] if params.context.only else None
    view, current = diagnostics.compute(ls, path)
    actions: list[types.CodeAction] = []
    if view is not None and wanted(QUICKFIX, only):
        for d in params.context.diagnostics:
            if d.source != DIAGNOSTIC_SOURCE or d.code is None:
                continue
            code = str(d.code)
            data = d.data if isinstance(d.data, dict) else {}
            line = data.get("line")
            if not isinstance(line, int):
                continue  # not one of ours, or mangled by the client
            if data.get("version") == view.version:
                fixes, line0 = _fixes_of(d), line - 1  # the edits were made for exactly this text
            else:
                # published for an older text: follow its line to now and use today's diagnostic
                now_line = None
                if doc is not None and data.get("version") is None:
                    # published before the file was opened: lines of the analysed text
                    if data.get("generation") == ls.snapshot.generation and doc.linemap is not None:
                        now_line = doc.linemap.line(line)
                elif doc is not None:
                    now_line = doc.line_now(data.get("version"), line)
                now = _match(current, code, now_line - 1) if now_line is not None else None
                if now is None:
                    continue
                fixes, line0 = _fixes_of(now), now.range.start.line
            for fix in fixes:
                actions.append(
                    make_action(ls, fix_title(code, fix["title"]), QUICKFIX, fix["changes"], diagnostics_=[d],
                                preferred=bool(fix.get("safe")), group=fix.get("group"))
                )
            if doc is not None:
                sup = _suppression(ls, view, code, line0, d)
                if sup is not None:
                    actions.append(sup)
    if view is not None and wanted(FIX_ALL_KIND, only):
        fix_all = _fix_all(ls, current)
        if fix_all is not None:
            actions.append(fix_all)
    return actions


def _fix_all(ls: MsprofLanguageServer, current: list[types.Diagnostic]) -> types.CodeAction | None:
    safe, groups = [], set()
    for d in current:
        for fix in _fixes_of(d):
            group = fix.get("group")
            if not fix.get("safe") or (group and group in groups):
                continue  # alternatives of one construct: the first (preferred) one only
            if group:
                groups.add(group)
            safe.append(fix["changes"])
    if not safe:
        return None
    changes, skipped = merge_changes(safe)
    if not changes:
        return None
    n = len(safe) - skipped
    title = f"msprof: apply {n} safe fix{'es' if n != 1 else ''}"
    if skipped:
        title += f" ({skipped} overlapping left out)"
    return make_action(ls, title, FIX_ALL_KIND, changes)
