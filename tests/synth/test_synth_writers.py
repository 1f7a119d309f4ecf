"""The synthetic writers produce files exactly as the reference describes them.

Every expectation here is computed independently of the writers: from the reference's header
lists (typed in below), the real fixtures' header rows, the test's own walk of the run
description, or the written files read back with json / csv / sqlite3.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import sqlite3
import tracemalloc
from collections import Counter, defaultdict
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import shared_fixture
from tests.synth import (
    TextVariant,
    UserCall,
    truth,
    write_kineto,
    write_msprof_cli,
    write_torch_npu_db,
    write_torch_npu_text,
)
from tests.synth.examples import small_run, with_config

OUT = "ASCEND_PROFILER_OUTPUT"
TS_RE = re.compile(r"^\d{16}\.\d{3}$")
FRAME_RE = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\):\s?(?P<func>.*)$")

# Reference header lists, typed in by hand.
KD_LEVEL1 = ("Step Id,Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),"
             "Duration(us),Wait Time(us),Block Num,Mix Block Num,HF32 Eligible,Input Shapes,Input Data Types,"
             "Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID").split(",")
KD_LEVEL0 = ("Step Id,Device_id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Num,"
             "Mix Block Num,Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types,"
             "Output Formats").split(",")
OPERATOR_DETAILS = ["Name", "Input Shapes", "Call Stack", "Host Self Duration(us)", "Host Total Duration(us)",
                    "Device Self Duration(us)", "Device Total Duration(us)", "Device Self Duration With AICore(us)",
                    "Device Total Duration With AICore(us)"]
STEP_TRACE = ["Device_id", "Step", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication",
              "Free", "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"]
OP_STATISTIC = ["Device_id", "OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)",
                "Max Time(us)", "Ratio(%)"]
API_STATISTIC = ["Device_id", "Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)", "Variance"]
OP_SUMMARY = ("Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,Task Start Time(us),"
              "Task Duration(us),Task Wait Time(us),Block Num,Mix Block Num,HF32 Eligible,Input Shapes,"
              "Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID").split(",")
DB_TABLES = {
    "PYTORCH_API": ["startNs", "endNs", "globalTid", "connectionId", "name", "sequenceNumber", "fwdThreadId",
                    "inputDtypes", "inputShapes", "callchainId", "type"],
    "ENUM_API_TYPE": ["id", "name"],
    "CONNECTION_IDS": ["id", "connectionId"],
    "PYTORCH_CALLCHAINS": ["id", "stack", "stackDepth"],
    "STRING_IDS": ["id", "value"],
    "STEP_TIME": ["id", "startNs", "endNs"],
    "GC_RECORD": ["startNs", "endNs", "globalTid"],
    "RANK_DEVICE_MAP": ["rankId", "deviceId"],
    "HOST_INFO": ["hostUid", "hostName"],
    "META_DATA": ["name", "value"],
    "TASK": ["startNs", "endNs", "deviceId", "connectionId", "globalTaskId", "globalPid", "taskType", "contextId",
             "streamId", "taskId", "modelId"],
    "COMPUTE_TASK_INFO": ["name", "globalTaskId", "blockDim", "mixBlockDim", "taskType", "opType", "inputFormats",
                          "inputDataTypes", "inputShapes", "outputFormats", "outputDataTypes", "outputShapes",
                          "attrInfo", "opState", "hf32Eligible"],
    "TASK_PMU_INFO": ["globalTaskId", "name", "value"],
    "CANN_API": ["startNs", "endNs", "type", "globalTid", "connectionId", "name"],
}
STEP_TRACE_TIME_DB = ["deviceId", "step", "computing", "communication_not_overlapped", "overlapped", "communication",
                      "free", "stage", "bubble", "communication_not_overlapped_and_exclude_receive", "preparing"]


def exact_run(**kw):
    """The small example with no jitter, so kernel durations equal the description's."""
    return replace(small_run(**kw), jitter_ns=0)


def read_csv(path: Path, encoding: str = "utf-8") -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="", encoding=encoding) as f:
        rows = list(csv.reader(f))
    return rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]


def ns(text: str) -> int:
    return int(Decimal(text.strip()) * 1000)


def description_kernels(run) -> Counter:
    """(type -> [count, total ns]) walked straight from the description, without the clock."""
    out: Counter = Counter()
    durs: Counter = Counter()

    def walk(op, in_bwd_pending):
        for o in op.walk():
            for k in o.kernels:
                if k.type != "MEMCPY_ASYNC":
                    out[k.type] += 1
                    durs[k.type] += k.dur_ns
            if o.autograd:
                in_bwd_pending.append(o)

    for step in run.steps:
        pending: list = []
        for item in step.items:
            if not isinstance(item, UserCall):
                continue
            for la in item.launches:
                walk(la.op, pending)
            if item.backward:
                for fwd in pending:
                    for b in fwd.backward:
                        walk(b, [])
                for c in item.comm:
                    walk(c.op, [])
                pending = []
    return out, durs


@pytest.fixture(scope="module")
def text_export(tmp_path_factory):
    run = exact_run()
    root = write_torch_npu_text(run, tmp_path_factory.mktemp("text"))
    trace = json.loads((root / OUT / "trace_view.json").read_text(encoding="utf-8"))
    return run, root, trace


def procs(trace) -> dict[str, int]:
    return {e["args"]["name"]: e["pid"] for e in trace if e.get("ph") == "M" and e["name"] == "process_name"}


# -- layout of the export -------------------------------------------------------------------------------------


