"""torch_npu trace_view.json events -> the model tables, with flows resolved.

Input is the columnar :class:`TraceEvents` from :mod:`.trace_json`; everything here is numpy masks
and vectorised joins. Processes are identified by their ``process_name`` metadata, never by pid
(CANN-side pids are synthetic), and Overlap Analysis lanes by ``thread_name`` (rule 10).

What is linked here, producer-specific:
* ``torch_to_npu`` flows: ``s`` on the dispatch-scope cpu_op (pid, tid, ts) -> ``f`` on the kernel
  -> ``kernels.host_op``;
* kernels without such a flow: ``HostToDevice`` -> CANN launch -> enclosing Dequeue ->
  Enqueue by correlation_id -> deepest cpu_op around the Enqueue (how torch_npu itself builds
  ``torch_to_npu``);
* ``fwdbwd`` flows -> ``host_ops.fwd_op``, then the Sequence-number fallback.
The producer-agnostic part (nesting, ancestor walk, backward resolution) is :mod:`..linking`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from msprof_lsp.mapping.interning import per_distinct
from msprof_lsp.mapping.errors import Issue
from msprof_lsp.mapping.numbers import int64_of
from msprof_lsp.mapping.profile.frames import StackTable
from msprof_lsp.mapping.profile.linking import (
    assign_modules,
    assign_parents,
    innermost_enclosing,
    link_backward_by_sequence,
    match_rows,
)
from msprof_lsp.mapping.profile.model import (
    HOST_EVENT_SCHEMA,
    HOST_OP_SCHEMA,
    KERNEL_SCHEMA,
    MODULE_SCHEMA,
    OVERLAP_SCHEMA,
    Step,
    empty_table,
    make_table,
)
from msprof_lsp.mapping.profile.step_windows import profiler_steps, step_ids
from msprof_lsp.mapping.profile.readers.trace_json import NO_INT, NO_TIME, TraceEvents

HARDWARE = "Ascend Hardware"
OVERLAP = "Overlap Analysis"
CANN = "CANN"
GC = "Python GC"
KNOWN_CORES = frozenset(
    {"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "HCCL", "COMMUNICATION", "DSA_SQE"}
)
CANN_LEVELS = {
    "AscendCL": "acl",
    "Runtime": "runtime",
    "Node": "node",
    "Model": "model",
    "Communication": "communication",
    "Hccl": "communication",
}
_MODULE_RE = re.compile(r"^nn\.Module:\s*(?P<cls>.+?)_(?P<k>\d+)$")
_NPU_LABEL_RE = re.compile(r"^NPU\s*(\d+)?$")
_SHAPE_SEP_RE = re.compile(r";\r?\n")


@dataclass(slots=True)
class TraceTables:
    """What trace_view.json contributes to a Profile (kernels not yet joined with kernel_details)."""

    host_ops: pd.DataFrame
    modules: pd.DataFrame
    kernels: pd.DataFrame
    host_events: pd.DataFrame
    overlap: pd.DataFrame
    steps: list[Step]
    issues: list[Issue] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    aicore_freq: list[list[int]] = field(default_factory=list)  # [ts_ns, MHz] of the "AI Core Freq" counter


@dataclass(slots=True)
class _Processes:
    names: dict[int, str]  # pid -> process_name
    labels: dict[int, str]  # pid -> process_labels
    threads: dict[tuple[int, int], str]  # (pid, tid) -> thread_name

    def pids(self, name: str) -> np.ndarray:
        return np.array([p for p, n in self.names.items() if n == name], dtype=np.int64)

    def device(self, pid: int) -> int:
        m = _NPU_LABEL_RE.match(self.labels.get(pid, "").strip())
        n = int64_of(m.group(1)) if m and m.group(1) else None  # "NPU 2²"-like labels: no device
        return -1 if n is None or n < 0 else n


def _processes(ev: TraceEvents) -> _Processes:
    meta = np.flatnonzero(ev.ph == ev.code("M"))
    name = ev.name[meta]
    value = ev.args["name"][meta]
    labels = ev.args["labels"][meta]
    strings = ev.strings
    out = _Processes({}, {}, {})
    pid, tid = ev.pid[meta], ev.tid[meta]
    for rows, target in (
        (np.flatnonzero(name == ev.code("process_name")), "names"),
        (np.flatnonzero(name == ev.code("process_labels")), "labels"),
        (np.flatnonzero(name == ev.code("thread_name")), "threads"),
    ):
        src = labels if target == "labels" else value
        for r in rows.tolist():
            if src[r] < 0:
                continue
            text = strings[src[r]]
            if target == "threads":
                out.threads[(int(pid[r]), int(tid[r]))] = text
            else:
                getattr(out, target)[int(pid[r])] = text
    return out


def _text(ev: TraceEvents, codes: np.ndarray, transform=None) -> np.ndarray:
    """Decode codes to strings, applying ``transform`` once per distinct string."""
    def text(c: object) -> str:
        t = "" if c < 0 else ev.strings[c]  # type: ignore[operator,index]
        return transform(t) if transform is not None else t

    return per_distinct(codes, text)


def _ints(values: np.ndarray, default: int = -1) -> np.ndarray:
    return np.where(values == NO_INT, default, values)


def _in(codes: np.ndarray, *wanted: int) -> np.ndarray:
    return np.isin(codes, np.array(wanted, dtype=np.int32))


def _join_shapes(text: str) -> str:
    # torch_npu writes "2,3;\r\n3"; the model keeps "2,3;3".
    return _SHAPE_SEP_RE.sub(";", text)


def tables_from_trace(ev: TraceEvents, stacks: StackTable) -> TraceTables:
    """Build host ops, modules, kernels, host events and overlap slices, and resolve the flows."""
    procs = _processes(ev)
    X = ev.ph == ev.code("X")
    counts: dict[str, int] = {}

    op_rows, host_ops = _host_ops(ev, X, stacks)
    h_start = host_ops["start_ns"].to_numpy(np.int64)
    issues: list[Issue] = []
    steps = profiler_steps(host_ops["name"].astype(str).tolist(), h_start, h_start + host_ops["dur_ns"].to_numpy(np.int64),
                           issues, ev.path)
    modules = _modules(ev, X, host_ops)
    k_rows, kernels = _kernels(ev, X, procs)
    counts["kernels"] = len(kernels)

    op_key = (host_ops["pid"].to_numpy(), host_ops["tid"].to_numpy(), host_ops["start_ns"].to_numpy())
    k_key = (ev.pid[k_rows], ev.tid[k_rows], ev.ts_ns[k_rows])
    depth = host_ops["depth"].to_numpy()
    host_op, counts["torch_to_npu"], counts["torch_to_npu_unresolved"] = _link_torch_to_npu(
        ev, op_key, k_key, depth, len(kernels)
    )

    host_events, enq, deq, counts["cann_events"] = _host_events(ev, X, procs)
    if (host_op < 0).any():  # kernels without torch_to_npu: HostToDevice -> launch -> Dequeue -> Enqueue -> op
        counts["host_to_device"] = _link_host_to_device(ev, host_ops, k_key, host_op, enq, deq)
    kernels["host_op"] = host_op

    counts["fwdbwd"], counts["fwdbwd_by_sequence"] = _link_fwdbwd(ev, host_ops, op_key, depth)
    overlap = _overlap(ev, X, procs)

    untimed = int((ev.ts_ns[np.concatenate([op_rows, k_rows])] < 0).sum())
    if untimed:
        issues.append(Issue(ev.path, f"{untimed} ops/kernels have no usable 'ts'; they cannot be linked"))
    return TraceTables(
        aicore_freq=aicore_freq(ev),
        host_ops=host_ops,
        modules=modules if len(modules) else empty_table(MODULE_SCHEMA),
        kernels=kernels,
        host_events=host_events,
        overlap=overlap,
        steps=steps,
        issues=issues,
        counts=counts,
    )


AICORE_FREQ = "AI Core Freq"


def aicore_freq(ev: TraceEvents) -> list[list[int]]:
    """The AI Core clock samples of the trace (counter events ``AI Core Freq``, ``args.MHz``), as
    ``[ts_ns, MHz]`` in time order; the clock holds each value until the next sample."""
    rows = np.flatnonzero((ev.ph == ev.code("C")) & (ev.name == ev.code(AICORE_FREQ)))
    mhz = ev.args["MHz"][rows] if "MHz" in ev.args else np.zeros(0, np.int64)
    ts = ev.ts_ns[rows]
    ok = (mhz != NO_INT) & (mhz > 0) & (ts != NO_TIME)
    pairs = sorted(zip(ts[ok].tolist(), mhz[ok].tolist()))
    return [[int(t), int(f)] for t, f in pairs]


def _host_ops(ev: TraceEvents, X: np.ndarray, stacks: StackTable) -> tuple[np.ndarray, pd.DataFrame]:
    """cpu_op and user_annotation slices (their rows, and the table with parents assigned)."""
    op_rows = np.flatnonzero(X & _in(ev.cat, ev.code("cpu_op"), ev.code("user_annotation")))
    stack_codes = ev.args["Call stack"][op_rows]
    stack_ids = per_distinct(stack_codes, lambda c: stacks.intern_text(ev.strings[c]) if c >= 0 else -1, np.int64)
    host_ops = make_table(
        HOST_OP_SCHEMA,
        {
            "name": _text(ev, ev.name[op_rows]),
            "cat": _text(ev, ev.cat[op_rows]),
            "start_ns": ev.ts_ns[op_rows],
            "dur_ns": np.maximum(ev.dur_ns[op_rows], 0),
            "pid": _ints(ev.pid[op_rows]),
            "tid": _ints(ev.tid[op_rows]),
            "seq": _ints(ev.args["Sequence number"][op_rows]),
            "fwd_thread": _ints(ev.args["Fwd thread id"][op_rows]),
            "input_dims": _text(ev, ev.args["Input Dims"][op_rows], _join_shapes),
            "input_types": _text(ev, ev.args["Input type"][op_rows], _join_shapes),
            "stack": stack_ids,
        },
        len(op_rows),
    )
    assign_parents(host_ops)
    return op_rows, host_ops


def _module_k(text: str) -> int:
    """The instance number of "nn.Module: Linear_3"; -1 for one past int64 (30 digits)."""
    k = int64_of(text)
    return -1 if k is None else k


def _modules(ev: TraceEvents, X: np.ndarray, host_ops: pd.DataFrame) -> pd.DataFrame:
    """python_function "nn.Module: <Class>_<k>" slices; each host op gets its innermost module."""
    py_rows = np.flatnonzero(X & (ev.cat == ev.code("python_function")))
    module_codes = ev.codes_where(lambda s: s.startswith("nn.Module:"))
    mod_rows = py_rows[np.isin(ev.name[py_rows], module_codes)]
    parsed = [_MODULE_RE.match(t) for t in _text(ev, ev.name[mod_rows]).tolist()]
    modules = make_table(
        MODULE_SCHEMA,
        {
            "cls": [m.group("cls") if m else "" for m in parsed],
            "k": [_module_k(m.group("k")) if m else -1 for m in parsed],
            "start_ns": ev.ts_ns[mod_rows],
            "dur_ns": np.maximum(ev.dur_ns[mod_rows], 0),
            "pid": _ints(ev.pid[mod_rows]),
            "tid": _ints(ev.tid[mod_rows]),
        },
        len(mod_rows),
    )
    if len(modules):
        assign_parents(modules)
        assign_modules(host_ops, modules)
    return modules


def _kernels(ev: TraceEvents, X: np.ndarray, procs: _Processes) -> tuple[np.ndarray, pd.DataFrame]:
    """Device kernels: the slices of the Ascend Hardware processes (their rows, and the table)."""
    k_rows = np.flatnonzero(X & np.isin(ev.pid, procs.pids(HARDWARE)))
    stream = ev.args["Stream Id"][k_rows]
    stream = np.where(stream == NO_INT, ev.args["Physic Stream Id"][k_rows], stream)
    stream = np.where(stream == NO_INT, ev.tid[k_rows], stream)
    task_type = _text(ev, ev.args["Task Type"][k_rows], lambda t: t if t in KNOWN_CORES else "")
    kernels = make_table(
        KERNEL_SCHEMA,
        {
            "name": _text(ev, ev.name[k_rows]),
            "core": task_type,  # rule 11: only a real core name is kept; kernel_details overrides
            "start_ns": ev.ts_ns[k_rows],
            "dur_ns": np.maximum(ev.dur_ns[k_rows], 0),
            "device": _devices(procs, ev.pid[k_rows]),
            "stream": stream,
            "task_id": _ints(ev.args["Task Id"][k_rows]),
        },
        len(k_rows),
    )
    return k_rows, kernels


def _devices(procs: _Processes, pids: np.ndarray) -> np.ndarray:
    """The device of each row, from its process's ``NPU <n>`` label (-1 unknown)."""
    out = np.zeros(len(pids), dtype=np.int64)
    for p in np.unique(pids).tolist():
        out[pids == p] = procs.device(int(p))
    return out


