"""Lay a run description out in time: one consistent timeline per step, produced lazily.

The model (what torch_npu + CANN do):
* host ops nest properly on their thread: an op's self time is split before/after its children;
* a dispatch scope enqueues its launches (task queue on: ``Enqueue`` on the op's thread, the
  matching ``Dequeue@<scope>`` on the task-queue thread runs the CANN ``AscendCL@<api>`` call with one
  ``Node@launch`` per kernel; task queue off: the CANN call sits inside the scope itself);
* a kernel starts no earlier than its launch + ``launch_latency_ns`` and when its engine is free:
  compute kernels share one compute engine (whatever their stream), collectives use the comm
  stream and run concurrently with compute; ``wait_comm`` calls wait for pending collectives;
* ``sync`` ops block the host until the device has drained (``AscendCL@aclrtSynchronizeStream``);
* ``loss.backward()`` replays the step's autograd nodes in reverse on the backward thread while the
  main thread waits; backward ops carry no stack;
* every kernel start time is unique on the device (flow ids are kernel starts in ns).

State (cursors, counters) carries across steps, so a step's device work may spill into the next.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from .run import (
    CannSpec,
    Frame,
    Gap,
    GcPause,
    KernelSpec,
    OpSpec,
    Run,
    Stack,
    StepSpec,
    UserCall,
)

PROFILER_STEP_PREFIX = "ProfilerStep#"


@dataclass(slots=True)
class TOp:
    """A host op with its place in time."""

    uid: int
    name: str
    tid: int
    start_ns: int
    dur_ns: int
    depth: int
    parent: int  # uid, -1 at top level
    seq: int = -1  # "Sequence number"
    fwd_thread: int = 0  # "Fwd thread id": 0 forward, 1 on backward nodes
    input_dims: str = ""
    input_types: str = ""
    concrete_inputs: tuple[str, ...] = ()
    stack: Stack | None = None  # recorded "Call stack" (None: this op carries none)
    attribution: Stack = ()  # the stack its kernels are attributed to (forward op's for backward)
    backward: bool = False  # runs in backward scope (autograd thread)
    fwd_uid: int = -1  # backward node -> forward op
    step: int = -1
    spec: OpSpec | None = None
    label: str = ""  # UserCall.label of the call that issued it
    kernels: list[int] = field(default_factory=list)  # uids of kernels it launched

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(slots=True)
class TKernel:
    uid: int
    spec: KernelSpec
    name: str  # {n} resolved
    start_ns: int
    stream: int
    task_id: int
    connection_id: int  # CANN launch connection id (Node@launch <-> task)
    op_uid: int  # launching host op
    step: int
    backward: bool
    attribution: Stack
    launch_ns: int  # when the launch API ran on the host
    dur_ns: int  # the spec's duration with the run's jitter applied
    label: str = ""

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(slots=True)
class TCann:
    name: str  # "AscendCL@aclnnMm", "Node@launch"
    level: str  # acl, node, runtime, communication
    tid: int
    start_ns: int
    dur_ns: int
    connection_id: int
    kernel_uid: int = -1  # Node@launch: the task it launched (HostToDevice flow)
    mode: str = ""  # ACL_NN, ACL_OP, ACL_RTS

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass(slots=True)
class TQueue:
    """One task-queue hand-over: Enqueue (op thread) -> Dequeue@<scope> (queue thread)."""

    correlation_id: int
    scope: str
    enqueue_tid: int
    enqueue_ns: int
    enqueue_dur_ns: int
    dequeue_ns: int
    dequeue_dur_ns: int


@dataclass(slots=True)
class StepTimeline:
    number: int
    start_ns: int  # ProfilerStep#N range
    end_ns: int
    ops: list[TOp] = field(default_factory=list)  # in start order per thread (step op first)
    kernels: list[TKernel] = field(default_factory=list)  # in launch order
    cann: list[TCann] = field(default_factory=list)
    queue: list[TQueue] = field(default_factory=list)
    gc: list[tuple[int, int]] = field(default_factory=list)  # (start_ns, dur_ns)
    fwdbwd: list[tuple[int, int, int]] = field(default_factory=list)  # (fwd uid, node uid, seq)

    @property
    def step_op(self) -> TOp:
        return self.ops[0]


class Threads:
    """Thread ids of the run's host threads (OS tids are made up but stable)."""

    def __init__(self, run: Run) -> None:
        self.main = run.pid
        self.backward = run.pid + 1553
        self.dequeue = run.pid + 1409


