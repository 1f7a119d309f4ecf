"""NPU105 device-idle (hint-rules §2 NPU105; manual fix).

Metrics per step: ``Free`` ÷ step time above ``freeMaxPercent``, ``Computing`` ÷ step time below
``computeMinPercent`` (a proxy for AI Core utilisation), the median ``Wait Time`` of compute
kernels against ``schedulingDelayUs``, and the share of kernels shorter than ``smallKernelUs``
(launch-dominated) as qualifier. From step_trace_time / Overlap Analysis when present, else from
the kernels themselves: within each step window (the ProfilerStep range, or the capture span of
a profile without markers) Free = the window minus the union of all device activity on every
stream (copies included, wait tasks not), Computing = the union of compute kernels in it, so
neither exceeds the step; without host step ranges, each step's own device span. The impact is
the idle time. Anchored on the training loop header, with related information at the
three user functions that launch the most small kernels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from msprof_lsp.mapping import step_windows
from msprof_lsp.mapping.model import Backend
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.units import NS_PER_US

from ..context import RuleContext
from ..finding import Finding, Related
from ..registry import Rule, register
from . import _facts, _ops, _places

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


@register
class DeviceIdle(Rule):
    code = "NPU105"
    name = "device-idle"
    summary = "The device sits idle for a large part of each step (host-bound: small kernels, launch gaps)."
    rationale = (
        "When the host cannot launch work fast enough -- many tiny kernels, Python overhead between them, waits "
        "on input or synchronisation -- the device is idle between kernels. Fewer, larger kernels (compilation, "
        "fusion, a bigger batch) and a faster launch path raise its utilisation."
    )
    thresholds = ("freeMaxPercent", "computeMinPercent", "schedulingDelayUs", "smallKernelUs")
    backends = ("ascend", "cuda")

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        got = _breakdown(ctx)
        if got is None:
            return
        free_ns, computing_ns, source = got
        step = ctx.step_time_ns
        if step <= 0:
            return
        free_pct = free_ns / step * 100
        compute_pct = computing_ns / step * 100
        free_max = float(ctx.thresholds.free_max_percent)
        compute_min = float(ctx.thresholds.compute_min_percent)
        if not (free_pct > free_max or compute_pct < compute_min) or free_ns <= 0:
            return
        small_us = float(ctx.thresholds.small_kernel_us)
        delay_us = float(ctx.thresholds.scheduling_delay_us)
        stats = _kernel_stats(ctx, small_us)
        qual = [f"Computing {compute_pct:.0f}%"]
        if stats["kernels"]:
            qual.append(f"{stats['small_share'] * 100:.0f}% of kernels < {small_us:g} µs")
        host_bound = stats["median_wait_us"] is not None and stats["median_wait_us"] > delay_us
        diagnosis = "host-bound: kernels wait to be launched" if host_bound else "the device waits for work"
        fix_text = ('Compile the model (torch.compile, backend "npu") or raise the batch size'
                    if ctx.backend == Backend.ASCEND.value else "Compile the model (torch.compile) or raise the batch size")
        total = free_ns * ctx.num_steps
        message = ctx.message("Device idle", total_ns=total, qualifier=", ".join(qual), diagnosis=diagnosis, fix=fix_text)
        evidence = {
            "backend": ctx.backend,
            "source": source,
            "free_us_per_step": round(free_ns / NS_PER_US, 3),
            "free_percent": round(free_pct, 2),
            "computing_us_per_step": round(computing_ns / NS_PER_US, 3),
            "computing_percent": round(compute_pct, 2),
            "step_us": round(step / NS_PER_US, 3),
            **stats,
            "host_bound": host_bound,
            "manual_fix": MANUAL.get(ctx.backend, MANUAL["cuda"]),
            "thresholds": {"freeMaxPercent": free_max, "computeMinPercent": compute_min,
                           "schedulingDelayUs": delay_us, "smallKernelUs": small_us},
        }
        found = _places.backward_call(ctx)
        related = _small_kernel_functions(ctx, small_us)
        if found is None:
            yield ctx.finding(self, span=None, message=message, total_ns=total, evidence=evidence,
                              confidence=Confidence.MODULE, related=related)
            return
        index, _call, loop, conf = found
        yield ctx.finding(self, span=loop.header, message=message, total_ns=total, evidence=evidence,
                          confidence=conf, related=related)


def _breakdown(ctx: RuleContext) -> tuple[float, float, str] | None:
    """(Free, Computing) per step in ns, and where they came from."""
    prof = ctx.profile
    rows = [b for b in prof.step_breakdown if b.step_time_ns > 0]
    if rows:
        per: dict[int, tuple[int, int]] = {}
        for b in rows:  # several devices: the slowest device's step, as for the step time
            old = per.get(b.step)
            if old is None or b.step_time_ns > old[0] + old[1]:
                per[b.step] = (b.free_ns, b.computing_ns)
        n = len(per)
        src = "Overlap Analysis" if all(b.derived for b in rows) else "step_trace_time"
        return sum(v[0] for v in per.values()) / n, sum(v[1] for v in per.values()) / n, src
    k = prof.kernels
    if not len(k):
        return None
    windows = step_windows.windows(prof) if prof.steps else []
    if not windows:  # device step ids only (no host step ranges): each step's own device span
        return _breakdown_by_step_id(prof)
    start = k["start_ns"].to_numpy(np.int64)
    end = start + k["dur_ns"].to_numpy(np.int64)
    comm = _facts.mask(k["core"], {"HCCL", "COMMUNICATION"}.__contains__)
    busy = _facts.is_device_work(prof)
    computing = _facts.is_task(prof) & ~comm
    if not busy.any():
        return None
    covered = step_windows.covered_per_step(start[busy], end[busy], windows)
    work = step_windows.covered_per_step(start[computing], end[computing], windows)
    length = np.array([w.dur_ns for w in windows], dtype=np.int64)
    n = len(windows)
    return float((length - covered).sum()) / n, float(work.sum()) / n, "kernels in step windows"


def _breakdown_by_step_id(prof) -> tuple[float, float, str] | None:  # noqa: ANN001 - Profile
    k = prof.kernels
    sel = _facts.is_task(prof) & _facts.kernels_in_steps_mask(prof)
    if not sel.any():
        return None
    start = k["start_ns"].to_numpy(np.int64)
    end = start + k["dur_ns"].to_numpy(np.int64)
    step = k["step"].to_numpy(np.int64)
    free = busy = 0
    n = 0
    for s in np.unique(step[sel]):
        m = sel & (step == s)
        us, ue = step_windows.merge_intervals(start[m], end[m])
        b = int((ue - us).sum())
        busy += b
        free += int(end[m].max() - start[m].min()) - b
        n += 1
    return free / n, busy / n, "kernels"


def _kernel_stats(ctx: RuleContext, small_us: float) -> dict:
    prof = ctx.profile
    k = prof.kernels
    comm_core = _facts.mask(k["core"], {"HCCL", "COMMUNICATION"}.__contains__)
    sel = _facts.is_task(prof) & _facts.kernels_in_steps_mask(prof) & ~comm_core
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
    small = np.flatnonzero((k["dur_ns"].to_numpy(np.int64) < small_us * NS_PER_US) & _facts.is_task(ctx.profile)
                           & (att.kernel_site >= 0))
    counts: Counter = Counter()
    for r in small:
        site = att.sites[int(att.kernel_site[r])]
        counts[(site.span.path, site.function)] += 1
    out = []
    steps = ctx.num_steps
    for (path, function), n in counts.most_common(3):
        index = _ops.index_of(ctx, path)
        info = index.functions.get(function) if index is not None else None
        if info is None:
            continue
        out.append(Related(info.header, f"{function}: {round(n / steps)} kernels < {small_us:g} µs per step"))
    return out
