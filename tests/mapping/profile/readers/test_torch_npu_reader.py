"""torch_npu text reader: the real 2024 trace (figures computed here with the json module), the verl
excerpt, and a spec-exact result built below with call stacks."""

from __future__ import annotations

import csv
import json
import re
import shutil
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from conftest import shared_fixture
from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile.frames import parse_stack
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import LinkKind, ProfileKind
from msprof_lsp.mapping.profile.readers.torch_npu import read

TRACE_2024 = "Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"
VERL_ROOT = "verl-project-rl-insight/data/recipe/mstx_data/mstx_profile/agent_loop_rollout_replica_0/xxx_ascend_pt"


def ns(ts: str | float) -> int:
    return int(Decimal(str(ts)) * 1000)


def load_file(path: Path):
    return read(ProfileLocation(ProfileKind.TORCH_NPU, path))


# =============================================================================================
# The real 2024 trace (no stacks, no shapes)


@pytest.fixture(scope="module")
def real():
    path = shared_fixture(TRACE_2024)
    ref = json.loads(path.read_text(encoding="utf-8"))
    return ref, load_file(path)


def flows(ref: list[dict], name: str) -> dict:
    pairs: dict = defaultdict(dict)
    for e in ref:
        if e.get("name") == name and e["ph"] in "sf":
            pairs[e["id"]][e["ph"]] = (e["pid"], e["tid"], e["ts"])
    return pairs