@dataclass(slots=True)
class _Ctx:
    """What an op inherits from its ancestors while being laid out."""

    tid: int
    depth: int
    parent: int
    stack: Stack  # frames above this op (library frames + call site), innermost first
    aten_above: bool  # an aten:: op (or the launch root) already carries the stack
    backward: bool
    attribution: Stack
    label: str
    wait_comm: bool


class Jitter:
    """Deterministic ns-level noise (xorshift), so times carry arbitrary sub-µs digits as real
    profiles do. ``amplitude`` 0 disables it."""

    def __init__(self, seed: int, amplitude: int) -> None:
        self.state = (seed * 2654435761 + 1) & 0xFFFFFFFF or 1
        self.amplitude = amplitude

    def __call__(self) -> int:
        """A value in [0, amplitude]."""
        if not self.amplitude:
            return 0
        x = self.state
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self.state = x
        return x % (self.amplitude + 1)

    def signed(self) -> int:
        return self() - self.amplitude // 2


class Clock:
    """Stateful layout engine; ``steps()`` yields one StepTimeline per StepSpec."""

    ENQUEUE_NS = 1500
    NODE_LAUNCH_NS = 2500
    ACL_OVERHEAD_NS = 2000
    STEP_TAIL_NS = 20_000

    def __init__(self, run: Run) -> None:
        self.run = run
        self.threads = Threads(run)
        self.t_main = run.start_ns
        self.t_deq = run.start_ns
        self.t_compute = run.start_ns
        self.t_comm = run.start_ns
        self.next_uid = 0
        self.next_kernel = 0
        self.next_seq = 17  # torch starts numbering after the graph-building ops of setup
        self.next_conn = 1
        self.next_corr = 1
        self.task_ids: dict[int, int] = {}
        self.name_counters: dict[str, int] = {}
        self.used_starts: set[int] = set()
        self.prev_used: set[int] = set()
        self.cur: StepTimeline | None = None
        self.pending_backward: list[TOp] = []
        self.jitter = Jitter(run.pid * 31 + run.rank, run.jitter_ns)
        self.comm_waited = run.start_ns  # the collectives' end a recorded EVENT_WAIT already waited for

    # -- public -----------------------------------------------------------------------------

    def steps(self) -> Iterator[StepTimeline]:
        for spec in self.run.steps:
            yield self.lay_step(spec)

    def lay_step(self, spec: StepSpec) -> StepTimeline:
        self.prev_used, self.used_starts = self.used_starts, set()
        start = self.t_main
        tl = StepTimeline(spec.number, start, start)
        self.cur = tl
        step_op = self._new_op(f"{PROFILER_STEP_PREFIX}{spec.number}", self.threads.main, start, 0, -1)
        self.t_main += 10_000
        self.pending_backward = []
        for item in spec.items:
            if isinstance(item, Gap):
                self.t_main += item.ns
            elif isinstance(item, GcPause):
                self.t_main += item.gap_ns
                tl.gc.append((self.t_main, item.ns))
                self.t_main += item.ns
            elif isinstance(item, UserCall):
                self._lay_call(item, step_op)
            else:  # pragma: no cover - description error
                raise TypeError(f"unknown step item {item!r}")
        self.t_main += self.STEP_TAIL_NS
        step_op.dur_ns = self.t_main - start
        tl.end_ns = self.t_main
        self.cur = None
        return tl

    # -- items ------------------------------------------------------------------------------

    def _lay_call(self, call: UserCall, step_op: TOp) -> None:
        self.t_main += call.gap_ns + self.jitter()
        for launch in call.launches:
            stack = tuple(launch.frames) + tuple(call.site)
            ctx = _Ctx(
                tid=self.threads.main,
                depth=1,
                parent=step_op.uid,
                stack=stack,
                aten_above=False,
                backward=False,
                attribution=stack,
                label=call.label,
                wait_comm=call.wait_comm,
            )
            self.t_main = self._lay_op(launch.op, self.t_main, ctx, root=True)
            self.t_main += 1000
        if call.sync_api:
            self.t_main = self._sync(self.threads.main, self.t_main, api=call.sync_api, copy=False)
        if call.backward:
            self._lay_backward(call, step_op)

    def _lay_backward(self, call: UserCall, step_op: TOp) -> None:
        tid = self.threads.backward
        t = self.t_main + 15_000
        nodes = list(reversed(self.pending_backward))
        comm_at: dict[int, list] = {}
        for c in call.comm:
            key = len(nodes) if c.after_nodes < 0 or c.after_nodes > len(nodes) else c.after_nodes
            comm_at.setdefault(key, []).append(c)
        for i in range(len(nodes) + 1):
            for c in comm_at.get(i, ()):
                ctx = _Ctx(tid, 0, -1, (), True, True, (), call.label, False)
                t = self._lay_op(c.op, t, ctx, root=False) + call.node_gap_ns
            if i == len(nodes):
                break
            fwd = nodes[i]
            assert fwd.spec is not None
            node_name = fwd.spec.autograd
            ev = self._new_op(f"autograd::engine::evaluate_function: {node_name}", tid, t, 0, -1)
            ev.backward = True
            ev.attribution = fwd.attribution
            ev.label = fwd.label
            node = self._new_op(node_name, tid, t + 1500, 1, ev.uid)
            node.seq = fwd.seq
            node.fwd_thread = 1
            node.backward = True
            node.fwd_uid = fwd.uid
            node.attribution = fwd.attribution
            node.label = fwd.label
            assert self.cur is not None
            self.cur.fwdbwd.append((fwd.uid, node.uid, fwd.seq))
            ctx = _Ctx(tid, 2, node.uid, (), True, True, fwd.attribution, fwd.label, False)
            tn = node.start_ns + 2500
            for b in fwd.spec.backward:
                tn = self._lay_op(b, tn, ctx, root=False) + 800
            node.dur_ns = tn + 1500 - node.start_ns
            ev.dur_ns = node.end_ns + 1200 - ev.start_ns
            t = ev.end_ns + call.node_gap_ns
        # The main thread blocks in backward() until the engine is done.
        self.t_main = max(self.t_main, t + 10_000)
        self.pending_backward = []

    # -- ops --------------------------------------------------------------------------------

    def _new_op(self, name: str, tid: int, start: int, depth: int, parent: int) -> TOp:
        assert self.cur is not None
        op = TOp(self.next_uid, name, tid, start, 0, depth, parent, step=self.cur.number)
        self.next_uid += 1
        self.cur.ops.append(op)
        return op

    def _lay_op(self, spec: OpSpec, t: int, ctx: _Ctx, *, root: bool) -> int:
        """Lay ``spec`` out from ``t`` on ctx.tid; return its end time."""
        run = self.run
        op = self._new_op(spec.name, ctx.tid, t, ctx.depth, ctx.parent)
        op.spec = spec
        op.input_dims = spec.input_dims
        op.input_types = spec.input_types
        op.concrete_inputs = spec.concrete_inputs
        op.backward = ctx.backward
        op.label = ctx.label
        own_stack = tuple(spec.frames) + tuple(ctx.stack)
        is_aten = spec.name.startswith("aten::")
        # torch_npu records the stack on the outermost aten op of a call (and on the call's own
        # record_function label, e.g. Optimizer.step#AdamW.step); never in backward scope.
        carries = not ctx.backward and (root or (is_aten and not ctx.aten_above))
        if carries and run.config.with_stack and own_stack:
            op.stack = own_stack
        op.attribution = ctx.attribution if ctx.backward else own_stack
        if spec.autograd and not ctx.backward:
            op.seq = self.next_seq
            self.next_seq += 1
            self.pending_backward.append(op)

        has_inner = bool(spec.children or spec.kernels or spec.sync or spec.cann)
        self_ns = spec.self_ns + self.jitter()
        pre = self_ns // 2 if has_inner else self_ns
        cursor = t + pre
        if spec.kernels:
            cursor = self._launch(op, spec, cursor, ctx)
        child_ctx = _Ctx(
            tid=ctx.tid,
            depth=ctx.depth + 1,
            parent=op.uid,
            stack=own_stack,
            aten_above=ctx.aten_above or (carries and is_aten),
            backward=ctx.backward,
            attribution=op.attribution,
            label=ctx.label,
            wait_comm=ctx.wait_comm,
        )
        for child in spec.children:
            cursor = self._lay_op(child, cursor, child_ctx, root=False) + 500
        for api in spec.cann:
            cursor = self._cann(api, ctx.tid, cursor) + 300
        if spec.sync:
            cursor = self._sync(ctx.tid, cursor)
        end = cursor + (self_ns - pre if has_inner else 0)
        op.dur_ns = max(end - t, 1)
        return t + op.dur_ns

    def _cann(self, api: CannSpec, tid: int, t: int) -> int:
        assert self.cur is not None
        conn = self._conn()
        self.cur.cann.append(TCann(api.name, api.level, tid, t, api.dur_ns, conn, mode="ACL_RTS"))
        return t + api.dur_ns

    def _sync(self, tid: int, t: int, *, api: str = "AscendCL@aclrtSynchronizeStream", copy: bool = True) -> int:
        """A runtime sync until the device is drained, then (``copy``) the D2H copy of the scalar."""
        assert self.cur is not None
        drain = max(self.t_compute, self.t_deq + self.run.launch_latency_ns, t + 2000)
        if api.endswith("Device"):
            drain = max(drain, self.t_comm)
        sync = TCann(api, "acl", tid, t + 500, drain + 1500 - (t + 500), self._conn(), mode="ACL_RTS")
        self.cur.cann.append(sync)
        if not copy:
            return sync.end_ns + 500
        cp = TCann("AscendCL@aclrtMemcpy", "acl", tid, sync.end_ns + 800, 9000, self._conn(), mode="ACL_RTS")
        self.cur.cann.append(cp)
        return cp.end_ns + 500

    def _conn(self) -> int:
        c = self.next_conn
        self.next_conn += 1
        return c

    def _launch(self, op: TOp, spec: OpSpec, cursor: int, ctx: _Ctx) -> int:
        """Launch ``spec.kernels`` from ``op``; return the op-thread cursor afterwards."""
        assert self.cur is not None
        run = self.run
        acl_name, mode = _acl_api(spec)
        if run.config.task_queue:
            corr = self.next_corr
            self.next_corr += 1
            enq = cursor
            deq = max(enq + run.queue_latency_ns, self.t_deq)
            tid = self.threads.dequeue
            t_api = deq + 1200
            t_end = self._cann_launch(op, spec, acl_name, mode, tid, t_api, ctx)
            deq_end = t_end + 1500
            self.cur.queue.append(TQueue(corr, spec.name, ctx.tid, enq, self.ENQUEUE_NS, deq, deq_end - deq))
            self.t_deq = deq_end
            return enq + self.ENQUEUE_NS
        t_end = self._cann_launch(op, spec, acl_name, mode, ctx.tid, cursor, ctx)
        return t_end

    def _cann_launch(self, op: TOp, spec: OpSpec, acl_name: str, mode: str, tid: int, t: int, ctx: _Ctx) -> int:
        """The CANN API call that launches the kernels (with Node@launch per kernel)."""
        assert self.cur is not None
        acl = TCann(acl_name, _acl_level(acl_name), tid, t, 0, self._conn(), mode=mode)
        self.cur.cann.append(acl)
        cursor = t + self.ACL_OVERHEAD_NS
        if spec.compile:
            comp = TCann("AscendCL@opCompile", "acl", tid, cursor, spec.compile_ns, self._conn(), mode=mode)
            self.cur.cann.append(comp)
            cursor = comp.end_ns + 1000
        for k in spec.kernels:
            launch = TCann("Node@launch", "node", tid, cursor, self.NODE_LAUNCH_NS, self._conn())
            kernel = self._place_kernel(k, op, launch.connection_id, cursor, ctx)
            launch.kernel_uid = kernel.uid
            self.cur.cann.append(launch)
            cursor = launch.end_ns + 300
        acl.dur_ns = cursor + self.ACL_OVERHEAD_NS - t
        return acl.end_ns

    def _place_kernel(self, k: KernelSpec, op: TOp, conn: int, launch_ns: int, ctx: _Ctx) -> TKernel:
        assert self.cur is not None
        run = self.run
        earliest = launch_ns + run.launch_latency_ns + self.jitter()
        dur = max(k.dur_ns + self.jitter.signed(), 20) if k.dur_ns > 2 * self.jitter.amplitude else k.dur_ns
        if k.is_comm:
            stream = k.stream if k.stream >= 0 else run.comm_stream
            start = max(earliest, self.t_comm)
        else:
            stream = k.stream if k.stream >= 0 else run.compute_stream
            start = max(earliest, self.t_compute)
            if ctx.wait_comm and run.record_comm_waits and self.t_comm > self.comm_waited:
                start = self._comm_wait(op, conn, launch_ns, earliest, ctx)
            elif ctx.wait_comm:
                start = max(start, self.t_comm)
        start = self._free_start(start)
        if k.is_comm:
            self.t_comm = start + dur
        else:
            self.t_compute = start + dur
        return self._task(k, name_of=k.name, start=start, dur=dur, stream=stream, op=op, conn=conn,
                          launch_ns=launch_ns, ctx=ctx)

    def _free_start(self, start: int) -> int:
        while start in self.used_starts or start in self.prev_used:
            start += 1
        self.used_starts.add(start)
        return start

    def _comm_wait(self, op: TOp, conn: int, launch_ns: int, earliest: int, ctx: _Ctx) -> int:
        """The compute stream's wait for the pending collectives as a real export records it: an
        EVENT_RECORD on the communication stream after them, an EVENT_WAIT on the compute stream
        until it fires (``Run.record_comm_waits``). Returns when the next compute task may start."""
        run = self.run
        rec = KernelSpec("EVENT_RECORD", "EVENT_RECORD", "N/A", 1000)
        wait = KernelSpec("EVENT_WAIT", "EVENT_WAIT", "N/A", 500)
        r_start = self._free_start(self.t_comm)
        self._task(rec, name_of=rec.name, start=r_start, dur=rec.dur_ns, stream=run.comm_stream, op=op, conn=conn,
                   launch_ns=launch_ns, ctx=ctx)
        self.t_comm = r_start + rec.dur_ns
        w_start = self._free_start(max(earliest, self.t_compute))
        w_dur = max(self.t_comm - w_start, 0) + wait.dur_ns
        self._task(wait, name_of=wait.name, start=w_start, dur=w_dur, stream=run.compute_stream, op=op, conn=conn,
                   launch_ns=launch_ns, ctx=ctx)
        self.t_compute = self.comm_waited = w_start + w_dur
        return max(earliest, self.t_compute)

    def _task(self, k: KernelSpec, *, name_of: str, start: int, dur: int, stream: int, op: TOp, conn: int,
              launch_ns: int, ctx: _Ctx) -> TKernel:
        assert self.cur is not None
        name = name_of
        if "{n}" in name:
            n = self.name_counters.get(k.name, 0)
            self.name_counters[k.name] = n + 1
            name = name.replace("{n}", str(n))
        task_id = self.task_ids.get(stream, 0)
        self.task_ids[stream] = (task_id + 1) % 65536
        tk = TKernel(
            uid=self.next_kernel,
            spec=k,
            name=name,
            start_ns=start,
            stream=stream,
            task_id=task_id,
            connection_id=conn,
            op_uid=op.uid,
            step=self.cur.number,
            backward=ctx.backward,
            attribution=ctx.attribution if ctx.backward else op.attribution,
            launch_ns=launch_ns,
            dur_ns=dur,
            label=ctx.label,
        )
        self.next_kernel += 1
        self.cur.kernels.append(tk)
        op.kernels.append(tk.uid)
        return tk


