"""What-if replay of a recorded step: how long would it take with some work scaled or removed?

A Daydream-style as-soon-as-possible re-simulation over the critical path's event graph
(:func:`critical_path.step_graph`; docs/savings.md "The replay" is the user-facing version):

* every node is a point in time (a host boundary point, a device task's start or end); its
  replayed time is the latest arrival over its incoming edges, an edge arriving at its source's
  replayed time plus its *latency*;
* work edges keep their recorded duration times a factor: a device task (start -> end) and a host
  op's self-time piece (one point to the next on its thread);
* dependency edges carry their intrinsic latency, read from the recording: the edge that bound the
  node (its source arrived last) keeps the recorded delay -- a launch into an idle stream its launch
  delay, a task queued behind another the gap after it, a sync call its return after the device
  finished; every other edge carries its default
  (launch: the smallest launch delay the step shows; stream order, event record -> wait, device ->
  sync end: 0), never more than its recorded delay;
* a host piece waiting inside a synchronisation call is 0 unless it bound its end (the call's own
  overhead): the wait is re-derived from the device -> sync dependency; a removed sync call drops
  that dependency and its wait (the host runs ahead); a device wait task (EVENT_WAIT) likewise
  lasts until the record it waits for, not its recorded length, and a worker thread's idle time
  (no op open) until the latest point of another thread before its end (work handed over);
* a node nothing leads to keeps its recorded time when it is the step's first, else it follows the
  latest host point before it by its recorded gap (a thread's first point in the step, a device task
  with no launch link: what started them is not recorded, the host is assumed to);
* torch_npu's runtime calls (recorded under a pid of their own) sit on the thread that made them.

By construction the unchanged replay reproduces every recorded time; :attr:`ReplayBase.residual_ns`
checks it. A step's length is when the next step can begin: the host's last point, or the device's
last end less the idle lead at the step's start (the next step's device tail overlaps it in steady
state), whichever is later. A saving is the unchanged replay's length minus the changed one's, per
step, so whatever the model does not capture cancels.

The relaxation is vectorised: each host thread and each device stream is a chain (one scan with a
running maximum relaxes it whole), and the edges between chains are relaxed all at once; the two
alternate until nothing moves -- as many rounds as the longest path changes chains. Past a work
budget (a path that changes chains at nearly every node: a sync per op) one linear pass in
topological order finishes instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import numpy as np

from msprof_lsp.mapping.profile.model import Persist, Profile, array_bytes, bytes_array
from msprof_lsp.mapping.profile.step_windows import step_markers, windows
from msprof_lsp.mapping.profile.timemodel import TaskClass, column_codes, task_classes
from msprof_lsp.mapping.source.critical_path import (
    _DEPS, _HOST, _KINDS, MAX_STEPS, Dependency, SegmentKind, StepsRecord, _Graph, graph_inputs, step_graph,
    step_tables, why_no_path,
)

_SYNC = _DEPS.index(Dependency.SYNC)
_EVENT = _DEPS.index(Dependency.EVENT)
_LAUNCH = _DEPS.index(Dependency.LAUNCH)
_STREAM = _DEPS.index(Dependency.STREAM)
_WAIT = _KINDS.index(SegmentKind.WAIT)
_NEG = -(1 << 42)  # "not reached yet" (times are relative to the step's start, far from this)
UNRECORDED_WAIT_NS = 2_000  # a task starting this soon after another stream's task ends, nothing else explaining
# its start, waited for it (docs/savings.md "The replay")
# vectorised rounds before one ordered pass: a round costs about 1/50 of the ordered pass's Python
# loop (a 36 k-node step: 0.37 ms against 19 ms), so past this many the pass is cheaper, and a
# graph that needs more than this costs at most 1.6x the better of the two
VECTOR_ROUNDS = 32

# what the edge into a node along its chain is; a wait task is an EVENT_WAIT / Notify Wait; an idle
# piece is host time with no op open (a worker thread waiting for work)
_NONE, _PIECE, _SYNC_PIECE, _TASK, _ORDER, _WAIT_TASK, _IDLE = range(7)


@dataclass(slots=True)
class StepModel:
    """One step's graph as chains and cross edges, with the intrinsic latencies read from it."""

    step: int
    t0: int  # the step's first recorded time, ns (absolute); replayed times are relative to it
    rec: np.ndarray  # recorded node times - t0
    n_host: int
    head: np.ndarray  # bool per node: no chain edge into it (a chain's first node)
    chain: np.ndarray  # per node: _NONE, _PIECE, _SYNC_PIECE, _TASK, _ORDER
    chain_w: np.ndarray  # the chain edge's intrinsic latency (0 at heads)
    chain_op: np.ndarray  # host_ops row of a host piece, -1
    chain_kernel: np.ndarray  # kernels row of a task's end node, -1
    chain_call: np.ndarray  # host_events row of the sync call a sync piece waits in, -1
    x_src: np.ndarray  # cross edges, sorted by destination
    x_dst: np.ndarray
    x_w: np.ndarray
    x_call: np.ndarray  # host_events row of a device -> sync end edge, -1
    x_heads: np.ndarray  # first index of each destination's run in x_dst
    fixed: np.ndarray  # per node: recorded time where nothing leads to it, else _NEG
    a_nodes: np.ndarray  # device task start nodes
    recorded_ns: int = 0  # the step's length from the recorded times
    base_ns: int = 0  # the unchanged replay's length
    ordered: bool = False  # the unchanged replay needed the ordered pass: a change's replay goes straight to it


