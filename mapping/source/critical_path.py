"""The critical path of a step: the chain of dependent host and device work that set its length.

The step becomes an event graph (docs/numbers.md "Critical path" is the user-facing version):

* every host op, runtime call and device task is an interval; its start and end are nodes;
* each host thread is one chain of its boundary points in time order; the piece between two
  points belongs to the innermost open host op (its self time), or is waiting inside a
  synchronisation call (cudaDeviceSynchronize, aclrtSynchronizeStream, ...);
* a launch edge runs from the launching op's last point not after the kernel's start to the
  kernel's start;
* each device stream is a chain of its tasks in start order;
* an Ascend EVENT_WAIT / Notify Wait task ends after the latest EVENT_RECORD / Notify Record of
  another stream of its device that ended before it did (how a compute stream waits for a
  collective on the communication stream);
* a host synchronisation call ends after the latest device task that ended before it did.

An edge into a node weighs the time from the node's last-arriving predecessor to the node: the
binding dependency carries the real delay, a dependency met earlier carries no slack. The
heaviest path (:func:`longest_path`, the core, over any DAG) is then the chain of work and
delays that set the step's end; a sync call's blocked time is off it whenever the device work
it waited for is on it.
"""

from __future__ import annotations

import enum
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from msprof_lsp.mapping.source.heat import Attribution
from msprof_lsp.mapping.profile.model import Profile, Step
from msprof_lsp.mapping.profile.step_windows import windows
from msprof_lsp.mapping.profile.timemodel import TaskClass, task_classes, work_mask

MAX_STEPS = 8  # steps analysed per profile (the first ones); each is its own graph

# Runtime calls that block the host until device work is done: the syncs, and the memory copies
# (a copy to pageable host memory returns only when the copy, queued behind the stream, is done)
SYNC_CALL = re.compile(
    r"(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|aclrtSynchronize\w*|"
    r"cudaMemcpy\w*|aclrtMemcpy\w*)$"
)
_EVENT_WAIT = re.compile(r"^(EVENT_WAIT|Notify[ _]Wait)")
_EVENT_RECORD = re.compile(r"^(EVENT_RECORD|Notify[ _]Record)")


class SegmentKind(str, enum.Enum):
    """What the path does during one of its segments."""

    HOST = "host"  # host op self time (or host time between ops)
    KERNEL = "kernel"  # a device compute kernel or memory copy
    COMM = "comm"  # a collective / communication task
    WAIT = "wait"  # a dependency delay: launch delay, stream gap, record -> wait, device -> sync


class Dependency(str, enum.Enum):
    """What a wait segment waited on."""

    LAUNCH = "launch"  # the host launching the task
    STREAM = "stream"  # the previous task on the same stream
    EVENT = "event"  # an event recorded on another stream (EVENT_RECORD -> EVENT_WAIT)
    SYNC = "sync"  # a host synchronisation call waiting for the device


@dataclass(frozen=True, slots=True)
class Edge:
    src: int
    dst: int
    weight: int  # ns


@dataclass(frozen=True, slots=True)
class Segment:
    kind: SegmentKind
    start_ns: int
    end_ns: int
    weight_ns: int  # time this segment adds to the path
    host_op: int = -1  # host_ops row whose self time this is
    kernel: int = -1  # kernels row
    name: str = ""  # the kernel or host op; for a wait, what it waited on (Dependency)


@dataclass(slots=True)
class StepPath:
    step: int
    total_ns: int  # sum of the path's segment weights
    span_ns: int  # end of the path's last node - start of its first
    segments: list[Segment]

    def by_kind(self) -> dict[SegmentKind, int]:
        out = {k: 0 for k in SegmentKind}
        for s in self.segments:
            out[s.kind] += s.weight_ns
        return out


@dataclass(slots=True)
class LinePath:
    path: str
    line: int
    total_per_step_ns: float  # the line's device time per step (heat)
    on_path_per_step_ns: float  # its work kernels' time on the critical path, per analysed step
    host_on_path_per_step_ns: float  # its host ops' self time on the path, per analysed step


