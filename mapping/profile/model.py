"""The one profile model every reader fills (torch_npu text/DB, msprof CLI, Kineto).

Bulk data (device kernels, host ops, runtime events) lives in columnar pandas tables whose columns
are fixed by the schemas below, so a profile with millions of events stays compact, pickles fast
for the cache and aggregates with vectorised group-bys. Small things are typed dataclasses.

Conventions, for every producer:
* times are integer nanoseconds (epoch or trace-relative, consistent within one profile);
* "no value" is -1 for integers, "" for strings; never NaN in the fixed columns;
* row indices of ``host_ops`` / ``modules`` are the ids other tables refer to;
* ``stacks[i]`` is a tuple of frames, innermost first; -1 = no stack.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from msprof_lsp.mapping.errors import Issue
from msprof_lsp.mapping.profile.frames import Stack

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------
STEP_LAUNCHED_OUTSIDE = -2
"""A kernel's ``step`` when its launch is known to lie outside every captured step (before the
first ProfilerStep, between two, after the last): outside every step, never re-filed by its start."""

# Table schemas: column -> (kind, default). kind: "cat" categorical string, "str" plain string,
# "i8" int64, "f8" float64, "bool".

KERNEL_SCHEMA: dict[str, tuple[str, Any]] = {
    "name": ("cat", ""),
    "type": ("cat", ""),  # OpType (MatMulV2, Relu, hcom_allReduce_, ...)
    "core": ("cat", ""),  # AI_CORE, AI_VECTOR_CORE, AI_CPU, MIX_AIC, MIX_AIV, HCCL, COMMUNICATION,
    #                       DSA_SQE; Kineto: GPU, MEMCPY, MEMSET
    "start_ns": ("i8", -1),
    "dur_ns": ("i8", 0),
    "wait_ns": ("i8", -1),
    "device": ("i8", -1),
    "stream": ("i8", -1),
    "task_id": ("i8", -1),
    "step": ("i8", -1),  # Step Id / ProfilerStep number; -1 none known, STEP_LAUNCHED_OUTSIDE (-2)
    "block_dim": ("i8", -1),
    "op_state": ("cat", ""),  # dynamic / static
    "input_shapes": ("cat", ""),  # "81920,4096;8192,512" (quotes stripped)
    "input_dtypes": ("cat", ""),
    "input_formats": ("cat", ""),
    "output_shapes": ("cat", ""),
    "output_dtypes": ("cat", ""),
    "output_formats": ("cat", ""),
    "hf32_eligible": ("cat", ""),  # kernel_details.csv "HF32 Eligible": YES / NO ("" not written)
    # Links (filled by the reader's linking step, see mapping.linking):
    "host_op": ("i8", -1),  # host op that launched it (torch_npu dispatch scope / CUDA cpu_op)
    "stack": ("i8", -1),  # resolved call stack (own op's, an ancestor's, or the forward op's)
    "fwd_op": ("i8", -1),  # backward kernels: the forward host op they were linked through
    "link": ("cat", "none"),  # stack | backward | host | none  (see LinkKind)
    "backward": ("bool", False),
}
"""Device tasks. Extra float columns named ``pmu:<original header>`` hold PMU ratios."""

HOST_OP_SCHEMA: dict[str, tuple[str, Any]] = {
    "name": ("cat", ""),
    "cat": ("cat", "cpu_op"),  # cpu_op | user_annotation
    "start_ns": ("i8", -1),  # -1 when only operator_details.csv (no timestamps) was available
    "dur_ns": ("i8", 0),
    "pid": ("i8", -1),
    "tid": ("i8", -1),
    "parent": ("i8", -1),  # enclosing host op on the same thread
    "depth": ("i8", 0),
    "seq": ("i8", -1),  # autograd sequence number
    "fwd_thread": ("i8", -1),  # torch_npu: 0 forward, 1 backward; Kineto: forward OS thread id
    "input_dims": ("str", ""),  # "2,3;3" (";"-joined tensors, ","-joined dims)
    "input_types": ("str", ""),
    "concrete_inputs": ("str", ""),  # Kineto: JSON list of strings, e.g. dropout p/train
    "stack": ("i8", -1),  # this op's own recorded or reconstructed stack
    "module": ("i8", -1),  # innermost enclosing nn.Module event (row of `modules`)
    "fwd_op": ("i8", -1),  # backward autograd nodes: the forward op (fwdbwd flow / seq number)
    "device_self_ns": ("i8", -1),  # operator_details.csv Device Self Duration, when known
    "device_total_ns": ("i8", -1),
}
"""Host (framework) ops: aten::*, npu::*, dispatch scopes (aclnnMm), autograd nodes, annotations
(ProfilerStep#N, Optimizer.step#AdamW.step, enumerate(DataLoader)#...)."""

MODULE_SCHEMA: dict[str, tuple[str, Any]] = {
    "cls": ("cat", ""),  # "Linear" from "nn.Module: Linear_0"
    "k": ("i8", -1),  # per-class instance counter (first-call order)
    "start_ns": ("i8", -1),
    "dur_ns": ("i8", 0),
    "pid": ("i8", -1),
    "tid": ("i8", -1),
    "parent": ("i8", -1),  # enclosing module
}
"""``nn.Module: <Class>_<k>`` python_function events (with_modules / with_stack)."""

HOST_EVENT_SCHEMA: dict[str, tuple[str, Any]] = {
    "name": ("cat", ""),  # AscendCL@aclrtSynchronizeStream, GC, cudaStreamSynchronize, ...
    "cat": ("cat", ""),  # cann | gc | cuda_runtime | cuda_driver | mstx
    "level": ("cat", ""),  # CANN level: acl, runtime, node, model, communication
    "start_ns": ("i8", -1),
    "dur_ns": ("i8", 0),
    "pid": ("i8", -1),
    "tid": ("i8", -1),
}
"""Runtime/API events that are not framework ops (CANN API, GC pauses, CUDA runtime)."""

OVERLAP_SCHEMA: dict[str, tuple[str, Any]] = {
    "lane": ("cat", ""),  # Computing | Communication | Communication(Not Overlapped) | Free
    "start_ns": ("i8", -1),
    "dur_ns": ("i8", 0),
    "device": ("i8", -1),
}
"""``Overlap Analysis`` slices of trace_view.json (mapped by thread_name, never by tid)."""

OP_MEMORY_SCHEMA: dict[str, tuple[str, Any]] = {
    "name": ("cat", ""),  # nearest enclosing aten::/npu::/atb:: op; GE rows cann::...
    "size_bytes": ("i8", -1),
    "alloc_ns": ("i8", -1),
    "release_ns": ("i8", -1),  # -1: not freed inside the capture window
    "active_release_ns": ("i8", -1),
    "dur_ns": ("i8", -1),
    "active_dur_ns": ("i8", -1),
    "alloc_allocated_bytes": ("i8", -1),  # allocator totals at allocation time
    "alloc_reserved_bytes": ("i8", -1),
    "alloc_active_bytes": ("i8", -1),
    "release_allocated_bytes": ("i8", -1),  # ... and at release time
    "release_reserved_bytes": ("i8", -1),
    "release_active_bytes": ("i8", -1),
    "stream": ("cat", ""),  # Stream Ptr, as written
    "device_type": ("cat", ""),  # NPU:0 / CPU
    "device": ("i8", -1),
}
"""operator_memory.csv (and msprof operator_memory_*.csv): one row per allocation; bytes, ns."""

MEMORY_RECORD_SCHEMA: dict[str, tuple[str, Any]] = {
    "component": ("cat", ""),  # PTA, GE, PTA+GE, APP, WORKSPACE
    "ts_ns": ("i8", -1),
    "allocated_bytes": ("i8", -1),
    "reserved_bytes": ("i8", -1),
    "active_bytes": ("i8", -1),
    "stream": ("cat", ""),
    "device_type": ("cat", ""),
    "device": ("i8", -1),
}
"""memory_record.csv (and msprof memory_record_*.csv): allocator totals over time; bytes, ns."""

_DTYPES = {"i8": "int64", "f8": "float64", "bool": "bool", "str": "object"}


def make_table(
    schema: Mapping[str, tuple[str, Any]],
    columns: Mapping[str, Sequence[Any] | np.ndarray] | None = None,
    length: int | None = None,
) -> pd.DataFrame:
    """Build a table with exactly the schema's columns (plus any extra ``pmu:*`` float columns).

    Missing schema columns are filled with their default; given columns are cast to the schema
    kind. Readers collect plain Python lists per column and call this once.
    """
    columns = dict(columns or {})
    if length is None:
        length = len(next(iter(columns.values()))) if columns else 0
    data: dict[str, Any] = {}
    for col, (kind, default) in schema.items():
        values = columns.pop(col, None)
        if values is None:
            if kind == "cat":
                data[col] = pd.Categorical([default] * length) if length else pd.Categorical([])
            elif kind == "str":
                data[col] = np.full(length, default, dtype=object)
            else:
                data[col] = np.full(length, default, dtype=_DTYPES[kind])
            continue
        if len(values) != length:
            raise ValueError(f"column {col!r} has {len(values)} rows, expected {length}")
        if kind == "cat":
            data[col] = pd.Categorical(values)
        elif kind == "str":
            data[col] = np.asarray(values, dtype=object) if length else np.empty(0, dtype=object)
        else:
            data[col] = np.asarray(values, dtype=_DTYPES[kind])
    for col, values in columns.items():  # extras (pmu:*), kept as floats
        if not col.startswith("pmu:"):
            raise ValueError(f"unknown column {col!r}")
        data[col] = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype="float64")
    return pd.DataFrame(data)


