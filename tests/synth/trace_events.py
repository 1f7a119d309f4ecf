"""trace_view.json / msprof_*.json events from a laid-out step.

Processes are identified by ``process_name`` metadata; their pids are synthetic like CANN's
(``<pid>02``, ``<pid>1100`` ...) so nothing can rely on pid values.
"""

from __future__ import annotations

from collections.abc import Iterator

from .clock import StepTimeline, TCann, TKernel, TOp, Threads
from .fmt import ts_text, us_float
from .overlap import step_overlap
from .run import Frame, Run, Stack
from .variant import TextVariant

# CANN-layer name prefixes Level0 prunes from trace_view.json.
LEVEL0_PRUNE = ("CANN", "AscendCL", "Runtime", "GE", "Node", "Model", "Hccl", "acl_to_npu", "Communication@")

OVERLAP_TIDS = {
    "2024": {"Computing": 0, "Communication": 1, "Communication(Not Overlapped)": 2, "Free": 3},
    "2026": {"Communication": 0, "Communication(Not Overlapped)": 1, "Computing": 2, "Free": 3},
}

INVALID_U32 = 4294967295


class Pids:
    def __init__(self, run: Run) -> None:
        self.python = run.pid
        self.gc = run.pid * 100 + 7
        self.cann = run.pid * 100 + 2
        self.hardware = run.pid * 10_000 + 8000 + run.device
        self.overlap = run.pid * 10_000 + 1100


def stack_text(stack: Stack | None, *, space: bool = True, sep: str = ";\r\n") -> str:
    if not stack:
        return ""
    parts = [f.text if space else f"{f.file}({f.line}):{f.func}" for f in stack if isinstance(f, Frame)]
    return sep.join(parts)


def dims_text(value: str) -> str:
    """``"2,3;3"`` -> the torch_npu form ``"2,3;\\r\\n3"``."""
    return value.replace(";", ";\r\n")


def linked(k: TKernel) -> bool:
    return k.spec.linked


def task_type_arg(k: TKernel, variant: TextVariant) -> str:
    if k.spec.type in ("MEMCPY_ASYNC", "EVENT_RECORD", "EVENT_WAIT"):
        return k.spec.type
    if variant.task_type == "other":
        return "Other"
    return k.spec.core