@dataclass(slots=True)
class CriticalPath:
    steps: list[StepPath]
    lines: list[LinePath] = field(default_factory=list)  # most on-path time first
    notes: list[str] = field(default_factory=list)

    @property
    def total_per_step_ns(self) -> float:
        return sum(s.total_ns for s in self.steps) / len(self.steps) if self.steps else 0.0

    def by_kind_per_step(self) -> dict[SegmentKind, float]:
        out = {k: 0.0 for k in SegmentKind}
        for s in self.steps:
            for k, v in s.by_kind().items():
                out[k] += v / len(self.steps)
        return out


# ---------------------------------------------------------------------------------------------
# The core


def longest_path(n: int, edges: Sequence[Edge], end: int) -> tuple[int, list[int]] | None:
    """The heaviest path of a DAG with ``n`` nodes that ends at ``end``: (its weight, the edge
    indices along it, first to last). Any node may start it. None when ``end`` sits on a cycle."""
    out: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i, e in enumerate(edges):
        out[e.src].append(i)
        indeg[e.dst] += 1
    dist = [0] * n
    best_in = [-1] * n
    queue = deque(v for v in range(n) if indeg[v] == 0)
    done = 0
    while queue:
        u = queue.popleft()
        done += 1
        du = dist[u]
        for i in out[u]:
            e = edges[i]
            d = du + e.weight
            if best_in[e.dst] < 0 or d > dist[e.dst]:
                dist[e.dst], best_in[e.dst] = d, i
            indeg[e.dst] -= 1
            if indeg[e.dst] == 0:
                queue.append(e.dst)
    if indeg[end] > 0:
        return None
    path = []
    v = end
    while best_in[v] >= 0:
        path.append(best_in[v])
        v = edges[best_in[v]].src
    path.reverse()
    return dist[end], path


# ---------------------------------------------------------------------------------------------
# The graph of one step


class _Graph:
    """Nodes (times) and edges; weights are set once every edge is known (:meth:`finish`)."""

    def __init__(self) -> None:
        self.time: list[int] = []
        self._edges: list[tuple[int, int, SegmentKind, int, int, str]] = []
        self.edges: list[Edge] = []
        self.seg: list[Segment] = []

    def node(self, t: int) -> int:
        self.time.append(t)
        return len(self.time) - 1

    def edge(self, u: int, v: int, kind: SegmentKind, host_op: int = -1, kernel: int = -1, name: str = "") -> None:
        self._edges.append((u, v, kind, host_op, kernel, name))

    def finish(self) -> None:
        """Weigh each edge u -> v by the time v came after its *last-arriving* predecessor: the
        binding dependency carries v's real delay, and a dependency that was met earlier carries
        no more than that (its slack is not on any path)."""
        arrival = [-(1 << 62)] * len(self.time)
        for u, v, *_ in self._edges:
            arrival[v] = max(arrival[v], self.time[u])
        self.edges, self.seg = [], []
        for u, v, kind, op, k, name in self._edges:
            w = max(0, self.time[v] - arrival[v])
            self.edges.append(Edge(u, v, w))
            self.seg.append(Segment(kind, self.time[u], self.time[v], w, op, k, name))


_KIND_OF_CLASS = {
    TaskClass.COMPUTE: SegmentKind.KERNEL,
    TaskClass.MEMCPY: SegmentKind.KERNEL,
    TaskClass.OTHER: SegmentKind.KERNEL,
    TaskClass.COMMUNICATION: SegmentKind.COMM,
    TaskClass.WAIT: SegmentKind.WAIT,
}