_EMPTY: dict[int, tuple[Mapping[str, tuple[str, Any]], pd.DataFrame]] = {}


def empty_table(schema: Mapping[str, tuple[str, Any]]) -> pd.DataFrame:
    """A new empty table of ``schema``: a copy of one built once per schema (building one takes
    ~9 ms with its categorical columns, a copy ~0.3 ms; every Profile starts with five, and a
    1,024-rank cluster view makes one Profile per rank)."""
    hit = _EMPTY.get(id(schema))
    if hit is None or hit[0] is not schema:
        hit = _EMPTY[id(schema)] = (schema, make_table(schema, {}, 0))
    return hit[1].copy()


# ---------------------------------------------------------------------------------------------
# Small typed records


class ProfileKind(str, enum.Enum):
    TORCH_NPU = "torch_npu"  # torch_npu.profiler text export (*_ascend_pt)
    TORCH_NPU_DB = "torch_npu_db"  # torch_npu.profiler DB export
    MSPROF = "msprof"  # msprof CLI PROF_* output
    KINETO = "kineto"  # stock torch.profiler Chrome trace


class StepsSource(str, enum.Enum):
    """Where ``Profile.steps`` came from."""

    MARKERS = "markers"  # ProfilerStep#N, DB STEP_TIME, msprof step_trace iterations
    INFERRED = "inferred"  # no markers: the repeating launch sequence (mapping.step_infer)
    CAPTURE = "capture span"  # no markers, nothing repeats: one step, the capture's measured span