@dataclass(slots=True)
class ReplayBase:
    """The steps' models and unchanged replays, once per profile."""

    steps: list[StepModel] = field(default_factory=list)
    unavailable: str | None = None  # why no replay (never a guess)
    notes: list[str] = field(default_factory=list)

    @property
    def residual_ns(self) -> float:
        """Largest |unchanged replay - recorded| over the steps: the model's error on the recording."""
        return max((abs(s.base_ns - s.recorded_ns) for s in self.steps), default=0.0)

    @property
    def step_ns(self) -> float:
        """Mean replayed step length."""
        return float(np.mean([s.base_ns for s in self.steps])) if self.steps else 0.0


@dataclass(frozen=True, slots=True)
class WhatIf:
    """What changes, as plain rows of the profile's tables: ``kernels`` rows take ``kernel_factors``
    of their duration, ``host_ops`` rows ``host_op_factors`` of their self time; ``removed_syncs``
    (host_events rows of blocking calls) no longer wait for the device."""

    kernels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    kernel_factors: np.ndarray = field(default_factory=lambda: np.zeros(0))
    host_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    host_op_factors: np.ndarray = field(default_factory=lambda: np.zeros(0))
    removed_syncs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass(frozen=True, slots=True)
class StepSaving:
    step: int
    base_ns: int  # unchanged replay
    changed_ns: int  # replay with the change

    @property
    def saving_ns(self) -> int:
        return self.base_ns - self.changed_ns


def replay_base(profile: Profile, max_steps: int = MAX_STEPS) -> ReplayBase:
    """The analysed steps' models (the critical path's first ``max_steps``), computed once per
    loaded profile and stored with its cache entry (:data:`PERSIST`), so a warm run reads them."""
    return profile.derived.memo(f"replay/{max_steps}", graph_inputs(profile), lambda: _replay_base(profile, max_steps),
                                persist=PERSIST)


# -- the models in the cache (typed msgpack; arrays as little-endian bytes, checked when read) ----


class _ModelRecord(msgspec.Struct, array_like=True, frozen=True):
    step: int
    t0: int
    n_host: int
    base_ns: int
    ordered: bool
    rec: bytes  # int64 per node, as every per-node array but head (uint8) and chain (int8)
    head: bytes
    chain: bytes
    chain_w: bytes
    chain_op: bytes
    chain_kernel: bytes
    chain_call: bytes
    fixed: bytes
    x_src: bytes  # int64 per cross edge, as x_dst, x_w and x_call
    x_dst: bytes
    x_w: bytes
    x_call: bytes