def _link_torch_to_npu(
    ev: TraceEvents,
    op_key: tuple[np.ndarray, np.ndarray, np.ndarray],
    k_key: tuple[np.ndarray, np.ndarray, np.ndarray],
    depth: np.ndarray,
    n_kernels: int,
) -> tuple[np.ndarray, int, int]:
    """``host_op`` per kernel from the torch_to_npu flows (-1 none), and (resolved, unresolved) flows."""
    host_op = np.full(n_kernels, -1, dtype=np.int64)
    flow = (ev.cat == ev.code("async_npu")) | (ev.name == ev.code("torch_to_npu"))
    s_rows, f_rows = _flow_ends(ev, flow)
    s_op = match_rows(op_key, (ev.pid[s_rows], ev.tid[s_rows], ev.ts_ns[s_rows]), prefer=depth)
    f_k = match_rows(k_key, (ev.pid[f_rows], ev.tid[f_rows], ev.ts_ns[f_rows]))
    pair = match_rows((ev.id[s_rows],), (ev.id[f_rows],))  # f -> its s
    ok = (f_k >= 0) & (pair >= 0)
    ok[ok] &= s_op[pair[ok]] >= 0
    host_op[f_k[ok]] = s_op[pair[ok]]
    resolved = int(ok.sum())
    return host_op, resolved, int(len(f_rows) - resolved)


