"""NPU102 grad-accumulation (docs/rules/NPU102.md).

Evidence: ``Communication(Not Overlapped)`` of step_trace_time.csv (or the Overlap Analysis
lanes) per step, as a share of the step time. Without those, the fallback recomputes it from the
kernels: the union of the gradient collectives' intervals (all-reduce, reduce-scatter,
all-gather on the HCCL/COMMUNICATION core; NCCL kernels on CUDA) minus the part that compute
kernels overlap. One-off collectives that are not gradient synchronisation -- the parameter
broadcast DDP issues at construction (the 2023 fixture opens with a 309 ms ``hcom_broadcast_``)
-- are left out and listed. Small packets in communication.json's Size Distribution (SDMA < 16 MB
or RDMA < 1 MB for more than 20 % of the packets, advisor ``packet_analysis``) strengthen it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from msprof_lsp.mapping.profile import comm_time, step_windows, timemodel
from msprof_lsp.mapping.profile.model import Backend, Profile
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.profile.timemodel import collective_mask
from msprof_lsp.mapping.units import NS_PER_US, format_us

from ..context import RuleContext
from ..finding import Change, Effect, Finding, Related, Target
from ..fixes import grad_accum
from ..registry import Rule, declare
from .. import profile_query as pq, source_query as sq

GRADIENT = pq.GRADIENT_COLLECTIVE
# step-time sources (Profile.step_time) that are a measured span, not a step marker or breakdown
MEASURED_STEP = frozenset({"kernel step span", "capture length", "capture span"})
@dataclass(slots=True)
class _Comm:
    not_overlapped_ns: float  # per step
    source: str
    collectives: Counter = field(default_factory=Counter)  # kind -> count over the capture
    comm_ns: float = 0.0  # per step, overlapped or not
    ignored: list[dict] = field(default_factory=list)
    ignored_ns: float = 0.0  # per step: device time only the ignored (init) collectives occupied
    pipeline_ns: float = 0.0  # per step: the part of the breakdown's figure that is pipeline send/recv


@declare("NPU102", "grad-accumulation",
         thresholds=("commMaxPercent", "accumSteps", "sdmaSmallPacketMb", "rdmaSmallPacketMb", "smallPacketMaxPercent"),
         backends=(Backend.ASCEND, Backend.CUDA))
class GradAccumulation(Rule):
    """Gradient communication that compute does not hide takes a large share of each step.

    Data-parallel training all-reduces the gradients after every backward pass; when compute cannot
    hide it, the device waits for the network every step. Accumulating gradients over several
    micro-batches (with DDP's no_sync() on the others) synchronises once per optimizer step instead.
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        comm = _from_breakdown(ctx) or _from_kernels(ctx)
        if comm is None or comm.not_overlapped_ns <= 0:
            return
        # A step time measured as the kernels' or the capture's span includes a one-off init
        # collective (the 2023 fixture's 309 ms broadcast opens its only step): leave that time
        # out of the step too. ProfilerStep ranges exclude it already.
        step_ns = None
        if comm.ignored_ns > 0 and ctx.profile.step_time()[1] in MEASURED_STEP:
            step_ns = ctx.step_time_ns - comm.ignored_ns
        share = ctx.share(comm.not_overlapped_ns, step_ns=step_ns)
        limit = float(ctx.thresholds.comm_max_percent)
        if share * 100 < limit:
            return
        total_ns = comm.not_overlapped_ns * ctx.num_steps
        steps = ctx.num_steps
        kinds = _kernel_collectives(ctx.profile)
        if not kinds and ctx.profile.comm_ops:
            kinds = Counter(_kind(op.name) for op in ctx.profile.comm_ops if GRADIENT.search(op.name))
        # the advisor's packet analysis: intra-node (SDMA) packets under 16 MB, RDMA under 1 MB
        packets = pq.small_packets(ctx.profile.comm_ops, sdma_mb=ctx.thresholds.sdma_small_packet_mb,
                                   rdma_mb=ctx.thresholds.rdma_small_packet_mb)
        small = [link for link, p in packets.items() if p["small_ratio"] * 100 > float(ctx.thresholds.small_packet_max_percent)]
        split = pq.gradient_comm(ctx)
        qual = ", ".join(f"{round(n / steps)} {k}" for k, n in kinds.most_common(2) if round(n / steps))
        if comm.pipeline_ns > 0:
            qual = f"{qual}, pipeline send/recv {format_us(comm.pipeline_ns / NS_PER_US)} not counted".lstrip(", ")
        # packet sizes matter only where the collectives' time is transfer (docs/rules/NPU102.md)
        if small and (split is None or split.transfer_bound):
            qual = f"{qual}, small packets" if qual else "small packets"
        wrapper = _wrapper(ctx)
        accum = ctx.thresholds.accum_steps
        diagnosis, fix_text = _diagnosis(split, wrapper, accum)
        lib = "NCCL" if ctx.backend == Backend.CUDA.value else "HCCL"
        message = ctx.message(
            f"{lib} not overlapped", total_ns=total_ns, diagnosis=diagnosis, fix=fix_text, qualifier=qual,
            step_ns=step_ns,
        )
        evidence = {
            "backend": ctx.backend,
            "source": comm.source,
            "not_overlapped_us_per_step": round(comm.not_overlapped_ns / NS_PER_US, 3),
            "communication_us_per_step": round(comm.comm_ns / NS_PER_US, 3),
            "collectives_per_step": {k: n / steps for k, n in kinds.items()},
            "ignored_collectives": comm.ignored,
            "step_us": round((step_ns if step_ns is not None else ctx.step_time_ns) / NS_PER_US, 3),
            "step_without_ignored": step_ns is not None,
            "packets": packets,
            "small_packets": small,
            "time_split": split.as_dict() if split is not None else None,
            "pipeline_not_overlapped_us_per_step": round(comm.pipeline_ns / NS_PER_US, 3),
            "wrapper": wrapper,
            "thresholds": {"commMaxPercent": limit},
        }
        effect = _accumulated(ctx, accum)
        found = sq.backward_call(ctx)
        if found is None:
            yield ctx.finding(self, span=None, message=message, total_ns=total_ns, evidence=evidence,
                              confidence=Confidence.MODULE, step_ns=step_ns, effect=effect)
            return
        index, call, loop, conf = found
        related: list[Related] = []
        opt = sq.optimizer_step_call(index, loop)
        if opt is not None:
            related.append(Related(opt.span, f"{opt.text}: with accumulation it runs once every {accum} micro-batches"))
        fixes = sq.fixes(ctx, (grad_accum.accumulate_gradients, call.span, index.path, {"accum_steps": accum}))
        yield ctx.finding(self, span=call.span, message=message, total_ns=total_ns, confidence=conf,
                          evidence=evidence, fixes=fixes, related=related, step_ns=step_ns, effect=effect)


def _accumulated(ctx: RuleContext, k: int) -> Effect:
    """Accumulating over ``k`` micro-batches all-reduces once every k: the gradient collectives of
    the steps at 1/k of their time, the step's mean; the low end keeps half the gain (a collective's
    wait for late ranks need not shrink with it)."""
    prof = ctx.profile
    if not len(prof.kernels) or k <= 1:
        return Effect(unknown="unknown: no gradient collective kernels in the profile, or no accumulation (k <= 1)")
    types = pq.kernel_types(prof.kernels)
    rows = np.flatnonzero(_is_comm(prof) & pq.kernels_in_steps_mask(prof) & pq.matches(types, GRADIENT))
    if not len(rows):
        return Effect(unknown="unknown: the communication is in the step breakdown only, not as kernels to replay")
    f = 1.0 / k
    return Effect((Change(Target.KERNELS, tuple(int(r) for r in rows), f, best=f, worst=0.5 + 0.5 * f),),
                  basis=f"gradient collectives once every {k} micro-batches (1/{k} of their time per step; low end: "
                        "half the gain)")


def _from_breakdown(ctx: RuleContext) -> _Comm | None:
    """Communication(Not Overlapped) the producer wrote (step_trace_time / StepTraceTime / Overlap
    Analysis), per step through the time model's breakdown (slowest device per step)."""
    b = timemodel.profile_breakdown(ctx.profile)
    if b.source in (timemodel.BreakdownSource.TASKS, timemodel.BreakdownSource.NONE):
        return None  # computed from tasks: the kernel path below tells gradient from one-off collectives
    not_ov, comm = b.mean("comm_not_overlapped_ns"), b.mean("communication_ns")
    if not not_ov and not comm:
        return None
    grad, pipeline = _role_shares(ctx.profile)
    not_ov, comm = not_ov or 0.0, comm or 0.0
    # The breakdown counts every op on the communication stream; gradient accumulation helps only
    # the gradient collectives, so pipeline send/recv and other ops are taken out by their share
    # of the ops' Elapse (communication.json / CommAnalyzerTime).
    return _Comm(not_ov * grad, b.source.value, comm_ns=comm * grad, pipeline_ns=not_ov * pipeline)


def _role_shares(profile: Profile) -> tuple[float, float]:
    """(gradient, pipeline) shares of the communication ops' Elapse; (1, 0) without the ops."""
    every = comm_time.split(profile.comm_ops)
    if every is None:
        return 1.0, 0.0
    grad = comm_time.split(profile.comm_ops, pq.GRADIENT_ROLE)
    pipe = comm_time.split(profile.comm_ops, frozenset({comm_time.CommRole.PIPELINE}))
    share = lambda s: 0.0 if s is None else s.elapse_ns * s.steps / (every.elapse_ns * every.steps)  # noqa: E731
    return share(grad), share(pipe)


def _diagnosis(comm: pq.CommDiagnosis | None, wrapper: str | None, accum: int) -> tuple[str, str]:
    """What binds the gradient collectives, from their time split (docs/rules/NPU102.md): only
    transfer-bound collectives are called communication-bound; otherwise they wait for a late rank
    (Wait) or sit idle (Idle), and the late rank's work is the first fix."""
    accum_fix = f"Accumulate gradients with {'model.no_sync()' if wrapper else f'{accum} micro-batches per step'}"
    if comm is None:
        return "communication-bound", accum_fix
    if comm.transfer_bound:
        return f"communication-bound ({comm.words()})", accum_fix
    s = comm.split
    waits = []
    if s.wait_ns > s.transit_ns:
        waits.append("wait for a late rank" + (f" (rank {comm.late_rank})" if comm.late_rank is not None else ""))
    if s.idle_ns > s.transit_ns:
        waits.append("sit idle between transfers")
    what = " and ".join(waits) if waits else "wait more than they transfer"
    diagnosis = f"not transfer-bound: the collectives {what} ({comm.words()})"
    if comm.late_rank is not None and s.wait_ns > s.transit_ns:
        return diagnosis, f"Balance rank {comm.late_rank}'s work first; then accumulate gradients"
    return diagnosis, accum_fix


def _is_comm(profile: Profile) -> np.ndarray:
    return collective_mask(profile.kernels)


def _kind(text: str) -> str:
    """``hcom_allReduce__428_0_1`` / ``hcom_allReduce_`` -> allReduce; NCCL names -> AllReduce."""
    m = re.search(r"hcom_([A-Za-z]+)", text)
    if m:
        return m.group(1)
    m = GRADIENT.search(text)
    return m.group(0) if m else text


def _kernel_collectives(profile: Profile) -> Counter:
    k = profile.kernels
    if not len(k):
        return Counter()
    sel = _is_comm(profile) & pq.kernels_in_steps_mask(profile)
    types = pq.kernel_types(profile.kernels)[sel]
    return Counter(_kind(str(t)) for t in types if GRADIENT.search(str(t)))


def _from_kernels(ctx: RuleContext) -> _Comm | None:
    """Per step window (ProfilerStep ranges, else the capture span), device by device: the union of
    the gradient collectives clipped to the window, minus what compute kernels cover of it --
    |G ∪ C| − |C|; and the time only the other (one-off) collectives occupy, |O ∪ G ∪ C| − |G ∪ C|."""
    prof = ctx.profile
    k = prof.kernels
    if not len(k):
        return None
    comm = _is_comm(prof)
    if not comm.any():
        return None
    windows = step_windows.windows(prof)
    if not windows:
        return None
    in_steps = pq.kernels_in_steps_mask(prof)
    compute = timemodel.is_class(k, timemodel.TaskClass.COMPUTE)
    types = pq.kernel_types(prof.kernels)
    grad = comm & in_steps & pq.matches(types, GRADIENT)
    start = k["start_ns"].to_numpy(np.int64)
    end = start + k["dur_ns"].to_numpy(np.int64)
    device = k["device"].to_numpy(np.int64)
    ignored = []
    for r in np.flatnonzero(comm & ~grad):
        ignored.append({"name": str(k["name"].iloc[r]), "type": str(types[r]), "us": round(float(k["dur_ns"].iloc[r]) / NS_PER_US, 3)})
    if not grad.any():
        return None
    other = comm & ~grad & in_steps

    def covered(mask: np.ndarray) -> int:
        return int(step_windows.covered_per_step(start[mask], end[mask], windows).sum())

    not_ov = busy = alone = 0
    for dev in np.unique(device[grad]):
        on = device == dev
        g, c, o = grad & on, compute & in_steps & on, other & on
        # several devices in one file: the slowest device, as for the step time
        g_or_c = covered(g | c)
        not_ov = max(not_ov, g_or_c - covered(c))
        busy = max(busy, covered(g))
        alone = max(alone, covered(o | g | c) - g_or_c)
    steps = ctx.num_steps
    return _Comm(not_ov / steps, "HCCL kernels" if ctx.backend == Backend.ASCEND.value else "NCCL kernels",
                 comm_ns=busy / steps, ignored=ignored, ignored_ns=alone / steps)


def _wrapper(ctx: RuleContext) -> str | None:
    if sq.constructed(ctx, *sq.DDP):
        return "DistributedDataParallel"
    if sq.constructed(ctx, *sq.FSDP):
        return "FullyShardedDataParallel"
    return None