def test_root_layout_and_info_files(text_export):
    run, root, _ = text_export
    assert re.fullmatch(r".+_\d{17}_ascend_pt", root.name)
    assert root.name.startswith(f"{run.hostname}_{run.pid}_")
    names = {p.name for p in (root / OUT).iterdir()}
    assert {"trace_view.json", "kernel_details.csv", "operator_details.csv", "step_trace_time.csv",
            "op_statistic.csv", "api_statistic.csv", "communication.json", "communication_matrix.json",
            "analyse.done"} <= names
    assert (root / OUT / "analyse.done").stat().st_size == 0
    info = json.loads((root / f"profiler_info_{run.rank}.json").read_text())
    assert set(info) == {"config", "start_info", "end_info", "torch_npu_version", "cann_version", "rank_id"}
    exp = info["config"]["experimental_config"]
    assert exp["_profiler_level"] == "Level1" and exp["_aic_metrics"] == "ACL_AICORE_PIPE_UTILIZATION"
    assert "record_op_args" in exp and info["rank_id"] == 0
    assert info["config"]["common_config"]["with_stack"] is True
    meta = json.loads((root / "profiler_metadata.json").read_text())
    assert set(meta["ENV_VARIABLES"]) == {"ASCEND_GLOBAL_LOG_LEVEL", "HCCL_RDMA_TC", "HCCL_RDMA_SL",
                                          "ACLNN_CACHE_LIMIT", "HOST_CACHE_CAPACITY", "ASCEND_ENHANCE_ENABLE",
                                          "PYTORCH_NPU_ALLOC_CONF", "ASCEND_LAUNCH_BLOCKING", "HCCL_ALGO"}
    assert meta["parallel_group_info"]["group_name_0"]["global_ranks"] == [0, 1]
    # the end of collection is after the last device task of the trace
    last = max(ns(e["ts"]) + round(e["dur"] * 1000) for e in json.loads((root / OUT / "trace_view.json").read_text())
               if e.get("ph") == "X")
    assert info["end_info"]["collectionTimeEnd"] >= last


# -- trace_view.json ---------------------------------------------------------------------------------------------


def test_trace_is_a_compact_bare_array_with_string_ts(text_export):
    _, root, trace = text_export
    raw = (root / OUT / "trace_view.json").read_text(encoding="utf-8")
    assert raw.startswith("[{") and raw.endswith("}]") and "\n" not in raw
    assert '", "' in raw and '": ' in raw  # json.dumps default separators
    assert isinstance(trace, list)
    for e in trace:
        if "ts" in e:
            assert isinstance(e["ts"], str) and TS_RE.match(e["ts"]), e
        if e.get("ph") in ("s", "f", "M"):
            assert "dur" not in e


def test_processes_are_named_and_pids_synthetic(text_export):
    run, _, trace = text_export
    p = procs(trace)
    assert {"Python", "CANN", "Ascend Hardware", "Overlap Analysis", "Python GC"} <= set(p)
    assert p["Python"] == run.pid and len(set(p.values())) == len(p)
    labels = {e["pid"]: e["args"]["labels"] for e in trace if e.get("name") == "process_labels"}
    assert labels[p["Ascend Hardware"]] == f"NPU {run.device}"
    lanes = {e["args"]["name"]: e["tid"] for e in trace
             if e.get("name") == "thread_name" and e["pid"] == p["Overlap Analysis"]}
    assert lanes == {"Computing": 0, "Communication": 1, "Communication(Not Overlapped)": 2, "Free": 3}


def test_torch_to_npu_flows_land_on_cpu_ops_and_kernels(text_export):
    _, _, trace = text_export
    p = procs(trace)
    cpu = {(e["pid"], e["tid"], e["ts"]): e for e in trace if e.get("cat") == "cpu_op"}
    dev = {(e["pid"], e["tid"], e["ts"]): e for e in trace if e.get("ph") == "X" and e["pid"] == p["Ascend Hardware"]}
    s = {e["id"]: e for e in trace if e.get("cat") == "async_npu" and e["ph"] == "s"}
    f = {e["id"]: e for e in trace if e.get("cat") == "async_npu" and e["ph"] == "f"}
    memcpy = [k for k in dev.values() if k["name"] == "MEMCPY_ASYNC"]
    assert memcpy and s.keys() == f.keys() and len(f) == len(dev) - len(memcpy)  # one flow per kernel, ids unique
    assert not {(e["pid"], e["tid"], e["ts"]) for e in f.values()} & {(e["pid"], e["tid"], e["ts"]) for e in memcpy}
    for fid, fe in f.items():
        assert fe["bp"] == "e" and s[fid]["bp"] == "e"
        kernel = dev[(fe["pid"], fe["tid"], fe["ts"])]
        assert fid == int(kernel["ts"].replace(".", ""))  # id = kernel start in ns
        op = cpu[(s[fid]["pid"], s[fid]["tid"], s[fid]["ts"])]
        assert ns(kernel["ts"]) >= ns(op["ts"])  # the kernel starts after its launching op began
        assert "::" not in op["name"] or op["name"].startswith("c10d::")  # a dispatch scope (or DDP's collective)


def test_host_ops_nest_per_thread(text_export):
    _, _, trace = text_export
    by_tid = defaultdict(list)
    for e in trace:
        if e.get("cat") == "cpu_op":
            by_tid[e["tid"]].append((ns(e["ts"]), ns(e["ts"]) + round(e["dur"] * 1000), e["name"]))
    for events in by_tid.values():
        events.sort(key=lambda x: (x[0], -x[1]))
        stack: list[tuple[int, int, str]] = []
        for s, e, name in events:
            while stack and stack[-1][1] <= s:
                stack.pop()
            assert not stack or e <= stack[-1][1], (name, stack[-1])
            stack.append((s, e, name))


