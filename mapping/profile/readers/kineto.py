"""Reader for stock PyTorch (Kineto) Chrome traces: ``*.json``, ``*.pt.trace.json[.gz]``.

``read(location, progress) -> Profile`` fills the common model:

* ``cpu_op`` / ``user_annotation`` events -> ``host_ops`` (``ProfilerStep#N`` also -> ``steps``),
  nested per thread, with shapes/types as the model's ``;``/``,`` text and ``Concrete Inputs``
  as JSON text;
* each host op's Python stack: the verbose ``Call stack`` arg when recorded, else rebuilt from
  the ``python_function`` events (kineto_stacks); ``nn.Module: X_k`` calls -> ``modules``;
* ``fwdbwd`` flows (or, without flows, equal sequence numbers) -> the forward op of each
  backward autograd node;
* GPU ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` (MTIA: ``mtia_ccp_events``) -> ``kernels``,
  linked to the launching ``cpu_op`` by ``External id`` (else through ``correlation`` / ``ac2g``
  to the CUDA runtime call and the op around it), then to a stack: the op's or an ancestor's, or
  for backward kernels the forward op's; NCCL kernels (``Collective name``) get core
  COMMUNICATION; each kernel's step is the one whose ProfilerStep range holds its launch;
* ``cuda_runtime`` / ``cuda_driver`` (ROCm's ``hip*`` calls too; MTIA: ``mtia_runtime``) ->
  ``host_events``; ``distributedInfo`` -> rank/world size;
* the 2021 schema (``Operator``, ``Kernel``, ``Memcpy``, ``Memset``, ``Runtime``, text thread ids,
  ``external id``, ``async``/``launch`` flows, running-line ``Call stack``) read as the same;
* no ``ProfilerStep#N``: one step, the capture's measured span, and one notice saying so;
  categories the reader does not know are counted in a notice, never dropped silently.

Memory: ``traceEvents`` arrives in decoded blocks (kineto_json) and each block becomes columns
(``_Rows``: pooled strings, numpy numbers) before the next is decoded, so the per-event structs
of the whole trace never exist at once; the columns are dropped as each table is built.

Times: ``ts`` is µs relative to ``baseTimeNanoseconds`` with 3 decimals; converted to integer
epoch ns without going through ``ts * 1000`` in floating point (see ``_us_to_ns``).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import msgspec
import numpy as np
import pandas as pd

from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.errors import Issue, ProfileError
from msprof_lsp.mapping.numbers import int64_of, shown
from msprof_lsp.mapping.units import NS_PER_US, format_us
from msprof_lsp.mapping.profile.frames import StackTable
from msprof_lsp.mapping.profile.locations import ProfileLocation, Progress, no_progress
from msprof_lsp.mapping.profile.model import (
    HOST_EVENT_SCHEMA,
    HOST_OP_SCHEMA,
    KERNEL_SCHEMA,
    Backend,
    STEP_LAUNCHED_OUTSIDE,
    Profile,
    ProfileKind,
    ProfileMeta,
    Step,
    StepsSource,
    make_table,
)
from msprof_lsp.mapping.profile.linking import (
    assign_modules,
    assign_parents,
    innermost_enclosing,
    link_backward_by_sequence,
    match_rows,
    resolve_kernel_links,
)
from msprof_lsp.mapping.profile.step_infer import steps_from_launches
from msprof_lsp.mapping.profile.step_windows import capture_step, no_step_markers_note, profiler_steps, step_ids
from msprof_lsp.mapping.profile.readers.kineto_json import Args, Event, KinetoFile, decode, read_bytes
from msprof_lsp.mapping.profile.readers.kineto_stacks import PythonCalls, PythonTree
from msprof_lsp.mapping.profile.readers.protocol import (
    SNIFF_BYTES,
    Candidate,
    Reader,
    SeenFile,
    as_rank,
    int_or_zero,
    mtime_path,
    rank_from_names,
)

HOST_CATS = frozenset({"cpu_op", "user_annotation"})
# MTIA traces write their device work as "mtia_ccp_events" and the host calls as "mtia_runtime"
KERNEL_CORES = {"kernel": "GPU", "gpu_memcpy": "MEMCPY", "gpu_memset": "MEMSET", "mtia_ccp_events": "MTIA"}
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "privateuse1_runtime", "privateuse1_driver", "mtia_runtime"})
_BACKWARD_NODE_PREFIX = "autograd::engine::evaluate_function: "
_COMM_OP = "record_param_comms"
_NCCL_KERNEL_PREFIXES = ("ncclKernel", "ncclDevKernel")
_EXACT_US_LIMIT = 2.0**43  # below this a float64 µs value still resolves single nanoseconds

FRAME_LINES_NOTE = (
    "python frames carry each function's def line (co_firstlineno); frames already running when "
    "tracing began carry their current line; paths are relative (prefix-stripped)"
)
CALL_FRAME_LINES_NOTE = (
    "2021-schema Call stack: every frame carries the line it was running (the call's line); "
    "paths are as recorded (absolute for installed packages, relative for the script)"
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
        self.unreadable = 0  # arg lists that are not valid JSON (damaged bytes, numbers past int64)

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
        try:
            value = self._decode(key)
        except msgspec.DecodeError:  # ValidationError is one: an int past int64 in a shape list
            self.unreadable += 1
            return ""
        if isinstance(value, list):
            return ";".join(entry(v) for v in value)
        return str(value)

    @staticmethod
    def json_text(raw: msgspec.Raw) -> str:
        return bytes(raw).decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------
# Building the profile


# The 2021 schema (torch 1.8/1.9 Kineto, still schemaVersion 1) names the categories with capitals;
# they mean what the current names mean.
OLD_CATEGORIES = {
    "Operator": "cpu_op",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Runtime": "cuda_runtime",
}
# Flows from a runtime launch to its GPU activity, as each schema spells them (cat, or cat + name):
# "ac2g" now, "async_cpu_to_gpu" in 2022 traces, "async" named "launch" in 2021 ones.
_LAUNCH_FLOW_CATS = frozenset({"ac2g", "async_cpu_to_gpu"})
# Categories the reader knows and deliberately leaves out of the model: the profiler's own spans,
# device-side copies of host annotations and syncs, profiler overhead, instant CPU events.
IGNORED_CATS = frozenset({
    "Trace", "gpu_user_annotation", "cuda_sync", "overhead", "cpu_instant_event",
    "cuda_profiler_range",
})


def _number(value: int | str) -> int | None:
    """A pid/tid as an integer: the 2021 schema writes thread ids as text ("25738") and GPU
    streams as "stream 7"; names like "Spans" (the profiler's own rows) are None."""
    if type(value) is int:
        return value  # the decoder holds JSON numbers to int64 already
    if isinstance(value, str):
        return int64_of(value.removeprefix("stream "))
    return None


_NO_ARGS = Args()  # an event without args reads as one with every arg at its default


class _Rows:
    """The kept events of one kind as columns, filled one decoded batch at a time.

    Strings (names, categories, arg texts) are shared through one pool, so a column holds a
    pointer per event; numbers go into numpy arrays per batch, joined once by ``array``. This is
    what lets the reader drop each batch's event objects (issue 22: ~600 bytes and 12 objects an
    event when the whole trace was held as structs).
    """

    __slots__ = ("n", "biggest", "lists", "_arrays")

    def __init__(self) -> None:
        self.n = 0
        # the largest |ts| written with a fraction (see _Clock); per batch, which gives the same
        # verdict (>= _EXACT_US_LIMIT or not) and the same value when it is one
        self.biggest = 0.0
        self.lists: dict[str, list[Any]] = {}
        self._arrays: dict[str, list[np.ndarray]] = {}

    def __len__(self) -> int:
        return self.n

    def add(self, events: list[Event], pool: dict[Any, Any], times: bool = True) -> list[Args]:
        """Append the common columns of ``events``; returns their args (defaults for none)."""
        n = len(events)
        self.n += n
        self.extend("name", [pool.setdefault(e.name, e.name) for e in events])
        self.extend("cat", [pool.setdefault(e.cat, e.cat) for e in events])
        self.put("pid", np.fromiter((e.pid for e in events), np.int64, n))
        self.put("tid", np.fromiter((e.tid for e in events), np.int64, n))
        ts = np.fromiter((e.ts for e in events), np.float64, n)
        self.put("ts", ts)
        if times:
            self.put("dur", np.fromiter((e.dur or 0.0 for e in events), np.float64, n))
            biggest = float(np.abs(ts).max()) if n else 0.0
            if biggest >= _EXACT_US_LIMIT:
                biggest = max((abs(e.ts) for e in events if type(e.ts) is float), default=0.0)  # type: ignore[arg-type]
            self.biggest = max(self.biggest, biggest)
        return [e.args if e.args is not None else _NO_ARGS for e in events]

    def extend(self, key: str, values: list[Any]) -> None:
        self.lists.setdefault(key, []).extend(values)

    def put(self, key: str, values: np.ndarray) -> None:
        self._arrays.setdefault(key, []).append(values)

    def put_ints(self, key: str, values: list[int]) -> None:
        self.put(key, np.asarray(values, dtype=np.int64) if values else np.empty(0, np.int64))

    def release(self) -> None:
        """Drop the columns once the tables hold what they carried (the count stays)."""
        self.lists.clear()
        self._arrays.clear()

    def col(self, key: str) -> list[Any]:
        return self.lists.get(key, [])

    def array(self, key: str, dtype: Any = np.int64) -> np.ndarray:
        parts = self._arrays.pop(key, [])  # joined once, then held whole
        whole = np.concatenate(parts) if parts else np.empty(0, dtype)
        self._arrays[key] = [whole]
        return whole


def _is_named(value: int | str) -> bool:
    """A pid/tid that is a name ("Spans") rather than a broken number ("²", 20 digits)."""
    text = value.removeprefix("stream ").strip() if isinstance(value, str) else ""
    return not any(c.isdigit() for c in text)


@dataclass(slots=True)
class _Batch:
    """One decoded batch's events of each kind the model keeps (before they become columns)."""

    host: list[Event] = field(default_factory=list)
    python: list[Event] = field(default_factory=list)
    kernels: list[Event] = field(default_factory=list)
    runtime: list[Event] = field(default_factory=list)
    flows: list[Event] = field(default_factory=list)


class _Buckets:
    """The trace's events sorted into what the model needs, in one pass over the batches.

    Categories and ids are normalised to the current schema on the way, so everything after this
    sees one spelling. Each batch's events are turned into columns (``_Rows``) and dropped.
    """

    def __init__(self, batches: Iterable[list[Event]]) -> None:
        self.host = _Rows()
        self.python = _Rows()
        self.kernels = _Rows()
        self.runtime = _Rows()
        self.flows = _Rows()
        self.text = _ArgText()  # host ops' shape/type lists, converted once per distinct text
        self.untimed = 0
        self.bad_ids = 0  # events skipped for a pid/tid that is no int64 ("²", 20 digits)
        self.first_bad_id = ""
        # complete ("X") events left out, per category as written (all of them when none is read)
        self.found: Counter[str] = Counter()
        self.old_schema = False  # some categories had their 2021 names
        self.unknown: Counter[str] = Counter()  # of those, categories the reader does not know
        self._pool: dict[Any, Any] = {}
        for batch in batches:
            self._add(batch)
            del batch
        self._pool = {}

    def _add(self, events: list[Event]) -> None:
        self._append(self._split(events))

    def _split(self, events: list[Event]) -> _Batch:
        """Sort one batch's events by what the model makes of them (ids and 2021 names normalised);
        count what is left out."""
        batch = _Batch()
        host, python, kernels, runtime, flows = batch.host, batch.python, batch.kernels, batch.runtime, batch.flows
        found = self.found
        for e in events:
            ph = e.ph
            if ph == "X":
                written = cat = e.cat
                if type(e.pid) is not int or type(e.tid) is not int:
                    pid, tid = _number(e.pid), _number(e.tid)
                    if pid is None or tid is None:
                        found[written] += 1
                        bad = e.pid if pid is None else e.tid
                        if not _is_named(bad):  # a number out of range is said, not silent
                            self.bad_ids += 1
                            self.first_bad_id = self.first_bad_id or shown(bad)
                        continue  # "Spans"/"Traces" rows of the profiler itself
                    e.pid, e.tid = pid, tid
                if e.ts is None:
                    self.untimed += 1
                    found[written] += 1
                    continue
                if cat in OLD_CATEGORIES:
                    cat = e.cat = OLD_CATEGORIES[written]
                    self.old_schema = True
                if cat in HOST_CATS:
                    host.append(e)
                elif cat == "python_function":
                    python.append(e)
                elif cat in KERNEL_CORES:
                    kernels.append(e)
                elif cat in RUNTIME_CATS:
                    runtime.append(e)
                else:
                    found[written] += 1
                    if cat not in IGNORED_CATS:
                        self.unknown[written] += 1
            elif ph in ("s", "f"):
                if e.ts is None or e.id is None:
                    continue
                if e.cat in _LAUNCH_FLOW_CATS or (e.cat == "async" and e.name == "launch"):
                    e.cat = "ac2g"
                elif e.cat != "fwdbwd":
                    continue
                pid, tid = _number(e.pid), _number(e.tid)
                if pid is not None and tid is not None:
                    e.pid, e.tid = pid, tid
                    flows.append(e)
            # "M" metadata, "i" instants, counters: nothing the model holds.
        return batch

    def _append(self, batch: _Batch) -> None:
        """Turn one sorted batch into columns (its event objects can go after this)."""
        pool, text = self._pool, self.text

        args = self.host.add(batch.host, pool)
        self.host.put_ints("seq", [a.seq for a in args])
        self.host.put_ints("fwd_thread", [a.fwd_thread for a in args])
        self.host.put_ints("ext_id", [a.ext_id for a in args])
        self.host.extend("dims", [text.dims(a.input_dims) if a.input_dims else "" for a in args])
        self.host.extend("types", [text.types(a.input_types) if a.input_types else "" for a in args])
        self.host.extend("concrete", [
            pool.setdefault(t, t) if (t := text.json_text(a.concrete_inputs)) else "" for a in args
        ])
        self.host.extend("call_stack", [pool.setdefault(a.call_stack, a.call_stack) for a in args])

        args = self.python.add(batch.python, pool)
        self.python.extend("python_id", [a.python_id for a in args])
        self.python.extend("parent_id", [a.python_parent_id for a in args])

        args = self.kernels.add(batch.kernels, pool)
        self.kernels.put_ints("device", [a.device for a in args])
        self.kernels.put_ints("stream", [a.stream for a in args])
        self.kernels.put_ints("ext_id", [a.ext_id for a in args])
        self.kernels.put_ints("correlation", [a.correlation for a in args])
        self.kernels.extend("collective", [pool.setdefault(a.collective, a.collective) for a in args])

        args = self.runtime.add(batch.runtime, pool)
        self.runtime.put_ints("correlation", [a.correlation for a in args])
        self.runtime.put_ints("ext_id", [a.ext_id for a in args])

        flows = batch.flows
        self.flows.add(flows, pool, times=False)
        self.flows.extend("ph", [pool.setdefault(e.ph, e.ph) for e in flows])
        self.flows.extend("id", [e.id for e in flows])

    @property
    def read_any(self) -> bool:
        return bool(len(self.host) or len(self.kernels) or len(self.runtime) or len(self.python))

    def notices(self, path: str) -> list[Issue]:
        """Say what was not read: never a silent empty profile."""
        def listing(counts: Counter[str]) -> str:
            return ", ".join(f"{cat or '(none)'} ({n:,})" for cat, n in counts.most_common())

        if not self.read_any:
            found = listing(self.found) if self.found else "none (no complete 'X' events)"
            return [Issue(path, "no event the Kineto reader knows (operators, GPU kernels, memcpy/memset, "
                                f"runtime calls, Python calls); categories found: {found}")]
        if self.unknown:
            return [Issue(path, f"skipped {sum(self.unknown.values()):,} event(s) of categories the reader "
                                f"does not know: {listing(self.unknown)}")]
        return []

    def skipped(self, path: str) -> list[Issue]:
        """Events and arguments left out for what they held (no ts, a broken id, bad JSON)."""
        issues = []
        if self.untimed:
            issues.append(Issue(path, f"skipped {self.untimed} event(s) without a 'ts'"))
        if self.bad_ids:
            issues.append(Issue(path, f"skipped {self.bad_ids} event(s) whose pid/tid is not an integer "
                                      f"in int64 range (first: {self.first_bad_id})"))
        if self.text.unreadable:
            issues.append(Issue(path, f"{self.text.unreadable} distinct shape/type argument list(s) are not "
                                      "readable JSON; those operators have no shapes"))
        return issues


class _Clock:
    """Turns each kind's ``ts``/``dur`` into epoch ns; remembers the largest |ts| written with a
    fraction over all kinds (past ``_EXACT_US_LIMIT`` a float64 no longer holds single ns)."""

    __slots__ = ("base_ns", "biggest_ts")

    def __init__(self, base_ns: int) -> None:
        self.base_ns = base_ns
        self.biggest_ts = 0.0

    def times(self, rows: _Rows) -> tuple[np.ndarray, np.ndarray]:
        """Start (epoch ns) and duration (ns) columns of ``rows``.

        Only fractional values can lose nanoseconds: whole µs (JSON integers, what most traces
        with epoch-µs ``ts`` write) stay exact in a float64 up to 2**53.
        """
        ts = rows.array("ts", np.float64)
        dur = rows.array("dur", np.float64)
        start = _us_to_ns(ts) + self.base_ns
        dur_ns = np.maximum(np.rint(dur * 1000.0), 0).astype(np.int64)
        self.biggest_ts = max(self.biggest_ts, rows.biggest)
        return start, dur_ns

    def notices(self, path: str) -> list[Issue]:
        if self.biggest_ts < _EXACT_US_LIMIT:
            return []
        error_ns = float(np.spacing(self.biggest_ts)) * 1000.0 / 2
        return [Issue(path, f"timestamps with fractions reach {self.biggest_ts:.0f} µs after baseTimeNanoseconds; "
                            f"a float64 holds such values only to ±{error_ns:.0f} ns")]


@dataclass(slots=True)
class _Span:
    """Start and end (epoch ns) of one kind's events: the capture step is their union."""

    start: np.ndarray
    end: np.ndarray


@dataclass(slots=True)
class _HostOps:
    """The host_ops table and what the later phases read of it in table order."""

    table: pd.DataFrame
    names: list[str]
    span: _Span
    ext_id: list[int]  # External id per op (kernels and runtime calls name their op by it)
    has_call_stack: bool  # some op carried a recorded ``Call stack``


@dataclass(slots=True)
class _RuntimeCalls:
    """Runtime calls' args in start order (parallel to the host_events rows)."""

    correlation: list[int]
    ext_id: list[int]
    op: list[int]  # the host op around each call (for kernels whose launch has no External id)
    start: np.ndarray  # each call's start (epoch ns): a kernel's step is that of its launch


def build_profile(trace: KinetoFile, location: ProfileLocation) -> Profile:
    """Python calls -> host ops (stacks, parents, modules, backward links) -> steps -> runtime
    calls -> kernels linked to their ops; then the fallback steps and what was not read."""
    path = str(trace.path)
    buckets = _Buckets(trace.batches)
    trace.batches = ()  # decoded and dropped: the JSON text is free from here on
    issues: list[Issue] = list(trace.issues)
    stacks = StackTable()
    clock = _Clock(trace.base_time_ns)

    tree, py_span = _python_tree(buckets.python, clock, stacks)
    host = _host_ops(buckets, clock, tree, stacks)
    unmatched_flows = _link_backward(host.table, buckets.flows, clock.base_ns, host.names)
    if unmatched_flows:
        issues.append(Issue(path, f"{unmatched_flows} fwdbwd flow(s) point at no recorded op; "
                                  "those backward ops stay unlinked"))
    steps = profiler_steps(host.names, host.span.start, host.span.end, issues, path)

    host_events, rt_calls, rt_span = _runtime_calls(buckets.runtime, clock, host.table)
    k_start, k_dur = clock.times(buckets.kernels)
    kernels, unlinked, outside = _kernels(buckets, clock.base_ns, k_start, k_dur, host.table, host.ext_id, rt_calls,
                                          steps)
    issues += [Issue(path, note) for note in outside]
    meta = _meta(trace, location, has_kernels=bool(len(kernels) or len(buckets.runtime)))
    if not steps:
        spans = (py_span, host.span, rt_span, _Span(k_start, k_start + k_dur))
        steps = _steps_without_markers(kernels, meta, issues, path, spans)

    issues += buckets.notices(path)
    issues += buckets.skipped(path)
    issues += clock.notices(path)
    _stack_meta(meta, buckets, host.has_call_stack, unlinked)
    return Profile(
        meta=meta,
        kernels=kernels,
        host_ops=host.table,
        modules=tree.modules,
        host_events=host_events,
        stacks=stacks.stacks,
        steps=steps,
        issues=issues,
    )


def _python_tree(py: _Rows, clock: _Clock, stacks: StackTable) -> tuple[PythonTree, _Span]:
    """The python_function call tree (stacks and ``nn.Module`` rows come from it)."""
    py_start, py_dur = clock.times(py)
    span = _Span(py_start, py_start + py_dur)
    tree = PythonTree(
        PythonCalls(
            names=py.col("name"),
            start=py_start,
            end=span.end,
            pid=py.array("pid"),
            tid=py.array("tid"),
            python_id=py.col("python_id"),
            parent_id=py.col("parent_id"),
        ),
        stacks,
    )
    py.release()
    return tree, span


def _host_ops(buckets: _Buckets, clock: _Clock, tree: PythonTree, stacks: StackTable) -> _HostOps:
    """The host ops in (start, longer first) order, each with its stack, parent and module."""
    host = buckets.host
    h_start, h_dur = clock.times(host)
    order = np.lexsort((-h_dur, h_start))
    pick = order.tolist()
    h_start, h_dur = h_start[order], h_dur[order]
    h_pid, h_tid = host.array("pid")[order], host.array("tid")[order]
    h_end = h_start + h_dur
    ext_id = host.array("ext_id")[order].tolist()

    def ordered(key: str) -> list[Any]:
        values = host.col(key)
        return [values[i] for i in pick]

    op_stack, has_call_stack = _op_stacks(ordered("call_stack"), stacks, tree, (h_pid, h_tid, h_start, h_end))
    names = ordered("name")
    table = make_table(
        HOST_OP_SCHEMA,
        {
            "name": names,
            "cat": ordered("cat"),
            "start_ns": h_start,
            "dur_ns": h_dur,
            "pid": h_pid,
            "tid": h_tid,
            "seq": host.array("seq")[order],
            "fwd_thread": host.array("fwd_thread")[order],
            "input_dims": ordered("dims"),
            "input_types": ordered("types"),
            "concrete_inputs": ordered("concrete"),
            "stack": op_stack,
        },
        len(host),
    )
    # The table holds them now; what stays alive through the kernels is the profile's own.
    del op_stack
    host.release()
    assign_parents(table)
    assign_modules(table, tree.modules)
    return _HostOps(table, names, _Span(h_start, h_end), ext_id, has_call_stack)


def _op_stacks(
    call_stacks: list[str], stacks: StackTable, tree: PythonTree, where: tuple[np.ndarray, ...]
) -> tuple[list[int], bool]:
    """Each op's stack: its recorded ``Call stack``, else that of the deepest Python call around
    it (``where``: the ops' pid, tid, start, end). Also whether any op recorded one."""
    op_stack = [-1] * len(call_stacks)
    has_call_stack = False
    for i, call_stack in enumerate(call_stacks):
        if call_stack:
            op_stack[i] = stacks.intern_text(call_stack)
            has_call_stack = True
    enclosing = tree.enclosing_calls(*where).tolist()
    for i, call in enumerate(enclosing):
        if call >= 0 and op_stack[i] < 0:
            op_stack[i] = tree.stack_id(call)
    return op_stack, has_call_stack


def _runtime_calls(rt: _Rows, clock: _Clock, host_ops: pd.DataFrame) -> tuple[pd.DataFrame, _RuntimeCalls, _Span]:
    """The host_events table (runtime/driver calls in start order) and their launch args."""
    r_start, r_dur = clock.times(rt)
    r_order = np.argsort(r_start, kind="stable")
    r_pick = r_order.tolist()
    r_start, r_dur = r_start[r_order], r_dur[r_order]
    r_pid, r_tid = rt.array("pid")[r_order], rt.array("tid")[r_order]
    r_names, r_cats = rt.col("name"), rt.col("cat")
    host_events = make_table(
        HOST_EVENT_SCHEMA,
        {
            "name": [r_names[i] for i in r_pick],
            "cat": [r_cats[i] for i in r_pick],
            "start_ns": r_start,
            "dur_ns": r_dur,
            "pid": r_pid,
            "tid": r_tid,
        },
        len(rt),
    )
    r_end = r_start + r_dur
    calls = _RuntimeCalls(
        rt.array("correlation")[r_order].tolist(),
        rt.array("ext_id")[r_order].tolist(),
        innermost_enclosing(host_ops, r_pid, r_tid, r_start, r_end).tolist(),
        r_start,
    )
    rt.release()
    return host_events, calls, _Span(r_start, r_end)


def _steps_without_markers(
    kernels: pd.DataFrame, meta: ProfileMeta, issues: list[Issue], path: str, spans: tuple[_Span, ...]
) -> list[Step]:
    """No ``ProfilerStep#N``: the iterations of a repeating launch sequence, else the measured
    span of the whole capture (one step, said in a notice)."""
    capture = capture_step(tuple(s.start for s in spans), tuple(s.end for s in spans))
    steps = steps_from_launches(kernels, meta, issues, start_ns=None if capture is None else capture.start_ns)
    if not steps and capture is not None:
        steps = [capture]
        meta.steps_source = StepsSource.CAPTURE
        issues.append(Issue(path, no_step_markers_note(capture)))
        kernels["step"] = step_ids(kernels["start_ns"].to_numpy(np.int64), steps)
    return steps


def _stack_meta(meta: ProfileMeta, buckets: _Buckets, has_call_stack: bool, unlinked: int) -> None:
    """Where the stacks came from and what their lines mean, for attribution."""
    # The 2021 schema took its Call stack from the running frames (current lines: resnet.py's
    # _forward_impl shows at 237, 238, 239, 240); the current profiler records def lines.
    call_lines = buckets.old_schema and has_call_stack
    meta.extra["frame_lines"] = "call" if call_lines else "def"
    meta.extra["frame_lines_note"] = CALL_FRAME_LINES_NOTE if call_lines else FRAME_LINES_NOTE
    meta.extra["stack_source"] = (
        "call_stack" if has_call_stack else "python_function" if len(buckets.python) else "none"
    )
    meta.extra["kernels_without_host_op"] = unlinked
    if buckets.unknown:
        meta.extra["unknown_categories"] = dict(buckets.unknown)


def _link_backward(host_ops: pd.DataFrame, flows: _Rows, base: int, names: list[str]) -> int:
    """Set ``host_ops.fwd_op`` of backward autograd nodes; returns the flows left unmatched.

    ``fwdbwd`` flows name the pair directly: ``s`` at the forward op's (pid, tid, ts), ``f`` at
    the backward node's. Traces without them fall back to equal sequence numbers (shared
    linking), which pick the same forward op torch would.
    """
    # (the buckets keep only flows with integer pid and tid)
    fwdbwd = [i for i, cat in enumerate(flows.col("cat")) if cat == "fwdbwd"]
    seq = host_ops["seq"].to_numpy()
    fwd_thread = host_ops["fwd_thread"].to_numpy()
    if not fwdbwd:
        node = np.fromiter(
            (not n.startswith(_BACKWARD_NODE_PREFIX) for n in names), dtype=bool, count=len(names)
        )
        link_backward_by_sequence(host_ops, forward=fwd_thread == 0, backward=(fwd_thread > 0) & node)
        return 0
    at = np.asarray(fwdbwd, dtype=np.int64)
    f_start = _us_to_ns(flows.array("ts", np.float64)[at]) + base
    # At a shared (pid, tid, ts) the op carrying a sequence number wins (the flow sits on the
    # autograd op), then the deeper one.
    prefer = (seq >= 0).astype(np.int64) * (1 << 32) + host_ops["depth"].to_numpy()
    op_at = match_rows(
        [host_ops["pid"].to_numpy(), host_ops["tid"].to_numpy(), host_ops["start_ns"].to_numpy()],
        [flows.array("pid")[at], flows.array("tid")[at], f_start],
        prefer=prefer,
    ).tolist()
    sources: dict[Any, int] = {}
    targets: list[tuple[Any, int]] = []
    unmatched = 0
    ph, ids = flows.col("ph"), flows.col("id")
    for i, op in zip(fwdbwd, op_at):
        if op < 0:
            unmatched += 1
        elif ph[i] == "s":
            sources[ids[i]] = op
        else:
            targets.append((ids[i], op))
    fwd_op = host_ops["fwd_op"].to_numpy().copy()
    for flow_id, op in targets:
        src = sources.get(flow_id, -1)
        if src >= 0:
            fwd_op[op] = src
        else:
            unmatched += 1
    host_ops["fwd_op"] = fwd_op
    return unmatched


@dataclass(slots=True)
class _Launches:
    """How a kernel finds the op that launched it: by External id, else by correlation id (its
    own or the ``ac2g`` flow's that ends on it) to the runtime call and that call's op."""

    op_of_ext: dict[int, int]  # External id -> host op (a cpu_op wins over an annotation)
    rt_of_corr: dict[int, int]  # correlation id -> runtime call (host_events row)
    corr_at: dict[tuple[int, int, int], int]  # ac2g flow end (device pid, stream tid, ns) -> correlation
    rt: _RuntimeCalls


@dataclass(slots=True)
class _KernelColumns:
    """The kernel events' columns in start order, as lists for the linking loop."""

    names: list[str]
    cats: list[str]
    collectives: list[str]
    pid: list[int]
    tid: list[int]
    device: list[int]  # the ``device`` arg (-1 when the event has no args)
    stream: list[int]  # the ``stream`` arg
    ext_id: list[int]
    correlation: list[int]
    start: list[int]


@dataclass(slots=True)
class _KernelLinks:
    """What the linking loop decides per kernel."""

    device: list[int]
    stream: list[int]
    host_op: list[int]
    launch: list[int]  # the runtime call that launched it (host_events row), -1 unknown
    core: list[str]
    type: list[str]


def _kernels(
    buckets: _Buckets,
    base: int,
    k_start: np.ndarray,
    k_dur: np.ndarray,
    host_ops: pd.DataFrame,
    ext_id: list[int],
    rt: _RuntimeCalls,
    steps: list[Step],
) -> tuple[pd.DataFrame, int, list[str]]:
    """GPU activity -> kernels table linked to launching ops (and, via linking, to stacks).

    ``k_start`` / ``k_dur``: the times of ``buckets.kernels``. Returns the table, the number of
    kernels with no launching op and the notes on kernels launched outside every step.
    """
    ev = buckets.kernels
    order = np.argsort(k_start, kind="stable")
    k_start, k_dur = k_start[order], k_dur[order]
    # Both lists index host ops (ext_id is per host op), so they are built even without kernels.
    host_names = host_ops["name"].astype(str).tolist() if len(ev) else []
    host_cat = host_ops["cat"].astype(str).tolist() if len(ext_id) else []
    launches = _Launches(_ops_by_external_id(ext_id, host_cat), _calls_by_correlation(rt.correlation),
                         _flow_correlations(buckets.flows, base), rt)
    cols = _kernel_columns(ev, order, k_start)
    ev.release()  # the last users of the kernel and flow columns
    buckets.flows.release()
    links = _link_kernels(cols, launches, host_names)
    launched = _launch_times(k_start, cols, links, host_ops, rt)
    table = make_table(
        KERNEL_SCHEMA,
        {
            "name": cols.names,
            "type": links.type,
            "core": links.core,
            "start_ns": k_start,
            "dur_ns": k_dur,
            "device": links.device,
            "stream": links.stream,
            "step": _launch_steps(launched, steps),
            "host_op": links.host_op,
        },
        len(cols.names),
    )
    resolve_kernel_links(table, host_ops)
    outside = _launched_outside_notes(table, launched, steps)
    return table, int((np.asarray(links.host_op, dtype=np.int64) < 0).sum()), outside


@dataclass(slots=True)
class _Launched:
    """When each kernel was launched on the host, and whether the trace says so."""

    when: np.ndarray  # its launch call's start, else its launching op's, else its own start
    known: np.ndarray  # bool: ``when`` is a launch (or the launch predates the capture)
    before_capture: np.ndarray  # bool: no launch recorded, its correlation older than every one that is


def _launch_times(k_start: np.ndarray, cols: _KernelColumns, links: _KernelLinks, host_ops: pd.DataFrame,
                  rt: _RuntimeCalls) -> _Launched:
    """Per kernel: when the host launched it. The runtime call (``cudaLaunchKernel``,
    ``hipLaunchKernel``; found by correlation id or launch flow) gives the time, even in the 2021
    schema where backward-thread launches have no enclosing op; else the op found by External id.
    CUPTI and roctracer number correlations in launch order, so a kernel with no recorded launch
    and a correlation below every recorded one was launched before the capture began."""
    when = k_start.copy()
    call = np.asarray(links.launch, dtype=np.int64)
    op = np.asarray(links.host_op, dtype=np.int64)
    by_call = call >= 0
    when[by_call] = rt.start[call[by_call]]
    by_op = ~by_call & (op >= 0)
    when[by_op] = host_ops["start_ns"].to_numpy(np.int64)[op[by_op]]
    corr = np.asarray(cols.correlation, dtype=np.int64)
    recorded = [c for c in rt.correlation if c >= 0]
    before = ~(by_call | by_op) & (corr >= 0) & (corr < (min(recorded) if recorded else -1))
    return _Launched(when, by_call | by_op | before, before)


def _launched_outside_notes(kernels: pd.DataFrame, launched: _Launched, steps: list[Step]) -> list[str]:
    """What the steps leave out: how many tasks were launched before the first captured step and
    after the last (or between two), their device time and the collectives among them."""
    outside = kernels["step"].to_numpy(np.int64) == STEP_LAUNCHED_OUTSIDE
    if not steps or not outside.any():
        return []
    before = outside & (launched.before_capture | (launched.when < steps[0].start_ns))
    after = outside & ~before & (launched.when >= max(s.end_ns for s in steps))
    dur = kernels["dur_ns"].to_numpy(np.int64)
    comm = kernels["core"].astype(str).to_numpy() == "COMMUNICATION"
    notes = []
    for where, sel in ((f"before the first captured step (ProfilerStep#{steps[0].id})", before),
                       ("after the last captured step", after), ("between two captured steps", outside & ~before & ~after)):
        if not sel.any():
            continue
        among = ""
        if (sel & comm).any():
            among = (f", {int((sel & comm).sum()):,} collective(s) of "
                     f"{format_us(int(dur[sel & comm].sum()) / NS_PER_US)} among them")
        notes.append(f"{int(sel.sum()):,} device task(s) launched {where} ran for "
                     f"{format_us(int(dur[sel].sum()) / NS_PER_US)} of device time{among}: "
                     "they are outside every step and in no per-step figure")
    return notes


def _launch_steps(launched: _Launched, steps: list[Step]) -> np.ndarray:
    """Each kernel's step: the ProfilerStep window its launch lies in. A known launch outside every
    window (before the first captured step, between two, after the last) puts the kernel outside
    every step (STEP_LAUNCHED_OUTSIDE), however late it ran; a kernel without one goes by its start."""
    out = step_ids(launched.when, steps)
    if steps:
        out[launched.before_capture | (launched.known & (out < 0))] = STEP_LAUNCHED_OUTSIDE
    return out


def _ops_by_external_id(ext_id: list[int], host_cat: list[str]) -> dict[int, int]:
    """External id -> op (a cpu_op wins over an annotation carrying the same id)."""
    op_of_ext: dict[int, int] = {}
    for i, x in enumerate(ext_id):
        if x > 0 and (x not in op_of_ext or host_cat[op_of_ext[x]] != "cpu_op"):
            op_of_ext[x] = i
    return op_of_ext


def _calls_by_correlation(correlation: list[int]) -> dict[int, int]:
    """Runtime calls by correlation id (the first call of each)."""
    rt_of_corr: dict[int, int] = {}
    for j, c in enumerate(correlation):
        if c >= 0:
            rt_of_corr.setdefault(c, j)
    return rt_of_corr


def _flow_correlations(flows: _Rows, base: int) -> dict[tuple[int, int, int], int]:
    """ac2g flow ends: kernel (device pid, stream tid, ts) -> correlation, for kernels without one."""
    corr_at: dict[tuple[int, int, int], int] = {}
    f_cat, f_ph, f_id = flows.col("cat"), flows.col("ph"), flows.col("id")
    ac2g = [
        i for i in range(len(flows))
        if f_cat[i] == "ac2g" and f_ph[i] == "f" and type(f_id[i]) is int
    ]
    if ac2g:
        at = np.asarray(ac2g, dtype=np.int64)
        f_start = _us_to_ns(flows.array("ts", np.float64)[at]) + base
        f_pid, f_tid = flows.array("pid")[at].tolist(), flows.array("tid")[at].tolist()
        for i, p, t, s in zip(ac2g, f_pid, f_tid, f_start.tolist()):
            corr_at[(p, t, s)] = f_id[i]
    return corr_at


def _kernel_columns(ev: _Rows, order: np.ndarray, k_start: np.ndarray) -> _KernelColumns:
    """``ev``'s columns taken in ``order`` (``k_start``: the starts already in that order)."""
    pick = order.tolist()

    def ordered(values: list[Any]) -> list[Any]:
        return [values[i] for i in pick]

    return _KernelColumns(
        names=ordered(ev.col("name")),
        cats=ordered(ev.col("cat")),
        collectives=ordered(ev.col("collective")),
        pid=ev.array("pid")[order].tolist(),
        tid=ev.array("tid")[order].tolist(),
        device=ev.array("device")[order].tolist(),
        stream=ev.array("stream")[order].tolist(),
        ext_id=ev.array("ext_id")[order].tolist(),
        correlation=ev.array("correlation")[order].tolist(),
        start=k_start.tolist(),
    )


def _link_kernels(cols: _KernelColumns, launches: _Launches, host_names: list[str]) -> _KernelLinks:
    """Each kernel's device, stream, launching op, core and (for collectives) type."""
    n = len(cols.names)
    names, cats, collectives = cols.names, cols.cats, cols.collectives
    pids, tids, starts = cols.pid, cols.tid, cols.start
    k_device, k_stream, k_ext, k_corr = cols.device, cols.stream, cols.ext_id, cols.correlation
    op_of_ext, rt_of_corr, corr_at, rt = launches.op_of_ext, launches.rt_of_corr, launches.corr_at, launches.rt
    types, cores = [], []
    device = [-1] * n
    stream = [-1] * n
    host_op = [-1] * n
    launch = [-1] * n
    for i in range(n):
        # Kineto writes pid = device and tid = stream for GPU activity; the args say it again
        # (an event without args has them at -1).
        device[i] = k_device[i] if k_device[i] >= 0 else pids[i]
        stream[i] = k_stream[i] if k_stream[i] >= 0 else tids[i]
        op = -1
        ext = k_ext[i]
        if ext > 0:
            op = op_of_ext.get(ext, -1)
        corr = k_corr[i]
        if corr < 0:
            corr = corr_at.get((pids[i], tids[i], starts[i]), -1)  # type: ignore[arg-type]
        j = rt_of_corr.get(corr, -1) if corr >= 0 else -1
        if op < 0 and j >= 0:
            rt_ext = rt.ext_id[j]
            op = op_of_ext.get(rt_ext, -1) if rt_ext > 0 else -1
            if op < 0:
                op = rt.op[j]
        host_op[i] = op
        launch[i] = j
        core, kind = KERNEL_CORES[cats[i]], ""
        if collectives[i]:
            core, kind = "COMMUNICATION", collectives[i]
        elif (op >= 0 and host_names[op] == _COMM_OP) or names[i].startswith(_NCCL_KERNEL_PREFIXES):
            core = "COMMUNICATION"
        cores.append(core)
        types.append(kind)
    return _KernelLinks(device, stream, host_op, launch, cores, types)


def _int_or_none(value: Any) -> int | None:
    return int64_of(value)  # "²", 1e999 and 2**64 are unknown, not an exception or an overflow


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


# ---------------------------------------------------------------------------------------------
# Recognising a trace (the probe discovery runs)

GZ_TAIL_SCAN_LIMIT = 16 * 1024 * 1024
"""Compressed size up to which a gzipped trace is decompressed to its end to find
``distributedInfo`` (Kineto may write it after ``traceEvents``); bigger files rely on the head
and the file name."""

_KINETO_TS_RE = re.compile(r"\.(\d{13})\.pt\.trace\.json(?:\.gz)?$")
_DIST_RANK_RE = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*"?(-?\d+)')


def probe_file(file: SeenFile) -> Candidate | None:
    """``*.pt.trace.json[.gz]`` by name; any other ``*.json[.gz]`` whose head is an object with
    ``traceEvents`` (HTA and job scripts write rank-3.json.gz, <job>_trace.json.gz)."""
    lower = file.name.lower()
    named = lower.endswith((".pt.trace.json", ".pt.trace.json.gz"))
    if not named and (file.name == "trace_view.json" or not lower.endswith((".json", ".json.gz"))):
        return None
    head, gz = file.head()
    if not named and not _is_kineto_head(head):
        return None
    rank = _rank_from_trace(file.path, head, gz)
    if rank is None:
        rank = rank_from_names(file.path)
    loc = ProfileLocation(ProfileKind.KINETO, file.path, rank, mtime_path(file.path), True)
    return Candidate(loc, True, int_or_zero(_KINETO_TS_RE.search(file.name)))


def _is_kineto_head(head: bytes) -> bool:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return text.startswith(b"{") and b'"traceEvents"' in text


def _rank_from_trace(path: Path, head: bytes, gz: bool) -> int | None:
    m = _DIST_RANK_RE.search(head)
    if m:
        return as_rank(m.group(1).decode("ascii"))
    m = _DIST_RANK_RE.search(_tail(path, gz))
    return as_rank(m.group(1).decode("ascii")) if m else None


def _tail(path: Path, gz: bool) -> bytes:
    try:
        with safe_io.open_regular(path) as f:
            if not gz:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - SNIFF_BYTES))
                return f.read()
            if os.fstat(f.fileno()).st_size > GZ_TAIL_SCAN_LIMIT:
                return b""
            tail = b""
            for chunk in safe_io.inflate(path, f):
                tail = (tail + chunk)[-SNIFF_BYTES:]
            return tail
    except (ProfileError, OSError):
        return b""


# A trace file per rank; traces of different jobs often share a folder, told apart by file name
# (train.1.pt.trace.json, eval.2.pt.trace.json).
READER = Reader(ProfileKind.KINETO, read, probe_file=probe_file, looks_for="*.pt.trace.json[.gz] or Kineto *.json[.gz]",
                watch=("**/*.pt.trace.json*",), job_by_name=True)
