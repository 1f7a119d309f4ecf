"""NPU105 device-idle (manual fix; docs/rules/NPU105.md).

Metrics per step: ``Free`` ÷ step time above ``freeMaxPercent``, ``Computing`` ÷ step time below
``computeMinPercent`` (a proxy for AI Core utilisation), the median ``Wait Time`` of compute
kernels against ``schedulingDelayUs``, and the share of kernels shorter than ``smallKernelUs``
(launch-dominated) as qualifier. Free and Computing are the time model's breakdown (producer's
step_trace_time / StepTraceTime / Overlap Analysis, else computed from the classified tasks):
Free = Stage − Computing − Communication(Not Overlapped), so memory copies and waits count as
idle, exactly as msprof and the report's breakdown line count them. The impact is
the idle time. Anchored on the training loop header, with related information at the
three user functions that launch the most small kernels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from msprof_lsp.mapping.profile import timemodel
from msprof_lsp.mapping.profile.model import Backend
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.units import NS_PER_US, format_us

from ..context import RuleContext
from ..finding import Finding, Related
from ..registry import Rule, declare
from .. import profile_query as pq, source_query as sq

MANUAL = {
    "ascend": [
        'model = torch.compile(model, backend="npu")  # fuses small ops; needs torchair, re-profile',
        "a larger batch size (more work per launch)",
        "fusions: NPU101 (ReLU+Dropout), NPU210-NPU217 (fused torch_npu APIs)",
        "launcher environment, before `import torch_npu`: TASK_QUEUE_ENABLE=2 (not with ASCEND_LAUNCH_BLOCKING=1; "
        "raises the memory peak), CPU_AFFINITY_CONF=1",
    ],
    "cuda": [
        "model = torch.compile(model)  # or mode=\"reduce-overhead\" (CUDA graphs)",
        "a larger batch size (more work per launch)",
    ],
}


# pytorch_only: every lever it names is PyTorch's: torch.compile, the batch, DataLoader, torch_npu fusions
@declare("NPU105", "device-idle",
         thresholds=("freeMaxPercent", "computeMinPercent", "schedulingDelayUs", "smallKernelUs"),
         backends=(Backend.ASCEND, Backend.CUDA), pytorch_only=True)
class DeviceIdle(Rule):
    """The device sits idle for a large part of each step (host-bound: small kernels, launch gaps).

    When the host cannot launch work fast enough -- many tiny kernels, Python overhead between them,
    waits on input or synchronisation -- the device is idle between kernels. Fewer, larger kernels
    (compilation, fusion, a bigger batch) and a faster launch path raise its utilisation.
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        got = _breakdown(ctx)
        if got is None:
            return
        free_ns, computing_ns = got.free_ns, got.computing_ns
        preparing_ns = _preparing_idle(ctx, got)
        idle_ns = free_ns + preparing_ns
        # Preparing lies before the device's Stage: with it the step is the wall step. Without it,
        # device tasks assigned to a step by their launch can run past its ProfilerStep range: the
        # share is then of the device's Stage. Either way it stays in [0, 1].
        wall = preparing_ns > 0
        step = max(ctx.wall_step_time_ns, got.stage_ns + preparing_ns) if wall else max(got.stage_ns, ctx.step_time_ns)
        step_ns = step if step != (ctx.wall_step_time_ns if wall else ctx.step_time_ns) else None
        if step <= 0:
            return
        free_pct = idle_ns / step * 100
        compute_pct = computing_ns / step * 100
        free_max = float(ctx.thresholds.free_max_percent)
        compute_min = float(ctx.thresholds.compute_min_percent)
        if not (free_pct > free_max or compute_pct < compute_min) or idle_ns <= 0:
            return
        small_us = float(ctx.thresholds.small_kernel_us)
        delay_us = float(ctx.thresholds.scheduling_delay_us)
        stats = _kernel_stats(ctx, small_us)
        host_bound = stats["median_wait_us"] is not None and stats["median_wait_us"] > delay_us
        parts = _parts(ctx, preparing_ns, free_ns, host_bound)
        main = max(parts, key=lambda k: parts[k]["us_per_step"])
        qual = [f"{p['name']} {format_us(p['us_per_step'])}" for p in parts.values() if p["us_per_step"] > 0] if wall else []
        qual.append(f"Computing {compute_pct:.0f}%")
        if stats["kernels"] and main == IN_STEP:
            qual.append(f"{stats['small_share'] * 100:.0f}% of kernels < {small_us:g} µs")
        total = idle_ns * ctx.num_steps
        message = ctx.message("Device idle", total_ns=total, qualifier=", ".join(qual), diagnosis=parts[main]["diagnosis"],
                              fix=parts[main]["fix"], wall=wall, step_ns=step_ns)
        evidence = {
            "backend": ctx.backend,
            "source": got.source,
            "idle_us_per_step": round(idle_ns / NS_PER_US, 3),
            "free_us_per_step": round(free_ns / NS_PER_US, 3),
            # the breakdown's Preparing; parts.preparing is its idle part
            "preparing_us_per_step": round(got.preparing_ns / NS_PER_US, 3) if got.preparing_ns is not None else None,
            "parts": parts,
            "main_part": main,
            "memcpy_us_per_step": round(got.memcpy_ns / NS_PER_US, 3) if got.memcpy_ns is not None else None,
            "free_percent": round(free_pct, 2),
            "computing_us_per_step": round(computing_ns / NS_PER_US, 3),
            "computing_percent": round(compute_pct, 2),
            "step_us": round(step / NS_PER_US, 3),
            "step_is_wall": wall,
            "step_is_stage": not wall and step_ns is not None,
            **stats,
            "host_bound": host_bound,
            "manual_fix": MANUAL.get(ctx.backend.value, MANUAL["cuda"]),
            "thresholds": {"freeMaxPercent": free_max, "computeMinPercent": compute_min,
                           "schedulingDelayUs": delay_us, "smallKernelUs": small_us},
        }
        found = sq.backward_call(ctx)
        related = _small_kernel_functions(ctx, small_us) if main == IN_STEP else []
        if found is None:
            yield ctx.finding(self, span=None, message=message, total_ns=total, evidence=evidence,
                              confidence=Confidence.MODULE, related=related, wall=wall, step_ns=step_ns)
            return
        index, _call, loop, conf = found
        yield ctx.finding(self, span=loop.header, message=message, total_ns=total, evidence=evidence,
                          confidence=conf, related=related, wall=wall, step_ns=step_ns)