def test_call_stacks_only_on_outermost_forward_ops(text_export):
    _, _, trace = text_export
    ops = [e for e in trace if e.get("cat") == "cpu_op"]
    with_stack = [e for e in ops if "Call stack" in e["args"]]
    assert with_stack
    names = Counter(e["name"] for e in with_stack)
    assert names["aten::linear"] and names["aten::relu"] and names["aten::dropout"]
    assert not names["aten::addmm"] and not names["aclnnAddmm"] and not names["npu::_npu_dropout"]
    for e in with_stack:
        frames = e["args"]["Call stack"].split(";\r\n")
        assert all(FRAME_RE.match(fr) for fr in frames)
        assert frames[-1].endswith("<module>")  # innermost first, <module> last
        assert e["args"]["Fwd thread id"] == 0
    relu = next(e for e in with_stack if e["name"] == "aten::relu")
    assert relu["args"]["Call stack"].startswith("/usr/local/python3.9/lib/python3.9/site-packages/torch/nn/functional.py(")
    bwd_tids = {e["tid"] for e in ops if e["name"].startswith("autograd::engine::evaluate_function:")}
    assert all("Call stack" not in e["args"] for e in ops if e["tid"] in bwd_tids)


def test_fwdbwd_links_forward_op_and_backward_node(text_export):
    _, _, trace = text_export
    cpu = {(e["pid"], e["tid"], e["ts"]): e for e in trace if e.get("cat") == "cpu_op"}
    flows = defaultdict(dict)
    for e in trace:
        if e.get("cat") == "fwdbwd":
            flows[e["id"]][e["ph"]] = cpu[(e["pid"], e["tid"], e["ts"])]
    assert flows
    pairs = {(v["s"]["name"], v["f"]["name"]) for v in flows.values()}
    assert ("aten::relu", "ReluBackward0") in pairs and ("aten::addmm", "AddmmBackward0") in pairs
    for fid, v in flows.items():
        assert v["s"]["args"]["Sequence number"] == v["f"]["args"]["Sequence number"]
        assert v["s"]["args"]["Fwd thread id"] == 0 and v["f"]["args"]["Fwd thread id"] == 1
        assert v["s"]["tid"] != v["f"]["tid"]


def test_task_queue_and_cann_launches(text_export):
    run, _, trace = text_export
    p = procs(trace)
    enq = {e["args"]["correlation_id"]: e for e in trace if e.get("cat") == "enqueue"}
    deq = {e["args"]["correlation_id"]: e for e in trace if e.get("cat") == "dequeue"}
    assert enq.keys() == deq.keys() and enq
    assert all(d["name"].startswith("Dequeue@") and ns(d["ts"]) >= ns(enq[c]["ts"]) for c, d in deq.items())
    h2d_s = {e["id"]: e for e in trace if e.get("cat") == "HostToDevice" and e["ph"] == "s"}
    h2d_f = {e["id"]: e for e in trace if e.get("cat") == "HostToDevice" and e["ph"] == "f"}
    assert h2d_s.keys() == h2d_f.keys() and all(isinstance(i, str) for i in h2d_s)
    cann = {(e["tid"], e["ts"]): e for e in trace if e.get("pid") == p["CANN"] and e.get("ph") == "X"}
    for fid, s in h2d_s.items():
        assert cann[(s["tid"], s["ts"])]["name"] == "Node@launch"
        assert ns(h2d_f[fid]["ts"]) >= ns(s["ts"])
    names = Counter(e["name"] for e in cann.values())
    assert names["AscendCL@aclopCompileAndExecute"] and names["AscendCL@opCompile"] == 1  # compile in step 1 only
    assert names["AscendCL@aclrtSynchronizeStream"] == len(run.steps)


def test_overlap_lanes_add_up_to_step_trace(text_export):
    run, root, trace = text_export
    p = procs(trace)
    header, rows = read_csv(root / OUT / "step_trace_time.csv")
    assert header == STEP_TRACE
    # independent: unions over the device events of each ProfilerStep's kernels
    steps = sorted((ns(e["ts"]), ns(e["ts"]) + round(e["dur"] * 1000), int(e["name"].split("#")[1]))
                   for e in trace if e.get("cat") == "cpu_op" and e["name"].startswith("ProfilerStep#"))
    kd_header, kd = read_csv(root / OUT / "kernel_details.csv")
    by_step = defaultdict(list)
    for r in kd:
        s = ns(r["Start Time(us)"])
        by_step[int(r["Step Id"])].append((s, s + ns(r["Duration(us)"]), r["Accelerator Core"] == "COMMUNICATION"))
    for r, (s0, s1, number) in zip(rows, steps):
        ks = by_step[number]
        # operator tasks only: the real Level1 export leaves MEMCPY_ASYNC out of Computing and Stage
        comp = _union([(a, b) for a, b, c in ks if not c])
        comm = _union([(a, b) for a, b, c in ks if c])
        first = min(a for a, _ in comp + comm)
        last = max(b for _, b in comp + comm)
        busy = _length(_union(comp + comm))
        not_ov = _length(comm) - (_length(comp) + _length(comm) - busy)
        assert ns(r["Computing"]) == _length(comp)
        assert ns(r["Communication"]) == _length(comm)
        assert ns(r["Communication(Not Overlapped)"]) == not_ov
        assert ns(r["Overlapped"]) == _length(comm) - not_ov
        assert ns(r["Free"]) == (last - first) - busy
        assert ns(r["Stage"]) == ns(r["Computing"]) + ns(r["Communication(Not Overlapped)"]) + ns(r["Free"])
        assert ns(r["Preparing"]) == first - s0
        assert r["Step"] == str(number) and r["Device_id"] == str(run.device)
    lanes = {e["args"]["name"]: e["tid"] for e in trace
             if e.get("name") == "thread_name" and e["pid"] == p["Overlap Analysis"]}
    total = Counter()
    for e in trace:
        if e.get("pid") == p["Overlap Analysis"] and e.get("ph") == "X":
            total[e["tid"]] += round(e["dur"] * 1000)
    assert total[lanes["Computing"]] == sum(ns(r["Computing"]) for r in rows)
    assert total[lanes["Free"]] == sum(ns(r["Free"]) for r in rows)


