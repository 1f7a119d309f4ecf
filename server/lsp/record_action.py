"""The "record a profile" code action on a training loop (hints.fixes.profiling).

Offered whether or not a profile is loaded, as ``refactor.rewrite`` on any line of an outermost
training loop. Code actions are asked for on every cursor move, so the loops of a buffer version
are found once (a text check first, then one index) and the edit is computed when the cursor is in
one of them, once per version and loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from msprof_lsp.hints.fixes import offer
from msprof_lsp.hints.fixes.profiling import TITLE, insert_profiler, loop_lines
from msprof_lsp.hints.fixes.result import FixResult

from .convert import FileView, local_edit_payload, make_action
from .state.linemap import LineMap
from .payloads import ChangeData

if TYPE_CHECKING:
    from .state.context import RequestContext
    from .state.documents import OpenDocument

KIND = types.CodeActionKind.RefactorRewrite.value
_CACHE_MAX = 64


def _cached(ctx: RequestContext, key: tuple, compute):  # noqa: ANN001, ANN202
    cache = ctx.memo
    if key not in cache:
        if len(cache) > _CACHE_MAX:
            cache.clear()
        cache[key] = compute()
    return cache[key]


def record_changes(ctx: RequestContext, view: FileView, text: str, line0: int) -> list[ChangeData] | None:
    """The edit that wraps the training loop around ``line0`` (0-based) of ``text`` in a profiler, or None."""
    loops = _cached(ctx, ("loops", view.path, view.version, text), lambda: loop_lines(text, view.path))
    line = line0 + 1
    around = next(((a, b) for a, b in loops if a <= line <= b), None)
    if around is None:
        return None
    res: FixResult | None = _cached(ctx, ("edit", view.path, view.version, text, around[0]),
                                    lambda: offer(insert_profiler, text, around[0], path=view.path))
    if res is None:
        return None
    edits = [local_edit_payload(view, e, ctx.caps.position_encoding).edits[0] for e in res.edits]
    return [ChangeData(view.uri, view.version, edits)]


def buffer_view(doc: OpenDocument) -> FileView:
    """The open buffer as it is now: the action reads and edits only this text, so it needs no
    analysis (``diagnostics.file_view`` has none before a profile is loaded)."""
    return FileView(doc.uri, doc.path or "", doc.version, doc.lines, LineMap.identity())


def record_action(ctx: RequestContext, doc: OpenDocument, line0: int,
                  diagnostics_: list[types.Diagnostic] | None = None, kind: str = KIND) -> types.CodeAction | None:
    if doc.path is None:
        return None
    changes = record_changes(ctx, buffer_view(doc), doc.text, line0)
    if not changes:
        return None
    return make_action(ctx.caps, f"msprof: {TITLE}", kind, changes, diagnostics_=diagnostics_)
