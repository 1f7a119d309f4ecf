"""Which profiled step a time falls in, and how much of each step a set of intervals covers.

Readers give each kernel (and communication op) a step id, attribution and the rules keep only
what ran inside the steps: all of them ask the same question of the same sorted step ranges, so
it is answered here once, vectorised with one ``searchsorted`` per call. A profile without step
markers gets one step, the measured span of its capture (``capture_step``), so every share has
a window it cannot exceed -- unless its launches repeat, when mapping.step_infer finds the
iterations and they are the steps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from msprof_lsp.mapping.errors import Issue
from msprof_lsp.mapping.numbers import int64_of, shown
from msprof_lsp.mapping.profile.model import Profile, Step
from msprof_lsp.mapping.units import NS_PER_US, format_us

_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def step_markers(names: Sequence[str]) -> np.ndarray:
    """Per name, whether it is a ``ProfilerStep#N`` step marker (bool array)."""
    return np.fromiter((bool(_PROFILER_STEP.match(str(n))) for n in names), dtype=bool, count=len(names))


def profiler_steps(
    names: Sequence[str], starts: np.ndarray, ends: np.ndarray, issues: list[Issue] | None = None, where: str = ""
) -> list[Step]:
    """Steps from torch.profiler's ``ProfilerStep#N`` host ops (name, start and end per op), sorted
    by start, then number; an op with a missing (negative) start makes no step, nor one whose N
    is no ASCII int64 ("ProfilerStep#" + 30 digits: said in ``issues`` when given)."""
    steps = []
    bad: list[str] = []
    for i, name in enumerate(names):
        if name.startswith("ProfilerStep#"):
            m = _PROFILER_STEP.match(name)
            if m and starts[i] >= 0:
                num = int64_of(m.group(1))
                if num is None:
                    bad.append(name)
                    continue
                steps.append(Step(num, int(starts[i]), int(ends[i])))
    if bad and issues is not None:
        issues.append(Issue(where, f"{len(bad)} ProfilerStep op(s) whose number is no ASCII integer in int64 range "
                                   f"(first: {shown(bad[0])}) make no step"))
    steps.sort(key=lambda s: (s.start_ns, s.id))
    return steps


def capture_step(starts: Sequence[np.ndarray], ends: Sequence[np.ndarray]) -> Step | None:
    """The one step of a profile without step markers: first start to last end over all the
    given event columns (missing, negative starts left out); None when nothing is timed."""
    lo: int | None = None
    hi: int | None = None
    for s, e in zip(starts, ends):
        s = np.asarray(s, dtype=np.int64)
        timed = s >= 0
        if not timed.any():
            continue
        first, last = int(s[timed].min()), int(np.asarray(e, dtype=np.int64)[timed].max())
        lo = first if lo is None else min(lo, first)
        hi = last if hi is None else max(hi, last)
    if lo is None or hi is None or hi <= lo:
        return None
    return Step(0, lo, hi)


def windows(profile: Profile) -> list[Step]:
    """The step windows of a profile, sorted by start: what rules measure time in, the critical
    path walks and the HTML report's timeline draws. Its steps (ProfilerStep ranges, inferred or
    the reader's capture span); else, where the kernels carry a Step Id, one window per id
    (``step_id_windows``); else the span of its host ops and kernels, as step 0."""
    if profile.steps:
        return sorted(profile.steps, key=lambda s: s.start_ns)
    k, h = profile.kernels, profile.host_ops
    k_start, h_start = k["start_ns"].to_numpy(np.int64), h["start_ns"].to_numpy(np.int64)
    k_end = k_start + k["dur_ns"].to_numpy(np.int64)
    by_id = step_id_windows(k["step"].to_numpy(np.int64), k_start, k_end)
    if by_id:
        return by_id
    span = capture_step((k_start, h_start), (k_end, h_start + h["dur_ns"].to_numpy(np.int64)))
    return [span] if span is not None else []


