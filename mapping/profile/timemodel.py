"""The time model: what each device task is, and how a step's time splits (docs/numbers.md).

One classifier (:func:`classify`) sorts device tasks into a :class:`TaskClass` from what the
format itself says -- accelerator core / task type, op type, and the task names the producers give
runtime tasks (``EVENT_WAIT``, ``Notify Wait``, ``MEMCPY_ASYNC``, ``SDMA``, ``hcom_*``, NCCL kernels).
Every producer's kernel table goes through it; the rules and the cluster summary ask it too.

The per-step breakdown uses the definitions msprof and torch_npu write in step_trace_time.csv /
analysis.db ``StepTraceTime`` (checked against both on real exports):

* Computing = length of the union of compute-kernel intervals of the step;
* Communication = length of the union of communication-op intervals;
* Overlapped = Computing ∩ Communication; Communication(Not Overlapped) = Communication − Overlapped;
* Stage = last end − first start of the step's compute and communication tasks;
* Free = Stage − Computing − Communication(Not Overlapped) (memory copies and waits count as free);
* Preparing = the step's first device task − its ProfilerStep start; host wall = ProfilerStep length.

Where the producer wrote the figures the model reports them (``BreakdownSource``); otherwise it
computes them from the tasks with the same definitions (:func:`compute_breakdown`, which the
Kineto reader's kernels go through as well).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from msprof_lsp.mapping.profile.model import BreakdownSource, Profile, Step, StepBreakdown, StepTimes, TimeBreakdown
from msprof_lsp.mapping.profile.linking import row_groups
from msprof_lsp.mapping.profile.step_windows import merge_intervals, step_ids


class TaskClass(enum.IntEnum):
    """What a device task does with its time."""

    COMPUTE = 0  # a kernel: AI Core / Vector / MIX / AI CPU / DSA, a CUDA kernel
    MEMCPY = 1  # a memory copy or set (MEMCPY_ASYNC, Kineto Memcpy/Memset)
    COMMUNICATION = 2  # a collective or its transfer tasks (hcom_*, HCCL/COMMUNICATION core, SDMA, NCCL)
    WAIT = 3  # waiting / synchronisation (EVENT_WAIT, EVENT_RECORD, Notify Wait, Write Value)
    OTHER = 4  # profiler markers, placeholders

    @property
    def label(self) -> str:
        return self.name.lower()


COMM_CORES = frozenset({"HCCL", "COMMUNICATION"})
COMPUTE_CORES = frozenset(
    {"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "DSA_SQE", "GPU", "KERNEL_AICORE",
     "KERNEL_AIVEC", "KERNEL_AICPU", "KERNEL_MIX_AIC", "KERNEL_MIX_AIV", "FFTS_PLUS", "STARS_COMMON", "MTIA"}
)
COPY_CORES = frozenset({"MEMCPY", "MEMSET", "MEMCPY_ASYNC", "MEMSET_ASYNC", "PCIE_DMA_SQE", "SDMA_SQE"})
COPY_NAMES = re.compile(r"^(MEMCPY_ASYNC|MEMSET_ASYNC|Memcpy\b|Memset\b|memcpy|memset)")
HCCL_AICPU_SUFFIX = "AicpuKernel"  # HCCL's collectives run as AI CPU tasks (core AI_CPU)
COMM_TASK_NAMES = frozenset({"SDMA", "RDMA", "Reduce_Inline", "Reduce_TBE"})  # HCCL link transfer tasks
WAIT_NAMES = re.compile(
    r"^(EVENT_WAIT|EVENT_RECORD|Notify[ _]Wait|Notify[ _]Record|NOTIFY_\w+|Write Value|STREAM_WAIT\w*|"
    r"cudaStreamWaitEvent|cudaEventSynchronize)"
)
OTHER_NAMES = re.compile(r"^(PROFILING_ENABLE|PROFILING_DISABLE|PLACE_HOLDER\w*|MODEL_\w+|Step Trace)")
NCCL = re.compile(r"nccl", re.IGNORECASE)  # ncclKernel_*, ncclDevKernel_* (Kineto names them so)
_RUNTIME_TASK = re.compile(r"^[A-Z][A-Z0-9_]*$")  # an untyped, all-caps runtime task name


def classify(name: str, core: str = "", op_type: str = "") -> TaskClass:
    """The class of one device task from its name, accelerator core / task type and op type."""
    if (core in COMM_CORES or op_type.startswith("hcom_") or name.startswith("hcom_") or NCCL.search(name)
            or name.endswith(HCCL_AICPU_SUFFIX)):
        return TaskClass.COMMUNICATION
    if name in COMM_TASK_NAMES or core in COMM_TASK_NAMES:
        return TaskClass.COMMUNICATION
    if WAIT_NAMES.match(name) or WAIT_NAMES.match(core):
        return TaskClass.WAIT
    if core in COPY_CORES or COPY_NAMES.match(name):
        return TaskClass.MEMCPY
    if core in COMPUTE_CORES:
        return TaskClass.COMPUTE
    if OTHER_NAMES.match(name) or OTHER_NAMES.match(core):
        return TaskClass.OTHER
    if not core and not op_type and _RUNTIME_TASK.match(name):
        return TaskClass.OTHER  # a runtime task type we do not know: never counted as compute
    return TaskClass.COMPUTE


def task_classes(kernels: pd.DataFrame) -> np.ndarray:
    """``classify`` per kernel row (int8 codes of TaskClass), once per distinct (name, core, type)."""
    return _per_distinct(kernels, ("name", "core", "type"), classify, np.int8)


def _per_distinct(kernels: pd.DataFrame, columns: tuple[str, ...], fn: Callable[..., Any], dtype: Any) -> np.ndarray:
    """``fn(*values)`` per row, called once per distinct combination of the columns' values. The
    rules ask this of the same table dozens of times a run: where every combination of the
    columns' codes fits a table no larger than the rows, the combinations present are found with
    one bincount over their mixed-radix key (no hashing); else by ``distinct_rows``."""
    n = len(kernels)
    if not n:
        return np.zeros(0, dtype=dtype)
    cols = [column_codes(kernels[c]) for c in columns]
    span = int(np.prod([len(names) for _, names in cols], dtype=np.float64))
    if span > max(n, 1 << 16):
        groups, keys = distinct_rows([kernels[c] for c in columns])
        return np.array([fn(*key) for key in keys], dtype=dtype)[groups]
    key = np.zeros(n, dtype=np.int64)
    for codes, names in cols:
        key = key * len(names) + codes
    table = np.empty(span, dtype=dtype)
    for present in np.flatnonzero(np.bincount(key, minlength=span)).tolist():
        values, rest = [], present
        for _, names in reversed(cols):  # the key's digits, last column first
            rest, code = divmod(rest, len(names))
            values.append(names[code])
        table[present] = fn(*reversed(values))
    return table[key]


def distinct_rows(keys: Sequence[pd.Series | np.ndarray]) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """Rows grouped by equal keys, as ``pd.factorize(pd.MultiIndex.from_arrays(keys))`` groups them
    but without its tuple per row (several times its cost; ``linking.row_groups`` pairs integer
    codes): (per row its group, numbered in order of first appearance; per group its keys). A text
    column (a Series) is grouped by its codes and gives its names (``column_codes``: a missing value
    is ""); an array is grouped by, and gives, its values."""
    cols = [column_codes(k) if isinstance(k, pd.Series) else (np.asarray(k), None) for k in keys]
    n = len(cols[0][0]) if cols else 0
    if not n:
        return np.zeros(0, np.int64), []
    groups = row_groups([codes for codes, _ in cols])
    first = np.empty(int(groups.max()) + 1, dtype=np.int64)
    first[groups[::-1]] = np.arange(n - 1, -1, -1)  # the first row of each group
    picked = [codes[first].tolist() if names is None else [names[i] for i in codes[first].tolist()]
              for codes, names in cols]
    return groups, list(zip(*picked))


_TRANS_NAME = re.compile(r"^trans_(?P<type>[A-Za-z][A-Za-z0-9]*)_\d+$")
_HCOM_NAME = re.compile(r"^(?P<type>hcom_[A-Za-z]+_)_\d")  # hcom_allReduce__586_0_1 -> hcom_allReduce_
_ACLNN_NAME = re.compile(r"^aclnn[A-Za-z0-9]+_[A-Za-z0-9]+_(?P<type>[A-Za-z][A-Za-z0-9]*)(?:_[a-z]\w*)?$")
_ACL_OP_NAME = re.compile(r"^(?P<type>[A-Za-z][A-Za-z0-9]*?)(?:\d+)(?:/.*)?$")
_TRAILING_NUMBER = re.compile(r"\d+$")
_NO_TYPE = frozenset({"", "N/A", "NULL"})


def op_type(name: str, type_: str = "") -> str:
    """The OpType of a device task: the ``Type`` column when the producer wrote one, else read
    from the name (trace_view.json has no type; docs/numbers.md "OpType"):
    ``aclnnMm_TransData_TransData`` -> TransData, ``trans_TransData_3`` -> TransData,
    ``Conv2D17`` -> Conv2D, ``StatelessDropOutGenMask23/DSA...`` -> StatelessDropOutGenMask."""
    if type_ not in _NO_TYPE:
        return type_
    if name.startswith("atomic_memset") or name.rsplit("_", 1)[-1] == "MemSet":
        return "MemSet"  # atomic_memset-1_146_..., trans_TransData_27_MemSet, aclnnMm_MatMulCommon_MemSet
    m = _TRANS_NAME.match(name) or _HCOM_NAME.match(name) or _ACLNN_NAME.match(name) or _ACL_OP_NAME.match(name)
    if m:
        return m.group("type")
    return _TRAILING_NUMBER.sub("", name)


def op_types(kernels: pd.DataFrame) -> np.ndarray:
    """``op_type`` per kernel row (an object array), once per distinct (name, type)."""
    return _per_distinct(kernels, ("name", "type"), op_type, object)


class KernelClass(str, enum.Enum):
    """Which unit a compute kernel runs on, as the advisor's AI Core checks group them (its
    cube / FA / vector operator lists; docs/numbers.md "Kernel classes")."""

    CUBE = "Cube"  # a MatMul on the cube core (AI_CORE, or MIX_AIC for an unaligned inner axis)
    VECTOR = "Vector"  # AI_VECTOR_CORE and MIX_AIV kernels
    MIX = "MIX"  # other MIX_AIC kernels: cube-led, with vector sub-tasks
    FLASH_ATTENTION = "FlashAttention"  # FlashAttentionScore / FlashAttentionScoreGrad
    OTHER = "other"  # AI CPU, DSA, other AI_CORE kernels (Conv2D, ...), everything not compute


_FLASH_TYPES = re.compile(r"^FlashAttention(VarLen)?Score(Grad)?$")
_MATMUL_TYPE = re.compile(r"matmul", re.I)


def kernel_class(core: str, op_type_: str) -> KernelClass:
    """The class of one compute kernel from its accelerator core and OpType."""
    if _FLASH_TYPES.match(op_type_):
        return KernelClass.FLASH_ATTENTION
    if core in ("AI_CORE", "KERNEL_AICORE", "MIX_AIC", "KERNEL_MIX_AIC") and _MATMUL_TYPE.search(op_type_):
        return KernelClass.CUBE
    if core in ("AI_VECTOR_CORE", "KERNEL_AIVEC", "MIX_AIV", "KERNEL_MIX_AIV"):
        return KernelClass.VECTOR
    if core in ("MIX_AIC", "KERNEL_MIX_AIC"):
        return KernelClass.MIX
    return KernelClass.OTHER


def kernel_classes(kernels: pd.DataFrame) -> list[KernelClass]:
    """``kernel_class`` per row (non-compute tasks are OTHER), once per distinct (name, core, type). A
    list: numpy turns a str-valued enum into its ``str()``."""
    member = {c.value: c for c in KernelClass}
    return [member[v] for v in kernel_class_values(kernels).tolist()]


def kernel_class_values(kernels: pd.DataFrame) -> np.ndarray:
    """:func:`kernel_classes` as their values ("Cube", "Vector", ...) in an object array, with no
    Python step per row (a class per distinct (name, core, type), then one ``where``)."""
    if not len(kernels):
        return np.zeros(0, dtype=object)
    table = _per_distinct(kernels, ("name", "core", "type"), lambda n, c, t: kernel_class(c, op_type(n, t)).value, object)
    return np.where(is_class(kernels, TaskClass.COMPUTE), table, KernelClass.OTHER.value).astype(object)


def column_codes(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes and their names for a string or categorical column; a missing value is the
    name "" (never code -1, which would index the last name)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = [str(c) for c in col.cat.categories] + [""]
        codes = col.cat.codes.to_numpy().astype(np.int64)
        return np.where(codes < 0, cats.index(""), codes), cats  # a "" category too: one code for both
    codes, uniques = pd.factorize(np.asarray(col.astype(str), dtype=object))
    return codes.astype(np.int64), [str(u) for u in uniques]


def collective_mask(kernels: pd.DataFrame) -> np.ndarray:
    """Communication ops themselves (``hcom_*``, HCCL/COMMUNICATION core, NCCL kernels), without
    the transfer tasks (SDMA, ...) they run on their streams."""
    comm = is_class(kernels, TaskClass.COMMUNICATION)
    if not comm.any():
        return comm
    names = kernels["name"].astype(str).to_numpy()
    cores = kernels["core"].astype(str).to_numpy()
    return comm & ~np.isin(names, list(COMM_TASK_NAMES)) & ~np.isin(cores, list(COMM_TASK_NAMES))


def is_class(kernels: pd.DataFrame, *wanted: TaskClass) -> np.ndarray:
    return np.isin(task_classes(kernels), np.array([int(w) for w in wanted], dtype=np.int8))


def work_mask(kernels: pd.DataFrame) -> np.ndarray:
    """Tasks that do work a source line asked for: compute kernels and memory copies."""
    return is_class(kernels, TaskClass.COMPUTE, TaskClass.MEMCPY)


# ---------------------------------------------------------------------------------------------
# Interval arithmetic (ns, half-open [start, end)); the union itself is step_windows.merge_intervals


def union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    s, e = merge_intervals(starts, ends)
    return int((e - s).sum())


def overlap_ns(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> int:
    """Length of the intersection of two unions of disjoint sorted intervals."""
    if not len(a_s) or not len(b_s):
        return 0
    pts = np.concatenate([a_s, a_e, b_s, b_e])
    delta_a = np.concatenate([np.ones(len(a_s)), -np.ones(len(a_e)), np.zeros(len(b_s) + len(b_e))])
    delta_b = np.concatenate([np.zeros(len(a_s) + len(a_e)), np.ones(len(b_s)), -np.ones(len(b_e))])
    order = np.argsort(pts, kind="stable")
    pts, da, db = pts[order], np.cumsum(delta_a[order]), np.cumsum(delta_b[order])
    both = (da[:-1] > 0) & (db[:-1] > 0)
    return int(np.sum(np.diff(pts)[both]))


def exclusive_ns(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> int:
    """Time covered by some interval of A and by no interval of B (any intervals, not merged)."""
    ms, me = merge_intervals(a_s, a_e)
    ns_, ne = merge_intervals(b_s, b_e)
    return int((me - ms).sum()) - overlap_ns(ms, me, ns_, ne)


# ---------------------------------------------------------------------------------------------
# The per-step breakdown


@dataclass(frozen=True, slots=True)
class StepTasks:
    """The tasks of the profiled steps as the breakdown counts them: one interval per row (a task
    split at a step window's edge is two rows), its step, class and device."""

    start: np.ndarray
    end: np.ndarray
    step: np.ndarray
    cls: np.ndarray
    device: np.ndarray


def step_tasks(
    kernels: pd.DataFrame,
    steps: Sequence[Step] = (),
    classes: np.ndarray | None = None,
    launch_ns: np.ndarray | None = None,
) -> StepTasks:
    """Each task's step and interval, windows made disjoint (``_disjoint_windows``).

    A task's step is its ``step`` column; tasks without one (-1) take the ProfilerStep window around
    ``launch_ns`` (per task: its launching op's start -- device work runs behind the host -- by
    default its own start); a reader's STEP_LAUNCHED_OUTSIDE stays outside every step; with no
    steps at all the whole capture is one step (-1).
    """
    cls = task_classes(kernels) if classes is None else classes
    start = kernels["start_ns"].to_numpy(np.int64)
    end = start + np.maximum(kernels["dur_ns"].to_numpy(np.int64), 0)
    step = kernels["step"].to_numpy(np.int64).copy()
    device = kernels["device"].to_numpy(np.int64)
    unknown = step == -1
    if steps and unknown.any():
        when = start if launch_ns is None else np.asarray(launch_ns, dtype=np.int64)
        step[unknown] = step_ids(when[unknown], list(steps))
    if (step >= 0).any():
        keep = step >= 0
        start, end, step, cls, device = start[keep], end[keep], step[keep], cls[keep], device[keep]
    else:
        step[:] = -1  # no steps: the whole capture is one
    return StepTasks(*_disjoint_windows(start, end, step, device, cls))


def compute_breakdown(
    kernels: pd.DataFrame,
    steps: Sequence[Step] = (),
    classes: np.ndarray | None = None,
    launch_ns: np.ndarray | None = None,
) -> list[StepTimes]:
    """Per (step, device) breakdown from the classified tasks (any producer, Kineto included),
    each task in its step as ``step_tasks`` files it."""
    if not len(kernels):
        return []
    t = step_tasks(kernels, steps, classes, launch_ns)
    host = {s.id: s for s in steps}
    out: list[StepTimes] = []
    frame = pd.DataFrame({"step": t.step, "device": t.device})
    for (sid, dev), rows in frame.groupby(["step", "device"], sort=True).indices.items():
        out.append(_one_step(int(sid), int(dev), t.start[rows], t.end[rows], t.cls[rows], host.get(int(sid))))
    return out


def device_windows(profile: Profile) -> list[tuple[int, int, int, int]]:
    """(step, device, first start, last end) of each step's compute and communication tasks, as
    the breakdown counts them: the step's window on the device (disjoint per device)."""
    if not len(profile.kernels):
        return []
    t = step_tasks(profile.kernels, profile.steps, launch_ns=launch_times(profile))
    staged = (t.cls == TaskClass.COMPUTE) | (t.cls == TaskClass.COMMUNICATION)
    frame = pd.DataFrame({"step": t.step[staged], "device": t.device[staged], "start": t.start[staged],
                          "end": t.end[staged]})
    spans = frame.groupby(["step", "device"], sort=True).agg(start=("start", "min"), end=("end", "max"))
    return [(int(s), int(d), int(a), int(b)) for (s, d), a, b in zip(spans.index, spans["start"], spans["end"])]


def _disjoint_windows(start: np.ndarray, end: np.ndarray, step: np.ndarray, device: np.ndarray,
                      cls: np.ndarray) -> tuple[np.ndarray, ...]:
    """The tasks as intervals per step such that on each device a step's window (first to last
    compute or communication task) opens where the earlier steps' close -- the Kineto profiler's
    own step view: a step lasts until the last task it launched ends, the next starts after.
    A task launched in step k that starts inside step k-1's window (beside its tail, on another
    stream) is split there: the part before counts in step k-1, whose window holds that time,
    the rest in step k. Nothing is counted twice or lost. Returns (start, end, step, cls, device)."""
    if not len(start):
        return start, end, step, cls, device
    lowest = np.iinfo(np.int64).min
    staged = (cls == TaskClass.COMPUTE) | (cls == TaskClass.COMMUNICATION)
    groups = pd.DataFrame({"device": device, "step": step, "end": np.where(staged, end, lowest)})
    last = groups.groupby(["device", "step"], sort=True)["end"].max()  # step ids run in time order
    by_device = last.groupby(level="device")
    # per (device, step): the latest end of the device's earlier steps, and the step before it
    before = by_device.transform(lambda e: e.cummax().shift(1, fill_value=lowest))
    previous = pd.Series(last.index.get_level_values("step"), index=last.index).groupby(level="device").shift(
        1, fill_value=-1)
    at = pd.MultiIndex.from_arrays([device, step])
    floor = before.reindex(at).to_numpy(np.int64)
    cut = (start < floor) & staged
    if not cut.any():
        return start, end, step, cls, device
    head = (start[cut], np.minimum(end[cut], floor[cut]), previous.reindex(at).to_numpy(np.int64)[cut], cls[cut],
            device[cut])
    floor = np.where(staged, floor, lowest)
    tail = (np.maximum(start, floor), np.maximum(end, floor), step, cls, device)
    return tuple(np.concatenate([t, h]) for t, h in zip(tail, head))


def _one_step(sid: int, dev: int, start: np.ndarray, end: np.ndarray, cls: np.ndarray,
              host: Step | None) -> StepTimes:
    comp = cls == TaskClass.COMPUTE
    comm = cls == TaskClass.COMMUNICATION
    copy = cls == TaskClass.MEMCPY
    cs, ce = merge_intervals(start[comp], end[comp])
    ms, me = merge_intervals(start[comm], end[comm])
    computing = int((ce - cs).sum())
    communication = int((me - ms).sum())
    overlapped = overlap_ns(cs, ce, ms, me)
    staged = comp | comm
    if staged.any():
        stage = int(end[staged].max() - start[staged].min())
        first = int(start[staged].min())
    else:
        stage, first = 0, -1
    not_ov = communication - overlapped
    return StepTimes(
        step=sid,
        device=dev,
        computing_ns=computing,
        communication_ns=communication,
        overlapped_ns=overlapped,
        comm_not_overlapped_ns=not_ov,
        free_ns=max(stage - computing - not_ov, 0),
        stage_ns=stage,
        memcpy_ns=union_ns(start[copy], end[copy]),
        host_wall_ns=host.dur_ns if host is not None else -1,
        preparing_ns=(first - host.start_ns) if host is not None and first >= 0 else -1,
    )


def launch_times(profile: Profile) -> np.ndarray:
    """Per kernel: the start of the host op that launched it, else the kernel's own start."""
    k = profile.kernels
    start = k["start_ns"].to_numpy(np.int64)
    op = k["host_op"].to_numpy(np.int64)
    h_start = profile.host_ops["start_ns"].to_numpy(np.int64)
    ok = (op >= 0) & (op < len(h_start))
    out = start.copy()
    out[ok] = h_start[op[ok]]
    out[ok & (out < 0)] = start[ok & (out < 0)]  # ops without timestamps (operator_details.csv)
    return out


def _from_written(rows: list[StepBreakdown], computed: dict[int, StepTimes], host: dict[int, Step]) -> list[StepTimes]:
    out = []
    for b in rows:
        c = computed.get(b.step)
        h = host.get(b.step)
        stage = b.computing_ns + b.comm_not_overlapped_ns + b.free_ns
        out.append(
            StepTimes(
                step=b.step,
                device=b.device,
                computing_ns=b.computing_ns,
                communication_ns=b.comm_ns,
                overlapped_ns=b.overlapped_ns,
                comm_not_overlapped_ns=b.comm_not_overlapped_ns,
                free_ns=b.free_ns,
                stage_ns=stage,
                memcpy_ns=c.memcpy_ns if c is not None else -1,
                host_wall_ns=h.dur_ns if h is not None else -1,
                preparing_ns=b.preparing_ns if b.preparing_ns >= 0 else (c.preparing_ns if c is not None else -1),
            )
        )
    return out


def _slowest_per_step(rows: list[StepTimes]) -> list[StepTimes]:
    """Several devices in one profile: a step lasts as long as its slowest device."""
    best: dict[int, StepTimes] = {}
    for r in rows:
        if r.step not in best or r.stage_ns > best[r.step].stage_ns:
            best[r.step] = r
    return [best[s] for s in sorted(best)]


def profile_breakdown(profile: Profile) -> TimeBreakdown:
    """The profile's breakdown: the producer's own figures where it wrote them, else computed.

    Computed once per profile: the rules and the report all ask for it, and a profile read from
    the cache brings the one its first load computed (``Profile.derived``).
    """
    memo = profile.derived
    if memo.breakdown is None or not memo.holds(profile):
        memo.keep(profile, _profile_breakdown(profile))
    assert memo.breakdown is not None
    return memo.breakdown


def _profile_breakdown(profile: Profile) -> TimeBreakdown:
    host = {s.id: s for s in profile.steps}
    k = profile.kernels_in_steps()
    streams = device_streams(k, work_mask(k)) if len(k) else 1
    computed = _slowest_per_step(compute_breakdown(profile.kernels, profile.steps, launch_ns=launch_times(profile)))
    by_step = {c.step: c for c in computed}
    rows = [b for b in profile.step_breakdown if b.step_time_ns > 0]
    written = [b for b in rows if not b.derived]
    if written:
        # The readers build on this module: the registry is reached when a breakdown is asked for.
        from msprof_lsp.mapping.profile.readers.registry import reader_for

        source = reader_for(profile.meta.kind, profile.meta.path).breakdown_source
        return TimeBreakdown(source, _slowest_per_step(_from_written(written, by_step, host)), streams)
    if rows:
        return TimeBreakdown(BreakdownSource.OVERLAP_ANALYSIS, _slowest_per_step(_from_written(rows, by_step, host)),
                             streams)
    if computed:
        return TimeBreakdown(BreakdownSource.TASKS, computed, streams)
    return TimeBreakdown(BreakdownSource.NONE, [], streams)


def device_time_per_step_ns(profile: Profile) -> float:
    """Device work time per step: compute kernels and memory copies inside the profiled steps,
    the union of their intervals per (device, stream) lane (summed where the stream is unknown),
    summed over the lanes, divided by the number of steps (the ``device_time_us`` of the JSON
    profile). One stream runs one task at a time: where a trace's µs rounding makes neighbours
    overlap (a 2021 Kineto trace: 57 µs over a step) the overlap counts once, so one stream's work
    never exceeds its span."""
    k = profile.kernels_in_steps()
    if not len(k):
        return 0.0
    work = work_mask(k)
    dur = np.maximum(k["dur_ns"].to_numpy(np.int64)[work], 0)
    start = k["start_ns"].to_numpy(np.int64)[work]
    stream = k["stream"].to_numpy(np.int64)[work]
    known = stream >= 0  # tasks of an unknown stream: no lane to merge them in, summed
    total = int(dur[~known].sum())
    lanes = row_groups([k["device"].to_numpy(np.int64)[work][known], stream[known]]) if known.any() else []
    order = np.argsort(lanes, kind="stable")
    cuts = np.flatnonzero(np.diff(np.asarray(lanes)[order])) + 1
    s, e = start[known], start[known] + dur[known]
    total += sum(union_ns(s[rows], e[rows]) for rows in np.split(order, cuts)) if len(order) else 0
    return float(total) / max(profile.num_steps, 1)


def device_streams(kernels: pd.DataFrame, mask: np.ndarray) -> int:
    """How many distinct (device, stream) lanes the selected tasks ran on (at least 1)."""
    if not mask.any():
        return 1
    pairs = pd.DataFrame({"d": kernels["device"].to_numpy()[mask], "s": kernels["stream"].to_numpy()[mask]})
    return max(len(pairs.drop_duplicates()), 1)


__all__ = [
    "BreakdownSource",
    "StepTimes",
    "TaskClass",
    "TimeBreakdown",
    "classify",
    "collective_mask",
    "compute_breakdown",
    "device_streams",
    "device_windows",
    "device_time_per_step_ns",
    "exclusive_ns",
    "is_class",
    "launch_times",
    "merge_intervals",
    "overlap_ns",
    "profile_breakdown",
    "task_classes",
    "union_ns",
    "work_mask",
]
