"""Overlap Analysis from device tasks (trace_view ``Overlap Analysis`` lanes, step_trace_time.csv).

Computing = union of non-communication operator tasks (not runtime copies / events);
Communication = union of collectives;
Communication(Not Overlapped) = Communication minus Computing; Free = the rest of the span from the
step's first operator/collective task start to its last one's end. Stage = Computing + Not Overlapped + Free (= span),
Bubble 0, Preparing = first task start - ProfilerStep start.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .clock import StepTimeline

Interval = tuple[int, int]

LANES = ("Computing", "Communication", "Communication(Not Overlapped)", "Free")


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def subtract(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Parts of merged ``a`` not covered by merged ``b``."""
    out: list[Interval] = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            if cur >= e:
                break
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def total(intervals: Iterable[Interval]) -> int:
    return sum(e - s for s, e in intervals)


@dataclass(frozen=True, slots=True)
class StepOverlap:
    step: int
    computing: list[Interval]
    communication: list[Interval]
    not_overlapped: list[Interval]
    free: list[Interval]
    first_ns: int  # first device task start (-1 if none)
    last_ns: int
    step_start_ns: int

    @property
    def lanes(self) -> dict[str, list[Interval]]:
        return {
            "Computing": self.computing,
            "Communication": self.communication,
            "Communication(Not Overlapped)": self.not_overlapped,
            "Free": self.free,
        }

    # figures in ns
    @property
    def computing_ns(self) -> int:
        return total(self.computing)

    @property
    def comm_ns(self) -> int:
        return total(self.communication)

    @property
    def not_overlapped_ns(self) -> int:
        return total(self.not_overlapped)

    @property
    def overlapped_ns(self) -> int:
        return self.comm_ns - self.not_overlapped_ns

    @property
    def free_ns(self) -> int:
        return total(self.free)

    @property
    def stage_ns(self) -> int:
        return self.computing_ns + self.not_overlapped_ns + self.free_ns

    @property
    def preparing_ns(self) -> int:
        return self.first_ns - self.step_start_ns if self.first_ns >= 0 else 0


def step_overlap(tl: StepTimeline) -> StepOverlap:
    # Operator tasks only: runtime tasks (MEMCPY_ASYNC, events) are neither Computing nor part of
    # the stage span -- the real exports (Ascend-msinsight level1) leave their copies in Free/Preparing.
    tasks = [k for k in tl.kernels if k.spec.is_op or k.spec.is_comm]
    comp = merge((k.start_ns, k.end_ns) for k in tasks if not k.spec.is_comm)
    comm = merge((k.start_ns, k.end_ns) for k in tasks if k.spec.is_comm)
    if not tasks:
        return StepOverlap(tl.number, [], [], [], [], -1, -1, tl.start_ns)
    first = min(k.start_ns for k in tasks)
    last = max(k.end_ns for k in tasks)
    busy = merge(comp + comm)
    free = subtract([(first, last)], busy)
    return StepOverlap(tl.number, comp, comm, subtract(comm, comp), free, first, last, tl.start_ns)