def _union(iv):
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _length(iv):
    return sum(e - s for s, e in _union(iv))


# -- kernel_details.csv ----------------------------------------------------------------------------------------


def test_kernel_details_level1_bytes(text_export):
    _, root, trace = text_export
    raw = (root / OUT / "kernel_details.csv").read_bytes()
    lines = raw.split(b"\r\n")
    assert lines[-1] == b"" and all(b"\n" not in ln for ln in lines)  # CRLF only
    header, rows = read_csv(root / OUT / "kernel_details.csv")
    assert header[: len(KD_LEVEL1)] == KD_LEVEL1
    assert header[len(KD_LEVEL1):][-1] == "cube_utilization(%)" and "aic_mac_ratio" in header
    assert re.search(rb',"\d{16}\.\d{3}\t",', raw)  # quoted time with its TAB
    assert b'"""' in raw  # shapes wrapped in literal quotes
    dev = {(e["name"], e["ts"]) for e in trace if e.get("ph") == "X" and e.get("args", {}).get("Model Id")}
    for r in rows:
        assert r["Start Time(us)"].endswith("\t") and TS_RE.match(r["Start Time(us)"].strip())
        assert (r["Name"], r["Start Time(us)"].strip()) in dev  # the join
        if r["Accelerator Core"] == "COMMUNICATION":
            assert r["Task ID"] == "N/A" and r["Input Shapes"] == "N/A"
        else:
            assert r["Input Shapes"].startswith('"') and r["Input Shapes"].endswith('"')
    starts = [ns(r["Start Time(us)"]) for r in rows]
    assert starts == sorted(starts)
    for prev, cur in zip(rows, rows[1:]):  # Wait = gap since the previous task ended
        gap = ns(cur["Start Time(us)"]) - ns(prev["Start Time(us)"]) - ns(prev["Duration(us)"])
        assert ns(cur["Wait Time(us)"]) == max(gap, 0)


def test_kernel_totals_match_the_description(text_export):
    run, root, _ = text_export
    count, durs = description_kernels(run)
    _, rows = read_csv(root / OUT / "kernel_details.csv")
    got_count, got_ns = Counter(), Counter()
    for r in rows:
        got_count[r["Type"]] += 1
        got_ns[r["Type"]] += ns(r["Duration(us)"])
    assert got_count == count and got_ns == durs
    t = truth(run)
    assert t.kernel_count_by_type == count and t.kernel_ns_by_type == durs
    _, stat = read_csv(root / OUT / "op_statistic.csv")
    assert {r["OP Type"]: int(r["Count"]) for r in stat} == dict(count)
    assert {r["OP Type"]: ns(r["Total Time(us)"]) for r in stat} == dict(durs)


@pytest.mark.parametrize("variant", ["v2025", "v2023"])
def test_kernel_details_headers_equal_the_real_fixtures(tmp_path, variant):
    fixture = {"v2025": "Ascend-msprof-analyze/test/ut/advisor/compute_advice/data/kernel_details.csv",
               "v2023": "Ascend-msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"}
    with open(shared_fixture(fixture[variant]), newline="", encoding="utf-8") as f:
        real_header = next(csv.reader(f))
    root = write_torch_npu_text(small_run(steps=1), tmp_path, variant=TextVariant(kernel_header=variant))
    header, rows = read_csv(root / OUT / "kernel_details.csv")
    assert header == real_header
    start = rows[0]["Start Time(us)"]
    if variant == "v2023":  # no TAB, 0-3 decimals, N/A mix block on HCCL rows
        assert "\t" not in start and re.fullmatch(r"\d{16}(\.\d{1,3})?", start)
    else:
        assert start.endswith("\t")


def test_kernel_details_level0_and_without_device_id(tmp_path):
    run = with_config(small_run(steps=1), level="Level0", aic_metrics="ACL_AICORE_NONE")
    root = write_torch_npu_text(run, tmp_path / "a")
    header, _ = read_csv(root / OUT / "kernel_details.csv")
    assert header == KD_LEVEL0
    names = {p.name for p in (root / OUT).iterdir()}
    assert "op_statistic.csv" not in names and "api_statistic.csv" not in names
    assert "communication.json" not in names
    trace = json.loads((root / OUT / "trace_view.json").read_text())
    assert "CANN" not in procs(trace)
    assert not [e for e in trace if str(e.get("name", "")).startswith(("AscendCL@", "Node@"))]
    assert [e for e in trace if e.get("name") == "torch_to_npu"]  # torch flows survive pruning
    root = write_torch_npu_text(small_run(steps=1), tmp_path / "b",
                                variant=TextVariant(device_id_column=False, step_id_column=False))
    header, _ = read_csv(root / OUT / "kernel_details.csv")
    assert header[:3] == ["Model ID", "Task ID", "Stream ID"]


# -- operator_details.csv --------------------------------------------------------------------------------------