@dataclass(slots=True)
class _Tables:
    """The columns the graphs read, converted once per profile (not once per step)."""

    h_start: np.ndarray
    h_end: np.ndarray
    h_pid: np.ndarray
    h_tid: np.ndarray
    h_names: np.ndarray
    e_start: np.ndarray
    e_end: np.ndarray
    e_pid: np.ndarray
    e_tid: np.ndarray
    e_sync: np.ndarray  # bool: a blocking runtime call
    k_step: np.ndarray
    k_start: np.ndarray
    k_end: np.ndarray
    k_names: np.ndarray
    k_dev: np.ndarray
    k_stream: np.ndarray
    k_launcher: np.ndarray
    k_classes: np.ndarray

    @classmethod
    def of(cls, profile: Profile) -> "_Tables":
        h, k, ev = profile.host_ops, profile.kernels, profile.host_events
        i8 = np.int64
        h_start, e_start, k_start = (t["start_ns"].to_numpy(i8) for t in (h, ev, k))
        e_names = ev["name"].astype(str).to_numpy()
        sync_names = {n for n in set(e_names.tolist()) if SYNC_CALL.search(n)}
        return cls(
            h_start, h_start + h["dur_ns"].to_numpy(i8), h["pid"].to_numpy(i8), h["tid"].to_numpy(i8),
            h["name"].astype(str).to_numpy(),
            e_start, e_start + ev["dur_ns"].to_numpy(i8), ev["pid"].to_numpy(i8), ev["tid"].to_numpy(i8),
            np.isin(e_names, list(sync_names)) if sync_names else np.zeros(len(e_names), dtype=bool),
            k["step"].to_numpy(i8), k_start, k_start + k["dur_ns"].to_numpy(i8), k["name"].astype(str).to_numpy(),
            k["device"].to_numpy(i8), k["stream"].to_numpy(i8), k["host_op"].to_numpy(i8), task_classes(k),
        )


