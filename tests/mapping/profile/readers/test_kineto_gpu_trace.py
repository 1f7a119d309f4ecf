"""Kineto reader on a GPU-shaped trace built here exactly

There is no CUDA machine to record one, so the test writes the events Kineto writes for a
CUDA run (libkineto output_json: kernel/memcpy/memset on pid = device and tid = stream with
``correlation`` and ``External id``, ``cuda_runtime``/``cuda_driver`` calls, ``ac2g`` and
``fwdbwd`` flows, NCCL kernels carrying ``Collective name``) and derives every expected link from
its own description of the scene below.
"""

from __future__ import annotations

import copy
import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest

from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import Backend, LinkKind, ProfileKind
from msprof_lsp.mapping.profile.readers.kineto import read

BASE = 1_700_000_000_123_456_789
PID, MAIN, AUTOGRAD = 4242, 4242, 4250
GPU, STREAM, COMM_STREAM = 0, 7, 20

# Python calls on the main thread: (id, parent id, name, ts, dur)
PY = [
    (1, None, "train.py(40): <module>", "0.000", "2000.000"),
    (2, 1, "train.py(22): train", "1.000", "1998.000"),
    (3, 2, "nn.Module: Net_0", "100.000", "400.000"),
    (4, 3, "model.py(14): forward", "101.000", "398.000"),
    (5, 4, "nn.Module: Linear_0", "110.000", "150.000"),
    (6, 5, "torch/nn/modules/linear.py(125): forward", "111.000", "148.000"),
    (7, 6, "<built-in function linear>", "112.000", "146.000"),
    (8, 4, "torch/nn/functional.py(1760): relu", "300.000", "50.000"),
    (9, 8, "<built-in method relu of type object at 0x7f0012345678>", "301.000", "48.000"),
]

# Host ops: (name, cat, tid, ts, dur, External id, seq, fwd thread, extra args)
OPS = [
    ("ProfilerStep#5", "user_annotation", MAIN, "50.000", "1900.000", 1, None, None, {}),
    ("aten::copy_", "cpu_op", MAIN, "60.000", "20.000", 13, None, None, {}),
    ("aten::linear", "cpu_op", MAIN, "113.000", "30.000", 10, 7, 0,
     {"Input Dims": [[32, 64], [128, 64], [128]], "Input type": ["float", "float", "float"],
      "Concrete Inputs": ["", "", ""]}),
    ("aten::addmm", "cpu_op", MAIN, "118.000", "20.000", 11, 7, 0, {}),
    ("aten::relu", "cpu_op", MAIN, "302.250", "40.125", 12, 8, 0, {}),
    ("autograd::engine::evaluate_function: ReluBackward0", "cpu_op", AUTOGRAD, "500.000", "50.000", 23, 8, 1, {}),
    ("ReluBackward0", "cpu_op", AUTOGRAD, "501.000", "48.000", 24, 8, 1, {}),
    ("aten::threshold_backward", "cpu_op", AUTOGRAD, "502.000", "40.000", 25, None, None, {}),
    ("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", AUTOGRAD, "600.000", "100.000", 20, 7, 1, {}),
    ("AddmmBackward0", "cpu_op", AUTOGRAD, "601.000", "98.000", 21, 7, 1, {}),
    ("aten::mm", "cpu_op", AUTOGRAD, "605.000", "40.000", 22, None, None, {}),
    ("record_param_comms", "cpu_op", MAIN, "900.000", "30.000", 30, None, None,
     {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 8192,
      "Out msg nelems": 8192, "Group size": 2}),
    ("Torch-Compiled Region: 0/0", "cpu_op", MAIN, "1000.000", "100.000", 40, None, None, {}),
    ("## Call CompiledFxGraph fabc1234 ##", "user_annotation", MAIN, "1010.000", "80.000", 41, None, None, {}),
]

# CUDA runtime/driver calls: (name, cat, tid, ts, dur, correlation, External id or None)
RUNTIME = [
    ("cudaMemcpyAsync", "cuda_runtime", MAIN, "62.000", "10.000", 503, 13),
    ("cudaLaunchKernel", "cuda_runtime", MAIN, "120.000", "5.000", 500, 11),
    ("cudaLaunchKernel", "cuda_runtime", MAIN, "305.000", "5.000", 501, None),  # no External id
    ("cudaLaunchKernel", "cuda_runtime", AUTOGRAD, "505.000", "4.000", 505, 25),
    ("cudaLaunchKernel", "cuda_runtime", AUTOGRAD, "610.000", "5.000", 502, 22),
    ("cuLaunchKernel", "cuda_driver", MAIN, "906.000", "3.000", 504, 30),
    ("cudaStreamSynchronize", "cuda_runtime", MAIN, "1500.000", "80.000", 520, None),
]

