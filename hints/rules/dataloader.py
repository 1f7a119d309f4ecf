"""NPU104 dataloader-input (docs/rules/NPU104.md).

Evidence: the per-step time of the DataLoader fetch scopes (``enumerate(DataLoader)#_Single
ProcessDataLoaderIter.__next__`` / ``..._MultiProcessingDataLoaderIter.__next__``; advisor:
any event whose name contains "dataloader"), against ``dataloaderMaxUs`` and, as a share of the
wall-clock step (the fetch runs before the step's first device task, outside the device's
Computing + Communication + Free), ``dataloaderMaxPercent``; host-to-device copies
(``MEMCPY_ASYNC`` tasks, Kineto ``Memcpy HtoD``) as a share of the step against ``h2dMaxPercent``.

Anchor: with a call stack the ``for ... in loader`` line the fetch ran for, related information
at the ``DataLoader(...)`` construction; without one, the construction when it is the only one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

from msprof_lsp.mapping.profile.linking import self_ns
from msprof_lsp.mapping.profile.model import Backend, Profile
from msprof_lsp.mapping.profile.timemodel import work_mask
from msprof_lsp.mapping.source.source_index import CallSite, SourceIndex
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.units import NS_PER_US

from ..context import RuleContext, Unit
from ..finding import Change, Effect, Finding, Related, Target
from ..fixes import dataloader as fx
from ..registry import Rule, declare
from .. import profile_query as pq, source_query as sq

DATALOADER = re.compile(r"dataloader", re.I)
MEMCPY_H2D = re.compile(r"^MEMCPY_ASYNC$|Memcpy HtoD", re.I)


@declare("NPU104", "dataloader-input",
         thresholds=("dataloaderMaxUs", "dataloaderMaxPercent", "h2dMaxPercent", "dataloaderWorkers"))
class DataloaderInput(Rule):
    """The input pipeline (DataLoader fetch, host-to-device copies) holds up each step.

    A single-process DataLoader loads and collates every batch on the training thread while the
    device waits; unpinned host memory makes the copy to the device synchronous. Worker processes
    prefetch batches in parallel, and pinned memory with non_blocking copies overlaps the transfer
    with compute.
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        prof = ctx.profile
        h = prof.host_ops
        steps = ctx.num_steps
        if not len(h) and (inferred := self._inferred_wait(ctx)) is not None:
            yield inferred  # no host data at all (msprof CLI): the wait is read off the device
            return
        rows = fetch_scopes(prof)
        dl_ns = float(h["dur_ns"].to_numpy(np.int64)[rows].sum()) if len(rows) else 0.0
        dl_per = dl_ns / steps
        dl_share = ctx.share(dl_per, wall=True)
        max_us = float(ctx.thresholds.dataloader_max_us)
        max_pct = float(ctx.thresholds.dataloader_max_percent)
        h2d_pct = float(ctx.thresholds.h2d_max_percent)
        h2d_rows, pageable = _h2d(ctx)
        h2d_ns = float(prof.kernels["dur_ns"].to_numpy(np.int64)[h2d_rows].sum()) if len(h2d_rows) else 0.0
        h2d_share = ctx.share(h2d_ns / steps)
        dl_hit = len(rows) > 0 and (dl_per >= max_us * NS_PER_US or dl_share * 100 >= max_pct)
        h2d_hit = h2d_share * 100 >= h2d_pct
        if not dl_hit and not h2d_hit:
            return
        names = sorted(set(pq.strs(h["name"])[rows].tolist())) if len(rows) else []
        multi = any("MultiProcessing" in n for n in names)
        evidence = {
            "backend": ctx.backend,
            "fetch_scopes": names,
            "fetches_per_step": len(rows) / steps,
            "dataloader_us_per_step": round(dl_per / NS_PER_US, 3),
            "dataloader_share_of_wall_step": dl_share,
            "wall_step_us": round(ctx.wall_step_time_ns / NS_PER_US, 3),
            "worker_processes": multi,
            "h2d_copies_per_step": len(h2d_rows) / steps,
            "h2d_us_per_step": round(h2d_ns / steps / NS_PER_US, 3),
            "h2d_share": h2d_share,
            "h2d_pageable": pageable,
            "thresholds": {"dataloaderMaxUs": max_us, "dataloaderMaxPercent": max_pct, "h2dMaxPercent": h2d_pct},
            "crossed": [t for t, hit in (("dataloader", dl_hit), ("h2d", h2d_hit)) if hit],
        }
        fix_text = "Use DataLoader workers, pinned memory and non-blocking copies"
        if dl_hit:
            qual = ["worker processes" if multi else "single process"]
            if h2d_hit:
                qual.append(f"H2D copies {h2d_share * 100:.1f}% of the device step")
            message = ctx.message(
                "DataLoader", total_ns=dl_ns, events=len(rows), unit=Unit.FETCH,
                qualifier=", ".join(qual), diagnosis=f"the {_waiter(ctx)} waits for the next batch", fix=fix_text, wall=True,
            )
            total, wall = dl_ns, True
            effect = _fetch_removed(ctx, rows)
        else:
            message = ctx.message(
                "H2D copies", total_ns=h2d_ns, events=len(h2d_rows), unit=Unit.COPY,
                qualifier="pageable memory" if pageable else "", diagnosis="input transfers are synchronous",
                fix="Pin memory in the DataLoader and copy with non_blocking=True",
            )
            total, wall = h2d_ns, False
            effect = Effect(unknown="A/B test: how much of a pinned, non-blocking copy overlaps compute is not in "
                                    "the profile")
        yield self._anchored(ctx, rows, message, total, wall, evidence, effect)

    def _inferred_wait(self, ctx: RuleContext) -> Finding | None:
        """A profile without host data (msprof CLI): the device's idle before each step's first task
        is the wait for the next batch when the workspace has one DataLoader and one loop over it;
        anchored on that loop's header, inferred (nothing names the fetch)."""
        per = _lead_idle_ns(ctx)
        built = _one_loader(ctx)
        if per is None or built is None or built[2] is None:
            return None
        index, call, loop_span = built
        share = ctx.share(per, wall=True)
        max_us, max_pct = float(ctx.thresholds.dataloader_max_us), float(ctx.thresholds.dataloader_max_percent)
        if per < max_us * NS_PER_US and share * 100 < max_pct:
            return None
        total = per * ctx.num_steps
        message = ctx.message(
            "Data wait", total_ns=total, qualifier="inferred: device idle before each step's first task, no host data",
            diagnosis=f"the {_waiter(ctx)} waits between iterations, as for the next batch",
            fix="Use DataLoader workers, pinned memory and non-blocking copies", wall=True)
        evidence = {
            "backend": ctx.backend, "inferred_from": "device idle before each step's first task (median over steps)",
            "idle_us_per_step": round(per / NS_PER_US, 3), "idle_share_of_wall_step": share,
            "wall_step_us": round(ctx.wall_step_time_ns / NS_PER_US, 3),
            "thresholds": {"dataloaderMaxUs": max_us, "dataloaderMaxPercent": max_pct}, "crossed": ["dataloader"],
        }
        workers = ctx.thresholds.dataloader_workers
        fixes = sq.fixes(ctx, (fx.tune_dataloader, call.span, index.path, {"workers": workers}),
                         (fx.non_blocking_copies, loop_span, index.path, {}))
        related = [Related(call.span, f"the DataLoader is built here: {sq.text(index, call.span)}")]
        effect = Effect(unknown="A/B test: without host data the profile does not say how much of the idle is the "
                                "fetch itself")
        return ctx.finding(self, span=loop_span, message=message, total_ns=total, wall=True, evidence=evidence,
                           confidence=Confidence.INFERRED, related=related, fixes=fixes, effect=effect)

    def _anchored(self, ctx: RuleContext, rows: np.ndarray, message: str, total: float, wall: bool, evidence: dict,
                  effect: Effect) -> Finding:
        workers = ctx.thresholds.dataloader_workers
        # a profile recorded with worker processes already has the workers fix: offering it again
        # would also read as "fixed in the source since this profile was recorded", which is false
        recorded_with_workers = bool(evidence["worker_processes"])

        def tune(span: Span, path: str) -> list[tuple]:
            return [] if recorded_with_workers else [(fx.tune_dataloader, span, path, {"workers": workers})]
        for r in rows[:8]:
            place = sq.op_place(ctx, int(r))
            if place is None:
                continue
            found = _loop_of(place)
            if found is None:
                continue
            loop_span, ctor = found
            index = place.index
            ctor_path = index.path
            if ctor is None:
                # the loop's loader is built elsewhere (a parameter, another file): the one
                # construction of the workspace is it, as in the no-stack form below
                built = _constructions(ctx)
                if len(built) == 1:
                    ctor_path, ctor = built[0][0].path, built[0][1].span
            related = [Related(ctor, f"the DataLoader is built here: {sq.text(index, ctor)}")] if ctor and ctor_path == index.path else []
            cands = []
            if ctor is not None and not recorded_with_workers:
                cands.append((fx.tune_dataloader, ctor, ctor_path, {"workers": workers}))
            cands.append((fx.non_blocking_copies, loop_span, index.path, {}))
            return ctx.finding(self, span=loop_span, message=message, total_ns=total, wall=wall, evidence=evidence,
                               confidence=place.confidence, related=related, fixes=sq.fixes(ctx, *cands), effect=effect)
        built = _one_loader(ctx)
        if built is not None:
            index, call, loop_span = built
            if loop_span is not None:
                fixes = sq.fixes(ctx, *tune(call.span, index.path), (fx.non_blocking_copies, loop_span, index.path, {}))
                related = [Related(call.span, f"the DataLoader is built here: {sq.text(index, call.span)}")]
                return ctx.finding(self, span=loop_span, message=message, total_ns=total, wall=wall,
                                   evidence=evidence, confidence=Confidence.INFERRED, related=related, fixes=fixes,
                                   effect=effect)
            fixes = sq.fixes(ctx, *tune(call.span, index.path), (fx.non_blocking_copies, call.span, index.path, {}))
            return ctx.finding(self, span=call.span, message=message, total_ns=total, wall=wall, evidence=evidence,
                               confidence=Confidence.INFERRED, fixes=fixes, effect=effect)
        conf = Confidence.MODULE if len(rows) else Confidence.INFERRED
        return ctx.finding(self, span=None, message=message, total_ns=total, wall=wall, evidence=evidence, confidence=conf,
                           effect=effect)


