"""torch_npu.profiler DB export: ``ascend_pytorch_profiler[_{rank}].db`` + sibling ``analysis.db``.

The framework tables (PYTORCH_API, CONNECTION_IDS, PYTORCH_CALLCHAINS, STRING_IDS,
STEP_TIME, GC_RECORD, META_DATA, RANK_DEVICE_MAP, HOST_INFO) give host ops, their stacks and the
forward/backward pairs; the CANN tables (mapping.readers.cann_db) give kernels, communication ops
and CANN API calls. Kernels reach their launching op through the chain
``TASK.connectionId = CONNECTION_IDS.connectionId → CONNECTION_IDS.id = PYTORCH_API.connectionId``;
then the shared linking (nesting, ancestor walk to a stack, backward through the forward op) runs as
for every other producer. Both files are opened read-only and never modified.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from msprof_lsp.mapping.interning import per_distinct
from msprof_lsp.mapping.profile import linking
from msprof_lsp.mapping.errors import Issue, ProfileError
from msprof_lsp.mapping.profile.frames import StackTable, parse_frame
from msprof_lsp.mapping.profile.locations import Layout, ProfileLocation, Progress
from msprof_lsp.mapping.profile.model import (
    AICORE_FREQ_KEY,
    BreakdownSource,
    HOST_EVENT_SCHEMA,
    HOST_OP_SCHEMA,
    MODULE_SCHEMA,
    CommOp,
    Profile,
    ProfileKind,
    ProfileMeta,
    Step,
    StepBreakdown,
    make_table,
)
from msprof_lsp.mapping.profile.step_infer import steps_from_launches
from msprof_lsp.mapping.profile.step_windows import profiler_steps, step_ids
from msprof_lsp.mapping.numbers import float_of, int64_of, scaled_int64, shown
from msprof_lsp.mapping.profile.readers.ascend_json import read_env_variables, read_profiler_info, read_profiler_metadata
from msprof_lsp.mapping.profile.readers.assemble import optional
from msprof_lsp.mapping.profile.overlap import breakdown_from_overlap
from msprof_lsp.mapping.profile.readers.cann_db import api_type_names, read_cann
from msprof_lsp.mapping.profile.readers.npu_trace import kernel_steps
from msprof_lsp.mapping.profile.readers.msprof_cli import DB_RE as MSPROF_DB_RE
from msprof_lsp.mapping.profile.readers.protocol import (
    Candidate, Folder, RankFiles, Reader, SeenFile, as_rank, mtime, mtime_path, own_layout, rank_from_names,
)
from msprof_lsp.mapping.profile.readers.sqlite_db import SqliteDb
from msprof_lsp.mapping.profile.readers import torch_npu
from msprof_lsp.mapping.profile.readers.torch_npu import DB_NAME_RE, OUTPUT_DIR, has_text_outputs, root_name_ts, run_facts, run_folders

ANALYSIS_DB = "analysis.db"

OP, QUEUE, TRACE, MSTX = "op", "queue", "trace", "mstx"
_MODULE_RE = re.compile(r"^nn\.Module:\s*(?P<cls>[A-Za-z_][\w.]*?)_(?P<k>\d+)$")
_DIGITS_RE = re.compile(r"(\d+)")

_INT, _ANY, _REAL = "int", "any", "real"


@dataclass(frozen=True, slots=True)
class DbLayout(Layout):
    """The DB file and the run root's JSON files read with it (analysis.db sits beside the DB)."""

    db: Path
    infos: tuple[Path, ...] = ()  # profiler_info*.json of the run root, sorted by name
    metadata: Path | None = None  # profiler_metadata.json of the run root


def probe_dir(folder: Folder) -> Candidate | None:
    """A run root (or bare output) whose results are DB-only: the newest-named DB is the location."""
    found = run_folders(folder)
    if found is None:
        return None
    root, out = found
    dbs = sorted((e for e in out.entries if DB_NAME_RE.match(e.name)), key=lambda e: e.name)
    if not dbs or has_text_outputs(out):
        return None
    db = dbs[-1]
    facts = run_facts(root, bare=root is out)
    rank = facts.rank if facts.rank is not None else _name_rank(db.name)
    mtimes = [*facts.mtimes, mtime(db)]
    analysis = out.entry(ANALYSIS_DB)
    if analysis is not None:
        mtimes.append(mtime(analysis))
    loc = ProfileLocation(
        kind=ProfileKind.TORCH_NPU_DB,
        path=Path(db.path),
        rank=rank if rank is not None else rank_from_names(root.path),
        mtime=max(mtimes),
        complete=True,
        layout=DbLayout(Path(db.path), facts.infos, facts.metadata),
    )
    return Candidate(loc, True, root_name_ts(root.path))


