"""Work grows linearly with the input, and memory is bounded before buffering (issue 22, item 5).

No wall-time thresholds: each scaling test counts work -- Python line events inside the critical
path module (``sys.settrace``) plus the segments its per-line pass touches (a list that counts
what is read from it, slices included) -- for n and 4n hostile rows, and asserts the count grew
within a constant factor of 4x. The quadratic versions grow 16x. The gzip tests configure a small
decompressed-size limit and count the bytes the reader inflated before it refused.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.profile.model import (
    HOST_EVENT_SCHEMA,
    HOST_OP_SCHEMA,
    KERNEL_SCHEMA,
    Profile,
    ProfileKind,
    ProfileMeta,
    Step,
    make_table,
)
from msprof_lsp.mapping.source import critical_path as cp_mod
from msprof_lsp.mapping.source.critical_path import critical_path, step_paths
from msprof_lsp.mapping.source.heat import Attribution, LineHeat, Site, SourceHeat
from msprof_lsp.mapping.spans import Confidence, Span

# ---------------------------------------------------------------------------------------------
# Hostile profiles of n rows (benchmarks/bench_critical_path.py times the same cases)


def _profile(host_ops: dict, kernels: dict, events: dict | None = None, end_ns: int = 0) -> Profile:
    p = Profile(meta=ProfileMeta(ProfileKind.TORCH_NPU, "/nowhere"), host_ops=make_table(HOST_OP_SCHEMA, host_ops),
                kernels=make_table(KERNEL_SCHEMA, kernels))
    if events:
        p.host_events = make_table(HOST_EVENT_SCHEMA, events)
    p.steps = [Step(1, 0, end_ns)]
    return p


def unmatched_tasks(n: int) -> Profile:
    """One linked kernel, then ``n`` device tasks whose connection id matched no host op (as extra
    DB TASK rows give): one stream, a gap before each, so the path is 2n segments of task and wait."""
    starts = [30] + [100 + 20 * i for i in range(n)]
    return _profile(
        {"name": ["ProfilerStep#1", "aten::mm"], "start_ns": [0, 10], "dur_ns": [25, 10],
         "pid": [1, 1], "tid": [1, 1]},
        {"name": ["gemm"] + ["task"] * n, "core": ["AI_CORE"] * (n + 1), "start_ns": starts,
         "dur_ns": [10] * (n + 1), "stream": [7] * (n + 1), "device": [0] * (n + 1), "step": [1] * (n + 1),
         "host_op": [1] + [-1] * n},
        end_ns=200 + 20 * n,
    )


def event_tasks(n: int) -> Profile:
    """Stream 2 records one event; stream 1 then records ``n`` events of its own, each followed by
    an EVENT_WAIT: every wait's source is the one record of stream 2, behind all of stream 1's."""
    names = ["gemm", "EVENT_RECORD"] + ["EVENT_RECORD", "EVENT_WAIT"] * n
    starts = [20, 40] + [s for i in range(n) for s in (100 + 20 * i, 110 + 20 * i)]
    m = len(names)
    return _profile(
        {"name": ["ProfilerStep#1", "aten::mm"], "start_ns": [0, 10], "dur_ns": [25, 5],
         "pid": [1, 1], "tid": [1, 1]},
        {"name": names, "core": ["AI_CORE"] + [""] * (m - 1), "start_ns": starts, "dur_ns": [5] * m,
         "stream": [7, 2] + [1] * (2 * n), "device": [0] * m, "step": [1] * m, "host_op": [1] + [-1] * (m - 1)},
        end_ns=200 + 20 * n,
    )


def thread_launches(n: int) -> Profile:
    """``n`` host threads, each with one op that launches one kernel."""
    return _profile(
        {"name": ["ProfilerStep#1"] + ["aten::add"] * n, "start_ns": [0] + [10 + i for i in range(n)],
         "dur_ns": [20 * n + 100] + [5] * n, "pid": [1] * (n + 1), "tid": [0] + list(range(1, n + 1))},
        {"name": ["add"] * n, "core": ["AI_CORE"] * n, "start_ns": [20 + 10 * i for i in range(n)],
         "dur_ns": [5] * n, "stream": [7] * n, "device": [0] * n, "step": [1] * n, "host_op": list(range(1, n + 1))},
        end_ns=20 * n + 200,
    )


def overlapping_ops(n: int) -> Profile:
    """``n`` host ops on one thread that overlap without nesting (each ends after the next began,
    first ended first), plus runtime calls inside them; one linked kernel."""
    return _profile(
        {"name": ["ProfilerStep#1"] + ["op"] * n, "start_ns": [0] + [10 + 2 * i for i in range(n)],
         "dur_ns": [10 * n + 100] + [3 * n] * n, "pid": [1] * (n + 1), "tid": [1] * (n + 1)},
        {"name": ["k"], "core": ["AI_CORE"], "start_ns": [20], "dur_ns": [5], "stream": [7], "device": [0],
         "step": [1], "host_op": [1]},
        {"name": ["aclrtSynchronizeStream"] * n, "cat": ["runtime"] * n, "start_ns": [11 + 2 * i for i in range(n)],
         "dur_ns": [1] * n, "pid": [1] * n, "tid": [1] * n},
        end_ns=10 * n + 200,
    )


def attribution(p: Profile) -> Attribution:
    """Every kernel and host op on one source line."""
    sites = [Site(Span("/w/m.py", 3, 0, 3, 5), Confidence.STACK, "f", "a()")]
    heat = SourceHeat(1.0, 1, [], [LineHeat("/w/m.py", 3, 1, 1.0, 1.0)], [], 1, 1, 0)
    return Attribution(sites, np.zeros(len(p.kernels), np.int64), np.zeros(len(p.host_ops), np.int64), heat)


# ---------------------------------------------------------------------------------------------
# Counting work


class CountingList(list):
    """A list that counts the items read from it: by index, by slice, by iteration."""

    reads = 0

    def __getitem__(self, key):  # noqa: ANN001, ANN204
        got = super().__getitem__(key)
        CountingList.reads += len(got) if isinstance(key, slice) else 1
        return got

    def __iter__(self):  # noqa: ANN204
        CountingList.reads += len(self)
        return super().__iter__()


def line_events(fn: Callable[[], object]) -> int:
    """Python lines executed inside mapping/source/critical_path.py while ``fn`` runs."""
    target = cp_mod.__file__
    count = 0

    def local(frame, event, arg):  # noqa: ANN001, ANN202
        nonlocal count
        if event == "line":
            count += 1
        return local

    def calls(frame, event, arg):  # noqa: ANN001, ANN202
        return local if frame.f_code.co_filename == target else None

    old = sys.gettrace()
    sys.settrace(calls)
    try:
        fn()
    finally:
        sys.settrace(old)
    return count


def path_work(p: Profile) -> int:
    """Work of the step graphs and paths, then of the per-line pass over the path's segments."""
    work = line_events(lambda: step_paths(p))
    for sp in step_paths(p).steps:
        sp.segments = CountingList(sp.segments)
    CountingList.reads = 0
    work += line_events(lambda: critical_path(p, attribution(p)))
    return work + CountingList.reads


