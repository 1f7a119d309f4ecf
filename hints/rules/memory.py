"""NPU109 alloc-churn (docs/rules/NPU109.md).

Evidence (advisor ``memory``): the host time of the device allocator's runtime calls --
``AscendCL@aclMallocMemInner``, ``AscendCL@aclrtFreePhysical``, ``AscendCL@aclrtFree`` (Kineto
``cudaMalloc`` / ``cudaFree``) -- inside the profiled steps, at least ``allocMaxUs`` per capture.
These are CANN-layer events: at Level0 the rule skips and notice NPU901 names it. The usual cause
in user code is ``torch.npu.empty_cache()`` inside the training loop (found through the stack of
an ``empty_cache`` event, else by search); its deletion is the safe fix. The allocator setting
``PYTORCH_NPU_ALLOC_CONF=expandable_segments:True`` is NPU245's.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from msprof_lsp.mapping.source.source_index import CallSite, SourceIndex
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.units import NS_PER_US
from msprof_lsp.mapping.profile.model import Backend

from ..context import RuleContext, Unit
from ..finding import Finding, Related
from ..fixes import empty_cache as fx
from ..registry import Rule, declare
from .. import profile_query as pq, source_query as sq

LEVEL1_NEED = "AscendCL@aclMallocMemInner / aclrtFree events (CANN layer) to time the allocator"


@declare("NPU109", "alloc-churn", thresholds=("allocMaxUs",), backends=(Backend.ASCEND, Backend.CUDA),
         level1=LEVEL1_NEED)
class AllocChurn(Rule):
    """The device allocator frees and re-allocates memory every step (malloc/free API time).

    The caching allocator keeps freed blocks for reuse; empty_cache() hands them back to the driver,
    so the next step pays for fresh device allocations (and their synchronisation) again. Shapes
    that change every step cause the same churn. Removing empty_cache() from the loop keeps the
    blocks cached.
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if ctx.backend is Backend.ASCEND and ctx.needs_level1(self):
            return
        ev = pq.api_events(ctx.profile, pq.ALLOC_APIS)
        if not len(ev):
            return
        total = float(ev["dur_ns"].sum())
        limit = float(ctx.thresholds.alloc_max_us)
        if total < limit * NS_PER_US:
            return
        steps = ctx.num_steps
        counts = ev.groupby("api")["dur_ns"].agg(["size", "sum"])
        calls = _empty_cache_calls(ctx)
        fix_text = "Delete empty_cache() from the loop" if calls else "Set PYTORCH_NPU_ALLOC_CONF=expandable_segments:True (NPU245)"
        if ctx.backend is Backend.CUDA and not calls:
            fix_text = "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        message = ctx.message(
            "Allocator churn", total_ns=total, events=len(ev), unit=Unit.MALLOC_FREE, wall=True,
            diagnosis="device memory is freed and allocated again every step", fix=fix_text,
        )
        evidence = {
            "backend": ctx.backend,
            "apis": {str(a): {"count": int(r["size"]), "total_us": round(float(r["sum"]) / NS_PER_US, 3)}
                     for a, r in counts.iterrows()},
            "alloc_us_capture": round(total / NS_PER_US, 3),
            "alloc_us_per_step": round(total / steps / NS_PER_US, 3),
            "empty_cache_in_loop": len(calls),
            "thresholds": {"allocMaxUs": limit},
        }
        if not calls:
            yield ctx.finding(self, span=None, message=message, total_ns=total, evidence=evidence, wall=True,
                              confidence=Confidence.MODULE)
            return
        index, call, conf = calls[0]
        related = [Related(c.span, f"another empty_cache() in a loop: {sq.rel_line(ix, c.span)}") for ix, c, _ in calls[1:]]
        fixes = sq.fixes(ctx, (fx.remove_empty_cache, call.span, index.path, {}))
        yield ctx.finding(self, span=call.span, message=message, total_ns=total, evidence=evidence, wall=True,
                          confidence=conf, fixes=fixes, related=related)


def _empty_cache_calls(ctx: RuleContext) -> list[tuple[SourceIndex, CallSite, Confidence]]:
    """``empty_cache()`` calls inside loops: from the stacks of ``empty_cache`` ops first, else by search."""
    h = ctx.profile.host_ops
    out: list[tuple[SourceIndex, CallSite, Confidence]] = []
    seen = set()
    if len(h):
        rows = np.flatnonzero(pq.mask(h["name"], lambda n: "empty_cache" in n))
        for r in rows[:32]:
            place = sq.op_place(ctx, int(r))
            if place is None:
                continue
            call = sq.call_on_line(place.index, place.line, lambda c: c.name == "empty_cache")
            if call is not None and call.in_loop and call.span not in seen:
                seen.add(call.span)
                out.append((place.index, call, place.confidence))
    if out:
        return out
    for index, call in sq.calls_where(ctx, lambda ix, c: c.qualname in fx.EMPTY_CACHE and c.in_loop):
        out.append((index, call, Confidence.INFERRED))
    return out