def _host_events(
    ev: TraceEvents, X: np.ndarray, procs: _Processes
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, int]:
    """CANN API, GC, enqueue and dequeue slices as host events; also the enqueue/dequeue rows and
    the CANN event count."""
    enq = np.flatnonzero(X & (ev.cat == ev.code("enqueue")))
    deq = np.flatnonzero(X & (ev.cat == ev.code("dequeue")))
    cann = np.flatnonzero(X & np.isin(ev.pid, procs.pids(CANN)))
    gc = np.flatnonzero(X & (np.isin(ev.pid, procs.pids(GC)) | (ev.cat == ev.code("GC"))))
    he_rows = np.concatenate([cann, gc, enq, deq])
    he_cat = np.array(["cann"] * len(cann) + ["gc"] * len(gc) + ["enqueue"] * len(enq) + ["dequeue"] * len(deq), dtype=object)
    level = _text(ev, ev.args["level"][he_rows])
    cann_names = _text(ev, ev.name[cann])
    level[: len(cann)] = [
        lv or CANN_LEVELS.get(n.partition("@")[0], "") for lv, n in zip(level[: len(cann)].tolist(), cann_names.tolist())
    ]
    host_events = make_table(
        HOST_EVENT_SCHEMA,
        {
            "name": _text(ev, ev.name[he_rows]),
            "cat": he_cat,
            "level": level,
            "start_ns": ev.ts_ns[he_rows],
            "dur_ns": np.maximum(ev.dur_ns[he_rows], 0),
            "pid": _ints(ev.pid[he_rows]),
            "tid": _ints(ev.tid[he_rows]),
        },
        len(he_rows),
    )
    return host_events, enq, deq, len(cann)