NCCL_ARGS = {
    "Collective name": "allreduce", "dtype": "Float", "In msg nelems": 8192,
    "Out msg nelems": 8192, "Group size": 2, "Process Group Name": "0",
    "Process Group Description": "default_pg", "Process Group Ranks": [0, 1],
}

# GPU activity: (name, cat, stream, ts, dur, correlation, External id or None, extra args)
GPU_EVENTS = [
    ("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", STREAM, "80.000", "12.000", 503, 13,
     {"bytes": 8192, "memory bandwidth (GB/s)": 0.68}),
    ("Memset (Device)", "gpu_memset", STREAM, "90.000", "1.000", 506, None, {"bytes": 512}),
    ("ampere_sgemm_64x32_sliced1x4_tn", "kernel", STREAM, "200.000", "60.000", 500, 11,
     {"registers per thread": 90, "shared memory": 16384, "blocks per SM": 2.0,
      "warps per SM": 8.0, "grid": [4, 1, 1], "block": [128, 1, 1],
      "est. achieved occupancy %": 12}),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar>",
     "kernel", STREAM, "350.000", "4.000", 501, None, {}),
    ("void at::native::threshold_backward_kernel", "kernel", STREAM, "560.000", "5.000", 505, 25, {}),
    ("ampere_sgemm_128x64_nn", "kernel", STREAM, "700.000", "30.000", 502, 22, {}),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "kernel",
     COMM_STREAM, "950.000", "200.000", 504, 30, NCCL_ARGS),
]


def flow(ph: str, flow_id: int, pid: int, tid: int, ts: str, cat: str) -> dict:
    event = {"ph": ph, "id": flow_id, "pid": pid, "tid": tid, "ts": float(ts), "cat": cat, "name": cat}
    if ph == "f":
        event["bp"] = "e"
    return event


FLOWS = [
    # ac2g: runtime call -> kernel, id = correlation
    flow("s", 500, PID, MAIN, "120.000", "ac2g"), flow("f", 500, GPU, STREAM, "200.000", "ac2g"),
    flow("s", 501, PID, MAIN, "305.000", "ac2g"), flow("f", 501, GPU, STREAM, "350.000", "ac2g"),
    # fwdbwd: forward op -> backward node
    flow("s", 1, PID, MAIN, "118.000", "fwdbwd"), flow("f", 1, PID, AUTOGRAD, "601.000", "fwdbwd"),
    flow("s", 2, PID, MAIN, "302.250", "fwdbwd"), flow("f", 2, PID, AUTOGRAD, "501.000", "fwdbwd"),
]


def build_trace() -> dict:
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "ts": 0.0, "pid": PID, "tid": 0, "args": {"name": "python"}},
        {"name": "process_labels", "ph": "M", "ts": 0.0, "pid": PID, "tid": 0, "args": {"labels": "CPU"}},
        {"name": "process_name", "ph": "M", "ts": 0.0, "pid": GPU, "tid": 0, "args": {"name": "GPU 0"}},
        {"name": "thread_name", "ph": "M", "ts": 0.0, "pid": GPU, "tid": STREAM, "args": {"name": "stream 7"}},
    ]
    for pyid, parent, name, ts, dur in PY:
        args = {"Python parent id": parent, "Python id": pyid, "Ev Idx": pyid}
        if name.startswith("nn.Module: "):
            args["Python module id"] = pyid
        events.append({"ph": "X", "cat": "python_function", "name": name, "pid": PID, "tid": MAIN,
                       "ts": float(ts), "dur": float(dur), "args": args})
    for name, cat, tid, ts, dur, ext, seq, fwd, extra in OPS:
        args = {"External id": ext, "Record function id": 0, **extra}
        if seq is not None:
            args["Sequence number"] = seq
            args["Fwd thread id"] = fwd
        events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid,
                       "ts": float(ts), "dur": float(dur), "args": args})
    for name, cat, tid, ts, dur, corr, ext in RUNTIME:
        args = {"cbid": 211, "correlation": corr}
        if ext is not None:
            args["External id"] = ext
        events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid,
                       "ts": float(ts), "dur": float(dur), "args": args})
    for name, cat, stream, ts, dur, corr, ext, extra in GPU_EVENTS:
        args = {"queued": 0, "device": GPU, "context": 1, "stream": stream, "correlation": corr, **extra}
        if ext is not None:
            args["External id"] = ext
        events.append({"ph": "X", "cat": cat, "name": name, "pid": GPU, "tid": stream,
                       "ts": float(ts), "dur": float(dur), "args": args})
    events.append({"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#5", "pid": GPU,
                   "tid": STREAM, "ts": 79.999, "dur": 1200.002, "args": {"External id": 1}})
    events += FLOWS
    events += [
        {"ph": "X", "cat": "Trace", "ts": 0.0, "dur": 2100.0, "pid": "Spans",
         "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
        {"name": "process_sort_index", "ph": "M", "ts": 0.0, "pid": "Spans", "tid": 0,
         "args": {"sort_index": 536870912}},
        {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
         "tid": "Trace PyTorch Profiler", "ts": 0.0},
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 2100.5},
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85031714816,
                              "computeMajor": 8, "computeMinor": 0, "numSms": 108}],
        "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2, "pg_count": 1,
                            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                           "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}],
                            "nccl_version": "2.21.5"},
        "trace_id": "0123456789ABCDEF",
        "with_stack": 1,
        "record_shapes": 1,
        "with_modules": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE,
        "traceEvents": events,
        "traceName": "/tmp/rank1.pt.trace.json",
    }


