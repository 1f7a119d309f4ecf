"""torch_npu DB export (``export_type=db``): ``ascend_pytorch_profiler_{rank}.db`` + ``analysis.db``
Framework times in ns; strings interned in STRING_IDS (framework ids from 1<<28).

The kernel -> source chain is the one msprof-analyze walks:
COMPUTE_TASK_INFO.globalTaskId = TASK.globalTaskId -> TASK.connectionId = CONNECTION_IDS.connectionId
-> CONNECTION_IDS.id = PYTORCH_API.connectionId -> PYTORCH_API.callchainId = PYTORCH_CALLCHAINS.id
-> STRING_IDS.value of PYTORCH_CALLCHAINS.stack, by stackDepth (0 = innermost).
"""

from __future__ import annotations

import json
import os
import sqlite3
import zlib
from dataclasses import replace
from pathlib import Path

from .clock import Clock, StepTimeline, Threads
from .overlap import step_overlap
from .run import AI_CORE, AI_CPU, AI_VECTOR_CORE, COMMUNICATION, HCCL, MIX_AIC, MIX_AIV, Frame, Run
from .tables import _pmu_defaults, pmu_columns
from .trace_events import linked
from .variant import KD_LEVEL1, TextVariant
from .write_text import OUTPUT_DIR, root_name, write_root_files

FRAMEWORK_ID_BASE = 1 << 28
FWD_BWD_OFFSET = 5 << 28
QUEUE_OFFSET = 4 << 28  # task-queue correlation ids kept apart from CANN connection ids [inferred]
API_TYPES = {50001: "op", 50002: "queue", 50003: "trace", 50004: "mstx", 20000: "acl", 15000: "model",
             10000: "node", 5500: "communication", 5000: "runtime"}
LEVEL_TYPE = {"acl": 20000, "model": 15000, "node": 10000, "communication": 5500, "runtime": 5000}
# TASK.taskType vocabulary (msprof DB; [inferred] spelling for the kernel kinds)
TASK_TYPES = {AI_CORE: "KERNEL_AICORE", AI_VECTOR_CORE: "KERNEL_AIVEC", AI_CPU: "KERNEL_AICPU",
              MIX_AIC: "KERNEL_MIX_AIC", MIX_AIV: "KERNEL_MIX_AIV", HCCL: "COMMUNICATION",
              COMMUNICATION: "COMMUNICATION", "DSA_SQE": "DSA_SQE"}
INVALID_U32 = 4294967295

SCHEMA = {
    "STRING_IDS": "id INTEGER PRIMARY KEY, value TEXT",
    "ENUM_API_TYPE": "id INTEGER PRIMARY KEY, name TEXT",
    "PYTORCH_API": ("startNs TEXT, endNs TEXT, globalTid INTEGER, connectionId INTEGER, name INTEGER, "
                    "sequenceNumber INTEGER, fwdThreadId INTEGER, inputDtypes INTEGER, inputShapes INTEGER, "
                    "callchainId INTEGER, type INTEGER"),
    "CONNECTION_IDS": "id INTEGER, connectionId INTEGER",
    "PYTORCH_CALLCHAINS": "id INTEGER, stack INTEGER, stackDepth INTEGER",
    "STEP_TIME": "id INTEGER, startNs INTEGER, endNs INTEGER",
    "GC_RECORD": "startNs INTEGER, endNs INTEGER, globalTid INTEGER",
    "RANK_DEVICE_MAP": "rankId INTEGER, deviceId INTEGER",
    "HOST_INFO": "hostUid TEXT, hostName TEXT",
    "META_DATA": "name TEXT, value TEXT",
    "TASK": ("startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER, globalTaskId INTEGER, "
             "globalPid INTEGER, taskType INTEGER, contextId INTEGER, streamId INTEGER, taskId INTEGER, "
             "modelId INTEGER"),
    "COMPUTE_TASK_INFO": ("name INTEGER, globalTaskId INTEGER, blockDim INTEGER, mixBlockDim INTEGER, "
                          "taskType INTEGER, opType INTEGER, inputFormats INTEGER, inputDataTypes INTEGER, "
                          "inputShapes INTEGER, outputFormats INTEGER, outputDataTypes INTEGER, "
                          "outputShapes INTEGER, attrInfo INTEGER, opState INTEGER, hf32Eligible INTEGER"),
    "TASK_PMU_INFO": "globalTaskId INTEGER, name INTEGER, value REAL",
    "CANN_API": "startNs INTEGER, endNs INTEGER, type INTEGER, globalTid INTEGER, connectionId INTEGER, name INTEGER",
    "COMMUNICATION_OP": ("opName INTEGER, startNs INTEGER, endNs INTEGER, connectionId INTEGER, groupName INTEGER, "
                         "opId INTEGER, relay INTEGER, retry INTEGER, dataType INTEGER, algType INTEGER, "
                         "count INTEGER, opType INTEGER"),
}
ANALYSIS_SCHEMA = {
    "StepTraceTime": ("deviceId INTEGER, step TEXT, computing REAL, communication_not_overlapped REAL, "
                      "overlapped REAL, communication REAL, free REAL, stage REAL, bubble REAL, "
                      "communication_not_overlapped_and_exclude_receive REAL, preparing REAL"),
}