RECEIVE_US_PER_TENSOR = 500.0
"""The training thread's time to receive one tensor of a batch from a worker process where nothing
pins it (a CPU run: ``pin_memory`` has no accelerator, so no pin thread takes the batch): torch
shares each tensor's storage through a file descriptor, one connection to the worker each
(``rebuild_storage_fd``). Read off the CPU loop's re-recordings after the fix: 0.9-1.4 ms per
``__next__`` for a 2-tensor batch (docs/savings.md "The CPU loop"). A constant of one machine, so
it moves only the estimate: the high end keeps the whole fetch removed."""


def _fetch_removed(ctx: RuleContext, rows: np.ndarray) -> Effect:
    """The fetch scopes' host time, their collate ops' included, leaves the training thread (workers
    prefetch the batch); the low end keeps half of it (a worker that cannot keep up). Nothing else
    leaves it: re-recorded with workers, the CNN loop's step keeps every other host op (docs/savings.md
    "The CPU loop"). On a CPU run the fetch then receives the batch's tensors from the worker
    (``RECEIVE_US_PER_TENSOR`` each, the collate's tensors counted in the profile)."""
    inside = pq.descendants(ctx.profile, rows)
    tensors = _collated(ctx.profile, rows, inside) if ctx.backend is Backend.CPU else None
    inside[rows] = False
    removed = Change(Target.HOST_OPS, tuple(int(r) for r in np.flatnonzero(inside)), 0.0, best=0.0, worst=0.5)
    if not tensors:
        roots = (Change(Target.HOST_OPS, tuple(int(r) for r in rows), 0.0, best=0.0, worst=0.5),)
        return Effect((removed, *roots), basis="the DataLoader fetch's host time removed from the training thread "
                                                "(low end: halved)")
    receive_ns = tensors * RECEIVE_US_PER_TENSOR * NS_PER_US
    own = self_ns(ctx.profile.host_ops["dur_ns"].to_numpy(np.int64), pq.parents(ctx.profile))
    roots = tuple(Change(Target.HOST_OPS, (int(r),), f, best=0.0, worst=max(0.5, f))
                  for r in rows for f in [receive_ns / own[r] if own[r] > 0 else 0.0])
    return Effect((removed, *roots),
                  basis=f"the DataLoader fetch's host time removed from the training thread, which receives the "
                        f"batch's {tensors} tensor{'s' if tensors != 1 else ''} from a worker instead "
                        f"({RECEIVE_US_PER_TENSOR:.0f} µs each, no pinning on a CPU run; low end: halved)")