def probe_file(file: SeenFile) -> Candidate | None:
    """``ascend_pytorch_profiler*.db``; named by the user, any ``*.db`` but msprof's own."""
    name = file.name
    if not DB_NAME_RE.match(name) and not (file.explicit and name.endswith(".db") and not MSPROF_DB_RE.match(name)):
        return None
    path = file.path
    # The run root (above ASCEND_PROFILER_OUTPUT) may have profiler_info_{rank}.json.
    root = path.parent.parent if path.parent.name == OUTPUT_DIR else path.parent
    facts = run_facts(file.listings.folder(root), bare=False)
    rank = _name_rank(name)
    if rank is None:
        rank = facts.rank if facts.rank is not None else rank_from_names(path)
    mtimes = [mtime_path(path)]
    analysis = path.parent / ANALYSIS_DB
    if analysis.is_file():
        mtimes.append(mtime_path(analysis))
    loc = ProfileLocation(ProfileKind.TORCH_NPU_DB, path, rank, max(mtimes), True,
                          layout=DbLayout(path, facts.infos, facts.metadata))
    return Candidate(loc, True, root_name_ts(root))


def _name_rank(name: str) -> int | None:
    m = DB_NAME_RE.match(name)
    return as_rank(m.group(1)) if m and m.group(1) is not None else None  # 30 digits: no rank


def read(location: ProfileLocation, progress: Progress) -> Profile:
    lay = _db_layout(location)
    db_path = lay.db
    meta = ProfileMeta(kind=ProfileKind.TORCH_NPU_DB, path=str(db_path), rank=location.rank)
    meta.export_type = ("db",)
    issues: list[Issue] = []
    _read_json_meta(lay, meta, issues)

    progress(f"reading {db_path.name}", 0.0)
    with SqliteDb(db_path) as db:
        meta.files.append(str(db_path))
        if not db.tables:
            raise ProfileError(db_path, "the database has no tables yet: the profiler may still be writing it")
        if not (db.has("PYTORCH_API") or db.has("TASK")):
            raise ProfileError(
                db_path,
                "neither PYTORCH_API nor TASK table found: not a torch_npu.profiler DB export "
                f"(tables: {', '.join(sorted(db.tables)[:12])})",
            )
        _read_db_meta(db, meta, issues)
        progress("reading device tasks", 0.2)
        cann = read_cann(db, device_hint=meta.device_id if meta.device_id is not None else -1)
        issues.extend(cann.issues)
        progress("reading framework ops", 0.5)
        stacks = StackTable()
        fw = _read_framework(db, stacks, issues)
        steps = _read_steps(db, fw.host_ops, issues)
        host_events = _host_events(db, cann.host_events, fw)
        if db.unreadable_string_ids:
            issues.append(Issue(str(db_path), f"STRING_IDS: {db.unreadable_string_ids} row(s) whose id is no integer "
                                              "in int64 range; left out"))

    profile = Profile(meta=meta)
    profile.stacks = stacks.stacks
    profile.host_ops = fw.host_ops
    profile.modules = fw.modules
    profile.host_events = host_events
    profile.steps = steps
    profile.comm_ops = cann.comm_ops

    progress("linking kernels to ops", 0.7)
    kernels = cann.kernels
    kernels["host_op"] = _launching_ops(cann.kernel_connection, fw)
    kernels["step"] = kernel_steps(kernels, fw.host_ops, steps)
    if not steps:
        profile.steps = steps_from_launches(kernels, meta, issues, host=(fw.host_ops, host_events))
    profile.kernels = kernels
    _link(profile)

    analysis = db_path.parent / ANALYSIS_DB
    if analysis.is_file():
        progress("reading analysis.db", 0.9)
        _read_analysis(analysis, profile, issues)
    else:
        issues.append(Issue(str(analysis), "no analysis.db beside the DB: no step-trace breakdown or "
                                           "communication analysis (single-rank runs may not have it)"))
    profile.overlap = cann.overlap
    if not profile.step_breakdown and len(profile.overlap):  # no analysis.db: the DB's own lanes
        profile.step_breakdown = breakdown_from_overlap(profile.overlap, profile.steps, profile.kernels,
                                                        preparing=False)
    profile.comm_ops = _assign_comm_steps(profile.comm_ops, steps)
    profile.issues = issues
    meta.with_stack = meta.with_stack if meta.with_stack is not None else bool(stacks.stacks)
    progress("done", 1.0)
    return profile


def read_summary(location: ProfileLocation) -> RankFiles | None:
    """The rank's cluster-view data only: the run root's JSON metadata, the DB's META_DATA and
    STEP_TIME, and analysis.db's StepTraceTime and communication tables (no device task, no
    host op is read). None without an analysis.db whose StepTraceTime gives a step time (the
    rank is then loaded whole)."""
    lay = _db_layout(location)
    analysis = lay.db.parent / ANALYSIS_DB
    if not analysis.is_file():
        return None
    meta = ProfileMeta(kind=ProfileKind.TORCH_NPU_DB, path=str(lay.db), rank=location.rank)
    meta.export_type = ("db",)
    issues: list[Issue] = []
    _read_json_meta(lay, meta, issues)
    profile = Profile(meta=meta)
    with SqliteDb(lay.db) as db:
        meta.files.append(str(lay.db))
        _read_db_meta(db, meta, issues)
        profile.steps = _read_steps(db, profile.host_ops, issues)
        device = db.has("TASK") and bool(db.query("SELECT 1 FROM TASK LIMIT 1"))
    _read_analysis(analysis, profile, issues)
    if not any(b.step_time_ns > 0 and not b.derived for b in profile.step_breakdown):
        return None
    profile.comm_ops = _assign_comm_steps(profile.comm_ops, profile.steps)
    profile.issues = issues
    return RankFiles(profile, device, tuple(Path(f) for f in meta.files))


