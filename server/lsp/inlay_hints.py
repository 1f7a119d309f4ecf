"""``textDocument/inlayHint``: the share of step time at the end of each hot line (and the
baseline change), when the ``inlayHints`` setting is on. Registered only for clients that
support inlay hints (LSP 3.17).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from msprof_lsp.mapping.source.positions import col_to_units
from msprof_lsp.mapping.units import format_share, format_us

from .heat_view import change_text, file_heat

if TYPE_CHECKING:
    from .state.context import RequestContext


def inlay_hints(ctx: RequestContext, params: types.InlayHintParams) -> list[types.InlayHint]:
    if not ctx.settings.inlay_hints:
        return []
    heat = file_heat(ctx, params.text_document.uri)
    if heat is None:
        return []
    first, last = params.range.start.line + 1, params.range.end.line + 1
    floor = ctx.settings.min_share
    lines = heat.view.lines
    out = []
    for line in sorted(heat.lines):
        if not first <= line <= last or line > len(lines):
            continue
        hot = heat.lines[line]
        if hot.share < floor and hot.change is None:
            continue
        parts = []
        if hot.heat is not None:
            parts.append(f"{format_share(hot.share)} · {format_us(hot.per_step_us)}/step")
        if hot.change is not None:
            parts.append(change_text(hot.change))
        text = lines[line - 1]
        out.append(
            types.InlayHint(
                position=types.Position(line=line - 1, character=col_to_units(text, len(text), ctx.caps.position_encoding)),
                label=" · ".join(parts),
                padding_left=True,
            )
        )
    return out