_BASE_DECODER = msgspec.msgpack.Decoder(StepsRecord[_ModelRecord])
_SPAN = 1 << 40  # replayed times and latencies stay inside (-_SPAN, _SPAN): _model refuses longer steps
_NODE_I8 = ("rec", "chain_w", "chain_op", "chain_kernel", "chain_call", "fixed")
_EDGE_I8 = ("x_src", "x_dst", "x_w", "x_call")


def _encode_base(base: ReplayBase) -> bytes:
    steps = [_ModelRecord(m.step, m.t0, m.n_host, m.base_ns, m.ordered, array_bytes(m.rec), array_bytes(m.head, "|u1"),
                          array_bytes(m.chain, "|i1"), *(array_bytes(getattr(m, f)) for f in _NODE_I8[1:]),
                          *(array_bytes(getattr(m, f)) for f in _EDGE_I8))
             for m in base.steps]
    return msgspec.msgpack.encode(StepsRecord(steps, list(base.notes), base.unavailable))


def _decode_base(data: bytes) -> ReplayBase:
    rec = _BASE_DECODER.decode(data)
    return ReplayBase([_decode_model(m) for m in rec.steps], unavailable=rec.unavailable, notes=list(rec.notes))


def _decode_model(r: _ModelRecord) -> StepModel:
    """A stored step model, checked for everything the replay indexes or adds with (a cache file
    is untrusted input): ValueError on anything _model could not have built."""
    n = len(r.rec) // 8
    if n < 1 or not 0 <= r.n_host <= n or (n - r.n_host) % 2:  # host points, then (start, end) per task
        raise ValueError("not a step model's node count")
    node = {f: bytes_array(getattr(r, f), n) for f in _NODE_I8}
    e = len(r.x_src) // 8
    edge = {f: bytes_array(getattr(r, f), e) for f in _EDGE_I8}
    head = bytes_array(r.head, n, "|u1")
    chain = bytes_array(r.chain, n, "|i1")
    rec, fixed, x_src, x_dst = node["rec"], node["fixed"], edge["x_src"], edge["x_dst"]
    problems = [
        (head > 1).any() or not head[0],  # a chain's first node: the first node is one
        ((chain < _NONE) | (chain > _IDLE)).any(),
        ((rec < 0) | (rec >= _SPAN)).any() or ((fixed != _NEG) & ((fixed < 0) | (fixed >= _SPAN))).any(),
        (np.abs(node["chain_w"]) >= _SPAN).any() or (np.abs(edge["x_w"]) >= _SPAN).any(),
        any((node[f] < -1).any() for f in ("chain_op", "chain_kernel", "chain_call")) or (edge["x_call"] < -1).any(),
        ((x_src < 0) | (x_src >= n) | (x_dst < 0) | (x_dst >= n)).any() or (np.diff(x_dst) < 0).any(),
        abs(r.base_ns) >= 1 << 62,
    ]
    if any(problems):
        raise ValueError("not a step model the replay built")
    x_heads = np.flatnonzero(np.concatenate([[True], x_dst[1:] != x_dst[:-1]])) if e else np.zeros(0, np.int64)
    m = StepModel(r.step, r.t0, rec, r.n_host, head.astype(bool), chain, node["chain_w"], node["chain_op"],
                  node["chain_kernel"], node["chain_call"], x_src, x_dst, edge["x_w"], edge["x_call"], x_heads, fixed,
                  np.arange(r.n_host, n, 2), base_ns=r.base_ns, ordered=r.ordered)
    m.recorded_ns = _length(m, rec)
    return m


PERSIST = Persist(_encode_base, _decode_base)
"""The step models travel with the profile's cache entry: building them (the step graphs and their
tables) is most of the savings' cost on a warm run; the replays of each finding's change stay
computed (a change depends on the sources and the settings)."""


def _why_not(profile: Profile) -> str | None:
    """Why the steps cannot be replayed: the critical path's reasons, except that a host-only
    profile (a CPU trace) with step markers replays its host threads."""
    if not len(profile.kernels) and len(profile.host_ops) and profile.steps and not profile.meta.steps_from_capture:
        return None
    return why_no_path(profile)