def _collated(prof: Profile, rows: np.ndarray, inside: np.ndarray) -> int:
    """Tensors per batch: the mean count, rounded, of ``aten::stack`` ops under each fetch scope that
    no other ``aten::`` op and no ``__getitem__`` encloses (default_collate stacks each field once;
    the dataset's own stacks are inside ``__getitem__`` where the profile has Python frames). 0:
    none. ``inside``: the fetch scopes' subtrees (``pq.descendants`` of ``rows``)."""
    if not len(rows):
        return 0
    names = pq.strs(prof.host_ops["name"])
    par = pq.parents(prof)
    root = np.zeros(len(names), dtype=bool)
    root[rows] = True
    count = 0
    for r in np.flatnonzero((names == "aten::stack") & inside):
        up = int(par[r])
        while up >= 0 and not root[up] and not names[up].startswith("aten::") and "__getitem__" not in names[up]:
            up = int(par[up])
        count += up >= 0 and bool(root[up])
    return round(count / len(rows))


def fetch_scopes(prof: Profile) -> np.ndarray:
    """The outermost DataLoader fetch scopes (host_ops rows) that start inside a step: one per
    batch the training thread fetched."""
    h = prof.host_ops
    if not len(h):
        return np.zeros(0, np.int64)
    is_dl = pq.mask(h["name"], DATALOADER.search)
    par = pq.parents(prof)
    nested = np.zeros(len(h), dtype=bool)
    has = par >= 0
    nested[has] = is_dl[par[has]]
    return np.flatnonzero(is_dl & ~nested & pq.in_steps(prof, h["start_ns"].to_numpy(np.int64)))