class Backend(str, enum.Enum):
    ASCEND = "ascend"
    CUDA = "cuda"
    CPU = "cpu"


class LinkKind(str, enum.Enum):
    STACK = "stack"  # forward kernel -> launching op -> op (or ancestor) with a call stack
    BACKWARD = "backward"  # backward kernel -> autograd node -> fwdbwd -> forward op's stack
    HOST = "host"  # linked to a host op, but no stack anywhere on the chain
    NONE = "none"  # no launching host op known (msprof CLI output, unlinked tasks)


@dataclass(frozen=True, slots=True)
class Step:
    """One profiler step (``ProfilerStep#N`` range, DB STEP_TIME row, or Step Id span)."""

    id: int
    start_ns: int
    end_ns: int

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """One row of step_trace_time.csv (or the same computed from Overlap Analysis), in ns."""

    step: int  # -1 when the file has no step column value
    device: int
    computing_ns: int
    comm_not_overlapped_ns: int
    overlapped_ns: int
    comm_ns: int
    free_ns: int
    stage_ns: int = -1
    bubble_ns: int = -1
    comm_not_overlapped_excl_receive_ns: int = -1
    preparing_ns: int = -1
    derived: bool = False  # recomputed from Overlap Analysis slices (no step_trace_time.csv / DB table)

    @property
    def step_time_ns(self) -> int:
        """Computing + Communication(Not Overlapped) + Free."""
        return self.computing_ns + self.comm_not_overlapped_ns + self.free_ns


