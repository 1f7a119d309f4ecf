"""NPU203 comm-byte-alignment and NPU204 comm-small-packets, both read from the Size
Distribution of the gradient collectives and anchored where DDP issues them; NPU219
comm-bandwidth-contention, from the collectives' SDMA bandwidth while MatMuls overlap them.

NPU203 comm-byte-alignment: SDMA transfers of the gradient collectives whose size is not a
multiple of ``commAlignBytes`` (the advisor's ``ByteAlignmentChecker``: 512 B, transfers of at
most 512 B and on-chip copies skipped).

Data: communication.json's Size Distribution (the DB's CommAnalyzerBandwidth) per op and link;
the SDMA links are HCCS, PCIE and SIO (the file's "SDMA" entry sums them and is not counted
twice). Anchor: where DDP issues the collectives -- the ``loss.backward()`` of the training loop
(its hooks all-reduce the gradient buckets) -- with the ``DistributedDataParallel(...)`` call,
whose ``bucket_cap_mb`` sets the buckets, as related information. The fix is advice.

NPU204 comm-small-packets: more than ``smallPacketMaxPercent`` of the SDMA packets under
``sdmaSmallPacketMb`` or of the RDMA packets under ``rdmaSmallPacketMb`` (the advisor's packet
analysis): the fix is fewer, larger transfers (``bucket_cap_mb``, gradient accumulation, larger
micro-batches), as advice.

NPU219 comm-bandwidth-contention: collectives that moved data over SDMA while a MatMul kernel ran
and whose SDMA bandwidth is under ``contentionBandwidthPercent`` of ``sdmaBaselineGbps`` (the
advisor's ``BandwidthContentionChecker``: 0.8 x 18 GB/s).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

import numpy as np

from msprof_lsp.hints.context import RuleContext, Unit
from msprof_lsp.hints.finding import Finding
from msprof_lsp.hints.registry import Rule, declare
from msprof_lsp.mapping.profile import comm_time
from msprof_lsp.mapping.profile.model import Backend

from .. import profile_query as pq, source_query as sq

ALIGN_LINKS = frozenset({"HCCS", "PCIE", "SIO"})
# The advisor colours the finding by the unaligned share of the SDMA transfer time.
LOW_PRIORITY, HIGH_PRIORITY = 0.2, 0.7


@declare("NPU203", "comm-byte-alignment", thresholds=("commAlignBytes",), backends=(Backend.ASCEND,))
class CommByteAlignment(Rule):
    """SDMA transfers of gradient collectives whose size is not a multiple of 512 bytes.

    SDMA moves data in 512-byte units; a transfer whose size is not a multiple of that ends in a
    partial burst and runs at a lower bandwidth. In data-parallel training the sizes are the
    gradient buckets' byte counts, set by the parameter sizes and DDP's bucket_cap_mb.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        align = int(ctx.thresholds.comm_align_bytes)
        sdma = [p for p in pq.packets(ctx.profile.comm_ops) if p.link in ALIGN_LINKS and p.size_bytes > align]
        bad = [p for p in sdma if p.size_bytes % align]
        if not bad:
            return
        total_ns = sum(p.total_ns for p in sdma)
        # the time figure is the unaligned packets' part of the ops' Transit Time, never the
        # per-link sum (links run at once: their times add up past the Transit they belong to)
        bad_ns = sum(p.wall_ns for p in bad)
        share = sum(p.total_ns for p in bad) / total_ns if total_ns else 0.0
        per_op: dict[str, dict] = defaultdict(lambda: {"sizes": {}, "packets": 0, "us": 0.0})
        for p in bad:
            e = per_op[p.op]
            e["sizes"][str(p.size_bytes)] = e["sizes"].get(str(p.size_bytes), 0) + p.count
            e["packets"] += p.count
            e["us"] = round(e["us"] + p.wall_ns / 1000, 3)
        evidence = {
            "ops": dict(sorted(per_op.items(), key=lambda kv: -kv[1]["us"])[:8]),
            "packets": sum(p.count for p in sdma),
            "unaligned_packets": sum(p.count for p in bad),
            "unaligned_us": round(bad_ns / 1000, 3),
            "unaligned_link_us": round(sum(p.total_ns for p in bad) / 1000, 3),
            "sdma_link_us": round(total_ns / 1000, 3),
            "unaligned_time_share": round(share, 4),
            "priority": "high" if share >= HIGH_PRIORITY else "low" if share < LOW_PRIORITY else "medium",
            "align_bytes": align,
            "links": sorted({p.link for p in bad}),
        }
        message = ctx.message(
            "SDMA unaligned", total_ns=bad_ns, events=sum(p.count for p in bad), unit=Unit.TRANSFER,
            qualifier=f"{share:.0%} of SDMA time, sizes not multiples of {align} B",
            diagnosis="partial bursts lower the link bandwidth",
            fix=f"Pad parameter sizes to {align} B multiples; regroup buckets with bucket_cap_mb",
        )
        yield sq.gradient_sync_finding(ctx, self, message=message, total_ns=bad_ns, evidence=evidence)