# ---------------------------------------------------------------------------------------------
# Locating the files


def _db_layout(location: ProfileLocation) -> DbLayout:
    return own_layout(location, READER, DbLayout,
                      f"no ascend_pytorch_profiler*.db found (export_type=db writes it to {OUTPUT_DIR}/)")


def inputs(location: ProfileLocation) -> list[Path]:
    """The DB, the files :func:`read` reads with it (analysis.db beside it, the run root's JSON
    files, from its layout: the root is not listed again), and each database's write-ahead log: a
    pending log holds rows the reader sees (sqlite_db reads it from a private copy) while the .db
    keeps its size and mtime (the cache skips a log while it does not exist)."""
    if not Path(location.path).is_file():  # a run root named by hand: its files, as the text export's
        return torch_npu.inputs(location)
    lay = _db_layout(location)
    companions = [p for p in (lay.db.parent / ANALYSIS_DB, lay.metadata) if p is not None and p.is_file()]
    files = [Path(location.path), *companions, *lay.infos]
    return files + [p.with_name(p.name + "-wal") for p in files if p.suffix == ".db"]


def _read_json_meta(lay: DbLayout, meta: ProfileMeta, issues: list[Issue]) -> None:
    """profiler_info*.json / profiler_metadata.json of the run root, when the DB sits in one."""
    infos, md = lay.infos, lay.metadata
    if not infos and md is None:
        return
    # Optional, as in the text export: a damaged one is dropped with a notice naming it (the
    # readers record the file in meta.files themselves).
    if infos:
        optional(infos[0], issues, lambda p: (None, read_profiler_info(p, meta)))
    if md is not None:
        optional(md, issues, lambda p: (None, read_profiler_metadata(p, meta)))
    meta.export_type = meta.export_type or ("db",)


def _read_db_meta(db: SqliteDb, meta: ProfileMeta, issues: list[Issue]) -> None:
    if db.has("AICORE_FREQ") and db.column("AICORE_FREQ", "timestampNs") and db.column("AICORE_FREQ", "freq"):
        rows = db.query('SELECT timestampNs, freq FROM "AICORE_FREQ"')
        # a freq of inf (a REAL cast from '1e999') or 1e300 is no clock: int() of it raised
        mhz = [scaled_int64(f, 1) if isinstance(f, (int, float)) else None for _, f in rows]
        samples = sorted([t, m] for (t, _), m in zip(rows, mhz) if isinstance(t, int) and m is not None and m > 0)
        unreadable = sum(m is None and f is not None for (_, f), m in zip(rows, mhz))
        if unreadable:
            issues.append(Issue(str(db.path), f"AICORE_FREQ: {unreadable} freq value(s) that are no finite number "
                                              "in int64 range; skipped"))
        if samples:
            meta.extra[AICORE_FREQ_KEY] = samples
    if db.has("META_DATA") and db.column("META_DATA", "name") and db.column("META_DATA", "value"):
        for name, value in db.query('SELECT name, value FROM "META_DATA"'):
            if not isinstance(name, str):
                continue
            key = name.strip()
            low = key.lower()
            text = "" if value is None else str(value)
            if low in ("torch_npu_version", "torchnpuversion") and not meta.torch_npu_version:
                meta.torch_npu_version = text
            elif low in ("cann_version", "cannversion") and not meta.cann_version:
                meta.cann_version = text
            elif low in ("torch_version", "pytorch_version") and not meta.torch_version:
                meta.torch_version = text
            elif key == "ENV_VARIABLES":
                if not meta.env:  # a profiler_metadata.json beside the DB was read first and wins
                    issues.extend(read_env_variables(text, meta, f"{db.path} META_DATA", "META_DATA ENV_VARIABLES"))
            else:
                meta.extra.setdefault("meta_data", {})[key] = text
    if db.has("RANK_DEVICE_MAP"):
        rows = db.query('SELECT * FROM "RANK_DEVICE_MAP"')
        cols = db.tables["RANK_DEVICE_MAP"]
        for row in rows[:1]:
            rec = dict(zip(cols, row))
            rank = _int_or_none(rec.get("rankId"))
            dev = _int_or_none(rec.get("deviceId"))
            for key, got in (("rankId", rank), ("deviceId", dev)):
                if got is None and rec.get(key) is not None:  # "²", 20 digits: ignored, and said
                    issues.append(Issue(str(db.path), f"RANK_DEVICE_MAP {key} {shown(rec.get(key))} is not an "
                                                      "integer in int64 range; ignored"))
            if rank is not None and rank >= 0 and meta.rank is None:
                meta.rank = rank
            if dev is not None and dev >= 0:
                meta.device_id = dev
    if db.has("HOST_INFO"):
        cols = db.tables["HOST_INFO"]
        for row in db.query('SELECT * FROM "HOST_INFO"')[:1]:
            rec = dict(zip(cols, row))
            if rec.get("hostName") is not None:
                meta.extra["host_name"] = str(rec["hostName"])
            if rec.get("hostUid") is not None:
                meta.extra["host_uid"] = str(rec["hostUid"])


# ---------------------------------------------------------------------------------------------
# Framework tables