@dataclass(frozen=True, slots=True)
class CommOp:
    """One collective/p2p op of communication.json (durations converted from ms to ns)."""

    name: str  # hcom_allReduce__428_0_1
    group: str  # text after "@" in the key, "" if none
    step: int
    kind: str  # collective | p2p
    start_ns: int
    elapse_ns: int
    transit_ns: int
    wait_ns: int
    sync_ns: int
    idle_ns: int
    # per link type (RDMA, HCCS, PCIE, SDMA, SIO): size MB, time ms, bandwidth GB/s, large packet
    # ratio, size distribution {packet MB: [count, total ms]} -- kept as in the file
    bandwidth: dict[str, dict[str, Any]] = field(default_factory=dict)
    rank: int = -1  # set when one file holds several ranks (cluster_communication.json)


@dataclass(frozen=True, slots=True)
class OpStatistic:
    """One row of op_statistic.csv / op_statistic_*.csv."""

    op_type: str
    core: str
    count: int
    total_ns: int
    min_ns: int
    avg_ns: int
    max_ns: int
    ratio: float  # percent, as written


class BreakdownSource(str, enum.Enum):
    STEP_TRACE_TIME = "step_trace_time.csv"  # written by torch_npu / msprof-analyze
    ANALYSIS_DB = "analysis.db StepTraceTime"  # written by torch_npu's DB export
    OVERLAP_ANALYSIS = "Overlap Analysis"  # sums of the trace's Overlap Analysis lanes
    TASKS = "device tasks"  # computed here from the classified tasks, same definitions
    NONE = "none"  # no device tasks


@dataclass(frozen=True, slots=True)
class StepTimes:
    """One step's time split, in ns (-1 = not known)."""

    step: int  # ProfilerStep / Step Id; -1 = the whole capture (no steps)
    device: int
    computing_ns: int
    communication_ns: int
    overlapped_ns: int
    comm_not_overlapped_ns: int
    free_ns: int
    stage_ns: int  # computing + comm_not_overlapped + free
    memcpy_ns: int = -1  # union of memory-copy tasks (inside Free when no compute overlaps them)
    host_wall_ns: int = -1  # ProfilerStep length
    preparing_ns: int = -1  # first device task - ProfilerStep start


@dataclass(frozen=True, slots=True)
class TimeBreakdown:
    source: BreakdownSource
    steps: list[StepTimes] = field(default_factory=list)
    streams: int = 1  # distinct (device, stream) lanes the device work ran on

    def mean(self, attr: str) -> float | None:
        """Average of a field over the steps that know it; None when none does."""
        values = [getattr(s, attr) for s in self.steps if getattr(s, attr) >= 0]
        return sum(values) / len(values) if values else None


@dataclass(frozen=True, slots=True)
class Persist:
    """How a derived value travels in the cache (mapping.cache's derived-values file): as bytes it
    encodes with a typed encoder, and decodes building only data (no pickle). ``decode`` raises
    (any exception) on bytes it did not write; the value is then computed again."""

    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]


def array_bytes(values: np.ndarray, dtype: str = "<i8") -> bytes:
    """A numeric array as the bytes of ``dtype`` (little-endian): how a ``Persist`` encoder keeps
    rows and times in its typed record."""
    return np.ascontiguousarray(values, dtype=dtype).tobytes()