def _waiter(ctx: RuleContext) -> str:
    return {"ascend": "NPU", "cuda": "GPU"}.get(ctx.backend, "step")


def _h2d(ctx: RuleContext) -> tuple[np.ndarray, bool]:
    prof = ctx.profile
    k = prof.kernels
    if not len(k):
        return np.zeros(0, np.int64), False
    sel = pq.mask(k["name"], MEMCPY_H2D.search) & pq.kernels_in_steps_mask(prof)
    if ctx.backend != Backend.ASCEND.value:
        sel &= pq.mask(k["name"], lambda n: "HtoD" in n)
    rows = np.flatnonzero(sel)
    pageable = bool(pq.mask(k["name"], pq.PAGEABLE.search)[rows].any()) if len(rows) else False
    return rows, pageable


def _loop_of(place: sq.Place) -> tuple[Span, Span | None] | None:
    """The ``for`` loop over a DataLoader the frame belongs to, and the loader's construction."""
    index = place.index
    loops = sq.loops_iterating_loader(index, place.function)
    if not loops:
        return None
    on_line = [(lp, b) for lp, b in loops if lp.header.line <= place.line <= lp.header.end_line]
    inside = [(lp, b) for lp, b in loops if lp.span.line <= place.line <= lp.span.end_line]
    for cands in (on_line, inside[-1:], loops if len(loops) == 1 else []):
        if cands:
            lp, b = cands[0]
            return lp.header, (b.span if b is not None else None)
    return None


def _one_loader(ctx: RuleContext) -> tuple[SourceIndex, CallSite, Span | None] | None:
    """The workspace's one ``DataLoader(...)`` construction and the one ``for`` loop over it (its
    header; None when there is not exactly one); None when there is not exactly one construction."""
    built = _constructions(ctx)
    if len(built) != 1:
        return None
    index, call = built[0]
    # no stack: the gaps are between iterations of the one loop over that loader
    loops = [lp for lp, b in sq.loops_iterating_loader(index, call.function)
             if b is not None and call.stmt.line <= b.span.line <= call.stmt.end_line]
    return index, call, (loops[0].header if len(loops) == 1 else None)


def _lead_idle_ns(ctx: RuleContext) -> float | None:
    """Median over the steps of the device's idle from the step's start to its first task (compute
    or copy); None without steps. Inferred step windows start where the previous iteration's last
    task ended (mapping/profile/step_infer), so this is the wait between iterations: data loading,
    the host work before the first launch."""
    prof = ctx.profile
    k = prof.kernels
    if not prof.steps or not len(k):
        return None
    start = k["start_ns"].to_numpy(np.int64)[work_mask(k)]
    leads = []
    for s in prof.steps:
        inside = start[(start >= s.start_ns) & (start < s.end_ns)]
        if len(inside):
            leads.append(int(inside.min()) - s.start_ns)
    return float(np.median(leads)) if leads else None


def _constructions(ctx: RuleContext) -> list[tuple[SourceIndex, CallSite]]:
    def is_loader(ix: SourceIndex, c: CallSite) -> bool:
        return c.qualname in fx.DATALOADER or (not c.qualname and c.callee.rsplit(".", 1)[-1] == "DataLoader")

    return sq.calls_where(ctx, is_loader)