def test_real_kernels_and_torch_to_npu_scopes(real) -> None:
    ref, prof = real
    hw = {e["pid"] for e in ref if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"] == "Ascend Hardware"}
    kernels = [e for e in ref if e["ph"] == "X" and e["pid"] in hw]
    assert len(kernels) == len(prof.kernels) == 276
    cpu = {(e["pid"], e["tid"], e["ts"]): e["name"] for e in ref if e.get("cat") == "cpu_op"}
    by_key = {(e["pid"], e["tid"], e["ts"]): e for e in kernels}
    expected = {}
    for pair in flows(ref, "torch_to_npu").values():
        k = by_key[pair["f"]]
        expected[(k["name"], ns(k["ts"]))] = cpu[pair["s"]]
    assert len(expected) == 274
    assert not any(name.startswith("aten::") for name in expected.values())  # all dispatch scopes
    k = prof.kernels
    names = prof.host_ops["name"].astype(str).to_numpy()
    got = {
        (n, s): names[h]
        for n, s, h in zip(k["name"].astype(str), k["start_ns"], k["host_op"])
        if h >= 0
    }
    assert got == expected
    unlinked = k[k["host_op"] < 0]
    assert sorted(unlinked["name"].astype(str)) == ["MEMCPY_ASYNC", "MEMCPY_ASYNC"]
    assert set(unlinked["link"].astype(str)) == {LinkKind.NONE.value}
    assert prof.meta.extra["trace_counts"]["torch_to_npu"] == 274


def test_real_kernel_totals_per_name(real) -> None:
    ref, prof = real
    hw = {e["pid"] for e in ref if e["ph"] == "M" and e.get("args", {}).get("name") == "Ascend Hardware"}
    totals: Counter = Counter()
    for e in ref:
        if e["ph"] == "X" and e["pid"] in hw:
            totals[e["name"]] += round(e["dur"] * 1000)
    got = prof.kernels.groupby(prof.kernels["name"].astype(str))["dur_ns"].sum().to_dict()
    assert got == dict(totals)


def test_real_aclnn_mm_launches(real) -> None:
    """Each aclnnMm scope launches MatMulV2, 3 TransData, Cast and MemSet."""
    ref, prof = real
    k = prof.kernels
    names = prof.host_ops["name"].astype(str).to_numpy()
    per_scope: dict[int, list[str]] = defaultdict(list)
    for kname, ktype, h in zip(k["name"].astype(str), k["type"].astype(str), k["host_op"]):
        if h >= 0 and names[h] == "aclnnMm":
            per_scope[h].append(kname.rsplit("_", 1)[-1])
    # the json view: kernels per flow-start key
    expected: dict[tuple, list[str]] = defaultdict(list)
    cpu = {(e["pid"], e["tid"], e["ts"]): e["name"] for e in ref if e.get("cat") == "cpu_op"}
    kname = {(e["pid"], e["tid"], e["ts"]): e["name"] for e in ref if e["ph"] == "X"}
    for pair in flows(ref, "torch_to_npu").values():
        if cpu[pair["s"]] == "aclnnMm":
            expected[pair["s"]].append(kname[pair["f"]].rsplit("_", 1)[-1])
    assert len(per_scope) == len(expected) > 0
    assert sorted(sorted(v) for v in per_scope.values()) == sorted(sorted(v) for v in expected.values())
    # lists "MatMulV2, 3 TransData, Cast, MemSet"; this trace has two Casts per call
    assert all(
        Counter(v) == {"MatMulV2": 1, "TransData": 3, "Cast": 2, "MemSet": 1} for v in expected.values()
    )


def test_real_fwdbwd_and_link_kinds(real) -> None:
    ref, prof = real
    ops = prof.host_ops
    names = ops["name"].astype(str).to_numpy()
    cpu = [e for e in ref if e.get("cat") == "cpu_op"]
    pairs = flows(ref, "fwdbwd")
    assert len(pairs) == 17
    expected = {(p["f"], p["s"]) for p in pairs.values()}
    key = list(zip(ops["pid"], ops["tid"], ops["start_ns"]))
    row_of = {k: i for i, k in enumerate(key)}
    to_key = {(e["pid"], e["tid"], e["ts"]): (e["pid"], e["tid"], ns(e["ts"])) for e in cpu}
    got = {(i, int(f)) for i, f in enumerate(ops["fwd_op"]) if f >= 0}
    assert got == {(row_of[to_key[f]], row_of[to_key[s]]) for f, s in expected}

    # Which kernels are backward: launched under an op (same thread, enclosing) that is a fwdbwd
    # target -- computed here by brute-force containment, not with the product's nesting.
    targets = {to_key[f] for f, _ in expected}
    target_ops = [(p, t, s, s + round(e["dur"] * 1000)) for e in cpu for (p, t, s) in [to_key[(e["pid"], e["tid"], e["ts"])]] if (p, t, s) in targets]
    dur = ops["dur_ns"].to_numpy()
    k = prof.kernels
    for h, link, fwd, kn in zip(k["host_op"], k["link"].astype(str), k["fwd_op"], k["name"].astype(str)):
        if h < 0:
            continue
        p, t, s = key[h]
        e = s + dur[h]
        is_bwd = any(p == tp and t == tt and ts <= s and e <= te for tp, tt, ts, te in target_ops)
        assert link == (LinkKind.BACKWARD.value if is_bwd else LinkKind.HOST.value), kn
        if "ReluGrad" in kn:
            assert names[fwd] == "aten::relu"
    assert (k["link"].astype(str) == "stack").sum() == 0  # recorded without with_stack
    assert not prof.stacks


def test_real_step_and_overlap(real) -> None:
    ref, prof = real
    (step,) = prof.steps
    assert step.id == 1 and step.dur_ns == 14_091_970
    step_ev = next(e for e in ref if e["name"] == "ProfilerStep#1")
    assert step.start_ns == ns(step_ev["ts"])
    ov_pid = next(e["pid"] for e in ref if e["ph"] == "M" and e.get("args", {}).get("name") == "Overlap Analysis")
    lanes = {e["tid"]: e["args"]["name"] for e in ref if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == ov_pid}
    totals: Counter = Counter()
    for e in ref:
        if e["ph"] == "X" and e["pid"] == ov_pid:
            totals[lanes[e["tid"]]] += round(e["dur"] * 1000)
    got = prof.overlap.groupby(prof.overlap["lane"].astype(str), observed=True)["dur_ns"].sum().to_dict()
    assert got == dict(totals)
    assert set(prof.overlap["device"]) == {-1}  # label "NPU" without an id


def test_real_host_events(real) -> None:
    ref, prof = real
    cann_pid = next(e["pid"] for e in ref if e["ph"] == "M" and e.get("args", {}).get("name") == "CANN")
    cann = Counter(e["name"] for e in ref if e["ph"] == "X" and e["pid"] == cann_pid)
    he = prof.host_events
    got = Counter(he[he["cat"] == "cann"]["name"].astype(str))
    assert got == cann and cann["AscendCL@aclopCompileAndExecute"] == 11
    assert set(he[he["cat"] == "cann"]["level"].astype(str)) == {"acl"}
    assert (he["cat"] == "enqueue").sum() == sum(1 for e in ref if e.get("cat") == "enqueue") == 148
    assert (he["cat"] == "dequeue").sum() == 148


def test_real_host_to_device_fallback_matches_torch_to_npu(tmp_path: Path, real) -> None:
    """Without torch_to_npu flows, HostToDevice -> Dequeue -> Enqueue finds the same scopes."""
    ref, prof = real
    stripped = [e for e in ref if e.get("name") != "torch_to_npu"]
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(stripped), encoding="utf-8")
    alt = load_file(path)
    htd_kernels = {(p["f"][0], p["f"][1], p["f"][2]) for p in flows_htd(ref)}
    assert len(htd_kernels) > 100
    names = prof.host_ops["name"].astype(str).to_numpy()
    a_names = alt.host_ops["name"].astype(str).to_numpy()
    k, ak = prof.kernels, alt.kernels
    by = {(n, s): h for n, s, h in zip(k["name"].astype(str), k["start_ns"], k["host_op"])}
    compared = 0
    for n, s, h in zip(ak["name"].astype(str), ak["start_ns"], ak["host_op"]):
        if h >= 0:
            assert a_names[h] == names[by[(n, s)]]
            assert alt.host_ops["start_ns"].iat[h] == prof.host_ops["start_ns"].iat[by[(n, s)]]
            compared += 1
    assert compared == len(htd_kernels) == alt.meta.extra["trace_counts"]["host_to_device"]