def bytes_array(data: bytes, length: int | None = None, dtype: str = "<i8") -> np.ndarray:
    """The array :func:`array_bytes` wrote, as a native-order copy; ValueError unless ``data`` holds
    whole items of ``dtype`` (exactly ``length`` of them when given)."""
    item = np.dtype(dtype)
    if len(data) % item.itemsize or (length is not None and len(data) != length * item.itemsize):
        raise ValueError("an array of the wrong length")
    return np.frombuffer(data, dtype=item).astype(item.newbyteorder("="))


@dataclass(slots=True)
class Derived:
    """Figures computed from a profile alone, kept with it so they are computed once per load and
    stored in its cache entry (mapping.codec): a warm run skips them.

    ``inputs`` are the Profile fields they were computed from, held (so their ids stay theirs) and
    compared by identity: a field replaced since (``profile.steps = [...]``) makes them stale. A
    loaded profile's tables are not changed in place.
    """

    breakdown: TimeBreakdown | None = None
    inputs: tuple[Any, ...] = field(default=(), compare=False)
    # other figures of the profile alone, by name: (their inputs, the value)
    memos: dict[str, tuple[tuple[Any, ...], Any]] = field(default_factory=dict, compare=False)
    # memos that can be written to the cache's derived-values file, and how (mapping.cache.store_derived)
    persist: dict[str, Persist] = field(default_factory=dict, compare=False)
    # the values that file holds for this profile's entry, still encoded (decoded on first use)
    stored: dict[str, bytes] = field(default_factory=dict, compare=False)
    # the Profile fields as read from (or written to) the cache entry: what stored values are for
    stored_for: tuple[Any, ...] = field(default=(), compare=False)
    entry: bytes | None = None  # payload digest of that entry

    def memo(self, name: str, inputs: tuple[Any, ...], compute: Callable[[], T], persist: Persist | None = None) -> T:
        """``compute()`` once while ``inputs`` (Profile fields, compared by identity) stay the same.
        With ``persist``, while ``inputs`` are the fields of the cache entry: a value the cache
        holds is decoded instead of computed, and a computed one is written there after the run
        (mapping.cache.store_derived)."""
        held = self.memos.get(name)
        if held is not None and _same(held[0], inputs):
            return held[1]  # type: ignore[no-any-return]
        of_entry = persist is not None and self._of_entry(inputs)
        raw = self.stored.get(name) if of_entry else None
        value: Any = None
        if raw is not None:
            try:
                value = persist.decode(raw)  # type: ignore[union-attr]
            except Exception:  # noqa: BLE001 - not what this build writes: computed (and written) again
                del self.stored[name]
                raw = None
        if raw is None:
            value = compute()
            if of_entry:
                self.persist[name] = persist  # type: ignore[assignment]
        self.memos[name] = (inputs, value)
        return value  # type: ignore[no-any-return]

    def _of_entry(self, inputs: tuple[Any, ...]) -> bool:
        return bool(self.stored_for) and all(any(a is b for b in self.stored_for) for a in inputs)

    def to_store(self) -> dict[str, bytes]:
        """Encoded values computed since the entry was read or written, for that entry's fields."""
        out = {}
        for name, how in self.persist.items():
            held = self.memos.get(name)
            if held is not None and self._of_entry(held[0]):
                try:
                    out[name] = how.encode(held[1])
                except Exception:  # noqa: BLE001 - a value its encoder cannot hold (a non-str name): not cached
                    continue
        return out

    def written(self, values: dict[str, bytes]) -> None:
        """The derived-values file now holds ``values``."""
        self.stored = dict(values)
        self.persist.clear()

    def holds(self, profile: Profile) -> bool:
        now = profile.breakdown_inputs()
        return len(now) == len(self.inputs) and all(a is b for a, b in zip(now, self.inputs))

    def keep(self, profile: Profile, breakdown: TimeBreakdown) -> None:
        self.breakdown, self.inputs = breakdown, profile.breakdown_inputs()


def _same(held: tuple[Any, ...], now: tuple[Any, ...]) -> bool:
    return len(held) == len(now) and all(a is b for a, b in zip(held, now))