def growth(build: Callable[[int], Profile], n: int) -> float:
    return path_work(build(4 * n)) / path_work(build(n))


@pytest.mark.parametrize("build", [unmatched_tasks, event_tasks, thread_launches, overlapping_ops])
def test_critical_path_work_grows_linearly(build):
    p = build(300)
    cp = critical_path(p, attribution(p))
    assert cp.unavailable is None and cp.steps and cp.lines
    # 4x the rows: 4x the work, give or take the sorts' log factor; quadratic work would be 16x
    assert growth(build, 300) < 6


def test_unmatched_tasks_path_is_all_of_them():
    """The scaling case is a real path: every unlinked task is on it, with the gap before it."""
    cp = critical_path(unmatched_tasks(50), None)
    kernels = [s.kernel for s in cp.steps[0].segments if s.kernel >= 0]
    assert kernels[-50:] == list(range(1, 51))


def test_event_waits_find_the_other_streams_record():
    """Each EVENT_WAIT of stream 1 waits for stream 2's record, the latest record of another
    stream of its device, however many of its own stream's records come between."""
    p = event_tasks(20)
    g, _ = cp_mod.step_graph(p, p.steps[0])
    event = g.dep == cp_mod._DEPS.index(cp_mod.Dependency.EVENT)
    # the record's end node is the source of each event edge: all the same node, one per wait
    assert event.sum() == 20
    assert len(set(g.src[event].tolist())) == 1
    rec_node = int(g.src[event][0])
    assert g.time[rec_node] == 45  # stream 2's record ends at 40 + 5