def to_ns(ts: str) -> int:
    return BASE + int(Decimal(ts) * 1000)


def py_stack(pyid: int) -> list[str]:
    """The stack the scene describes for python call ``pyid``: it and its parents."""
    by_id = {p[0]: p for p in PY}
    frames = []
    while pyid is not None:
        frames.append(by_id[pyid][2])
        pyid = by_id[pyid][1]
    return frames


def write(tmp_path: Path, doc: dict, name: str = "rank1.pt.trace.json.gz") -> Path:
    path = tmp_path / name
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


def load(path: Path):
    return read(ProfileLocation(ProfileKind.KINETO, path))


@pytest.fixture()
def profile(tmp_path):
    return load(write(tmp_path, build_trace()))


def op_row(profile, name: str) -> int:
    rows = profile.host_ops.index[profile.host_ops["name"] == name]
    assert len(rows) == 1, name
    return int(rows[0])


def kernel(profile, name: str):
    rows = profile.kernels[profile.kernels["name"] == name]
    assert len(rows) == 1, name
    return rows.iloc[0]


def frames(profile, stack_id: int) -> list[str]:
    return [f.raw for f in profile.stack_of(int(stack_id))]


def test_tables_hold_exactly_the_scene(profile):
    assert sorted(profile.host_ops["name"]) == sorted(o[0] for o in OPS)
    assert sorted(profile.kernels["name"]) == sorted(g[0] for g in GPU_EVENTS)
    assert sorted(profile.host_events["name"]) == sorted(r[0] for r in RUNTIME)
    cats = dict(zip(profile.host_events["name"], profile.host_events["cat"]))
    assert cats["cuLaunchKernel"] == "cuda_driver" and cats["cudaStreamSynchronize"] == "cuda_runtime"
    assert profile.meta.backend is Backend.CUDA
    assert (profile.meta.rank, profile.meta.world_size) == (1, 2)
    assert profile.meta.extra["distributed"]["backend"] == "nccl"
    assert profile.issues == []
    # torch.compile regions stay ops
    assert {"Torch-Compiled Region: 0/0", "## Call CompiledFxGraph fabc1234 ##"} <= set(profile.host_ops["name"])


def test_times_are_exact_epoch_nanoseconds(profile):
    relu = profile.host_ops.iloc[op_row(profile, "aten::relu")]
    assert relu["start_ns"] == to_ns("302.250") and relu["dur_ns"] == 40_125
    k = kernel(profile, "ampere_sgemm_64x32_sliced1x4_tn")
    assert (k["start_ns"], k["dur_ns"]) == (to_ns("200.000"), 60_000)
    assert [(s.id, s.start_ns, s.end_ns) for s in profile.steps] == [(5, to_ns("50.000"), to_ns("1950.000"))]


def test_forward_kernel_links_to_launching_op_and_python_stack(profile):
    k = kernel(profile, "ampere_sgemm_64x32_sliced1x4_tn")
    assert k["host_op"] == op_row(profile, "aten::addmm")  # External id 11
    assert k["link"] == LinkKind.STACK.value and not k["backward"]
    # deepest python call around aten::addmm (ts 118) is <built-in function linear> (id 7)
    assert frames(profile, k["stack"]) == py_stack(7)
    assert (k["core"], k["device"], k["stream"], k["step"]) == ("GPU", GPU, STREAM, 5)


def test_kernel_without_external_id_links_through_its_runtime_call(profile):
    k = kernel(profile, GPU_EVENTS[3][0])
    # correlation 501 -> cudaLaunchKernel at 305 without External id -> the op around it
    assert k["host_op"] == op_row(profile, "aten::relu")
    assert frames(profile, k["stack"]) == py_stack(9)


def test_kernel_without_correlation_arg_links_through_its_ac2g_flow(tmp_path):
    doc = build_trace()
    for e in doc["traceEvents"]:
        if e.get("name") == GPU_EVENTS[3][0]:
            del e["args"]["correlation"]
    p = load(write(tmp_path, doc))
    assert kernel(p, GPU_EVENTS[3][0])["host_op"] == op_row(p, "aten::relu")