AICORE_FREQ_KEY = "aicore_freq_mhz"
"""``ProfileMeta.extra`` key of the AI Core clock samples, ``[[ts_ns, MHz], ...]`` in time order
(trace_view.json's ``AI Core Freq`` counter, the DB's ``AICORE_FREQ``)."""


@dataclass(slots=True)
class ProfileMeta:
    """What the profile says about itself (profiler_info*.json, profiler_metadata.json, ...)."""

    kind: ProfileKind
    path: str  # the directory or file the profile was read from
    backend: Backend = Backend.ASCEND
    rank: int | None = None
    device_id: int | None = None
    world_size: int | None = None
    torch_version: str = ""
    torch_npu_version: str = ""
    cann_version: str = ""
    level: str = ""  # Level_none / Level0 / Level1 / Level2 ("" unknown)
    aic_metrics: str = ""  # ACL_AICORE_PIPE_UTILIZATION, ...
    with_stack: bool | None = None
    record_shapes: bool | None = None
    profile_memory: bool | None = None
    with_modules: bool | None = None
    gc_detect_threshold: float | None = None
    export_type: tuple[str, ...] = ()
    complete: bool = True  # analyse.done present (torch_npu); False = still being written
    steps_source: StepsSource = StepsSource.MARKERS  # what profile.steps (when there are any) come from
    collection_end_ns: int | None = None  # end_info.collectionTimeEnd
    env: dict[str, str] = field(default_factory=dict)  # ENV_VARIABLES ("" = unset)
    env_source: str = ""  # where meta.env was read: profiler_metadata.json or the DB's META_DATA
    parallel_groups: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # other metadata keys, versions, ...
    files: list[str] = field(default_factory=list)  # the files actually read

    @property
    def steps_from_capture(self) -> bool:
        """No step markers and nothing repeats: the one step is the capture's measured span."""
        return self.steps_source is StepsSource.CAPTURE

    @property
    def def_line_frames(self) -> bool:
        """Whether the stack frames carry each function's def line, not the running line (the
        reader says which in ``extra["frame_lines"]``; current Kineto traces record def lines)."""
        lines = self.extra.get("frame_lines")
        if lines is not None:
            return lines == "def"
        return self.kind is ProfileKind.KINETO