def _acl_api(spec: OpSpec) -> tuple[str, str]:
    """CANN API a dispatch scope calls: aclnn ops by name, acl_op types via aclopCompileAndExecute."""
    if all(k.type == "MEMCPY_ASYNC" for k in spec.kernels):
        return "AscendCL@aclrtMemcpyAsync", "ACL_RTS"
    if spec.name.startswith("aclnn"):
        return f"AscendCL@{spec.name}", "ACL_NN"
    if spec.name.startswith("c10d::"):
        return "Communication@HcclAllReduce" if "allreduce" in spec.name.lower() else f"Communication@{spec.name}", ""
    return "AscendCL@aclopCompileAndExecute", "ACL_OP"


def _acl_level(name: str) -> str:
    head = name.split("@", 1)[0]
    return {"AscendCL": "acl", "Node": "node", "Runtime": "runtime", "Communication": "communication",
            "Model": "model"}.get(head, "acl")


def lay_out(run: Run) -> Iterator[StepTimeline]:
    """The run's steps, laid out one by one (a fresh clock each call: deterministic)."""
    return Clock(run).steps()


def frame_text(stack: Stack | None) -> str:
    """torch_npu ``Call stack`` text: file frames only, ``;\\r\\n``-joined, innermost first."""
    if not stack:
        return ""
    return ";\r\n".join(f.text for f in stack if isinstance(f, Frame))
