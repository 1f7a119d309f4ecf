"""NPU108 host-sync (docs/rules/NPU108.md).

Evidence: framework ops that block the host until the device drains (``aten::item`` /
``aten::_local_scalar_dense``, ``aten::nonzero``, ``aten::equal``), any other framework op that a
runtime synchronisation happens inside (a D2H ``aten::to`` for ``.cpu()``), and synchronisation
APIs outside any framework op (``AscendCL@aclrtSynchronizeDevice`` from ``torch.npu.synchronize()``;
Kineto ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize``). Cost = the host duration of the
blocking op measured inside the step windows (each interval clipped to its step, overlapping ones
-- nested or on other threads -- counted once), as a share of the wall-clock step; a profile
without step markers has one window, its capture span. Syncs inside ``Optimizer.step#...``
belong to NPU220 and are only counted in the evidence.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from msprof_lsp.mapping.profile import step_windows
from msprof_lsp.mapping.source.critical_path import SYNC_CALL
from msprof_lsp.mapping.source.source_index import CallSite, SourceIndex
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.units import NS_PER_US
from msprof_lsp.mapping.profile.model import Backend

from ..context import RuleContext, Unit
from ..finding import Change, Effect, Finding, Target
from ..fixes import fix_id
from ..fixes import host_sync as fx
from ..registry import Rule, declare
from .. import profile_query as pq, source_query as sq
from ..fixed_in_source import as_fixed

SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::equal", "aten::is_nonzero"})
# A synchronous aclrtMemcpy alone is left out: torch_npu also uses it for pageable host-to-device
# input copies (NPU104's evidence); a D2H read synchronises the stream first.
SYNC_APIS = frozenset({
    "aclrtSynchronizeStream", "aclrtSynchronizeStreamWithTimeout", "aclrtSynchronizeDevice",
    "cudaStreamSynchronize", "cudaDeviceSynchronize",
})
# the source constructs that sync, by the op they show up as (hint-rules NPU108 anchors)
ITEM_CALLS = frozenset({"item", "tolist", "numpy", "cpu"})
SCALAR_BUILTINS = frozenset({"builtins.float", "builtins.int", "builtins.bool", "builtins.print"})
SYNC_CALLS = frozenset(fx.SYNCS)
NONZERO_CALLS = frozenset({"nonzero", "argwhere", "masked_select", "unique"})
OPTIMIZER_STEP = "Optimizer.step#"
DEVICE_SYNC = re.compile(r"SynchronizeDevice|DeviceSynchronize")  # what torch.npu/cuda.synchronize() records
COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_"})
# One-off start-up work a blocking op may hold (the first .to(device) creates the context and
# allocates: a 24.6 s cudaMalloc): no sync, and gone after the first step; not counted as blocked.
STARTUP_APIS = pq.ALLOC_APIS | frozenset({
    "cuInit", "cuCtxCreate", "cuDevicePrimaryCtxRetain", "cudaSetDevice", "cudaGetDeviceCount",
    "hipInit", "hipMalloc", "hipFree", "hipSetDevice", "aclInit", "aclrtSetDevice",
})


@dataclass(slots=True)
class _Group:
    ops: list[int] = field(default_factory=list)  # host op rows
    apis: list[int] = field(default_factory=list)  # host_events rows outside any framework op
    ns: int = 0  # blocked time inside the step windows (union per window), start-up calls left out
    inside: list[int] = field(default_factory=list)  # per op, then per api: its own time inside them
    startup: list[int] = field(default_factory=list)  # host_events rows of start-up calls inside its ops
    removed: bool = False  # a synchronize() between its anchored neighbours that the source no longer has


@declare("NPU108", "host-sync", backends=(Backend.ASCEND, Backend.CUDA))
class HostSync(Rule):
    """The host blocks on the device every step (.item(), .cpu(), synchronize(), nonzero).

    Reading a device value on the host (loss.item(), printing a tensor, .cpu(), nonzero) or calling
    synchronize() makes the host wait until the device has finished all queued work; the device then
    idles while the host prepares the next launches. Keeping values on the device and reading them
    every N steps removes the stall.
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        prof = ctx.profile
        h = prof.host_ops
        blocking, excluded = _blocking_ops(ctx)
        loose = _loose_apis(ctx, blocking)
        if not blocking and not loose:
            return
        dur = h["dur_ns"].to_numpy(np.int64) if len(h) else np.zeros(0, np.int64)
        start = h["start_ns"].to_numpy(np.int64) if len(h) else np.zeros(0, np.int64)
        ev_dur = prof.host_events["dur_ns"].to_numpy(np.int64)
        ev_start = prof.host_events["start_ns"].to_numpy(np.int64)
        groups: dict[tuple, _Group] = defaultdict(_Group)
        anchors: dict[tuple, tuple[SourceIndex, CallSite, Confidence] | None] = {}
        names = pq.strs(h["name"]) if len(h) else np.zeros(0, object)
        for r in blocking:
            found = _anchor_op(ctx, r)
            key = (found[1].span,) if found else ("op", str(names[r]))
            groups[key].ops.append(r)
            anchors.setdefault(key, found)
        api_names = pq.strs(prof.host_events["name"])
        between = _Neighbours(ctx) if loose else None
        for e in loose:
            found = between.anchor(e) if between is not None else None
            gone = found is None and between is not None and e in between.removed
            key = (found[1].span,) if found else ("removed" if gone else "api", str(api_names[e]))
            groups[key].apis.append(e)
            groups[key].removed = gone
            anchors.setdefault(key, found)
        windows = step_windows.windows(prof)
        startup = _startup_calls(prof)
        for g in groups.values():
            s = np.concatenate([start[g.ops], ev_start[g.apis]])
            e = s + np.concatenate([dur[g.ops], ev_dur[g.apis]])
            held = [_held(prof, startup, int(r)) for r in g.ops] + [np.zeros(0, np.int64)] * len(g.apis)
            g.startup = sorted({int(x) for rows in held for x in rows})
            off_s, off_e = ev_start[g.startup], ev_start[g.startup] + ev_dur[g.startup]
            g.ns = int(step_windows.covered_per_step(s, e, windows).sum()
                       - step_windows.covered_per_step(off_s, off_e, windows).sum())
            g.inside = [int(step_windows.covered_per_step(s[i : i + 1], e[i : i + 1], windows).sum()
                            - step_windows.covered_per_step(ev_start[held[i]], ev_start[held[i]] + ev_dur[held[i]],
                                                            windows).sum())
                        for i in range(len(s))]
        excluded_ns = int(dur[excluded].sum()) if len(excluded) else 0
        for key, g in groups.items():
            yield self._finding(ctx, g, anchors[key], names, api_names, len(excluded), excluded_ns)

    def _finding(self, ctx: RuleContext, g: _Group, anchor, names, api_names, n_excluded: int, excluded_ns: int) -> Finding:
        prof = ctx.profile
        steps = ctx.num_steps
        labels = [str(names[r]) for r in g.ops] + [str(api_names[e]) for e in g.apis]
        items = list(zip(labels, g.inside))
        longest = max(items, key=lambda t: t[1])
        count = len(items)
        device = "GPU" if ctx.backend is Backend.CUDA else "NPU"
        if anchor is not None:
            index, call, conf = anchor
            short = call.text if len(call.text) <= 40 else f"{call.name}()"
        else:
            index = call = None
            conf = Confidence.MODULE if g.ops else Confidence.INFERRED
            short = longest[0]
        fix_text, kind = _advice(call, longest[0])
        message = ctx.message(
            short, total_ns=float(g.ns), events=count, unit=Unit.SYNC,
            diagnosis=f"host blocked, waiting for the {device}", fix=fix_text, wall=True,
            show_share=False,  # blocked time is no share of the step: removing the sync saves at most the device's idle after it
        )
        by_name: dict[str, list[int]] = defaultdict(list)
        for n, d in items:
            by_name[n].append(d)
        evidence = {
            "backend": ctx.backend,
            "syncs": [{"op": n, "count": len(v), "total_us": round(sum(v) / NS_PER_US, 3)} for n, v in by_name.items()],
            "syncs_per_step": count / steps,
            "host_us_per_step": round(g.ns / steps / NS_PER_US, 3),
            "longest": {"op": longest[0], "us": round(longest[1] / NS_PER_US, 3),
                        "share_of_wall_step": ctx.share(longest[1], wall=True)},
            "wall_step_us": round(ctx.wall_step_time_ns / NS_PER_US, 3),
            "in_optimizer_step": {"count": n_excluded, "total_us": round(excluded_ns / NS_PER_US, 3), "rule": "NPU220"},
            "startup_left_out": {"count": len(g.startup), "total_us": round(
                int(prof.host_events["dur_ns"].to_numpy(np.int64)[g.startup].sum()) / NS_PER_US, 3)},
            "construct": kind,
            "debug_mode": "torch.npu.set_sync_debug_mode(\"warn\")" if device == "NPU" else "torch.cuda.set_sync_debug_mode(\"warn\")",
        }
        effect = _syncs_removed(ctx, g)
        if call is None:
            f = ctx.finding(self, span=None, message=message, total_ns=float(g.ns), wall=True, evidence=evidence,
                            confidence=conf, effect=effect)
            return as_fixed(f, ctx, fix_id(fx.remove_synchronize)) if g.removed else f
        fixes = sq.fixes(
            ctx,
            (fx.defer_loss_item, call.span, index.path, {}),
            (fx.remove_synchronize, call.span, index.path, {}),
        )
        return ctx.finding(self, span=call.span, message=message, total_ns=float(g.ns), wall=True, evidence=evidence,
                           confidence=conf, fixes=fixes, effect=effect)


