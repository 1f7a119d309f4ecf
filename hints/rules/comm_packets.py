"""NPU203 comm-byte-alignment and NPU204 comm-small-packets, both read from the Size
Distribution of the gradient collectives and anchored where DDP issues them.

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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.finding import Finding
from msprof_lsp.hints.registry import Rule, register
from msprof_lsp.mapping.profile.model import Backend

from .. import profile_query as pq, source_query as sq

ALIGN_LINKS = frozenset({"HCCS", "PCIE", "SIO"})
# The advisor colours the finding by the unaligned share of the SDMA transfer time.
LOW_PRIORITY, HIGH_PRIORITY = 0.2, 0.7


@register
class CommByteAlignment(Rule):
    code = "NPU203"
    name = "comm-byte-alignment"
    summary = "SDMA transfers of gradient collectives whose size is not a multiple of 512 bytes."
    rationale = (
        "SDMA moves data in 512-byte units; a transfer whose size is not a multiple of that ends in "
        "a partial burst and runs at a lower bandwidth. In data-parallel training the sizes are the "
        "gradient buckets' byte counts, set by the parameter sizes and DDP's bucket_cap_mb."
    )
    thresholds = ("commAlignBytes",)
    backends = (Backend.ASCEND,)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        align = int(ctx.thresholds.comm_align_bytes)
        sdma = [p for p in pq.packets(ctx.profile.comm_ops) if p.link in ALIGN_LINKS and p.size_bytes > align]
        bad = [p for p in sdma if p.size_bytes % align]
        if not bad:
            return
        total_ns = sum(p.total_ns for p in sdma)
        bad_ns = sum(p.total_ns for p in bad)
        per_op: dict[str, dict] = defaultdict(lambda: {"sizes": {}, "packets": 0, "us": 0.0})
        for p in bad:
            e = per_op[p.op]
            e["sizes"][str(p.size_bytes)] = e["sizes"].get(str(p.size_bytes), 0) + p.count
            e["packets"] += p.count
            e["us"] = round(e["us"] + p.total_ns / 1000, 3)
        share = bad_ns / total_ns if total_ns else 0.0
        evidence = {
            "ops": dict(sorted(per_op.items(), key=lambda kv: -kv[1]["us"])[:8]),
            "packets": sum(p.count for p in sdma),
            "unaligned_packets": sum(p.count for p in bad),
            "unaligned_us": round(bad_ns / 1000, 3),
            "sdma_us": round(total_ns / 1000, 3),
            "unaligned_time_share": round(share, 4),
            "priority": "high" if share >= HIGH_PRIORITY else "low" if share < LOW_PRIORITY else "medium",
            "align_bytes": align,
            "links": sorted({p.link for p in bad}),
        }
        count = ctx.per_step_count(sum(p.count for p in bad))
        message = ctx.message(
            "SDMA unaligned", total_ns=bad_ns, count=count, unit="transfer" if count == 1 else "transfers",
            qualifier=f"{share:.0%} of SDMA time, sizes not multiples of {align} B",
            diagnosis="partial bursts lower the link bandwidth",
            fix=f"Pad parameter sizes to {align} B multiples; regroup buckets with bucket_cap_mb",
        )
        span, conf, related = sq.gradient_sync_anchor(ctx)
        yield ctx.finding(self, span=span, message=message, total_ns=bad_ns, confidence=conf, evidence=evidence,
                          related=related)


@register
class CommSmallPackets(Rule):
    code = "NPU204"
    name = "comm-small-packets"
    summary = "Gradient collectives that move most of their data in small packets."
    rationale = (
        "Every transfer pays a fixed setup and synchronisation cost; packets well under the link's "
        "efficient size (16 MB over SDMA, 1 MB over RDMA) spend more of their time on that cost than "
        "on moving data. Larger gradient buckets or fewer synchronisations send fewer, larger packets."
    )
    thresholds = ("sdmaSmallPacketMb", "rdmaSmallPacketMb", "smallPacketMaxPercent")
    backends = (Backend.ASCEND,)

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        limit = float(ctx.thresholds.small_packet_max_percent) / 100
        groups = pq.small_packets(ctx.profile.comm_ops, sdma_mb=ctx.thresholds.sdma_small_packet_mb,
                                  rdma_mb=ctx.thresholds.rdma_small_packet_mb)
        small = {g: e for g, e in groups.items() if e["small_ratio"] > limit}
        if not small:
            return
        time_ns = sum(e["small_ns"] for e in small.values())
        worst = max(small, key=lambda g: small[g]["small_ratio"])
        e = small[worst]
        count = ctx.per_step_count(sum(x["small"] for x in small.values()))
        message = ctx.message(
            "Small packets", total_ns=time_ns, count=count, unit="packet" if count == 1 else "packets",
            qualifier=f"{e['small_ratio']:.0%} of {worst} packets under {e['limit_mb']:g} MB",
            diagnosis="per-transfer overhead dominates the collectives",
            fix="Send larger buckets: raise bucket_cap_mb or accumulate gradients",
        )
        evidence = {
            "links": {g: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in x.items()} for g, x in groups.items()},
            "small_links": sorted(small),
            "small_us": round(time_ns / 1000, 3),
            "threshold_percent": limit * 100,
        }
        span, conf, related = sq.gradient_sync_anchor(ctx)
        yield ctx.finding(self, span=span, message=message, total_ns=time_ns, confidence=conf, evidence=evidence,
                          related=related)