def step_id_windows(step: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[Step]:
    """Windows of tasks that carry a step id (kernel_details' Step Id) but no step range: per id,
    its timed tasks' first start to last end, in start order, each opening no earlier than the
    one before closes (a task still running as the next step's first starts counts once, in the
    window it runs in). Ids whose tasks are all untimed, or fully inside an earlier window, make none."""
    timed = (step >= 0) & (starts >= 0)
    if not timed.any():
        return []
    ids, inv = np.unique(step[timed], return_inverse=True)
    lo = np.full(len(ids), np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(len(ids), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, inv, starts[timed])
    np.maximum.at(hi, inv, ends[timed])
    out: list[Step] = []
    for i in np.argsort(lo, kind="stable"):
        start = max(int(lo[i]), out[-1].end_ns) if out else int(lo[i])
        if int(hi[i]) > start:
            out.append(Step(int(ids[i]), start, int(hi[i])))
    return out


def no_step_markers_note(step: Step) -> str:
    """The one notice of a profile whose step is its capture span."""
    return (
        "no step markers (ProfilerStep#N) and no repeating launch sequence: the capture's measured "
        "span, first event to last, "
        f"{format_us(step.dur_ns / NS_PER_US)}, is used as the one step"
    )


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals as sorted, disjoint intervals."""
    if not len(starts):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, dtype=np.int64)[order]
    e = np.asarray(ends, dtype=np.int64)[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    group = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.full(len(out_s), np.iinfo(np.int64).min, dtype=np.int64)  # times may be negative
    np.maximum.at(out_e, group, e)
    return out_s, out_e


def covered_per_step(starts: np.ndarray, ends: np.ndarray, steps: Sequence[Step]) -> np.ndarray:
    """Per step (in the given order): ns of its [start, end) window covered by the union of the
    [start, end) intervals, each clipped to the window. Never more than the window: overlapping
    intervals (several streams, nested calls, threads) count once, and what runs past the
    window's edges counts in the step it runs in, not in the one that started it."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    out = np.zeros(len(steps), dtype=np.int64)
    if not len(starts):
        return out
    us, ue = merge_intervals(starts, ends)
    # cumulative covered length at each merged interval's end, to answer each window in O(log n)
    covered_before = np.concatenate([[0], np.cumsum(ue - us)])

    def covered_until(t: int) -> int:
        i = int(np.searchsorted(us, t, side="right"))  # intervals starting at or before t
        if i == 0:
            return 0
        return int(covered_before[i - 1]) + max(0, min(int(ue[i - 1]), t) - int(us[i - 1]))

    for k, step in enumerate(steps):
        out[k] = covered_until(step.end_ns) - covered_until(step.start_ns)
    return out


def _position(times: np.ndarray, steps: Sequence[Step], *, closed: bool) -> np.ndarray:
    """Per time: the position in ``steps`` (sorted by start) of the last step starting at or
    before it, when that step still holds it; -1 otherwise. Negative times are missing ones
    (the model's -1) and fall in no step."""
    starts = np.array([s.start_ns for s in steps], dtype=np.int64)
    ends = np.array([s.end_ns for s in steps], dtype=np.int64)
    i = np.searchsorted(starts, times, side="right") - 1
    end = ends[np.maximum(i, 0)]
    held = times <= end if closed else times < end
    return np.where((i >= 0) & held & (times >= 0), i, -1)


def in_steps(steps: Sequence[Step], times: np.ndarray) -> np.ndarray:
    """Which times (ns) lie inside a step's [start, end) range; every one when there are no steps."""
    times = np.asarray(times, dtype=np.int64)
    if not steps or not len(times):
        return np.ones(len(times), dtype=bool)
    ordered = sorted(steps, key=lambda s: s.start_ns)
    return _position(times, ordered, closed=False) >= 0


def step_ids(times: np.ndarray, steps: Sequence[Step], *, closed: bool = False) -> np.ndarray:
    """The id of the step holding each time, -1 outside every step. ``steps`` are sorted by start
    (as every reader builds them); ``closed`` counts a step's end time as inside it."""
    times = np.asarray(times, dtype=np.int64)
    out = np.full(len(times), -1, dtype=np.int64)
    if not steps or not len(times):
        return out
    pos = _position(times, steps, closed=closed)
    ids = np.array([s.id for s in steps], dtype=np.int64)
    inside = pos >= 0
    out[inside] = ids[pos[inside]]
    return out


__all__ = [
    "capture_step", "covered_per_step", "in_steps", "merge_intervals", "no_step_markers_note",
    "profiler_steps", "step_id_windows", "step_ids", "windows",
]
