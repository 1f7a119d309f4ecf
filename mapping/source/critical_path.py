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
from typing import Any, Generic, TypeVar

import msgspec
import numpy as np
import pandas as pd

from msprof_lsp.mapping.source.heat import Attribution
from msprof_lsp.mapping.profile.linking import row_groups
from msprof_lsp.mapping.profile.model import Persist, Profile, Step, array_bytes, bytes_array
from msprof_lsp.mapping.profile.step_windows import windows
from msprof_lsp.mapping.profile.timemodel import TaskClass, column_codes, task_classes, work_mask

MAX_STEPS = 8  # steps analysed per profile (the first ones); each is its own graph

# Runtime calls that block the host until device work is done: the syncs, and the memory copies
# (a copy to pageable host memory returns only when the copy, queued behind the stream, is done)
SYNC_CALL = re.compile(
    r"(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|aclrtSynchronize\w*|"
    r"cudaMemcpy\w*|aclrtMemcpy\w*)$"
)
# Host ops that block until the device hands back a value: ``.item()``, ``bool(tensor)``. Their
# self time is the host waiting for the device (a sync), never the host failing to launch --
# also where the capture recorded no runtime sync call inside them (Level0, Kineto without it).
BLOCKING_OP = re.compile(r"^aten::(item|_local_scalar_dense|is_nonzero)$")
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
    call: int = -1  # host_events row: the synchronisation call a sync wait is in


@dataclass(slots=True)
class StepPath:
    step: int
    total_ns: int  # sum of the path's segment weights
    span_ns: int  # end of the path's last node - start of its first
    segments: list[Segment]
    kernels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the step's kernels rows
    host_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # host_ops rows with self time
    host_self_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # their self time in the step
    late_launches: int = 0  # launch links left out: the task started before the op that launched it

    def by_kind(self) -> dict[SegmentKind, int]:
        out = {k: 0 for k in SegmentKind}
        for s in self.segments:
            out[s.kind] += s.weight_ns
        return out


class Bound(str, enum.Enum):
    """What a source line's time on the path is bound by (docs/numbers.md "Critical path")."""

    HOST = "host"  # its host ops' self time and the launch delays of its tasks
    SYNC = "sync"  # waits: its sync calls, and the host's relaunch after them; event waits of its tasks
    BANDWIDTH = "bandwidth"  # its memory copies and collectives
    COMPUTE = "compute"  # its compute kernels


@dataclass(slots=True)
class LinePath:
    path: str
    line: int
    total_per_step_ns: float  # the line's device time per step (heat)
    on_path_per_step_ns: float  # its work kernels' time on the critical path, per analysed step
    host_on_path_per_step_ns: float  # its host ops' self time on the path, per analysed step
    own_per_step_ns: float = 0.0  # its device tasks' and host ops' own time, per analysed step
    path_share: float = 0.0  # of that own time, the part on the path (0..1)
    charged: dict[Bound, float] = field(default_factory=dict)  # path time charged to the line, per step
    waits: list[tuple[str, float]] = field(default_factory=list)  # named waits (sync calls, events), per step
    copies_ns: float = 0.0  # of BANDWIDTH: memory copies (the rest is communication), per step

    @property
    def bound(self) -> Bound | None:
        """The largest charge; None when nothing is charged to the line."""
        best = max(self.charged.items(), key=lambda kv: (kv[1], -list(Bound).index(kv[0])), default=None)
        return best[0] if best is not None and best[1] > 0 else None

    @property
    def charged_per_step_ns(self) -> float:
        return sum(self.charged.values())


@dataclass(slots=True)
class CriticalPath:
    steps: list[StepPath]
    lines: list[LinePath] = field(default_factory=list)  # most on-path time first
    notes: list[str] = field(default_factory=list)
    unavailable: str | None = None  # why no path was computed (never a guess)

    @property
    def total_per_step_ns(self) -> float:
        return sum(s.total_ns for s in self.steps) / len(self.steps) if self.steps else 0.0

    def by_kind_per_step(self) -> dict[SegmentKind, float]:
        out = {k: 0.0 for k in SegmentKind}
        for s in self.steps:
            for k, v in s.by_kind().items():
                out[k] += v / len(self.steps)
        return out

    def line(self, path: str, line: int) -> LinePath | None:
        for lp in self.lines:
            if lp.line == line and lp.path == path:
                return lp
        return None


# ---------------------------------------------------------------------------------------------
# The core


def longest_path(n: int, edges: Sequence[Edge], end: int) -> tuple[int, list[int]] | None:
    """The heaviest path of a DAG with ``n`` nodes that ends at ``end``: (its weight, the edge
    indices along it, first to last). Any node may start it. None when ``end`` sits on a cycle."""
    src = np.fromiter((e.src for e in edges), np.int64, len(edges))
    dst = np.fromiter((e.dst for e in edges), np.int64, len(edges))
    w = np.fromiter((e.weight for e in edges), np.int64, len(edges))
    return _longest(n, src, dst, w, end)


