"""Reader for stock PyTorch (Kineto) Chrome traces: ``*.json``, ``*.pt.trace.json[.gz]`` (§14).

``read(location, progress) -> Profile`` fills the common model:

* ``cpu_op`` / ``user_annotation`` events -> ``host_ops`` (``ProfilerStep#N`` also -> ``steps``),
  nested per thread, with shapes/types as the model's ``;``/``,`` text and ``Concrete Inputs``
  as JSON text;
* each host op's Python stack: the verbose ``Call stack`` arg when recorded, else rebuilt from
  the ``python_function`` events (kineto_stacks); ``nn.Module: X_k`` calls -> ``modules``;
* ``fwdbwd`` flows (or, without flows, equal sequence numbers) -> the forward op of each
  backward autograd node;
* GPU ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` -> ``kernels``, linked to the launching
  ``cpu_op`` by ``External id`` (else through ``correlation`` / ``ac2g`` to the CUDA runtime
  call and the op around it), then to a stack: the op's or an ancestor's, or for backward
  kernels the forward op's; NCCL kernels (``Collective name``) get core COMMUNICATION;
* ``cuda_runtime`` / ``cuda_driver`` -> ``host_events``; ``distributedInfo`` -> rank/world size.

Times: ``ts`` is µs relative to ``baseTimeNanoseconds`` with 3 decimals; converted to integer
epoch ns without going through ``ts * 1000`` in floating point (see ``_us_to_ns``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ..errors import Issue
from ..frames import StackTable
from ..locations import ProfileLocation, Progress, no_progress
from ..model import (
    HOST_EVENT_SCHEMA,
    HOST_OP_SCHEMA,
    KERNEL_SCHEMA,
    Backend,
    LinkKind,
    Profile,
    ProfileKind,
    ProfileMeta,
    Step,
    make_table,
)
from .kineto_json import Event, KinetoFile, decode, read_bytes
from .kineto_nesting import deepest_enclosing, nest
from .kineto_stacks import PythonCalls, PythonTree

HOST_CATS = frozenset({"cpu_op", "user_annotation"})
KERNEL_CORES = {"kernel": "GPU", "gpu_memcpy": "MEMCPY", "gpu_memset": "MEMSET"}
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "privateuse1_runtime", "privateuse1_driver"})
_STEP_PREFIX = "ProfilerStep#"
_BACKWARD_NODE_PREFIX = "autograd::engine::evaluate_function: "
_COMM_OP = "record_param_comms"
_NCCL_KERNEL_PREFIXES = ("ncclKernel", "ncclDevKernel")
_EXACT_US_LIMIT = 2.0**43  # below this a float64 µs value still resolves single nanoseconds

FRAME_LINES_NOTE = (
    "python frames carry each function's def line (co_firstlineno); frames already running when "
    "tracing began carry their current line; paths are relative (prefix-stripped)"
)


def read(location: ProfileLocation, progress: Progress = no_progress) -> Profile:
    """Read one Kineto trace file into a linked Profile."""
    path = Path(location.path)
    progress(f"Reading {path.name}", 0.0)
    data = read_bytes(path)
    progress(f"Decoding {path.name}", 0.25)
    trace = decode(path, data)
    del data
    progress(f"Linking {path.name}", 0.6)
    profile = build_profile(trace, location)
    progress(f"Read {path.name}", 1.0)
    return profile


# ---------------------------------------------------------------------------------------------
# Small conversions


def _us_to_ns(us: np.ndarray) -> np.ndarray:
    """µs (float64, 3 decimals) -> integer ns, exactly while |us| < 2**43.

    ``us * 1000`` would round twice (parse, then multiply) and can miss by 1 ns at trace
    magnitudes; splitting off the whole µs first keeps the only rounding in the parse, whose
    error stays below half a nanosecond up to 2**43 µs (about 100 days).
    """
    whole = np.floor(us)
    frac_ns = np.rint((us - whole) * 1000.0)
    return whole.astype(np.int64) * 1000 + frac_ns.astype(np.int64)


def _dims_entry(value: Any) -> str:
    if isinstance(value, list):
        if all(isinstance(v, int) for v in value):
            return ",".join(map(str, value))
        # TensorList (or deeper): each tensor's dims in brackets, e.g. "[2,3][4]".
        return "".join(f"[{_dims_entry(v)}]" for v in value)
    return "" if value is None else str(value)


class _ArgText:
    """Converts the raw JSON of the shape/type/value arg lists to the model's text forms.

    Profiles repeat the same few shapes thousands of times; each distinct raw text is decoded
    once.
    """

    def __init__(self) -> None:
        self._dims: dict[bytes, str] = {}
        self._types: dict[bytes, str] = {}
        self._decode = msgspec.json.Decoder().decode

    def dims(self, raw: msgspec.Raw) -> str:
        key = bytes(raw)
        text = self._dims.get(key)
        if text is None:
            text = self._dims[key] = self._convert(key, _dims_entry)
        return text

    def types(self, raw: msgspec.Raw) -> str:
        key = bytes(raw)
        text = self._types.get(key)
        if text is None:
            text = self._types[key] = self._convert(key, lambda v: "" if v is None else str(v))
        return text

    def _convert(self, key: bytes, entry) -> str:
        if not key:
            return ""
        value = self._decode(key)
        if isinstance(value, list):
            return ";".join(entry(v) for v in value)
        return str(value)

    @staticmethod
    def json_text(raw: msgspec.Raw) -> str:
        return bytes(raw).decode("utf-8", "replace")


def _step_number(name: str) -> int | None:
    if not name.startswith(_STEP_PREFIX):
        return None
    number = name[len(_STEP_PREFIX) :]
    return int(number) if number.isdigit() else None


# ---------------------------------------------------------------------------------------------
# Building the profile


class _Buckets:
    """The trace's events sorted into what the model needs, in one pass."""

    def __init__(self, events: list[Event]) -> None:
        self.host: list[Event] = []
        self.python: list[Event] = []
        self.kernels: list[Event] = []
        self.runtime: list[Event] = []
        self.flows: list[Event] = []
        self.untimed = 0
        self.other: Counter[str] = Counter()
        host, python, kernels, runtime, flows = (
            self.host, self.python, self.kernels, self.runtime, self.flows,
        )
        for e in events:
            ph = e.ph
            if ph == "X":
                if type(e.pid) is not int or type(e.tid) is not int:
                    continue  # "Spans"/"Traces" rows of the profiler itself
                if e.ts is None:
                    self.untimed += 1
                    continue
                cat = e.cat
                if cat in HOST_CATS:
                    host.append(e)
                elif cat == "python_function":
                    python.append(e)
                elif cat in KERNEL_CORES:
                    kernels.append(e)
                elif cat in RUNTIME_CATS:
                    runtime.append(e)
                else:
                    self.other[cat] += 1
            elif ph in ("s", "f"):
                if e.ts is not None and e.id is not None and e.cat in ("fwdbwd", "ac2g"):
                    flows.append(e)
            # "M" metadata, "i" instants, counters: nothing the model holds.


