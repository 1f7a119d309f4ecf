"""``workspace/executeCommand`` commands (ids in server/protocol.py).

pygls 2 passes command arguments unpacked; each handler takes ``*args`` and validates them itself
(optional arguments such as selectProfile's rank would otherwise be rejected by pygls). ``ls`` is
left unannotated: pygls evaluates command annotations at call time, and the server class is only
imported for type checkers here (app.py imports this module).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.server.escape import visible

from ..analysis.views.document import MAX_HOTSPOTS
from ..analysis.views.rows import HotspotRow
from ..cli import version
from .diagnostics import file_view, uri_for
from .status_payload import to_json
from .state.loading import state_counts
from .heat_view import file_heat, line_label, ops_dicts, ops_at


def _arg(args: tuple[Any, ...], i: int, kind: type | tuple[type, ...], what: str, *, optional: bool = False) -> Any:
    if i >= len(args) or args[i] is None:
        if optional:
            return None
        raise JsonRpcInvalidParams(f"missing argument {i + 1}: {what}")
    value = args[i]
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise JsonRpcInvalidParams(f"argument {i + 1} must be {what}, got {value!r}")
    return value


async def reload_profile(ls, *args: Any) -> dict[str, Any]:
    await ls.loader.load("reload requested")
    return to_json(ls.loader.status)


async def select_profile(ls, *args: Any) -> dict[str, Any]:
    raw = _arg(args, 0, str, "a profile path (string)")
    rank = _arg(args, 1, int, "a rank (non-negative integer)", optional=True)
    if rank is not None and rank < 0:
        raise JsonRpcInvalidParams(f"rank must be non-negative, got {rank}")
    path = ls.resolve_user_path(raw)
    if not path.exists():
        raise JsonRpcInvalidParams(f"{path}: no such file or directory")
    ls.loader.explicit = path
    ls.loader.explicit_rank = rank
    await ls.loader.load(f"profile selected: {path}")
    return to_json(ls.loader.status)


def show_hotspots(ls, *args: Any) -> dict[str, Any]:
    ctx = ls.context()
    snap = ctx.snapshot
    out = []
    for h in snap.hotspots[:MAX_HOTSPOTS]:
        path = h.site.span.path
        d = HotspotRow.of(h, Path(path).parent, snap.steps_for(path)).as_dict()
        d["path"] = path
        d["uri"] = uri_for(ctx, path)
        view = file_view(ctx, path)
        moved = view.linemap.lines(h.site.span.line, h.site.span.end_line) if view is not None else None
        if view is not None and moved is None:
            continue  # edited away since the analysis
        if moved is not None:
            d["line"], d["end_line"] = moved
        out.append(d)
    return {"hotspots": out}


async def set_baseline(ls, *args: Any) -> dict[str, Any]:
    raw = _arg(args, 0, str, "a profile path (string) or null", optional=True)
    path = None
    if raw:
        p = ls.resolve_user_path(raw)
        if not p.exists():
            raise JsonRpcInvalidParams(f"{p}: no such file or directory")
        path = str(p)
    try:
        snap = await ls.loader.set_baseline(path)
    except ProfileError as exc:
        text = f"msprof-lsp: cannot read the baseline profile: {exc}"
        ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=visible(text)))
        return {"baseline": None, "error": text}
    cmp = snap.comparison if snap is not None else None
    return {
        "baseline": path,
        "findings": state_counts(snap) if snap is not None else {},
        "stepTimeUs": round(cmp.before_step_us, 3) if cmp else None,
        "currentStepTimeUs": round(cmp.after_step_us, 3) if cmp else None,
        "changes": len(cmp.lines) if cmp else 0,
    }


def adopt_new_profile(ls, *args: Any) -> dict[str, Any]:
    """A recording starts: the next new profile becomes current, the current one its baseline."""
    return {"current": ls.loader.adopt_next()}


def line_heat(ls, *args: Any) -> list[dict[str, Any]]:
    uri = _arg(args, 0, str, "a document URI (string)")
    heat = file_heat(ls.context(), uri)
    if heat is None:
        return []
    out = []
    for line in sorted(heat.lines):
        hot = heat.lines[line]
        if hot.share <= 0:
            continue
        out.append({"line": line - 1, "share": round(hot.share, 6), "perStepUs": round(hot.per_step_us, 3),
                    "label": line_label(hot)})
    return out


def show_operators(ls, *args: Any) -> dict[str, Any]:
    uri = _arg(args, 0, str, "a document URI (string)")
    line0 = _arg(args, 1, int, "a 0-based line (integer)")
    heat = file_heat(ls.context(), uri)
    if heat is None:
        return {"uri": uri, "line": line0, "ops": []}
    ops = ops_at(heat, line0 + 1)
    return {"uri": uri, "line": line0, "ops": ops_dicts(ops, heat.num_steps, heat.step_time_us)}


async def report_model(ls, *args: Any) -> dict[str, Any] | None:
    """The loaded job's report model (what the HTML report draws), for the "Show profile" view;
    built on the analysis thread, which owns the engine."""
    engine = ls.engine.primary()
    if engine is None:
        return None
    model = await asyncio.get_running_loop().run_in_executor(ls.worker, engine.report_model, version())
    return None if model is None else msgspec.to_builtins(model)
