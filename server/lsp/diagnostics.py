"""The diagnostics of one file, computed from the current snapshot and the buffer as it is now.

Shared by push (publish.py), pull (pull.py) and code actions (which find the finding, and so its
fix offers, from the diagnostics' ``data``). Profile-level findings (no source line) are not diagnostics: loading.py
shows them once as a message.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from msprof_lsp.hints import suppress
from msprof_lsp.mapping.profile import safe_io

from . import payloads
from .convert import FileView, diagnostic
from .state.documents import OpenDocument, path_of, uri_of
from .state.linemap import LineMap
from .payloads import DiagnosticData

if TYPE_CHECKING:
    from .state.context import RequestContext
    from .state.snapshot import Snapshot


class Views:
    """FileView per path, fetched once per request (open buffer, else the analysed text)."""

    def __init__(self, ctx: RequestContext) -> None:
        self.ctx = ctx
        self._cache: dict[str, FileView | None] = {}

    def get(self, path: str) -> FileView | None:
        if path not in self._cache:
            self._cache[path] = file_view(self.ctx, path)
        return self._cache[path]


def file_view(ctx: RequestContext, path: str) -> FileView | None:
    snap = ctx.snapshot
    doc = ctx.documents.by_path(path)
    if doc is not None:
        if doc.linemap is None or doc.base_generation != snap.generation:
            return None
        # split once per buffer version: diagnostics, heat and every request of this version share it
        lines = snap.derived(("buffer lines", path, doc.opened_seq, doc.version), lambda: doc.lines)
        return FileView(doc.uri, path, doc.version, lines, doc.linemap)
    lines = snap.analysed_lines(path)
    if lines is None:
        return None
    return FileView(uri_of(path), path, None, lines, LineMap.identity())


class FixViews(Views):
    """FileView per path for computing fixes: a file's view only when the text the client has is
    the text the analysis saw (fix edits are made on that text), else None (no fix offered).

    An open buffer qualifies once the analysis of its current version has landed: a buffer edited
    since (a fix just applied, a keystroke) gets no fixes until its re-analysis, so a fix is never
    offered again on top of itself. A closed file is re-read from disk (through safe_io; only files
    the analysis read, so inside the workspace) and qualifies only when it is unchanged since.
    """

    def get(self, path: str) -> FileView | None:
        if path not in self._cache:
            self._cache[path] = fix_view(self.ctx, path)
        return self._cache[path]


def text_stamp(text: str) -> str:
    """A short content id of a text (which text a closed file's fix edits were computed on)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def analysis_is_current(ctx: RequestContext, doc: OpenDocument) -> bool:
    """Whether the current snapshot analysed exactly the buffer's text at its current version."""
    snap = ctx.snapshot
    if doc.path is None or doc.linemap is None or doc.base_generation != snap.generation or not doc.linemap.is_identity:
        return False
    # compared each time, not cached by version: a client that repeats a version number must not
    # get an edit for the text that version had before (one string comparison per request)
    return snap.texts.get(doc.path) == doc.text


def disk_matches_analysis(ctx: RequestContext, path: str) -> bool:
    """Whether a file not open in the editor still holds the text the analysis saw."""
    analysed = ctx.snapshot.texts.get(path)
    if analysed is None:
        return False  # never read by the analysis: not a workspace file we may read
    return safe_io.read_source_text(path) == analysed


def fix_view(ctx: RequestContext, path: str) -> FileView | None:
    doc = ctx.documents.by_path(path)
    if doc is not None:
        return file_view(ctx, path) if analysis_is_current(ctx, doc) else None
    if not disk_matches_analysis(ctx, path):
        return None  # changed on disk since the analysis (or unreadable): edits would land on other text
    view = file_view(ctx, path)
    if view is not None:
        view.stamp = text_stamp(ctx.snapshot.texts[path])
    return view


def doc_path(ctx: RequestContext, uri: str) -> str | None:
    doc = ctx.document(uri)
    if doc is not None:
        return doc.path
    return path_of(uri)


def _suppressions(snap: Snapshot, doc: OpenDocument) -> dict[int, frozenset[str]]:
    """The buffer's suppression comments at its version, parsed once per snapshot and version."""
    return snap.derived(("suppressions", doc.path, doc.opened_seq, doc.version), lambda: suppress.suppressions(doc.text))


def compute(ctx: RequestContext, path: str | None) -> tuple[FileView | None, list[types.Diagnostic]]:
    """Diagnostics of ``path`` now; also the view they were computed for.

    Kept on the snapshot per buffer version: push, pull and code actions for one version share
    one computation (callers must not mutate the list), and a new snapshot starts afresh.
    """
    if path is None:
        return None, []
    return ctx.snapshot.derived(("diagnostics", path, *buffer_state(ctx, path)), lambda: _compute(ctx, path))


def buffer_state(ctx: RequestContext, path: str) -> tuple[int, int] | tuple[None, None]:
    """Which buffer state a derived value of ``path`` is for: (opening, version), or the
    analysed text when the file is not open."""
    doc = ctx.documents.by_path(path)
    return (doc.opened_seq, doc.version) if doc is not None else (None, None)


def _compute(ctx: RequestContext, path: str) -> tuple[FileView | None, list[types.Diagnostic]]:
    snap = ctx.snapshot
    findings = snap.findings.get(path, [])
    states = snap.states.get(path)
    resolved = snap.resolved.get(path, [])
    views = Views(ctx)
    view = views.get(path)
    if view is None or not (findings or resolved):
        return view, []
    doc = ctx.documents.by_path(path)
    out: list[types.Diagnostic] = []
    shown = [(f, i, states[i] if states else None) for i, f in enumerate(findings)]
    shown += [(c.finding, -1, c) for c in resolved]  # once each, where the code is now
    for f, i, change in shown:
        d = diagnostic(f, i, view, views, ctx.caps, snap.generation, change)  # type: ignore[arg-type]
        if d is None:
            continue
        if doc is not None and not doc.linemap.is_identity and _newly_suppressed(snap, doc, view.lines, d):  # type: ignore[union-attr]
            continue
        out.append(d)
    return view, out


def _newly_suppressed(snap: Snapshot, doc: OpenDocument, lines: list[str], d: types.Diagnostic) -> bool:
    """A ``# msprof: ignore`` typed since the analysis (the rules already honoured older ones);
    ``lines``: the buffer's lines now."""
    first, last = d.range.start.line, d.range.end.line
    if not any(0 <= i < len(lines) and "msprof" in lines[i] for i in {first, last}):
        return False  # the cheap test: no directive text on the diagnostic's lines
    return suppress.span_suppressed(_suppressions(snap, doc), first + 1, last + 1, str(d.code))


def digest(view: FileView | None, diags: list[types.Diagnostic]) -> str:
    """A short id of what the client would see (for resultId and skipping identical publishes)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(repr(view.version if view else None).encode())
    for d in diags:
        r = d.range
        h.update(
            repr((r.start.line, r.start.character, r.end.line, r.end.character, d.code, d.severity, d.message,
                  _fix_key(d.data))).encode()
        )
    return h.hexdigest()


def _fix_key(data: Any) -> Any:
    got = payloads.load(data, DiagnosticData)
    return (got.finding, got.fixes) if got is not None else None


def all_paths(ctx: RequestContext) -> list[str]:
    """Files that have (or may need clearing of) diagnostics: findings plus open buffers."""
    paths = set(ctx.snapshot.findings)
    paths.update(d.path for d in ctx.documents.all() if d.path)
    return sorted(paths)


def uri_for(ctx: RequestContext, path: str) -> str:
    doc = ctx.documents.by_path(path)
    return doc.uri if doc is not None else uri_of(path)

