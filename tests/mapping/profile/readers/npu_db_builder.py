"""Writes torch_npu DB exports for tests, table by table exactly lists them.

No public sample of the DB export exists, so tests build their own: one ``DbBuilder`` per file,
strings interned into STRING_IDS (framework ids from ``1 << 28``, CANN ids below, as torch_npu
does), times written as TEXT in PYTORCH_API (as torch_npu stores them) and INTEGER elsewhere.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

FWK_STRING_BASE = 1 << 28
FWD_BWD_OFFSET = 5 << 28  #: fwd/bwd link connection ids

TABLES: dict[str, list[str]] = {
    "STRING_IDS": ["id INTEGER PRIMARY KEY", "value TEXT"],
    "ENUM_API_TYPE": ["id INTEGER PRIMARY KEY", "name TEXT"],
    "PYTORCH_API": [
        "startNs TEXT", "endNs TEXT", "globalTid INTEGER", "connectionId INTEGER", "name INTEGER",
        "sequenceNumber INTEGER", "fwdThreadId INTEGER", "inputDtypes INTEGER", "inputShapes INTEGER",
        "callchainId INTEGER", "type INTEGER",
    ],
    "CONNECTION_IDS": ["id INTEGER", "connectionId INTEGER"],
    "PYTORCH_CALLCHAINS": ["id INTEGER", "stack INTEGER", "stackDepth INTEGER"],
    "STEP_TIME": ["id INTEGER", "startNs INTEGER", "endNs INTEGER"],
    "GC_RECORD": ["startNs INTEGER", "endNs INTEGER", "globalTid INTEGER"],
    "RANK_DEVICE_MAP": ["rankId INTEGER", "deviceId INTEGER"],
    "HOST_INFO": ["hostUid TEXT", "hostName TEXT"],
    "META_DATA": ["name TEXT", "value TEXT"],
    "TASK": [
        "startNs INTEGER", "endNs INTEGER", "deviceId INTEGER", "connectionId INTEGER",
        "globalTaskId INTEGER", "globalPid INTEGER", "taskType INTEGER", "contextId INTEGER",
        "streamId INTEGER", "taskId INTEGER", "modelId INTEGER",
    ],
    "COMPUTE_TASK_INFO": [
        "name INTEGER", "globalTaskId INTEGER", "blockNum INTEGER", "mixBlockNum INTEGER",
        "taskType INTEGER", "opType INTEGER", "inputFormats INTEGER", "inputDataTypes INTEGER",
        "inputShapes INTEGER", "outputFormats INTEGER", "outputDataTypes INTEGER", "outputShapes INTEGER",
        "attrInfo INTEGER", "opState INTEGER", "hf32Eligible INTEGER",
    ],
    "TASK_PMU_INFO": ["globalTaskId INTEGER", "name INTEGER", "value NUMERIC"],
    "CANN_API": [
        "startNs INTEGER", "endNs INTEGER", "type INTEGER", "globalTid INTEGER", "connectionId INTEGER",
        "name INTEGER",
    ],
    "COMMUNICATION_OP": [
        "opName INTEGER", "startNs INTEGER", "endNs INTEGER", "connectionId INTEGER", "groupName INTEGER",
        "opId INTEGER", "relay INTEGER", "retry INTEGER", "dataType INTEGER", "algType INTEGER",
        "count NUMERIC", "opType INTEGER",
    ],
    "COMMUNICATION_TASK_INFO": [
        "name INTEGER", "globalTaskId INTEGER", "taskType INTEGER", "planeId INTEGER", "groupName INTEGER",
        "notifyId INTEGER", "rdmaType INTEGER", "srcRank INTEGER", "dstRank INTEGER",
        "transportType INTEGER", "size INTEGER", "dataType INTEGER", "linkType INTEGER", "opId INTEGER",
    ],
}

ANALYSIS_TABLES: dict[str, list[str]] = {
    "StepTraceTime": [
        "deviceId INTEGER", "step TEXT", "computing NUMERIC", "communication_not_overlapped NUMERIC",
        "overlapped NUMERIC", "communication NUMERIC", "free NUMERIC", "stage NUMERIC", "bubble NUMERIC",
        "communication_not_overlapped_and_exclude_receive NUMERIC", "preparing NUMERIC",
    ],
    "CommAnalyzerTime": [
        "hccl_op_name TEXT", "group_name TEXT", "start_timestamp NUMERIC", "elapse_time NUMERIC",
        "transit_time NUMERIC", "wait_time NUMERIC", "synchronization_time NUMERIC", "idle_time NUMERIC",
        "step TEXT", "type TEXT",
    ],
    "CommAnalyzerBandwidth": [
        "hccl_op_name TEXT", "group_name TEXT", "transport_type TEXT", "transit_size NUMERIC",
        "transit_time NUMERIC", "bandwidth NUMERIC", "large_packet_ratio NUMERIC", "package_size NUMERIC",
        "count NUMERIC", "total_duration NUMERIC", "step TEXT", "type TEXT",
    ],
    "CommAnalyzerMatrix": [
        "hccl_op_name TEXT", "group_name TEXT", "src_rank INTEGER", "dst_rank INTEGER", "transport_type TEXT",
        "transit_size NUMERIC", "transit_time NUMERIC", "bandwidth NUMERIC", "step TEXT", "type TEXT",
        "op_name TEXT",
    ],
}

API_TYPES = [(50001, "op"), (50002, "queue"), (50003, "trace"), (50004, "mstx"), (20000, "acl"),
             (15000, "model"), (10000, "node"), (5500, "communication"), (5000, "runtime")]


def global_tid(pid: int, tid: int) -> int:
    return (pid << 32) | tid


class DbBuilder:
    """Collects rows per table, then writes one sqlite file."""

    def __init__(self, tables: dict[str, list[str]] | None = None) -> None:
        self.tables = dict(TABLES if tables is None else tables)
        self.rows: dict[str, list[tuple]] = {t: [] for t in self.tables}
        self._strings: dict[str, int] = {}
        self._next_fwk = FWK_STRING_BASE
        self._next_cann = 1
        self._next_chain = 0
        self._next_group = 0
        self._next_gtid = 1

    # -- interning ---------------------------------------------------------------------------

    def s(self, text: str | None, *, cann: bool = False) -> int | None:
        """The STRING_IDS id of ``text`` (None stays NULL)."""
        if text is None:
            return None
        key = ("c:" if cann else "f:") + text
        sid = self._strings.get(key)
        if sid is None:
            if cann:
                sid, self._next_cann = self._next_cann, self._next_cann + 1
            else:
                sid, self._next_fwk = self._next_fwk, self._next_fwk + 1
            self._strings[key] = sid
            self.rows["STRING_IDS"].append((sid, text))
        return sid

    def callchain(self, frames: list[str]) -> int:
        """One PYTORCH_CALLCHAINS id; ``frames`` innermost first (stackDepth 0)."""
        cid = self._next_chain
        self._next_chain += 1
        # Written outermost first on purpose: readers must order by stackDepth, not row order.
        for depth in reversed(range(len(frames))):
            self.rows["PYTORCH_CALLCHAINS"].append((cid, self.s(frames[depth]), depth))
        return cid

    def connection_group(self, connection_ids: list[int]) -> int:
        gid = self._next_group
        self._next_group += 1
        for c in connection_ids:
            self.rows["CONNECTION_IDS"].append((gid, c))
        return gid

    # -- rows --------------------------------------------------------------------------------

    def api(
        self,
        name: str,
        start: int,
        end: int,
        *,
        pid: int,
        tid: int,
        kind: int = 50001,
        connections: list[int] | None = None,
        seq: int = -1,
        fwd_thread: int = 0,
        shapes: str | None = None,
        dtypes: str | None = None,
        frames: list[str] | None = None,
    ) -> None:
        group = self.connection_group(connections) if connections else None
        chain = self.callchain(frames) if frames else None
        self.rows["PYTORCH_API"].append(
            (str(start), str(end), global_tid(pid, tid), group, self.s(name), seq, fwd_thread,
             self.s(dtypes), self.s(shapes), chain, kind)
        )

    def task(
        self,
        start: int,
        end: int,
        *,
        connection: int,
        task_type: str,
        device: int = 0,
        stream: int = 2,
        task_id: int = 0,
    ) -> int:
        gtid = self._next_gtid
        self._next_gtid += 1
        self.rows["TASK"].append(
            (start, end, device, connection, gtid, 77, self.s(task_type, cann=True), 0, stream, task_id, 4294967295)
        )
        return gtid

    def compute_info(
        self,
        gtid: int,
        *,
        name: str,
        op_type: str,
        core: str,
        block: int = 8,
        shapes: str = "",
        dtypes: str = "",
        formats: str = "",
        out_shapes: str = "",
        op_state: str = "dynamic",
    ) -> None:
        c = lambda t: self.s(t, cann=True)  # noqa: E731
        self.rows["COMPUTE_TASK_INFO"].append(
            (c(name), gtid, block, 0, c(core), c(op_type), c(formats), c(dtypes), c(shapes), c(formats),
             c(dtypes), c(out_shapes), c(""), c(op_state), 0)
        )

    def write(self, path: Path, *, only: set[str] | None = None) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(path)
        for table, cols in self.tables.items():
            if only is not None and table not in only:
                continue
            con.execute(f'CREATE TABLE "{table}" ({", ".join(cols)})')
            rows = self.rows.get(table, [])
            if rows:
                marks = ", ".join("?" * len(cols))
                con.executemany(f'INSERT INTO "{table}" VALUES ({marks})', rows)
        con.commit()
        con.close()
        return path


def write_analysis(path: Path, rows: dict[str, list[tuple]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    for table, cols in ANALYSIS_TABLES.items():
        con.execute(f'CREATE TABLE "{table}" ({", ".join(cols)})')
        if rows.get(table):
            con.executemany(f'INSERT INTO "{table}" VALUES ({", ".join("?" * len(cols))})', rows[table])
    con.commit()
    con.close()
    return path
