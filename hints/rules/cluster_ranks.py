"""NPU207 slow-rank and NPU208 slow-link: the cluster view of a multi-rank job (the advisor's
slow-rank and slow-link analyses), anchored where data-parallel training issues its collectives.

Both read the job's ``ClusterSummary`` (mapping/profile/cluster.py: every rank loaded, its step
breakdown and link transfers), so they say nothing about a single-rank profile.

NPU207: for each of Computing, Communication(Not Overlapped) and Free per step, the gap between
the ranks' largest and smallest value as a share of the mean step (Computing + Communication(Not
Overlapped) + Free, averaged over the ranks) -- the advisor's ``SlowRankAnalyzer``; over
``slowRankGapPercent`` the job waits on its slowest rank. The slow rank is the one with the most
Computing + Free: the others wait for it inside their collectives.

NPU208: per link group (SDMA within the node, RDMA between nodes) each rank's bandwidth is its
collectives' Transit Size over their Transit Time; a gap (max - min) over ``slowLinkGapPercent``
of the mean bandwidth is a slow link -- the advisor's ``SlowLinkAnalyzer``; the rank with the
lowest bandwidth is named, with the time its transfers lost against the fastest rank's bandwidth.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.finding import Finding
from msprof_lsp.hints.registry import Data, Rule, declare
from msprof_lsp.mapping.profile.model import Backend, RankSummary
from msprof_lsp.mapping.units import format_us

from .. import source_query as sq

DIMENSIONS = (("Computing", "computing_ns"), ("Communication(Not Overlapped)", "comm_not_overlapped_ns"),
              ("Free", "free_ns"))
NS_PER_MS = 1_000_000


def rank_gaps(ranks: list[RankSummary]) -> dict[str, dict]:
    """Per dimension: max, min, the ranks holding them and the gap as a share of the mean step."""
    known = [r for r in ranks if r.computing_ns >= 0 and r.free_ns >= 0]
    if len(known) < 2:
        return {}
    mean_total = sum(r.computing_ns + r.comm_not_overlapped_ns + r.free_ns for r in known) / len(known)
    out: dict[str, dict] = {}
    for label, attr in DIMENSIONS:
        hi = max(known, key=lambda r: (getattr(r, attr), -r.rank))
        lo = min(known, key=lambda r: (getattr(r, attr), r.rank))
        gap = getattr(hi, attr) - getattr(lo, attr)
        out[label] = {"max_rank": hi.rank, "min_rank": lo.rank, "max_us": round(getattr(hi, attr) / 1000, 3),
                      "min_us": round(getattr(lo, attr) / 1000, 3), "gap_us": round(gap / 1000, 3),
                      "gap_ratio": gap / mean_total if mean_total > 0 else 0.0}
    return out


@dataclass(frozen=True, slots=True)
class StageGap:
    """The computing of the heaviest and the lightest pipeline stage (per step, mean over the
    stage's ranks): in a pipeline-parallel job the lighter stage waits in its send/recv."""

    heavy: int
    light: int
    heavy_ns: float
    light_ns: float
    heavy_ranks: tuple[int, ...]
    light_ranks: tuple[int, ...]

    @property
    def gap_ns(self) -> float:
        return self.heavy_ns - self.light_ns


def stage_gap(known: list[RankSummary]) -> StageGap | None:
    """The stage imbalance, when the ranks know their pipeline stage and there are at least two."""
    stages: dict[int, list[RankSummary]] = {}
    for r in known:
        if r.pipeline_stage >= 0:
            stages.setdefault(r.pipeline_stage, []).append(r)
    if len(stages) < 2:
        return None
    mean = {s: sum(r.computing_ns for r in rs) / len(rs) for s, rs in stages.items()}
    heavy = max(mean, key=lambda s: (mean[s], -s))
    light = min(mean, key=lambda s: (mean[s], s))
    ranks = lambda s: tuple(sorted(r.rank for r in stages[s]))  # noqa: E731
    return StageGap(heavy, light, mean[heavy], mean[light], ranks(heavy), ranks(light))


def _ranks_text(ranks: tuple[int, ...]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


@declare("NPU207", "slow-rank", thresholds=("slowRankGapPercent",), backends=(Backend.ASCEND,), needs=(Data.CLUSTER,))
class SlowRank(Rule):
    """One rank computes or idles longer than the others: the whole job waits on it.

    Data-parallel ranks meet in every gradient collective; a rank that computes longer (uneven input
    sizes, a slower device) or idles longer (host-bound data loading, a busy host) makes every other
    rank wait there, so the job runs at the speed of its slowest rank.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        gaps = rank_gaps(ctx.cluster.ranks)
        limit = ctx.thresholds.slow_rank_gap_percent / 100
        over = {d: g for d, g in gaps.items() if g["gap_ratio"] > limit}
        if not over:
            return
        known = [r for r in ctx.cluster.ranks if r.computing_ns >= 0 and r.free_ns >= 0]
        slow = max(known, key=lambda r: (r.computing_ns + r.free_ns, -r.rank))
        worst = max(over, key=lambda d: over[d]["gap_ratio"])
        w = over[worst]
        # the gap is at most the slowest rank's step; of another analysed rank's step, a share <= 1
        gap_ns = min(w["gap_us"] * 1000, ctx.step_time_ns) if ctx.step_time_ns > 0 else w["gap_us"] * 1000
        evidence = {
            "dimensions": {d: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in g.items()} for d, g in gaps.items()},
            "over": sorted(over),
            "slow_rank": slow.rank,
            "ranks": {str(r.rank): {"computing_us": round(r.computing_ns / 1000, 3),
                                    "comm_not_overlapped_us": round(r.comm_not_overlapped_ns / 1000, 3),
                                    "free_us": round(r.free_ns / 1000, 3)} for r in known},
            "threshold_ratio": limit,
        }
        qualifier = (f"{worst} {format_us(w['max_us'])} on rank {w['max_rank']} vs {format_us(w['min_us'])} on rank "
                     f"{w['min_rank']} ({w['gap_ratio']:.0%} of the mean step)")
        stage = stage_gap(known)
        if stage is not None and stage.gap_ns > 0:
            # pipeline stages compute different layers: the gap is the split of the model, not a
            # late rank, and the lighter stage's wait sits in its send/recv, not in bucketed all-reduces
            gap_ns = min(stage.gap_ns, ctx.step_time_ns) if ctx.step_time_ns > 0 else stage.gap_ns
            evidence["stage_imbalance"] = {"heavy_stage": stage.heavy, "light_stage": stage.light,
                                           "heavy_computing_us": round(stage.heavy_ns / 1000, 3),
                                           "light_computing_us": round(stage.light_ns / 1000, 3)}
            qualifier = (f"pipeline stage {stage.heavy} computes {format_us(stage.heavy_ns / 1000)} "
                         f"({_ranks_text(stage.heavy_ranks)}) vs {format_us(stage.light_ns / 1000)} on stage "
                         f"{stage.light} ({_ranks_text(stage.light_ranks)})")
            diagnosis, fix = (f"stage imbalance: stage {stage.light} waits for stage {stage.heavy} in its send/recv",
                              f"Move layers from stage {stage.heavy} to stage {stage.light}")
        elif worst == "Computing":
            diagnosis, fix = f"rank {slow.rank} computes longest; the others wait in its collectives", \
                "Balance the ranks' batches and sequence lengths"
        elif worst == "Free":
            diagnosis, fix = f"rank {slow.rank} idles longest (host-bound); the others wait for it", \
                "Check the slow rank's data loading; more DataLoader workers"
        else:
            diagnosis, fix = "ranks wait for each other inside the collectives", \
                "Find the late rank; overlap with bucket_cap_mb or gradient accumulation"
        message = ctx.message("Slow rank", total_ns=gap_ns * ctx.num_steps, qualifier=qualifier,
                              diagnosis=diagnosis, fix=fix)
        yield sq.gradient_sync_finding(ctx, self, message=message, total_ns=gap_ns * ctx.num_steps, evidence=evidence)


def link_gaps(ranks: list[RankSummary]) -> dict[str, dict]:
    """Per link group with traffic on at least two ranks: each rank's bandwidth (GB/s = MB/ms),
    the slowest and fastest rank, and the gap as a share of the mean bandwidth."""
    out: dict[str, dict] = {}
    for group in ("SDMA", "RDMA"):
        bw = {r.rank: r.link_totals[group][0] / r.link_totals[group][1] for r in ranks if group in r.link_totals}
        if len(bw) < 2:
            continue
        mean = sum(bw.values()) / len(bw)
        lo = min(bw, key=lambda k: (bw[k], k))
        hi = max(bw, key=lambda k: (bw[k], -k))
        slow = next(r for r in ranks if r.rank == lo)
        mb, ms = slow.link_totals[group]
        lost_ms = max(ms - mb / bw[hi], 0.0)  # its transfers at the fastest rank's bandwidth
        out[group] = {"bandwidth_gbps": {str(k): round(v, 4) for k, v in sorted(bw.items())}, "slow_rank": lo,
                      "fast_rank": hi, "mean_gbps": round(mean, 4), "gap_ratio": (bw[hi] - bw[lo]) / mean if mean else 0.0,
                      "lost_ms": lost_ms}
    return out


@declare("NPU208", "slow-link", thresholds=("slowLinkGapPercent",), backends=(Backend.ASCEND,), needs=(Data.CLUSTER,))
class SlowLink(Rule):
    """One rank's collectives move data much slower than the others' over the same kind of link.

    The ranks of a collective move their share of the gradients over the same kind of link; one rank
    whose transfers run at a fraction of the others' bandwidth (a degraded link, a congested switch
    port, another job on its node) sets the pace of every collective it takes part in.
    """

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        limit = ctx.thresholds.slow_link_gap_percent / 100
        gaps = link_gaps(ctx.cluster.ranks)
        over = {g: e for g, e in gaps.items() if e["gap_ratio"] > limit}
        if not over:
            return
        group = max(over, key=lambda g: over[g]["gap_ratio"])
        e = over[group]
        steps = max(ctx.num_steps, 1)
        lost_ns = min(e["lost_ms"] * NS_PER_MS, ctx.step_time_ns * steps) if ctx.step_time_ns > 0 else e["lost_ms"] * NS_PER_MS
        bw = e["bandwidth_gbps"]
        message = ctx.message(
            "Slow link", total_ns=lost_ns,
            qualifier=f"{group} {bw[str(e['slow_rank'])]:.2f} GB/s on rank {e['slow_rank']} vs "
                      f"{bw[str(e['fast_rank'])]:.2f} GB/s on rank {e['fast_rank']} ({e['gap_ratio']:.0%} gap)",
            diagnosis=f"rank {e['slow_rank']}'s transfers set the pace of every collective",
            fix="Check that rank's links; fewer, larger buckets via bucket_cap_mb",
        )
        evidence = {"links": {g: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in x.items()} for g, x in gaps.items()},
                    "over": sorted(over), "threshold_ratio": limit, "lost_us_per_step": round(lost_ns / steps / 1000, 3)}
        yield sq.gradient_sync_finding(ctx, self, message=message, total_ns=lost_ns, evidence=evidence)
