"""``textDocument/hover`` on a hot line: the operators behind it (Markdown table, or aligned plain
text for clients without Markdown), the baseline change, and the hints on that line.

Op, kernel and function names come from the profile and the workspace: in Markdown each one goes
through ``escape.markdown`` (no link, image, HTML or table break can come from a name), in plain
text through ``escape.visible``. Our own words and figures are written as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from lsprotocol import types

from msprof_lsp.mapping.units import format_share, format_us
from msprof_lsp.server.escape import markdown, visible

from .convert import from_position, range_of
from .heat_view import FileHeat, HotLine, change_text, file_heat, on_path_text, ops_at

if TYPE_CHECKING:
    from .state.context import RequestContext

COLUMNS = ("operator", "type", "core", "count", "µs/step", "share", "shapes")
MAX_ROWS = 12
COUNTER_TITLE = "Pipe utilisation (PipeUtilization counters, mean busy share per kernel)"
Table = tuple[tuple[str, ...], list[tuple[str, ...]]]  # header, rows
Escape = Callable[[object], str]  # markdown or visible: how profile text is written in this hover


def _rows(ctx: RequestContext, heat: FileHeat, line: int, esc: Escape = visible) -> list[tuple[str, ...]]:
    steps = max(heat.num_steps, 1)
    step_us = heat.step_time_us
    rows = []
    for op in ops_at(heat, line)[:MAX_ROWS]:
        per_step = op.total_ns / steps / 1000
        share = per_step / step_us if step_us > 0 else 0.0
        direction = " (bwd)" if op.backward else ""
        rows.append((esc(op.name) + direction, esc(op.type), esc(op.core), str(op.count), f"{per_step:,.1f}",
                     format_share(share), esc("; ".join(op.shapes))))
    return rows


def _counter_table(hot: HotLine | None, esc: Escape = visible) -> Table:
    """Header and rows of the counter table (the hints layer computed them with the analysis)."""
    if hot is None or not hot.counters:
        return (), []
    pipes = tuple(p for p, _ in hot.counters[0].ratios)
    rows = []
    for c in hot.counters:
        direction = " (bwd)" if c.backward else ""
        rows.append((esc(c.type) + direction, esc(c.kernel_class), str(c.count), *(f"{r:.0%}" for _, r in c.ratios), c.bound))
    return ("operator", "class", "count", *pipes, "bound"), rows


def _headline(hot: HotLine | None, heat: FileHeat, line: int, esc: Escape = visible) -> str:
    if hot is not None and hot.heat is not None:
        h = hot.heat
        steps = max(heat.num_steps, 1)
        split = ""
        if h.fwd_ns or h.bwd_ns:
            split = f" (forward {format_us(h.fwd_ns / steps / 1000)}, backward {format_us(h.bwd_ns / steps / 1000)})"
        return f"{format_us(hot.per_step_us)}/step{on_path_text(hot)} · {format_share(hot.share)} of step{split}"
    for fn in heat.functions:
        if fn.line == line:
            f = fn.heat
            return f"{esc(f.function)}: {format_us(f.per_step_ns / 1000)}/step · {format_share(f.share)} of step"
    return ""


def _md_table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    # cells hold escaped profile text (a "|" in a name is already "\\|") and our own figures
    out.extend("| " + " | ".join(c or " " for c in r) + " |" for r in rows)
    return [*out, ""]


def _plain_table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    table = [columns, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]


def path_text(hot: HotLine, esc: Escape = visible) -> str:
    """The line's share of its own time on the critical path and what bound it."""
    lp = hot.path
    assert lp is not None
    text = f"Critical path: {format_share(lp.path_share)} of this line's own time is on it"
    bound = lp.bound
    if bound is not None:
        text += f"; {bound.value}-bound ({format_us(lp.charged[bound] / 1000)}/step)"
    if lp.waits:
        text += "; waits: " + ", ".join(f"{esc(name)} {format_us(ns / 1000)}" for name, ns in lp.waits)
    return text + "."


def _markdown(headline: str, rows: list[tuple[str, ...]], extra: list[str], counters: Table = ((), [])) -> str:
    out = [f"**msprof-lsp** · {headline}" if headline else "**msprof-lsp**", ""]
    if rows:
        out.extend(_md_table(COLUMNS, rows))
    if counters[1]:
        out.extend([f"*{COUNTER_TITLE}*", "", *_md_table(*counters)])
    out.extend(extra)
    return "\n".join(out).rstrip() + "\n"


def _plain(headline: str, rows: list[tuple[str, ...]], extra: list[str], counters: Table = ((), [])) -> str:
    out = [f"msprof-lsp: {headline}" if headline else "msprof-lsp"]
    if rows:
        out.extend(_plain_table(COLUMNS, rows))
    if counters[1]:
        out.extend([COUNTER_TITLE, *_plain_table(*counters)])
    out.extend(extra)
    return "\n".join(out) + "\n"


def hover(ctx: RequestContext, params: types.HoverParams) -> types.Hover | None:
    heat = file_heat(ctx, params.text_document.uri)
    if heat is None:
        return None
    line, _ = from_position(heat.view.lines, params.position, ctx.caps.position_encoding)
    hot = heat.lines.get(line)
    markdown_ok = ctx.caps.hover_markdown
    esc: Escape = markdown if markdown_ok else visible
    rows = _rows(ctx, heat, line, esc)
    headline = _headline(hot, heat, line, esc)
    if not rows and not headline and (hot is None or hot.change is None):
        return None
    extra: list[str] = []
    if hot is not None and hot.change is not None:
        extra.append(f"Baseline: {change_text(hot.change)}")
    if hot is not None and hot.path is not None:
        extra.append(path_text(hot, esc))
    elif heat.info is not None and heat.info.critical_path_unavailable and hot is not None and hot.heat is not None:
        extra.append(f"Critical path: not computed: {esc(heat.info.critical_path_unavailable)}.")
    if not heat.info or not heat.info.has_call_stacks:
        extra.append("Anchored by operator and module names (the profile has no call stacks).")
    counters = _counter_table(hot, esc)
    value = _markdown(headline, rows, extra, counters) if markdown_ok else _plain(headline, rows, extra, counters)
    n = line - 1
    text = heat.view.lines[n] if 0 <= n < len(heat.view.lines) else ""
    rng = range_of(heat.view.lines, line, 0, line, len(text), ctx.caps.position_encoding)
    kind = types.MarkupKind.Markdown if markdown_ok else types.MarkupKind.PlainText
    return types.Hover(contents=types.MarkupContent(kind=kind, value=value), range=rng)