def _syncs_removed(ctx: RuleContext, g: _Group) -> Effect:
    """The group's blocking runtime calls (those of its ops, on their thread and inside them, and its
    loose sync APIs) no longer wait for the device: the host runs ahead."""
    prof = ctx.profile
    ev, h = prof.host_events, prof.host_ops
    names = pq.strs(ev["name"])
    blocking = np.array([SYNC_CALL.search(str(n)) is not None for n in names], dtype=bool)
    rows = set(int(e) for e in g.apis if blocking[e])
    if g.ops and blocking.any():
        e_start = ev["start_ns"].to_numpy(np.int64)
        e_end = e_start + ev["dur_ns"].to_numpy(np.int64)
        # the thread by its tid alone: torch_npu records the CANN layer under a pid of its own
        e_tid = ev["tid"].to_numpy(np.int64)
        h_start = h["start_ns"].to_numpy(np.int64)
        h_end = h_start + h["dur_ns"].to_numpy(np.int64)
        h_tid = h["tid"].to_numpy(np.int64)
        cand = np.flatnonzero(blocking)
        for r in g.ops:
            inside = (e_tid[cand] == h_tid[r]) & (e_start[cand] >= h_start[r]) & (e_end[cand] <= h_end[r])
            rows.update(int(e) for e in cand[inside])
    if not rows:
        return Effect(unknown="unknown: the profile records no runtime call for this sync (no CANN/CUDA API events)")
    return Effect((Change(Target.SYNC_CALLS, tuple(sorted(rows)), 0.0, best=0.0, worst=0.0),),
                  basis="its sync calls removed: the host runs ahead of the device")