def test_operator_details_rows(text_export):
    run, root, trace = text_export
    raw = (root / OUT / "operator_details.csv").read_bytes()
    assert b";\r\n" in raw  # multi-line cells
    header, rows = read_csv(root / OUT / "operator_details.csv")
    assert header == OPERATOR_DETAILS
    cpu_ops = [e for e in trace if e.get("cat") == "cpu_op" and not e["name"].startswith("ProfilerStep#")]
    assert [r["Name"] for r in rows] == [e["name"] for e in cpu_ops]  # one row per op, in event order
    bwd_tids = {e["tid"] for e in cpu_ops if e["name"].startswith("autograd::")}
    for r, e in zip(rows, cpu_ops):
        assert r["Call Stack"] == e["args"].get("Call stack", "")
        assert r["Input Shapes"] == e["args"].get("Input Dims", "")
        assert ns(r["Host Total Duration(us)"]) == round(e["dur"] * 1000)
        assert ns(r["Host Self Duration(us)"]) <= ns(r["Host Total Duration(us)"])
        if e["tid"] in bwd_tids:
            assert r["Call Stack"] == ""
    # device self time = the kernels flowing from that op; total includes descendants
    p = procs(trace)
    dur = {e["ts"]: round(e["dur"] * 1000) for e in trace if e.get("pid") == p["Ascend Hardware"] and e["ph"] == "X"}
    by_op = Counter()
    for e in trace:
        if e.get("name") == "torch_to_npu" and e["ph"] == "f":
            by_op[e["id"]] = dur[e["ts"]]
    s_at = defaultdict(int)
    for e in trace:
        if e.get("name") == "torch_to_npu" and e["ph"] == "s":
            s_at[(e["tid"], e["ts"])] += by_op[e["id"]]
    for r, e in zip(rows, cpu_ops):
        assert ns(r["Device Self Duration(us)"]) == s_at.get((e["tid"], e["ts"]), 0)
    linear = [r for r in rows if r["Name"] == "aten::linear"]
    addmm = [r for r in rows if r["Name"] == "aclnnAddmm"]
    assert sum(ns(r["Device Total Duration(us)"]) for r in linear) == sum(
        ns(r["Device Self Duration(us)"]) for r in addmm)


# -- communication ---------------------------------------------------------------------------------------------


def test_communication_json_and_matrix(text_export):
    run, root, _ = text_export
    comm = json.loads((root / OUT / "communication.json").read_text())
    _, kd = read_csv(root / OUT / "kernel_details.csv")
    hcom = {r["Name"]: r for r in kd if r["Type"] == "hcom_allReduce_"}
    assert set(comm) == {f"step{s.number}" for s in run.steps}
    seen = 0
    for step in comm.values():
        assert set(step) == {"collective", "p2p"}
        for key, entry in step["collective"].items():
            if key == "Total Op Info":
                continue
            name, group = key.split("@")
            assert name in hcom and group
            t = entry["Communication Time Info"]
            assert set(t) == {"Start Timestamp(us)", "Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)",
                              "Synchronization Time(ms)", "Idle Time(ms)", "Wait Time Ratio",
                              "Synchronization Time Ratio"}
            assert t["Elapse Time(ms)"] == pytest.approx(ns(hcom[name]["Duration(us)"]) / 1e6, abs=1e-4)
            assert set(entry["Communication Bandwidth Info"]) == {"RDMA", "HCCS", "PCIE", "SDMA", "SIO"}
            hccs = entry["Communication Bandwidth Info"]["HCCS"]
            assert hccs["Transit Size(MB)"] > 0 and isinstance(hccs["Size Distribution"], dict)
            seen += 1
        assert "Total Op Info" in step["collective"]
    assert seen == len(hcom)
    matrix = json.loads((root / OUT / "communication_matrix.json").read_text())
    key_re = re.compile(r"^allreduce-(top1|middle|bottom1|bottom2|bottom3|total)@.+$")
    for step in matrix.values():
        assert step["collective"] and all(key_re.match(k) for k in step["collective"])
        for links in step["collective"].values():
            for link, v in links.items():
                assert re.fullmatch(r"\d+-\d+", link)
                assert set(v) == {"Transport Type", "Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)",
                                  "Op Name"}


def test_statistics_files(text_export):
    _, root, trace = text_export
    header, rows = read_csv(root / OUT / "op_statistic.csv")
    assert header == OP_STATISTIC
    assert sum(float(r["Ratio(%)"]) for r in rows) == pytest.approx(100, abs=0.1)
    header, rows = read_csv(root / OUT / "api_statistic.csv")
    assert header == API_STATISTIC
    assert {r["Device_id"] for r in rows} == {"host"}
    p = procs(trace)
    cann = Counter(e["name"].split("@", 1)[1] for e in trace if e.get("pid") == p["CANN"] and e["ph"] == "X")
    assert {r["API Name"]: int(r["Count"]) for r in rows} == dict(cann)
    assert {r["Level"] for r in rows} <= {"acl", "runtime", "node", "model", "communication"}


# -- variants and damaged outputs ---------------------------------------------------------------------------------