def _times(events: list[Event], base_ns: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Start (epoch ns) and duration (ns) columns, and the largest |ts| seen."""
    ts = np.fromiter((e.ts for e in events), dtype=np.float64, count=len(events))
    dur = np.fromiter((e.dur or 0.0 for e in events), dtype=np.float64, count=len(events))
    start = _us_to_ns(ts) + base_ns
    dur_ns = np.maximum(np.rint(dur * 1000.0), 0).astype(np.int64)
    biggest = float(np.abs(ts).max()) if len(ts) else 0.0
    return start, dur_ns, biggest


def _ints(events: list[Event], attr: str) -> np.ndarray:
    return np.fromiter((getattr(e, attr) for e in events), dtype=np.int64, count=len(events))


def build_profile(trace: KinetoFile, location: ProfileLocation) -> Profile:
    path = trace.path
    base = trace.base_time_ns
    buckets = _Buckets(trace.events)
    trace.events = []  # the buckets hold what is still needed
    issues: list[Issue] = list(trace.issues)
    stacks = StackTable()
    biggest_ts = 0.0

    # -- python calls ---------------------------------------------------------------------------
    py = buckets.python
    py_start, py_dur, big = _times(py, base)
    biggest_ts = max(biggest_ts, big)
    tree = PythonTree(
        PythonCalls(
            names=[e.name for e in py],
            start=py_start,
            end=py_start + py_dur,
            pid=_ints(py, "pid"),
            tid=_ints(py, "tid"),
            python_id=[e.args.python_id if e.args else None for e in py],
            parent_id=[e.args.python_parent_id if e.args else None for e in py],
        ),
        stacks,
    )

    # -- host ops -------------------------------------------------------------------------------
    host = buckets.host
    h_start, h_dur, big = _times(host, base)
    biggest_ts = max(biggest_ts, big)
    order = np.lexsort((-h_dur, h_start))
    host = [host[i] for i in order.tolist()]
    h_start, h_dur = h_start[order], h_dur[order]
    h_pid, h_tid = _ints(host, "pid"), _ints(host, "tid")
    h_end = h_start + h_dur
    parent, depth = nest(h_pid, h_tid, h_start, h_end)

    text = _ArgText()
    n_host = len(host)
    seq = [-1] * n_host
    fwd_thread = [-1] * n_host
    ext_id = [-1] * n_host
    dims = [""] * n_host
    types = [""] * n_host
    concrete = [""] * n_host
    op_stack = [-1] * n_host
    has_call_stack = False
    for i, e in enumerate(host):
        a = e.args
        if a is None:
            continue
        seq[i] = a.seq
        fwd_thread[i] = a.fwd_thread
        ext_id[i] = a.external_id
        if a.input_dims:
            dims[i] = text.dims(a.input_dims)
        if a.input_types:
            types[i] = text.types(a.input_types)
        if a.concrete_inputs:
            concrete[i] = text.json_text(a.concrete_inputs)
        if a.call_stack:
            op_stack[i] = stacks.intern_text(a.call_stack)
            has_call_stack = True

    # Python calls around each op: its stack (unless a Call stack was recorded) and its module.
    enclosing = tree.enclosing_calls(h_pid, h_tid, h_start, h_end).tolist()
    module = [-1] * n_host
    for i, call in enumerate(enclosing):
        if call < 0:
            continue
        module[i] = tree.module_row(call)
        if op_stack[i] < 0:
            op_stack[i] = tree.stack_id(call)

    fwd_op, unmatched_flows = _forward_ops(buckets.flows, host, h_pid, h_tid, h_start, seq, fwd_thread, base)
    if unmatched_flows:
        issues.append(
            Issue(str(path), f"{unmatched_flows} fwdbwd flow(s) point at no recorded op; those backward ops stay unlinked")
        )

    names = [e.name for e in host]
    host_ops = make_table(
        HOST_OP_SCHEMA,
        {
            "name": names,
            "cat": [e.cat for e in host],
            "start_ns": h_start,
            "dur_ns": h_dur,
            "pid": h_pid,
            "tid": h_tid,
            "parent": parent,
            "depth": depth,
            "seq": seq,
            "fwd_thread": fwd_thread,
            "input_dims": dims,
            "input_types": types,
            "concrete_inputs": concrete,
            "stack": op_stack,
            "module": module,
            "fwd_op": fwd_op,
        },
        n_host,
    )

    # -- steps ----------------------------------------------------------------------------------
    steps = []
    for i, name in enumerate(names):
        number = _step_number(name)
        if number is not None:
            steps.append(Step(number, int(h_start[i]), int(h_end[i])))
    steps.sort(key=lambda s: (s.start_ns, s.id))

    # -- runtime calls and kernels --------------------------------------------------------------
    rt = buckets.runtime
    r_start, r_dur, big = _times(rt, base)
    biggest_ts = max(biggest_ts, big)
    r_order = np.argsort(r_start, kind="stable")
    rt = [rt[i] for i in r_order.tolist()]
    r_start, r_dur = r_start[r_order], r_dur[r_order]
    r_pid, r_tid = _ints(rt, "pid"), _ints(rt, "tid")
    host_events = make_table(
        HOST_EVENT_SCHEMA,
        {
            "name": [e.name for e in rt],
            "cat": [e.cat for e in rt],
            "start_ns": r_start,
            "dur_ns": r_dur,
            "pid": r_pid,
            "tid": r_tid,
        },
        len(rt),
    )

    kernels, unlinked = _kernels(
        buckets,
        base,
        host_names=names,
        host_cat=[e.cat for e in host],
        ext_id=ext_id,
        h=(h_pid, h_tid, h_start, h_end),
        rt=rt,
        r=(r_pid, r_tid, r_start, r_start + r_dur),
        parent=parent.tolist(),
        op_stack=op_stack,
        fwd_op=fwd_op,
        fwd_thread=fwd_thread,
        steps=steps,
        h_start=h_start,
    )
    if len(kernels):
        biggest_ts = max(biggest_ts, float(np.abs((kernels["start_ns"].to_numpy() - base) / 1000).max()))

    if buckets.untimed:
        issues.append(Issue(str(path), f"skipped {buckets.untimed} event(s) without a 'ts'"))
    if biggest_ts >= _EXACT_US_LIMIT:
        issues.append(
            Issue(
                str(path),
                f"timestamps reach {biggest_ts:.0f} µs after baseTimeNanoseconds; beyond 2**43 µs "
                "a float64 'ts' no longer resolves single nanoseconds (times may be off by 1 ns)",
            )
        )

    meta = _meta(trace, location, has_kernels=bool(len(kernels) or len(rt)))
    meta.extra["frame_lines"] = "def"
    meta.extra["frame_lines_note"] = FRAME_LINES_NOTE
    meta.extra["stack_source"] = (
        "call_stack" if has_call_stack else "python_function" if len(py) else "none"
    )
    meta.extra["kernels_without_host_op"] = unlinked
    if buckets.other:
        meta.extra["other_categories"] = dict(buckets.other)

    return Profile(
        meta=meta,
        kernels=kernels,
        host_ops=host_ops,
        modules=tree.modules,
        host_events=host_events,
        stacks=stacks.stacks,
        steps=steps,
        issues=issues,
    )


def _forward_ops(
    flows: list[Event],
    host: list[Event],
    h_pid: np.ndarray,
    h_tid: np.ndarray,
    h_start: np.ndarray,
    seq: list[int],
    fwd_thread: list[int],
    base: int,
) -> tuple[list[int], int]:
    """Forward op of each backward autograd node: by ``fwdbwd`` flows, else by sequence number."""
    n = len(host)
    fwd_op = [-1] * n
    fwdbwd = [f for f in flows if f.cat == "fwdbwd"]
    if fwdbwd:
        f_start = _us_to_ns(np.fromiter((f.ts for f in fwdbwd), np.float64, len(fwdbwd))) + base
        wanted = {(f.pid, f.tid, s) for f, s in zip(fwdbwd, f_start.tolist())}
        # Ops are in (start, longer first) order, so at a shared start the deeper op wins; an
        # op with a sequence number wins over one without (the flow sits on the autograd op).
        at: dict[tuple[int, int, int], int] = {}
        for i, key in enumerate(zip(h_pid.tolist(), h_tid.tolist(), h_start.tolist())):
            if key not in wanted:
                continue
            prev = at.get(key)
            if prev is None or seq[i] >= 0 or seq[prev] < 0:
                at[key] = i
        sources: dict[Any, int] = {}
        targets: list[tuple[Any, int]] = []
        unmatched = 0
        for f, s in zip(fwdbwd, f_start.tolist()):
            op = at.get((f.pid, f.tid, s), -1) if type(f.pid) is int else -1
            if op < 0:
                unmatched += 1
                continue
            if f.ph == "s":
                sources[f.id] = op
            else:
                targets.append((f.id, op))
        for flow_id, op in targets:
            src = sources.get(flow_id, -1)
            if src >= 0:
                fwd_op[op] = src
            else:
                unmatched += 1
        return fwd_op, unmatched
    # No flows (older traces): the latest forward op with the same sequence number before the
    # backward node, on the same process (torch links exactly that one).
    last_forward: dict[tuple[int, int], int] = {}
    pids = h_pid.tolist()
    for i, e in enumerate(host):
        s = seq[i]
        if s < 0:
            continue
        if fwd_thread[i] == 0:
            last_forward[(pids[i], s)] = i
        elif fwd_thread[i] > 0 and not e.name.startswith(_BACKWARD_NODE_PREFIX):
            fwd_op[i] = last_forward.get((pids[i], s), -1)
    return fwd_op, 0


def _kernels(
    buckets: _Buckets,
    base: int,
    *,
    host_names: list[str],
    host_cat: list[str],
    ext_id: list[int],
    h: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    rt: list[Event],
    r: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    parent: list[int],
    op_stack: list[int],
    fwd_op: list[int],
    fwd_thread: list[int],
    steps: list[Step],
    h_start: np.ndarray,
):
    """GPU activity -> kernels table, each linked to its launching op and a stack."""
    ev = buckets.kernels
    k_start, k_dur, _ = _times(ev, base)
    order = np.argsort(k_start, kind="stable")
    ev = [ev[i] for i in order.tolist()]
    k_start, k_dur = k_start[order], k_dur[order]
    n = len(ev)

    # External id -> op (a cpu_op wins over an annotation carrying the same id).
    op_of_ext: dict[int, int] = {}
    for i, x in enumerate(ext_id):
        if x > 0 and (x not in op_of_ext or host_cat[op_of_ext[x]] != "cpu_op"):
            op_of_ext[x] = i

    # Runtime calls: by correlation, and the op around each (when it has no External id).
    rt_of_corr: dict[int, int] = {}
    for j, e in enumerate(rt):
        c = e.args.correlation if e.args else -1
        if c >= 0:
            rt_of_corr.setdefault(c, j)
    rt_enclosing = deepest_enclosing(*h, *r).tolist() if len(rt) else []

    # ac2g flows: kernel (device pid, stream tid, ts) -> correlation, for kernels without one.
    corr_at: dict[tuple[int, int, int], int] = {}
    ac2g = [f for f in buckets.flows if f.cat == "ac2g" and f.ph == "f" and type(f.id) is int]
    if ac2g:
        f_start = _us_to_ns(np.fromiter((f.ts for f in ac2g), np.float64, len(ac2g))) + base
        for f, s in zip(ac2g, f_start.tolist()):
            if type(f.pid) is int and type(f.tid) is int:
                corr_at[(f.pid, f.tid, s)] = f.id  # type: ignore[assignment]

    names, types, cores = [], [], []
    device = [-1] * n
    stream = [-1] * n
    host_op = [-1] * n
    stack = [-1] * n
    k_fwd = [-1] * n
    link = [LinkKind.NONE.value] * n
    backward = [False] * n
    resolved: dict[int, tuple[int, int, str, bool]] = {}
    unlinked = 0
    starts = k_start.tolist()
    for i, e in enumerate(ev):
        a = e.args
        names.append(e.name)
        core = KERNEL_CORES[e.cat]
        kind = ""
        if a is not None:
            device[i] = a.device if a.device >= 0 else (e.pid if type(e.pid) is int else -1)
            stream[i] = a.stream if a.stream >= 0 else (e.tid if type(e.tid) is int else -1)
        op = -1
        ext = a.external_id if a is not None else -1
        if ext > 0:
            op = op_of_ext.get(ext, -1)
        if op < 0:
            corr = a.correlation if a is not None else -1
            if corr < 0 and type(e.pid) is int and type(e.tid) is int:
                corr = corr_at.get((e.pid, e.tid, starts[i]), -1)
            j = rt_of_corr.get(corr, -1) if corr >= 0 else -1
            if j >= 0:
                rt_args = rt[j].args
                rt_ext = rt_args.external_id if rt_args is not None else -1
                op = op_of_ext.get(rt_ext, -1) if rt_ext > 0 else -1
                if op < 0:
                    op = rt_enclosing[j]
        if a is not None and a.collective:
            core, kind = "COMMUNICATION", a.collective
        elif op >= 0 and host_names[op] == _COMM_OP:
            core = "COMMUNICATION"
        elif e.name.startswith(_NCCL_KERNEL_PREFIXES):
            core = "COMMUNICATION"
        cores.append(core)
        types.append(kind)
        if op < 0:
            unlinked += 1
            continue
        host_op[i] = op
        r_ = resolved.get(op)
        if r_ is None:
            r_ = resolved[op] = _resolve(op, parent, op_stack, fwd_op, fwd_thread)
        stack[i], k_fwd[i], link[i], backward[i] = r_

    # Step of each kernel: that of its launching op, else of its own start.
    host_arr = np.asarray(host_op, dtype=np.int64)
    when = k_start.copy()
    linked = host_arr >= 0
    if linked.any():
        when[linked] = h_start[host_arr[linked]]
    step = _step_of(when, steps)

    table = make_table(
        KERNEL_SCHEMA,
        {
            "name": names,
            "type": types,
            "core": cores,
            "start_ns": k_start,
            "dur_ns": k_dur,
            "device": device,
            "stream": stream,
            "step": step,
            "host_op": host_op,
            "stack": stack,
            "fwd_op": k_fwd,
            "link": link,
            "backward": backward,
        },
        n,
    )
    return table, unlinked


def _resolve(
    op: int, parent: list[int], op_stack: list[int], fwd_op: list[int], fwd_thread: list[int]
) -> tuple[int, int, str, bool]:
    """(stack, forward op, link kind, backward) for a kernel launched by ``op``."""
    chain = []
    j = op
    while j >= 0:
        chain.append(j)
        j = parent[j]
    is_backward = any(fwd_thread[c] > 0 for c in chain)
    for c in chain:
        f = fwd_op[c]
        if f >= 0:
            j = f
            while j >= 0:
                if op_stack[j] >= 0:
                    return op_stack[j], f, LinkKind.BACKWARD.value, True
                j = parent[j]
            return -1, f, LinkKind.HOST.value, True
    for c in chain:
        if op_stack[c] >= 0:
            return op_stack[c], -1, LinkKind.STACK.value, is_backward
    return -1, -1, LinkKind.HOST.value, is_backward


def _step_of(when: np.ndarray, steps: list[Step]) -> np.ndarray:
    """ProfilerStep number whose range holds each time, -1 outside every step."""
    out = np.full(len(when), -1, dtype=np.int64)
    if not steps or not len(when):
        return out
    starts = np.asarray([s.start_ns for s in steps], dtype=np.int64)
    ends = np.asarray([s.end_ns for s in steps], dtype=np.int64)
    ids = np.asarray([s.id for s in steps], dtype=np.int64)
    idx = np.searchsorted(starts, when, side="right") - 1
    ok = (idx >= 0) & (when < ends[np.maximum(idx, 0)])
    out[ok] = ids[idx[ok]]
    return out


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _flag(value: Any) -> bool | None:
    if value is None:
        return None
    if isinstance(value, (bool, int)):
        return bool(value)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return None


def _meta(trace: KinetoFile, location: ProfileLocation, has_kernels: bool) -> ProfileMeta:
    md = trace.metadata
    dist = md.get("distributedInfo") if isinstance(md.get("distributedInfo"), dict) else {}
    rank = _int_or_none(dist.get("rank"))
    extra: dict[str, Any] = {
        "base_time_ns": trace.base_time_ns,
        "json_bytes": trace.size,
    }
    for key, name in (
        ("schemaVersion", "schema_version"),
        ("trace_id", "trace_id"),
        ("host_name", "host_name"),
        ("displayTimeUnit", "display_time_unit"),
        ("traceName", "trace_name"),
        ("deviceProperties", "device_properties"),
        ("with_flops", "with_flops"),
    ):
        if key in md:
            extra[name] = md[key]
    if dist:
        extra["distributed"] = dist
    return ProfileMeta(
        kind=ProfileKind.KINETO,
        path=str(trace.path),
        backend=Backend.CUDA if has_kernels else Backend.CPU,
        rank=rank if rank is not None else location.rank,
        world_size=_int_or_none(dist.get("world_size")),
        with_stack=_flag(md.get("with_stack")),
        record_shapes=_flag(md.get("record_shapes")),
        profile_memory=_flag(md.get("profile_memory")),
        with_modules=_flag(md.get("with_modules")),
        extra=extra,
        files=[str(trace.path)],
    )