def _startup_calls(prof) -> np.ndarray:
    """host_events rows of one-off start-up calls (context creation, allocation), by start."""
    names = pq.strs(prof.host_events["name"])
    rows = np.flatnonzero([str(n).removeprefix("AscendCL@") in STARTUP_APIS for n in names])
    return rows[np.argsort(prof.host_events["start_ns"].to_numpy(np.int64)[rows], kind="stable")]


def _held(prof, startup: np.ndarray, op: int) -> np.ndarray:
    """The start-up calls inside host op ``op``, on its thread (tid alone: torch_npu records the CANN
    layer under a pid of its own)."""
    if not len(startup):
        return startup
    ev, h = prof.host_events, prof.host_ops
    e_start = ev["start_ns"].to_numpy(np.int64)[startup]
    e_end = e_start + ev["dur_ns"].to_numpy(np.int64)[startup]
    h_start = int(h["start_ns"].iloc[op])
    h_end = h_start + int(h["dur_ns"].iloc[op])
    inside = (ev["tid"].to_numpy(np.int64)[startup] == int(h["tid"].iloc[op])) & (e_start >= h_start) & (e_end <= h_end)
    return startup[inside]


def _advice(call: CallSite | None, op: str) -> tuple[str, str]:
    if (call is not None and call.qualname in SYNC_CALLS) or "Synchronize" in op:
        return "Remove synchronize() from the loop unless it times something", "synchronize"
    if "nonzero" in op or (call is not None and call.name in NONZERO_CALLS):
        return "Use torch.where instead of nonzero or boolean indexing", "nonzero"
    if call is not None and call.name in ("cpu", "numpy", "tolist"):
        return "Keep the tensor on the device; copy it every N steps", "d2h copy"
    if call is not None and call.name in ("to", "cuda", "npu"):
        return "Pin memory in the DataLoader; copy with non_blocking=True", "h2d copy"
    if call is None and op in COPY_OPS:
        return "Pin memory and copy with non_blocking=True, or copy less often", "copy"
    return "Accumulate loss.detach(); call .item() every N steps", "item"