def test_variants(tmp_path):
    run = small_run(steps=1)
    v = TextVariant(numeric_ts=True, overlap_tids="2026", enqueue_names="op", device_label="bare",
                    task_type="other", info_file_rank=False, rank_id_string=True, frame_space=False, newline="\n",
                    csv_encoding="utf-8-sig")
    root = write_torch_npu_text(run, tmp_path, variant=v)
    trace = json.loads((root / OUT / "trace_view.json").read_text())
    assert all(isinstance(e["ts"], float) for e in trace if "ts" in e)
    p = procs(trace)
    lanes = {e["args"]["name"]: e["tid"] for e in trace
             if e.get("name") == "thread_name" and e["pid"] == p["Overlap Analysis"]}
    assert lanes == {"Communication": 0, "Communication(Not Overlapped)": 1, "Computing": 2, "Free": 3}
    assert {e["name"] for e in trace if e.get("cat") == "enqueue"} > {"Enqueue@aclnnAddmm"}
    kinds = Counter(e["args"]["Task Type"] for e in trace if e.get("pid") == p["Ascend Hardware"] and e["ph"] == "X")
    assert set(kinds) == {"Other", "MEMCPY_ASYNC"}
    stacks = [e["args"]["Call stack"] for e in trace if "Call stack" in e.get("args", {})]
    assert stacks and all("): " not in s for s in stacks)
    info = json.loads((root / "profiler_info.json").read_text())
    assert info["rank_id"] == "0"
    _, rows = read_csv(root / OUT / "step_trace_time.csv", "utf-8-sig")
    assert rows[0]["Device_id"] == "-1"
    raw = (root / OUT / "kernel_details.csv").read_bytes()
    assert b"\r\n" not in raw and raw.startswith(b"\xef\xbb\xbfStep Id,")


def test_unusual_frames_are_written_verbatim(tmp_path):
    from tests.synth import Frame, Launch, StepSpec
    from tests.synth import library as L

    site = (Frame("C:\\work\\训练\\model.py", 12, "forward"), Frame("C:\\work\\训练\\train.py", 3, "<module>"))
    relu = L.relu((4, 4), dur_us=2.0)
    run = replace(small_run(steps=1), steps=[StepSpec(1, (UserCall(site, (Launch(relu.op),)),))])
    root = write_torch_npu_text(run, tmp_path)
    raw = (root / OUT / "trace_view.json").read_text(encoding="utf-8")
    assert "训练" in raw  # ensure_ascii=False
    trace = json.loads(raw)
    (op,) = [e for e in trace if e.get("name") == "aten::relu"]
    assert op["args"]["Call stack"] == "C:\\work\\训练\\model.py(12): forward;\r\nC:\\work\\训练\\train.py(3): <module>"


def test_damaged_outputs(tmp_path):
    run = small_run(steps=1)
    root = write_torch_npu_text(run, tmp_path / "a", variant=TextVariant(
        analyse_done=False, truncate_trace_bytes=5000, omit=frozenset({"kernel_details.csv", "profiler_info.json"})))
    names = {p.name for p in (root / OUT).iterdir()}
    assert "analyse.done" not in names and "kernel_details.csv" not in names
    assert not list(root.glob("profiler_info*.json"))
    raw = (root / OUT / "trace_view.json").read_bytes()
    assert len(raw) == 5000
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)


def test_no_stack_no_shapes_no_task_queue(tmp_path):
    run = with_config(small_run(steps=1), with_stack=False, record_shapes=False, task_queue=False)
    root = write_torch_npu_text(run, tmp_path)
    trace = json.loads((root / OUT / "trace_view.json").read_text())
    ops = [e for e in trace if e.get("cat") == "cpu_op"]
    assert not [e for e in ops if "Call stack" in e["args"] or "Input Dims" in e["args"]]
    assert not [e for e in trace if e.get("cat") in ("enqueue", "dequeue")]
    # without the task queue the CANN launch sits inside the dispatch scope, on its thread
    p = procs(trace)
    launches = [e for e in trace if e.get("pid") == p["CANN"] and e.get("name", "").startswith("AscendCL@aclnn")]
    scopes = [e for e in ops if e["name"].startswith("aclnn")]
    for c in launches:
        assert any(s["tid"] == c["tid"] and ns(s["ts"]) <= ns(c["ts"]) and
                   ns(c["ts"]) + round(c["dur"] * 1000) <= ns(s["ts"]) + round(s["dur"] * 1000) for s in scopes)
    _, rows = read_csv(root / OUT / "operator_details.csv")
    assert all(r["Call Stack"] == "" and r["Input Shapes"] == "" for r in rows)


def test_output_is_deterministic(tmp_path):
    a = write_torch_npu_text(small_run(steps=1), tmp_path / "a")
    b = write_torch_npu_text(small_run(steps=1), tmp_path / "b")
    for f in (a / OUT).iterdir():
        assert f.read_bytes() == (b / OUT / f.name).read_bytes(), f.name


def test_streaming_keeps_memory_flat(tmp_path):
    def peak(steps: int) -> int:
        run = small_run(steps=steps, world_size=1)
        tracemalloc.start()
        write_torch_npu_text(run, tmp_path / str(steps))
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, big = peak(3), peak(30)
    size = (next((tmp_path / "30").iterdir()) / OUT / "trace_view.json").stat().st_size
    assert big < small * 2 and big < size  # ten times the steps, not ten times the memory


# -- ground truth cross-check: a minimal linker over the written trace ---------------------------------------------


