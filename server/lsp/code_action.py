"""``textDocument/codeAction``: each diagnostic's quick fixes, "Disable for this line",
``source.fixAll.msprof-lsp`` (every safe fix of the file), and "Record a profile" on a training
loop (record_action; with or without a profile).

A diagnostic's ``data`` names its finding in the snapshot; the finding's fix offers are expanded
here, on the first request for the file (fixes_on_demand: one parse per file and snapshot), and
mapped onto the buffer as it is now. A diagnostic published for an older version of the buffer or
an older snapshot is followed to its line now (the buffer keeps line maps of recent versions) and
matched to the current diagnostic of that code there; if there is none, it gets no fix. Clients
with ``codeAction/resolve`` for ``edit`` get the actions without edits first.

Fix edits are made on the analysed text, so a fix is offered only for files whose text the client
has is that text (diagnostics.FixViews): an open buffer whose current version was analysed (edits
carry that version), a closed file unchanged on disk since the analysis (edits carry its stamp).
Right after a fix is applied, the buffer's new version is not analysed yet: no fix (the applied
one would be offered again on top of itself) until the re-analysis lands. "Disable for this
line" is computed on the buffer as it is now and is offered throughout.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from lsprotocol import types

from msprof_lsp.hints import suppress
from msprof_lsp.hints.verify import FindingState

from ..protocol import DIAGNOSTIC_SOURCE, FIX_ALL_KIND
from . import diagnostics, payloads, record_action
from .convert import FileView, fix_payload, local_edit_payload, make_action, merge_changes
from .fixes_on_demand import fixes_of
from .payloads import ChangeData, DiagnosticData, FixData

if TYPE_CHECKING:
    from .state.context import RequestContext

QUICKFIX = types.CodeActionKind.QuickFix.value


def wanted(kind: str, only: list[str] | None) -> bool:
    """LSP kinds match by dotted prefix: ``source`` asks for ``source.fixAll.msprof-lsp`` too."""
    if not only:
        return True
    return any(kind == o or kind.startswith(o + ".") for o in map(str, only))


def fix_title(code: str, title: str) -> str:
    return f"msprof ({code}): {title}"


def _match(current: list[types.Diagnostic], code: str, line: int) -> types.Diagnostic | None:
    for d in current:
        if str(d.code) == code and d.range.start.line == line:
            return d
    return None


def _data(d: types.Diagnostic) -> DiagnosticData | None:
    return payloads.load(d.data, DiagnosticData)


def _fixes_of(ctx: RequestContext, views: diagnostics.FixViews, view: FileView,
              data: DiagnosticData) -> list[FixData]:
    """The finding's offers expanded, in client units for the files as they are now (none when a
    file they edit is not as analysed)."""
    out = []
    for fix in fixes_of(ctx, view.path, data.finding):
        p = fix_payload(fix, {e.path: views.get(e.path) for e in fix.edits}, ctx.caps.position_encoding)
        if p is not None:
            out.append(p)
    return out


def _suppression(ctx: RequestContext, view: FileView, code: str, line0: int,
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
        changes = [local_edit_payload(view, whole, ctx.caps.position_encoding)]
        return make_action(ctx.caps, fix_title(code, "Disable for this file"), QUICKFIX, changes, diagnostics_=[d])
    # only the diagnostic's line is tokenized (the whole file costs ~10 ms per 1,000 lines); a
    # diagnostic sits on code, never inside a multi-line string, so the line alone decides
    one = suppress.suppression_edit(view.lines[line0], 1, code, view.path)
    if one is None:
        return None
    edit = dataclasses.replace(one, line=line0 + 1, end_line=line0 + 1)
    changes = [local_edit_payload(view, edit, ctx.caps.position_encoding)]
    return make_action(ctx.caps, fix_title(code, "Disable for this line"), QUICKFIX, changes, diagnostics_=[d])


def code_action(ctx: RequestContext, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    uri = params.text_document.uri
    doc = ctx.document(uri)
    path = diagnostics.doc_path(ctx, uri)
    only = [str(k) for k in params.context.only] if params.context.only else None
    view, current = diagnostics.compute(ctx, path)
    fix_views = diagnostics.FixViews(ctx)  # one disk read per closed file per request
    actions: list[types.CodeAction] = []
    if view is not None and wanted(QUICKFIX, only):
        for d in params.context.diagnostics:
            if d.source != DIAGNOSTIC_SOURCE or d.code is None:
                continue
            code = str(d.code)
            data = _data(d)
            if data is None:
                continue  # not one of ours, or mangled by the client
            line = data.line
            if data.version == view.version and data.generation == ctx.snapshot.generation:
                found, line0 = data, line - 1  # published for exactly this text and analysis
            else:
                # published for an older text or analysis: follow its line to now, use today's diagnostic
                now_line = None
                if doc is None:
                    now_line = line if data.version is None else None  # a closed file: its text is the analysed one
                elif data.version is None:
                    # published before the file was opened: lines of the analysed text
                    if data.generation == ctx.snapshot.generation and doc.linemap is not None:
                        now_line = doc.linemap.line(line)
                else:
                    now_line = doc.line_now(data.version, line)
                now = _match(current, code, now_line - 1) if now_line is not None else None
                found = _data(now) if now is not None else None
                if now is None or found is None:
                    continue
                line0 = now.range.start.line
            for fix in _fixes_of(ctx, fix_views, view, found):
                actions.append(
                    make_action(ctx.caps, fix_title(code, fix.title), QUICKFIX, fix.changes, diagnostics_=[d],
                                preferred=fix.safe, group=fix.group)
                )
            if doc is not None and found.state != FindingState.RESOLVED.value:  # nothing left to silence
                sup = _suppression(ctx, view, code, line0, d)
                if sup is not None:
                    actions.append(sup)
    if doc is not None and wanted(record_action.KIND, only):
        # needs no profile: recording one is how a user without a profile gets started
        rec = record_action.record_action(ctx, doc, params.range.start.line)
        if rec is not None:
            actions.append(rec)
    if view is not None and wanted(FIX_ALL_KIND, only):
        fix_all = _fix_all(ctx, fix_views, view, current)
        if fix_all is not None:
            actions.append(fix_all)
    return actions


def _fix_all(ctx: RequestContext, views: diagnostics.FixViews, view: FileView,
             current: list[types.Diagnostic]) -> types.CodeAction | None:
    safe: list[list[ChangeData]] = []
    groups: set[str] = set()
    for d in current:
        data = _data(d)
        if data is None or not data.fixes:
            continue
        for fix in _fixes_of(ctx, views, view, data):
            if not fix.safe or (fix.group and fix.group in groups):
                continue  # alternatives of one construct: the first (preferred) one only
            if fix.group:
                groups.add(fix.group)
            safe.append(fix.changes)
    if not safe:
        return None
    changes, skipped = merge_changes(safe)
    if not changes:
        return None
    n = len(safe) - skipped
    title = f"msprof: apply {n} safe fix{'es' if n != 1 else ''}"
    if skipped:
        title += f" ({skipped} overlapping left out)"
    return make_action(ctx.caps, title, FIX_ALL_KIND, changes)