def _link_fwdbwd(
    ev: TraceEvents, host_ops: pd.DataFrame, op_key: tuple[np.ndarray, np.ndarray, np.ndarray], depth: np.ndarray
) -> tuple[int, int]:
    """``host_ops.fwd_op`` from the fwdbwd flows, then the Sequence-number fallback; both counts."""
    fwd_op = np.full(len(host_ops), -1, dtype=np.int64)
    s_rows, f_rows = _flow_ends(ev, ev.cat == ev.code("fwdbwd"))
    s_op = match_rows(op_key, (ev.pid[s_rows], ev.tid[s_rows], ev.ts_ns[s_rows]), prefer=depth)
    f_op = match_rows(op_key, (ev.pid[f_rows], ev.tid[f_rows], ev.ts_ns[f_rows]), prefer=-depth)
    pair = match_rows((ev.id[s_rows],), (ev.id[f_rows],))
    ok = (f_op >= 0) & (pair >= 0)
    ok[ok] &= s_op[pair[ok]] >= 0
    fwd_op[f_op[ok]] = s_op[pair[ok]]
    host_ops["fwd_op"] = fwd_op
    fwd_thread = host_ops["fwd_thread"].to_numpy()
    return int(ok.sum()), link_backward_by_sequence(host_ops, fwd_thread == 0, fwd_thread > 0)