class _Strings:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.next_cann = 1
        self.next_fw = FRAMEWORK_ID_BASE

    def cann(self, value: str) -> int:
        sid = self.ids.get(value)
        if sid is None:
            sid = self.ids[value] = self.next_cann
            self.next_cann += 1
        return sid

    def fw(self, value: str) -> int:
        sid = self.ids.get(value)
        if sid is None:
            sid = self.ids[value] = self.next_fw
            self.next_fw += 1
        return sid


def _create(con: sqlite3.Connection, schema: dict[str, str]) -> None:
    for table, cols in schema.items():
        con.execute(f"CREATE TABLE {table} ({cols})")


class _DbWriter:
    def __init__(self, run: Run, con: sqlite3.Connection) -> None:
        self.run = run
        self.con = con
        self.s = _Strings()
        self.th = Threads(run)
        self.next_conn_key = 1
        self.next_callchain = 1
        self.callchains: dict[tuple[str, ...], int] = {}
        self.next_task = 0
        self.pmu = pmu_columns(run, KD_LEVEL1)

    def gtid(self, tid: int) -> int:
        return (self.run.pid << 32) | tid

    def conn_key(self) -> int:
        k = self.next_conn_key
        self.next_conn_key += 1
        return k

    def callchain(self, frames: tuple[Frame, ...]) -> int | None:
        if not frames:
            return None
        key = tuple(f.text for f in frames)
        cid = self.callchains.get(key)
        if cid is None:
            cid = self.callchains[key] = self.next_callchain
            self.next_callchain += 1
            self.con.executemany("INSERT INTO PYTORCH_CALLCHAINS VALUES (?, ?, ?)",
                                 [(cid, self.s.fw(t), depth) for depth, t in enumerate(key)])
        return cid

    def step(self, tl: StepTimeline) -> None:
        run, s = self.run, self.s
        kernels = {k.uid: k for k in tl.kernels}
        fwd_seq = {f: seq for f, _, seq in tl.fwdbwd}
        bwd_seq = {n: seq for _, n, seq in tl.fwdbwd}
        api_rows, conn_rows = [], []
        for op in tl.ops:
            links = [kernels[u].connection_id for u in op.kernels if linked(kernels[u])]
            if op.uid in fwd_seq:
                links.append(FWD_BWD_OFFSET + fwd_seq[op.uid])
            if op.uid in bwd_seq:
                links.append(FWD_BWD_OFFSET + bwd_seq[op.uid])
            key = None
            if links:
                key = self.conn_key()
                conn_rows.extend((key, c) for c in links)
            frames = tuple(f for f in (op.stack or ()) if isinstance(f, Frame))
            dims = op.input_dims if run.config.record_shapes and op.input_dims else None
            types = op.input_types if run.config.record_shapes and op.input_types else None
            api_rows.append((str(op.start_ns), str(op.end_ns), self.gtid(op.tid), key, s.fw(op.name), op.seq,
                             op.fwd_thread, s.fw(types) if types else None, s.fw(dims) if dims else None,
                             self.callchain(frames), 50001))
        for q in tl.queue:
            for name, tid, start, dur in (("Enqueue", q.enqueue_tid, q.enqueue_ns, q.enqueue_dur_ns),
                                          (f"Dequeue@{q.scope}", self.th.dequeue, q.dequeue_ns, q.dequeue_dur_ns)):
                key = self.conn_key()
                conn_rows.append((key, QUEUE_OFFSET + q.correlation_id))
                api_rows.append((str(start), str(start + dur), self.gtid(tid), key, s.fw(name), -1, 0, None, None,
                                 None, 50002))
        self.con.executemany("INSERT INTO PYTORCH_API VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", api_rows)
        self.con.executemany("INSERT INTO CONNECTION_IDS VALUES (?, ?)", conn_rows)

        cann_rows = []
        if not run.level0:
            for c in tl.cann:
                api = c.name.split("@", 1)[1] if "@" in c.name else c.name
                cann_rows.append((c.start_ns, c.end_ns, LEVEL_TYPE.get(c.level, 20000), self.gtid(c.tid),
                                  c.connection_id, s.cann(api)))
        self.con.executemany("INSERT INTO CANN_API VALUES (?, ?, ?, ?, ?, ?)", cann_rows)

        task_rows, info_rows, pmu_rows, comm_rows = [], [], [], []
        for k in sorted(tl.kernels, key=lambda k: k.start_ns):
            gid = self.next_task
            self.next_task += 1
            ttype = TASK_TYPES.get(k.spec.core, k.spec.type)
            task_rows.append((k.start_ns, k.end_ns, run.device, k.connection_id, gid, run.pid, s.cann(ttype),
                              INVALID_U32, k.stream, k.task_id, INVALID_U32))
            if k.spec.is_comm:
                info = k.spec.comm
                comm_rows.append((s.cann(k.name), k.start_ns, k.end_ns, k.connection_id, s.cann(run.hccl_group),
                                  gid, 0, 0, s.cann("FP32"), s.cann("RING"),
                                  (info.bucket_bytes // 4 if info else 0), s.cann(k.spec.type)))
                continue
            if not k.spec.is_op:
                continue
            sp = k.spec
            info_rows.append((s.cann(k.name), gid, sp.block_dim, sp.mix_block_dim, s.cann(sp.core), s.cann(sp.type),
                              s.cann(sp.input_formats), s.cann(sp.input_dtypes), s.cann(sp.input_shapes),
                              s.cann(sp.output_formats), s.cann(sp.output_dtypes), s.cann(sp.output_shapes),
                              s.cann(""), s.cann(sp.op_state), s.cann(sp.hf32)))
            if self.pmu and sp.core not in (AI_CPU, "DSA_SQE"):
                for col, val in _pmu_defaults(k, self.pmu).items():
                    pmu_rows.append((gid, s.cann(col), float(val)))
        self.con.executemany("INSERT INTO TASK VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", task_rows)
        self.con.executemany("INSERT INTO COMPUTE_TASK_INFO VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             info_rows)
        self.con.executemany("INSERT INTO TASK_PMU_INFO VALUES (?, ?, ?)", pmu_rows)
        self.con.executemany("INSERT INTO COMMUNICATION_OP VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", comm_rows)
        self.con.execute("INSERT INTO STEP_TIME VALUES (?, ?, ?)", (tl.number, tl.start_ns, tl.end_ns))
        if run.config.gc_detect_threshold is not None:
            self.con.executemany("INSERT INTO GC_RECORD VALUES (?, ?, ?)",
                                 [(st, st + d, self.gtid(self.th.main)) for st, d in tl.gc])

    def finish(self) -> None:
        run, s = self.run, self.s
        self.con.executemany("INSERT INTO ENUM_API_TYPE VALUES (?, ?)", sorted(API_TYPES.items()))
        self.con.execute("INSERT INTO RANK_DEVICE_MAP VALUES (?, ?)", (run.rank, run.device))
        self.con.execute("INSERT INTO HOST_INFO VALUES (?, ?)", (str(zlib.crc32(run.hostname.encode()) * 7919), run.hostname))
        meta = [("SCHEMA_VERSION", "1.0.0"), ("torch_npu_version", run.torch_npu_version),
                ("cann_version", run.cann_version), ("rank_id", str(run.rank)),
                ("ENV_VARIABLES", json.dumps(dict(run.env)))]  # the same object as profiler_metadata.json's
        self.con.executemany("INSERT INTO META_DATA VALUES (?, ?)", meta)
        self.con.executemany("INSERT INTO STRING_IDS VALUES (?, ?)", [(i, v) for v, i in s.ids.items()])


def write_torch_npu_db(run: Run, parent_dir: str | os.PathLike[str], *, metadata_json: bool = True) -> Path:
    """Write the run as a torch_npu DB export; return the ``*_ascend_pt`` root. The environment
    is in META_DATA's ENV_VARIABLES either way; ``metadata_json=False`` leaves out
    profiler_metadata.json, as in the real CANN 8.0.0 DB export (only the DB then holds it)."""
    run = replace(run, config=replace(run.config, export_type=("db",)))
    root = Path(parent_dir) / root_name(run)
    out = root / OUTPUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    db_path = out / f"ascend_pytorch_profiler_{run.rank}.db"
    ana_path = out / "analysis.db"
    for p in (db_path, ana_path):
        if p.exists():
            p.unlink()
    con = sqlite3.connect(db_path)
    ana = sqlite3.connect(ana_path)
    end_ns = run.start_ns
    try:
        _create(con, SCHEMA)
        _create(ana, ANALYSIS_SCHEMA)
        w = _DbWriter(run, con)
        for tl in Clock(run).steps():
            end_ns = max(end_ns, tl.end_ns, *(k.end_ns for k in tl.kernels))
            w.step(tl)
            if tl.kernels:
                ov = step_overlap(tl)
                ana.execute("INSERT INTO StepTraceTime VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (run.device, str(tl.number), ov.computing_ns / 1000, ov.not_overlapped_ns / 1000,
                             ov.overlapped_ns / 1000, ov.comm_ns / 1000, ov.free_ns / 1000, ov.stage_ns / 1000, 0.0,
                             ov.not_overlapped_ns / 1000, ov.preparing_ns / 1000))
        w.finish()
        con.commit()
        ana.commit()
    finally:
        con.close()
        ana.close()
    omit = frozenset() if metadata_json else frozenset({"profiler_metadata.json"})
    write_root_files(run, root, end_ns=end_ns, variant=TextVariant(omit=omit))
    (out / "analyse.done").touch()
    return root