@dataclass(slots=True)
class Profile:
    """A loaded, linked profile of one rank."""

    meta: ProfileMeta
    kernels: pd.DataFrame = field(default_factory=lambda: empty_table(KERNEL_SCHEMA))
    host_ops: pd.DataFrame = field(default_factory=lambda: empty_table(HOST_OP_SCHEMA))
    modules: pd.DataFrame = field(default_factory=lambda: empty_table(MODULE_SCHEMA))
    host_events: pd.DataFrame = field(default_factory=lambda: empty_table(HOST_EVENT_SCHEMA))
    overlap: pd.DataFrame = field(default_factory=lambda: empty_table(OVERLAP_SCHEMA))
    stacks: list[Stack] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    step_breakdown: list[StepBreakdown] = field(default_factory=list)
    comm_ops: list[CommOp] = field(default_factory=list)
    comm_matrix: dict[str, Any] = field(default_factory=dict)  # communication_matrix.json as is
    op_statistic: list[OpStatistic] = field(default_factory=list)
    api_statistic: pd.DataFrame | None = None  # api_statistic.csv, columns as in the file
    op_memory: pd.DataFrame | None = None  # OP_MEMORY_SCHEMA (operator_memory.csv)
    memory_record: pd.DataFrame | None = None  # MEMORY_RECORD_SCHEMA (memory_record.csv)
    issues: list[Issue] = field(default_factory=list)  # non-fatal problems met while loading
    # not an __init__ argument: dataclasses.replace() gives the new profile an empty one
    derived: Derived = field(default_factory=Derived, init=False, repr=False, compare=False)

    # -- derived figures -----------------------------------------------------------------------

    @property
    def has_call_stacks(self) -> bool:
        return bool(self.stacks)

    @property
    def num_steps(self) -> int:
        if self.steps:
            return len(self.steps)
        steps = {b.step for b in self.step_breakdown if b.step >= 0}
        if steps:
            return len(steps)
        kernel_steps = self.kernels["step"]
        n = int(kernel_steps[kernel_steps >= 0].nunique())
        return max(n, 1)

    def step_time(self) -> tuple[float, str]:
        """Average step time in ns and where it came from (first available).

        (1) step_trace_time Computing + Communication(Not Overlapped) + Free, averaged per step;
        (2) ProfilerStep#N durations (or, for a profile without markers whose launches do not
        repeat and whose reader made the capture span its one step, that span: "capture span");
        (3) device span per Step Id of the compute and communication tasks (the breakdown's
        Stage); (4) capture length / steps (of those tasks, when there are any).
        A breakdown only recomputed from Overlap Analysis (``derived``) is not (1): it covers the
        device span of the step, not the Preparing phase before its first task, so it is used
        only where there are no ProfilerStep ranges. Steps inferred from the launch sequence skip
        (2): their windows are cut on the device timeline.
        """
        rows = [b for b in self.step_breakdown if b.step_time_ns > 0]
        written = [b for b in rows if not b.derived]
        if written:
            return _mean_breakdown(written), "step_trace_time"
        inferred = self.meta.steps_source is StepsSource.INFERRED
        if self.steps and not inferred:
            source = "capture span" if self.meta.steps_from_capture else "ProfilerStep"
            return sum(s.dur_ns for s in self.steps) / len(self.steps), source
        # Inferred windows: the first opens at the capture's first event, after data loading the
        # capture cannot see, so their durations are not step times; their device span is.
        if rows:  # only recomputed from Overlap Analysis, and no step ranges to prefer
            return _mean_breakdown(rows), "Overlap Analysis"
        k = self.kernels
        if len(k):
            from msprof_lsp.mapping.profile.timemodel import TaskClass, is_class  # the time model builds on this module

            # the step's Stage: its compute and communication tasks (waits, markers and copies out)
            staged = is_class(k, TaskClass.COMPUTE, TaskClass.COMMUNICATION)
            if staged.any():
                k = k[staged]
            in_step = k[k["step"] >= 0]
            if len(in_step):
                ends = in_step["start_ns"] + in_step["dur_ns"]
                span = ends.groupby(in_step["step"]).max() - in_step["start_ns"].groupby(
                    in_step["step"]
                ).min()
                return float(span.mean()), "kernel step span"
            span = int((k["start_ns"] + k["dur_ns"]).max() - k["start_ns"].min())
            return span / self.num_steps, "capture length"
        h = self.host_ops
        timed = h[h["start_ns"] >= 0]
        if len(timed):
            span = int((timed["start_ns"] + timed["dur_ns"]).max() - timed["start_ns"].min())
            return span / self.num_steps, "capture length"
        return 0.0, "unknown"

    @property
    def step_time_ns(self) -> float:
        return self.step_time()[0]

    def wall_step_ns(self) -> float | None:
        """Mean length of the step windows, host-bound phases included: the ProfilerStep ranges;
        of inferred steps the windows after the first (each runs from the end of one iteration's
        device work to the next; the first opens at the capture's first event, after whatever
        data loading came before it). None without steps."""
        steps = self.steps
        if self.meta.steps_source is StepsSource.INFERRED and len(steps) > 1:
            steps = steps[1:]
        return sum(s.dur_ns for s in steps) / len(steps) if steps else None

    @property
    def device_time_ns(self) -> int:
        """Device work time of the capture: durations of its compute kernels and memory copies,
        summed (waits, communication ops and their tasks are not work; see mapping.timemodel)."""
        from msprof_lsp.mapping.profile.timemodel import work_mask  # the time model builds on this module

        k = self.kernels
        return int(k["dur_ns"].to_numpy()[work_mask(k)].sum()) if len(k) else 0

    def fields(self) -> tuple[Any, ...]:
        """Every field but ``derived``: the inputs of a figure that may read any of them."""
        return (self.meta, self.kernels, self.host_ops, self.modules, self.host_events, self.overlap, self.stacks,
                self.steps, self.step_breakdown, self.comm_ops, self.comm_matrix, self.op_statistic,
                self.api_statistic, self.op_memory, self.memory_record, self.issues)

    def breakdown_inputs(self) -> tuple[Any, ...]:
        """The fields the step breakdown (mapping.timemodel.profile_breakdown) is computed from."""
        return (self.meta, self.kernels, self.host_ops, self.steps, self.step_breakdown)

    def kernels_in_steps(self) -> pd.DataFrame:
        """Kernels inside profiled steps (all kernels when the profile has no step ranges)."""
        k = self.kernels
        if self.steps and len(k) and (k["step"] < 0).all():
            return k  # steps known on the host only; do not drop everything
        if (k["step"] >= 0).any():
            return k[k["step"] >= 0]
        return k

    def host_op_chain(self, op: int) -> Iterable[int]:
        """The op and its ancestors, innermost first."""
        parents = self.host_ops["parent"].to_numpy()
        while op >= 0:
            yield op
            op = int(parents[op])

    def stack_of(self, stack_id: int) -> Stack:
        return self.stacks[stack_id] if stack_id >= 0 else ()


