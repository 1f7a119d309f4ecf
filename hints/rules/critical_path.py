"""NPU251 critical-path-bound (docs/rules/NPU251.md): a line whose own time lies mostly on the
step's critical path, and what binds that time is the host, a wait or bandwidth.

The figures are the critical path's per line (``mapping.source.critical_path``, docs/numbers.md
"Critical path"): ``path_share`` (its device tasks' and host ops' own time on the path, 0..1)
against ``criticalPathMinPercent``, and the path time charged to it by kind -- host (its ops' self
time, its tasks' launch delays), sync (its sync calls, the host's relaunch after them, its tasks'
event waits), bandwidth (its copies and collectives), compute. The largest charge names the
bound; compute-bound lines are the other rules' business. The cost is that charge per step, as a
share of the wall step. The advice is the matching rule's (NPU105, NPU108, NPU205, NPU102),
referenced by code, not repeated.
"""

from __future__ import annotations

from collections.abc import Iterator

from msprof_lsp.mapping.source.critical_path import Bound, LinePath
from msprof_lsp.mapping.spans import Span
from msprof_lsp.mapping.units import NS_PER_US

from ..context import RuleContext
from ..finding import Finding
from ..registry import Data, Rule, declare

# bound -> (the rule whose fix applies, the short fix); bandwidth splits into copies and collectives
ADVICE = {
    Bound.HOST: ("NPU105", "Fewer, larger kernels: compile or fuse the small ops (NPU105)"),
    Bound.SYNC: ("NPU108", "Keep values on the device; read them every N steps (NPU108)"),
    "copies": ("NPU205", "Batch the copies; pin_memory() and non_blocking=True (NPU205)"),
    "comm": ("NPU102", "Accumulate gradients with no_sync() to communicate less (NPU102)"),
}
DIAGNOSIS = {
    Bound.HOST: "the device waits for the host to launch this line's work",
    Bound.SYNC: "the host blocks here until the device is done (a sync)",
    "copies": "memory copies of this line sit on the critical path",
    "comm": "communication of this line sits on the critical path",
}


# path time is charged to lines through recorded stacks; on a stackless capture the lines come
# from anchoring by name and shape, too coarse to say which line is on the path
@declare("NPU251", "critical-path-bound", thresholds=("criticalPathMinPercent",),
         needs=(Data.ATTRIBUTION, Data.CALL_STACKS))
class CriticalPathBound(Rule):
    """A line mostly on the step's critical path is host-, sync- or bandwidth-bound.

    Time on the critical path is time the step cannot hide: shortening it shortens the step. When a
    line's work lies there and what holds it up is the host launching it, a synchronisation, or a
    copy or collective, the fix is the one for that cause, and it pays in full.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        cp = ctx.critical_path
        if cp.unavailable is not None or not cp.lines:
            return
        floor = ctx.thresholds.critical_path_min_percent / 100
        spans = _line_spans(ctx)
        for lp in cp.lines:
            bound = lp.bound
            if bound is None or bound is Bound.COMPUTE or lp.path_share < floor:
                continue
            span = spans.get((lp.path, lp.line))
            if span is None:
                continue
            yield self._finding(ctx, lp, bound, span, len(cp.steps), floor)

    def _finding(self, ctx: RuleContext, lp: LinePath, bound: Bound, span: Span, steps: int, floor: float) -> Finding:
        key: Bound | str = bound
        if bound is Bound.BANDWIDTH:
            key = "copies" if lp.copies_ns * 2 >= lp.charged[Bound.BANDWIDTH] else "comm"
        see, fix = ADVICE[key]
        cost = lp.charged[bound]  # per analysed step
        waits = [(name, ns) for name, ns in lp.waits]
        qualifier = f"{lp.path_share * 100:.0f}% of its time on the critical path"
        if waits:
            qualifier += f", waits: {waits[0][0]}"
        msg = ctx.message(f"Critical path, {bound.value}-bound", total_ns=cost * ctx.num_steps, wall=True,
                          qualifier=qualifier, diagnosis=DIAGNOSIS[key], fix=fix)
        evidence = {
            "bound": bound.value,
            "path_share": round(lp.path_share, 4),
            "threshold_percent": floor * 100,
            "on_path_us": round(lp.on_path_per_step_ns / NS_PER_US, 3),
            "host_on_path_us": round(lp.host_on_path_per_step_ns / NS_PER_US, 3),
            "own_us": round(lp.own_per_step_ns / NS_PER_US, 3),
            "charged_us": {b.value: round(v / NS_PER_US, 3) for b, v in lp.charged.items()},
            "waits": [{"name": name, "us": round(ns / NS_PER_US, 3)} for name, ns in waits],
            "steps_analysed": steps,
            "see": see,
        }
        return ctx.finding(self, span=span, message=msg, total_ns=cost * ctx.num_steps, wall=True, evidence=evidence)


def _line_spans(ctx: RuleContext) -> dict[tuple[str, int], Span]:
    """The span to anchor at for each attributed line: its hottest site's."""
    out: dict[tuple[str, int], Span] = {}
    assert ctx.attribution is not None
    for sh in ctx.attribution.heat.spans:  # most time first
        out.setdefault((sh.site.span.path, sh.site.span.line), sh.site.span)
    for site in ctx.attribution.sites:  # sites with host time only
        out.setdefault((site.span.path, site.span.line), site.span)
    return out
