"""A device task belongs to the step whose host window launched it (issue 25, defects 1, 2, 8).

Every trace is written event by event as Kineto writes it: the 2021 schema as the tb_plugin
sample of Feb 2021 shows it (``Runtime`` / ``Kernel`` categories, ``external id`` 0 on kernels
launched from the autograd thread, whose ``cudaLaunchKernel`` has no operator around it,
``async``/``launch`` flows), the current schema as the HTA traces show it (``user_annotation``
ProfilerStep, ``cuda_runtime`` -- ROCm's ``hipLaunchKernel`` included --, ``kernel`` with
``External id`` and ``correlation``, ``ac2g`` flows). Correlation ids rise in launch order, as
CUPTI and roctracer number them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import STEP_LAUNCHED_OUTSIDE, ProfileKind, Step
from msprof_lsp.mapping.profile.readers.kineto import read
from msprof_lsp.mapping.profile.timemodel import compute_breakdown, device_time_per_step_ns, profile_breakdown
from msprof_lsp.server.__main__ import main
from tests.mapping.profile.readers.test_kineto_schemas_and_windows import BWD, PID, T0, TID, launch_flow, old_gpu, old_op, old_runtime

ROCM_PID, MAIN, DDP = 4242, 4242, 4250
RCCL = "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "Cijk_Alik_Bljk_SB_MT128x128x16_MI32x32x2x1_SN_1LDSB0_GRVW4"


def load(tmp_path: Path, doc: dict, name: str = "t.pt.trace.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return read(ProfileLocation(ProfileKind.KINETO, path)), path


# -- defect 2: the 2021 schema, a backward-thread launch and work launched before the capture ---


def old_backward_trace() -> dict:
    """ProfilerStep#5 and #6 (1 ms each). In step 5 the autograd thread launches a kernel late
    (its cudaLaunchKernel has no operator around it, its kernel has external id 0) that runs in
    step 6's range; before step 5 the GPU still runs a kernel of the step before the capture
    (correlation 400, below every recorded launch: its launch is not in the trace)."""
    ev = [
        old_op("ProfilerStep#5", 0, 1000, 4),
        old_op("aten::conv2d", 100, 300, 10),
        old_runtime("cudaLaunchKernel", 150, 20, 500, 10),
        old_gpu("Kernel", "implicit_convolve_sgemm", 400, 250, 500, 10),
        {**old_runtime("cudaLaunchKernel", 950, 10, 501, 0), "tid": str(BWD)},
        old_gpu("Kernel", "wgrad_alg0_engine", 1040, 60, 501, 0),
        old_op("ProfilerStep#6", 1000, 1000, 40),
        old_op("aten::add_", 1500, 100, 41),
        old_runtime("cudaLaunchKernel", 1510, 10, 502, 41),
        old_gpu("Kernel", "vectorized_elementwise_kernel", 1600, 50, 502, 41),
        old_gpu("Kernel", "bn_bw_1C11_kernel_new", 10, 300, 400, 0),  # launched before the capture
        *launch_flow(500, 150, 400),
        *launch_flow(502, 1510, 1600),
        {"ph": "s", "id": 501, "pid": PID, "tid": BWD, "ts": T0 + 950, "cat": "async", "name": "launch"},
        {"ph": "f", "id": 501, "pid": 0, "tid": "stream 7", "ts": T0 + 1040, "cat": "async", "name": "launch",
         "bp": "e"},
    ]
    return {"schemaVersion": 1, "traceEvents": ev}


def test_2021_backward_launch_counts_in_the_step_that_launched_it(tmp_path):
    p, _ = load(tmp_path, old_backward_trace())
    k = p.kernels.set_index("name")
    # by the launch call's time (950 µs: step 5), not by the kernel's start (1,040 µs: step 6)
    assert k.loc["wgrad_alg0_engine", "step"] == 5
    assert k.loc["implicit_convolve_sgemm", "step"] == 5 and k.loc["vectorized_elementwise_kernel", "step"] == 6
    # the one launched before the capture is in no step, and the load says so
    assert k.loc["bn_bw_1C11_kernel_new", "step"] == STEP_LAUNCHED_OUTSIDE
    notes = [i.message for i in p.issues]
    assert notes == ["1 device task(s) launched before the first captured step (ProfilerStep#5) ran for "
                     "300 µs of device time: they are outside every step and in no per-step figure"]
    steps = {s.step: s for s in profile_breakdown(p).steps}
    # step 5: 400..650 and 1040..1100 -> Stage 700, Computing 310, Free 390; step 6: its one kernel
    assert (steps[5].stage_ns, steps[5].computing_ns, steps[5].free_ns) == (700_000, 310_000, 390_000)
    assert (steps[6].stage_ns, steps[6].free_ns) == (50_000, 0)


# -- defect 1: a ROCm DDP trace whose all-reduces were launched before the first ProfilerStep ---


def _x(cat: str, name: str, ts: float, dur: float, pid: int, tid: int, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": T0 + ts, "dur": dur, "args": args}


def _launch(name: str, ts: float, corr: int, ext: int, tid: int = MAIN) -> list[dict]:
    return [_x("cuda_runtime", name, ts, 8, ROCM_PID, tid, **{"External id": ext, "cbid": 0, "correlation": corr}),
            {"ph": "s", "id": corr, "pid": ROCM_PID, "tid": tid, "ts": T0 + ts, "cat": "ac2g", "name": "ac2g"}]


def _kernel(name: str, ts: float, dur: float, corr: int, ext: int, stream: int) -> list[dict]:
    return [_x("kernel", name, ts, dur, 2, stream, **{"External id": ext, "device": 2, "context": 1,
                                                     "stream": stream, "correlation": corr}),
            {"ph": "f", "id": corr, "pid": 2, "tid": stream, "ts": T0 + ts, "cat": "ac2g", "name": "ac2g",
             "bp": "e"}]


STEP_US = 16_200  # host ProfilerStep length
PRE_AR_US = 4_860  # five pre-capture all-reduces: 24.3 ms


def rocm_ddp_trace(steps: int = 3) -> dict:
    """A ROCm DDP rank: before ProfilerStep#1 DDP's reducer thread (no operator around its
    hipExtLaunchKernel calls) launches five all-reduces that run 24.3 ms on the RCCL stream while
    step 1 computes; 3 more kernels of the step before the capture have no recorded launch. Each
    step: ten 1.4 ms GEMMs on stream 0 launched by aten::mm, then one 1.5 ms all-reduce launched by
    record_param_comms (queued behind the earlier ones on the RCCL stream); the optimizer waits for
    it, so the next step's GEMMs start after it."""
    ev: list[dict] = []
    corr = 100
    rccl_free = 1_200  # when the RCCL stream is next free
    for i in range(5):
        corr += 1
        ev += _launch("hipExtLaunchKernel", 100 + 60 * i, corr, 0, tid=DDP)
        ev += _kernel(RCCL, rccl_free, PRE_AR_US, corr, 0, 3)
        rccl_free += PRE_AR_US
    for i in range(3):  # launched before the capture began: their launch is not in the trace
        ev += _kernel(GEMM, 300 + 200 * i, 150, 10 + i, 0, 0)[:1]
    ext = 1000
    compute_free = 0  # when stream 0 may run the next step's GEMMs
    for n in range(steps):
        s = 1_000 + n * STEP_US
        ext += 10
        ev.append(_x("user_annotation", f"ProfilerStep#{n + 1}", s, STEP_US - 50, ROCM_PID, MAIN,
                     **{"External id": ext}))
        ev.append(_x("cpu_op", "aten::mm", s + 100, 300, ROCM_PID, MAIN, **{"External id": ext + 1}))
        for g in range(10):
            corr += 1
            ev += _launch("hipLaunchKernel", s + 110 + 20 * g, corr, ext + 1)
            ev += _kernel(GEMM, max(s + 500, compute_free) + 1_400 * g, 1_400, corr, ext + 1, 0)
        ev.append(_x("cpu_op", "record_param_comms", s + 500, 40, ROCM_PID, MAIN,
                     **{"External id": ext + 2, "Collective name": "allreduce"}))
        corr += 1
        ev += _launch("hipExtLaunchKernel", s + 510, corr, ext + 2)
        at = max(rccl_free, max(s + 500, compute_free) + 14_000)
        ev += _kernel(RCCL, at, 1_500, corr, ext + 2, 3)
        rccl_free = compute_free = at + 1_500
    return {"schemaVersion": 1, "deviceProperties": [{"id": 2, "name": "AMD Instinct MI300X"}],
            "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}, "traceEvents": ev}


def test_rocm_all_reduces_launched_before_the_capture_are_in_no_step(tmp_path):
    p, _ = load(tmp_path, rocm_ddp_trace())
    k = p.kernels
    outside = k["step"].to_numpy() == STEP_LAUNCHED_OUTSIDE
    assert outside.sum() == 8 and (k["name"][outside] == RCCL).sum() == 5
    assert [i.message for i in p.issues] == [
        "8 device task(s) launched before the first captured step (ProfilerStep#1) ran for 24.8 ms of device time, "
        "5 collective(s) of 24.3 ms among them: they are outside every step and in no per-step figure"]
    rows = profile_breakdown(p).steps
    assert [r.step for r in rows] == [1, 2, 3]
    for r in rows:
        assert r.communication_ns <= r.stage_ns
        assert r.computing_ns == 14_000_000  # ten GEMMs, nothing of the step before
    # step 1's all-reduce queues behind the pre-capture ones (25,500..27,000 µs): step 1 waits for
    # it, 10 ms idle in its window; steps 2 and 3 are back to back
    assert [r.communication_ns for r in rows] == [1_500_000] * 3
    assert [r.stage_ns for r in rows] == [25_500_000, 15_500_000, 15_500_000]
    assert [r.free_ns for r in rows] == [10_000_000, 0, 0]


def test_rocm_report_keeps_communication_inside_the_step(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _, path = load(tmp_path, rocm_ddp_trace(), "rank0.pt.trace.json")
    out = tmp_path / "o.json"
    assert main(["--check", str(tmp_path), "--profile", str(path), "--no-cache", "--format", "json",
                 "--fail-on", "never", "--output", str(out)]) == 0
    doc = json.loads(out.read_text())
    b = doc["profile"]["breakdown"]
    for s in b["steps"]:
        assert s["communication_us"] <= s["step_us"]
    assert b["mean"]["communication_us"] <= doc["profile"]["step_time_us"]
    assert any("launched before the first captured step" in i for i in doc["profile"]["issues"])


# -- defect 8: MTIA device events, a single stream's rounding, a rocprofv3 JSON ---------------------


def mtia_trace() -> dict:
    """An MTIA capture: host calls ``mtia_runtime``, device work ``mtia_ccp_events``."""
    ev = [_x("user_annotation", "ProfilerStep#0", 0, 1_000, ROCM_PID, MAIN, **{"External id": 1}),
          _x("cpu_op", "aten::mm", 10, 100, ROCM_PID, MAIN, **{"External id": 2}),
          _x("mtia_runtime", "LaunchKernel", 20, 10, ROCM_PID, MAIN, **{"External id": 2, "correlation": 7}),
          _x("mtia_ccp_events", "mm_kernel", 200, 300, 0, 1, **{"External id": 2, "correlation": 7, "device": 0,
                                                                 "stream": 1})]
    return {"schemaVersion": 1, "traceEvents": ev}


def test_mtia_device_events_are_device_tasks(tmp_path):
    p, _ = load(tmp_path, mtia_trace())
    assert list(p.kernels["name"]) == ["mm_kernel"] and list(p.kernels["core"]) == ["MTIA"]
    assert list(p.kernels["step"]) == [0]
    assert list(p.host_events["name"]) == ["LaunchKernel"]
    assert not p.issues  # nothing skipped
    assert profile_breakdown(p).steps[0].computing_ns == 300_000


def test_one_stream_never_holds_more_work_than_its_span(tmp_path):
    """A 2021 trace rounds to whole µs: back-to-back kernels on one stream overlap by 1 µs each.
    The work per step is their union (57 µs above the step as a plain sum)."""
    ev = [old_op("ProfilerStep#1", 0, 200, 1)]
    for i in range(57):
        ev.append(old_gpu("Kernel", f"k{i}", 10 + 3 * i, 4, 600 + i, None))  # each overlaps the next by 1 µs
        ev.append(old_runtime("cudaLaunchKernel", 1 + i, 1, 600 + i, 0))
    p, _ = load(tmp_path, {"schemaVersion": 1, "traceEvents": ev})
    stage = profile_breakdown(p).steps[0].stage_ns
    assert stage == (10 + 3 * 56 + 4 - 10) * 1_000
    assert device_time_per_step_ns(p) == stage  # one stream: never above its span (the sum is 57 µs more)
    assert int(p.kernels["dur_ns"].sum()) - stage == 57_000 - 1_000


def test_rocprofv3_json_is_named_for_what_it_is(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"rocprofiler-sdk-tool": [{"metadata": {"pid": 1}, "agents": [],
                                                          "buffer_records": {"kernel_dispatch": []}}]}))
    assert main(["--check", str(tmp_path), "--profile", str(path), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "a rocprofv3 JSON" in err and "torch.profiler" in err and "Traceback" not in err
    assert "no profile found" not in err and "to record one" not in err


def test_step_windows_never_overlap(tmp_path):
    """Per device, each step's window (first to last compute or communication task, as the
    breakdown counts it) closes before the next one opens."""
    p, _ = load(tmp_path, rocm_ddp_trace(steps=4))
    rows = profile_breakdown(p).steps
    k = p.kernels
    first = {int(s): int(k["start_ns"][k["step"] == s].min()) for s in np.unique(k["step"]) if s >= 0}
    # the windows as the breakdown sees them: Stage back to back from the first step's first task
    opens = first[rows[0].step]
    for r in rows:
        assert r.stage_ns >= 0 and r.communication_ns <= r.stage_ns
        opens += r.stage_ns
    last_end = int((k["start_ns"] + k["dur_ns"])[k["step"] >= 0].max())
    assert opens <= last_end


def test_a_task_beside_the_previous_steps_tail_is_split_not_lost():
    """Step 1's all-reduce runs 10..20 on stream 3 while step 2's GEMM (launched in step 2) runs
    15..25 on stream 0: step 1's window closes at 20, step 2's opens there; the GEMM's 15..20
    counts in step 1, 20..25 in step 2: nothing lost, nothing counted twice."""
    k = pd.DataFrame({"name": ["gemm1", RCCL, "gemm2"], "core": ["GPU", "COMMUNICATION", "GPU"],
                      "type": ["", "allreduce", ""], "start_ns": [0, 10, 15], "dur_ns": [10, 10, 10],
                      "step": [1, 1, 2], "device": [0, 0, 0], "stream": [0, 3, 0]})
    rows = {r.step: r for r in compute_breakdown(k, [Step(1, 0, 12), Step(2, 12, 30)])}
    assert (rows[1].stage_ns, rows[1].computing_ns, rows[1].communication_ns) == (20, 15, 10)
    assert (rows[2].stage_ns, rows[2].computing_ns) == (5, 5)
    assert rows[1].computing_ns + rows[2].computing_ns == 20  # both GEMMs, whole