def step_graph(profile: Profile, step: Step, tables: _Tables | None = None) -> tuple[_Graph, int] | None:
    """The event graph of one step and its end node (the latest node); None when the step is
    empty."""
    g = _Graph()
    t = tables if tables is not None else _Tables.of(profile)
    h_start, h_end, e_start, e_end = t.h_start, t.h_end, t.e_start, t.e_end
    k_step, k_start, k_end = t.k_step, t.k_start, t.k_end
    h_in = np.flatnonzero((h_start >= step.start_ns) & (h_start < step.end_ns))
    e_in = np.flatnonzero((e_start >= step.start_ns) & (e_start < step.end_ns))
    if (k_step >= 0).any():
        k_in = np.flatnonzero(k_step == step.id)
    else:
        k_in = np.flatnonzero((k_start >= step.start_ns) & (k_start < step.end_ns))

    # -- host threads: one chain of boundary points each ----------------------------------------
    # items: (start, end, host_op row or -1, is a sync call)
    threads: dict[tuple[int, int], list[tuple[int, int, int, bool]]] = {}
    for r, p_, t_, a_, b_ in zip(h_in.tolist(), t.h_pid[h_in].tolist(), t.h_tid[h_in].tolist(),
                                 h_start[h_in].tolist(), h_end[h_in].tolist()):
        threads.setdefault((p_, t_), []).append((a_, b_, r, False))
    syncs: list[tuple[int, int]] = []  # (end node, end time) of sync calls
    for p_, t_, a_, b_, sy in zip(t.e_pid[e_in].tolist(), t.e_tid[e_in].tolist(), e_start[e_in].tolist(),
                                  e_end[e_in].tolist(), t.e_sync[e_in].tolist()):
        threads.setdefault((p_, t_), []).append((a_, b_, -1, sy))
    op_thread: dict[int, tuple[int, int]] = {}
    op_nodes: dict[int, tuple[int, int]] = {}  # host op row -> (first point index, last) in its thread
    thread_points: dict[tuple[int, int], tuple[np.ndarray, list[int]]] = {}
    for key, items in threads.items():
        points: list[tuple[int, int, int, int]] = []  # (time, 0 end / 1 start, tie, item)
        for i, (s, e, _, _) in enumerate(items):
            points.append((s, 1, -(e - s), i))  # at one time: ends, then starts longest first
            points.append((e, 0 if e > s else 2, e - s, i))  # an empty item closes right after it opens
        points.sort()
        nodes = [g.node(p[0]) for p in points]
        open_items: list[int] = []
        first: dict[int, int] = {}
        for j, (when, is_start, _, i) in enumerate(points):
            if j > 0:
                top = open_items[-1] if open_items else -1
                if top >= 0 and items[top][3]:  # inside a sync call: waiting for the device
                    g.edge(nodes[j - 1], nodes[j], SegmentKind.WAIT, name=Dependency.SYNC.value)
                else:  # self time of the innermost open host op (runtime calls count as their op's)
                    op = next((items[i][2] for i in reversed(open_items) if items[i][2] >= 0), -1)
                    g.edge(nodes[j - 1], nodes[j], SegmentKind.HOST, host_op=op)
            if is_start:
                open_items.append(i)
                first[i] = j
            else:
                if open_items and open_items[-1] == i:
                    open_items.pop()
                elif i in open_items:  # improperly nested items close wherever they are
                    open_items.remove(i)
                row = items[i][2]
                if row >= 0:
                    op_nodes[row] = (first[i], j)
                    op_thread[row] = key
                if items[i][3]:
                    syncs.append((nodes[j], when))
        thread_points[key] = (np.array([p[0] for p in points], dtype=np.int64), nodes)

    # -- device streams --------------------------------------------------------------------------
    names, dev, stream, launcher, classes = t.k_names, t.k_dev, t.k_stream, t.k_launcher, t.k_classes
    k_nodes: dict[int, tuple[int, int]] = {}
    order = k_in[np.lexsort((k_start[k_in], stream[k_in], dev[k_in]))]
    prev_end = -1
    prev_key: tuple[int, int] | None = None
    for r, s0, s1, cls, d_, st_, op, name in zip(
            order.tolist(), k_start[order].tolist(), k_end[order].tolist(), classes[order].tolist(),
            dev[order].tolist(), stream[order].tolist(), launcher[order].tolist(), names[order].tolist()):
        kind = _KIND_OF_CLASS[TaskClass(cls)]
        a, b = g.node(s0), g.node(s1)
        g.edge(a, b, kind, kernel=r, name=name)
        k_nodes[r] = (a, b)
        key = (d_, st_)
        if key == prev_key:
            g.edge(prev_end, a, SegmentKind.WAIT, name=Dependency.STREAM.value)
        prev_end, prev_key = b, key
        if op in op_nodes:
            times, nodes = thread_points[op_thread[op]]
            lo, hi = op_nodes[op]
            j = int(np.searchsorted(times[lo:hi + 1], s0, side="right")) - 1 + lo
            g.edge(nodes[max(j, lo)], a, SegmentKind.WAIT, name=Dependency.LAUNCH.value)

    # -- cross-stream events (Ascend EVENT_RECORD -> EVENT_WAIT) --------------------------------
    rec = [r for r in k_in.tolist() if _EVENT_RECORD.match(names[r])]
    if rec:
        rec_end = np.array([k_end[r] for r in rec], dtype=np.int64)
        o = np.argsort(rec_end, kind="stable")
        rec_sorted = [rec[i] for i in o.tolist()]
        rec_end = rec_end[o]
        for r in k_in.tolist():
            if not _EVENT_WAIT.match(names[r]):
                continue
            j = int(np.searchsorted(rec_end, k_end[r], side="right")) - 1
            while j >= 0 and (dev[rec_sorted[j]] != dev[r] or stream[rec_sorted[j]] == stream[r]):
                j -= 1
            if j >= 0:
                g.edge(k_nodes[rec_sorted[j]][1], k_nodes[r][1], SegmentKind.WAIT, name=Dependency.EVENT.value)

    # -- host synchronisation: the sync call ends after the device work it waited for ---------
    if syncs and len(k_in):
        work = k_in[classes[k_in] != int(TaskClass.WAIT)]
        o = np.argsort(k_end[work], kind="stable")
        work_sorted = work[o].tolist()
        ends = k_end[work][o]
        for node, when in syncs:
            j = int(np.searchsorted(ends, when, side="right")) - 1
            if j >= 0:
                g.edge(k_nodes[work_sorted[j]][1], node, SegmentKind.WAIT, name=Dependency.SYNC.value)

    if not g.time:
        return None
    times = np.asarray(g.time, dtype=np.int64)
    return g, int(np.flatnonzero(times == times.max())[-1])


