"""``textDocument/codeLens``: device time over hot functions and hot lines.

A lens runs ``msprof-lsp.showOperators`` [uri, line] (the operator breakdown). Lines and functions
below the ``minShare`` setting get none; the ``codeLens`` setting turns them all off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from ..protocol import CMD_SHOW_OPERATORS
from .heat_view import file_heat, function_label, line_label

if TYPE_CHECKING:
    from .app import MsprofLanguageServer

MAX_LENSES = 200  # per file: the hottest ones (a lens on every line helps nobody)


def _lens(uri: str, line0: int, title: str) -> types.CodeLens:
    pos = types.Position(line=line0, character=0)
    return types.CodeLens(
        range=types.Range(start=pos, end=pos),
        command=types.Command(title=title, command=CMD_SHOW_OPERATORS, arguments=[uri, line0]),
    )


def code_lens(ls: MsprofLanguageServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    if not ls.settings.code_lens:
        return []
    heat = file_heat(ls, params.text_document.uri)
    if heat is None:
        return []
    floor = ls.settings.min_share
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
    out = [lens for _, lens in lenses[:MAX_LENSES]]
    out.sort(key=lambda lens: lens.range.start.line)
    return out