def _overlap(ev: TraceEvents, X: np.ndarray, procs: _Processes) -> pd.DataFrame:
    """Overlap Analysis slices, one lane per thread_name (the slice name where a thread has none)."""
    ov_rows = np.flatnonzero(X & np.isin(ev.pid, procs.pids(OVERLAP)))
    # one lane lookup per distinct (pid, tid, name)
    ov_keys = pd.DataFrame({"pid": ev.pid[ov_rows], "tid": ev.tid[ov_rows], "name": ev.name[ov_rows]})
    uniq = ov_keys.drop_duplicates()
    lane_of = [
        procs.threads.get((int(p), int(t)), "") or (ev.strings[n] if n >= 0 else "")
        for p, t, n in zip(uniq["pid"].tolist(), uniq["tid"].tolist(), uniq["name"].tolist())
    ]
    lanes = ov_keys.merge(uniq.assign(lane=lane_of), on=["pid", "tid", "name"], how="left")["lane"].to_numpy()
    return make_table(
        OVERLAP_SCHEMA,
        {
            "lane": lanes,
            "start_ns": ev.ts_ns[ov_rows],
            "dur_ns": np.maximum(ev.dur_ns[ov_rows], 0),
            "device": _devices(procs, ev.pid[ov_rows]),
        },
        len(ov_rows),
    )


def _flow_ends(ev: TraceEvents, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.flatnonzero(mask & (ev.ph == ev.code("s")))
    f = np.flatnonzero(mask & (ev.ph == ev.code("f")))
    return s, f


def _link_host_to_device(
    ev: TraceEvents,
    host_ops: pd.DataFrame,
    k_key: tuple[np.ndarray, np.ndarray, np.ndarray],
    host_op: np.ndarray,
    enq: np.ndarray,
    deq: np.ndarray,
) -> int:
    """Link kernels that have no torch_to_npu flow the way torch_npu builds that flow."""
    htd_codes = ev.codes_where(lambda s: s.startswith("HostToDevice"))
    mask = (ev.cat == ev.code("HostToDevice")) | np.isin(ev.name, htd_codes)
    s_rows, f_rows = _flow_ends(ev, mask)
    if not len(f_rows):
        return 0
    f_k = match_rows(k_key, (ev.pid[f_rows], ev.tid[f_rows], ev.ts_ns[f_rows]))
    pair = match_rows((ev.id[s_rows],), (ev.id[f_rows],))
    use = np.flatnonzero((f_k >= 0) & (pair >= 0))
    use = use[host_op[f_k[use]] < 0]
    if not len(use):
        return 0
    launch = s_rows[pair[use]]
    l_tid, l_ts = ev.tid[launch], ev.ts_ns[launch]
    # CANN pids are synthetic but its tids are OS threads: match threads by tid alone.
    zero = np.zeros(len(launch), dtype=np.int64)
    op = np.full(len(launch), -1, dtype=np.int64)
    if len(deq) and len(enq):
        deq_t = _intervals(ev, deq, same_pid=True)
        d = innermost_enclosing(deq_t, zero, l_tid, l_ts)
        corr = np.where(d >= 0, ev.args["correlation_id"][deq][np.maximum(d, 0)], NO_INT)
        e = match_rows((ev.args["correlation_id"][enq],), (corr,))
        e[corr == NO_INT] = -1
        has = e >= 0
        if has.any():
            rows = enq[e[has]]
            op[has] = innermost_enclosing(host_ops, ev.pid[rows], ev.tid[rows], ev.ts_ns[rows])
    rest = op < 0
    if rest.any():  # task queue off: the op around the launch itself
        ops_any_pid = host_ops[["start_ns", "dur_ns", "tid", "parent"]].assign(pid=0)
        op[rest] = innermost_enclosing(ops_any_pid, zero[rest], l_tid[rest], l_ts[rest])
    linked = op >= 0
    host_op[f_k[use][linked]] = op[linked]
    return int(linked.sum())


def _intervals(ev: TraceEvents, rows: np.ndarray, *, same_pid: bool) -> pd.DataFrame:
    table = pd.DataFrame(
        {
            "start_ns": ev.ts_ns[rows],
            "dur_ns": np.maximum(ev.dur_ns[rows], 0),
            "pid": np.zeros(len(rows), dtype=np.int64) if same_pid else ev.pid[rows],
            "tid": ev.tid[rows],
            "parent": -1,
        }
    )
    assign_parents(table)
    return table


def kernel_steps(kernels: pd.DataFrame, host_ops: pd.DataFrame, steps: list[Step]) -> np.ndarray:
    """Step of each kernel: the ProfilerStep around its launching op, else around its own start."""
    n = len(kernels)
    if not steps or not n:
        return np.full(n, -1, dtype=np.int64)
    op = kernels["host_op"].to_numpy(dtype=np.int64)
    op_start = host_ops["start_ns"].to_numpy(dtype=np.int64)
    when = np.where(op >= 0, op_start[np.maximum(op, 0)] if len(op_start) else -1, kernels["start_ns"].to_numpy())
    return step_ids(when, steps)

