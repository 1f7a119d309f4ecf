"""NPU230 gc-pauses: Python garbage-collection pauses stall the training loop (the
advisor's ``gc_analysis`` and ``conjectured_analysis``).

* Recorded: ``GC`` events (trace_view.json process ``Python GC``, DB ``GC_RECORD``; captured only
  with ``gc_detect_threshold``) of at least ``gcMinUs``.
* Conjectured, when no GC events were recorded and the capture did not ask for them: device
  ``Free`` slices longer than 200 ms during which the host issued at most one ``AscendCL@`` call
  per 10 ms and spent at most 1 % of the gap in them -- the host was busy with something that is
  neither Python ops nor CANN calls. Needs the CANN layer (Level1); reported at most as
  Information.

Anchored on the training loop's header; the fix puts ``gc.freeze()`` before it. Kineto traces have
no GC events: the rule does not run there.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from msprof_lsp.hints.context import RuleContext, Unit
from msprof_lsp.hints.finding import Finding, Severity
from msprof_lsp.hints.fixes import gc_freeze, make_offer
from msprof_lsp.hints.registry import Rule, declare
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.units import format_us
from msprof_lsp.mapping.profile.model import Backend

from .. import profile_query as pq, source_query as sq

FREE_MIN_NS = 200_000 * 1000  # advisor FREE_DURATION_FOR_GC_ANALYSIS default, 200000 µs
ACL_PER_10MS = 1  # at most one AscendCL call per 10 ms of the gap
ACL_MAX_SHARE = 0.01  # ... taking at most 1 % of it
LEVEL1_NEED = "AscendCL@ API events (GC conjectured from long device-idle gaps)"


@declare("NPU230", "gc-pauses", thresholds=("gcMinUs",), backends=(Backend.ASCEND,), level1=LEVEL1_NEED)
class GcPauses(Rule):
    """Python garbage-collection pauses stall the training loop.

    A full collection walks every tracked Python object -- with a large model and dataset index that
    takes milliseconds, during which no op is dispatched and the device idles. gc.freeze() after
    setup moves those objects out of the collector's scans.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        he = ctx.profile.host_events
        gc = np.zeros(len(he), dtype=bool)
        if len(he):
            gc = pq.mask(he["cat"], lambda c: c.lower() == "gc") & pq.in_steps(ctx.profile, he["start_ns"].to_numpy(np.int64))
        if gc.any():
            yield from self._recorded(ctx, he[gc])
            return
        if ctx.profile.meta.gc_detect_threshold is not None:
            return  # GC events were asked for and none came: no pause reached the threshold
        yield from self._conjectured(ctx)

    def _anchor(self, ctx: RuleContext, evidence: dict):  # noqa: ANN202
        span, conf = sq.training_loop(ctx)
        if span is None:
            conf = Confidence.MODULE  # profile-level: nothing was inferred about a line
        fixes = []
        if span is not None:
            fixes.append(make_offer(gc_freeze.freeze_before_loop, span.path, span))
        return span, conf, fixes

    def _recorded(self, ctx: RuleContext, events) -> Iterator[Finding]:  # noqa: ANN001
        dur = events["dur_ns"].to_numpy(np.int64)
        min_ns = float(ctx.thresholds.gc_min_us) * 1000
        long = dur >= min_ns
        if not long.any():
            return
        total = int(dur[long].sum())
        evidence = {
            "source": "GC events",
            "pauses": int(long.sum()),
            "pauses_per_step": round(int(long.sum()) / ctx.num_steps, 1),
            "longest_us": pq.format_ns_us(int(dur.max())),
            "total_us": pq.format_ns_us(total),
            "below_threshold": int((~long).sum()),
            "threshold_us": float(ctx.thresholds.gc_min_us),
            "gc_detect_threshold_ms": ctx.profile.meta.gc_detect_threshold,
        }
        span, conf, fixes = self._anchor(ctx, evidence)
        msg = ctx.message(
            "GC pauses",
            total_ns=total,
            events=int(long.sum()),
            unit=Unit.PAUSE,
            qualifier=f"longest {format_us(int(dur.max()) / 1000)}",
            diagnosis="Python's collector stops the training loop",
            fix="Call gc.freeze() after setup, before the loop",
            wall=True,  # a host pause: a share of the wall-clock step
        )
        yield ctx.finding(self, span=span, message=msg, total_ns=total, confidence=conf, evidence=evidence, fixes=fixes, wall=True)

    def _conjectured(self, ctx: RuleContext) -> Iterator[Finding]:
        ov = ctx.profile.overlap
        if not len(ov):
            return
        free = (pq.strs(ov["lane"]) == "Free") & (ov["dur_ns"].to_numpy(np.int64) > FREE_MIN_NS)
        free &= pq.in_steps(ctx.profile, ov["start_ns"].to_numpy(np.int64))
        if not free.any():
            return
        if ctx.needs_level1(self):
            return
        he = ctx.profile.host_events
        acl = pq.mask(he["name"], lambda n: n.startswith("AscendCL@")) if len(he) else np.zeros(0, dtype=bool)
        a_start = he["start_ns"].to_numpy(np.int64)[acl] if len(he) else np.zeros(0, dtype=np.int64)
        a_dur = he["dur_ns"].to_numpy(np.int64)[acl] if len(he) else np.zeros(0, dtype=np.int64)
        order = np.argsort(a_start)
        a_start, a_dur = a_start[order], a_dur[order]
        gaps = []
        for s, d in zip(ov["start_ns"].to_numpy(np.int64)[free], ov["dur_ns"].to_numpy(np.int64)[free]):
            i, j = np.searchsorted(a_start, s), np.searchsorted(a_start, s + d)
            n_acl, t_acl = int(j - i), int(a_dur[i:j].sum())
            if n_acl <= ACL_PER_10MS * d / 10_000_000 and t_acl <= ACL_MAX_SHARE * d:
                gaps.append((int(s), int(d), n_acl, t_acl))
        if not gaps:
            return
        total = sum(d for _, d, _, _ in gaps)
        evidence = {
            "source": "conjectured from device-idle gaps (no GC events recorded)",
            "gaps": len(gaps),
            "longest_gap_us": pq.format_ns_us(max(d for _, d, _, _ in gaps)),
            "acl_calls_in_gaps": sum(n for _, _, n, _ in gaps),
            "free_min_us": FREE_MIN_NS / 1000,
            "capture": "pass experimental_config=_ExperimentalConfig(gc_detect_threshold=<ms>) to record GC events",
        }
        span, conf, fixes = self._anchor(ctx, evidence)
        msg = ctx.message(
            "Possible GC pauses",
            total_ns=total,
            events=len(gaps),
            unit=Unit.IDLE_GAP,
            qualifier="conjectured, no GC events recorded",
            diagnosis="the host issued almost no CANN calls while the device idled",
            fix="Record with gc_detect_threshold; try gc.freeze() before the loop",
        )
        yield ctx.finding(self, span=span, message=msg, total_ns=total, confidence=conf, evidence=evidence,
                          fixes=fixes, severity=Severity.INFO)