def _blocking_ops(ctx: RuleContext) -> tuple[list[int], np.ndarray]:
    """Outermost blocking framework ops in the steps (and those inside Optimizer.step, excluded)."""
    prof = ctx.profile
    h = prof.host_ops
    if not len(h):
        return [], np.zeros(0, np.int64)
    par = pq.parents(prof)
    scope = pq.host_scope_mask(prof)
    marked = pq.rows_named(prof, SYNC_OPS)
    # ops around a runtime sync (a D2H aten::to for .cpu()) block as well
    for _e, op in _api_owners(ctx):
        if op >= 0 and not scope[op]:
            marked[_outermost_framework(op, par, scope)] = True
    nested = pq.strict_ancestor(marked, par) >= 0
    rows = np.flatnonzero(marked & ~nested & pq.in_steps(prof, h["start_ns"].to_numpy(np.int64)))
    in_opt = _inside_optimizer_step(ctx)
    return [int(r) for r in rows if not in_opt[r]], rows[in_opt[rows]]


def _inside_optimizer_step(ctx: RuleContext) -> np.ndarray:
    prof = ctx.profile
    return pq.nearest_marked(pq.parents(prof), pq.rows_prefixed(prof, OPTIMIZER_STEP)) >= 0


def _outermost_framework(op: int, par: np.ndarray, scope: np.ndarray) -> int:
    while par[op] >= 0 and not scope[par[op]]:
        op = int(par[op])
    return op


def _api_owners(ctx: RuleContext) -> list[tuple[int, int]]:
    """(host_events row, innermost host op containing it on the same thread or -1) per sync API."""
    prof = ctx.profile
    ev = pq.api_events(prof, SYNC_APIS)
    if not len(ev):
        return []
    h = prof.host_ops
    out = []
    if not len(h):
        return [(int(i), -1) for i in ev.index]
    tid = h["tid"].to_numpy(np.int64)
    start = h["start_ns"].to_numpy(np.int64)
    end = start + h["dur_ns"].to_numpy(np.int64)
    par = pq.parents(prof)
    by_tid: dict[int, np.ndarray] = {}
    for t in np.unique(ev["tid"].to_numpy(np.int64)):
        rows = np.flatnonzero((tid == t) & (start >= 0))
        by_tid[int(t)] = rows[np.argsort(start[rows], kind="stable")]
    for i, t, s, d in zip(ev.index, ev["tid"].to_numpy(np.int64), ev["start_ns"].to_numpy(np.int64), ev["dur_ns"].to_numpy(np.int64)):
        rows = by_tid.get(int(t))
        owner = -1
        if rows is not None and len(rows):
            j = int(np.searchsorted(start[rows], s, side="right")) - 1
            op = int(rows[j]) if j >= 0 else -1
            while op >= 0 and not (start[op] <= s and s + d <= end[op]):
                op = int(par[op])
            owner = op
        out.append((int(i), owner))
    return out


def _loose_apis(ctx: RuleContext, blocking: list[int]) -> list[int]:
    """Sync API events outside any framework op (``torch.npu.synchronize()``), not in Optimizer.step."""
    prof = ctx.profile
    scope = pq.host_scope_mask(prof)
    in_opt = _inside_optimizer_step(ctx) if len(prof.host_ops) else np.zeros(0, bool)
    out = []
    for e, op in _api_owners(ctx):
        if op >= 0 and (not scope[op] or in_opt[op]):
            continue  # inside a framework op (counted with it) or inside the optimizer step (NPU220)
        out.append(e)
    return out


def _is_sync(c: CallSite) -> bool:
    return (c.name in ITEM_CALLS and bool(c.receiver)) or c.qualname in SCALAR_BUILTINS or c.qualname in SYNC_CALLS \
        or c.name in NONZERO_CALLS


def _sync_call(index: SourceIndex, line: int, function: str | None) -> CallSite | None:
    # innermost first: loss.item() before the print(...) around it
    return sq.call_on_line(index, line, _is_sync, function)


def _only_sync_line_in_training_loop(ctx: RuleContext) -> tuple[SourceIndex, CallSite] | None:
    """The sync call of the only statement of the workspace's training loops that can block the host
    (``.item()``, ``.cpu()``, ``float(t)``, ``synchronize()``, ``nonzero``), or None when there are
    none or several (two candidates: neither is picked)."""
    lines: dict[tuple[str, int], tuple[SourceIndex, CallSite]] = {}
    for index in sq.indexes(ctx):
        for loop in sq.training_loops(index):
            for i in loop.calls:
                c = index.calls[i]
                if _is_sync(c) and (index.path, c.span.line) not in lines:
                    inner = _sync_call(index, c.span.line, c.function)
                    lines[(index.path, c.span.line)] = (index, inner or c)
    return next(iter(lines.values())) if len(lines) == 1 else None


