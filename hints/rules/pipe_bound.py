"""NPU206 kernel-bound and NPU209 block-dim.

NPU206 kernel-bound: the advisor's AI Core "bound" list -- Cube, FlashAttention, Vector and MIX
kernels whose PipeUtilization counters show a saturated compute or memory pipe.

The verdict is the query layer's one bound verdict (``profile_query.kernel_bounds``: per (class,
name, shapes, OpType, dtypes) group, each pipe's mean ratio against its own limit, never a sum of
pipes); this rule chooses which groups it judges, as the advisor's ``AICorePerformanceChecker``:

* Cube: MatMul types moving at least ``cubeMinBytes``; MIX (other ``MIX_AIC`` kernels) and
  FlashAttention all;
* Vector: OpTypes holding at least ``vectorMinPercent`` of the kernel time -- reported only when
  compute-bound: an elementwise or vector kernel is memory-bound by nature (it reads and writes
  each element once), so "memory-bound" says nothing there that fusing it away (NPU210-217) does
  not say better.

One finding per source statement the bound kernels map to; the fix is advice (what to change
depends on whether the pipe is a compute or a memory one).

NPU209 block-dim: kernels of at least ``blockDimMinUs`` whose block dim is not a multiple of the
core count (the advisor's ``BlockDimChecker``: AI_CORE kernels on the ``ai_core_num`` cube cores,
AI_VECTOR_CORE and MIX_AIC on the ``aiv_num`` vector cores where known; a MIX_AIC kernel whose mix
block dim fills the vector cores is fine). The core counts come from msprof's info.json; without
them the rule cannot judge and says nothing (its page lists where each format writes them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from msprof_lsp.hints.context import RuleContext, Unit
from msprof_lsp.hints.finding import Finding
from msprof_lsp.hints.registry import Data, Rule, declare
from msprof_lsp.hints.profile_query import AOE_COMMAND, BoundVerdict, PipeBound
from msprof_lsp.mapping.profile.shapes import io_bytes
from msprof_lsp.mapping.profile import timemodel
from msprof_lsp.mapping.profile.model import Backend
from msprof_lsp.mapping.profile.shapes import parse_shapes
from msprof_lsp.mapping.profile.timemodel import KernelClass

from .. import profile_query as pq, source_query as sq

# The advisor also checks a Vector OpType whose kernels last 1 s in all, whatever their share.
VECTOR_MIN_TOTAL_NS = 1_000_000_000
EVIDENCE_KERNELS = 8
JUDGED = frozenset({KernelClass.CUBE, KernelClass.MIX, KernelClass.FLASH_ATTENTION, KernelClass.VECTOR})
REPORTED = frozenset({PipeBound.COMPUTE, PipeBound.MEMORY})


@dataclass(frozen=True, slots=True)
class BoundGroup:
    """Kernels of one name and shapes, bound."""

    cls: KernelClass
    op_type: str
    name: str
    shapes: str
    rows: list[int]  # positions in the kernels-in-steps table
    means: dict[str, float]
    verdict: BoundVerdict


def _selected(ctx: RuleContext, k: pd.DataFrame) -> np.ndarray:
    """The kernels the advisor judges: big enough MatMuls, every MIX and FlashAttention kernel,
    Vector OpTypes that hold enough of the kernel time."""
    types = pq.kernel_types(k)
    dur = k["dur_ns"].to_numpy(np.int64)
    cls_arr = timemodel.kernel_class_values(k)
    # the advisor's total: every operator row of the kernel table (compute kernels and the
    # collectives themselves, not their transfer or wait tasks)
    counted = timemodel.is_class(k, timemodel.TaskClass.COMPUTE) | timemodel.collective_mask(k)
    total = int(dur[counted].sum())
    selected = np.isin(cls_arr, [KernelClass.FLASH_ATTENTION.value, KernelClass.MIX.value])
    vec = cls_arr == KernelClass.VECTOR.value
    if vec.any():
        per_type = pd.Series(dur[vec]).groupby(types[vec]).sum()
        keep = {t for t, ns in per_type.items()
                if (total and ns / total >= ctx.thresholds.vector_min_percent / 100) or ns >= VECTOR_MIN_TOTAL_NS}
        selected |= vec & np.isin(types, list(keep))
    cube = np.flatnonzero(cls_arr == KernelClass.CUBE.value)
    if len(cube):  # each distinct (shapes, dtypes) sized once
        rows, keys = timemodel.distinct_rows([k[c].iloc[cube] for c in ("input_shapes", "input_dtypes", "output_shapes",
                                                                          "output_dtypes")])
        big = [io_bytes(parse_shapes(ins), dts) + io_bytes(parse_shapes(outs), odts) >= ctx.thresholds.cube_min_bytes
               for ins, dts, outs, odts in keys]
        selected[cube] = np.asarray(big, dtype=bool)[rows]
    return selected


def bound_groups(ctx: RuleContext) -> list[BoundGroup]:
    """The bound (name, shapes) groups of the profiled steps' kernels (``pq.step_kernel_bounds``,
    positions in its table) this rule reports: compute- or memory-bound, judged, and not a Vector
    kernel bound by memory."""
    k, bounds = pq.step_kernel_bounds(ctx, pq.BoundLimits.of(ctx.thresholds))
    if not bounds.verdicts:
        return []
    selected = _selected(ctx, k)
    names = pq.strs(k["name"])
    ins, outs = pq.strs(k["input_shapes"]), pq.strs(k["output_shapes"])
    out: list[BoundGroup] = []
    for g, v in enumerate(bounds.verdicts):
        cls = bounds.classes[g]
        if cls not in JUDGED or v.bound not in REPORTED or (cls is KernelClass.VECTOR and v.bound is PipeBound.MEMORY):
            continue
        rows = np.flatnonzero((bounds.group == g) & selected)
        if len(rows):
            r0 = int(rows[0])
            out.append(BoundGroup(cls, bounds.op_types[g], str(names[r0]), f"{ins[r0]}-{outs[r0]}", rows.tolist(),
                                  bounds.means[g], v))
    return out


@declare("NPU206", "kernel-bound",
         thresholds=("cubeMacBoundPercent", "cubeMte2BoundPercent", "faMte2BoundPercent", "faPipeBoundPercent",
                     "vectorPipeBoundPercent", "pipeBoundPercent", "vectorMinPercent", "cubeMinBytes"),
         backends=(Backend.ASCEND,), needs=(Data.KERNELS,))
class KernelBound(Rule):
    """Cube, FlashAttention, Vector and MIX kernels whose compute or memory pipe is saturated.

    A kernel whose memory-transfer pipe (mte2: global memory into the core, mte3 / fixpipe: results
    back) is busy most of its time waits on data, not on arithmetic: moving less data (fusing it
    with its neighbours, a narrower dtype, fewer layout casts) is what speeds it up. One whose cube
    or vector pipe is saturated is at the unit's limit: only less work helps.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        k, _ = pq.step_kernel_bounds(ctx, pq.BoundLimits.of(ctx.thresholds))
        if not any(c.startswith("pmu:") for c in k.columns):
            return
        groups = bound_groups(ctx)
        if not groups:
            return
        at = {}
        for g in groups:
            for p in g.rows:
                at[p] = g
        dur = k["dur_ns"].to_numpy(np.int64)
        for site_group in sq.kernels_by_statement_in(ctx, k, sorted(at)):
            yield self._finding(ctx, site_group, site_group.positions, at, dur)

    def _finding(self, ctx: RuleContext, site: sq.KernelGroup, positions: list[int], at: dict[int, BoundGroup],
                 dur: np.ndarray) -> Finding:
        per_group: dict[int, tuple[BoundGroup, list[int]]] = {}
        for p in positions:
            g = at[p]
            per_group.setdefault(id(g), (g, []))[1].append(p)
        ranked = sorted(per_group.values(), key=lambda gp: -int(dur[gp[1]].sum()))
        total = int(sum(int(dur[ps].sum()) for _, ps in ranked))
        mem_ns = sum(int(dur[ps].sum()) for g, ps in ranked if g.verdict.bound is PipeBound.MEMORY)
        memory = mem_ns * 2 >= total
        lead = next(g for g, _ in ranked if (g.verdict.bound is PipeBound.MEMORY) == memory)
        v = lead.verdict
        types = list(dict.fromkeys(g.op_type for g, _ in ranked if (g.verdict.bound is PipeBound.MEMORY) == memory))
        evidence = {
            "kernels": [
                {"name": g.name, "class": g.cls.value, "type": g.op_type, "shapes": g.shapes, "count": len(ps),
                 "total_us": pq.format_ns_us(int(dur[ps].sum())), "ratios": {c: round(x, 3) for c, x in g.means.items()},
                 "bound": g.verdict.label, "limit": g.verdict.bound.value}
                for g, ps in ranked[:EVIDENCE_KERNELS]
            ],
            "groups": len(ranked),
            "count": len(positions),
            "memory_bound_us": pq.format_ns_us(mem_ns),
            "thresholds": pq.BoundLimits.of(ctx.thresholds).as_dict(),
        }
        if memory:
            short, diagnosis = "Memory-bound kernels", f"{', '.join(types[:3])} wait on data transfers"
            fix = "Move less data: fuse neighbouring ops, bf16, fewer format casts"
        else:
            short, diagnosis = "Compute-bound kernels", f"{', '.join(types[:3])} saturate the {_unit(lead.cls, v.pipe)}"
            fix = "Do less work: narrower dtypes or fewer redundant ops"
        message = ctx.message(short, total_ns=total, events=len(positions), unit=Unit.KERNEL,
                              qualifier=f"{lead.op_type} {v.pipe} {v.ratio:.0%} ≥ {v.threshold:.0%}",
                              diagnosis=diagnosis, fix=fix)
        return ctx.finding(self, span=site.span, message=message, total_ns=total, confidence=site.confidence, evidence=evidence)


