"""Device time per line and per function of one open file, at the buffer's current lines.

Shared by code lens, hover, inlay hints and the ``lineHeat`` / ``showOperators`` commands, with
the labels they all show ("MatMulV2 · 412 µs/step · 18.7% of step", "412 → 198 µs/step (−52%)").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from msprof_lsp.hints.line_counters import OpCounters
from msprof_lsp.mapping.source.compare import LineChange
from msprof_lsp.mapping.source.critical_path import LinePath
from msprof_lsp.mapping.source.heat import FunctionHeat, LineHeat, OpHeat, merge_ops
from msprof_lsp.mapping.units import format_share, format_us
from msprof_lsp.server.escape import visible

from .convert import FileView
from .diagnostics import buffer_state, file_view
from .state.documents import path_of
from .state.snapshot import ProfileInfo

if TYPE_CHECKING:
    from .state.context import RequestContext


@dataclass(slots=True)
class HotLine:
    line: int  # current, 1-based
    heat: LineHeat | None  # None: only the baseline had time here
    change: LineChange | None
    counters: list[OpCounters] = field(default_factory=list)  # PipeUtilization per operator, when recorded
    path: LinePath | None = None  # its time on the steps' critical path (None: none, or no path)

    @property
    def per_step_us(self) -> float:
        return self.heat.per_step_ns / 1000 if self.heat else 0.0

    @property
    def share(self) -> float:
        return self.heat.share if self.heat else 0.0


@dataclass(slots=True)
class HotFunction:
    line: int  # current line of the def, 1-based
    end_line: int
    heat: FunctionHeat


@dataclass(slots=True)
class FileHeat:
    view: FileView
    lines: dict[int, HotLine]
    functions: list[HotFunction]
    num_steps: int
    info: ProfileInfo | None = None  # the profile of the file's job

    @property
    def step_time_us(self) -> float:
        return self.info.step_time_us if self.info is not None else 0.0


def change_text(change: LineChange) -> str:
    """``412 → 198 µs/step (−52%)``; a line new since the baseline has no ratio."""
    before, after = change.before_us, change.after_us
    ratio = change.ratio
    pct = "" if ratio is None else f" ({'+' if ratio >= 0 else '−'}{abs(ratio) * 100:.0f}%)"
    return f"{format_us(before)} → {format_us(after)}/step{pct}"


def top_op(ops: list[OpHeat]) -> str:
    if not ops:
        return "host time"
    op = ops[0]
    return visible(op.type or op.name)  # a lens title or inlay label: plain text, controls shown


def line_label(h: HotLine) -> str:
    parts = []
    if h.heat is not None:
        parts.append(f"{top_op(h.heat.ops)} · {format_us(h.per_step_us)}/step{on_path_text(h)} · "
                     f"{format_share(h.share)} of step")
    if h.change is not None:
        parts.append(change_text(h.change))
    return " · ".join(parts)


def on_path_text(h: HotLine) -> str:
    """``, 1.9 ms on the critical path`` (its work kernels on the path, per analysed step)."""
    if h.path is None or h.heat is None:
        return ""
    return f", {format_us(h.path.on_path_per_step_ns / 1000)} on the critical path"


def function_label(f: FunctionHeat) -> str:
    return f"{visible(f.function)} · {format_us(f.per_step_ns / 1000)}/step · {format_share(f.share)} of step"


def file_heat(ctx: RequestContext, uri_or_path: str, *, by_path: bool = False) -> FileHeat | None:
    """The heat of one file at its current lines (None when nothing is known about it)."""
    snap = ctx.snapshot
    if by_path:
        path: str | None = uri_or_path
    else:
        doc = ctx.document(uri_or_path)
        path = doc.path if doc is not None else path_of(uri_or_path)
    if path is None:
        return None
    return snap.derived(("heat", path, *buffer_state(ctx, path)), lambda: _file_heat(ctx, path))


def _file_heat(ctx: RequestContext, path: str) -> FileHeat | None:
    snap = ctx.snapshot
    view = file_view(ctx, path)
    if view is None:
        return None
    lm = view.linemap
    lines: dict[int, HotLine] = {}
    counters = snap.counters.get(path, {})
    for lh in snap.lines.get(path, ()):
        cur = lm.line(lh.line)
        if cur is not None:
            lines[cur] = HotLine(cur, lh, None, counters.get(lh.line, []))
    for old_line, lp in snap.path_lines.get(path, {}).items():
        cur = lm.line(old_line)
        if cur is not None and cur in lines:
            lines[cur].path = lp
    for old_line, change in snap.changes.get(path, {}).items():
        cur = lm.line(old_line)
        if cur is None:
            continue
        hot = lines.get(cur)
        if hot is None:
            lines[cur] = HotLine(cur, None, change)
        else:
            hot.change = change
    functions = []
    for fh in snap.functions.get(path, ()):
        moved = lm.lines(fh.span.line, fh.span.end_line)
        if moved is not None:
            functions.append(HotFunction(moved[0], moved[1], fh))
    return FileHeat(view, lines, functions, snap.steps_for(path), snap.info_for(path))


def ops_dicts(ops: list[OpHeat], num_steps: int, step_time_us: float) -> list[dict[str, Any]]:
    steps = max(num_steps, 1)
    out = []
    for o in ops:
        per_step = o.total_ns / steps / 1000
        out.append(
            {
                "name": o.name,
                "type": o.type,
                "core": o.core,
                "time_us": round(per_step, 3),
                "count": o.count,
                "share": round(per_step / step_time_us, 6) if step_time_us > 0 else 0.0,
                "shapes": list(o.shapes),
                "backward": o.backward,
            }
        )
    return out


def ops_at(heat: FileHeat, line: int) -> list[OpHeat]:
    """Operators of a hot line, or of a whole function when ``line`` is its def line."""
    hot = heat.lines.get(line)
    if hot is not None and hot.heat is not None:
        return hot.heat.ops
    for fn in heat.functions:
        if fn.line == line:
            inner = [h.heat for n, h in heat.lines.items() if fn.line <= n <= fn.end_line and h.heat is not None]
            return merge_ops([op for lh in inner for op in lh.ops])
    return []


