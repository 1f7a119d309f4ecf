"""NPU202 operator-no-bound: kernels whose PipeUtilization counters show no busy pipe and whose
achieved throughput is well below what the same profile shows for the same work (the advisor's
"operator no bound" check, its AOE tuning candidates, narrowed to the ones tuning can speed up).

A kernel of at least ``noBoundMinUs`` whose bound verdict (``profile_query.kernel_bounds``, the
one NPU206 and the hover read) is no-bound keeps no pipe at its limit: its tiling leaves the core
waiting. Operator tuning (AOE) helps only where a better tiling exists, which the profile shows
when the same OpType with the same input dtypes at comparable size runs faster elsewhere: the
group's achieved rate (``profile_query.rate_vs_best``: FLOP/s of a GEMM, bytes/s otherwise) must
be under ``noBoundRatePercent`` of that best. Kernels without counter data (HCCL, AI_CPU, ``N/A``
rows) or without shapes (no rate) are skipped.
One finding per source site, with the bound class of every kernel name of that site in the
evidence and the exact ``aoe`` command line plus the tune-ops file listing the site's kernels.
The fix is advice: AOE runs outside the script, and ``torch_npu.npu.set_aoe`` dumps the graphs it
tunes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pandas as pd

from msprof_lsp.hints.context import RuleContext, Unit
from msprof_lsp.hints.finding import Finding
from msprof_lsp.hints.registry import Data, Rule, declare
from msprof_lsp.mapping.profile.model import Backend

from .. import profile_query as pq, source_query as sq


# pytorch_only: AOE tunes CANN's built-in ops from torch_npu.npu.set_aoe dumps, not a custom kernel
@declare("NPU202", "operator-no-bound",
         thresholds=("noBoundMinUs", "pipeBoundPercent", "noBoundRatePercent", "cubeMacBoundPercent", "cubeMte2BoundPercent",
                     "faMte2BoundPercent", "faPipeBoundPercent", "vectorPipeBoundPercent"),
         backends=(Backend.ASCEND,), pytorch_only=True, needs=(Data.KERNELS,))
class OperatorNoBound(Rule):
    """Kernels with no pipe busy above the bound threshold: AOE operator-tuning candidates.

    A kernel that keeps none of its pipes (cube, vector, scalar, memory transfer) busy most of its
    time is limited by its tiling or scheduling, not by the hardware: operator tuning (AOE) searches
    a better tiling for those shapes.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        k, bounds = pq.step_kernel_bounds(ctx, pq.BoundLimits.of(ctx.thresholds))
        if not bounds.verdicts:
            return
        vs_best = pq.rate_vs_best(k, bounds)
        limit = float(ctx.thresholds.no_bound_rate_percent) / 100
        slow = np.array([v.bound is pq.PipeBound.NONE and bool(r < limit) for v, r in zip(bounds.verdicts, vs_best)]
                        + [False], dtype=bool)  # index -1: rows of no group
        dur = k["dur_ns"].to_numpy(np.int64)
        sel = slow[bounds.group] & (dur >= float(ctx.thresholds.no_bound_min_us) * 1000)
        positions = np.flatnonzero(sel)
        if not len(positions):
            return
        ratios = pq.pipe_ratios(k)
        for g in sq.kernels_by_statement_in(ctx, k, positions):
            mine = g.positions
            yield self._finding(ctx, g, k.iloc[mine], ratios.iloc[mine], bounds, vs_best, bounds.group[mine])

    def _finding(self, ctx: RuleContext, g: sq.KernelGroup, sub: pd.DataFrame, ratios: pd.DataFrame,
                 bounds: pq.KernelBounds, vs_best: np.ndarray, groups: np.ndarray) -> Finding:
        total = int(sub["dur_ns"].sum())
        names = pq.strs(sub["name"])
        types = pq.kernel_types(sub)
        table = ratios.assign(name=names, type=types, dur_ns=sub["dur_ns"].to_numpy(np.int64), vs_best=vs_best[groups])
        by_name = table.groupby("name", sort=False).agg(
            type=("type", "first"), count=("dur_ns", "size"), total=("dur_ns", "sum"), longest=("dur_ns", "max"),
            vs_best=("vs_best", "min"), **{p: (p, "mean") for p in ratios.columns},
        ).sort_values("total", ascending=False)
        limit = float(ctx.thresholds.pipe_bound_percent) / 100
        worst = float(np.nanmin(vs_best[groups]))
        tune = [str(n) for n in by_name.index[:pq.TUNE_TOPK]]
        busiest = max(float(ratios.to_numpy().max()), 0.0)
        evidence = {
            "kernels": {
                str(n): {
                    "type": str(r["type"]), "count": int(r["count"]), "total_us": pq.format_ns_us(r["total"]),
                    "longest_us": pq.format_ns_us(r["longest"]),
                    "ratios": {p: round(float(r[p]), 3) for p in ratios.columns},
                    "bound": pq.PipeBound.NONE.value,
                    "rate_vs_best": round(float(r["vs_best"]), 3),
                }
                for n, r in by_name.head(8).iterrows()
            },
            "count": len(sub),
            "busiest_ratio": round(busiest, 3),
            "threshold_ratio": limit,
            "rate_vs_best": round(worst, 3),
            "threshold_rate_vs_best": float(ctx.thresholds.no_bound_rate_percent) / 100,
            "threshold_us": float(ctx.thresholds.no_bound_min_us),
            "aoe_command": pq.AOE_COMMAND,
            "tune_ops_file": pq.TUNE_OPS_FILE,
            "tune_ops": json.dumps({"tune_ops_name": tune}),
            "dump": f'torch_npu.npu.set_aoe("{pq.AOE_DUMP}") before the model runs',
        }
        states = {s.lower() for s in pq.strs(sub["op_state"]) if s}
        if states == {"dynamic"}:
            # AOE tunes the shapes it sees in the dump; dynamic-shape ops recompile per shape.
            evidence["op_state"] = "dynamic"
        msg = ctx.message(
            "Operator no-bound",
            total_ns=total,
            events=len(sub),
            unit=Unit.KERNEL,
            qualifier=f"busiest pipe {busiest:.0%}, {worst:.0%} of the rate the same op reaches elsewhere",
            diagnosis=f"{', '.join(dict.fromkeys(str(t) for t in by_name['type']))} keep no pipe busy: tiling-bound",
            fix=f"Tune these ops with AOE: {pq.AOE_COMMAND}",
        )
        return ctx.finding(self, span=g.span, message=msg, total_ns=total, confidence=g.confidence, evidence=evidence)