def test_truth_per_line_matches_a_link_walk_over_the_trace(text_export):
    run, _, trace = text_export
    p = procs(trace)
    cpu = [e for e in trace if e.get("cat") == "cpu_op"]
    at = {(e["tid"], e["ts"]): e for e in cpu}
    by_tid = defaultdict(list)
    for e in cpu:
        by_tid[e["tid"]].append(e)

    def ancestors(op):
        s, end = ns(op["ts"]), ns(op["ts"]) + round(op["dur"] * 1000)
        outer = [e for e in by_tid[op["tid"]] if ns(e["ts"]) <= s and end <= ns(e["ts"]) + round(e["dur"] * 1000)]
        return sorted(outer, key=lambda e: -ns(e["ts"]) * 10**9 + round(e["dur"] * 1000))

    s_of = {e["id"]: e for e in trace if e.get("name") == "torch_to_npu" and e["ph"] == "s"}
    fb = {e["ph"] + str(e["id"]): e for e in trace if e.get("cat") == "fwdbwd"}
    fb_f_at = {(e["tid"], e["ts"]): e["id"] for e in trace if e.get("cat") == "fwdbwd" and e["ph"] == "f"}
    expected = Counter()
    for e in trace:
        if e.get("pid") != p["Ascend Hardware"] or e["ph"] != "X" or e["name"] == "MEMCPY_ASYNC":
            continue
        s = s_of[int(e["ts"].replace(".", ""))]
        op = at[(s["tid"], s["ts"])]
        chain = ancestors(op)
        node = next((a for a in chain if (a["tid"], a["ts"]) in fb_f_at), None)
        if node is not None:
            fs = fb["s" + str(fb_f_at[(node["tid"], node["ts"])])]
            chain = ancestors(at[(fs["tid"], fs["ts"])])
        stack = next((a["args"]["Call stack"] for a in chain if "Call stack" in a["args"]), None)
        if stack is None:
            continue
        for fr in stack.split(";\r\n"):
            m = FRAME_RE.match(fr)
            if "site-packages" not in m["file"]:
                expected[(m["file"], int(m["line"]))] += round(e["dur"] * 1000)
                break
    t = truth(run)
    assert expected == t.kernel_ns_by_line
    assert sum(t.kernel_ns_by_line.values()) + t.unattributed_ns == t.kernel_ns


# -- DB export -----------------------------------------------------------------------------------------------------


def test_db_tables_and_join_chain(tmp_path, text_export):
    run, text_root, trace = text_export
    root = write_torch_npu_db(run, tmp_path)
    db = root / OUT / f"ascend_pytorch_profiler_{run.rank}.db"
    assert not (root / OUT / "trace_view.json").exists() and (root / OUT / "analyse.done").exists()
    info = json.loads((root / f"profiler_info_{run.rank}.json").read_text())
    assert info["config"]["experimental_config"]["_export_type"] == ["db"]
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    for table, cols in DB_TABLES.items():
        assert [r[1] for r in con.execute(f"PRAGMA table_info({table})")] == cols, table
    assert dict(con.execute("SELECT id, name FROM ENUM_API_TYPE")) == {
        50001: "op", 50002: "queue", 50003: "trace", 50004: "mstx", 20000: "acl", 15000: "model", 10000: "node",
        5500: "communication", 5000: "runtime"}
    assert con.execute("SELECT min(id) FROM STRING_IDS WHERE value LIKE 'aten::%'").fetchone()[0] >= 1 << 28
    rows = con.execute("""
        SELECT k.value, t.startNs, a.callchainId FROM COMPUTE_TASK_INFO c
        JOIN STRING_IDS k ON k.id = c.name
        JOIN TASK t ON t.globalTaskId = c.globalTaskId
        JOIN CONNECTION_IDS ci ON ci.connectionId = t.connectionId
        JOIN PYTORCH_API a ON a.connectionId = ci.id""").fetchall()
    assert len(rows) == con.execute("SELECT count(*) FROM COMPUTE_TASK_INFO").fetchone()[0]
    frames_of = defaultdict(list)
    for cid, value, depth in con.execute("""SELECT c.id, s.value, c.stackDepth FROM PYTORCH_CALLCHAINS c
                                            JOIN STRING_IDS s ON s.id = c.stack ORDER BY c.id, c.stackDepth"""):
        frames_of[cid].append(value)
    # the same kernels in the text export: launching op's Call stack (if it has one)
    cpu = {(e["tid"], e["ts"]): e for e in trace if e.get("cat") == "cpu_op"}
    s_of = {e["id"]: e for e in trace if e.get("name") == "torch_to_npu" and e["ph"] == "s"}
    for name, start, cid in rows:
        op = cpu[(s_of[start]["tid"], s_of[start]["ts"])]
        assert op["name"] == con.execute("SELECT s.value FROM PYTORCH_API a JOIN STRING_IDS s ON s.id = a.name "
                                         "WHERE a.callchainId IS ? AND a.startNs = ?",
                                         (cid, str(ns(op["ts"])))).fetchone()[0]
    ops_with_chain = con.execute("""SELECT s.value, a.callchainId, a.startNs FROM PYTORCH_API a
                                    JOIN STRING_IDS s ON s.id = a.name WHERE a.callchainId IS NOT NULL""").fetchall()
    assert ops_with_chain
    for name, cid, start in ops_with_chain:
        text_op = next(e for e in cpu.values() if ns(e["ts"]) == int(start) and e["name"] == name)
        assert frames_of[cid] == text_op["args"]["Call stack"].split(";\r\n")  # stackDepth 0 = innermost
    totals = Counter()
    for typ, dur in con.execute("""SELECT s.value, t.endNs - t.startNs FROM COMPUTE_TASK_INFO c
                                   JOIN STRING_IDS s ON s.id = c.opType JOIN TASK t USING (globalTaskId)"""):
        totals[typ] += dur
    for typ, dur in con.execute("""SELECT s.value, endNs - startNs FROM COMMUNICATION_OP o
                                   JOIN STRING_IDS s ON s.id = o.opType"""):
        totals[typ] += dur
    _, kd = read_csv(text_root / OUT / "kernel_details.csv")
    expect = Counter()
    for r in kd:
        expect[r["Type"]] += ns(r["Duration(us)"])
    assert totals == expect
    assert [r[0] for r in con.execute("SELECT id FROM STEP_TIME")] == [s.number for s in run.steps]
    ana = sqlite3.connect(f"file:{root / OUT / 'analysis.db'}?mode=ro&immutable=1", uri=True)
    assert [r[1] for r in ana.execute("PRAGMA table_info(StepTraceTime)")] == STEP_TRACE_TIME_DB
    _, st = read_csv(text_root / OUT / "step_trace_time.csv")
    got = ana.execute("SELECT step, computing, free FROM StepTraceTime ORDER BY step").fetchall()
    assert [(r["Step"], ns(r["Computing"]), ns(r["Free"])) for r in st] == [
        (s, round(c * 1000), round(f * 1000)) for s, c, f in got]


