"""The one adapter from core results (findings, fixes, spans: 1-based lines, code-point columns)
to LSP types (0-based lines, columns in the negotiated encoding).

Conversion goes through ``mapping.positions`` on LSP's own line split (``\\r\\n``, ``\\r``, ``\\n``);
pygls's document lines come from ``str.splitlines``, which also breaks on ``\\f``, ``\\x1c`` and
U+2028 and would put positions on the wrong line after such a character.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from lsprotocol import types

from msprof_lsp.hints.finding import Finding, Fix, Severity, TextEdit
from msprof_lsp.hints.verify import FindingChange, FindingState
from msprof_lsp.mapping.source.positions import col_from_units, col_to_units
from msprof_lsp.server.escape import visible

from ..protocol import DIAGNOSTIC_SOURCE, rule_doc_url
from . import payloads
from .capabilities import ClientCaps
from .state.linemap import LineMap
from .payloads import ChangeData, CodeActionData, DiagnosticData, EditData, FixData

SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
    Severity.HINT: types.DiagnosticSeverity.Hint,
}


@dataclass(slots=True)
class FileView:
    """One file as the client sees it now: its lines, its version, and the map from analysed lines."""

    uri: str
    path: str
    version: int | None  # None: not open in the editor
    lines: Sequence[str]
    linemap: LineMap
    stamp: str = ""  # a closed file: text_stamp of the text ``lines`` come from (fix edits carry it)


# -- positions -----------------------------------------------------------------------------------


def position(lines: Sequence[str], line: int, col: int, encoding: str) -> types.Position:
    """(1-based line, code-point column) -> LSP position, clamped into the document."""
    i = line - 1
    if i < 0:
        return types.Position(line=0, character=0)
    if i >= len(lines):
        last = len(lines) - 1
        return types.Position(line=last, character=col_to_units(lines[last], len(lines[last]), encoding))
    return types.Position(line=i, character=col_to_units(lines[i], col, encoding))


def range_of(lines: Sequence[str], line: int, col: int, end_line: int, end_col: int, encoding: str) -> types.Range:
    return types.Range(start=position(lines, line, col, encoding), end=position(lines, end_line, end_col, encoding))


def from_position(lines: Sequence[str], pos: types.Position, encoding: str) -> tuple[int, int]:
    """LSP position -> (1-based line, code-point column)."""
    i = max(0, pos.line)
    if i >= len(lines):
        return len(lines), len(lines[-1]) if lines else 0
    return i + 1, col_from_units(lines[i], pos.character, encoding)


# -- fixes ---------------------------------------------------------------------------------------


def _edit(lines: Sequence[str], line: int, col: int, end_line: int, end_col: int, new_text: str, encoding: str) -> EditData:
    r = range_of(lines, line, col, end_line, end_col, encoding)
    return EditData(r.start.line, r.start.character, r.end.line, r.end.character, new_text)


def fix_payload(fix: Fix, views: dict[str, FileView | None], encoding: str) -> FixData | None:
    """A fix's edits in client units for the files as they are now; None when any edit's lines
    changed since the analysis (the fix was computed on text that is no longer there)."""
    per_file: dict[str, ChangeData] = {}
    for e in fix.edits:
        view = views.get(e.path)
        if view is None:
            return None
        moved = view.linemap.untouched(e.line, e.end_line)
        if moved is None:
            return None
        change = per_file.setdefault(view.uri, ChangeData(view.uri, view.version, stamp=view.stamp))
        change.edits.append(_edit(view.lines, moved[0], e.col, moved[1], e.end_col, e.new_text, encoding))
    if not per_file:
        return None
    return FixData(fix.title, fix.safe, list(per_file.values()), fix.group)


def local_edit_payload(view: FileView, edit: TextEdit, encoding: str) -> ChangeData:
    """An edit computed on the current text (no line map), e.g. a suppression comment."""
    e = _edit(view.lines, edit.line, edit.col, edit.end_line, edit.end_col, edit.new_text, encoding)
    return ChangeData(view.uri, view.version, [e])


Point = tuple[int, int]


def _span(e: EditData) -> tuple[Point, Point]:
    return (e.line, e.character), (e.end_line, e.end_character)


def _clashes(a: tuple[Point, Point], b: tuple[Point, Point]) -> bool:
    if a[0] == a[1] == b[0] == b[1]:
        return True  # two insertions at one point: their order would be arbitrary
    return a[0] < b[1] and b[0] < a[1]


class _Taken:
    """Edited ranges of one file, sorted by start; overlap checks look at the neighbours only."""

    def __init__(self) -> None:
        self.spans: list[tuple[Point, Point]] = []

    def clashes(self, span: tuple[Point, Point]) -> bool:
        i = bisect.bisect_left(self.spans, span)
        return any(_clashes(span, self.spans[j]) for j in (i - 1, i) if 0 <= j < len(self.spans))

    def add(self, span: tuple[Point, Point]) -> None:
        bisect.insort(self.spans, span)


def merge_changes(groups: Sequence[Sequence[ChangeData]]) -> tuple[list[ChangeData], int]:
    """Combine several fixes' ``changes``; a fix overlapping an earlier one is left out.

    Returns the merged changes and how many fixes were left out.
    """
    merged: dict[str, ChangeData] = {}
    taken: dict[str, _Taken] = {}
    skipped = 0
    for changes in groups:
        new = sorted((c.uri, _span(e)) for c in changes for e in c.edits)
        clash = any(taken.setdefault(uri, _Taken()).clashes(span) for uri, span in new)
        clash = clash or any(u1 == u2 and _clashes(a, b) for (u1, a), (u2, b) in zip(new, new[1:]))
        if clash:
            skipped += 1
            continue
        for c in changes:
            merged.setdefault(c.uri, ChangeData(c.uri, c.version, stamp=c.stamp)).edits.extend(c.edits)
        for uri, span in new:
            taken[uri].add(span)
    return list(merged.values()), skipped


def _text_edit(e: EditData) -> types.TextEdit:
    return types.TextEdit(
        range=types.Range(
            start=types.Position(line=e.line, character=e.character),
            end=types.Position(line=e.end_line, character=e.end_character),
        ),
        new_text=e.new_text,
    )


def workspace_edit(changes: Sequence[ChangeData], caps: ClientCaps) -> types.WorkspaceEdit:
    """Versioned ``documentChanges`` when the client takes them (stale edits are then refused by
    the client), else a plain ``changes`` map."""
    if caps.document_changes:
        return types.WorkspaceEdit(
            document_changes=[
                types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(uri=c.uri, version=c.version),
                    edits=[_text_edit(e) for e in c.edits],
                )
                for c in changes
            ]
        )
    out: dict[str, list[types.TextEdit]] = {}
    for c in changes:
        out.setdefault(c.uri, []).extend(_text_edit(e) for e in c.edits)
    return types.WorkspaceEdit(changes=out)


# -- diagnostics ---------------------------------------------------------------------------------


def diagnostic(
    f: Finding,
    index: int,
    view: FileView,
    views: dict[str, FileView | None],
    caps: ClientCaps,
    generation: int,
    change: FindingChange | None = None,
) -> types.Diagnostic | None:
    """The LSP diagnostic of anchored finding ``index`` of the file in ``view`` (None when its
    lines were edited away). Its fixes stay offers until code actions are asked for.

    ``change``: its state against the baseline, said at the end of the message; a resolved one
    (``f`` is the baseline's finding, ``index`` -1) is a hint that says so first and has no fixes.
    """
    resolved = change is not None and change.state is FindingState.RESOLVED
    span = f.span
    assert span is not None
    moved = view.linemap.lines(span.line, span.end_line)
    if moved is None:
        return None
    enc = caps.position_encoding
    rng = range_of(view.lines, moved[0], span.col, moved[1], span.end_col, enc)
    fixes = 0 if resolved else len(f.offers) + len(f.fixes)
    state = change.state.value if change is not None else ""
    data = DiagnosticData(f.code, view.uri, view.version, generation, moved[0], index, fixes, state)
    message = f.message
    if resolved:
        message = f"{change.note()}: {f.message}"  # type: ignore[union-attr]
    elif change is not None:
        message = f"{f.message.rstrip()} ({change.note()})"
    related: list[types.DiagnosticRelatedInformation] | None = None
    if caps.related_information and f.related:
        related = []
        for r in f.related:
            rv = views.get(r.span.path)
            if rv is None:
                continue
            rm = rv.linemap.lines(r.span.line, r.span.end_line)
            if rm is None:
                continue
            related.append(
                types.DiagnosticRelatedInformation(
                    location=types.Location(
                        uri=rv.uri, range=range_of(rv.lines, rm[0], r.span.col, rm[1], r.span.end_col, enc)
                    ),
                    message=visible(r.message),
                )
            )
        related = related or None
    return types.Diagnostic(
        range=rng,
        message=visible(message),  # names ops and paths from the profile: controls shown as text
        severity=SEVERITY[Severity.HINT if resolved else f.severity],
        code=f.code,
        code_description=types.CodeDescription(href=rule_doc_url(f.code)) if caps.code_description else None,
        source=DIAGNOSTIC_SOURCE,
        related_information=related,
        data=payloads.dump(data),
    )


def make_action(
    caps: ClientCaps,
    title: str,
    kind: str,
    changes: list[ChangeData],
    *,
    diagnostics_: list[types.Diagnostic] | None = None,
    preferred: bool = False,
    group: str = "",
) -> types.CodeAction:
    """A code action making ``changes``: now, or in codeAction/resolve when the client resolves edits."""
    action = types.CodeAction(
        title=visible(title),  # fix titles may name ops from the profile: plain text, controls shown
        kind=kind,
        diagnostics=diagnostics_,
        is_preferred=True if preferred else None,
    )
    deferred = changes if caps.code_action_resolve_edit else None  # resolve makes the edit (after a version check)
    if deferred is None:
        action.edit = workspace_edit(changes, caps)
    if deferred is not None or group:
        action.data = payloads.dump(CodeActionData(deferred, group))
    return action
