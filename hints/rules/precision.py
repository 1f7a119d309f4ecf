"""NPU222 fp32-compute: cube (matrix) kernels that run in fp32 and hold a large share of the
device's compute time -- the lever bf16 autocast or, on the NPU, HF32 pulls (docs/rules/NPU222.md).

A cube kernel is a MatMul-family or convolution OpType; it runs in fp32 when every floating-point
input it has is fp32 (``FLOAT`` / ``DT_FLOAT`` in kernel_details.csv, op_summary and the DB's
``inputDataTypes``). The rule fires when those kernels hold at least ``fp32CubeMinPercent`` of the
compute kernels' device time in the profiled steps. The kernel_details.csv column ``HF32 Eligible``
(kept by the reader) says whether HF32 would apply to a kernel; its counts go in the evidence.

Its effect (``Effect``): the fp32 cube kernels take ``factor`` of their time. Where the profile
has half-precision (bf16/fp16) kernels of the same OpType at comparable size, the factor is the
fp32 achieved rate over theirs (FLOP/s, docs/numbers.md "Achieved throughput"), measured; else
``PEAK_RATIO`` is the best case and the worst case is unknown (factor 1: nothing saved).

One finding: the fix is one setting for the whole model, not one per line. It is anchored at the
statement whose fp32 cube kernels take the most time, the other statements as related
information. No quick fix: autocast changes numerics and where it goes (around the forward and
the loss, not the backward) depends on the loop; HF32 changes numerics too. The evidence carries
both snippets.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from msprof_lsp.hints.context import RuleContext, Unit
from msprof_lsp.hints.finding import Change, Effect, Finding, Related, Target
from msprof_lsp.hints.registry import Data, Rule, declare
from msprof_lsp.mapping.profile import timemodel
from msprof_lsp.mapping.profile.model import Backend
from msprof_lsp.mapping.units import format_us

from .. import profile_query as pq, source_query as sq

CUBE_TYPES = re.compile(r"MatMul|Matmul|^Conv[23]D|^Conv[23]DBackprop|^DepthwiseConv", re.I)
FP32 = frozenset({"FLOAT", "DT_FLOAT", "FLOAT32", "DT_FLOAT32"})
HALF = frozenset({"FLOAT16", "DT_FLOAT16", "DT_BF16", "BF16", "BFLOAT16", "DT_BFLOAT16"})
# Best case where the profile has no half-precision kernel to measure against: a bf16 operand is
# half the bytes of an fp32 one and the cube's half-precision rate is at least twice its fp32
# (HF32) rate, so the kernel takes at most half its time. Documented in docs/rules/NPU222.md.
PEAK_RATIO = 0.5
MAX_RELATED = 3
AUTOCAST = "with torch.autocast(device_type=\"npu\", dtype=torch.bfloat16):  # around forward + loss"
HF32 = "torch.npu.matmul.allow_hf32 = True; torch.npu.conv.allow_hf32 = True  # after import torch_npu"


def precision(dtypes: str) -> str:
    """"fp32" when every floating-point input is fp32, "half" when every one is bf16/fp16, else ""."""
    floats = [t for t in (d.strip().upper() for d in dtypes.split(";")) if t in FP32 or t in HALF]
    if not floats:
        return ""
    if all(t in FP32 for t in floats):
        return "fp32"
    return "half" if all(t in HALF for t in floats) else ""


@dataclass(frozen=True, slots=True)
class TypeFactor:
    """What converting one OpType's fp32 kernels does to their time."""

    op_type: str
    rows: tuple[int, ...]  # rows of profile.kernels
    factor: float
    best: float
    worst: float
    measured: bool  # the factor is the profile's own fp32 / half rate ratio


def _factors(k: pd.DataFrame, rows: np.ndarray, fp32: np.ndarray, half: np.ndarray, types: np.ndarray) -> list[TypeFactor]:
    """Per OpType of the fp32 cube kernels (``rows``: their rows of profile.kernels): the measured
    rate ratio against the half-precision kernels of the same OpType at comparable FLOPs per
    kernel, else the peak ratio."""
    work, is_flops = pq.kernel_work(k)
    dur = k["dur_ns"].to_numpy(np.float64)
    out = []
    for t in dict.fromkeys(types[fp32].tolist()):
        mine = fp32 & (types == t)
        peers = half & (types == t) & is_flops & (work > 0)
        own = mine & is_flops & (work > 0)
        if own.any() and peers.any():
            mean = work[own].mean()
            peers &= (work >= mean / pq.COMPARABLE_WORK) & (work <= mean * pq.COMPARABLE_WORK)
        if own.any() and peers.any():
            rate32 = work[own].sum() / dur[own].sum()
            rate16 = work[peers].sum() / dur[peers].sum()
            f = min(1.0, rate32 / rate16)
            out.append(TypeFactor(str(t), tuple(rows[mine].tolist()), f, f, f, True))
        else:
            out.append(TypeFactor(str(t), tuple(rows[mine].tolist()), PEAK_RATIO, PEAK_RATIO, 1.0, False))
    return out


