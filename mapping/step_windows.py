"""Which profiled step a time falls in.

Readers give each kernel (and communication op) a step id, attribution and the rules keep only
what ran inside the steps: all of them ask the same question of the same sorted step ranges, so
it is answered here once, vectorised with one ``searchsorted`` per call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from .model import Step

_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def profiler_steps(names: Sequence[str], starts: np.ndarray, ends: np.ndarray) -> list[Step]:
    """Steps from torch.profiler's ``ProfilerStep#N`` host ops (name, start and end per op), sorted
    by start, then number; an op with a missing (negative) start makes no step."""
    steps = []
    for i, name in enumerate(names):
        if name.startswith("ProfilerStep#"):
            m = _PROFILER_STEP.match(name)
            if m and starts[i] >= 0:
                steps.append(Step(int(m.group(1)), int(starts[i]), int(ends[i])))
    steps.sort(key=lambda s: (s.start_ns, s.id))
    return steps


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


__all__ = ["in_steps", "profiler_steps", "step_ids"]
