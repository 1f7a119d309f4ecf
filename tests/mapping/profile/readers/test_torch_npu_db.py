"""torch_npu DB export reader, on DB files built here table by table

The workload below is described once (per step: a Linear, a ReLU with its backward, a Mul whose
backward is paired only by sequence number, an all-reduce, a ``.item()`` copy, an unlinked kernel);
the DB rows AND the expected figures are both derived from that description, never from the reader.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile.locations import ProfileLocation, no_progress
from msprof_lsp.mapping.profile.model import LinkKind, ProfileKind
from msprof_lsp.mapping.profile.readers import sqlite_db, torch_npu_db

from npu_db_builder import FWD_BWD_OFFSET, DbBuilder, write_analysis

PID, FWD_TID, BWD_TID = 4242, 4243, 4250
T0 = 1_736_413_971_558_972_000  # epoch ns
US = 1_000
STEP_NS = 10_000 * US
SITE = "/usr/local/python3.9/site-packages"
MODEL = "/home/ma-user/work/model.py"
TRAIN = "/home/ma-user/work/train.py"
LINEAR_STACK = [f"{SITE}/torch/nn/modules/linear.py(114): forward", f"{MODEL}(20): forward", f"{TRAIN}(41): <module>"]
RELU_STACK = [f"{SITE}/torch/nn/functional.py(1500): relu", f"{MODEL}(21): forward", f"{TRAIN}(41): <module>"]
MUL_STACK = [f"{MODEL}(22):forward", f"{TRAIN}(41):<module>"]  # older builds: no space after ':'
ITEM_STACK = [f"{TRAIN}(44): <module>"]
ALLREDUCE_STACK = [f"{SITE}/torch/distributed/distributed_c10d.py(2050): all_reduce", f"{TRAIN}(43): <module>"]


@dataclass
class Expected:
    """What the reader must return, built alongside the rows."""

    kernels: list[dict] = field(default_factory=list)
    steps: list[tuple[int, int, int]] = field(default_factory=list)
    comm_ms: list[dict] = field(default_factory=list)
    cann_api: list[tuple[str, str, int]] = field(default_factory=list)


def build_workload(tmp: Path, *, analysis_unit: str = "us", analysis: bool = True,
                   only: set[str] | None = None, extra: bool = False) -> tuple[Path, Expected]:
    b = DbBuilder()
    exp = Expected()
    conn = iter(range(1001, 10_000))
    fwdbwd = iter(range(FWD_BWD_OFFSET + 1, FWD_BWD_OFFSET + 100))
    seq = iter(range(7, 1000))

    def kernel(op: str, op_start: int, start: int, dur: int, name: str, op_type: str, core: str, *,
               link: LinkKind, first_frame: str | None, step: int, shapes: str = "", fwd: str | None = None,
               pmu: dict[str, float] | None = None) -> int:
        cid = next(conn)
        gtid = b.task(start, start + dur, connection=cid, task_type="KERNEL_AICORE" if core == "AI_CORE" else "KERNEL_AIVEC",
                      task_id=len(exp.kernels))
        b.compute_info(gtid, name=name, op_type=op_type, core=core, shapes=shapes, dtypes="DT_BF16;DT_BF16" if shapes else "",
                       formats="ND;ND" if shapes else "")
        for metric, value in (pmu or {}).items():
            b.rows["TASK_PMU_INFO"].append((gtid, b.s(metric, cann=True), value))
        exp.kernels.append(dict(name=name, type=op_type, core=core, start=start, dur=dur, op=op, op_start=op_start,
                                link=link, first_frame=first_frame, step=step, shapes=shapes, fwd=fwd,
                                pmu=pmu or {}))
        b.rows["CANN_API"].append((start - 5 * US, start - 4 * US, 10000, (PID << 32) | FWD_TID, cid,
                                   b.s("launch", cann=True)))
        exp.cann_api.append(("Node@launch", "node", start - 5 * US))
        return cid

    for step in (1, 2):
        s0 = T0 + (step - 1) * STEP_NS
        b.rows["STEP_TIME"].append((step, s0, s0 + STEP_NS))
        exp.steps.append((step, s0, s0 + STEP_NS))
        b.api(f"ProfilerStep#{step}", s0, s0 + STEP_NS, pid=PID, tid=FWD_TID)
        # Forward: aten::linear (stack) > aten::addmm > aclnnAddmm (launches MatMulV2 + TransData)
        t = s0 + 100 * US
        b.api("aten::linear", t, t + 500 * US, pid=PID, tid=FWD_TID, seq=next(seq), frames=LINEAR_STACK,
              shapes="128,256;\r\n512,256;\r\n512", dtypes="c10::BFloat16;\r\nc10::BFloat16;\r\nc10::BFloat16")
        b.api("aten::addmm", t + 50 * US, t + 400 * US, pid=PID, tid=FWD_TID, seq=next(seq))
        c1 = kernel("aclnnAddmm", t + 100 * US, t + 600 * US, 120 * US, "aclnnAddmm_MatMulCommon_MatMulV2",
                    "MatMulV2", "AI_CORE", link=LinkKind.STACK, first_frame=LINEAR_STACK[0], step=step,
                    shapes="128,256;256,512", pmu={"aic_mac_ratio": 0.61, "aic_mte2_ratio": 0.25})
        c2 = kernel("aclnnAddmm", t + 100 * US, t + 730 * US, 15 * US, "aclnnAddmm_TransData_TransData",
                    "TransData", "AI_CORE", link=LinkKind.STACK, first_frame=LINEAR_STACK[0], step=step)
        b.api("aclnnAddmm", t + 100 * US, t + 200 * US, pid=PID, tid=FWD_TID, connections=[c1, c2])
        # Forward ReLU, linked to its backward through a shared fwd/bwd connection id.
        t = s0 + 1000 * US
        relu_seq, link_id = next(seq), next(fwdbwd)
        b.api("aten::relu", t, t + 100 * US, pid=PID, tid=FWD_TID, seq=relu_seq, fwd_thread=0,
              frames=RELU_STACK, connections=[link_id])
        c3 = kernel("aclnnRelu", t + 20 * US, t + 800 * US, 8 * US, "aclnnRelu_Relu_Relu", "Relu", "AI_VECTOR_CORE",
                    link=LinkKind.STACK, first_frame=RELU_STACK[0], step=step)
        b.api("aclnnRelu", t + 20 * US, t + 70 * US, pid=PID, tid=FWD_TID, connections=[c3])
        # Forward Mul: its backward is paired by sequence number only.
        t = s0 + 1500 * US
        mul_seq = next(seq)
        b.api("aten::mul", t, t + 80 * US, pid=PID, tid=FWD_TID, seq=mul_seq, fwd_thread=0, frames=MUL_STACK)
        c4 = kernel("aclnnMul", t + 10 * US, t + 900 * US, 6 * US, "aclnnMul_Mul_Mul", "Mul", "AI_VECTOR_CORE",
                    link=LinkKind.STACK, first_frame=MUL_STACK[0], step=step)
        b.api("aclnnMul", t + 10 * US, t + 40 * US, pid=PID, tid=FWD_TID, connections=[c4])
        # Backward thread: no stacks, as in real data.
        t = s0 + 3000 * US
        b.api("autograd::engine::evaluate_function: MulBackward0", t, t + 100 * US, pid=PID, tid=BWD_TID,
              seq=mul_seq, fwd_thread=1)
        b.api("MulBackward0", t + 5 * US, t + 90 * US, pid=PID, tid=BWD_TID, seq=mul_seq, fwd_thread=1)
        c5 = kernel("aclnnMul", t + 10 * US, t + 1200 * US, 7 * US, "aclnnMul_Mul_Mul", "Mul", "AI_VECTOR_CORE",
                    link=LinkKind.BACKWARD, first_frame=MUL_STACK[0], step=step, fwd="aten::mul")
        b.api("aclnnMul", t + 10 * US, t + 50 * US, pid=PID, tid=BWD_TID, connections=[c5])
        t = s0 + 3500 * US
        b.api("autograd::engine::evaluate_function: ReluBackward0", t, t + 200 * US, pid=PID, tid=BWD_TID,
              seq=relu_seq, fwd_thread=1)
        b.api("ReluBackward0", t + 10 * US, t + 160 * US, pid=PID, tid=BWD_TID, seq=relu_seq, fwd_thread=1,
              connections=[link_id])
        b.api("aten::threshold_backward", t + 20 * US, t + 120 * US, pid=PID, tid=BWD_TID, seq=-1, fwd_thread=1)
        c6 = kernel("aclnnThresholdBackward", t + 30 * US, t + 1300 * US, 9 * US,
                    "aclnnThresholdBackward_ReluGrad_ReluGrad", "ReluGrad", "AI_VECTOR_CORE",
                    link=LinkKind.BACKWARD, first_frame=RELU_STACK[0], step=step, fwd="aten::relu")
        b.api("aclnnThresholdBackward", t + 30 * US, t + 80 * US, pid=PID, tid=BWD_TID, connections=[c6])
        # All-reduce: one COMMUNICATION_OP (+ sub-tasks in TASK that are not kernels of their own).
        t = s0 + 4000 * US
        cid = next(conn)
        b.api("c10d::allreduce_", t, t + 50 * US, pid=PID, tid=FWD_TID, frames=ALLREDUCE_STACK)
        b.api("HcclAllreduce", t + 5 * US, t + 45 * US, pid=PID, tid=FWD_TID, connections=[cid])
        comm_start, comm_dur = t + 1500 * US, 2000 * US
        b.rows["COMMUNICATION_OP"].append((b.s("hcom_allReduce__428_0_1", cann=True), comm_start, comm_start + comm_dur,
                                           cid, b.s("10.0.0.1%enp_60000_0_1", cann=True), step, 0, 0, 1, 2, 1024,
                                           b.s("hcom_allReduce_", cann=True)))
        for k in range(3):
            g = b.task(comm_start + k * 600 * US, comm_start + k * 600 * US + 500 * US, connection=cid,
                       task_type="COMMUNICATION", stream=9)
            b.rows["COMMUNICATION_TASK_INFO"].append((b.s("Notify_Wait", cann=True), g, 0, 0, 0, 0, 0, 0, 1, 0, 0,
                                                      0, 0, step))
        exp.kernels.append(dict(name="hcom_allReduce__428_0_1", type="hcom_allReduce_", core="COMMUNICATION",
                                start=comm_start, dur=comm_dur, op="HcclAllreduce", op_start=t + 5 * US,
                                link=LinkKind.STACK, first_frame=ALLREDUCE_STACK[0], step=step, shapes="",
                                fwd=None, pmu={}))
        exp.comm_ms.append(dict(name="hcom_allReduce__428_0_1", step=step, start_us=comm_start / 1000,
                                elapse=2.0, transit=1.2, wait=0.5, sync=0.3, idle=0.0))
        # .item(): a copy task launched from a child op; the stack sits on aten::item.
        t = s0 + 8000 * US
        b.api("aten::item", t, t + 300 * US, pid=PID, tid=FWD_TID, frames=ITEM_STACK)
        cid = next(conn)
        b.api("aten::_local_scalar_dense", t + 10 * US, t + 290 * US, pid=PID, tid=FWD_TID, connections=[cid])
        g = b.task(t + 100 * US, t + 130 * US, connection=cid, task_type="MEMCPY_ASYNC", stream=3)
        exp.kernels.append(dict(name="MEMCPY_ASYNC", type="MEMCPY_ASYNC", core="MEMCPY_ASYNC", start=t + 100 * US,
                                dur=30 * US, op="aten::_local_scalar_dense", op_start=t + 10 * US,
                                link=LinkKind.STACK, first_frame=ITEM_STACK[0], step=step, shapes="", fwd=None,
                                pmu={}))
        b.task(t + 140 * US, t + 141 * US, connection=-1, task_type="EVENT_RECORD", stream=3)  # not a kernel
        b.rows["CANN_API"].append((t + 20 * US, t + 250 * US, 20000, (PID << 32) | FWD_TID, cid + 50_000,
                                   b.s("aclrtSynchronizeStream", cann=True)))
        exp.cann_api.append(("AscendCL@aclrtSynchronizeStream", "acl", t + 20 * US))
        # A kernel whose connection id is in no CONNECTION_IDS group: kept, unlinked.
        g = b.task(s0 + 9000 * US, s0 + 9002 * US, connection=9_999_999, task_type="KERNEL_AIVEC")
        b.compute_info(g, name="aclnnInplaceZero_ZerosLikeAiCore_ZerosLike", op_type="ZerosLike", core="AI_VECTOR_CORE")
        exp.kernels.append(dict(name="aclnnInplaceZero_ZerosLikeAiCore_ZerosLike", type="ZerosLike",
                                core="AI_VECTOR_CORE", start=s0 + 9000 * US, dur=2 * US, op=None, op_start=None,
                                link=LinkKind.NONE, first_frame=None, step=step, shapes="", fwd=None, pmu={}))
        b.rows["GC_RECORD"].append((s0 + 9500 * US, s0 + 9600 * US, (PID << 32) | FWD_TID))

    b.rows["ENUM_API_TYPE"] = [(50001, "op"), (50002, "queue"), (50003, "trace"), (50004, "mstx"), (20000, "acl"),
                               (15000, "model"), (10000, "node"), (5500, "communication"), (5000, "runtime")]
    b.rows["RANK_DEVICE_MAP"] = [(3, 5)]
    b.rows["HOST_INFO"] = [("1234567890", "node-a")]
    b.rows["META_DATA"] = [("SCHEMA_VERSION", "1.0.2"), ("torch_npu_version", "2.5.1")]
    if extra:
        b.tables["FUTURE_TABLE"] = ["x INTEGER"]
        b.rows["FUTURE_TABLE"] = [(1,)]
        b.tables["TASK"] = b.tables["TASK"] + ["futureColumn TEXT"]
        b.rows["TASK"] = [r + ("x",) for r in b.rows["TASK"]]
    out = tmp / "run_1_20250101000000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    db = b.write(out / "ascend_pytorch_profiler_3.db", only=only)
    if analysis:
        scale = 1.0 if analysis_unit == "us" else 1e-3
        rows = []
        for step, s, e in exp.steps:
            computing = sum(k["dur"] for k in exp.kernels if k["step"] == step and k["core"] != "COMMUNICATION") / 1000
            not_overlapped, comm = 1500.0, 2000.0
            free = (e - s) / 1000 - computing - not_overlapped
            rows.append((5, str(step), computing * scale, not_overlapped * scale, (comm - not_overlapped) * scale,
                         comm * scale, free * scale, (e - s) / 1000 * scale, 0.0, not_overlapped * scale, 50.0 * scale))
        comm_rows = [(c["name"], "group0", c["start_us"], c["elapse"], c["transit"], c["wait"], c["sync"], c["idle"],
                      str(c["step"]), "collective") for c in exp.comm_ms]
        bw_rows = [(c["name"], "group0", "HCCS", 64.0, 1.2, 53.3, 1.0, 16.0, 4, 1.2, str(c["step"]), "collective")
                   for c in exp.comm_ms]
        matrix = [("hcom_allReduce__428_0_1", "group0", 0, 1, "HCCS", 64.0, 1.2, 53.3, "1", "collective",
                   "hcom_allReduce__428_0_1")]
        write_analysis(out / "analysis.db", {"StepTraceTime": rows, "CommAnalyzerTime": comm_rows,
                                             "CommAnalyzerBandwidth": bw_rows, "CommAnalyzerMatrix": matrix})
    return db, exp


def load(db: Path, rank: int | None = None):
    return torch_npu_db.read(ProfileLocation(ProfileKind.TORCH_NPU_DB, db, rank), no_progress)


def _kernel_rows(profile):
    k = profile.kernels
    return [k.iloc[i] for i in range(len(k))]


def test_kernels_names_types_cores_and_times(tmp_path: Path) -> None:
    db, exp = build_workload(tmp_path)
    p = load(db)
    assert p.meta.kind is ProfileKind.TORCH_NPU_DB
    k = p.kernels
    assert len(k) == len(exp.kernels)
    got = sorted(zip(k["start_ns"], k["name"].astype(str), k["type"].astype(str), k["core"].astype(str), k["dur_ns"]))
    want = sorted((e["start"], e["name"], e["type"], e["core"], e["dur"]) for e in exp.kernels)
    assert got == want
    # Per-type totals, independent sums over the description.
    totals: dict[str, int] = defaultdict(int)
    for e in exp.kernels:
        totals[e["type"]] += e["dur"]
    assert k.groupby(k["type"].astype(str))["dur_ns"].sum().to_dict() == dict(totals)
    # device time is work: compute kernels and copies, not the communication op
    assert p.device_time_ns == sum(e["dur"] for e in exp.kernels if e["core"] != "COMMUNICATION")
    # Shapes (no quotes), block dims, device from TASK, steps from the launching op.
    mm = k[k["type"] == "MatMulV2"]
    assert set(mm["input_shapes"].astype(str)) == {"128,256;256,512"}
    assert set(mm["input_dtypes"].astype(str)) == {"DT_BF16;DT_BF16"}
    assert set(mm["block_dim"]) == {8} and set(mm["device"]) == {0}
    by_start = {e["start"]: e for e in exp.kernels}
    assert [by_start[s]["step"] for s in k["start_ns"]] == list(k["step"])
    # PMU values pivoted to pmu:<name> columns, NaN elsewhere.
    assert list(mm["pmu:aic_mac_ratio"]) == [0.61, 0.61]
    assert k[k["type"] == "Relu"]["pmu:aic_mac_ratio"].isna().all()


def test_wait_time_is_the_gap_since_the_previous_task_on_the_device(tmp_path: Path) -> None:
    db, exp = build_workload(tmp_path)
    k = load(db).kernels
    ordered = sorted(exp.kernels, key=lambda e: e["start"])
    expected, end = [], None
    for e in ordered:
        expected.append(0 if end is None else max(e["start"] - end, 0))
        end = e["start"] + e["dur"] if end is None else max(end, e["start"] + e["dur"])
    assert list(k.sort_values("start_ns", kind="stable")["wait_ns"]) == expected


def test_links_stacks_backward_and_unlinked(tmp_path: Path) -> None:
    db, exp = build_workload(tmp_path)
    p = load(db)
    h = p.host_ops
    assert p.has_call_stacks
    for row in _kernel_rows(p):
        e = next(x for x in exp.kernels if x["start"] == row["start_ns"] and x["name"] == row["name"])
        assert row["link"] == e["link"].value, e["name"]
        if e["op"] is None:
            assert row["host_op"] == -1 and row["stack"] == -1
            continue
        op = int(row["host_op"])
        assert (h["name"].iloc[op], h["start_ns"].iloc[op]) == (e["op"], e["op_start"])
        frames = p.stack_of(int(row["stack"]))
        assert frames[0].raw == e["first_frame"]  # innermost first
        assert bool(row["backward"]) == (e["link"] is LinkKind.BACKWARD)
        if e["fwd"]:
            assert h["name"].iloc[int(row["fwd_op"])] == e["fwd"]


def test_frames_innermost_first_and_parsed(tmp_path: Path) -> None:
    db, _ = build_workload(tmp_path)
    p = load(db)
    h = p.host_ops
    linear = h[h["name"] == "aten::linear"].iloc[0]
    frames = p.stack_of(int(linear["stack"]))
    assert [f.raw for f in frames] == LINEAR_STACK
    assert (frames[1].file, frames[1].line, frames[1].func) == (MODEL, 20, "forward")
    mul = h[h["name"] == "aten::mul"].iloc[0]
    assert [(f.file, f.line, f.func) for f in p.stack_of(int(mul["stack"]))] == [
        (MODEL, 22, "forward"), (TRAIN, 41, "<module>")]
    # Input dims/types with the ;\r\n joins normalised to ';'.
    assert linear["input_dims"] == "128,256;512,256;512"
    assert linear["input_types"] == "c10::BFloat16;c10::BFloat16;c10::BFloat16"
    # pid/tid are the high/low 32 bits of globalTid.
    assert (int(linear["pid"]), int(linear["tid"])) == (PID, FWD_TID)
    # Nesting: aclnnAddmm inside aten::addmm inside aten::linear inside ProfilerStep#1.
    scope = h[(h["name"] == "aclnnAddmm")].index[0]
    chain = [h["name"].iloc[i] for i in p.host_op_chain(int(scope))]
    assert chain == ["aclnnAddmm", "aten::addmm", "aten::linear", "ProfilerStep#1"]


def test_forward_backward_pairs(tmp_path: Path) -> None:
    db, _ = build_workload(tmp_path)
    h = load(db).host_ops
    names = h["name"].astype(str).tolist()
    fwd = h["fwd_op"].tolist()
    paired = sorted({(names[i], names[f], int(h["start_ns"].iloc[f])) for i, f in enumerate(fwd) if f >= 0})
    relu_starts = sorted(h[h["name"] == "aten::relu"]["start_ns"])
    mul_starts = sorted(h[h["name"] == "aten::mul"]["start_ns"])
    # ReluBackward0 through the shared connection id; the MulBackward0 nodes (and the
    # ReLU evaluate_function node) through the sequence number. Each pairs with its own step's op.
    want = set()
    for s in relu_starts:
        want |= {("ReluBackward0", "aten::relu", s), ("autograd::engine::evaluate_function: ReluBackward0",
                                                      "aten::relu", s)}
    for s in mul_starts:
        want |= {("MulBackward0", "aten::mul", s), ("autograd::engine::evaluate_function: MulBackward0",
                                                    "aten::mul", s)}
    assert set(paired) == want


def test_steps_step_time_and_comm_totals(tmp_path: Path) -> None:
    db, exp = build_workload(tmp_path)
    p = load(db)
    assert [(s.id, s.start_ns, s.end_ns) for s in p.steps] == exp.steps
    assert p.meta.extra["step_trace_unit"] == "us"
    # Step time = computing + not overlapped + free = the step duration by construction.
    assert p.step_time() == (float(STEP_NS), "step_trace_time")
    assert [b.comm_not_overlapped_ns for b in p.step_breakdown] == [1_500_000, 1_500_000]
    # Communication: CommAnalyzerTime in ms → ns.
    assert len(p.comm_ops) == len(exp.comm_ms)
    assert sum(c.elapse_ns for c in p.comm_ops) == round(sum(c["elapse"] for c in exp.comm_ms) * 1e6)
    assert sum(c.wait_ns for c in p.comm_ops) == round(sum(c["wait"] for c in exp.comm_ms) * 1e6)
    assert [c.step for c in p.comm_ops] == [c["step"] for c in exp.comm_ms]
    assert p.comm_ops[0].bandwidth["HCCS"]["Bandwidth(GB/s)"] == 53.3
    assert p.comm_ops[0].bandwidth["HCCS"]["Size Distribution"] == {"16": [4.0, 1.2]}
    assert "hcom_allReduce__428_0_1@group0" in p.comm_matrix["step1"]["collective"]
    # The HCCL kernels' device time equals the COMMUNICATION_OP spans.
    k = p.kernels
    assert int(k[k["core"] == "COMMUNICATION"]["dur_ns"].sum()) == sum(
        e["dur"] for e in exp.kernels if e["core"] == "COMMUNICATION")


def test_step_trace_in_ms_is_recognised_by_magnitude(tmp_path: Path) -> None:
    db, _ = build_workload(tmp_path, analysis_unit="ms")
    p = load(db)
    assert p.meta.extra["step_trace_unit"] == "ms"
    assert p.step_time() == (float(STEP_NS), "step_trace_time")
    assert any("milliseconds" in i.message for i in p.issues)


def test_without_analysis_db_comm_ops_come_from_communication_op(tmp_path: Path) -> None:
    db, exp = build_workload(tmp_path, analysis=False)
    p = load(db)
    assert p.step_breakdown == []
    assert p.step_time() == (float(STEP_NS), "ProfilerStep")
    assert [(c.name, c.step, c.elapse_ns, c.group) for c in p.comm_ops] == [
        (e["name"], e["step"], e["dur"], "10.0.0.1%enp_60000_0_1") for e in exp.kernels if e["core"] == "COMMUNICATION"]
    assert any("analysis.db" in i.path for i in p.issues)


def test_host_events_meta_and_modules(tmp_path: Path) -> None:
    db, exp = build_workload(tmp_path)
    p = load(db)
    ev = p.host_events
    cann = ev[ev["cat"] == "cann"]
    assert sorted(zip(cann["name"].astype(str), cann["level"].astype(str), cann["start_ns"])) == sorted(exp.cann_api)
    assert set(cann["pid"]) == {PID} and set(cann["tid"]) == {FWD_TID}
    gc = ev[ev["cat"] == "gc"]
    assert list(gc["dur_ns"]) == [100 * US, 100 * US]
    assert p.meta.rank == 3 and p.meta.device_id == 5
    assert p.meta.torch_npu_version == "2.5.1"
    assert p.meta.extra["host_name"] == "node-a"
    assert p.meta.extra["meta_data"]["SCHEMA_VERSION"] == "1.0.2"
    assert str(db) in p.meta.files


def test_extra_tables_and_columns_are_ignored(tmp_path: Path) -> None:
    db1, _ = build_workload(tmp_path / "a")
    db2, _ = build_workload(tmp_path / "b", extra=True)
    k1, k2 = load(db1).kernels, load(db2).kernels
    assert k1.drop(columns=[]).equals(k2)


def test_missing_optional_tables_are_issues(tmp_path: Path) -> None:
    from npu_db_builder import TABLES

    keep = set(TABLES) - {"PYTORCH_CALLCHAINS", "CANN_API", "GC_RECORD", "TASK_PMU_INFO"}
    db, exp = build_workload(tmp_path, only=keep)
    p = load(db)
    assert not p.has_call_stacks
    assert any("PYTORCH_CALLCHAINS" in i.message for i in p.issues)
    assert len(p.kernels) == len(exp.kernels)
    # Without stacks: forward kernels stay HOST-linked, backward ones still name their forward op.
    want = sorted((e["start"], LinkKind.BACKWARD.value if e["link"] is LinkKind.BACKWARD else
                   LinkKind.HOST.value if e["op"] else LinkKind.NONE.value) for e in exp.kernels)
    assert sorted(zip(p.kernels["start_ns"], p.kernels["link"].astype(str))) == want
    assert (p.kernels["stack"] == -1).all()
    assert not any(c.startswith("pmu:") for c in p.kernels.columns)
    assert len(p.host_events) == 0


def test_no_framework_tables_still_reads_kernels(tmp_path: Path) -> None:
    from npu_db_builder import TABLES

    keep = {t for t in TABLES if t not in {"PYTORCH_API", "CONNECTION_IDS", "PYTORCH_CALLCHAINS"}}
    db, exp = build_workload(tmp_path, only=keep, analysis=False)
    p = load(db)
    assert len(p.kernels) == len(exp.kernels)
    assert set(p.kernels["link"].astype(str)) == {LinkKind.NONE.value}
    assert any("PYTORCH_API" in i.message for i in p.issues)


def test_empty_tables(tmp_path: Path) -> None:
    b = DbBuilder()
    db = b.write(tmp_path / "ascend_pytorch_profiler.db")
    p = load(db)
    assert len(p.kernels) == 0 and len(p.host_ops) == 0 and p.steps == [] and p.comm_ops == []
    assert p.step_time() == (0.0, "unknown")


def test_db_found_from_root_and_output_dir(tmp_path: Path) -> None:
    db, exp = build_workload(tmp_path)
    for given in (db.parent, db.parent.parent):
        p = torch_npu_db.read(ProfileLocation(ProfileKind.TORCH_NPU_DB, given, 3), no_progress)
        assert len(p.kernels) == len(exp.kernels) and p.meta.path == str(db)


@pytest.mark.parametrize(
    "content,message",
    [
        (b"", "empty file"),
        (b"this is not a database at all, just text\n" * 10, "not a SQLite database"),
    ],
)
def test_not_a_database(tmp_path: Path, content: bytes, message: str) -> None:
    db = tmp_path / "ascend_pytorch_profiler_0.db"
    db.write_bytes(content)
    with pytest.raises(ProfileError) as err:
        load(db)
    assert message in str(err.value) and str(db) in str(err.value)


def test_truncated_database(tmp_path: Path) -> None:
    good, _ = build_workload(tmp_path)
    data = good.read_bytes()
    bad = tmp_path / "cut" / "ascend_pytorch_profiler_0.db"
    bad.parent.mkdir()
    bad.write_bytes(data[: len(data) // 3])  # half-copied file: header fine, pages missing
    with pytest.raises(ProfileError) as err:
        load(bad)
    assert str(bad) in str(err.value)
    # Garbage in the middle of the pages.
    bad2 = tmp_path / "cut" / "ascend_pytorch_profiler_1.db"
    bad2.write_bytes(data[:4096] + os.urandom(len(data) - 4096))
    with pytest.raises(ProfileError):
        load(bad2)


def test_locked_database_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, _ = build_workload(tmp_path)
    monkeypatch.setattr(sqlite_db, "LOCK_TIMEOUT_S", 0.05)
    writer = sqlite3.connect(db)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(ProfileError) as err:
            load(db)
        assert "locked" in str(err.value)
    finally:
        writer.rollback()
        writer.close()


def test_opened_read_only_file_untouched(tmp_path: Path) -> None:
    db, _ = build_workload(tmp_path)
    analysis = db.parent / "analysis.db"
    before = {p: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in (db, analysis)}
    listing = sorted(os.listdir(db.parent))
    load(db)
    after = {p: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in (db, analysis)}
    assert before == after
    assert sorted(os.listdir(db.parent)) == listing  # no journal or wal files left behind
    # And a read-only file system location works (no write access needed at all).
    db.chmod(0o444)
    analysis.chmod(0o444)
    db.parent.chmod(0o555)
    try:
        assert len(load(db).kernels) > 0
    finally:
        db.parent.chmod(0o755)


def test_profiler_info_of_the_run_root_fills_meta(tmp_path: Path) -> None:
    import json

    db, _ = build_workload(tmp_path)
    root = db.parent.parent
    info = {
        "config": {"common_config": {"with_stack": True, "record_shapes": True},
                   "experimental_config": {"_profiler_level": "Level1", "_export_type": ["db"]}},
        "torch_npu_version": "2.9.0", "cann_version": "8.5.0", "rank_id": "3",
    }
    (root / "profiler_info_3.json").write_text(json.dumps(info))
    p = load(db)
    assert (p.meta.torch_npu_version, p.meta.cann_version, p.meta.level) == ("2.9.0", "8.5.0", "Level1")
    assert p.meta.with_stack is True and p.meta.rank == 3
    assert str(root / "profiler_info_3.json") in p.meta.files


def test_cache_key_covers_analysis_db_and_profiler_info(tmp_path: Path) -> None:
    import json

    from msprof_lsp.mapping.profile import cache
    from msprof_lsp.mapping.profile.load import load_location

    db, _ = build_workload(tmp_path)
    (db.parent.parent / "profiler_info_3.json").write_text(json.dumps({"rank_id": 3}))
    loc = ProfileLocation(ProfileKind.TORCH_NPU_DB, db, 3)
    names = {p.name for p in cache.input_files(loc)}
    # each database's -wal is an input too, while it exists (its pending rows are read)
    assert names == {db.name, "analysis.db", "profiler_info_3.json", db.name + "-wal", "analysis.db-wal"}
    first = load_location(loc, cache_dir=tmp_path / "cache")
    assert first.meta.extra["step_trace_unit"] == "us"
    # Rewriting analysis.db (ms now) must not be answered from the stale cache entry.
    (db.parent / "analysis.db").unlink()
    build_workload(tmp_path / "ms", analysis_unit="ms")
    (tmp_path / "ms" / db.parent.relative_to(tmp_path) / "analysis.db").rename(db.parent / "analysis.db")
    assert load_location(loc, cache_dir=tmp_path / "cache").meta.extra["step_trace_unit"] == "ms"


def test_meta_data_env_variables_read_into_env(tmp_path: Path) -> None:
    # The DB export keeps ENV_VARIABLES as one META_DATA row whose value is the JSON object
    # profiler_metadata.json holds (the real CANN 8.0.0 export writes no profiler_metadata.json).
    db, _ = build_workload(tmp_path)
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO META_DATA VALUES (?, ?)",
                    ("ENV_VARIABLES", json.dumps({"ACLNN_CACHE_LIMIT": "", "HCCL_ALGO": None, "HOST_CACHE_CAPACITY": "20"})))
    p = load(db)
    assert p.meta.env == {"ACLNN_CACHE_LIMIT": "", "HCCL_ALGO": "", "HOST_CACHE_CAPACITY": "20"}
    assert p.meta.env_source == "META_DATA ENV_VARIABLES"
    assert "ENV_VARIABLES" not in p.meta.extra["meta_data"]


def test_meta_data_env_variables_not_json_is_one_issue(tmp_path: Path) -> None:
    db, _ = build_workload(tmp_path)
    with sqlite3.connect(db) as con:
        con.execute("INSERT INTO META_DATA VALUES (?, ?)", ("ENV_VARIABLES", "{not json"))
    p = load(db)
    assert p.meta.env == {} and p.meta.env_source == ""
    assert [i.message for i in p.issues if "ENV_VARIABLES" in i.message] == ["ENV_VARIABLES is not JSON; ignored"]


def test_real_db_meta_data_env_equals_text_export_metadata() -> None:
    from tests.conftest import shared_fixture

    root = shared_fixture("Ascend-msinsight/db/level1/rank0_ascend_pt")
    text_md = shared_fixture("Ascend-msinsight/text/level1/rank0_ascend_pt/profiler_metadata.json")
    assert not (root / "profiler_metadata.json").exists()
    p = torch_npu_db.read(ProfileLocation(ProfileKind.TORCH_NPU_DB, root, 0), no_progress)
    assert p.meta.env_source == "META_DATA ENV_VARIABLES"
    # the same job's text capture recorded the same (all unset) variables
    assert p.meta.env == json.loads(text_md.read_text(encoding="utf-8"))["ENV_VARIABLES"]
    assert p.meta.env["ACLNN_CACHE_LIMIT"] == ""


def test_blob_cells_come_back_as_text(tmp_path: Path) -> None:
    """Found by the 20,000-case campaign (seed 27): a BLOB ``b"\\x00\\xff"`` in STRING_IDS.value (or
    any text column) reached the name regexes and pandas' string conversion as bytes, an internal
    error. Every query gives text, invalid UTF-8 replaced, as for a damaged text cell."""
    path = tmp_path / "t.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value)")  # no affinity: 7 stays a number
    con.execute("CREATE TABLE T (id INTEGER, name)")
    con.executemany("INSERT INTO STRING_IDS VALUES (?, ?)", [(1, "MatMul"), (2, b"\x00\xffx"), (3, 7)])
    con.executemany("INSERT INTO T VALUES (?, ?)", [(1, "a"), (2, b"Relu\xff")])
    con.commit()
    con.close()
    with sqlite_db.SqliteDb(path) as db:
        assert list(db.strings()) == ["MatMul", "\x00\ufffdx", "7"]
        assert list(db.resolve(np.array([1, 2], dtype=np.int64))) == ["MatMul", "\x00\ufffdx"]
        assert list(db.frame("T", {"name": (("name",), "any")})["name"]) == ["a", "Relu\ufffd"]
        assert db.query("SELECT name FROM T WHERE id = 2") == [("Relu\ufffd",)]