def _replay_base(profile: Profile, max_steps: int) -> ReplayBase:
    why = _why_not(profile)
    if why is not None:
        return ReplayBase(unavailable=why)
    tables = step_tables(profile, runtime_on_caller=True)
    markers = np.zeros(0, bool)
    if len(profile.host_ops):
        codes, names = column_codes(profile.host_ops["name"])  # each distinct name matched once
        markers = step_markers(names)[codes]
    k = profile.kernels
    lanes = (k["device"].to_numpy(np.int64) << 32) + k["stream"].to_numpy(np.int64) if len(k) else np.zeros(0, np.int64)
    comm = task_classes(k) == TaskClass.COMMUNICATION if len(k) else np.zeros(0, bool)
    out = ReplayBase()
    for step in windows(profile)[:max_steps]:
        built = step_graph(profile, step, tables)
        if built is None:
            continue
        model = _model(step.id, built[0], markers, lanes, comm)
        if model is None:
            out.notes.append(f"step {step.id}: its graph has a cycle; not replayed")
            continue
        out.steps.append(model)
    if not out.steps:
        out.unavailable = "no analysed step holds host or device work"
    return out


def what_if(profile: Profile, change: WhatIf, max_steps: int = MAX_STEPS) -> list[StepSaving]:
    """Each analysed step replayed unchanged and with ``change``; steps the change does not touch
    are not replayed again (their saving is 0)."""
    base = replay_base(profile, max_steps)
    k_rows, k_f = _lookup(change.kernels, change.kernel_factors)
    h_rows, h_f = _lookup(change.host_ops, change.host_op_factors)
    syncs = np.unique(np.asarray(change.removed_syncs, np.int64))
    out = []
    for m in base.steps:
        task_f = _factor_of(m.chain_kernel, k_rows, k_f)
        piece_f = _factor_of(m.chain_op, h_rows, h_f)
        removed_piece = np.isin(m.chain_call, syncs) & (m.chain_call >= 0)
        removed_edge = np.isin(m.x_call, syncs) & (m.x_call >= 0)
        if (task_f == 1).all() and (piece_f == 1).all() and not removed_piece.any() and not removed_edge.any():
            out.append(StepSaving(m.step, m.base_ns, m.base_ns))
            continue
        w = m.chain_w.astype(np.float64)
        w = np.where(m.chain == _TASK, w * task_f, w)
        w = np.where(m.chain == _PIECE, w * piece_f, w)
        w = np.where(removed_piece, 0.0, w)
        t = _relax(m, np.rint(w).astype(np.int64), removed_edge)
        out.append(StepSaving(m.step, m.base_ns, _length(m, t) if t is not None else m.base_ns))
    return out


# ---------------------------------------------------------------------------------------------