def step_path(profile: Profile, step: Step, tables: _Tables | None = None) -> StepPath | None:
    built = step_graph(profile, step, tables)
    if built is None:
        return None
    g, _ = built
    # several nodes may share the latest time: a sink after all of them lets the path end at the
    # heaviest one
    last = max(g.time)
    ends = [i for i, t in enumerate(g.time) if t == last]
    sink = g.node(last)
    for v in ends:
        g.edge(v, sink, SegmentKind.WAIT)
    g.finish()
    res = longest_path(len(g.time), g.edges, sink)
    if res is None:
        return None
    total, path = res
    segments = [g.seg[i] for i in path[:-1]]
    span = (segments[-1].end_ns - segments[0].start_ns) if segments else 0
    h_names = tables.h_names if tables is not None else profile.host_ops["name"].astype(str).to_numpy()
    kept: list[Segment] = []
    for s in segments:
        if s.weight_ns <= 0:
            continue
        if s.kind is SegmentKind.HOST and s.host_op >= 0:
            s = replace(s, name=str(h_names[s.host_op]))
        last = kept[-1] if kept else None
        if (last is not None and last.end_ns == s.start_ns and last.kind is s.kind and last.name == s.name
                and last.host_op == s.host_op and last.kernel == s.kernel):
            # one op's self time split by its children's boundaries reads as one segment
            kept[-1] = replace(last, end_ns=s.end_ns, weight_ns=last.weight_ns + s.weight_ns)
        else:
            kept.append(s)
    return StepPath(step.id, total, span, kept)


# ---------------------------------------------------------------------------------------------
# Per profile, per source line


def critical_path(profile: Profile, attribution: Attribution | None = None, max_steps: int = MAX_STEPS) -> CriticalPath:
    """The critical path of each of the first ``max_steps`` steps, and per source line its time on
    the path next to its total (``attribution``'s heat), both per step."""
    steps = windows(profile)
    notes = []
    if len(steps) > max_steps:
        notes.append(f"critical path of the first {max_steps} of {len(steps)} steps")
        steps = steps[:max_steps]
    tables = _Tables.of(profile)
    paths = [p for s in steps if (p := step_path(profile, s, tables)) is not None]
    cp = CriticalPath(paths, notes=notes)
    if attribution is None or not paths:
        return cp
    on: dict[tuple[str, int], list[float]] = {}
    n = len(paths)
    work = work_mask(profile.kernels)
    for p in paths:
        for s in p.segments:
            if s.kernel >= 0 and work[s.kernel]:  # work, as the line's total counts it
                site, slot = attribution.site_of_kernel(s.kernel), 0
            elif s.host_op >= 0 and s.kind is SegmentKind.HOST:
                site, slot = attribution.site_of_op(s.host_op), 1
            else:
                continue
            if site is None:
                continue
            acc = on.setdefault((site.span.path, site.span.line), [0.0, 0.0])
            acc[slot] += s.weight_ns / n
    totals = {(lh.path, lh.line): lh.per_step_ns for lh in attribution.heat.lines}
    cp.lines = sorted(
        (LinePath(path, line, totals.get((path, line), 0.0), v[0], v[1]) for (path, line), v in on.items()),
        key=lambda lp: (-(lp.on_path_per_step_ns + lp.host_on_path_per_step_ns), lp.path, lp.line),
    )
    return cp


def kernels_frame(cp: CriticalPath) -> pd.DataFrame:
    """The path's device segments, one row each (kernels row, step, weight) -- for comparisons."""
    rows = [(p.step, s.kernel, s.kind.value, s.weight_ns) for p in cp.steps for s in p.segments if s.kernel >= 0]
    return pd.DataFrame(rows, columns=["step", "kernel", "kind", "weight_ns"])