PREPARING, IN_STEP = "preparing", "in_step_gaps"


def _preparing_idle(ctx: RuleContext, got: _Idle) -> float:
    """The idle part of Preparing, per step: Preparing runs from the ProfilerStep start to the
    step's first device task, but while the host runs ahead the device is still busy with the
    previous step then. The device is free between steps for at most wall step − Stage, so the
    part counted is min(Preparing, wall − Stage) (docs/numbers.md "Device idle")."""
    if not got.preparing_ns or got.preparing_ns <= 0:
        return 0.0
    wall = ctx.profile.wall_step_ns()
    if not wall:
        return 0.0
    return min(got.preparing_ns, max(0.0, wall - got.stage_ns))


def _parts(ctx: RuleContext, preparing_ns: float, free_ns: float, host_bound: bool) -> dict[str, dict]:
    """The idle time in its two parts (docs/numbers.md), each with what it means and its fix:
    Preparing -- before the step's first device task, the device waits for the next batch (the
    input pipeline, or host work before the first launch); never a compile or batch-size fix. In-step
    gaps (Free) -- between the step's tasks: the host does not launch fast enough."""
    gaps_fix = ('Compile the model (torch.compile, backend "npu") or raise the batch size'
                if ctx.backend == Backend.ASCEND.value else "Compile the model (torch.compile) or raise the batch size")
    gaps_why = "host-bound: kernels wait to be launched" if host_bound else "the device waits for work between kernels"
    return {
        PREPARING: {"name": "Preparing", "us_per_step": round(preparing_ns / NS_PER_US, 3),
                    "diagnosis": "the device waits for the next batch before the step's first kernel",
                    "fix": "Feed the device faster: DataLoader workers, pinned memory (NPU104)"},
        IN_STEP: {"name": "in-step gaps", "us_per_step": round(free_ns / NS_PER_US, 3),
                  "diagnosis": gaps_why, "fix": gaps_fix},
    }


@dataclass(frozen=True, slots=True)
class _Idle:
    """The profile's step breakdown as NPU105 reads it (per step, ns)."""

    free_ns: float
    computing_ns: float
    stage_ns: float
    memcpy_ns: float | None
    source: str
    preparing_ns: float | None = None  # None: no ProfilerStep start to measure it from


def _breakdown(ctx: RuleContext) -> _Idle | None:
    """Free and Computing per step: the time model's breakdown (the producer's own figures where it
    wrote them, else computed from the classified tasks) -- the same figures the report's
    "per step: computing ... free ..." line prints."""
    b = timemodel.profile_breakdown(ctx.profile)
    free, computing, stage = b.mean("free_ns"), b.mean("computing_ns"), b.mean("stage_ns")
    if free is None or computing is None or stage is None:
        return None
    return _Idle(free, computing, stage, b.mean("memcpy_ns"), b.source.value, b.mean("preparing_ns"))


def _kernel_stats(ctx: RuleContext, small_us: float) -> dict:
    prof = ctx.profile
    k = prof.kernels
    sel = timemodel.is_class(k, timemodel.TaskClass.COMPUTE) & pq.kernels_in_steps_mask(prof)
    dur = k["dur_ns"].to_numpy(np.int64)[sel]
    wait = k["wait_ns"].to_numpy(np.int64)[sel]
    wait = wait[wait >= 0]
    n = int(sel.sum())
    return {
        "kernels": n,
        "small_kernels": int((dur < small_us * NS_PER_US).sum()),
        "small_share": float((dur < small_us * NS_PER_US).mean()) if n else 0.0,
        "median_wait_us": float(np.median(wait)) / NS_PER_US if len(wait) else None,
    }


def _small_kernel_functions(ctx: RuleContext, small_us: float) -> list[Related]:
    """The three user functions that launch the most small kernels."""
    att = ctx.attribution
    if att is None:
        return []
    k = ctx.profile.kernels
    small = np.flatnonzero((k["dur_ns"].to_numpy(np.int64) < small_us * NS_PER_US) & timemodel.is_class(k, timemodel.TaskClass.COMPUTE)
                           & (att.kernel_site >= 0))
    counts: Counter = Counter()
    for r in small:
        site = att.sites[int(att.kernel_site[r])]
        counts[(site.span.path, site.function)] += 1
    out = []
    steps = ctx.num_steps
    for (path, function), n in counts.most_common(3):
        index = sq.index_of(ctx, path)
        info = index.functions.get(function) if index is not None else None
        if info is None:
            continue
        out.append(Related(info.header, f"{function}: {round(n / steps)} kernels < {small_us:g} µs per step"))
    return out