@declare("NPU204", "comm-small-packets", thresholds=("sdmaSmallPacketMb", "rdmaSmallPacketMb", "smallPacketMaxPercent"),
         backends=(Backend.ASCEND,))
class CommSmallPackets(Rule):
    """Gradient collectives that move most of their data in small packets.

    Every transfer pays a fixed setup and synchronisation cost; packets well under the link's
    efficient size (16 MB over SDMA, 1 MB over RDMA) spend more of their time on that cost than on
    moving data. Larger gradient buckets or fewer synchronisations send fewer, larger packets.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        limit = float(ctx.thresholds.small_packet_max_percent) / 100
        groups = pq.small_packets(ctx.profile.comm_ops, sdma_mb=ctx.thresholds.sdma_small_packet_mb,
                                  rdma_mb=ctx.thresholds.rdma_small_packet_mb)
        small = {g: e for g, e in groups.items() if e["small_ratio"] > limit}
        if not small:
            return
        # the small packets' part of the collectives' Transit Time: the per-link sum (12.1 ms on the
        # AlexNet job) runs past the Transit (3.7 ms) it belongs to and is never the finding's time
        time_ns = sum(e["small_wall_ns"] for e in small.values())
        worst = max(small, key=lambda g: small[g]["small_ratio"])
        e = small[worst]
        comm = pq.gradient_comm(ctx)
        if comm is None or comm.transfer_bound:
            diagnosis = "per-transfer overhead dominates the collectives"
        else:  # packet sizes shape only the transfers, a small part of the collectives' time
            diagnosis = f"per-transfer overhead, but the collectives mostly wait, not transfer ({comm.words()})"
        message = ctx.message(
            "Small packets", total_ns=time_ns, events=sum(x["small"] for x in small.values()), unit=Unit.PACKET,
            qualifier=f"{e['small_ratio']:.0%} of {worst} packets under {e['limit_mb']:g} MB",
            diagnosis=diagnosis,
            fix="Send larger buckets: raise bucket_cap_mb or accumulate gradients",
            show_share=False,  # packet time summed over links and streams: no share of the step
        )
        evidence = {
            "links": {g: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in x.items()} for g, x in groups.items()},
            "small_links": sorted(small),
            "small_us": round(time_ns / 1000, 3),
            "small_link_us": round(sum(x["small_ns"] for x in small.values()) / 1000, 3),
            "time_split": comm.as_dict() if comm is not None else None,
            "threshold_percent": limit * 100,
        }
        yield sq.gradient_sync_finding(ctx, self, message=message, total_ns=time_ns, evidence=evidence)


# -- NPU219 comm-bandwidth-contention ----------------------------------------------------------

MATMUL_TYPE = re.compile(r"matmul", re.I)


def contended_ops(ctx: RuleContext) -> list[dict]:
    """Collectives that moved data over SDMA while a MatMul kernel ran, with their SDMA bandwidth
    (communication.json's own ``Bandwidth(GB/s)``), size and transfer time (the advisor's
    ``BandwidthContentionChecker`` pairing: any time overlap of the op and a MatMul)."""
    k = ctx.profile.kernels_in_steps()
    if not len(k) or not ctx.profile.comm_ops:
        return []
    mm = pq.matches(pq.kernel_types(k), MATMUL_TYPE)
    start = k["start_ns"].to_numpy(np.int64)[mm]
    end = start + k["dur_ns"].to_numpy(np.int64)[mm]
    order = np.argsort(start)
    start, end = start[order], end[order]
    # the latest end among the MatMuls started so far: an op overlaps one iff it ends after the
    # first MatMul start and the MatMuls started before its end reach past its start
    reach = np.maximum.accumulate(end) if len(end) else end
    out = []
    for op in ctx.profile.comm_ops:
        sdma = op.bandwidth.get("SDMA")
        # pipeline send/recv move activations between stages when the schedule needs them: not
        # an overlap bucket_cap_mb or accumulation could weigh (docs/rules/NPU219.md)
        if not isinstance(sdma, dict) or comm_time.role(op) == comm_time.CommRole.PIPELINE:
            continue
        try:
            mb, ms, gbps = (float(sdma.get(key, 0) or 0) for key in ("Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)"))
        except (TypeError, ValueError):
            continue
        if mb <= 0 or op.start_ns < 0:
            continue
        op_end = op.start_ns + op.elapse_ns
        i = int(np.searchsorted(start, op_end, side="left")) - 1  # MatMuls started before the op ends
        if i >= 0 and reach[i] > op.start_ns:
            # the SDMA time as a part of the op's Transit Time (parallel links add up past it)
            wall = min(1.0, op.transit_ns / (ms * 1_000_000)) if op.transit_ns > 0 and ms > 0 else 1.0
            out.append({"op": op.name, "step": op.step, "mb": mb, "ms": ms, "gbps": gbps, "start_ns": op.start_ns,
                        "wall": wall})
    return out


@declare("NPU219", "comm-bandwidth-contention", thresholds=("sdmaBaselineGbps", "contentionBandwidthPercent"),
         backends=(Backend.ASCEND,))
class CommBandwidthContention(Rule):
    """Collectives whose SDMA bandwidth drops under 0.8x its baseline while MatMuls run beside them.

    Overlapping communication with computation hides it, but the two share the memory system: a
    MatMul streaming its operands from HBM can slow the SDMA transfers of a collective running at
    the same time. When the collective then takes longer than the compute it hides behind, the
    overlap costs more than it saves.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        baseline = float(ctx.thresholds.sdma_baseline_gbps)
        limit = baseline * ctx.thresholds.contention_bandwidth_percent / 100
        slow = [o for o in contended_ops(ctx) if o["gbps"] < limit]
        if not slow:
            return
        # time lost: the transfers' time beyond what they take at the baseline bandwidth (MB/ms = GB/s)
        lost_ns = sum(max(o["ms"] - o["mb"] / baseline, 0.0) * o["wall"] for o in slow) * 1_000_000
        if ctx.step_time_ns > 0:  # transfers of several streams may add up past the step: a share stays <= 1
            lost_ns = min(lost_ns, ctx.step_time_ns * ctx.num_steps)
        worst = min(slow, key=lambda o: o["gbps"])
        message = ctx.message(
            "SDMA contention", total_ns=lost_ns, events=len(slow), unit=Unit.COLLECTIVE,
            qualifier=f"{worst['gbps']:.1f} GB/s < {limit:.1f} GB/s beside MatMuls",
            diagnosis="overlapped MatMuls slow the transfers they hide",
            fix="Compare a run without the overlap; retune bucket_cap_mb",
        )
        evidence = {
            "ops": [{"op": o["op"], "bandwidth_gbps": round(o["gbps"], 4), "sdma_mb": round(o["mb"], 6),
                     "sdma_ms": round(o["ms"], 6)} for o in sorted(slow, key=lambda o: o["gbps"])[:10]],
            "threshold_gbps": round(limit, 4), "baseline_gbps": baseline, "lost_us": round(lost_ns / 1000, 3),
        }
        yield sq.gradient_sync_finding(ctx, self, message=message, total_ns=lost_ns, evidence=evidence)