def _lookup(rows: np.ndarray, factors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted and unique, a row named twice taking the product of its factors."""
    rows = np.asarray(rows, np.int64)
    factors = np.clip(np.asarray(factors, np.float64), 0.0, None)
    if not len(rows):
        return rows, factors
    u, inv = np.unique(rows, return_inverse=True)
    f = np.ones(len(u))
    np.multiply.at(f, inv, factors)
    return u, f


def _factor_of(keys: np.ndarray, rows: np.ndarray, factors: np.ndarray) -> np.ndarray:
    out = np.ones(len(keys))
    if not len(rows):
        return out
    pos = np.clip(np.searchsorted(rows, keys), 0, len(rows) - 1)
    hit = (rows[pos] == keys) & (keys >= 0)
    out[hit] = factors[pos[hit]]
    return out


@dataclass(slots=True)
class _Chains:
    """Per node, the chain edge into it (a host piece to the next point of its thread, a task's
    start -> end, stream order) and what it is."""

    is_chain: np.ndarray  # per edge
    chain: np.ndarray  # per node: _NONE, _PIECE, ...
    head: np.ndarray
    op: np.ndarray  # host_ops row of a host piece
    kernel: np.ndarray  # kernels row of a task's end
    call: np.ndarray  # host_events row of a sync piece's call
    gap: np.ndarray  # recorded length of the chain edge


def _chains(g: _Graph, rec: np.ndarray, markers: np.ndarray) -> _Chains:
    n = len(rec)
    src, dst, kind, dep = g.src, g.dst, g.kind, g.dep
    host_piece = (src < g.n_host) & (dst < g.n_host) & (dst == src + 1)
    task = g.kernel >= 0
    order = dep == _STREAM
    is_chain = host_piece | task | order
    chain = np.full(n, _NONE, np.int8)
    sync_piece = host_piece & (kind == _WAIT) & (dep == _SYNC)
    chain[dst[host_piece]] = _PIECE
    chain[dst[sync_piece]] = _SYNC_PIECE
    chain[dst[task]] = _TASK
    chain[dst[task & (kind == _WAIT)]] = _WAIT_TASK
    chain[dst[order]] = _ORDER
    head = np.ones(n, bool)
    head[dst[is_chain]] = False
    op = np.full(n, -1, np.int64)
    op[dst[host_piece & (kind == _HOST)]] = g.host_op[host_piece & (kind == _HOST)]
    kernel = np.full(n, -1, np.int64)
    kernel[dst[task]] = g.kernel[task]
    call = np.full(n, -1, np.int64)
    call[dst[sync_piece]] = g.call[sync_piece]
    gap = np.zeros(n, np.int64)
    gap[dst[is_chain]] = rec[dst[is_chain]] - rec[src[is_chain]]
    # a thread's idle time ends when another thread hands it work: no op open (a worker thread), or
    # only the step marker (the main thread blocked in backward() until the autograd thread is done)
    in_marker = np.zeros(n, bool)
    own = op >= 0
    in_marker[own] = markers[op[own]] if len(markers) else False
    chain[(chain == _PIECE) & ((op < 0) | in_marker)] = _IDLE
    return _Chains(is_chain, chain, head, op, kernel, call, gap)


def _model(step_id: int, g: _Graph, markers: np.ndarray, lanes: np.ndarray, comm: np.ndarray) -> StepModel | None:
    """Split the graph into chains and cross edges and read each edge's latency from the record
    (per host_ops row ``markers``: a step marker; per kernels row ``lanes``: its device and stream
    as one number, ``comm``: a collective)."""
    n = len(g.time)
    t0 = int(g.time.min())
    rec = g.time - t0
    if len(rec) and int(rec.max()) >= (1 << 40):
        return None  # a step over 18 minutes: outside the scan's integer range
    c = _chains(g, rec, markers)
    # cross edges, plus an anchor into each node nothing leads to but the step's first, and one
    # into each idle piece's end from the latest point of another thread before it (the task
    # queue's dequeue after the enqueue, a backward node after the forward)
    x = ~c.is_chain
    xs, xd, xdep, xcall = g.src[x], g.dst[x], g.dep[x], np.where(g.dep[x] == _SYNC, g.call[x], -1)
    w_src, w_dst = _unrecorded_waits(rec, g.n_host, c, xs, xd, lanes)
    s_src, s_dst = _gradient_sync(rec, g, c, lanes, comm)
    w_src, w_dst = np.concatenate([w_src, s_src]), np.concatenate([w_dst, s_dst])
    xs, xd = np.concatenate([xs, w_src]), np.concatenate([xd, w_dst])
    xdep = np.concatenate([xdep, np.full(len(w_src), _EVENT, np.int8)])
    xcall = np.concatenate([xcall, np.full(len(w_src), -1, np.int64)])
    has_in = np.zeros(n, bool)
    has_in[g.dst] = True
    has_in[w_dst] = True
    orphans = np.flatnonzero(~has_in)
    a_src, a_dst = _anchors(rec, g.n_host, orphans)
    h_src, h_dst = _handed(rec, c.head[:g.n_host], np.flatnonzero(c.chain == _IDLE))
    a_src, a_dst = np.concatenate([a_src, h_src]), np.concatenate([a_dst, h_dst])
    xs, xd = np.concatenate([xs, a_src]), np.concatenate([xd, a_dst])
    xdep = np.concatenate([xdep, np.full(len(a_src), -1, np.int8)])
    xcall = np.concatenate([xcall, np.full(len(a_src), -1, np.int64)])
    x_w, chain_binds = _latencies(rec, c, xs, xd, xdep)
    # work keeps its duration; a wait (a host sync, a device wait task, stream order, a handed-over
    # idle piece) is re-derived from what it waited for unless it bound its end itself
    waits = ((c.chain == _SYNC_PIECE) | (c.chain == _WAIT_TASK) | (c.chain == _ORDER)
             | ((c.chain == _IDLE) & np.isin(np.arange(n), h_dst)))
    chain_w = np.where(waits, np.where(chain_binds, c.gap, np.minimum(0, c.gap)), c.gap)
    o = np.argsort(xd, kind="stable")
    xs, xd, x_w, xcall = xs[o], xd[o], x_w[o], xcall[o]
    x_heads = np.flatnonzero(np.concatenate([[True], xd[1:] != xd[:-1]])) if len(xd) else np.zeros(0, np.int64)
    fixed = np.full(n, _NEG, np.int64)
    still = np.setdiff1d(orphans, a_dst)
    fixed[still] = rec[still]
    m = StepModel(step_id, t0, rec, g.n_host, c.head, c.chain, chain_w, c.op, c.kernel, c.call, xs, xd, x_w,
                  xcall, x_heads, fixed, np.arange(g.n_host, n, 2))
    return m if _settle(m) else None


def _unrecorded_waits(rec: np.ndarray, n_host: int, c: _Chains, xs: np.ndarray, xd: np.ndarray,
                      lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cross-stream waits no task records: a device task that starts within ``UNRECORDED_WAIT_NS``
    after a task of another stream of its device ends, later than its launch and its stream
    predecessor's end, waited for that task (the optimizer's kernels for the gradient all-reduce
    where the export has no EVENT_WAIT). (sources: those ends, destinations: the starts)."""
    starts = np.arange(n_host, len(rec), 2)
    none = np.zeros(0, np.int64)
    if len(starts) < 2 or not len(lanes):
        return none, none
    ends = starts + 1
    lane = lanes[c.kernel[ends]]
    latest = np.where(c.head[starts], _NEG, rec[np.maximum(starts - 1, 0)])  # the stream predecessor's end
    x_latest = np.full(len(rec), _NEG, np.int64)
    np.maximum.at(x_latest, xd, rec[xs])
    latest = np.maximum(latest, x_latest[starts])
    o = np.argsort(rec[ends], kind="stable")
    e_t, e_lane = rec[ends][o], lane[o]
    run_head = np.ones(len(o), bool)
    run_head[1:] = e_lane[1:] != e_lane[:-1]
    before_run = np.maximum.accumulate(np.where(run_head, np.arange(len(o)), 0)) - 1
    j = np.searchsorted(e_t, rec[starts], side="right") - 1  # the latest end at or before each start
    jc = np.maximum(j, 0)
    j = np.where((j >= 0) & (e_lane[jc] == lane), before_run[jc], j)  # ... on another stream
    jc = np.maximum(j, 0)
    ok = (j >= 0) & (e_t[jc] > latest) & (rec[starts] - e_t[jc] <= UNRECORDED_WAIT_NS)
    return ends[o[jc[ok]]], starts[ok]


def _gradient_sync(rec: np.ndarray, g: _Graph, c: _Chains, lanes: np.ndarray,
                   comm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The wait for the gradient collectives that an export without event tasks does not show,
    per device: the first task on another stream launched, after the step's last collective was
    launched, by another host thread than the collectives' (the optimizer after DDP's backward
    hooks) waits for the collectives' last end -- where it started after that end, so the
    recording agrees. (sources: those ends, destinations: the starts; at most one per device)."""
    none = np.zeros(0, np.int64)
    launch = (g.dep == _LAUNCH) & (g.src < g.n_host) & (g.dst >= g.n_host)
    if not len(lanes) or not launch.any():
        return none, none
    start, host = g.dst[launch], g.src[launch]
    row = c.kernel[start + 1]
    thread = (np.cumsum(c.head[:g.n_host]) - 1)[host]
    is_comm = comm[row]
    device = lanes[row] >> 32
    src, dst = [], []
    for dev in np.unique(device[is_comm]).tolist():
        mine = device == dev
        cs = np.flatnonzero(mine & is_comm)
        last = cs[np.argmax(rec[host[cs]])]
        end = int(start[cs[np.argmax(rec[start[cs] + 1])]] + 1)
        after = np.flatnonzero(mine & ~is_comm & (lanes[row] != lanes[row[last]]) & (thread != thread[last])
                               & (rec[host] > rec[host[last]]))
        if len(after):
            first = int(start[after[np.argmin(rec[host[after]])]])
            if rec[first] >= rec[end]:
                src.append(end)
                dst.append(first)
    return np.asarray(src, np.int64), np.asarray(dst, np.int64)


def _latencies(rec: np.ndarray, c: _Chains, xs: np.ndarray, xd: np.ndarray,
               xdep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cross edges' latencies and, per node, whether its chain edge bound it. The binding edge
    into a node is the one whose source came last (a chain edge on a tie): it keeps its recorded
    delay; another launch the smallest binding launch delay of the step, any other dependency 0,
    never more than its recorded delay; an anchor its recorded gap."""
    n = len(rec)
    x_gap = rec[xd] - rec[xs]
    best_x = np.full(n, _NEG, np.int64)
    np.maximum.at(best_x, xd, rec[xs])
    chain_src = np.where(c.head, _NEG, rec[np.maximum(np.arange(n) - 1, 0)])
    chain_binds = ~c.head & (chain_src >= best_x)
    x_binds = ~chain_binds[xd] & (rec[xs] == best_x[xd])
    first = np.zeros(len(xd), bool)  # a node bound by several cross edges at once: one is enough
    bi = np.flatnonzero(x_binds)
    _, keep = np.unique(xd[bi], return_index=True)
    first[bi[keep]] = True
    launch_gaps = x_gap[first & (xdep == _LAUNCH)]
    min_launch = int(launch_gaps.min()) if len(launch_gaps) else 0
    default = np.where(xdep == _LAUNCH, min_launch, 0)
    return np.where(first | (xdep == -1), x_gap, np.minimum(default, x_gap)), chain_binds


def _settle(m: StepModel) -> bool:
    """The unchanged replay and the recorded and replayed lengths; False on a cycle."""
    none = np.zeros(len(m.x_dst), bool)
    t = _relax(m, m.chain_w, none)
    if t is None:
        return False
    unreached = t <= _NEG // 2
    if unreached.any():  # on a cycle nothing leads into: kept where recorded
        m.fixed[unreached] = m.rec[unreached]
        t = _relax(m, m.chain_w, none)
        if t is None:
            return False
    m.recorded_ns = _length(m, m.rec)
    m.base_ns = _length(m, t)
    return True


def _anchors(rec: np.ndarray, n_host: int, orphans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each node nothing leads to, the latest host point strictly before it (none for the
    step's earliest nodes)."""
    if not len(orphans) or not n_host:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    h_order = np.argsort(rec[:n_host], kind="stable")
    h_times = rec[:n_host][h_order]
    j = np.searchsorted(h_times, rec[orphans], side="left") - 1
    ok = j >= 0
    return h_order[j[ok]], orphans[ok]


def _handed(rec: np.ndarray, host_head: np.ndarray, idle: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each idle piece's end (host nodes), the latest point of another host thread strictly
    before it and not before the piece's start: (sources, the idle ends that have one)."""
    if not len(idle):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    thread = np.cumsum(host_head) - 1  # host points are in (thread, time) order: a chain per thread
    o = np.argsort(rec[:len(host_head)], kind="stable")
    times, th = rec[:len(host_head)][o], thread[o]
    m = len(o)
    run_head = np.ones(m, dtype=bool)
    run_head[1:] = th[1:] != th[:-1]
    other = np.maximum.accumulate(np.where(run_head, np.arange(m), 0)) - 1  # last point before the run
    j = np.searchsorted(times, rec[idle], side="left") - 1
    jc = np.maximum(j, 0)
    j = np.where((j >= 0) & (th[jc] == thread[idle]), other[jc], j)
    # only a point inside the idle piece can have ended it (one before its start explains nothing)
    ok = (j >= 0) & (times[np.maximum(j, 0)] >= rec[idle - 1])
    return o[j[ok]], idle[ok]


def _relax(m: StepModel, chain_w: np.ndarray, dropped: np.ndarray) -> np.ndarray | None:
    """Replayed node times (relative): chains scanned whole, cross edges relaxed all at once,
    alternating until nothing moves (one round per chain switch on the longest path); past
    ``VECTOR_ROUNDS`` one pass in topological order instead. None on a cycle."""
    keep = ~dropped
    seg = np.cumsum(m.head) - 1  # chain number per node
    w = np.where(m.head, 0, chain_w)
    c = np.cumsum(w)
    t = m.fixed.copy()
    rounds = 0 if m.ordered else min(len(m.x_dst) + 2, VECTOR_ROUNDS)
    for _ in range(rounds):
        arr = m.fixed.copy()
        if len(m.x_dst):
            src_t = t[m.x_src]
            vals = np.where(keep & (src_t > _NEG // 2), src_t + m.x_w, _NEG)
            red = np.maximum.reduceat(vals, m.x_heads)
            at = m.x_dst[m.x_heads]
            arr[at] = np.maximum(arr[at], red)
        new = _scan(arr - c, seg) + c
        new = np.where(new <= _NEG // 2, _NEG, new)
        if np.array_equal(new, t):
            return t
        t = new
    m.ordered = True  # the same chain switches on the path in every replay of this step
    return _relax_in_order(m, w, keep)


def _relax_in_order(m: StepModel, w: np.ndarray, keep: np.ndarray) -> np.ndarray | None:
    """The same times by one pass in Kahn's order over all edges (linear; None on a cycle)."""
    n = len(m.rec)
    inner = np.flatnonzero(~m.head)
    src = np.concatenate([inner - 1, m.x_src[keep]])
    dst = np.concatenate([inner, m.x_dst[keep]])
    wt = np.concatenate([w[inner], m.x_w[keep]])
    order = np.argsort(src, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    dst_l, w_l, ptr_l = dst[order].tolist(), wt[order].tolist(), ptr.tolist()
    indeg = np.bincount(dst, minlength=n).tolist()
    t = m.fixed.tolist()
    queue = [v for v in range(n) if not indeg[v]]
    neg = _NEG // 2
    for u in queue:  # grows while it is walked
        tu = t[u]
        for k in range(ptr_l[u], ptr_l[u + 1]):
            v = dst_l[k]
            if tu > neg and tu + w_l[k] > t[v]:
                t[v] = tu + w_l[k]
            indeg[v] -= 1
            if not indeg[v]:
                queue.append(v)
    if len(queue) < n:
        return None
    return np.asarray(t, dtype=np.int64)


def _scan(v: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Running maximum of ``v`` restarting at each chain (``seg`` ascending): one accumulate over
    values lifted by a per-chain offset larger than their range."""
    if not len(v):
        return v
    lo = int(v.min())
    span = int(v.max()) - lo + 1
    if (int(seg[-1]) + 1) * span < (1 << 62):
        lifted = seg * span + (v - lo)
        return np.maximum.accumulate(lifted) - seg * span + lo
    out = np.empty_like(v)  # too many chains for the lift: one accumulate per chain
    bounds = np.flatnonzero(np.concatenate([[True], seg[1:] != seg[:-1], [True]]))
    for a, b in zip(bounds[:-1], bounds[1:]):
        out[a:b] = np.maximum.accumulate(v[a:b])
    return out


def _length(m: StepModel, t: np.ndarray) -> int:
    """When the next step can begin: the host's last point, or the device's last end less the
    device's idle lead at the step's start, whichever is later."""
    host = t[:m.n_host]
    dev = t[m.n_host:]
    h = int(host.max()) if len(host) else None
    if not len(dev):
        return h or 0
    d = int(dev.max()) - int(t[m.a_nodes].min())
    return max(h, d) if h is not None else d
