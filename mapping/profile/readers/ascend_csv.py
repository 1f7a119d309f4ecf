"""Readers for the Ascend profilers' CSV outputs.

torch_npu's ``ASCEND_PROFILER_OUTPUT/*.csv`` and the msprof CLI's
``mindstudio_profiler_output/<name>_<ts>.csv`` share most layouts (torch_npu renames a few
headers). Every reader accepts the header variants of the reference, matched by folded header
text (case, spaces and underscores ignored), and returns model tables/records in ns and bytes.

Error policy (the same for every reader):
* unreadable, empty, binary file, a required column missing, text that cannot be tokenised
  -> ProfileError naming the file (and the line where one applies);
* header only -> an empty result, no error;
* a row whose required cell (e.g. a kernel's start or duration) is missing or unparseable ->
  row skipped with an Issue naming the line; any other unparseable cell -> left at its default
  (-1, "" or NaN) with an Issue; at most five Issues per column, then one summary;
* a last row cut off mid-way -> Issue "file ends mid-row at line N", complete rows kept;
* a row with more fields than the header -> skipped with an Issue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from msprof_lsp.mapping.errors import Issue
from msprof_lsp.mapping.numbers import int64_of, shown
from msprof_lsp.mapping.profile.frames import StackTable
from msprof_lsp.mapping.profile.model import (
    HOST_OP_SCHEMA,
    KERNEL_SCHEMA,
    MEMORY_RECORD_SCHEMA,
    OP_MEMORY_SCHEMA,
    OpStatistic,
    Step,
    StepBreakdown,
    make_table,
)
from msprof_lsp.mapping.profile.readers.csv_columns import Col, Columns, read_columns
from msprof_lsp.mapping.profile.readers.csv_text import header_key, open_csv

PMU_PREFIX = "pmu:"

R = TypeVar("R")


def _sizes(base: str) -> tuple[str, ...]:
    """Header spellings of a size column in any unit the producers use."""
    return tuple(f"{base}({u})" for u in ("MB", "KB", "B", "GB"))


# ---------------------------------------------------------------------------------------------
# kernel_details.csv / op_summary_*.csv


def _kernel_cols(producer: str) -> list[Col]:
    msprof = producer == "msprof"

    def names(torch_npu: str, cann: str) -> tuple[str, ...]:
        # Both spellings are accepted; the producer's own comes first (used in messages).
        return (cann, torch_npu) if msprof else (torch_npu, cann)

    return [
        Col("step", ("Step Id", "Step ID"), "int"),
        Col("device", ("Device_id", "Device ID"), "int"),
        Col("task_id", ("Task ID",), "int"),
        Col("stream", ("Stream ID",), "int"),
        Col("name", names("Name", "Op Name"), "text", required=True),
        Col("type", names("Type", "OP Type"), "text", required=True),
        Col("op_state", ("OP State",), "text"),
        Col("core", names("Accelerator Core", "Task Type"), "text"),
        Col("start_ns", names("Start Time(us)", "Task Start Time(us)"), "time", required=True),
        Col("dur_ns", names("Duration(us)", "Task Duration(us)"), "dur", required=True),
        Col("wait_ns", names("Wait Time(us)", "Task Wait Time(us)"), "dur"),
        Col("block_dim", ("Block Num", "Block Dim"), "int"),
        Col("input_shapes", ("Input Shapes",), "shape"),
        Col("input_dtypes", ("Input Data Types",), "text"),
        Col("input_formats", ("Input Formats",), "text"),
        Col("output_shapes", ("Output Shapes",), "shape"),
        Col("output_dtypes", ("Output Data Types",), "text"),
        Col("output_formats", ("Output Formats",), "text"),
        Col("hf32_eligible", ("HF32 Eligible",), "text"),
    ]


# Columns that are neither in the schema nor worth a float column.
_KERNEL_IGNORE = ("Model ID", "Context ID", "Subtask Id", "Batch Id")
# Aliased extra columns: one pmu: name whatever the spelling.
_KERNEL_EXTRA_ALIASES = {
    header_key("Mix Block Dim"): "Mix Block Num",
    header_key("Mix Block Num"): "Mix Block Num",
    header_key("cube_utilization( %)"): "cube_utilization(%)",
}


@dataclass(slots=True)
class KernelTable:
    """Device tasks of one kernel_details.csv / op_summary_*.csv, as columns.

    ``columns`` maps KERNEL_SCHEMA names (and ``pmu:<header>`` float columns) to numpy arrays or
    pandas Categoricals of ``length`` rows, in file order; the link columns are left out (their
    defaults apply). ``header`` is the file's header row.
    """

    columns: dict[str, Any]
    length: int
    header: list[str]
    issues: list[Issue] = field(default_factory=list)

    def to_frame(self) -> pd.DataFrame:
        return make_table(KERNEL_SCHEMA, self.columns, self.length)


def read_kernel_table(path: Path, *, producer: str = "torch_npu") -> KernelTable:
    """Read kernel_details.csv (``producer="torch_npu"``) or op_summary_*.csv (``"msprof"``).

    Both producers' header spellings are accepted either way; ``producer`` picks the names used
    in error messages. Every header variant is handled (leading Step Id, with/without
    Device_id, Level0 short form, Block Num/Dim aliases, any PMU metric set).
    """
    if producer not in ("torch_npu", "msprof"):
        raise ValueError(f"unknown producer {producer!r}")
    source = open_csv(Path(path))
    cols = read_columns(
        source,
        _kernel_cols(producer),
        extras=True,
        ignore=_KERNEL_IGNORE,
        alias_extras=_KERNEL_EXTRA_ALIASES,
    )
    columns: dict[str, Any] = dict(cols.data)
    for name, values in cols.extras.items():
        columns[PMU_PREFIX + name] = values
    return KernelTable(columns, cols.length, source.header, cols.issues)


# ---------------------------------------------------------------------------------------------
# operator_details.csv

_OPERATOR_COLS = [
    Col("name", ("Name",), "text", required=True),
    Col("input_dims", ("Input Shapes", "Input Dims"), "rawcat"),
    Col("stack", ("Call Stack",), "rawcat"),
    Col("dur_ns", ("Host Total Duration(us)",), "dur"),
    Col("device_self_ns", ("Device Self Duration(us)",), "dur"),
    Col("device_total_ns", ("Device Total Duration(us)",), "dur"),
]


def _join_lines(text: str) -> str:
    """``"1,3;\\r\\n64,3;\\r\\n"`` -> ``"1,3;64,3;"`` (torch_npu's multi-line cell joins)."""
    if "\n" not in text and "\r" not in text:
        return text.strip()
    return ";".join(p.strip() for p in text.replace("\r\n", "\n").split(";\n")).strip()


def read_operator_details(path: Path, stacks: StackTable) -> tuple[pd.DataFrame, list[Issue]]:
    """operator_details.csv -> HOST_OP_SCHEMA table (start_ns -1: this file has no timestamps).

    ``dur_ns`` = Host Total Duration; ``stack`` = id in ``stacks`` (interned once per distinct
    Call Stack text); ``input_dims`` with the ``;\\r\\n`` joins normalised to ``;``. A leading
    Device_id and extra or missing optional columns are tolerated.
    """
    source = open_csv(Path(path))
    cols = read_columns(source, _OPERATOR_COLS, extras=False)
    data = cols.data
    columns: dict[str, Any] = {"name": data["name"]}
    if "input_dims" in data:
        columns["input_dims"] = _per_category(data["input_dims"], _join_lines, object)
    if "stack" in data:
        columns["stack"] = _per_category(data["stack"], stacks.intern_text, np.int64)
    if "dur_ns" in data:
        dur = data["dur_ns"]
        columns["dur_ns"] = np.where(dur < 0, 0, dur)  # schema default: no duration = 0
    for key in ("device_self_ns", "device_total_ns"):
        if key in data:
            columns[key] = data[key]
    return make_table(HOST_OP_SCHEMA, columns, cols.length), cols.issues


def _per_category(values: pd.Categorical, fn: Any, dtype: Any) -> np.ndarray:
    """Apply ``fn`` once per distinct value and spread the results over the rows."""
    cats = list(values.categories)
    mapped = np.empty(len(cats) + 1, dtype=dtype)
    for i, c in enumerate(cats):
        mapped[i] = fn(c)
    mapped[-1] = fn("")  # code -1
    return mapped[values.codes]


# ---------------------------------------------------------------------------------------------
# op_statistic.csv / op_statistic_*.csv

# The per-type totals op_statistic and communication_statistic share (after their type columns).
_STAT_TOTAL_COLS = [
    Col("count", ("Count",), "int", sentinels=False),
    Col("total_ns", ("Total Time(us)",), "dur", required=True),
    Col("min_ns", ("Min Time(us)",), "dur"),
    Col("avg_ns", ("Avg Time(us)",), "dur"),
    Col("max_ns", ("Max Time(us)",), "dur"),
    Col("ratio", ("Ratio(%)",), "float"),
]

_OP_STAT_COLS = [
    Col("device", ("Device_id",), "int"),
    Col("op_type", ("OP Type", "Op Type", "Type"), "text", required=True),
    Col("core", ("Core Type", "Task Type", "Accelerator Core"), "text"),
    *_STAT_TOTAL_COLS,
]


def read_op_statistic(path: Path) -> tuple[list[OpStatistic], list[Issue]]:
    """op_statistic.csv / op_statistic_*.csv -> one OpStatistic per row (µs -> ns)."""
    cols = read_columns(open_csv(Path(path)), _OP_STAT_COLS)
    return _records(OpStatistic, cols, _OP_STAT_COLS), cols.issues


def _defaults(cols: Columns, spec: Sequence[Col]) -> dict[str, Any]:
    """The parsed columns plus defaults for the optional ones the file lacks, as plain lists."""
    out: dict[str, Any] = {}
    for col in spec:
        values = cols.data.get(col.key)
        if values is None:
            default: Any = {"text": "", "shape": "", "rawcat": "", "raw": "", "float": np.nan}
            out[col.key] = [default.get(col.kind, -1)] * cols.length
        elif isinstance(values, pd.Categorical):
            out[col.key] = np.asarray(values, dtype=object).tolist()
        else:
            out[col.key] = values.tolist()
    return out


_CONVERT = {"int": int, "str": str, "float": float}


def _records(cls: type[R], cols: Columns, spec: Sequence[Col]) -> list[R]:
    """One ``cls`` per row: each dataclass field from the column of the same key (defaults
    filled in), converted to the field's annotated type. The statistic and iteration readers
    share it so a new field is one ``Col`` and one annotation, not a third copy of the loop."""
    d = _defaults(cols, spec)
    convert = [(f.name, _CONVERT[f.type]) for f in fields(cls)]  # type: ignore[arg-type]
    return [cls(**{k: conv(d[k][i]) for k, conv in convert}) for i in range(cols.length)]


# ---------------------------------------------------------------------------------------------
# step_trace_time.csv and msprof-analyze's cluster_step_trace_time.csv

_STEP_TRACE_COLS = [
    Col("device", ("Device_id",), "int"),
    Col("step", ("Step",), "int"),
    Col("type", ("Type",), "text"),  # cluster file: rank | stage
    Col("index", ("Index",), "text"),  # cluster file: rank id, or the stage's rank tuple
    Col("computing_ns", ("Computing",), "dur", required=True),
    Col("comm_not_overlapped_ns", ("Communication(Not Overlapped)",), "dur", required=True),
    Col("overlapped_ns", ("Overlapped",), "dur"),
    Col("comm_ns", ("Communication",), "dur"),
    Col("free_ns", ("Free",), "dur", required=True),
    Col("stage_ns", ("Stage",), "dur"),
    Col("bubble_ns", ("Bubble",), "dur"),
    Col(
        "comm_not_overlapped_excl_receive_ns",
        ("Communication(Not Overlapped and Exclude Receive)",),
        "dur",
    ),
    Col("preparing_ns", ("Preparing",), "dur"),
]


def read_step_trace_time(path: Path) -> tuple[list[StepBreakdown], list[Issue]]:
    """step_trace_time.csv -> one StepBreakdown per row (µs -> ns; empty Step -> -1).

    Also reads msprof-analyze's cluster_step_trace_time.csv (``Step,Type,Index,...``): its
    ``rank`` rows are returned with ``device`` = Index (the rank); ``stage`` rows (aggregates over
    a rank tuple) are left out.
    """
    cols = read_columns(open_csv(Path(path)), _STEP_TRACE_COLS)
    d = _defaults(cols, _STEP_TRACE_COLS)
    issues = cols.issues
    cluster = cols.has("type") and cols.has("index")
    out: list[StepBreakdown] = []
    for i in range(cols.length):
        device = int(d["device"][i])
        if cluster:
            if d["type"][i] != "rank":
                continue
            index = str(d["index"][i])
            rank = int64_of(index)  # "²" or 30 digits: no rank, skipped like any other text
            if rank is None:
                issues.append(Issue(str(path), f"rank row with Index {shown(index)}; skipped", cols.line(i)))
                continue
            device = rank
        out.append(
            StepBreakdown(
                step=int(d["step"][i]),
                device=device,
                computing_ns=int(d["computing_ns"][i]),
                comm_not_overlapped_ns=int(d["comm_not_overlapped_ns"][i]),
                overlapped_ns=int(d["overlapped_ns"][i]),
                comm_ns=int(d["comm_ns"][i]),
                free_ns=int(d["free_ns"][i]),
                stage_ns=int(d["stage_ns"][i]),
                bubble_ns=int(d["bubble_ns"][i]),
                comm_not_overlapped_excl_receive_ns=int(d["comm_not_overlapped_excl_receive_ns"][i]),
                preparing_ns=int(d["preparing_ns"][i]),
            )
        )
    return out, issues


# ---------------------------------------------------------------------------------------------
# msprof step_trace_*.csv (graph mode)


@dataclass(frozen=True, slots=True)
class Iteration:
    """One graph-mode iteration of msprof's step_trace_*.csv; times in ns (-1 = absent)."""

    device: int
    iteration_id: int
    model_id: int
    fp_start_ns: int
    bp_end_ns: int
    iteration_end_ns: int
    iteration_time_ns: int
    fp_to_bp_ns: int
    iteration_refresh_ns: int
    data_aug_bound_ns: int
    reduce_start_ns: int = -1
    reduce_dur_ns: int = -1

    def to_step(self) -> Step:
        """The iteration as a model Step: it ends at Iteration End and lasts Iteration Time."""
        return Step(self.iteration_id, self.iteration_end_ns - self.iteration_time_ns,
                    self.iteration_end_ns)


_MSPROF_STEP_COLS = [
    Col("device", ("Device_id",), "int"),
    Col("iteration_id", ("Iteration ID",), "int", required=True),
    Col("fp_start_ns", ("FP Start(us)",), "time"),
    Col("bp_end_ns", ("BP End(us)",), "time"),
    Col("iteration_end_ns", ("Iteration End(us)",), "time", required=True),
    Col("iteration_time_ns", ("Iteration Time(us)",), "dur", required=True),
    Col("fp_to_bp_ns", ("FP to BP Time(us)",), "dur"),
    Col("iteration_refresh_ns", ("Iteration Refresh(us)",), "dur"),
    Col("data_aug_bound_ns", ("Data Aug Bound(us)",), "dur"),
    Col("model_id", ("Model ID",), "int", sentinels=False),
    Col("reduce_start_ns", ("Reduce Start(us)",), "time"),
    Col("reduce_dur_ns", ("Reduce Duration(us)",), "dur"),
]


def read_msprof_step_trace(path: Path) -> tuple[list[Iteration], list[Issue]]:
    """msprof step_trace_*.csv -> Iterations (``Iteration.to_step()`` gives model Steps).

    Only the first Reduce Start/Duration pair is kept when a file lists several.
    """
    cols = read_columns(open_csv(Path(path)), _MSPROF_STEP_COLS)
    return _records(Iteration, cols, _MSPROF_STEP_COLS), cols.issues


# ---------------------------------------------------------------------------------------------
# api_statistic.csv / api_statistic_*.csv

API_STATISTIC_COLUMNS = ("level", "api_name", "time_ns", "count", "avg_ns", "min_ns", "max_ns",
                         "variance", "device")

_API_STAT_COLS = [
    Col("device", ("Device_id",), "int", missing=frozenset({"host"})),
    Col("level", ("Level",), "text"),
    Col("api_name", ("API Name",), "text", required=True),
    Col("time_ns", ("Time(us)",), "dur", required=True),
    Col("count", ("Count",), "int", sentinels=False),
    Col("avg_ns", ("Avg(us)",), "dur"),
    Col("min_ns", ("Min(us)",), "dur"),
    Col("max_ns", ("Max(us)",), "dur"),
    Col("variance", ("Variance",), "float"),
]


def read_api_statistic(path: Path) -> tuple[pd.DataFrame, list[Issue]]:
    """api_statistic.csv -> DataFrame with API_STATISTIC_COLUMNS (times ns; device -1 = host)."""
    cols = read_columns(open_csv(Path(path)), _API_STAT_COLS)
    frame = pd.DataFrame({k: _column(cols, k, _API_STAT_COLS) for k in API_STATISTIC_COLUMNS})
    return frame, cols.issues


def _column(cols: Columns, key: str, spec: Sequence[Col]) -> Any:
    values = cols.data.get(key)
    if values is not None:
        return values
    kind = next(c.kind for c in spec if c.key == key)
    if kind in ("text", "shape", "rawcat"):
        return pd.Categorical([""] * cols.length)
    if kind == "float":
        return np.full(cols.length, np.nan)
    return np.full(cols.length, -1, dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# msprof communication_statistic_*.csv


@dataclass(frozen=True, slots=True)
class CommStatistic:
    """One row of communication_statistic_*.csv: per HCCL op type totals, in ns."""

    device: int
    op_type: str
    count: int
    total_ns: int
    min_ns: int
    avg_ns: int
    max_ns: int
    ratio: float  # percent, as written


_COMM_STAT_COLS = [
    Col("device", ("Device_id",), "int"),
    Col("op_type", ("OP Type",), "text", required=True),
    *_STAT_TOTAL_COLS,
]


def read_communication_statistic(path: Path) -> tuple[list[CommStatistic], list[Issue]]:
    cols = read_columns(open_csv(Path(path)), _COMM_STAT_COLS)
    return _records(CommStatistic, cols, _COMM_STAT_COLS), cols.issues


# ---------------------------------------------------------------------------------------------
# operator_memory.csv / memory_record.csv (msprof *_{ts}.csv in KB)

_OP_MEMORY_COLS = [
    Col("device", ("Device_id",), "int"),
    Col("name", ("Name", "Operator"), "text", required=True),
    Col("size_bytes", _sizes("Size"), "bytes"),
    Col("alloc_ns", ("Allocation Time(us)",), "time", required=True),
    Col("release_ns", ("Release Time(us)",), "time"),
    Col("active_release_ns", ("Active Release Time(us)",), "time"),
    Col("dur_ns", ("Duration(us)",), "dur"),
    Col("active_dur_ns", ("Active Duration(us)",), "dur"),
    Col("alloc_allocated_bytes", _sizes("Allocation Total Allocated"), "bytes"),
    Col("alloc_reserved_bytes", _sizes("Allocation Total Reserved"), "bytes"),
    Col("alloc_active_bytes", _sizes("Allocation Total Active"), "bytes"),
    Col("release_allocated_bytes", _sizes("Release Total Allocated"), "bytes"),
    Col("release_reserved_bytes", _sizes("Release Total Reserved"), "bytes"),
    Col("release_active_bytes", _sizes("Release Total Active"), "bytes"),
    Col("stream", ("Stream Ptr",), "text"),
    Col("device_type", ("Device Type", "Device"), "text"),
]

_MEMORY_RECORD_COLS = [
    Col("device", ("Device_id",), "int"),
    Col("component", ("Component",), "text", required=True),
    Col("ts_ns", ("Timestamp(us)",), "time", required=True),
    Col("allocated_bytes", _sizes("Total Allocated"), "bytes"),
    Col("reserved_bytes", _sizes("Total Reserved"), "bytes"),
    Col("active_bytes", _sizes("Total Active"), "bytes"),
    Col("stream", ("Stream Ptr",), "text"),
    Col("device_type", ("Device Type", "Device"), "text"),
]


def read_operator_memory(path: Path) -> tuple[pd.DataFrame, list[Issue]]:
    """operator_memory.csv -> OP_MEMORY_SCHEMA table (sizes in bytes from the header's unit)."""
    return _memory_table(Path(path), _OP_MEMORY_COLS, OP_MEMORY_SCHEMA)


def read_memory_record(path: Path) -> tuple[pd.DataFrame, list[Issue]]:
    """memory_record.csv / memory_record_*.csv -> MEMORY_RECORD_SCHEMA table."""
    return _memory_table(Path(path), _MEMORY_RECORD_COLS, MEMORY_RECORD_SCHEMA)


def _memory_table(path: Path, spec: list[Col], schema: dict) -> tuple[pd.DataFrame, list[Issue]]:
    cols = read_columns(open_csv(path), spec)
    columns = dict(cols.data)
    issues = cols.issues
    if "device" not in columns and "device_type" in columns:
        types = columns["device_type"]
        columns["device"] = _per_category(types, _device_of, np.int64)
        bad = [t for t in types.categories if _device_of(t) == _BAD_DEVICE]
        if bad:  # the rows stay (their sizes are good); only the device is unknown
            columns["device"] = np.where(columns["device"] == _BAD_DEVICE, -1, columns["device"])
            issues.append(Issue(str(path), f"Device Type {shown(bad[0])} is not an NPU index in int64 range"
                                           f"{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}; "
                                           "those rows have no device"))
    return make_table(schema, columns, cols.length), issues


_BAD_DEVICE = -2  # "NPU:" and a number out of range or not ASCII digits (reported, then -1)


def _device_of(device_type: str) -> int:
    """``"NPU:3"`` -> 3; CPU or anything else -> -1; "NPU:" with no usable index -> _BAD_DEVICE."""
    kind, _, index = device_type.partition(":")
    if kind.strip().upper() != "NPU" or not index.strip():
        return -1
    n = int64_of(index)
    return n if n is not None and n >= 0 else _BAD_DEVICE


__all__ = [
    "API_STATISTIC_COLUMNS",
    "CommStatistic",
    "Iteration",
    "KernelTable",
    "read_api_statistic",
    "read_communication_statistic",
    "read_kernel_table",
    "read_memory_record",
    "read_msprof_step_trace",
    "read_op_statistic",
    "read_operator_details",
    "read_operator_memory",
    "read_step_trace_time",
]
