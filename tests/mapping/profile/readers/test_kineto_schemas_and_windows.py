"""Kineto traces in the 2021 event schema, traces the reader does not recognise, traces without
step markers, and the rules' time measured inside the step windows.

Every trace here is written event by event as the producer writes it: the 2021 schema exactly as
the tb_plugin sample shows it (capitalised categories, thread ids as text, GPU streams as
"stream 7", ``external id`` in lower case on GPU activity and runtime calls, launch flows of
category ``async`` named ``launch``, ``Call stack`` on operators), the current schema as in the
HTA traces (numeric ids, ``cpu_op`` / ``kernel`` / ``cuda_runtime``, ``ac2g`` flows).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import Backend, ProfileKind, Step
from msprof_lsp.mapping.profile.readers.kineto import read
from msprof_lsp.mapping.profile.step_windows import capture_step, covered_per_step, merge_intervals
from msprof_lsp.mapping.profile.timemodel import profile_breakdown
from msprof_lsp.mapping.source.heat import SourceHeat
from msprof_lsp.server.analysis.views.rows import ProfileView
from msprof_lsp.server.check.report.text import breakdown_line

PID, TID, BWD = 25738, 25738, 25772
T0 = 1_623_142_623_460_000  # epoch µs, written as JSON integers (no baseTimeNanoseconds)


def load(tmp_path: Path, doc: dict, name: str = "t.pt.trace.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return read(ProfileLocation(ProfileKind.KINETO, path))


def old_op(name: str, ts: int, dur: int, ext: int, stack: str = "", **args) -> dict:
    a = {"Device": PID, "External id": ext, "Trace name": "PyTorch Profiler", "Trace iteration": 0, **args}
    if stack:
        a["Call stack"] = stack
    return {"ph": "X", "cat": "Operator", "name": name, "pid": PID, "tid": str(TID), "ts": T0 + ts, "dur": dur, "args": a}


def old_runtime(name: str, ts: int, dur: int, corr: int, ext: int) -> dict:
    return {"ph": "X", "cat": "Runtime", "name": name, "pid": PID, "tid": str(TID), "ts": T0 + ts, "dur": dur,
            "args": {"cbid": 211, "correlation": corr, "external id": ext, "external ts": T0 + ts}}


def old_gpu(cat: str, name: str, ts: int, dur: int, corr: int, ext: int | None) -> dict:
    a = {"device": 0, "context": 1, "stream": 7, "correlation": corr}
    if ext is not None:
        a["external id"] = ext
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": "stream 7", "ts": T0 + ts, "dur": dur, "args": a}


def launch_flow(corr: int, ts_launch: int, ts_kernel: int) -> list[dict]:
    return [
        {"ph": "s", "id": corr, "pid": PID, "tid": TID, "ts": T0 + ts_launch, "cat": "async", "name": "launch"},
        {"ph": "f", "id": corr, "pid": 0, "tid": "stream 7", "ts": T0 + ts_kernel, "cat": "async", "name": "launch", "bp": "e"},
    ]


STACK = ("/home/u/env/lib/python3.7/site-packages/torch/nn/modules/conv.py(440): _conv_forward;"
         "/home/u/env/lib/python3.7/site-packages/torch/nn/modules/module.py(1051): _call_impl;"
         "train.py(46): <module>")


def old_schema_trace() -> dict:
    """Two steps; a conv launching a kernel (linked by external id), a copy launched from a runtime
    call whose GPU row has no external id (linked by correlation, and by the launch flow)."""
    ev = [
        {"name": "process_labels", "ph": "M", "ts": T0, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        old_op("ProfilerStep#5", 0, 1000, 4, "prof.py(614): __enter__;train.py(54): <module>"),
        old_op("aten::conv2d", 100, 300, 10, STACK, **{"Input Dims": [[32, 3, 224, 224], [64, 3, 7, 7]]}),
        old_op("aten::cudnn_convolution", 120, 260, 11),  # no stack of its own: the conv2d's
        old_runtime("cudaLaunchKernel", 150, 20, 500, 11),
        old_gpu("Kernel", "implicit_convolve_sgemm", 400, 250, 500, 11),
        old_op("ProfilerStep#6", 1000, 1000, 40, "prof.py(614): __enter__;train.py(54): <module>"),
        old_op("aten::copy_", 1100, 200, 41, "train.py(44): <module>"),
        old_runtime("cudaMemcpyAsync", 1150, 30, 501, 41),
        old_gpu("Memcpy", "Memcpy HtoD (Pageable -> Device)", 1200, 120, 501, None),
        old_gpu("Memset", "Memset (Device)", 1400, 2, 502, None),
        {"ph": "X", "cat": "Trace", "ts": T0, "dur": 2000, "pid": "Traces", "tid": "PyTorch Profiler",
         "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": PID, "tid": TID, "ts": T0 + 130,
         "args": {"Device Type": 1, "Device Id": 0, "Bytes": 4096}},
        *launch_flow(500, 150, 400),
        *launch_flow(501, 1150, 1200),
    ]
    return {"schemaVersion": 1, "traceEvents": ev}


def test_2021_schema_is_read_in_full(tmp_path):
    p = load(tmp_path, old_schema_trace())
    assert p.meta.backend is Backend.CUDA
    assert [(s.id, s.start_ns, s.dur_ns) for s in p.steps] == [
        (5, (T0 + 0) * 1000, 1_000_000), (6, (T0 + 1000) * 1000, 1_000_000)]
    assert not p.issues
    h, k = p.host_ops, p.kernels
    assert list(h["cat"]) == ["cpu_op"] * 5  # the 2021 "Operator" is today's cpu_op
    assert sorted(set(h["tid"])) == [TID]
    assert list(k["core"]) == ["GPU", "MEMCPY", "MEMSET"]
    assert list(k["stream"]) == [7, 7, 7] and list(k["device"]) == [0, 0, 0]
    assert list(k["dur_ns"]) == [250_000, 120_000, 2_000]
    names = list(h["name"])
    launched = [names[i] if i >= 0 else None for i in k["host_op"]]
    # by external id; by the correlation of the runtime call; the memset's runtime call is absent
    assert launched == ["aten::cudnn_convolution", "aten::copy_", None]
    assert list(k["step"]) == [5, 6, 6]
    conv_stack = p.stack_of(int(k["stack"].iloc[0]))
    assert [f.raw for f in conv_stack][-1] == "train.py(46): <module>"
    # the 2021 Call stack holds the running line of every frame
    assert p.meta.extra["frame_lines"] == "call" and p.meta.def_line_frames is False


def test_text_ids_become_numbers_and_profiler_rows_are_left_out(tmp_path):
    doc = {"traceEvents": [
        {"ph": "X", "cat": "Operator", "name": "a", "pid": PID, "tid": "-3", "ts": 10, "dur": 5},
        {"ph": "X", "cat": "Operator", "name": "b", "pid": PID, "tid": " 12 ", "ts": 20, "dur": 5},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 0, "dur": 50},
    ]}
    p = load(tmp_path, doc)
    assert list(zip(p.host_ops["name"], p.host_ops["tid"])) == [("a", -3), ("b", 12)]
    assert not [i for i in p.issues if "categories" in i.message]


def test_current_schema_call_stacks_keep_def_lines(tmp_path):
    doc = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"External id": 1, "Call stack": "model.py(14): forward;train.py(40): <module>"}},
    ]}
    p = load(tmp_path, doc)
    assert p.meta.extra["frame_lines"] == "def" and p.meta.def_line_frames is True


def test_launch_flow_links_a_gpu_row_without_correlation(tmp_path):
    doc = old_schema_trace()
    for e in doc["traceEvents"]:
        if e.get("cat") == "Memcpy":
            del e["args"]["correlation"]
    p = load(tmp_path, doc)
    names = list(p.host_ops["name"])
    assert names[int(p.kernels["host_op"].iloc[1])] == "aten::copy_"


def test_a_trace_of_unknown_categories_says_what_it_found(tmp_path):
    doc = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "npu_task", "name": "MatMul", "pid": 3, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "npu_task", "name": "Add", "pid": 3, "tid": 1, "ts": 20, "dur": 5},
        {"ph": "X", "cat": "host_api", "name": "launch", "pid": 1, "tid": 1, "ts": 9, "dur": 1},
    ]}
    p = load(tmp_path, doc)
    assert not len(p.kernels) and not len(p.host_ops)
    assert [i.message for i in p.issues] == [
        "no event the Kineto reader knows (operators, GPU kernels, memcpy/memset, runtime calls, "
        "Python calls); categories found: npu_task (2), host_api (1)"]


def test_a_trace_without_complete_events_says_so(tmp_path):
    doc = {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]}
    p = load(tmp_path, doc)
    assert [i.message for i in p.issues] == [
        "no event the Kineto reader knows (operators, GPU kernels, memcpy/memset, runtime calls, "
        "Python calls); categories found: none (no complete 'X' events)"]


def test_unknown_categories_beside_known_ones_are_counted(tmp_path):
    doc = old_schema_trace()
    doc["traceEvents"].append({"ph": "X", "cat": "Mystery", "name": "x", "pid": PID, "tid": str(TID), "ts": T0 + 5, "dur": 1})
    p = load(tmp_path, doc)
    assert [i.message for i in p.issues] == [
        "skipped 1 event(s) of categories the reader does not know: Mystery (1)"]
    assert p.meta.extra["unknown_categories"] == {"Mystery": 1}
    assert len(p.kernels) == 3  # the rest is read as before


def no_steps_trace() -> dict:
    """Current schema, no ProfilerStep: two host threads each blocking in aten::item, overlapping
    in time; kernels on two streams."""
    def op(name, tid, ts, dur, ext):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": tid, "ts": T0 + ts, "dur": dur,
                "args": {"External id": ext}}

    def kernel(stream, ts, dur, ext):
        return {"ph": "X", "cat": "kernel", "name": f"k{ext}", "pid": 0, "tid": stream, "ts": T0 + ts, "dur": dur,
                "args": {"External id": ext, "device": 0, "stream": stream, "correlation": ext}}

    return {"schemaVersion": 1, "traceEvents": [
        op("aten::mm", 7, 0, 50, 1), kernel(7, 20, 400, 1),
        op("aten::item", 7, 100, 600, 2),   # waits for the kernel
        op("aten::mm", 8, 150, 50, 3), kernel(20, 200, 300, 3),
        op("aten::item", 8, 300, 500, 4),   # overlaps the first item
        op("aten::add", 7, 950, 50, 5),  # the capture ends at 1000
    ]}


def test_no_step_markers_make_the_capture_span_the_one_step(tmp_path):
    p = load(tmp_path, no_steps_trace())
    assert p.meta.steps_from_capture
    assert p.steps == [Step(0, T0 * 1000, (T0 + 1000) * 1000)]
    assert p.step_time() == (1_000_000.0, "capture span")
    assert [i.message for i in p.issues] == [
        "no step markers (ProfilerStep#N) and no repeating launch sequence: the capture's measured span, "
        "first event to last, 1,000 µs, is used as the one step"]
    assert set(p.kernels["step"]) == {0}


def ctx_for(profile) -> RuleContext:
    return RuleContext(profile, None, None, RuleConfig(min_share=0.0))


def test_host_sync_time_is_the_union_inside_the_window(tmp_path):
    p = load(tmp_path, no_steps_trace())
    [f] = rule("NPU108").check(ctx_for(p))
    # items [100, 700) and [300, 800) overlap: 700 µs blocked, not 1,100 µs
    assert f.evidence["host_us_per_step"] == 700.0
    assert f.share == pytest.approx(0.7)
    assert f.evidence["syncs"] == [{"op": "aten::item", "count": 2, "total_us": 1100.0}]


def test_host_sync_across_a_step_boundary_counts_in_each_step(tmp_path):
    doc = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 7, "tid": 7,
         "ts": T0 + 1000 * n, "dur": 1000, "args": {"External id": 100 + n}} for n in (1, 2)
    ] + [
        # on another thread (on the step's own thread ops nest in it): a sync starting late in
        # step 1 that ends in step 2, and a long one running past the last step
        {"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": 7, "tid": 8, "ts": T0 + 1900, "dur": 300,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": 7, "tid": 8, "ts": T0 + 2500, "dur": 5000,
         "args": {"External id": 2}},
    ]}
    p = load(tmp_path, doc)
    [f] = rule("NPU108").check(ctx_for(p))
    # inside [1000, 2000) and [2000, 3000): 100 + 200 + 500 µs over two steps
    assert f.evidence["host_us_per_step"] == 400.0
    assert f.evidence["longest"]["us"] == 500.0 and f.evidence["longest"]["share_of_wall_step"] == 0.5
    assert f.share == pytest.approx(0.4)


def _kernel(name, cat, stream, ts, dur, ext):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": T0 + ts, "dur": dur,
            "args": {"External id": ext, "device": 0, "stream": stream, "correlation": ext}}


def _op(name, tid, ts, dur, ext):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": tid, "ts": T0 + ts, "dur": dur,
            "args": {"External id": ext}}


def test_device_idle_is_the_breakdowns_free(tmp_path):
    """NPU105's idle time is the breakdown's Free (Stage - Computing - Communication not
    overlapped; copies count as free), the figure the report's breakdown line prints, plus the
    idle Preparing before the step's first task."""
    doc = no_steps_trace()
    doc["traceEvents"] += [
        _op("aten::copy_", 7, 540, 20, 6), _kernel("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 7, 550, 100, 6),
        _op("aten::mm", 7, 680, 20, 7), _kernel("k7", "kernel", 7, 700, 100, 7),
    ]
    p = load(tmp_path, doc)
    [f] = rule("NPU105").check(ctx_for(p))
    ev = f.evidence
    # compute [20, 420) ∪ [200, 500) ∪ [700, 800) = 580 µs; Stage [20, 800) = 780 µs;
    # Free = 780 - 580 = 200 µs, the 100 µs copy inside it; the step is the 1,000 µs capture
    assert (ev["free_us_per_step"], ev["computing_us_per_step"], ev["step_us"]) == (200.0, 580.0, 1000.0)
    assert ev["memcpy_us_per_step"] == 100.0 and ev["source"] == "device tasks" and not ev["step_is_stage"]
    # Preparing: the capture's start to the first task at 20 µs, all idle (1,000 - 780 >= 20)
    assert ev["parts"]["preparing"]["us_per_step"] == 20.0 and ev["idle_us_per_step"] == 220.0
    assert f.share == pytest.approx(0.22)
    b = profile_breakdown(p)
    assert b.mean("free_ns") == 200_000 and b.mean("computing_ns") == 580_000
    heat = SourceHeat(step_time_ns=0, num_steps=1, spans=[], lines=[], functions=[], total_device_ns=0,
                      attributed_ns=0, unattributed_ns=0)
    assert "free 200 µs" in breakdown_line(ProfileView.of(p, None, [], tmp_path, heat))


def test_device_idle_share_is_of_the_stage_when_device_work_outlasts_the_step(tmp_path):
    """Kernels belong to the step that launched them; when they run past its ProfilerStep range the
    device Stage is longer than the step, and Free is a share of the Stage."""
    doc = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 7,
         "ts": T0, "dur": 500, "args": {"External id": 100}},
        _op("aten::mm", 7, 100, 20, 1), _kernel("k1", "kernel", 7, 400, 500, 1),
        _op("aten::mm", 7, 200, 20, 2), _kernel("k2", "kernel", 7, 1100, 100, 2),
    ]}
    p = load(tmp_path, doc)
    assert p.step_time() == (500_000.0, "ProfilerStep")
    [f] = rule("NPU105").check(ctx_for(p))
    ev = f.evidence
    # Stage [400, 1200) = 800 µs; Computing 500 + 100 = 600 µs; Free 200 µs = a quarter of the Stage
    assert (ev["free_us_per_step"], ev["computing_us_per_step"], ev["step_us"]) == (200.0, 600.0, 800.0)
    assert ev["step_is_stage"] and f.share == pytest.approx(0.25)
    assert "(25.0% of the device step)" in f.message


def test_merge_and_cover():
    s, e = merge_intervals(np.array([5, 0, 20, 8]), np.array([10, 6, 30, 9]))
    assert (s.tolist(), e.tolist()) == ([0, 20], [10, 30])
    steps = [Step(1, 0, 8), Step(2, 8, 25), Step(3, 40, 50)]
    got = covered_per_step(np.array([5, 0, 20, 8]), np.array([10, 6, 30, 9]), steps)
    assert got.tolist() == [8, 2 + 5, 0]
    assert covered_per_step(np.zeros(0, np.int64), np.zeros(0, np.int64), steps).tolist() == [0, 0, 0]


def test_capture_step_skips_missing_times():
    assert capture_step((np.array([-1, 50]), np.array([10])), (np.array([5, 90]), np.array([70]))) == Step(0, 10, 90)
    assert capture_step((np.array([-1]),), (np.array([5]),)) is None