def test_memcpy_and_memset(profile):
    copy_ = kernel(profile, "Memcpy HtoD (Pageable -> Device)")
    assert copy_["core"] == "MEMCPY" and copy_["host_op"] == op_row(profile, "aten::copy_")
    assert frames(profile, copy_["stack"]) == py_stack(2)
    memset = kernel(profile, "Memset (Device)")  # no External id, its runtime call not captured
    assert memset["core"] == "MEMSET"
    assert (memset["host_op"], memset["stack"], memset["link"]) == (-1, -1, LinkKind.NONE.value)
    assert profile.meta.extra["kernels_without_host_op"] == 1


def test_backward_kernels_reach_the_forward_stack(profile):
    mm = kernel(profile, "ampere_sgemm_128x64_nn")
    assert mm["host_op"] == op_row(profile, "aten::mm")
    assert mm["link"] == LinkKind.BACKWARD.value and mm["backward"]
    assert mm["fwd_op"] == op_row(profile, "aten::addmm")  # fwdbwd flow 1
    assert frames(profile, mm["stack"]) == py_stack(7)
    thr = kernel(profile, "void at::native::threshold_backward_kernel")
    assert thr["fwd_op"] == op_row(profile, "aten::relu") and thr["link"] == LinkKind.BACKWARD.value
    assert frames(profile, thr["stack"]) == py_stack(9)
    ops = profile.host_ops
    assert ops.iloc[op_row(profile, "AddmmBackward0")]["fwd_op"] == op_row(profile, "aten::addmm")
    assert ops.iloc[op_row(profile, "ReluBackward0")]["fwd_op"] == op_row(profile, "aten::relu")
    # the autograd thread has no python calls: its ops have no stack of their own
    assert (ops[ops["tid"] == AUTOGRAD]["stack"] == -1).all()


def test_backward_links_by_sequence_number_without_flows(tmp_path):
    doc = build_trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "fwdbwd"]
    p = load(write(tmp_path, doc))
    ops = p.host_ops
    # the latest forward op with the same sequence number: aten::addmm (7), aten::relu (8)
    assert ops.iloc[op_row(p, "AddmmBackward0")]["fwd_op"] == op_row(p, "aten::addmm")
    assert ops.iloc[op_row(p, "ReluBackward0")]["fwd_op"] == op_row(p, "aten::relu")
    assert kernel(p, "ampere_sgemm_128x64_nn")["fwd_op"] == op_row(p, "aten::addmm")


def test_nccl_kernel_is_communication(profile):
    k = kernel(profile, GPU_EVENTS[6][0])
    assert (k["core"], k["type"]) == ("COMMUNICATION", "allreduce")
    assert k["host_op"] == op_row(profile, "record_param_comms")
    assert k["stream"] == COMM_STREAM


def test_host_ops_modules_nesting_and_shapes(profile):
    ops, mods = profile.host_ops, profile.modules
    assert sorted(f"{c}_{k}" for c, k in zip(mods["cls"], mods["k"])) == ["Linear_0", "Net_0"]
    linear_mod = int(mods.index[mods["cls"] == "Linear"][0])
    net_mod = int(mods.index[mods["cls"] == "Net"][0])
    assert mods.iloc[linear_mod]["parent"] == net_mod
    addmm = ops.iloc[op_row(profile, "aten::addmm")]
    assert addmm["module"] == linear_mod
    assert addmm["parent"] == op_row(profile, "aten::linear")
    assert ops.iloc[op_row(profile, "aten::relu")]["module"] == net_mod
    assert ops.iloc[op_row(profile, "aten::linear")]["parent"] == op_row(profile, "ProfilerStep#5")
    linear = ops.iloc[op_row(profile, "aten::linear")]
    assert (linear["input_dims"], linear["input_types"]) == ("32,64;128,64;128", "float;float;float")
    assert json.loads(linear["concrete_inputs"]) == ["", "", ""]
    assert (linear["seq"], linear["fwd_thread"]) == (7, 0)


def test_plain_json_file_reads_the_same(tmp_path):
    doc = build_trace()
    a = load(write(tmp_path, doc, "a.pt.trace.json.gz"))
    b = load(write(tmp_path, copy.deepcopy(doc), "b.json"))
    assert a.kernels.equals(b.kernels) and a.host_ops.equals(b.host_ops)


def test_progress_is_reported(tmp_path):
    path = write(tmp_path, build_trace())
    seen = []
    read(ProfileLocation(ProfileKind.KINETO, path), lambda msg, frac: seen.append((msg, frac)))
    fractions = [f for _, f in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert all(path.name in msg for msg, _ in seen)