def _unit(cls: KernelClass, pipe: str) -> str:
    if pipe == "mac":
        return "cube unit"
    if pipe.startswith("vec"):
        return "vector unit"
    return f"{cls.value} pipes"


# ---------------------------------------------------------------------------------------------
# NPU209 block-dim

MIX_BLOCK_COLUMNS = ("pmu:Mix Block Num", "pmu:Mix Block Dim")  # kept by the readers as an extra column


def core_counts(ctx: RuleContext) -> tuple[int | None, int | None]:
    """(AI Core, AI Vector Core) counts of the device, where the profile says them: msprof's
    ``info.json`` (``ai_core_num``, ``aiv_num``). torch_npu's exports write neither."""
    extra = ctx.profile.meta.extra

    def count(key: str) -> int | None:
        v = extra.get(key)
        return int(v) if isinstance(v, (int, float)) and v > 0 else None

    return count("ai_core_num"), count("aiv_num")


@declare("NPU209", "block-dim", thresholds=("blockDimMinUs",), backends=(Backend.ASCEND,), needs=(Data.KERNELS,))
class BlockDim(Rule):
    """Kernels whose block dim is not a multiple of the core count leave cores idle in their last wave.

    A kernel's blocks run in waves of one block per core; a block dim that is not a multiple of the
    core count leaves part of the cores idle during the last wave, and a block dim under the core
    count never uses them all. Operator tuning (AOE) or a shape that splits evenly fills them.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        aic, aiv = core_counts(ctx)
        k = ctx.profile.kernels_in_steps()
        if aic is None:
            return  # the core count is unknown: torch_npu's text and DB exports do not write it
        cores = pq.strs(k["core"])
        block = k["block_dim"].to_numpy(np.int64)
        dur = k["dur_ns"].to_numpy(np.int64)
        mix_col = next((c for c in MIX_BLOCK_COLUMNS if c in k.columns), None)
        mix = np.nan_to_num(k[mix_col].to_numpy(np.float64), nan=-1).astype(np.int64) if mix_col else np.full(len(k), -1)
        # the advisor's core per task type: AI_CORE on the cube cores, the others on the vector cores
        # when their count is known
        per = np.where(cores == "AI_CORE", aic, aiv if aiv else aic)
        checked = np.isin(cores, ["AI_CORE", "AI_VECTOR_CORE", "MIX_AIC"]) & (block > 0)
        checked &= dur >= float(ctx.thresholds.block_dim_min_us) * 1000
        bad = checked & (block % np.maximum(per, 1) != 0)
        if aiv:  # a MIX_AIC kernel whose vector part fills the vector cores is fine
            bad &= ~((cores == "MIX_AIC") & (mix > 0) & (mix % aiv == 0))
        positions = np.flatnonzero(bad)
        if not len(positions):
            return
        types = pq.kernel_types(k)
        # each kernel's bound verdict in the evidence: the one NPU202, NPU206 and the hover give
        verdicts = pq.step_kernel_bounds(ctx, pq.BoundLimits.of(ctx.thresholds))[1].per_row()  # the same rows as ``k``
        for g in sq.kernels_by_statement_in(ctx, k, positions):
            mine = g.positions
            total = int(dur[mine].sum())
            by: dict[tuple[str, str, int], list[int]] = {}
            for p in mine:
                by.setdefault((str(types[p]), str(cores[p]), int(block[p])), []).append(p)
            ranked = sorted(by.items(), key=lambda kv: -int(dur[kv[1]].sum()))
            (t, core, bd), _ = ranked[0]
            n = int(per[ranked[0][1][0]])
            waves = -(-bd // n)
            idle = 1 - bd / (waves * n)  # share of the core-waves left idle
            evidence = {
                "kernels": [{"type": t_, "core": c_, "block_dim": b_, "cores": int(per[ps[0]]), "count": len(ps),
                             "total_us": pq.format_ns_us(int(dur[ps].sum())),
                             "idle_core_share": round(1 - b_ / (-(-b_ // int(per[ps[0]])) * int(per[ps[0]])), 4),
                             "bound": _bound_of(verdicts, ps)}
                            for (t_, c_, b_), ps in ranked[:EVIDENCE_KERNELS]],
                "ai_core_num": aic, "aiv_num": aiv, "count": len(mine),
                "threshold_us": float(ctx.thresholds.block_dim_min_us), "aoe_command": AOE_COMMAND,
            }
            message = ctx.message(
                "Block dim", total_ns=total, events=len(mine), unit=Unit.KERNEL,
                qualifier=f"{t} block dim {bd} on {n} cores",
                diagnosis=f"{idle:.0%} of the cores idle in its {waves} wave{'s' if waves > 1 else ''}",
                fix="Tune these ops with AOE, or pick shapes that split evenly",
            )
            yield ctx.finding(self, span=g.span, message=message, total_ns=total, confidence=g.confidence, evidence=evidence)


def _bound_of(verdicts: list[BoundVerdict | None], rows: list[int]) -> str:
    """The bound verdict of the first of ``rows`` that has one ("no counters" when none does)."""
    v = next((verdicts[r] for r in rows if verdicts[r] is not None), None)
    return v.bound.value if v is not None else PipeBound.NO_DATA.value
