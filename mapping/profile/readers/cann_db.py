"""The CANN tables of a profiler DB: device tasks, communication ops, CANN API calls.

torch_npu's DB export moves CANN's ``msprof_*.db`` tables into ``ascend_pytorch_profiler*.db`` and
the msprof CLI writes the same tables into ``PROF_*/msprof_*.db``, so both readers use this module.
Times are integer ns (``startNs``/``endNs``, TEXT in some builds: cast exactly in SQL); strings go
through ``STRING_IDS``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from msprof_lsp.mapping.errors import Issue
from msprof_lsp.mapping.profile.model import KERNEL_SCHEMA, OVERLAP_SCHEMA, CommOp, empty_table, make_table
from msprof_lsp.mapping.profile.overlap import COMMUNICATION, COMPUTING, FREE, NOT_OVERLAPPED
from msprof_lsp.mapping.profile.readers.sqlite_db import SqliteDb

CORE_BY_TASK_TYPE = {
    "KERNEL_AICORE": "AI_CORE",
    "KERNEL_AIVEC": "AI_VECTOR_CORE",
    "KERNEL_AICPU": "AI_CPU",
    "KERNEL_MIX_AIC": "MIX_AIC",
    "KERNEL_MIX_AIV": "MIX_AIV",
    "FFTS_PLUS": "MIX_AIC",
}
"""TASK.taskType → accelerator core, used only when COMPUTE_TASK_INFO.taskType is empty."""

COPY_TASK_TYPES = frozenset({"MEMCPY_ASYNC"})
"""Device tasks without compute info still kept as kernels (they move data: real device time).
Event record/wait and notify tasks are not: they would count waiting as busy time."""

CANN_LEVEL_BY_TYPE = {20000: "acl", 15000: "model", 10000: "node", 5500: "communication", 5000: "runtime"}
"""ENUM_API_TYPE ids of the CANN levels, used when the enum table is missing."""

CANN_PREFIX = {
    "acl": "AscendCL",
    "runtime": "Runtime",
    "node": "Node",
    "model": "Model",
    "communication": "Communication",
    "hccl": "Hccl",
}
"""Level → the ``<Level>@<api>`` event prefix the text export uses, so rules see one name."""

P2P_PREFIXES = ("hcom_send", "hcom_receive", "hcom_batchsendrecv")
_COMM_TYPE_RE = re.compile(r"^(?P<type>.+?)_(?:\d+_)*\d+$")

_INT = "int"
_ANY = "any"


@dataclass(slots=True)
class CannData:
    """What the CANN tables hold, before linking to framework ops."""

    kernels: pd.DataFrame  # KERNEL_SCHEMA (+ pmu:*) ; link columns at defaults
    kernel_connection: np.ndarray  # TASK/COMMUNICATION_OP connectionId per kernel row, -1 none
    host_events: dict[str, list | np.ndarray] = field(default_factory=dict)  # HOST_EVENT_SCHEMA columns
    comm_ops: list[CommOp] = field(default_factory=list)  # from COMMUNICATION_OP (durations only)
    issues: list[Issue] = field(default_factory=list)
    overlap: pd.DataFrame = field(default_factory=lambda: empty_table(OVERLAP_SCHEMA))  # OVERLAP_ANALYSIS


def comm_type(name: str) -> str:
    """``hcom_allReduce__428_0_1`` → ``hcom_allReduce_`` (the text export's ``Type``)."""
    m = _COMM_TYPE_RE.match(name)
    return m.group("type") if m else name


def api_type_names(db: SqliteDb) -> dict[int, str]:
    """ENUM_API_TYPE id → name (``op``, ``queue``, ``acl``, ...), with the ids as defaults."""
    names: dict[int, str] = {50001: "op", 50002: "queue", 50003: "trace", 50004: "mstx"}
    names.update(CANN_LEVEL_BY_TYPE)
    if db.has("ENUM_API_TYPE") and db.column("ENUM_API_TYPE", "id") and db.column("ENUM_API_TYPE", "name"):
        for i, n in db.query("SELECT id, name FROM ENUM_API_TYPE"):
            if isinstance(i, int) and isinstance(n, str):
                names[i] = n
    return names


@dataclass(frozen=True, slots=True)
class _KernelPart:
    """Kernel rows from one CANN table: KERNEL_SCHEMA columns (+ ``gtid``) and each row's connectionId."""

    columns: dict[str, np.ndarray]
    connection: np.ndarray


def read_cann(db: SqliteDb, *, device_hint: int = -1) -> CannData:
    """Device kernels (compute tasks, data copies, communication ops) sorted by start, with their
    connection ids, PMU columns and wait times; CANN API calls as host events."""
    issues: list[Issue] = []
    tasks = _read_tasks(db, issues)
    devices = tasks["device"][tasks["device"] >= 0] if len(tasks) else pd.Series(dtype="int64")
    default_device = int(devices.mode().iloc[0]) if len(devices) else device_hint

    parts: list[_KernelPart] = []
    compute, compute_ids = _compute_kernels(db, tasks, issues)
    if compute is not None:
        parts.append(compute)
    copies = _copy_kernels(db, tasks, compute_ids)
    if copies is not None:
        parts.append(copies)
    comm, comm_ops = _comm_kernels(db, default_device)
    if comm is not None:
        parts.append(comm)
    kernels, conn = _assemble_kernels(db, parts)
    return CannData(
        kernels=kernels,
        kernel_connection=conn,
        host_events=_read_cann_api(db),
        comm_ops=comm_ops,
        issues=issues,
        overlap=read_overlap(db),
    )


OVERLAP_LANES = {0: COMPUTING, 1: COMMUNICATION, 2: NOT_OVERLAPPED, 3: FREE}
"""OVERLAP_ANALYSIS.type -> lane: on the real torch_npu DB export (Ascend-msinsight db/level1 rank 0)
the four types' sums equal analysis.db StepTraceTime's Computing, Communication, Communication(Not
Overlapped) and Free to the ns."""


def read_overlap(db: SqliteDb) -> pd.DataFrame:
    """The producer's own Overlap Analysis (the DB form of trace_view.json's lanes): its Free is the
    device's idle as the producer counts it, so it wins over one recomputed from the tasks."""
    if not db.has("OVERLAP_ANALYSIS"):
        return empty_table(OVERLAP_SCHEMA)
    t = db.frame("OVERLAP_ANALYSIS", {"start_ns": (("startNs",), _INT), "end_ns": (("endNs",), _INT),
                                      "device": (("deviceId",), _INT), "type": (("type",), _INT)})
    types = t["type"].to_numpy(np.int64) if len(t) else np.zeros(0, np.int64)
    start = t["start_ns"].to_numpy(np.int64) if len(t) else np.zeros(0, np.int64)
    end = t["end_ns"].to_numpy(np.int64) if len(t) else np.zeros(0, np.int64)
    ok = np.isin(types, list(OVERLAP_LANES)) & (start >= 0) & (end >= start)
    lanes = np.array([OVERLAP_LANES[i] for i in range(len(OVERLAP_LANES))], dtype=object)[types[ok]]  # type = index
    cols = {"lane": lanes, "start_ns": start[ok], "dur_ns": end[ok] - start[ok],
            "device": t["device"].to_numpy(np.int64)[ok] if len(t) else np.zeros(0, np.int64)}
    return make_table(OVERLAP_SCHEMA, cols, int(ok.sum()))


def _read_tasks(db: SqliteDb, issues: list[Issue]) -> pd.DataFrame:
    """The TASK table (every device task); empty, with an Issue, when the table is missing."""
    if not db.has("TASK"):
        issues.append(Issue(str(db.path), "no TASK table: no device kernels in this profile (NPU activity not captured?)"))
        return pd.DataFrame()
    return db.frame(
        "TASK",
        {
            "start_ns": (("startNs",), _INT),
            "end_ns": (("endNs",), _INT),
            "device": (("deviceId",), _INT),
            "connection": (("connectionId",), _INT),
            "gtid": (("globalTaskId",), _INT),
            "task_type": (("taskType",), _ANY),
            "stream": (("streamId",), _INT),
            "task_id": (("taskId",), _INT),
        },
    )


def _compute_kernels(db: SqliteDb, tasks: pd.DataFrame, issues: list[Issue]) -> tuple[_KernelPart | None, np.ndarray]:
    """Tasks joined with COMPUTE_TASK_INFO (name, type, core, shapes), and the task ids that have it."""
    compute_ids = np.empty(0, dtype=np.int64)
    if not len(tasks):
        return None, compute_ids
    if not db.has("COMPUTE_TASK_INFO"):
        issues.append(Issue(str(db.path), "no COMPUTE_TASK_INFO table: kernel names, types and shapes are unknown"))
        return None, compute_ids
    info = db.frame(
        "COMPUTE_TASK_INFO",
        {
            "gtid": (("globalTaskId",), _INT),
            "name": (("name",), _ANY),
            "block_dim": (("blockNum", "blockDim"), _INT),
            "core": (("taskType",), _ANY),
            "type": (("opType",), _ANY),
            "input_formats": (("inputFormats",), _ANY),
            "input_dtypes": (("inputDataTypes",), _ANY),
            "input_shapes": (("inputShapes",), _ANY),
            "output_formats": (("outputFormats",), _ANY),
            "output_dtypes": (("outputDataTypes",), _ANY),
            "output_shapes": (("outputShapes",), _ANY),
            "op_state": (("opState",), _ANY),
        },
    )
    if len(info) and db.column("COMPUTE_TASK_INFO", "opState") is None:
        # CANN 8.0.0 writes no opState: whether operators ran as dynamic-shape binaries is unknown
        issues.append(Issue(str(db.path), "COMPUTE_TASK_INFO has no opState column: dynamic-shape operators "
                                          "cannot be judged from this DB export"))
    info = info.drop_duplicates("gtid", keep="first")
    compute_ids = info["gtid"].to_numpy()
    k = tasks.merge(info, on="gtid", how="inner", sort=False)
    if not len(k):
        return None, compute_ids
    task_types = db.resolve(k["task_type"].to_numpy())
    cores = db.resolve(k["core"].to_numpy())
    fallback = pd.Series(task_types).map(CORE_BY_TASK_TYPE).fillna("").to_numpy(dtype=object)
    cores = np.where(cores == "", fallback, cores)
    cols = {
        "name": db.resolve(k["name"].to_numpy()),
        "type": db.resolve(k["type"].to_numpy()),
        "core": cores,
        "start_ns": k["start_ns"].to_numpy(),
        "dur_ns": np.maximum(k["end_ns"].to_numpy() - k["start_ns"].to_numpy(), 0),
        "device": k["device"].to_numpy(),
        "stream": k["stream"].to_numpy(),
        "task_id": k["task_id"].to_numpy(),
        "block_dim": k["block_dim"].to_numpy(),
        "op_state": db.resolve(k["op_state"].to_numpy()),
    }
    for c in ("input_shapes", "input_dtypes", "input_formats", "output_shapes", "output_dtypes", "output_formats"):
        cols[c] = _clean_list_text(db.resolve(k[c].to_numpy()))
    cols["gtid"] = k["gtid"].to_numpy()
    return _KernelPart(cols, k["connection"].to_numpy()), compute_ids


def _copy_kernels(db: SqliteDb, tasks: pd.DataFrame, compute_ids: np.ndarray) -> _KernelPart | None:
    """Data copies: device tasks without compute or communication info that still take device time."""
    if not len(tasks):
        return None
    comm_task_ids = np.empty(0, dtype=np.int64)
    if db.has("COMMUNICATION_TASK_INFO"):
        comm_task_ids = db.frame("COMMUNICATION_TASK_INFO", {"gtid": (("globalTaskId",), _INT)})["gtid"].to_numpy()
    rest = tasks[~tasks["gtid"].isin(compute_ids) & ~tasks["gtid"].isin(comm_task_ids)]
    if not len(rest):
        return None
    tt = db.resolve(rest["task_type"].to_numpy())
    keep = np.isin(tt, list(COPY_TASK_TYPES))
    if not keep.any():
        return None
    r = rest[keep]
    names = tt[keep]
    cols = {
        "name": names,
        "type": names,
        "core": names,
        "start_ns": r["start_ns"].to_numpy(),
        "dur_ns": np.maximum(r["end_ns"].to_numpy() - r["start_ns"].to_numpy(), 0),
        "device": r["device"].to_numpy(),
        "stream": r["stream"].to_numpy(),
        "task_id": r["task_id"].to_numpy(),
        "gtid": r["gtid"].to_numpy(),
    }
    return _KernelPart(cols, r["connection"].to_numpy())


def _comm_kernels(db: SqliteDb, default_device: int) -> tuple[_KernelPart | None, list[CommOp]]:
    """COMMUNICATION_OP rows as COMMUNICATION kernels, and as CommOps (durations only)."""
    if not db.has("COMMUNICATION_OP"):
        return None, []
    comm = db.frame(
        "COMMUNICATION_OP",
        {
            "name": (("opName",), _ANY),
            "start_ns": (("startNs",), _INT),
            "end_ns": (("endNs",), _INT),
            "connection": (("connectionId",), _INT),
            "group": (("groupName",), _ANY),
            "op_type": (("opType",), _ANY),
            "device": (("deviceId",), _INT),
        },
    )
    if not len(comm):
        return None, []
    names = db.resolve(comm["name"].to_numpy())
    op_types = db.resolve(comm["op_type"].to_numpy())
    types = np.array(
        [comm_type(n) if n.startswith("hcom_") or not t else t for n, t in zip(names, op_types)],
        dtype=object,
    )
    dev = comm["device"].to_numpy()
    cols = {
        "name": names,
        "type": types,
        "core": np.full(len(comm), "COMMUNICATION", dtype=object),
        "start_ns": comm["start_ns"].to_numpy(),
        "dur_ns": np.maximum(comm["end_ns"].to_numpy() - comm["start_ns"].to_numpy(), 0),
        "device": np.where(dev >= 0, dev, default_device),
    }
    groups = db.resolve(comm["group"].to_numpy())
    comm_ops = [
        CommOp(
            name=str(name),
            group=str(group),
            step=-1,
            kind="p2p" if str(name).startswith(P2P_PREFIXES) else "collective",
            start_ns=int(start),
            elapse_ns=int(max(end - start, 0)),
            transit_ns=-1,
            wait_ns=-1,
            sync_ns=-1,
            idle_ns=-1,
        )
        for name, group, start, end in zip(names, groups, comm["start_ns"].to_numpy(), comm["end_ns"].to_numpy())
    ]
    return _KernelPart(cols, comm["connection"].to_numpy()), comm_ops


def _assemble_kernels(db: SqliteDb, parts: list[_KernelPart]) -> tuple[pd.DataFrame, np.ndarray]:
    """One kernel table sorted by start (absent columns at their defaults), with wait times and PMU
    columns, and the connection id of each row."""
    n = sum(len(p.columns["start_ns"]) for p in parts)
    conn = np.concatenate([p.connection for p in parts]) if parts else np.empty(0, dtype=np.int64)
    columns: dict[str, np.ndarray] = {}
    for col in [*KERNEL_SCHEMA, "gtid"]:
        if not any(col in p.columns for p in parts):
            continue
        kind, default = KERNEL_SCHEMA.get(col, ("i8", -1))
        dtype = np.int64 if kind == "i8" else object
        columns[col] = np.concatenate(
            [
                np.asarray(p.columns[col], dtype=dtype) if col in p.columns
                else np.full(len(p.columns["start_ns"]), default, dtype=dtype)
                for p in parts
            ]
        )
    order = np.argsort(columns["start_ns"], kind="stable") if n else np.empty(0, dtype=np.int64)
    columns = {c: v[order] for c, v in columns.items()}
    conn = conn[order]
    gtid = columns.pop("gtid", None)
    columns["wait_ns"] = _wait_times(columns.get("device"), columns.get("start_ns"), columns.get("dur_ns"), n)
    columns.update(_read_pmu(db, gtid))
    return make_table(KERNEL_SCHEMA, columns, n), conn


def _wait_times(device: np.ndarray | None, start: np.ndarray | None, dur: np.ndarray | None, n: int) -> np.ndarray:
    """Gap since the previous task on the same device ended (``Wait Time``); 0 for the first."""
    if not n or start is None or dur is None:
        return np.zeros(n, dtype=np.int64)
    dev = device if device is not None else np.full(n, -1, dtype=np.int64)
    end = start + dur
    order = np.lexsort((start, dev))
    d, s, e = dev[order], start[order], end[order]
    bounds = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    run = np.empty_like(e)  # running max of task ends, per device
    for lo, hi in zip(bounds, np.r_[bounds[1:], n]):
        run[lo:hi] = np.maximum.accumulate(e[lo:hi])
    w = np.zeros(n, dtype=np.int64)
    w[1:] = np.maximum(s[1:] - run[:-1], 0)
    w[bounds] = 0
    wait = np.empty(n, dtype=np.int64)
    wait[order] = w
    return wait


def _read_pmu(db: SqliteDb, gtids: np.ndarray | None) -> dict[str, np.ndarray]:
    """TASK_PMU_INFO (globalTaskId, name, value) pivoted to ``pmu:<name>`` float columns."""
    if gtids is None or not len(gtids) or not db.has("TASK_PMU_INFO"):
        return {}
    pmu = db.frame(
        "TASK_PMU_INFO",
        {"gtid": (("globalTaskId",), _INT), "name": (("name",), _ANY), "value": (("value",), "real")},
    )
    if not len(pmu):
        return {}
    pmu["name"] = db.resolve(pmu["name"].to_numpy())
    wide = pmu.pivot_table(index="gtid", columns="name", values="value", aggfunc="first")
    idx = wide.index.get_indexer(gtids)
    out: dict[str, np.ndarray] = {}
    for name in wide.columns:
        if not name:
            continue
        vals = wide[name].to_numpy(dtype=np.float64)
        out[f"pmu:{name}"] = np.where(idx >= 0, vals[np.maximum(idx, 0)], np.nan)
    return out


def _read_cann_api(db: SqliteDb) -> dict[str, list | np.ndarray]:
    if not db.has("CANN_API"):
        return {}
    api = db.frame(
        "CANN_API",
        {
            "start_ns": (("startNs",), _INT),
            "end_ns": (("endNs",), _INT),
            "type": (("type",), _INT),
            "gtid": (("globalTid",), _INT),
            "name": (("name",), _ANY),
        },
    )
    if not len(api):
        return {}
    levels_by_id = api_type_names(db)
    levels = np.array([levels_by_id.get(int(t), "") for t in api["type"].to_numpy()], dtype=object)
    raw = db.resolve(api["name"].to_numpy())
    names = np.array(
        [n if "@" in n else f"{CANN_PREFIX.get(lv, 'Api')}@{n}" for n, lv in zip(raw, levels)], dtype=object
    )
    gtid = api["gtid"].to_numpy()
    return {
        "name": names,
        "cat": np.full(len(api), "cann", dtype=object),
        "level": levels,
        "start_ns": api["start_ns"].to_numpy(),
        "dur_ns": np.maximum(api["end_ns"].to_numpy() - api["start_ns"].to_numpy(), 0),
        "pid": np.where(gtid >= 0, gtid >> 32, -1),
        "tid": np.where(gtid >= 0, gtid & 0xFFFFFFFF, -1),
    }


def _clean_list_text(values: np.ndarray) -> np.ndarray:
    """Shapes/dtypes/formats as the text export writes them, without quotes or CRLF joins."""
    codes, uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=False)
    cleaned = np.empty(len(uniques), dtype=object)
    for i, v in enumerate(uniques):
        s = v.strip().strip('"') if isinstance(v, str) else ""
        if "\n" in s:
            s = s.replace(";\r\n", ";").replace(";\n", ";").replace("\r\n", ";").replace("\n", ";")
        cleaned[i] = "" if s in ("N/A", "NULL") else s
    return cleaned[codes] if len(values) else np.empty(0, dtype=object)