def _longest(n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray, end: int) -> tuple[int, list[int]] | None:
    """:func:`longest_path` over edge arrays: Kahn's order (sources in node order, each node's
    edges in edge order), and of equally heavy ways into a node the first one relaxed -- one pass,
    linear in nodes + edges."""
    by_src = np.argsort(src, kind="stable")
    count = np.bincount(src, minlength=n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(count, out=ptr[1:])
    indeg_a = np.bincount(dst, minlength=n)
    # edges in source order (k), so a node's edges are ptr[u] .. ptr[u] + count[u]
    dst_k, w_k, ptr_l, indeg = dst[by_src].tolist(), w[by_src].tolist(), ptr.tolist(), indeg_a.tolist()
    dist = [0] * n
    best_k = [-1] * n
    queue = deque(np.flatnonzero(indeg_a == 0).tolist())
    pop, push = queue.popleft, queue.append
    while queue:
        u = pop()
        du = dist[u]
        for k in range(ptr_l[u], ptr_l[u + 1]):
            v = dst_k[k]
            d = du + w_k[k]
            if best_k[v] < 0 or d > dist[v]:
                dist[v] = d
                best_k[v] = k
            indeg[v] -= 1
            if not indeg[v]:
                push(v)
    if indeg[end] > 0:
        return None
    path = []
    v = end
    while best_k[v] >= 0:
        i = int(by_src[best_k[v]])
        path.append(i)
        v = int(src[i])
    path.reverse()
    return dist[end], path


# ---------------------------------------------------------------------------------------------
# The graph of one step

_KINDS = tuple(SegmentKind)  # edge kind codes: index into this
_HOST, _KERNEL, _COMM, _WAIT = (_KINDS.index(k) for k in (SegmentKind.HOST, SegmentKind.KERNEL, SegmentKind.COMM,
                                                           SegmentKind.WAIT))
_DEPS = tuple(Dependency)  # wait edge dependency codes; -1: none
_LAUNCH, _STREAM, _EVENT, _SYNC = (_DEPS.index(d) for d in (Dependency.LAUNCH, Dependency.STREAM, Dependency.EVENT,
                                                            Dependency.SYNC))


@dataclass(slots=True)
class _Graph:
    """Nodes (times) and edges as columns; weights are set once every edge is known (:meth:`finish`).

    An edge's segment name is its kernel's name where it has one, else its dependency's."""

    time: np.ndarray  # int64 per node
    src: np.ndarray
    dst: np.ndarray
    kind: np.ndarray  # int8 index into _KINDS
    host_op: np.ndarray  # host_ops row, -1
    kernel: np.ndarray  # kernels row, -1
    dep: np.ndarray  # int8 index into _DEPS, -1
    call: np.ndarray  # host_events row of the sync call a sync wait is in, -1
    kernels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the step's kernels rows
    weight: np.ndarray | None = None
    late_launches: int = 0  # launch links left out: the task started before its op
    n_host: int = 0  # nodes [0, n_host) are host points in (thread, time) order; then two per device task

    def finish(self) -> None:
        """Weigh each edge u -> v by the time v came after its *last-arriving* predecessor: the
        binding dependency carries v's real delay, and a dependency that was met earlier carries
        no more than that (its slack is not on any path)."""
        arrival = np.full(len(self.time), -(1 << 62), dtype=np.int64)
        np.maximum.at(arrival, self.dst, self.time[self.src])
        self.weight = np.maximum(0, self.time[self.dst] - arrival[self.dst])

    def with_sink(self) -> tuple["_Graph", int]:
        """The graph plus one node after every node at the latest time, so the path can end at
        the heaviest of them; and that node."""
        last = self.time.max()
        ends = np.flatnonzero(self.time == last)
        sink = len(self.time)
        m = len(ends)
        neg = np.full(m, -1, dtype=np.int64)
        g = _Graph(np.append(self.time, last), np.concatenate([self.src, ends]),
                   np.concatenate([self.dst, np.full(m, sink, dtype=np.int64)]),
                   np.concatenate([self.kind, np.full(m, _WAIT, dtype=np.int8)]), np.concatenate([self.host_op, neg]),
                   np.concatenate([self.kernel, neg]), np.concatenate([self.dep, neg.astype(np.int8)]),
                   np.concatenate([self.call, neg]), self.kernels, late_launches=self.late_launches,
                   n_host=self.n_host)
        return g, sink


class _Edges:
    """Edge columns gathered section by section (the order fixes the path's tie-breaks)."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, ...]] = []

    def add(self, src: np.ndarray, dst: np.ndarray, kind: int | np.ndarray, *, host_op: int | np.ndarray = -1,
            kernel: int | np.ndarray = -1, dep: int | np.ndarray = -1, call: int | np.ndarray = -1) -> None:
        m = len(src)
        if not m:
            return
        full = lambda v, dt: np.broadcast_to(np.asarray(v, dtype=dt), (m,))  # noqa: E731
        self.parts.append((np.asarray(src, np.int64), np.asarray(dst, np.int64), full(kind, np.int8),
                           full(host_op, np.int64), full(kernel, np.int64), full(dep, np.int8), full(call, np.int64)))

    def columns(self) -> list[np.ndarray]:
        types = (np.int64, np.int64, np.int8, np.int64, np.int64, np.int8, np.int64)
        if not self.parts:
            return [np.zeros(0, dt) for dt in types]
        return [np.concatenate([p[c] for p in self.parts]) for c in range(len(types))]


_KIND_OF_CLASS = np.array([_KINDS.index(k) for k in (
    SegmentKind.KERNEL,  # TaskClass.COMPUTE
    SegmentKind.KERNEL,  # TaskClass.MEMCPY
    SegmentKind.COMM,  # TaskClass.COMMUNICATION
    SegmentKind.WAIT,  # TaskClass.WAIT
    SegmentKind.KERNEL,  # TaskClass.OTHER
)], dtype=np.int8)
assert len(_KIND_OF_CLASS) == len(TaskClass)


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
    h_thread: np.ndarray  # a code per (pid, tid), shared by host ops and runtime calls
    e_thread: np.ndarray
    k_step: np.ndarray
    k_start: np.ndarray
    k_end: np.ndarray
    k_names: np.ndarray
    k_dev: np.ndarray
    k_stream: np.ndarray
    k_launcher: np.ndarray
    k_classes: np.ndarray
    k_record: np.ndarray  # bool: EVENT_RECORD / Notify Record
    k_wait: np.ndarray  # bool: EVENT_WAIT / Notify Wait

    @classmethod
    def of(cls, profile: Profile, *, runtime_on_caller: bool = False) -> "_Tables":
        """``runtime_on_caller``: runtime calls recorded under another pid with a host op thread's
        tid (torch_npu's CANN layer) join that thread (:func:`_runtime_pids`)."""
        h, k, ev = profile.host_ops, profile.kernels, profile.host_events
        i8 = np.int64
        h_start, e_start, k_start = (t["start_ns"].to_numpy(i8) for t in (h, ev, k))
        e_names = ev["name"].astype(str).to_numpy()
        k_names = k["name"].astype(str).to_numpy()
        sync_names = {n for n in set(e_names.tolist()) if SYNC_CALL.search(n)}
        distinct = set(k_names.tolist())
        e_pid = ev["pid"].to_numpy(i8)
        if runtime_on_caller:
            e_pid = _runtime_pids(h["pid"].to_numpy(i8), h["tid"].to_numpy(i8), e_pid, ev["tid"].to_numpy(i8))
        threads = _thread_codes(np.concatenate([h["pid"].to_numpy(i8), e_pid]),
                                np.concatenate([h["tid"].to_numpy(i8), ev["tid"].to_numpy(i8)]))
        return cls(
            h_start, h_start + h["dur_ns"].to_numpy(i8), h["pid"].to_numpy(i8), h["tid"].to_numpy(i8),
            h["name"].astype(str).to_numpy(),
            e_start, e_start + ev["dur_ns"].to_numpy(i8), ev["pid"].to_numpy(i8), ev["tid"].to_numpy(i8),
            np.isin(e_names, list(sync_names)) if sync_names else np.zeros(len(e_names), dtype=bool),
            threads[:len(h)], threads[len(h):],
            k["step"].to_numpy(i8), k_start, k_start + k["dur_ns"].to_numpy(i8), k_names,
            k["device"].to_numpy(i8), k["stream"].to_numpy(i8), k["host_op"].to_numpy(i8), task_classes(k),
            np.isin(k_names, [n for n in distinct if _EVENT_RECORD.match(n)]),
            np.isin(k_names, [n for n in distinct if _EVENT_WAIT.match(n)]),
        )


def step_tables(profile: Profile, *, runtime_on_caller: bool = False) -> _Tables:
    """The columns the step graphs read, converted once per loaded profile (the critical path and
    the step replay, mapping/source/replay.py, share them; the replay puts torch_npu's runtime
    calls on the thread that made them, so a sync blocks its caller)."""
    inputs = (profile.kernels, profile.host_ops, profile.host_events)
    return profile.derived.memo(f"step_graph/tables/{runtime_on_caller}", inputs,
                                lambda: _Tables.of(profile, runtime_on_caller=runtime_on_caller))


def _runtime_pids(h_pid: np.ndarray, h_tid: np.ndarray, e_pid: np.ndarray, e_tid: np.ndarray) -> np.ndarray:
    """The runtime calls' pids, a call on a host op thread's tid under another pid moved to that
    thread: torch_npu records the CANN layer under its own pid (``318526002`` for process
    ``3185260``) with the calling thread's tid, and a sync call must block the thread that made it."""
    if not len(e_pid) or not len(h_pid):
        return e_pid
    pairs = np.unique(np.column_stack([h_tid, h_pid]), axis=0)
    tids, first = np.unique(pairs[:, 0], return_index=True)
    one_pid = np.bincount(np.searchsorted(tids, pairs[:, 0]), minlength=len(tids)) == 1  # tid under one pid only
    pos = np.clip(np.searchsorted(tids, e_tid), 0, len(tids) - 1)
    hit = (tids[pos] == e_tid) & one_pid[pos]
    out = e_pid.copy()
    out[hit] = pairs[first[pos[hit]], 1]
    return out


def _thread_codes(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """A code per (pid, tid) pair."""
    if not len(pid):
        return np.zeros(0, dtype=np.int64)
    # integer pairing (linking.row_groups), not a MultiIndex: building its tuples was most of a
    # warm run's critical path (0.6 s of 0.8 s on a 100 MiB trace)
    return row_groups([pid, tid])


def _innermost(is_start: np.ndarray, item: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per point (in order), the item innermost open after it (-1: none), as a stack of open
    items would say while items nest; and per end point whether it closed the innermost item
    (False: items overlap without nesting there, and the answer after it is not the stack's).

    While items nest, the innermost open item after point j is the last item that opened at the
    depth the chain has after j: anything opened later at that depth has closed again."""
    n = len(is_start)
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    depth = np.cumsum(np.where(is_start, 1, -1))
    starts = np.flatnonzero(is_start)
    key = depth[starts] * (n + 1) + starts
    o = np.argsort(key, kind="stable")
    key, starts = key[o], starts[o]
    idx = np.searchsorted(key, depth * (n + 1) + np.arange(n), side="right") - 1
    cand = starts[np.maximum(idx, 0)]
    top = np.where((idx >= 0) & (depth > 0) & (depth[cand] == depth), item[cand], -1)
    ends = np.flatnonzero(~is_start)
    nested = np.where(ends > 0, top[np.maximum(ends - 1, 0)], -1) == item[ends]
    return top, nested


def _walk_thread(item: list[int], is_start: list[bool], row: list[int]) -> tuple[list[int], list[int]]:
    """:func:`_innermost`'s answers for a thread whose items do not nest: a stack of open items,
    an item that closes below the top taken out where it is. Per point: the innermost open host
    op (host_ops row, -1) and the innermost open item (-1)."""
    n = len(item)
    state_op = [-1] * n
    state_top = [-1] * n
    stack: list[int] = []
    ops: list[int] = []  # the open items that are host ops, in push order
    # an item closing below the top is marked closed and popped once it surfaces: removing it
    # where it is would cost the stack's depth per item (quadratic when many overlap)
    closed: set[int] = set()
    for j in range(n):
        i = item[j]
        if is_start[j]:
            stack.append(i)
            if row[i] >= 0:
                ops.append(i)
        else:
            closed.add(i)
            while stack and stack[-1] in closed:
                stack.pop()
            while ops and ops[-1] in closed:
                ops.pop()
        state_top[j] = stack[-1] if stack else -1
        state_op[j] = row[ops[-1]] if ops else -1
    return state_op, state_top


def _count_le(major: np.ndarray, minor: np.ndarray, q_major: np.ndarray, q_minor: np.ndarray) -> np.ndarray:
    """Per query pair, how many of the (major, minor) pairs -- sorted by major, then minor -- are
    not after it; a searchsorted of each query in its own major's block, for all blocks at once."""
    n = len(major)
    kind = np.concatenate([np.zeros(n, np.int8), np.ones(len(q_major), np.int8)])
    o = np.lexsort((kind, np.concatenate([minor, q_minor]), np.concatenate([major, q_major])))
    is_q = kind[o] == 1
    before = np.cumsum(~is_q)
    out = np.empty(len(q_major), dtype=np.int64)
    out[o[is_q] - n] = before[is_q]
    return out


def _event_sources(rec: np.ndarray, waits: np.ndarray, end: np.ndarray, dev: np.ndarray,
                   stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per wait task (kernels rows), the record task it waited for: of its device and another
    stream, the one that ended last at or before it did (of equal ends, the later row). Returns
    (records, their waits), in ``waits`` order, for the waits that have one.

    Records sorted by (device, end): a wait's candidate is the last one not after it in its
    device's block; when that one is on the wait's own stream, the answer is the last record
    before that run of its stream began. No scan back through records, whatever the mix."""
    o = np.lexsort((end[rec], dev[rec]))  # stable: equal ends keep row order
    r_rows, r_dev, r_end, r_stream = rec[o], dev[rec][o], end[rec][o], stream[rec][o]
    m = len(r_rows)
    run_head = np.ones(m, dtype=bool)
    run_head[1:] = (r_dev[1:] != r_dev[:-1]) | (r_stream[1:] != r_stream[:-1])
    other = np.maximum.accumulate(np.where(run_head, np.arange(m), 0)) - 1  # before the run began
    w_dev, w_stream = dev[waits], stream[waits]
    j = _count_le(r_dev, r_end, w_dev, end[waits]) - 1
    jc = np.maximum(j, 0)
    j = np.where((j >= 0) & (r_dev[jc] == w_dev), j, -1)
    j = np.where((j >= 0) & (r_stream[np.maximum(j, 0)] == w_stream), other[np.maximum(j, 0)], j)
    jc = np.maximum(j, 0)
    ok = (j >= 0) & (r_dev[jc] == w_dev) & (r_stream[jc] != w_stream)
    return r_rows[j[ok]], waits[ok]


def step_graph(profile: Profile, step: Step, tables: _Tables | None = None) -> tuple[_Graph, int] | None:
    """The event graph of one step and its end node (the latest node); None when the step is
    empty. Host threads are chains of boundary points; device tasks are two nodes each, chained
    per stream; launch, cross-stream event and sync edges join them."""
    t = tables if tables is not None else step_tables(profile)
    h_in = np.flatnonzero((t.h_start >= step.start_ns) & (t.h_start < step.end_ns))
    e_in = np.flatnonzero((t.e_start >= step.start_ns) & (t.e_start < step.end_ns))
    if (t.k_step >= 0).any():
        k_in = np.flatnonzero(t.k_step == step.id)
    else:
        k_in = np.flatnonzero((t.k_start >= step.start_ns) & (t.k_start < step.end_ns))
    edges = _Edges()
    host = _host_chains(t, h_in, e_in, edges)
    tasks = _device_tasks(t, k_in, host.n_nodes, edges)
    late_launches = _launch_edges(t, h_in, host, tasks, edges)
    _event_edges(t, tasks, edges)
    _sync_edges(t, host, tasks, edges)
    time = np.concatenate([host.time, tasks.time])
    if not len(time):
        return None
    g = _Graph(time, *edges.columns(), kernels=k_in, late_launches=late_launches, n_host=host.n_nodes)
    return g, int(np.flatnonzero(time == time.max())[-1])


@dataclass(slots=True)
class _HostPoints:
    """A step's host threads as chains of points, two per item (host op or runtime call), in
    (thread, time) order; a point's node is its place in that order."""

    time: np.ndarray  # per point
    thread: np.ndarray  # per point: the thread, numbered by first use
    item: np.ndarray  # per point
    start_node: np.ndarray  # per item: its start point
    end_node: np.ndarray  # per item: its end point
    op: np.ndarray  # per point: the innermost open host op after it (host_ops row, -1)
    call_of: np.ndarray  # per item: its host_events row, -1 for a host op
    sync_ends: np.ndarray  # the end points of the sync calls, sorted

    @property
    def n_nodes(self) -> int:
        return len(self.time)


def _host_chains(t: _Tables, h_in: np.ndarray, e_in: np.ndarray, edges: _Edges) -> _HostPoints:
    """The step's host ops (row order) and runtime calls as one chain of points per thread, and
    the edges from each point to the next on its thread: waiting for the device inside a sync
    call, else the innermost open op's self time (runtime calls count as their op's)."""
    i_start = np.concatenate([t.h_start[h_in], t.e_start[e_in]])
    i_end = np.concatenate([t.h_end[h_in], t.e_end[e_in]])
    i_row = np.concatenate([h_in, np.full(len(e_in), -1, dtype=np.int64)])
    i_sync = np.concatenate([np.zeros(len(h_in), dtype=bool), t.e_sync[e_in]])
    m = len(i_start)
    codes = np.concatenate([t.h_thread[h_in], t.e_thread[e_in]])
    uniq, first_use = np.unique(codes, return_index=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first_use, kind="stable")] = np.arange(len(uniq))
    thread = rank[np.searchsorted(uniq, codes)]
    # two points per item, in time order; at one time: ends, then starts longest first, then the
    # empty items' ends; among equal points, starts in item order and ends in reverse, so that
    # identical and empty items nest
    dur = i_end - i_start
    item = np.arange(m)
    p_item = np.concatenate([item, item])
    p_time = np.concatenate([i_start, i_end])
    p_type = np.concatenate([np.ones(m, np.int64), np.where(dur > 0, 0, 2)])
    p_tie = np.concatenate([-dur, dur])
    p_thread = np.concatenate([thread, thread])
    order = np.lexsort((np.concatenate([item, -item]), p_tie, p_type, p_time, p_thread))
    p_item, p_time, p_start, p_thread = p_item[order], p_time[order], p_type[order] == 1, p_thread[order]
    where = np.empty(2 * m, dtype=np.int64)  # each point's node (its place in the order)
    where[order] = np.arange(2 * m)
    s_op, top = _open_items(p_item, p_start, p_thread, i_row, len(uniq))
    s_sync = (top >= 0) & i_sync[np.maximum(top, 0)]
    # a sync wait keeps the op it is in and its call, to name it
    gap = np.flatnonzero(p_thread[1:] == p_thread[:-1])
    g_sync = s_sync[gap]
    call_of = np.concatenate([np.full(len(h_in), -1, dtype=np.int64), e_in])  # item -> host_events row
    edges.add(gap, gap + 1, np.where(g_sync, _WAIT, _HOST), host_op=s_op[gap],
              dep=np.where(g_sync, _SYNC, -1), call=np.where(g_sync, call_of[np.maximum(top[gap], 0)], -1))
    end_node = where[m:]
    return _HostPoints(p_time, p_thread, p_item, where[:m], end_node, s_op, call_of, np.sort(end_node[i_sync]))


def _open_items(p_item: np.ndarray, p_start: np.ndarray, p_thread: np.ndarray, i_row: np.ndarray,
                n_threads: int) -> tuple[np.ndarray, np.ndarray]:
    """Per point (in (thread, time) order): the innermost open host op after it (host_ops row,
    -1) and the innermost open item (-1). Vectorised while items nest; a thread whose items
    overlap without nesting is walked (:func:`_walk_thread`)."""
    top, nested = _innermost(p_start, p_item)
    is_op = i_row[p_item] >= 0
    op_pts = np.flatnonzero(is_op)
    op_top_sub, _ = _innermost(p_start[op_pts], p_item[op_pts])
    k = np.searchsorted(op_pts, np.arange(len(p_item)), side="right") - 1
    op_top = np.where(k >= 0, op_top_sub[np.maximum(k, 0)] if len(op_pts) else -1, -1)
    s_op = np.where(op_top >= 0, i_row[np.maximum(op_top, 0)], -1)
    t_first = np.searchsorted(p_thread, np.arange(n_threads + 1))  # each thread's first point
    rows = i_row.tolist()
    for th in np.unique(p_thread[~p_start][~nested]).tolist():  # items that overlap without nesting
        a, b = int(t_first[th]), int(t_first[th + 1])
        s_op[a:b], top[a:b] = _walk_thread(p_item[a:b].tolist(), p_start[a:b].tolist(), rows)
    return s_op, top


@dataclass(slots=True)
class _DeviceTasks:
    """A step's device tasks in (device, stream, start) order, two nodes each after the host's."""

    k_in: np.ndarray  # the step's kernels rows, sorted
    order: np.ndarray  # kernels rows in (device, stream, start) order
    a_node: np.ndarray  # per task in ``order``: its start node
    b_node: np.ndarray  # ... and its end node
    pos_of: np.ndarray  # k_in position -> position in ``order``
    time: np.ndarray  # the nodes' times

    def pos(self, rows: np.ndarray) -> np.ndarray:
        """Kernels rows of the step -> their positions in ``order``."""
        return self.pos_of[np.searchsorted(self.k_in, rows)]


def _device_tasks(t: _Tables, k_in: np.ndarray, n_host: int, edges: _Edges) -> _DeviceTasks:
    """The step's device tasks, with an edge across each task and one from each task to the next
    on its stream."""
    dev, stream = t.k_dev, t.k_stream
    order = k_in[np.lexsort((t.k_start[k_in], stream[k_in], dev[k_in]))]
    nk = len(order)
    a_node = n_host + 2 * np.arange(nk, dtype=np.int64)
    b_node = a_node + 1
    edges.add(a_node, b_node, _KIND_OF_CLASS[t.k_classes[order]], kernel=order)
    same = (dev[order][1:] == dev[order][:-1]) & (stream[order][1:] == stream[order][:-1])
    edges.add(b_node[:-1][same], a_node[1:][same], _WAIT, dep=_STREAM)
    pos_of = np.empty(nk, dtype=np.int64)
    pos_of[np.searchsorted(k_in, order)] = np.arange(nk)
    time = np.column_stack([t.k_start[order], t.k_end[order]]).ravel()
    return _DeviceTasks(k_in, order, a_node, b_node, pos_of, time)


def _launch_edges(t: _Tables, h_in: np.ndarray, host: _HostPoints, tasks: _DeviceTasks, edges: _Edges) -> int:
    """Launch edges: from the launching op's last point not after the task's start. Returns how
    many launches were left out because the task started before its op."""
    if not len(h_in) or not len(tasks.order):
        return 0
    order = tasks.order
    ops = t.k_launcher[order]
    m = len(h_in)
    firsts, lasts = host.start_node[:m], host.end_node[:m]  # h_in is sorted
    pos = np.clip(np.searchsorted(h_in, ops), 0, m - 1)
    hit = np.flatnonzero(h_in[pos] == ops)
    if not len(hit):
        return 0
    lo, hi = firsts[pos[hit]], lasts[pos[hit]]
    # the last point of the op's thread not after the task's start (points are in (thread, time)
    # order; one merged search for all threads at once)
    starts = t.k_start[order[hit]]
    j = _count_le(host.thread, host.time, host.thread[lo], starts) - 1
    src = np.clip(j, lo, hi)
    # a task that starts before the op that launched it began (clock skew, a wrong link) would put
    # a cycle in the graph: its launch is left out and counted
    ahead = host.time[src] <= starts
    edges.add(src[ahead], tasks.a_node[hit][ahead], _WAIT, dep=_LAUNCH)
    return int((~ahead).sum())


def _event_edges(t: _Tables, tasks: _DeviceTasks, edges: _Edges) -> None:
    """Cross-stream events (Ascend EVENT_RECORD -> EVENT_WAIT): the wait ends after its record."""
    k_in = tasks.k_in
    rec = k_in[t.k_record[k_in]]
    waits = k_in[t.k_wait[k_in]]
    if len(rec) and len(waits):
        src_r, dst_r = _event_sources(rec, waits, t.k_end, t.k_dev, t.k_stream)
        if len(src_r):
            edges.add(tasks.b_node[tasks.pos(src_r)], tasks.b_node[tasks.pos(dst_r)], _WAIT, dep=_EVENT)


def _sync_edges(t: _Tables, host: _HostPoints, tasks: _DeviceTasks, edges: _Edges) -> None:
    """Host synchronisation: a sync call ends after the last device work that ended before it."""
    if not len(host.sync_ends) or not len(tasks.order):
        return
    k_in = tasks.k_in
    work = k_in[t.k_classes[k_in] != int(TaskClass.WAIT)]
    o = np.argsort(t.k_end[work], kind="stable")
    ends = t.k_end[work][o]
    nodes = host.sync_ends
    j = np.searchsorted(ends, host.time[nodes], side="right") - 1
    ok = j >= 0
    if ok.any():
        at = nodes[ok]  # the sync call's end point; the op it is in is open just before it
        edges.add(tasks.b_node[tasks.pos(work[o][j[ok]])], at, _WAIT, dep=_SYNC, host_op=host.op[at - 1],
                  call=host.call_of[host.item[at]])


def step_path(profile: Profile, step: Step, tables: _Tables | None = None) -> StepPath | None:
    built = step_graph(profile, step, tables)
    if built is None:
        return None
    g, sink = built[0].with_sink()
    g.finish()
    assert g.weight is not None
    res = _longest(len(g.time), g.src, g.dst, g.weight, sink)
    if res is None:
        return None
    total, path = res
    idx = np.array(path[:-1], dtype=np.int64)
    h_names = tables.h_names if tables is not None else profile.host_ops["name"].astype(str).to_numpy()
    k_names = tables.k_names if tables is not None else profile.kernels["name"].astype(str).to_numpy()
    starts, ends = g.time[g.src[idx]], g.time[g.dst[idx]]
    span = int(ends[-1] - starts[0]) if len(idx) else 0
    keep = g.weight[idx] > 0
    idx, starts, ends = idx[keep], starts[keep], ends[keep]
    w, kind, op, k, dep, call = g.weight[idx], g.kind[idx], g.host_op[idx], g.kernel[idx], g.dep[idx], g.call[idx]
    named_by_op = (kind == _HOST) & (op >= 0)
    dep_named = np.where(~named_by_op & (k < 0), dep, -2)  # the dependency names the segment
    # one op's self time split by its children's boundaries reads as one segment
    joined = ((starts[1:] == ends[:-1]) & (kind[1:] == kind[:-1]) & (op[1:] == op[:-1]) & (k[1:] == k[:-1])
              & (dep_named[1:] == dep_named[:-1]) & (call[1:] == call[:-1]))
    heads = np.flatnonzero(np.concatenate([[True], ~joined])) if len(idx) else np.zeros(0, np.int64)
    tails = np.append(heads[1:], len(idx)) - 1
    weights = np.add.reduceat(w, heads) if len(heads) else w[:0]
    kept: list[Segment] = []
    for a, b, wt, kd, o, kk, dp, c in zip(starts[heads].tolist(), ends[tails].tolist(), weights.tolist(),
                                          kind[heads].tolist(), op[heads].tolist(), k[heads].tolist(),
                                          dep[heads].tolist(), call[heads].tolist()):
        sk = _KINDS[kd]
        if sk is SegmentKind.HOST and o >= 0:
            name = str(h_names[o])
        elif kk >= 0:
            name = str(k_names[kk])
        else:
            name = _DEPS[dp].value if dp >= 0 else ""
        kept.append(Segment(sk, a, b, wt, o, kk, name, c))
    # each host op's self time in the step, as the thread chains split it (the line's total)
    own = (g.kind == _HOST) & (g.host_op >= 0)
    ops, inv = np.unique(g.host_op[own], return_inverse=True)
    self_ns = np.bincount(inv, weights=(g.time[g.dst[own]] - g.time[g.src[own]]), minlength=len(ops)).astype(np.int64)
    return StepPath(step.id, total, span, kept, g.kernels, ops, self_ns, g.late_launches)


# ---------------------------------------------------------------------------------------------
# Per profile, per source line


def why_no_path(profile: Profile) -> str | None:
    """Why the profile's steps have no critical path to compute, None when they have one."""
    k = profile.kernels
    if not len(k):
        return "the profile has no device tasks"
    if not profile.steps and not (k["step"] >= 0).any():
        return "the profile has no steps (no ProfilerStep#N markers)"
    if profile.meta.steps_from_capture:
        return "the profile has no step markers: its one step is the whole capture, not a training step"
    if not (k["host_op"] >= 0).any():
        return ("no device task is linked to the host op that launched it (no flow events or correlation ids): "
                "the host-to-device dependencies are unknown")
    return None


def graph_inputs(profile: Profile) -> tuple[Any, ...]:
    """The Profile fields the steps' graphs are built from: what the values derived from them
    (paths, the replay's models, savings) are kept for (``profile.derived.memo``)."""
    return (profile.kernels, profile.host_ops, profile.host_events, profile.steps, profile.meta)


def step_paths(profile: Profile, max_steps: int = MAX_STEPS) -> CriticalPath:
    """The critical path of each of the first ``max_steps`` steps, computed once per loaded profile
    (kept with it: the editor computes it at load, and rules, lens and hover reuse it) and stored
    with its cache entry, so a warm run reads it instead of computing it."""
    return profile.derived.memo(f"critical_path/{max_steps}", graph_inputs(profile),
                                lambda: _step_paths(profile, max_steps), persist=PERSIST)


# -- the paths in the cache (typed msgpack; row arrays as little-endian int64 bytes) -------------


class _StepRecord(msgspec.Struct, array_like=True, frozen=True):
    step: int
    total_ns: int
    span_ns: int
    segments: list[tuple[SegmentKind, int, int, int, int, int, str, int]]
    kernels: bytes
    host_ops: bytes
    host_self_ns: bytes
    late_launches: int


S = TypeVar("S")


class StepsRecord(msgspec.Struct, Generic[S], array_like=True, frozen=True):
    """The stored form of a value derived per analysed step (the paths here, the replay's models):
    the steps' records, the notes and why there are none."""

    steps: list[S]
    notes: list[str]
    unavailable: str | None


_PATHS_DECODER = msgspec.msgpack.Decoder(StepsRecord[_StepRecord])


def _encode_paths(cp: CriticalPath) -> bytes:
    steps = [_StepRecord(p.step, p.total_ns, p.span_ns,
                         [(s.kind, s.start_ns, s.end_ns, s.weight_ns, s.host_op, s.kernel, s.name, s.call)
                          for s in p.segments],
                         *(array_bytes(a) for a in (p.kernels, p.host_ops, p.host_self_ns)),
                         p.late_launches) for p in cp.steps]
    return msgspec.msgpack.encode(StepsRecord(steps, list(cp.notes), cp.unavailable))


def _decode_paths(data: bytes) -> CriticalPath:
    rec = _PATHS_DECODER.decode(data)
    steps = [StepPath(s.step, s.total_ns, s.span_ns, [Segment(*seg) for seg in s.segments], bytes_array(s.kernels),
                      bytes_array(s.host_ops), bytes_array(s.host_self_ns), s.late_launches) for s in rec.steps]
    if any(len(s.host_ops) != len(s.host_self_ns) for s in steps):
        raise ValueError("host ops and their self times differ in length")
    return CriticalPath(steps, notes=list(rec.notes), unavailable=rec.unavailable)


PERSIST = Persist(_encode_paths, _decode_paths)


def _step_paths(profile: Profile, max_steps: int) -> CriticalPath:
    why = why_no_path(profile)
    if why is not None:
        return CriticalPath([], unavailable=why)
    steps = windows(profile)
    notes = []
    if len(steps) > max_steps:
        notes.append(f"critical path of the first {max_steps} of {len(steps)} steps")
        steps = steps[:max_steps]
    tables = step_tables(profile)
    paths = [p for s in steps if (p := step_path(profile, s, tables)) is not None]
    late = sum(p.late_launches for p in paths)
    if late:
        notes.append(f"{late} device tasks start before the host op linked as their launcher (clock skew or a wrong "
                     "link): their launch is left out of the graph")
    if not paths:
        return CriticalPath([], notes=notes, unavailable="no analysed step holds host or device work")
    return CriticalPath(paths, notes=notes)


def critical_path(profile: Profile, attribution: Attribution | None = None, max_steps: int = MAX_STEPS) -> CriticalPath:
    """The critical path of each of the first ``max_steps`` steps, and per source line its time on
    the path next to its total (``attribution``'s heat), both per step, and what that time is
    bound by. The paths are the profile's (:func:`step_paths`); only the lines are worked out here."""
    base = step_paths(profile, max_steps)
    cp = CriticalPath(base.steps, notes=list(base.notes), unavailable=base.unavailable)
    if attribution is None or not cp.steps:
        return cp
    cp.lines = _lines(profile, attribution, cp.steps)
    return cp


class _LineAcc:
    __slots__ = ("device_on", "work_on", "host_on", "own", "charged", "waits", "copies")

    def __init__(self) -> None:
        self.device_on = self.work_on = self.host_on = self.own = self.copies = 0.0
        self.charged = {b: 0.0 for b in Bound}
        self.waits: dict[str, float] = {}

    def wait(self, label: str, w: float) -> None:
        """Path time this line's named wait cost (sync-bound)."""
        self.charged[Bound.SYNC] += w
        self.waits[label] = self.waits.get(label, 0.0) + w


def _lines(profile: Profile, att: Attribution, paths: list[StepPath]) -> list[LinePath]:
    """Per source line (of a kernel's or host op's site), per analysed step: its time on the path,
    its own time, and the path time charged to it by kind (docs/numbers.md "Critical path")."""
    lines = _LineCharges(profile, att, len(paths))
    for p in paths:
        lines.own_time(p)
        lines.charge_path(p)
    return lines.result()


class _LineCharges:
    """The per-line accumulators of :func:`_lines` and the profile columns they read."""

    def __init__(self, profile: Profile, att: Attribution, n_steps: int) -> None:
        self.att, self.n = att, n_steps
        self.classes = task_classes(profile.kernels)
        self.dur = profile.kernels["dur_ns"].to_numpy(np.int64)
        self.ev_codes, self.ev_names = column_codes(profile.host_events["name"])
        self.h_codes, self.h_names = column_codes(profile.host_ops["name"])
        # once per distinct name, not per op
        self.blocking = np.array([bool(BLOCKING_OP.match(n)) for n in self.h_names], dtype=bool)[self.h_codes]
        self.device = np.isin(self.classes, [int(TaskClass.COMPUTE), int(TaskClass.MEMCPY), int(TaskClass.COMMUNICATION)])
        self.work = work_mask(profile.kernels)
        self.bandwidth = np.isin(self.classes, [int(TaskClass.MEMCPY), int(TaskClass.COMMUNICATION)])
        self.acc: dict[tuple[str, int], _LineAcc] = {}

    def at(self, site) -> _LineAcc | None:  # noqa: ANN001 - Site | None
        if site is None:
            return None
        key = (site.span.path, site.span.line)
        a = self.acc.get(key)
        if a is None:
            a = self.acc[key] = _LineAcc()
        return a

    def own_time(self, p: StepPath) -> None:
        """The step's device tasks and its host ops' self time, to the lines they came from."""
        att, n = self.att, self.n
        rows = p.kernels[self.device[p.kernels]]
        for i, ns in zip(*_sum_by(att.kernel_site[rows], self.dur[rows])):
            if (a := self.at(att.sites[i])) is not None:
                a.own += ns / n
        if len(p.host_ops):
            for i, ns in zip(*_sum_by(att.op_site[p.host_ops], p.host_self_ns)):
                if (a := self.at(att.sites[i])) is not None:
                    a.own += ns / n

    def charge_path(self, p: StepPath) -> None:
        """Each path segment's time to the line it is on or the line it holds up."""
        segs = p.segments
        nxt_of, prev_name = _kernel_neighbours(segs)
        after_sync: tuple[_LineAcc, str] | None = None  # the host relaunching after a sync call
        for j, s in enumerate(segs):
            w = s.weight_ns / self.n
            if s.kernel >= 0:
                after_sync = None
                self._device_segment(s, w)
            elif s.kind is SegmentKind.HOST:
                self._host_segment(s, w, after_sync)
            elif s.name == Dependency.SYNC.value:
                after_sync = self._sync_segment(s, w) or after_sync
            elif s.name == Dependency.LAUNCH.value:
                if after_sync is not None:
                    after_sync[0].wait(after_sync[1], w)
                elif nxt_of[j] is not None and (a := self.at(self.att.site_of_kernel(nxt_of[j].kernel))) is not None:
                    a.charged[Bound.HOST] += w
            elif s.name == Dependency.EVENT.value and nxt_of[j] is not None:
                if (a := self.at(self.att.site_of_kernel(nxt_of[j].kernel))) is not None:
                    a.wait(f"{nxt_of[j].name} waits for {prev_name[j]} (event)", w)

    def _device_segment(self, s: Segment, w: float) -> None:
        a = self.at(self.att.site_of_kernel(s.kernel))
        if a is None:
            return
        k = s.kernel
        if self.device[k]:
            a.device_on += w
            if self.work[k]:
                a.work_on += w
            if self.bandwidth[k]:
                a.charged[Bound.BANDWIDTH] += w
                if self.classes[k] == int(TaskClass.MEMCPY):
                    a.copies += w
            else:
                a.charged[Bound.COMPUTE] += w
        elif s.kind is SegmentKind.WAIT:  # a device wait task (EVENT_WAIT) of the line
            a.wait(s.name, w)

    def _host_segment(self, s: Segment, w: float, after_sync: tuple[_LineAcc, str] | None) -> None:
        own = self.at(self.att.site_of_op(s.host_op)) if s.host_op >= 0 else None
        if own is not None:
            own.host_on += w
        if after_sync is not None:
            after_sync[0].wait(after_sync[1], w)
        elif own is not None and self.blocking[s.host_op]:
            own.wait(f"{self.h_names[self.h_codes[s.host_op]]} (host blocked for a device value)", w)
        elif own is not None:
            own.charged[Bound.HOST] += w

    def _sync_segment(self, s: Segment, w: float) -> tuple[_LineAcc, str] | None:
        """Charge a sync wait to the line whose op made the call; returns (line, label) so the
        host's relaunch after it is charged there too (None: no line, the previous one stays)."""
        a = self.at(self.att.site_of_op(s.host_op)) if s.host_op >= 0 else None
        call = self.ev_names[self.ev_codes[s.call]] if s.call >= 0 else "synchronisation"
        label = f"{call} in {self.h_names[self.h_codes[s.host_op]]}" if s.host_op >= 0 else call
        if a is None:
            return None
        a.wait(label, w)
        return a, label

    def result(self) -> list[LinePath]:
        totals = {(lh.path, lh.line): lh.per_step_ns for lh in self.att.heat.lines}
        out = []
        for (path, line), a in self.acc.items():
            on = a.device_on + a.host_on
            if on <= 0 and sum(a.charged.values()) <= 0:
                continue
            share = min(1.0, on / a.own) if a.own > 0 else 0.0
            waits = sorted(a.waits.items(), key=lambda kv: -kv[1])[:3]
            out.append(LinePath(path, line, totals.get((path, line), 0.0), a.work_on, a.host_on, a.own, share,
                                {b: v for b, v in a.charged.items()}, waits, a.copies))
        out.sort(key=lambda lp: (-(lp.on_path_per_step_ns + lp.host_on_path_per_step_ns), lp.path, lp.line))
        return out


def _kernel_neighbours(segs: list[Segment]) -> tuple[list[Segment | None], list[str]]:
    """Per segment: the first device segment after it (None: none), and the name of the last one
    before it ("an event": none). One pass each way: searching from every segment would make a
    path of n segments cost n squared (a stream of unlinked tasks puts thousands of waits on it)."""
    n = len(segs)
    nxt: list[Segment | None] = [None] * n
    prev = ["an event"] * n
    after: Segment | None = None
    for j in range(n - 1, -1, -1):
        nxt[j] = after
        if segs[j].kernel >= 0:
            after = segs[j]
    before = "an event"
    for j, s in enumerate(segs):
        prev[j] = before
        if s.kernel >= 0:
            before = s.name
    return nxt, prev


def _sum_by(codes: np.ndarray, values: np.ndarray) -> tuple[list[int], list[int]]:
    """(code, sum of values) for the codes >= 0."""
    keep = codes >= 0
    u, inv = np.unique(codes[keep], return_inverse=True)
    return u.tolist(), np.bincount(inv, weights=values[keep], minlength=len(u)).astype(np.int64).tolist()