class TraceWriter:
    """Builds the event dicts; ``python=False`` gives the msprof CLI form (no framework side)."""

    def __init__(self, run: Run, variant: TextVariant, *, python: bool = True) -> None:
        self.run = run
        self.v = variant
        self.python = python
        self.pids = Pids(run)
        self.threads = Threads(run)
        self.level0 = run.level0

    def ts(self, ns: int) -> str | float:
        return ns / 1000 if self.v.numeric_ts else ts_text(ns)

    # -- metadata -------------------------------------------------------------------------------

    def metadata(self) -> list[dict]:
        run, p, th = self.run, self.pids, self.threads
        out: list[dict] = []

        def proc(pid: int, name: str, label: str, sort: int, *, m_first: bool) -> None:
            for meta, args in (("process_name", {"name": name}), ("process_labels", {"labels": label}),
                               ("process_sort_index", {"sort_index": sort})):
                if m_first:
                    out.append({"ph": "M", "name": meta, "pid": pid, "tid": 0, "args": args})
                else:
                    out.append({"name": meta, "pid": pid, "tid": 0, "args": args, "ph": "M"})

        def thread(pid: int, tid: int, name: str, sort: int, *, m_first: bool) -> None:
            for meta, args in (("thread_name", {"name": name}), ("thread_sort_index", {"sort_index": sort})):
                if m_first:
                    out.append({"ph": "M", "name": meta, "pid": pid, "tid": tid, "args": args})
                else:
                    out.append({"name": meta, "pid": pid, "tid": tid, "args": args, "ph": "M"})

        host_tids = [th.main, th.backward] + ([th.dequeue] if run.config.task_queue else [])
        if self.python:
            proc(p.python, "Python", "CPU", 0, m_first=True)
            for tid in host_tids:
                thread(p.python, tid, f"Thread {tid}", tid, m_first=True)
            if run.config.gc_detect_threshold is not None:
                proc(p.gc, "Python GC", "CPU", 1, m_first=True)
                thread(p.gc, th.main, f"Thread {th.main}", th.main, m_first=True)
        if not self.level0:
            proc(p.cann, "CANN", "CPU", 2, m_first=False)
            for tid in host_tids:
                thread(p.cann, tid, f"Thread {tid}", tid, m_first=False)
        label = f"NPU {run.device}" if self.v.device_label == "id" else "NPU"
        proc(p.hardware, "Ascend Hardware", label, 8, m_first=False)
        for stream in sorted({run.compute_stream, run.comm_stream} | self._extra_streams()):
            thread(p.hardware, stream, f"Stream {stream}", stream, m_first=False)
        proc(p.overlap, "Overlap Analysis", label, 11, m_first=False)
        for lane, tid in sorted(OVERLAP_TIDS[self.v.overlap_tids].items(), key=lambda kv: kv[1]):
            thread(p.overlap, tid, lane, tid, m_first=False)
        return out

    def _extra_streams(self) -> set[int]:
        streams: set[int] = set()
        for step in self.run.steps[: min(len(self.run.steps), 4)]:
            for item in step.items:
                for launch in getattr(item, "launches", ()):
                    for op in launch.op.walk():
                        for k in op.kernels:
                            if k.stream >= 0:
                                streams.add(k.stream)
                        for b in op.backward:
                            for bo in b.walk():
                                streams.update(k.stream for k in bo.kernels if k.stream >= 0)
        return streams

    # -- per step -------------------------------------------------------------------------------

    def step_events(self, tl: StepTimeline) -> Iterator[dict]:
        if self.python:
            yield from self._python(tl)
        if not self.level0:
            yield from self._cann(tl)
        yield from self._device(tl)
        yield from self._overlap(tl)

    def _python(self, tl: StepTimeline) -> Iterator[dict]:
        run, p = self.run, self.pids
        kernels = {k.uid: k for k in tl.kernels}
        fwd_s = {f: seq for f, _, seq in tl.fwdbwd}
        bwd_f = {n: seq for _, n, seq in tl.fwdbwd}
        for op in tl.ops:
            yield self._cpu_op(op)
            if op.uid in fwd_s:
                yield self._flow("s", "fwdbwd", "fwdbwd", fwd_s[op.uid], p.python, op.tid, op.start_ns)
            if op.uid in bwd_f:
                yield self._flow("f", "fwdbwd", "fwdbwd", bwd_f[op.uid], p.python, op.tid, op.start_ns)
            for kuid in op.kernels:
                k = kernels[kuid]
                if linked(k):
                    yield self._flow("s", "torch_to_npu", "async_npu", k.start_ns, p.python, op.tid, op.start_ns)
        for q in tl.queue:
            name = "Enqueue" if self.v.enqueue_names == "plain" else f"Enqueue@{q.scope}"
            yield {"ph": "X", "name": name, "pid": p.python, "tid": q.enqueue_tid, "ts": self.ts(q.enqueue_ns),
                   "dur": us_float(q.enqueue_dur_ns), "cat": "enqueue", "args": {"correlation_id": q.correlation_id}}
            yield self._flow("s", "enqueue_to_dequeue", "async_task_queue", q.correlation_id, p.python,
                             q.enqueue_tid, q.enqueue_ns)
            yield {"ph": "X", "name": f"Dequeue@{q.scope}", "pid": p.python, "tid": self.threads.dequeue,
                   "ts": self.ts(q.dequeue_ns), "dur": us_float(q.dequeue_dur_ns), "cat": "dequeue",
                   "args": {"correlation_id": q.correlation_id}}
            yield self._flow("f", "enqueue_to_dequeue", "async_task_queue", q.correlation_id, p.python,
                             self.threads.dequeue, q.dequeue_ns)
        if run.config.gc_detect_threshold is not None:
            for start, dur in tl.gc:
                yield {"ph": "X", "name": "GC", "pid": p.gc, "tid": self.threads.main, "ts": self.ts(start),
                       "dur": us_float(dur), "cat": "GC", "args": {}}

    def _cpu_op(self, op: TOp) -> dict:
        cfg = self.run.config
        args: dict = {"Sequence number": op.seq, "Fwd thread id": op.fwd_thread}
        if cfg.record_shapes and (op.input_dims or op.input_types):
            args["Input Dims"] = dims_text(op.input_dims)
            args["Input type"] = dims_text(op.input_types)
        if op.stack is not None:
            args["Call stack"] = stack_text(op.stack, space=self.v.frame_space)
        return {"ph": "X", "name": op.name, "pid": self.pids.python, "tid": op.tid, "ts": self.ts(op.start_ns),
                "dur": us_float(op.dur_ns), "cat": "cpu_op", "args": args}

    def _flow(self, ph: str, name: str, cat: str, fid: int | str, pid: int, tid: int, ns: int) -> dict:
        return {"ph": ph, "bp": "e", "name": name, "id": fid, "pid": pid, "tid": tid, "ts": self.ts(ns), "cat": cat}

    def _cann(self, tl: StepTimeline) -> Iterator[dict]:
        p = self.pids
        kernels = {k.uid: k for k in tl.kernels}
        for c in tl.cann:
            yield self._cann_event(c)
            if c.kernel_uid >= 0 and linked(kernels[c.kernel_uid]):
                k = kernels[c.kernel_uid]
                fid = str((k.stream << 32) + c.connection_id)
                yield {"name": f"HostToDevice{fid}", "ph": "s", "cat": "HostToDevice", "id": fid, "pid": p.cann,
                       "tid": c.tid, "ts": self.ts(c.start_ns)}

    def _cann_event(self, c: TCann) -> dict:
        api = c.name.split("@", 1)[1] if "@" in c.name else c.name
        return {"name": c.name, "pid": self.pids.cann, "tid": c.tid, "ts": self.ts(c.start_ns),
                "dur": us_float(c.dur_ns),
                "args": {"Thread Id": c.tid, "Mode": c.mode, "level": c.level, "id": api, "item_id": "0",
                         "connection_id": c.connection_id},
                "ph": "X"}

    def _device(self, tl: StepTimeline) -> Iterator[dict]:
        p = self.pids
        launches = {c.kernel_uid: c for c in tl.cann if c.kernel_uid >= 0}
        for k in sorted(tl.kernels, key=lambda k: k.start_ns):
            args: dict = {"Model Id": INVALID_U32, "Task Type": task_type_arg(k, self.v), "Stream Id": k.stream,
                          "Task Id": k.task_id, "Batch Id": 0, "Subtask Id": INVALID_U32,
                          "connection_id": k.connection_id}
            if k.spec.type == "MEMCPY_ASYNC":
                size = max(k.spec.memcpy_bytes, 0)
                args["size(B)"] = size
                args["bandwidth(GB/s)"] = round(size / k.dur_ns, 4) if k.dur_ns else 0  # B/ns = GB/s
                args["operation"] = "host to device"
            yield {"name": k.name, "pid": p.hardware, "tid": k.stream, "ts": self.ts(k.start_ns),
                   "dur": us_float(k.dur_ns), "args": args, "ph": "X"}
            if not linked(k):
                continue
            c = launches.get(k.uid)
            if c is not None and not self.level0:
                fid = str((k.stream << 32) + c.connection_id)
                yield {"name": f"HostToDevice{fid}", "ph": "f", "id": fid, "ts": self.ts(k.start_ns),
                       "cat": "HostToDevice", "pid": p.hardware, "tid": k.stream, "bp": "e"}
            if self.python:
                yield self._flow("f", "torch_to_npu", "async_npu", k.start_ns, p.hardware, k.stream, k.start_ns)

    def _overlap(self, tl: StepTimeline) -> Iterator[dict]:
        ov = step_overlap(tl)
        tids = OVERLAP_TIDS[self.v.overlap_tids]
        for lane, intervals in ov.lanes.items():
            for s, e in intervals:
                yield {"name": lane, "pid": self.pids.overlap, "tid": tids[lane], "ts": self.ts(s),
                       "dur": us_float(e - s), "ph": "X"}
