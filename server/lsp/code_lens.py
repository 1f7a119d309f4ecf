"""``textDocument/codeLens``: "Start here" over the lines of the top findings by saving, device
time over hot functions and hot lines.

A lens runs ``msprof-lsp.showOperators`` [uri, line] (the operator breakdown). Lines and functions
below the ``minShare`` setting get no time lens (a start-here finding always gets its lens); the
``codeLens`` setting turns them all off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from msprof_lsp.hints.finding import Finding
from msprof_lsp.mapping.units import format_us

from ..protocol import CMD_SHOW_OPERATORS
from .diagnostics import file_view
from .heat_view import file_heat, function_label, line_label
from .state.documents import path_of

if TYPE_CHECKING:
    from .state.context import RequestContext

MAX_LENSES = 200  # per file: the hottest ones (a lens on every line helps nobody)


def _lens(uri: str, line0: int, title: str) -> types.CodeLens:
    pos = types.Position(line=line0, character=0)
    return types.CodeLens(
        range=types.Range(start=pos, end=pos),
        command=types.Command(title=title, command=CMD_SHOW_OPERATORS, arguments=[uri, line0]),
    )


def start_title(rank: int, f: Finding) -> str:
    """``Start here (#1: saves 2.1 ms/step)``; unknown savings name the charged time instead."""
    s = f.saving
    if s is not None and s.known:
        return f"Start here (#{rank}: saves {format_us(s.us_per_step)}/step)"
    return f"Start here (#{rank}: {format_us(f.time_per_step_us)}/step, saving unknown)"


def start_lenses(ctx: RequestContext, uri: str) -> list[types.CodeLens]:
    """A lens on each line of this file that holds a start-here finding (hints.consolidate), at
    the line where that code is now."""
    doc = ctx.document(uri)
    path = doc.path if doc is not None else path_of(uri)
    if path is None:
        return []
    view = None
    out = []
    for rank, f in enumerate(ctx.snapshot.start_here(), 1):
        if f.span is None or f.span.path != path:
            continue
        view = view or file_view(ctx, path)
        line = view.linemap.line(f.span.line) if view is not None else None
        if line is not None:
            out.append(_lens(uri, line - 1, start_title(rank, f)))
    return out


def code_lens(ctx: RequestContext, params: types.CodeLensParams) -> list[types.CodeLens]:
    if not ctx.settings.code_lens:
        return []
    start = start_lenses(ctx, params.text_document.uri)
    heat = file_heat(ctx, params.text_document.uri)
    if heat is None:
        return start
    floor = ctx.settings.min_share
    uri = params.text_document.uri
    lenses: list[tuple[float, types.CodeLens]] = []
    for fn in heat.functions:
        if fn.heat.share >= floor:
            lenses.append((fn.heat.share, _lens(uri, fn.line - 1, function_label(fn.heat))))
    def_lines = {fn.line for fn in heat.functions}
    for line, hot in heat.lines.items():
        if line in def_lines:
            continue  # the function's lens is there already
        if hot.share >= floor or hot.change is not None:
            lenses.append((max(hot.share, 1e-9), _lens(uri, line - 1, line_label(hot))))
    lenses.sort(key=lambda x: -x[0])
    out = start + [lens for _, lens in lenses[:MAX_LENSES]]
    out.sort(key=lambda lens: lens.range.start.line)  # stable: a line's start-here lens comes first
    return out