def _effect(factors: list[TypeFactor]) -> Effect:
    changes = tuple(Change(Target.KERNELS, f.rows, f.factor, f.best, f.worst) for f in factors)
    measured = [f.op_type for f in factors if f.measured]
    peak = [f.op_type for f in factors if not f.measured]
    parts = []
    if measured:
        parts.append(f"{', '.join(measured)} at the profile's own fp32/bf16 rate ratio")
    if peak:
        parts.append(f"{', '.join(peak)} at most {PEAK_RATIO:g} of their time (no bf16 kernel to compare; "
                     "worst case unknown)")
    return Effect(changes, basis="fp32 cube kernels in bf16: " + "; ".join(parts))


# pytorch_only: the levers are torch.autocast and torch_npu's allow_hf32
@declare("NPU222", "fp32-compute", thresholds=("fp32CubeMinPercent",), backends=(Backend.ASCEND,), pytorch_only=True,
         needs=(Data.KERNELS,))
class Fp32Compute(Rule):
    """Matrix (cube) kernels run in fp32: bf16 autocast or HF32 would run them faster.

    The cube unit multiplies bf16/fp16 operands at several times its fp32 rate and they move half
    the bytes; a model trained in fp32 leaves that on the table. Autocast to bf16 around the forward
    pass, or HF32 for fp32 matmuls and convolutions on the NPU, runs the same layers on the fast
    path.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        k = ctx.profile.kernels_in_steps()
        types = pq.kernel_types(k)
        compute = timemodel.is_class(k, timemodel.TaskClass.COMPUTE)
        cube = compute & pq.matches(types, CUBE_TYPES)
        prec = np.full(len(k), "", dtype=object)
        if cube.any():
            per_value = {d: precision(str(d)) for d in set(pq.strs(k["input_dtypes"])[cube].tolist())}
            prec[cube] = [per_value[d] for d in pq.strs(k["input_dtypes"])[cube].tolist()]
        fp32, half = cube & (prec == "fp32"), cube & (prec == "half")
        dur = k["dur_ns"].to_numpy(np.int64)
        busy = int(dur[compute].sum())
        total = int(dur[fp32].sum())
        if not busy or total < busy * float(ctx.thresholds.fp32_cube_min_percent) / 100:
            return
        positions = ctx.profile.kernels.index.get_indexer(k.index)  # kernel rows are by row of profile.kernels
        factors = _factors(k, positions, fp32, half, types)
        yield self._finding(ctx, k, positions[fp32], fp32, types, factors, total, busy)

    def _finding(self, ctx: RuleContext, k: pd.DataFrame, rows: np.ndarray, fp32: np.ndarray, types: np.ndarray,
                 factors: list[TypeFactor], total: int, busy: int) -> Finding:
        dur = k["dur_ns"].to_numpy(np.int64)
        all_dur = ctx.profile.kernels["dur_ns"].to_numpy(np.int64)
        hf32 = pq.strs(k["hf32_eligible"])
        groups = sorted(sq.kernels_by_statement(ctx, rows.tolist()), key=lambda g: -int(all_dur[g.rows].sum()))
        lead = groups[0]
        by_type = pd.Series(dur[fp32]).groupby(types[fp32]).sum().sort_values(ascending=False)
        top = str(by_type.index[0])
        eligible = {v: int((hf32[fp32] == v).sum()) for v in ("YES", "NO")}
        evidence = {
            "kernels": len(rows),
            "fp32_cube_us": pq.format_ns_us(total),
            "compute_us": pq.format_ns_us(busy),
            "share_of_compute": round(total / busy, 4),
            "by_type_us": {str(t): pq.format_ns_us(int(ns)) for t, ns in by_type.head(8).items()},
            "hf32_eligible": eligible if sum(eligible.values()) else "not written",
            "factors": [{"type": f.op_type, "factor": round(f.factor, 3), "best": round(f.best, 3),
                         "worst": round(f.worst, 3), "measured": f.measured, "kernels": len(f.rows)} for f in factors],
            "threshold_percent": float(ctx.thresholds.fp32_cube_min_percent),
            "manual_fix": [AUTOCAST, HF32],
            "why_no_quick_fix": "autocast and HF32 change numerics; autocast belongs around the forward and "
                                "the loss, which only the loop's author can place",
        }
        message = ctx.message(
            "fp32 compute", total_ns=total, events=len(rows), unit=Unit.KERNEL,
            qualifier=f"{total / busy:.0%} of the compute time, most in {top}",
            diagnosis="the cube runs these matrix kernels in fp32",
            fix="Autocast the forward to bf16, or allow HF32 matmuls",
        )
        related = [Related(g.span, f"fp32 cube kernels launched here ({format_us(ctx.per_step_us(int(all_dur[g.rows].sum())))}/step)")
                   for g in groups[1:] if g.span is not None][:MAX_RELATED]
        return ctx.finding(self, span=lead.span, message=message, total_ns=total, confidence=lead.confidence,
                           evidence=evidence, related=related, effect=_effect(factors))