def flows_htd(ref: list[dict]) -> list[dict]:
    pairs: dict = defaultdict(dict)
    for e in ref:
        if e.get("cat") == "HostToDevice":
            pairs[e["id"]][e["ph"]] = (e["pid"], e["tid"], e["ts"])
    return list(pairs.values())


# =============================================================================================
# The verl excerpt: Overlap Analysis only, label "NPU 0", 2026 lane order


def test_verl_overlap_only_result(tmp_path: Path) -> None:
    src = shared_fixture(VERL_ROOT)
    ref = json.loads((src / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text(encoding="utf-8"))
    prof = load_location(locate(src), use_cache=False)
    lanes = {e["tid"]: e["args"]["name"] for e in ref if e["name"] == "thread_name"}
    assert lanes[0] == "Communication" and lanes[2] == "Computing"  # not the 2024 order
    expected: Counter = Counter()
    for e in ref:
        if e["ph"] == "X":
            expected[lanes[e["tid"]]] += round(e["dur"] * 1000)
    got = prof.overlap.groupby(prof.overlap["lane"].astype(str), observed=True)["dur_ns"].sum().to_dict()
    assert got == dict(expected)
    assert set(prof.overlap["device"]) == {0}
    (b,) = prof.step_breakdown  # no steps, no step_trace_time.csv: one row for the capture
    assert (b.step, b.device) == (-1, 0)
    assert b.computing_ns == expected["Computing"] == 3460
    assert b.comm_ns == expected["Communication"]
    assert b.comm_not_overlapped_ns == expected["Communication(Not Overlapped)"]
    assert b.overlapped_ns == b.comm_ns - b.comm_not_overlapped_ns
    assert b.free_ns == expected["Free"]
    # no analyse.done in the excerpt: a partial load with an Issue; profiler_info was read
    assert not prof.meta.complete
    assert any("still being written (no analyse.done)" in i.message for i in prof.issues)
    assert any("kernel_details.csv missing" in i.message for i in prof.issues)
    assert prof.meta.level == "Level1" and prof.meta.rank == 0
    assert len(prof.kernels) == 0 and len(prof.host_ops) == 0


# =============================================================================================
# A spec-exact result with call stacks, built here (no public sample has stacks)

T0 = 1_736_413_971_558_000_000  # ns
P, MAIN, BWD, QUEUE = 4242, 4242, 4300, 4301
CANN_PID, HW_PID, OV_PID, GC_PID = 424200017, 800, 3555714976, 4242001
STACK_LINEAR = ["/work/proj/model.py(14): forward", "/usr/lib/python3.10/site-packages/torch/nn/modules/module.py(1527): _call_impl",
                "/work/proj/train.py(30): step", "/work/proj/train.py(40): <module>"]
STACK_RELU = ["/work/proj/model.py(15): forward", "/usr/lib/python3.10/site-packages/torch/nn/modules/module.py(1527): _call_impl",
              "/work/proj/train.py(30): step", "/work/proj/train.py(40): <module>"]

# kernels: key -> (name, type, core, start µs, dur µs, launched by scope, flow kind)
KERNELS = {
    "mm": ("aclnnAddmm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", 300, 50, "aclnnAddmm", "t2n"),
    "td": ("aclnnAddmm_TransData_TransData", "TransData", "AI_CORE", 352, 5, "aclnnAddmm", "t2n"),
    "relu": ("aclnnRelu_Relu_Relu", "Relu", "AI_VECTOR_CORE", 400, 10, "aclnnRelu", "t2n"),
    "add": ("aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", 420, 4, "aclnnInplaceAdd", "htd"),
    "memcpy": ("MEMCPY_ASYNC", "MEMCPY_ASYNC", "", 450, 2, None, None),
    "rg": ("aclnnThresholdBackward_ReluGrad_ReluGrad", "ReluGrad", "AI_VECTOR_CORE", 700, 12, "aclnnThresholdBackward", "t2n"),
    "mmg": ("aclnnMm_MatMulCommon_MatMulV2", "MatMulV2", "AI_CORE", 900, 60, "aclnnMm", "t2n"),
}
# host ops: (name, thread, start µs, dur µs, args)
OPS = [
    ("ProfilerStep#7", MAIN, 0, 1000, {}),
    ("aten::linear", MAIN, 20, 170, {"Sequence number": 11, "Call stack": ";\r\n".join(STACK_LINEAR),
                                    "Input Dims": "8,16;\r\n32,16;\r\n32", "Input type": "float;\r\nfloat;\r\nfloat"}),
    ("aten::t", MAIN, 25, 10, {"Sequence number": 11}),
    ("aten::addmm", MAIN, 40, 140, {"Sequence number": 11}),
    ("aclnnAddmm", MAIN, 50, 120, {}),
    ("aten::relu", MAIN, 220, 70, {"Sequence number": 12, "Call stack": ";\r\n".join(STACK_RELU), "Input Dims": "8,32",
                                  "Input type": "float"}),
    ("aclnnRelu", MAIN, 230, 50, {}),
    ("aten::add_", MAIN, 310, 80, {}),
    ("aclnnInplaceAdd", MAIN, 320, 60, {}),
    ("autograd::engine::evaluate_function: ReluBackward0", BWD, 600, 100, {}),
    ("ReluBackward0", BWD, 605, 90, {"Sequence number": 12, "Fwd thread id": 1}),
    ("aten::threshold_backward", BWD, 610, 80, {}),
    ("aclnnThresholdBackward", BWD, 620, 60, {}),
    ("autograd::engine::evaluate_function: AddmmBackward0", BWD, 710, 190, {}),
    ("AddmmBackward0", BWD, 715, 180, {"Sequence number": 11, "Fwd thread id": 1}),
    ("aten::mm", BWD, 720, 170, {}),
    ("aclnnMm", BWD, 730, 150, {}),
]
MODULES = [("nn.Module: Net_0", 5, 595), ("nn.Module: Linear_0", 10, 190), ("nn.Module: ReLU_0", 210, 90)]
OVERLAP = [("Computing", 300, 57), ("Free", 357, 43), ("Computing", 400, 10), ("Computing", 420, 4),
           ("Computing", 450, 2), ("Computing", 700, 12), ("Computing", 900, 60),
           ("Communication", 950, 20), ("Communication(Not Overlapped)", 960, 10), ("Free", 970, 20)]
HCCL_ROW = ("hcom_allReduce__428_0_1", "hcom_allReduce_", "HCCL", 980, 15)


def us(micro: float, numeric: bool = False) -> str:
    """µs string of T0 + micro; ``numeric`` marks it to be written as a bare JSON number."""
    value = f"{(T0 + round(micro * 1000)) // 1000}.{(T0 + round(micro * 1000)) % 1000:03d}"
    return f"@num:{value}@" if numeric else value


def build_trace(*, numeric_ts: bool = False, string_pid: bool = False) -> str:
    pid = str(P) if string_pid else P
    ev: list[dict] = []

    def meta(name, p, t, args):
        ev.append({"ph": "M", "name": name, "pid": p, "tid": t, "args": args})

    meta("process_name", pid, 0, {"name": "Python"})
    meta("process_labels", pid, 0, {"labels": "CPU"})
    for t in (MAIN, BWD, QUEUE):
        meta("thread_name", pid, t, {"name": f"Thread {t}"})
    meta("process_name", CANN_PID, 0, {"name": "CANN"})
    meta("process_name", HW_PID, 0, {"name": "Ascend Hardware"})
    meta("process_labels", HW_PID, 0, {"labels": "NPU 2"})
    meta("thread_name", HW_PID, 7, {"name": "Stream 7"})
    meta("process_name", GC_PID, 0, {"name": "Python GC"})
    meta("process_name", OV_PID, 0, {"name": "Overlap Analysis"})
    meta("process_labels", OV_PID, 0, {"labels": "NPU 2"})
    lanes = ["Communication", "Communication(Not Overlapped)", "Computing", "Free"]  # 2026 order
    for i, lane in enumerate(lanes):
        meta("thread_name", OV_PID, i, {"name": lane})

    def x(name, p, t, start, dur, cat=None, args=None):
        e = {"ph": "X", "name": name, "pid": p, "tid": t, "ts": us(start, numeric_ts), "dur": dur}
        if cat:
            e["cat"] = cat
        e["args"] = args or {}
        ev.append(e)

    def flow(name, cat, fid, p, t):
        ev.append({"ph": "s", "bp": "e", "name": name, "id": fid, "pid": p[0], "tid": p[1], "ts": us(p[2], numeric_ts), "cat": cat})
        ev.append({"ph": "f", "bp": "e", "name": name, "id": fid, "pid": t[0], "tid": t[1], "ts": us(t[2], numeric_ts), "cat": cat})

    scope_at = {}
    for name, tid, start, dur, args in OPS:
        a = {"Sequence number": -1, "Fwd thread id": 0} | args
        x(name, pid, tid, start, dur, "cpu_op", a)
        scope_at[name] = (pid, tid, start)
    for name, start, dur in MODULES:
        x(name, pid, MAIN, start, dur, "python_function", {"Python id": 1, "Python parent id": 0})
    for corr, scope in enumerate(["aclnnAddmm", "aclnnRelu", "aclnnInplaceAdd", "aclnnThresholdBackward", "aclnnMm"], 1):
        p, t, s = scope_at[scope]
        x("Enqueue", pid, t, s + 10, 10, "enqueue", {"correlation_id": corr})
        flow("enqueue_to_dequeue", "async_task_queue", corr, (pid, t, s + 10), (pid, QUEUE, s + 40))
        x(f"Dequeue@{scope}", pid, QUEUE, s + 40, 50, "dequeue", {"correlation_id": corr})
        x(f"AscendCL@{scope}", CANN_PID, QUEUE, s + 41, 45, None, {"level": "acl", "Mode": "ACL_RTS"})
    for key, (kname, _t, _c, start, dur, scope, how) in KERNELS.items():
        x(kname, HW_PID, 7, start, dur, None,
          {"Model Id": 4294967295, "Task Type": "Other", "Stream Id": 7, "Task Id": int(start), "connection_id": 1})
        if how == "t2n":
            flow("torch_to_npu", "async_npu", T0 + start * 1000, scope_at[scope], (HW_PID, 7, start))
        elif how == "htd":
            launch = scope_at[scope][2] + 45  # inside that scope's Dequeue
            x("Node@launch", CANN_PID, QUEUE, launch, 2, None, {"level": "node"})
            flow("HostToDevice77309411327", "HostToDevice", "77309411327", (CANN_PID, QUEUE, launch), (HW_PID, 7, start))
    flow("fwdbwd", "fwdbwd", 12, scope_at["aten::relu"], scope_at["ReluBackward0"])  # AddmmBackward0: none
    x("GC", GC_PID, MAIN, 500, 20, "GC", {})
    for lane, start, dur in OVERLAP:
        x(lane, OV_PID, lanes.index(lane), start, dur)
    text = json.dumps(ev, ensure_ascii=False)
    # numeric variant: every marked ts becomes a bare JSON number with all its digits
    return re.sub(r'"@num:([0-9.]+)@"', r"\1", text)


def write_kernel_details(path: Path) -> None:
    header = ["Step Id", "Device_id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State", "Accelerator Core",
              "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Num", "Mix Block Num", "HF32 Eligible",
              "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
              "Output Formats", "Context ID", "aicore_time(us)", "aic_mac_ratio", "cube_utilization(%)"]
    rows = []
    for key in ("mm", "td", "relu", "add", "rg", "mmg"):
        kname, ktype, core, start, dur, _s, _h = KERNELS[key]
        mac = "0.824" if core == "AI_CORE" else "0"
        rows.append(["7", "2", "4294967295", str(int(start)), "7", kname, ktype, "dynamic", core, us(start, False) + "\t",
                     str(dur), "0", "16", "0", "NO", '"8,16;32,16"', "DT_FLOAT;DT_FLOAT", "ND;ND", '"8,32"', "DT_FLOAT",
                     "ND", "N/A", str(dur * 0.9), mac, "61.5" if core == "AI_CORE" else "0"])
    name, ktype, core, start, dur = HCCL_ROW
    rows.append(["7", "2", "4294967295", "N/A", "N/A", name, ktype, "N/A", core, us(start, False) + "\t", str(dur), "0",
                 "0", "0", "NO", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A"])
    with open(path, "w", encoding="utf-8", newline="") as f:  # csv.writer defaults: CRLF, QUOTE_MINIMAL
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


PROFILER_INFO = {
    "config": {
        "common_config": {"activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"], "schedule": {},
                          "record_shapes": True, "profile_memory": False, "with_stack": True, "with_flops": False,
                          "with_modules": True},
        "experimental_config": {"_profiler_level": "Level1", "_aic_metrics": "ACL_AICORE_PIPE_UTILIZATION",
                                "_export_type": ["text"], "_data_simplification": True},
    },
    "torch_npu_version": "2.7.1", "cann_version": "8.3.RC1", "rank_id": 0,
}


def build_result(root: Path, *, done: bool = True, kernel_details: bool = True, **trace_opts) -> Path:
    out = root / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (root / "profiler_info_0.json").write_text(json.dumps(PROFILER_INFO, indent=4), encoding="utf-8")
    (out / "trace_view.json").write_text(build_trace(**trace_opts), encoding="utf-8")
    if kernel_details:
        write_kernel_details(out / "kernel_details.csv")
    if done:
        (out / "analyse.done").write_bytes(b"")
    return root


@pytest.fixture
def built(tmp_path: Path):
    root = build_result(tmp_path / "host_123_20260101000000000_ascend_pt")
    return root, load_location(locate(root), use_cache=False)


def row(frame, column: str, value: str) -> int:
    (idx,) = np.flatnonzero(frame[column].astype(str).to_numpy() == value)
    return int(idx)


def kernel(prof, key: str):
    name, start = KERNELS[key][0], T0 + KERNELS[key][3] * 1000
    k = prof.kernels
    (i,) = np.flatnonzero((k["name"].astype(str).to_numpy() == name) & (k["start_ns"].to_numpy() == start))
    return k.iloc[int(i)]


def test_built_result_links_every_kernel(built) -> None:
    _root, prof = built
    ops = prof.host_ops
    assert not [i for i in prof.issues], prof.issues
    assert len(ops) == len(OPS) and len(prof.kernels) == len(KERNELS) + 1  # + the CSV-only HCCL row
    s_lin, s_relu = parse_stack(";\r\n".join(STACK_LINEAR)), parse_stack(";\r\n".join(STACK_RELU))
    assert len(prof.stacks) == 2 and set(prof.stacks) == {s_lin, s_relu}
    assert prof.stacks[0][0].file == "/work/proj/model.py" and prof.stacks[0][-1].func == "<module>"

    def check(key, link, scope, stack, fwd=None):
        k = kernel(prof, key)
        assert k["link"] == link.value, key
        assert (ops["name"].iat[k["host_op"]] if k["host_op"] >= 0 else None) == scope, key
        assert prof.stack_of(int(k["stack"])) == stack, key
        assert (ops["name"].iat[k["fwd_op"]] if k["fwd_op"] >= 0 else None) == fwd, key
        assert bool(k["backward"]) == (fwd is not None)

    # forward: dispatch scope -> ancestor walk to the aten op that has the stack
    check("mm", LinkKind.STACK, "aclnnAddmm", s_lin)
    check("td", LinkKind.STACK, "aclnnAddmm", s_lin)
    check("relu", LinkKind.STACK, "aclnnRelu", s_relu)
    # linked only through HostToDevice -> Dequeue -> Enqueue; no stack on its chain
    check("add", LinkKind.HOST, "aclnnInplaceAdd", ())
    # no flow at all: kept, marked
    check("memcpy", LinkKind.NONE, None, ())
    # backward through the fwdbwd flow -> aten::relu's stack
    check("rg", LinkKind.BACKWARD, "aclnnThresholdBackward", s_relu, fwd="aten::relu")
    # backward without a flow: Sequence number 11 -> aten::addmm (latest op with it) -> aten::linear's stack
    check("mmg", LinkKind.BACKWARD, "aclnnMm", s_lin, fwd="aten::addmm")
    assert prof.meta.extra["trace_counts"]["fwdbwd_by_sequence"] == 1


def test_built_result_kernel_details_join(built) -> None:
    _root, prof = built
    mm = kernel(prof, "mm")
    assert mm["core"] == "AI_CORE" and mm["type"] == "MatMulV2"  # from the CSV; the trace says "Other"
    assert mm["input_shapes"] == "8,16;32,16" and mm["output_shapes"] == "8,32"
    assert mm["step"] == 7 and mm["device"] == 2 and mm["stream"] == 7 and mm["block_dim"] == 16
    assert mm["pmu:aic_mac_ratio"] == pytest.approx(0.824)
    assert mm["dur_ns"] == 50_000
    memcpy = kernel(prof, "memcpy")  # trace only: no core from a "Other" Task Type, step from ProfilerStep#7
    assert memcpy["core"] == "" and memcpy["step"] == 7 and np.isnan(memcpy["pmu:aic_mac_ratio"])
    k = prof.kernels
    hccl = k[k["name"].astype(str) == HCCL_ROW[0]].iloc[0]  # CSV only: kept, unlinked
    assert hccl["core"] == "HCCL" and hccl["host_op"] == -1 and hccl["link"] == "none"
    assert hccl["start_ns"] == T0 + HCCL_ROW[3] * 1000
    assert prof.meta.extra["kernel_details_matched"] == 6
    assert k["start_ns"].is_monotonic_increasing


def test_built_result_host_tables(built) -> None:
    _root, prof = built
    ops = prof.host_ops
    assert [(s.id, s.start_ns, s.dur_ns) for s in prof.steps] == [(7, T0, 1000 * 1000)]
    lin = row(ops, "name", "aten::linear")
    assert ops["input_dims"].iat[lin] == "8,16;32,16;32" and ops["input_types"].iat[lin] == "float;float;float"
    assert ops["seq"].iat[lin] == 11 and ops["fwd_thread"].iat[lin] == 0
    assert ops["parent"].iat[row(ops, "name", "aclnnAddmm")] == row(ops, "name", "aten::addmm")
    mods = prof.modules
    assert sorted(mods["cls"].astype(str)) == ["Linear", "Net", "ReLU"]
    module_of = {n: (mods["cls"].iat[m] if m >= 0 else None) for n, m in zip(ops["name"].astype(str), ops["module"])}
    assert module_of["aclnnAddmm"] == "Linear" and module_of["aten::relu"] == "ReLU"
    assert module_of["aten::add_"] == "Net" and module_of["aclnnMm"] is None and module_of["ProfilerStep#7"] is None
    he = prof.host_events
    cats = Counter(he["cat"].astype(str))
    assert cats == {"cann": 6, "gc": 1, "enqueue": 5, "dequeue": 5}
    levels = dict(zip(he["name"].astype(str), he["level"].astype(str)))
    assert levels["Node@launch"] == "node" and levels["AscendCL@aclnnMm"] == "acl"
    assert prof.meta.with_stack is True and prof.meta.level == "Level1" and prof.meta.complete


def test_built_result_overlap_and_step_breakdown(built) -> None:
    _root, prof = built
    lanes = prof.overlap["lane"].astype(str).tolist()
    assert lanes == [lane for lane, _s, _d in OVERLAP]
    assert set(prof.overlap["device"]) == {2}
    (b,) = prof.step_breakdown
    # Step 7's device span: first kernel of step 7 (300 µs) to the end of the last (HCCL, 995 µs);
    # slices starting inside it count.
    def total(name):
        return sum(d for lane, s, d in OVERLAP if lane == name and 300 <= s < 995) * 1000

    assert (b.step, b.device) == (7, 2)
    assert b.computing_ns == total("Computing") and b.free_ns == total("Free")
    assert b.comm_ns == total("Communication") and b.comm_not_overlapped_ns == total("Communication(Not Overlapped)")
    assert b.preparing_ns == 300 * 1000  # first device task - ProfilerStep start


@pytest.mark.parametrize("opts", [{"numeric_ts": True}, {"string_pid": True}])
def test_variants_give_the_same_tables(tmp_path: Path, built, opts) -> None:
    _root, prof = built
    root = build_result(tmp_path / "variant_ascend_pt", **opts)
    alt = load_location(locate(root), use_cache=False)
    if opts.get("numeric_ts"):
        text = (root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text()
        assert f'"ts": {us(300)},' in text  # really a bare number
    cols = ["name", "start_ns", "dur_ns", "host_op", "stack", "fwd_op", "link", "core", "step"]
    assert alt.kernels[cols].astype(str).equals(prof.kernels[cols].astype(str))
    assert alt.host_ops[["name", "start_ns", "parent", "fwd_op", "module"]].astype(str).equals(
        prof.host_ops[["name", "start_ns", "parent", "fwd_op", "module"]].astype(str)
    )
    assert set(alt.host_ops["pid"]) == {P}


def test_accepts_output_dir_and_lone_file(built) -> None:
    root, prof = built
    out = root / "ASCEND_PROFILER_OUTPUT"
    via_out = read(ProfileLocation(ProfileKind.TORCH_NPU, out))
    assert len(via_out.kernels) == len(prof.kernels) and via_out.meta.with_stack is True
    lone = read(ProfileLocation(ProfileKind.TORCH_NPU, out / "trace_view.json"))
    assert len(lone.kernels) == len(KERNELS)  # the trace alone: no CSV-only row, no CSV columns
    assert lone.meta.with_stack is None and lone.meta.complete


# =============================================================================================
# Bad and partial input: never a traceback


def test_half_written_result_loads_partially(tmp_path: Path) -> None:
    root = build_result(tmp_path / "r_ascend_pt", done=False)
    prof = load_location(locate(root), use_cache=False)
    assert not prof.meta.complete
    (issue,) = [i for i in prof.issues if "still being written" in i.message]
    assert issue.path.endswith("ASCEND_PROFILER_OUTPUT")
    assert len(prof.kernels) == len(KERNELS) + 1


def test_half_written_trace_is_cut_mid_event(tmp_path: Path) -> None:
    root = build_result(tmp_path / "r_ascend_pt", done=False)
    trace = root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    text = trace.read_text()
    cut = text.index('"name": "aclnnRelu_Relu_Relu"')
    trace.write_text(text[:cut])
    prof = load_location(locate(root), use_cache=False)
    assert any("no closing ']'" in i.message and i.path == str(trace) for i in prof.issues)
    assert not prof.meta.complete
    names = set(prof.kernels["name"].astype(str))
    assert "aclnnAddmm_MatMulCommon_MatMulV2" in names  # written before the cut (and in the CSV)


def test_empty_trace_in_a_half_written_result(tmp_path: Path) -> None:
    root = build_result(tmp_path / "r_ascend_pt", done=False)
    (root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_bytes(b"")
    prof = load_location(locate(root), use_cache=False)
    assert any("is empty" in i.message for i in prof.issues)
    assert len(prof.kernels) == 7 and (prof.kernels["link"].astype(str) == "none").all()  # from the CSV


def test_missing_kernel_details_still_loads(tmp_path: Path) -> None:
    root = build_result(tmp_path / "r_ascend_pt", kernel_details=False)
    prof = load_location(locate(root), use_cache=False)
    assert any("kernel_details.csv missing" in i.message for i in prof.issues)
    assert len(prof.kernels) == len(KERNELS)
    assert kernel(prof, "mm")["link"] == "stack" and kernel(prof, "mm")["core"] == ""


def test_kineto_object_in_a_finished_result_is_a_profile_error(tmp_path: Path) -> None:
    root = build_result(tmp_path / "r_ascend_pt")
    trace = root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    trace.write_text(json.dumps({"traceEvents": [], "schemaVersion": 1}))
    with pytest.raises(ProfileError) as err:
        load_location(locate(root), use_cache=False)
    assert "Kineto" in str(err.value) and str(trace) in str(err.value)


def test_not_json_trace_is_a_profile_error(tmp_path: Path) -> None:
    root = build_result(tmp_path / "r_ascend_pt")
    (root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text("<html>oops</html>")
    with pytest.raises(ProfileError, match="is not JSON"):
        load_location(locate(root), use_cache=False)


def test_no_output_dir_is_a_profile_error(tmp_path: Path) -> None:
    root = tmp_path / "r_ascend_pt"
    root.mkdir()
    (root / "profiler_info_0.json").write_text(json.dumps(PROFILER_INFO))
    with pytest.raises(ProfileError, match="has no ASCEND_PROFILER_OUTPUT"):
        read(ProfileLocation(ProfileKind.TORCH_NPU, root))


def test_operator_details_without_trace(tmp_path: Path) -> None:
    root = build_result(tmp_path / "r_ascend_pt")
    out = root / "ASCEND_PROFILER_OUTPUT"
    (out / "trace_view.json").unlink()
    header = ["Name", "Input Shapes", "Call Stack", "Host Self Duration(us)", "Host Total Duration(us)",
              "Device Self Duration(us)", "Device Total Duration(us)", "Device Self Duration With AICore(us)",
              "Device Total Duration With AICore(us)"]
    with open(out / "operator_details.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerow(["aten::linear", "8,16;\r\n32,16;\r\n32", ";\r\n".join(STACK_LINEAR), "10.5", "170", "55", "55", "50", "50"])
        w.writerow(["aclnnAddmm", "", "", "120", "120", "55", "55", "50", "50"])
    prof = load_location(locate(root), use_cache=False)
    assert list(prof.host_ops["name"].astype(str)) == ["aten::linear", "aclnnAddmm"]
    assert (prof.host_ops["start_ns"] == -1).all()
    assert any("no trace_view.json" in i.message for i in prof.issues)
    assert len(prof.kernels) == 7 and (prof.kernels["host_op"] == -1).all()
    assert prof.stacks and prof.stacks[0] == parse_stack(";\r\n".join(STACK_LINEAR))


def test_fixture_copy_as_a_result_directory(tmp_path: Path) -> None:
    """The 2024 trace inside a real-looking layout (copied to tmp only): same kernels, complete."""
    out = tmp_path / "w_20240102_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    shutil.copy(shared_fixture(TRACE_2024), out / "trace_view.json")
    (out / "analyse.done").write_bytes(b"")
    prof = load_location(locate(out.parent), use_cache=False)
    assert len(prof.kernels) == 276 and prof.meta.complete
    assert [i for i in prof.issues if "kernel_details.csv missing" not in i.message] == []