def _mean_breakdown(rows: list[StepBreakdown]) -> float:
    per_step: dict[int, list[int]] = {}
    for b in rows:
        per_step.setdefault(b.step, []).append(b.step_time_ns)
    # Several devices in one file: a step lasts as long as its slowest device.
    values = [max(v) for v in per_step.values()]
    return sum(values) / len(values)


@dataclass(frozen=True, slots=True)
class CommLink:
    """One src -> dst link of communication_matrix.json, summed over the ``<type>-total@<group>``
    entries of every step and op type (docs/numbers.md "Communication matrix")."""

    src: int
    dst: int
    transit_ms: float  # over the capture
    size_mb: float  # over the capture
    steps: int  # steps the matrix holds

    @property
    def bandwidth_gbps(self) -> float | None:
        return self.size_mb / self.transit_ms if self.transit_ms > 0 else None  # MB/ms = GB/s


@dataclass(slots=True)
class RankSummary:
    """Per-rank figures for the cluster summary of a multi-rank profile."""

    rank: int
    path: str
    step_time_ns: float
    comm_not_overlapped_ns: float  # per step
    comm_share: float  # comm_not_overlapped / step time
    computing_ns: float = -1.0  # per step, the breakdown's Computing (-1 unknown)
    free_ns: float = -1.0  # per step, the breakdown's Free (-1 unknown)
    # per link group (SDMA: the intra-node links, RDMA): (MB, ms) moved by the rank's collectives
    # over the capture, from communication.json's Transit Size / Transit Time
    link_totals: dict[str, tuple[float, float]] = field(default_factory=dict)
    breakdown: TimeBreakdown | None = None  # the rank's own step breakdown (the HTML report's bars)
    links: list[CommLink] = field(default_factory=list)  # the links this rank's matrix wrote
    # per step, the Wait Time of its gradient collectives (comm_time.split; -1 unknown): the rank
    # the others wait for waits least
    comm_wait_ns: float = -1.0
    # the rank kept the files the kernel rules read (trace / kernel details); a rank that kept only
    # its summary files is shown in the cluster view but never analysed in full while another has them
    device_data: bool = True
    pipeline_stage: int = -1  # its stage in a pipeline-parallel job (comm_time.pipeline_stage; -1 unknown)


@dataclass(slots=True)
class ClusterSummary:
    ranks: list[RankSummary]
    slowest_rank: int
    analysed_rank: int
    analysed_why: str = ""  # why this rank is the one analysed (docs/cli.md "What is analysed")

    @property
    def slowest_over_fastest(self) -> float:
        times = [r.step_time_ns for r in self.ranks if r.step_time_ns > 0]
        return max(times) / min(times) if times else 1.0

    @property
    def slowest_over_median(self) -> float:
        times = [r.step_time_ns for r in self.ranks if r.step_time_ns > 0]
        return max(times) / float(np.median(times)) if times else 1.0
