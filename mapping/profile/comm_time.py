"""Where a rank's collectives spent their time (docs/numbers.md "Communication time split").

communication.json (torch_npu text export, msprof ``--analyze``) and the DB's CommAnalyzerTime give
per op its Elapse and three parts of it: Transit (data moving over a link), Wait (Notify Wait for a
peer rank; Synchronization is the part of it before the first transfer) and Idle (neither: Elapse
− Transit − Wait, the op's tasks waiting on this rank's own streams or their launch). Only
Transit is bandwidth; a collective whose time is Wait waits for a late rank, one whose time is
Idle waits for its own rank. The rules read this split before calling anything bandwidth- or
packet-bound.

The ops are told apart by role: gradient collectives (all-reduce, reduce-scatter, all-gather --
what data parallelism synchronises), pipeline point-to-point (send / receive / batch send-recv:
activations between pipeline stages) and the rest (broadcast, barriers, all-to-all).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .model import CommOp

NS_PER_US = 1000
GRADIENT = re.compile(r"all_?reduce|reduce_?scatter|all_?gather", re.I)
PIPELINE = re.compile(r"send|recv|receive", re.I)
# a rank is called late only when the others wait for it this much more than it waits for them
LATE_RANK_WAIT_RATIO = 2.0


class CommRole(str, enum.Enum):
    GRADIENT = "gradient"  # allReduce / reduceScatter / allGather
    PIPELINE = "pipeline"  # send / receive / batchSendRecv (communication.json's "p2p")
    OTHER = "other"  # broadcast, barrier, all-to-all, ...


def role(op: CommOp) -> CommRole:
    """An op's role from its name (``hcom_allReduce__586_0_1``) and its communication.json section."""
    if op.kind == "p2p" or PIPELINE.search(op.name):
        return CommRole.PIPELINE
    if GRADIENT.search(op.name):
        return CommRole.GRADIENT
    return CommRole.OTHER


class CommPart(str, enum.Enum):
    TRANSFER = "transfer"  # Transit: bytes moving
    WAIT = "wait"  # waiting for a peer rank (Notify Wait)
    IDLE = "idle"  # neither: waiting on this rank's own work or the op's launch


@dataclass(frozen=True, slots=True)
class CommSplit:
    """Elapse of a set of ops and its three parts, per step (ns); ``sync_ns`` is inside ``wait_ns``."""

    elapse_ns: float
    transit_ns: float
    wait_ns: float
    sync_ns: float
    idle_ns: float
    ops: int  # ops over the capture
    steps: int

    @property
    def largest(self) -> CommPart:
        parts = {CommPart.TRANSFER: self.transit_ns, CommPart.WAIT: self.wait_ns, CommPart.IDLE: self.idle_ns}
        return max(parts, key=lambda p: parts[p])

    @property
    def transfer_bound(self) -> bool:
        """Transit is most of the elapse: only then can bandwidth or packet sizes be what binds."""
        return self.elapse_ns > 0 and self.transit_ns * 2 >= self.elapse_ns

    def as_dict(self) -> dict[str, float | int]:
        us = lambda ns: round(ns / NS_PER_US, 3)  # noqa: E731
        return {"elapse_us": us(self.elapse_ns), "transit_us": us(self.transit_ns), "wait_us": us(self.wait_ns),
                "synchronization_us": us(self.sync_ns), "idle_us": us(self.idle_ns), "ops": self.ops,
                "steps": self.steps, "largest": self.largest.value}


def pipeline_stage(groups: Mapping[str, object]) -> int | None:
    """The rank's pipeline stage: its ``group_rank`` in the ``pp`` group of profiler_metadata.json's
    parallel_group_info (Megatron / MindSpeed name their groups so); None without one."""
    for info in groups.values():
        if isinstance(info, Mapping) and info.get("group_name") == "pp":
            stage = info.get("group_rank")
            if isinstance(stage, int) and not isinstance(stage, bool) and stage >= 0:
                return stage
    return None


def split(ops: Iterable[CommOp], roles: frozenset[CommRole] | None = None) -> CommSplit | None:
    """The split of the ops of the given roles (all when None), per step of the ops' steps.
    Absent times (-1) count as 0; a missing Idle is Elapse − Transit − Wait."""
    chosen = [op for op in ops if op.elapse_ns >= 0 and (roles is None or role(op) in roles)]
    if not chosen:
        return None
    steps = max(len({op.step for op in chosen}), 1)
    elapse = transit = wait = sync = idle = 0
    for op in chosen:
        t, w = max(op.transit_ns, 0), max(op.wait_ns, 0)
        elapse += op.elapse_ns
        transit += t
        wait += w
        sync += max(op.sync_ns, 0)
        idle += op.idle_ns if op.idle_ns >= 0 else max(op.elapse_ns - t - w, 0)
    if elapse <= 0:
        return None
    return CommSplit(elapse / steps, transit / steps, wait / steps, sync / steps, idle / steps, len(chosen), steps)


def split_by_rank(ops: Iterable[CommOp], roles: frozenset[CommRole] | None = None) -> dict[int, CommSplit]:
    """``split`` per ``CommOp.rank`` (-1: a single-rank file)."""
    per: dict[int, list[CommOp]] = {}
    for op in ops:
        per.setdefault(op.rank, []).append(op)
    out = {}
    for rank, rank_ops in per.items():
        s = split(rank_ops, roles)
        if s is not None:
            out[rank] = s
    return out


def late_rank(waits: Mapping[int, float], rank: int) -> int | None:
    """The rank the given one waits for: the one that waits least, when ``rank`` waits at least
    ``LATE_RANK_WAIT_RATIO`` times as long (a late rank arrives last, so it waits for nobody)."""
    others = {r: w for r, w in waits.items() if r != rank and w >= 0}
    if rank not in waits or not others:
        return None
    late = min(others, key=lambda r: (others[r], r))
    return late if waits[rank] > 0 and waits[rank] >= LATE_RANK_WAIT_RATIO * others[late] else None


def wall_factor(op: CommOp) -> float:
    """What one ns of this op's per-link transfer time is worth in its Transit Time: the links'
    times add up past the op's Transit when transfers run on several links or streams at once
    (AlexNet DDP: 27.3 ms over HCCS in 3.7 ms of Transit), so per-link figures are scaled by
    Transit ÷ their sum, never up. 1.0 when the op has no Transit figure (absent, or 0 beside
    link times that are not: the file then says nothing of how the links overlap)."""
    total = 0.0
    for info in op.bandwidth.values():
        if not isinstance(info, dict):
            continue
        for val in (info.get("Size Distribution") or {}).values():
            try:
                ms = float(val[1])
            except (TypeError, ValueError, IndexError):
                continue
            if math.isfinite(ms) and ms > 0:
                total += ms * 1_000_000
    if op.transit_ns <= 0 or total <= 0:
        return 1.0
    return min(1.0, op.transit_ns / total)