# -- msprof CLI ----------------------------------------------------------------------------------------------------


def test_msprof_cli_layout(tmp_path):
    run = small_run(steps=1)
    root = write_msprof_cli(run, tmp_path)
    assert re.fullmatch(r"PROF_\d{6}_\d{17}_[A-Z]{16}", root.name)
    out = root / "mindstudio_profiler_output"
    names = sorted(p.name for p in out.iterdir())
    for prefix in ("op_summary_", "op_statistic_", "msprof_", "step_trace_", "api_statistic_",
                   "communication_statistic_"):
        assert [n for n in names if re.fullmatch(rf"{prefix}\d{{1,20}}.*\.(csv|json)", n)], prefix
    assert (root / "host" / "info.json").exists() and (root / f"device_{run.device}").is_dir()
    summary = next(out.glob("op_summary_*.csv"))
    header, rows = read_csv(summary)
    assert header[: len(OP_SUMMARY)] == OP_SUMMARY
    assert rows and all(r["Task Start Time(us)"].endswith("\t") for r in rows)
    trace = json.loads(next(out.glob("msprof_*.json")).read_text())
    assert isinstance(trace, list)
    assert "Python" not in procs(trace) and {"CANN", "Ascend Hardware"} <= set(procs(trace))
    cats = {e.get("cat") for e in trace}
    assert not cats & {"async_npu", "async_task_queue", "fwdbwd", "cpu_op"} and "HostToDevice" in cats
    hw = procs(trace)["Ascend Hardware"]
    assert len([e for e in trace if e.get("pid") == hw and e["ph"] == "X" and e["name"] != "MEMCPY_ASYNC"]) == len(rows)


# -- Kineto ---------------------------------------------------------------------------------------------------------


def test_kineto_cuda_trace(tmp_path):
    run = small_run(steps=2)
    path = write_kineto(run, tmp_path / "rank0.pt.trace.json.gz", gz=True)
    doc = json.load(gzip.open(path, "rt"))
    assert isinstance(doc, dict) and {"traceEvents", "baseTimeNanoseconds", "schemaVersion",
                                      "distributedInfo"} <= set(doc)
    assert doc["distributedInfo"]["world_size"] == 2
    ev = doc["traceEvents"]
    assert all(isinstance(e["ts"], (int, float)) for e in ev if "ts" in e)
    cpu = {e["args"]["External id"]: e for e in ev if e.get("cat") in ("cpu_op", "user_annotation")}
    ann = {e["name"] for e in ev if e.get("cat") == "user_annotation"}
    assert {"ProfilerStep#1", "ProfilerStep#2", "Optimizer.step#AdamW.step",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"} <= ann
    runtime = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
    kernels = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy")]
    assert kernels
    flows = defaultdict(dict)
    for e in ev:
        if e.get("cat") == "ac2g":
            flows[e["id"]][e["ph"]] = e
    for k in kernels:
        c = k["args"]["correlation"]
        assert runtime[c]["args"]["External id"] == k["args"]["External id"]
        assert cpu[k["args"]["External id"]]["cat"] == "cpu_op"
        assert flows[c]["f"]["ts"] == k["ts"] and flows[c]["s"]["ts"] == runtime[c]["ts"]
        assert flows[c]["f"]["bp"] == "e"
    assert not [e for e in ev if e.get("cat") == "cpu_op" and e["name"].startswith(("aclnn", "npu::"))]
    nccl = [k for k in kernels if "Collective name" in k["args"]]
    assert nccl and all(cpu[k["args"]["External id"]]["name"] == "record_param_comms" for k in nccl)
    py = {e["args"]["Python id"]: e for e in ev if e.get("cat") == "python_function"}
    assert all(e["args"]["Python parent id"] is None or e["args"]["Python parent id"] in py for e in py.values())
    names = {e["name"] for e in py.values()}
    assert "nn.Module: Net_0" in names and "model.py(20): forward" in names  # def line, stripped path
    assert "torch/nn/modules/linear.py(124): forward" in names
    fb = [e for e in ev if e.get("cat") == "fwdbwd"]
    assert fb and len(fb) % 2 == 0
    assert {e["pid"] for e in ev if isinstance(e.get("pid"), str)} == {"Spans", "Traces", ""}


def test_kineto_cpu_trace_with_call_stacks(tmp_path):
    path = write_kineto(small_run(steps=1), tmp_path / "cpu.json", device="cpu", verbose_stacks=True)
    doc = json.loads(path.read_text())
    ev = doc["traceEvents"]
    assert not [e for e in ev if e.get("cat") in ("kernel", "cuda_runtime", "ac2g")]
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    relu = next(e for e in ops if e["name"] == "aten::relu")
    end = relu["ts"] + relu["dur"]
    assert any(e["name"] == "aten::clamp_min" and relu["ts"] <= e["ts"] and e["ts"] + e["dur"] <= end for e in ops)
    stack = relu["args"]["Call stack"]
    assert stack.endswith(";") and "\r\n" not in stack and "nn.Module: Net_0" in stack
    dropout = next(e for e in ops if e["name"] == "aten::dropout")
    assert dropout["args"]["Concrete Inputs"][1:] == ["0.3", "True"]
    assert isinstance(dropout["args"]["Input Dims"], list)