class _Framework:
    """Host ops, modules and the connection-id index of one DB."""

    def __init__(self) -> None:
        self.host_ops = make_table(HOST_OP_SCHEMA, {}, 0)
        self.modules = make_table(MODULE_SCHEMA, {}, 0)
        self.op_by_conn_group = pd.Series(dtype="int64")  # CONNECTION_IDS.id → host op row
        self.group_by_conn = pd.Series(dtype="int64")  # connectionId → CONNECTION_IDS.id
        self.mstx: dict[str, np.ndarray] = {}


@dataclass(slots=True)
class _ApiRows:
    """PYTORCH_API as read: every row's kind (op, python trace, mstx), name and process/thread."""

    api: pd.DataFrame
    kinds: np.ndarray
    names: np.ndarray
    pid: np.ndarray
    tid: np.ndarray

    def spans(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Start, duration (end - start, at least 0), pid and tid of ``rows``."""
        start = self.api["start_ns"].to_numpy()[rows]
        return {
            "start_ns": start,
            "dur_ns": np.maximum(self.api["end_ns"].to_numpy()[rows] - start, 0),
            "pid": self.pid[rows],
            "tid": self.tid[rows],
        }


def _read_framework(db: SqliteDb, stacks: StackTable, issues: list[Issue]) -> _Framework:
    """PYTORCH_API -> host ops (stacks from PYTORCH_CALLCHAINS, kernels' launches and backward
    links from CONNECTION_IDS), nn.Module rows and mstx ranges."""
    fw = _Framework()
    if not db.has("PYTORCH_API"):
        issues.append(Issue(str(db.path), "no PYTORCH_API table: no framework ops, kernels cannot be mapped to "
                                          "source (capture with ProfilerActivity.CPU)"))
        return fw
    rows = _read_api(db)
    # Stacks: one PYTORCH_CALLCHAINS row per frame, stackDepth 0 = innermost.
    stack_of_chain = _read_callchains(db, stacks, issues)
    op_rows = np.flatnonzero(rows.kinds == OP)
    fw.host_ops = _op_table(db, rows, op_rows, stack_of_chain)
    _connect(db, fw, rows.api["conn"].to_numpy()[op_rows], issues)
    fw.modules = _module_table(rows)
    mstx_rows = np.flatnonzero(rows.kinds == MSTX)
    if len(mstx_rows):
        fw.mstx = {
            "name": rows.names[mstx_rows],
            "cat": np.full(len(mstx_rows), "mstx", dtype=object),
            **rows.spans(mstx_rows),
        }
    return fw


def _read_api(db: SqliteDb) -> _ApiRows:
    api = db.frame(
        "PYTORCH_API",
        {
            "start_ns": (("startNs",), _INT),
            "end_ns": (("endNs",), _INT),
            "gtid": (("globalTid",), _INT),
            "conn": (("connectionId",), _INT),
            "name": (("name",), _ANY),
            "seq": (("sequenceNumber",), _INT),
            "fwd_thread": (("fwdThreadId",), _INT),
            "dtypes": (("inputDtypes",), _ANY),
            "shapes": (("inputShapes",), _ANY),
            "callchain": (("callchainId",), _INT),
            "type": (("type",), _INT),
        },
    )
    type_names = api_type_names(db)
    types = api["type"].to_numpy()
    kinds = per_distinct(types, lambda t: type_names.get(int(t), OP if t < 0 else ""))
    names = db.resolve(api["name"].to_numpy())
    gtid = api["gtid"].to_numpy()
    pid = np.where(gtid >= 0, gtid >> 32, -1)
    tid = np.where(gtid >= 0, gtid & 0xFFFFFFFF, -1)
    return _ApiRows(api, kinds, names, pid, tid)


def _op_table(db: SqliteDb, rows: _ApiRows, op_rows: np.ndarray, stack_of_chain: pd.Series) -> pd.DataFrame:
    """The framework ops (``op_rows`` of PYTORCH_API) as host_ops, each with its stack."""
    ops = rows.api.iloc[op_rows]
    chain = ops["callchain"].to_numpy()
    op_stack = (
        stack_of_chain.reindex(chain).fillna(-1).to_numpy(dtype=np.int64)
        if len(stack_of_chain)
        else np.full(len(ops), -1, dtype=np.int64)
    )
    return make_table(
        HOST_OP_SCHEMA,
        {
            "name": rows.names[op_rows],
            "cat": np.full(len(ops), "cpu_op", dtype=object),
            "start_ns": ops["start_ns"].to_numpy(),
            "dur_ns": np.maximum(ops["end_ns"].to_numpy() - ops["start_ns"].to_numpy(), 0),
            "pid": rows.pid[op_rows],
            "tid": rows.tid[op_rows],
            "seq": ops["seq"].to_numpy(),
            "fwd_thread": ops["fwd_thread"].to_numpy(),
            "input_dims": _clean(db.resolve(ops["shapes"].to_numpy())),
            "input_types": _clean(db.resolve(ops["dtypes"].to_numpy())),
            "stack": op_stack,
        },
    )


def _connect(db: SqliteDb, fw: _Framework, conn_group: np.ndarray, issues: list[Issue]) -> None:
    """Connection groups (PYTORCH_API.connectionId is a CONNECTION_IDS.id): the op of each
    group, the group of each connectionId, and the ops' backward -> forward links."""
    has = conn_group >= 0
    fw.op_by_conn_group = pd.Series(np.flatnonzero(has), index=conn_group[has])
    fw.op_by_conn_group = fw.op_by_conn_group[~fw.op_by_conn_group.index.duplicated(keep="first")]
    conns = db.frame("CONNECTION_IDS", {"group": (("id",), _INT), "conn": (("connectionId",), _INT)})
    if not db.has("CONNECTION_IDS"):
        issues.append(Issue(str(db.path), "no CONNECTION_IDS table: kernels cannot be linked to their launching ops"))
    fw.group_by_conn = _group_by_connection(conns, fw.op_by_conn_group)
    fw.host_ops["fwd_op"] = _forward_links(fw.host_ops, conns, fw.op_by_conn_group)


def _module_table(rows: _ApiRows) -> pd.DataFrame:
    """Modules from the python tracer rows (``nn.Module: Linear_0``); empty when there are none."""
    trace_rows = np.flatnonzero(rows.kinds == TRACE)
    mod_rows = [i for i in trace_rows if _MODULE_RE.match(rows.names[i])]
    if not mod_rows:
        return make_table(MODULE_SCHEMA, {}, 0)
    at = np.asarray(mod_rows)
    matches = [_MODULE_RE.match(rows.names[i]) for i in at]
    return make_table(
        MODULE_SCHEMA,
        {
            "cls": [m.group("cls") for m in matches],  # type: ignore[union-attr]
            "k": [_module_k(m.group("k")) for m in matches],  # type: ignore[union-attr]
            **rows.spans(at),
        },
    )


def _read_callchains(db: SqliteDb, stacks: StackTable, issues: list[Issue]) -> pd.Series:
    """callchainId → StackTable id."""
    if not db.has("PYTORCH_CALLCHAINS"):
        issues.append(Issue(str(db.path), "no PYTORCH_CALLCHAINS table: no call stacks (capture with "
                                          "with_stack=True to map kernels to source lines)"))
        return pd.Series(dtype="int64")
    cc = db.frame(
        "PYTORCH_CALLCHAINS",
        {"id": (("id",), _INT), "stack": (("stack",), _ANY), "depth": (("stackDepth",), _INT)},
    )
    if not len(cc):
        return pd.Series(dtype="int64")
    cc["frame"] = db.resolve(cc["stack"].to_numpy())
    cc = cc.sort_values(["id", "depth"], kind="stable")
    frame_cache: dict[str, object] = {}
    ids: list[int] = []
    sids: list[int] = []
    for chain_id, frames in cc.groupby("id", sort=False)["frame"]:
        parsed = []
        for text in frames:
            if not text:
                continue
            f = frame_cache.get(text)
            if f is None:
                f = frame_cache[text] = parse_frame(text)
            parsed.append(f)
        ids.append(int(chain_id))
        sids.append(stacks.intern(tuple(parsed)))  # type: ignore[arg-type]
    return pd.Series(sids, index=ids, dtype="int64")


def _group_by_connection(conns: pd.DataFrame, op_by_group: pd.Series) -> pd.Series:
    """connectionId → the CONNECTION_IDS.id group that belongs to a host op (first such)."""
    if not len(conns):
        return pd.Series(dtype="int64")
    c = conns[conns["group"].isin(op_by_group.index)]
    c = c.drop_duplicates("conn", keep="first")
    return pd.Series(c["group"].to_numpy(), index=c["conn"].to_numpy())


def _forward_links(host_ops: pd.DataFrame, conns: pd.DataFrame, op_by_group: pd.Series) -> np.ndarray:
    """host op row → its forward op row, for backward autograd nodes.

    torch_npu gives the forward op and the backward node one shared connection id (the
    fwd/bwd offset): a connectionId that appears in the groups of two or more ops. The op with
    ``fwdThreadId`` 0 (else the earliest) is the forward one. Backward nodes left without such a
    link fall back to the sequence number (same ``sequenceNumber``, forward op ``fwdThreadId`` 0,
    the latest one starting before the node), as torch_npu itself pairs them.
    """
    n = len(host_ops)
    fwd = np.full(n, -1, dtype=np.int64)
    if not n:
        return fwd
    start = host_ops["start_ns"].to_numpy()
    fthread = host_ops["fwd_thread"].to_numpy()
    if len(conns) and len(op_by_group):
        c = conns[conns["group"].isin(op_by_group.index)].copy()
        c["op"] = op_by_group.reindex(c["group"].to_numpy()).to_numpy()
        c = c.drop_duplicates(["conn", "op"])
        shared = c[c.duplicated("conn", keep=False)]
        for _, grp in shared.groupby("conn", sort=False):
            ops = grp["op"].to_numpy(dtype=np.int64)
            forward = ops[fthread[ops] == 0]
            head = int(forward[0]) if len(forward) else int(ops[np.argmin(start[ops])])
            for op in ops:
                if op != head and start[op] >= start[head]:
                    fwd[op] = head
    return fwd


def _link(profile: Profile) -> None:
    """The shared linking every producer uses (mapping.linking), fed with what the DB gave."""
    h = profile.host_ops
    linking.assign_parents(h)
    fthread = h["fwd_thread"].to_numpy()
    # torch_npu: Fwd thread id 0 on forward ops, non-zero on backward nodes.
    linking.link_backward_by_sequence(h, fthread == 0, fthread > 0)
    if len(profile.modules):
        linking.assign_parents(profile.modules)
        linking.assign_modules(h, profile.modules)
    linking.resolve_kernel_links(profile.kernels, h)


def _launching_ops(kernel_conn: np.ndarray, fw: _Framework) -> np.ndarray:
    """Kernel row → host op row through CONNECTION_IDS, -1 when unlinked."""
    out = np.full(len(kernel_conn), -1, dtype=np.int64)
    if not len(kernel_conn) or not len(fw.group_by_conn):
        return out
    groups = fw.group_by_conn.reindex(kernel_conn)
    ops = fw.op_by_conn_group.reindex(groups.to_numpy())
    vals = ops.to_numpy()
    ok = ~pd.isna(vals) & (kernel_conn >= 0)
    out[ok] = vals[ok].astype(np.int64)
    return out


# ---------------------------------------------------------------------------------------------
# Steps


def _read_steps(db: SqliteDb, host_ops: pd.DataFrame, issues: list[Issue]) -> list[Step]:
    steps: list[Step] = []
    if db.has("STEP_TIME"):
        st = db.frame("STEP_TIME", {"id": (("id",), _ANY), "start": (("startNs",), _INT), "end": (("endNs",), _INT)})
        bad: list[object] = []
        for sid, s, e in zip(st["id"], st["start"], st["end"]):
            num = _step_number(sid)
            if num < 0 and sid is not None and not (isinstance(sid, (int, np.integer)) and sid < 0):
                bad.append(sid)  # "step" + 30 digits: the row is no step the model can number
                continue
            if s >= 0 and e >= s:
                steps.append(Step(num, int(s), int(e)))
        if bad:
            issues.append(Issue(str(db.path), f"STEP_TIME: {len(bad)} row(s) whose id {shown(bad[0])} is no step "
                                              "number in int64 range; skipped"))
    if not steps and len(host_ops):  # older exports: ProfilerStep#N ops
        start = host_ops["start_ns"].to_numpy(np.int64)
        return profiler_steps(host_ops["name"].astype(str).tolist(), start, start + host_ops["dur_ns"].to_numpy(np.int64),
                              issues, str(db.path))
    steps.sort(key=lambda s: s.start_ns)
    return steps


def _step_number(value: object) -> int:
    """A step id from STEP_TIME/StepTraceTime: an integer, or the digits in "step3"; -1 when
    there is none the model can hold ("step" + 30 digits, "²")."""
    if isinstance(value, (int, np.integer)):
        n = int64_of(value)
        return -1 if n is None else n
    m = _DIGITS_RE.search(str(value)) if value is not None else None
    n = int64_of(m.group(1)) if m else None
    return -1 if n is None else n


def _assign_comm_steps(ops: list[CommOp], steps: list[Step]) -> list[CommOp]:
    if not steps:
        return ops
    missing = [i for i, o in enumerate(ops) if o.step < 0]
    if not missing:
        return ops
    # a communication op ending its step still belongs to it: the range is closed
    ids = step_ids(np.array([ops[i].start_ns for i in missing], dtype=np.int64), steps, closed=True)
    out = list(ops)
    for i, sid in zip(missing, ids):
        o = ops[i]
        out[i] = CommOp(o.name, o.group, int(sid), o.kind, o.start_ns, o.elapse_ns, o.transit_ns,
                        o.wait_ns, o.sync_ns, o.idle_ns, o.bandwidth)
    return out


# ---------------------------------------------------------------------------------------------
# Host events


def _host_events(db: SqliteDb, cann: dict, fw: _Framework) -> pd.DataFrame:
    parts: list[dict] = []
    if cann:
        parts.append(cann)
    if db.has("GC_RECORD"):
        gc = db.frame("GC_RECORD", {"start": (("startNs",), _INT), "end": (("endNs",), _INT),
                                    "gtid": (("globalTid",), _INT)})
        if len(gc):
            g = gc["gtid"].to_numpy()
            parts.append({
                "name": np.full(len(gc), "GC", dtype=object),
                "cat": np.full(len(gc), "gc", dtype=object),
                "start_ns": gc["start"].to_numpy(),
                "dur_ns": np.maximum(gc["end"].to_numpy() - gc["start"].to_numpy(), 0),
                "pid": np.where(g >= 0, g >> 32, -1),
                "tid": np.where(g >= 0, g & 0xFFFFFFFF, -1),
            })
    if fw.mstx:
        parts.append(fw.mstx)
    if not parts:
        return make_table(HOST_EVENT_SCHEMA, {}, 0)
    cols: dict[str, np.ndarray] = {}
    for col in HOST_EVENT_SCHEMA:
        kind, default = HOST_EVENT_SCHEMA[col]
        arrays = [
            np.asarray(p[col]) if col in p else np.full(len(p["start_ns"]), default,
                                                          dtype=object if kind == "cat" else np.int64)
            for p in parts
        ]
        cols[col] = np.concatenate(arrays)
    order = np.argsort(cols["start_ns"], kind="stable")
    return make_table(HOST_EVENT_SCHEMA, {k: v[order] for k, v in cols.items()}, len(order))


# ---------------------------------------------------------------------------------------------
# analysis.db


STEP_TRACE_COLUMNS = {
    "device": (("deviceId",), _INT),
    "step": (("step",), _ANY),
    "computing": (("computing",), _REAL),
    "comm_not_overlapped": (("communication_not_overlapped",), _REAL),
    "overlapped": (("overlapped",), _REAL),
    "comm": (("communication",), _REAL),
    "free": (("free",), _REAL),
    "stage": (("stage",), _REAL),
    "bubble": (("bubble",), _REAL),
    "excl_receive": (("communication_not_overlapped_and_exclude_receive",), _REAL),
    "preparing": (("preparing",), _REAL),
}


def _read_analysis(path: Path, profile: Profile, issues: list[Issue]) -> None:
    try:
        db = SqliteDb(path)
    except ProfileError as exc:  # the main DB was fine: keep it, report this one
        issues.append(Issue(exc.path, exc.message))
        return
    with db:
        profile.meta.files.append(str(path))
        if db.has("StepTraceTime"):
            st = db.frame("StepTraceTime", STEP_TRACE_COLUMNS)
            profile.step_breakdown = _step_breakdown(st, profile, issues, str(path))
        comm = _comm_from_analysis(db)
        if comm:
            profile.comm_ops = comm
        if db.has("CommAnalyzerMatrix"):
            profile.comm_matrix = _comm_matrix(db)


def step_trace_unit(values_sum: float, step_durations_ns: list[int]) -> str:
    """``us`` or ``ms`` for StepTraceTime values.

    The docs say ms, torch_npu fills µs [code]. Decide by magnitude: the per-step time
    (computing + not-overlapped communication + free) must match a STEP_TIME duration. Without
    step durations, trust the producer (µs).
    """
    durations = [d for d in step_durations_ns if d > 0]
    if values_sum <= 0 or not durations:
        return "us"
    ref = float(np.median(durations))
    as_us = values_sum * 1e3
    as_ms = values_sum * 1e6
    return "us" if abs(np.log(as_us / ref)) <= abs(np.log(as_ms / ref)) else "ms"


def _step_breakdown(st: pd.DataFrame, profile: Profile, issues: list[Issue], where: str) -> list[StepBreakdown]:
    if not len(st):
        return []
    per_row = (st["computing"].fillna(0) + st["comm_not_overlapped"].fillna(0) + st["free"].fillna(0))
    durations = [s.dur_ns for s in profile.steps]
    if not durations and len(profile.kernels):
        k = profile.kernels
        durations = [int((k["start_ns"] + k["dur_ns"]).max() - k["start_ns"].min())]
    unit = step_trace_unit(float(per_row.median()), durations)
    profile.meta.extra["step_trace_unit"] = unit
    if unit == "ms":
        issues.append(Issue(where, "StepTraceTime values read as milliseconds (their magnitude matches the "
                                   "step durations in ms, not µs)"))

    scale = 1_000_000 if unit == "ms" else 1000
    unreadable = 0

    def ns(v: float) -> int:
        nonlocal unreadable
        out = scaled_int64(v, scale)  # inf, 1e300: absent (-1) and counted, not an OverflowError
        if out is None and v is not None and not (isinstance(v, float) and np.isnan(v)):
            unreadable += 1
        return -1 if out is None else out

    out = []
    for r in st.itertuples(index=False):
        out.append(
            StepBreakdown(
                step=_step_number(r.step) if r.step not in (None, "") else -1,
                device=int(r.device),
                computing_ns=max(ns(r.computing), 0),
                comm_not_overlapped_ns=max(ns(r.comm_not_overlapped), 0),
                overlapped_ns=max(ns(r.overlapped), 0),
                comm_ns=max(ns(r.comm), 0),
                free_ns=max(ns(r.free), 0),
                stage_ns=ns(r.stage),
                bubble_ns=ns(r.bubble),
                comm_not_overlapped_excl_receive_ns=ns(r.excl_receive),
                preparing_ns=ns(r.preparing),
            )
        )
    if unreadable:
        issues.append(Issue(where, f"StepTraceTime: {unreadable} value(s) out of range (inf, or beyond int64 ns); "
                                   "read as absent"))
    return out


def _comm_from_analysis(db: SqliteDb) -> list[CommOp]:
    """CommAnalyzerTime (+ CommAnalyzerBandwidth): communication.json's content as tables.
    Durations in ms, start in µs, as in communication.json [inferred from msprof-analyze]."""
    if not db.has("CommAnalyzerTime"):
        return []
    t = db.frame(
        "CommAnalyzerTime",
        {
            "name": (("hccl_op_name",), _ANY),
            "group": (("group_name",), _ANY),
            "start": (("start_timestamp",), _REAL),
            "elapse": (("elapse_time",), _REAL),
            "transit": (("transit_time",), _REAL),
            "wait": (("wait_time",), _REAL),
            "sync": (("synchronization_time",), _REAL),
            "idle": (("idle_time",), _REAL),
            "step": (("step",), _ANY),
            "type": (("type",), _ANY),
        },
    )
    bw: dict[tuple[str, str, str], dict[str, dict]] = {}
    if db.has("CommAnalyzerBandwidth"):
        b = db.frame(
            "CommAnalyzerBandwidth",
            {
                "name": (("hccl_op_name",), _ANY),
                "group": (("group_name",), _ANY),
                "transport": (("transport_type",), _ANY),
                "size": (("transit_size",), _REAL),
                "time": (("transit_time",), _REAL),
                "bandwidth": (("bandwidth",), _REAL),
                "large": (("large_packet_ratio",), _REAL),
                "package": (("package_size",), _REAL),
                "count": (("count",), _REAL),
                "total": (("total_duration",), _REAL),
                "step": (("step",), _ANY),
            },
        )
        for r in b.itertuples(index=False):
            key = (str(r.name), str(r.group), str(r.step))
            link = bw.setdefault(key, {}).setdefault(
                str(r.transport),
                {"Transit Size(MB)": _f(r.size), "Transit Time(ms)": _f(r.time),
                 "Bandwidth(GB/s)": _f(r.bandwidth), "Large Packet Ratio": _f(r.large),
                 "Size Distribution": {}},
            )
            if r.package is not None and not np.isnan(r.package):
                link["Size Distribution"][_num_key(r.package)] = [_f(r.count), _f(r.total)]
    out = []
    for r in t.itertuples(index=False):
        name, group = str(r.name or ""), str(r.group or "")
        kind = str(r.type or "")
        if kind not in ("collective", "p2p"):
            kind = "p2p" if name.startswith(("hcom_send", "hcom_receive", "hcom_batchsendrecv")) else "collective"
        out.append(
            CommOp(
                name=name,
                group=group,
                step=_step_number(r.step) if r.step not in (None, "") else -1,
                kind=kind,
                start_ns=_us(r.start),
                elapse_ns=_ms(r.elapse),
                transit_ns=_ms(r.transit),
                wait_ns=_ms(r.wait),
                sync_ns=_ms(r.sync),
                idle_ns=_ms(r.idle),
                bandwidth=bw.get((name, group, str(r.step)), {}),
            )
        )
    return out


def _comm_matrix(db: SqliteDb) -> dict:
    """CommAnalyzerMatrix rows in communication_matrix.json's nesting:
    ``{step: {kind: {op: {"src-dst": {...}}}}}``."""
    cols = db.tables["CommAnalyzerMatrix"]
    out: dict = {}
    for row in db.query('SELECT * FROM "CommAnalyzerMatrix"'):
        rec = dict(zip(cols, row))
        step = str(rec.get("step", "step"))
        step_key = step if step.startswith("step") else f"step{step}"
        kind = str(rec.get("type") or "collective")
        op = str(rec.get("hccl_op_name") or "")
        group = rec.get("group_name")
        op_key = f"{op}@{group}" if group and "@" not in op else op
        link = f"{rec.get('src_rank')}-{rec.get('dst_rank')}"
        out.setdefault(step_key, {}).setdefault(kind, {}).setdefault(op_key, {})[link] = {
            "Transport Type": rec.get("transport_type"),
            "Transit Size(MB)": rec.get("transit_size"),
            "Transit Time(ms)": rec.get("transit_time"),
            "Bandwidth(GB/s)": rec.get("bandwidth"),
            "Op Name": rec.get("op_name", op),
        }
    return out


# ---------------------------------------------------------------------------------------------
# Helpers


def _clean(values: np.ndarray) -> np.ndarray:
    """``"2,3;\\r\\n3"`` → ``"2,3;3"`` (the model joins tensors with a bare ``;``)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v.replace("\r\n", "").replace("\n", "") if v and "\n" in v else (v or "")
    return out


def _module_k(text: str) -> int:
    """The instance number of "nn.Module: Linear_3"; -1 for one past int64 (30 digits)."""
    k = int64_of(text)
    return -1 if k is None else k


def _int_or_none(v: object) -> int | None:
    return int64_of(v, integral_floats=False)  # "²" and 30 digits are none, not a ValueError


def _f(v: object) -> float:
    f = float_of(v)  # inf (a REAL cast from "1e999") and 10**400 read as no value
    return float("nan") if f is None else f


def _us(v: float) -> int:
    ns = scaled_int64(v, 1000)
    return -1 if ns is None else ns


def _ms(v: float) -> int:
    ns = scaled_int64(v, 1_000_000)  # NaN, inf and 1e300 ms are no time (-1), not an overflow
    return -1 if ns is None else ns


def _num_key(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


# A DB export is a torch_npu result written as a DB: its root, raw data and job grouping are the
# text export's (one run may be text on one rank and DB-only on another).
READER = Reader(
    ProfileKind.TORCH_NPU_DB, read, probe_dir, probe_file, summary=read_summary,
    looks_for="ascend_pytorch_profiler*.db", watch=("**/ascend_pytorch_profiler*.db",), holder=torch_npu.bare_output, enclosing=torch_npu.enclosing,
    raw_dirs=torch_npu.RAW_DIRS, inputs=inputs, breakdown_source=BreakdownSource.ANALYSIS_DB,
    run_root=torch_npu.run_root, same_job_as=ProfileKind.TORCH_NPU, detail=1,
)