def _anchor_op(ctx: RuleContext, row: int) -> tuple[SourceIndex, CallSite, Confidence] | None:
    att = ctx.attribution
    site = att.site_of_op(row) if att is not None and row < len(att.op_site) else None
    if site is not None:
        index = sq.index_of(ctx, site.span.path)
        if index is not None:
            for line in range(site.span.line, site.span.end_line + 1):
                call = _sync_call(index, line, site.function)
                if call is not None and _inside(call.span, site.span):
                    return index, call, site.confidence
            call = sq.call_of_site(index, site.span)
            if call is not None:
                return index, call, site.confidence
    place = sq.op_place(ctx, row)
    if place is not None and not place.def_line:
        call = _sync_call(place.index, place.line, place.function)
        if call is not None:
            return place.index, call, place.confidence
    return None


class _Neighbours:
    """Anchors a sync API event that no framework op encloses (``torch.npu.synchronize()`` records
    only the runtime call): between the anchored ops just before and after it on its thread, the
    function body holds exactly one synchronize() call -> ``module`` confidence; else the only
    synchronize() inside a loop of the workspace -> ``inferred``."""

    def __init__(self, ctx: RuleContext) -> None:
        self.ctx = ctx
        self.removed: set[int] = set()  # events whose neighbours hold no synchronize() any more
        prof = ctx.profile
        h = prof.host_ops
        att = ctx.attribution
        self.by_tid: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        if att is None or not len(h):
            return
        ok = pq.outermost_ops(prof) & (np.asarray(att.op_site) >= 0) & (h["start_ns"].to_numpy(np.int64) >= 0)
        rows = np.flatnonzero(ok)
        tid = h["tid"].to_numpy(np.int64)[rows]
        start = h["start_ns"].to_numpy(np.int64)[rows]
        end = start + h["dur_ns"].to_numpy(np.int64)[rows]
        for t in np.unique(tid):
            sel = tid == t
            order = np.argsort(start[sel], kind="stable")
            self.by_tid[int(t)] = (rows[sel][order], start[sel][order], end[sel][order])

    def anchor(self, event: int) -> tuple[SourceIndex, CallSite, Confidence] | None:
        ctx = self.ctx
        ev = ctx.profile.host_events
        t, s = int(ev["tid"].iloc[event]), int(ev["start_ns"].iloc[event])
        e = s + int(ev["dur_ns"].iloc[event])
        found = self._between(t, s, e, event)
        if found is not None:
            return found
        if event in self.removed:
            return None  # the synchronize() was there when profiled and is gone: not another one
        if not len(ctx.profile.host_ops):
            # msprof CLI form: no framework op to stand between, only the runtime's stream sync; one
            # statement of the training loop can block the host -> that one, inferred
            only = _only_sync_line_in_training_loop(ctx)
            if only is not None:
                return only[0], only[1], Confidence.INFERRED
        hits = [(ix, c) for ix, c in sq.calls_where(ctx, lambda ix, c: c.qualname in SYNC_CALLS) if c.in_loop]
        if len(hits) == 1:
            return hits[0][0], hits[0][1], Confidence.INFERRED
        return None

    def _between(self, tid: int, s: int, e: int, event: int) -> tuple[SourceIndex, CallSite, Confidence] | None:
        got = self.by_tid.get(tid)
        att = self.ctx.attribution
        if got is None or att is None:
            return None
        rows, start, end = got
        i = int(np.searchsorted(end, s, side="right")) - 1  # last op ended before the event (ends ascend with starts here)
        j = int(np.searchsorted(start, e, side="left"))  # first op starting after it
        if i < 0 or j >= len(rows):
            return None
        before, after = att.site_of_op(int(rows[i])), att.site_of_op(int(rows[j]))
        if before is None or after is None or before.span.path != after.span.path:
            return None
        index = sq.index_of(self.ctx, before.span.path)
        if index is None:
            return None
        lo, hi = before.span.line, after.span.end_line
        calls = [c for c in index.calls if c.qualname in SYNC_CALLS and lo <= c.span.line <= hi
                 and c.function in (before.function, after.function)]
        if not calls and before.function == after.function and self._synchronize(event):
            self.removed.add(event)
        if len(calls) != 1:
            return None
        conf = Confidence.MODULE if min(before.confidence.rank, after.confidence.rank) >= Confidence.MODULE.rank else Confidence.INFERRED
        return index, calls[0], conf


    def _synchronize(self, event: int) -> bool:
        return DEVICE_SYNC.search(str(self.ctx.profile.host_events["name"].iloc[event])) is not None


def _inside(inner: Span, outer: Span) -> bool:
    return (outer.line, outer.col) <= (inner.line, inner.col) and (inner.end_line, inner.end_col) <= (outer.end_line, outer.end_col)
