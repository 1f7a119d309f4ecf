"""The critical path: the longest-path core on a hand-built DAG, the step graph on hand-built and
synthetic steps (tests/synth), and per-line on-path time through attribution."""

from __future__ import annotations

import pytest

from msprof_lsp.mapping.critical_path import Edge, SegmentKind, critical_path, longest_path, step_path
from msprof_lsp.mapping.model import HOST_EVENT_SCHEMA, HOST_OP_SCHEMA, KERNEL_SCHEMA, Profile, ProfileKind, ProfileMeta, Step, make_table


def test_longest_path_hand_built_dag():
    # 0 -> 1 -> 3 -> 4 weighs 2 + 5 + 1 = 8; 0 -> 2 -> 3 -> 4 weighs 3 + 1 + 1 = 5; 0 -> 4 weighs 7
    edges = [Edge(0, 1, 2), Edge(1, 3, 5), Edge(0, 2, 3), Edge(2, 3, 1), Edge(3, 4, 1), Edge(0, 4, 7)]
    total, path = longest_path(5, edges, 4)
    assert total == 8
    assert path == [0, 1, 4]


def test_longest_path_any_start_and_diamond_tie_break():
    # node 5 is a second source; 5 -> 3 weighs 9 and beats everything reaching 3 from 0
    edges = [Edge(0, 1, 2), Edge(1, 3, 5), Edge(5, 3, 9), Edge(3, 4, 1)]
    total, path = longest_path(6, edges, 4)
    assert (total, path) == (10, [2, 3])


def test_longest_path_cycle_is_refused():
    assert longest_path(3, [Edge(0, 1, 1), Edge(1, 2, 1), Edge(2, 1, 1)], 2) is None


def _profile(host_ops: dict, kernels: dict, events: dict | None = None) -> Profile:
    meta = ProfileMeta(ProfileKind.KINETO, "/nowhere")
    p = Profile(meta=meta, host_ops=make_table(HOST_OP_SCHEMA, host_ops), kernels=make_table(KERNEL_SCHEMA, kernels))
    if events:
        p.host_events = make_table(HOST_EVENT_SCHEMA, events)
    p.steps = [Step(0, 0, 1000)]
    return p


def test_step_path_device_bound_step_with_sync():
    """Host: op A [0, 100) launches K1 (stream 7, [50, 450)); op B [100, 150) launches K2
    ([450, 850), queued behind K1); cudaDeviceSynchronize [150, 860) waits for K2.
    Critical path: A's host time up to K1's launch point (50), K1 400, stream gap 0, K2 400,
    K2 end -> sync end 10: 50 + 400 + 400 + 10 = 860. The sync call's blocked 700 ns and B's
    slack are off the path (the host chain through B reaches K2 only at 560)."""
    p = _profile(
        {"name": ["A", "B"], "start_ns": [0, 100], "dur_ns": [100, 50], "pid": [1, 1], "tid": [1, 1]},
        {"name": ["k1", "k2"], "core": ["GPU", "GPU"], "start_ns": [50, 450], "dur_ns": [400, 400],
         "stream": [7, 7], "device": [0, 0], "step": [0, 0], "host_op": [0, 1]},
        {"name": ["cudaLaunchKernel", "cudaDeviceSynchronize"], "cat": ["cuda_runtime"] * 2,
         "start_ns": [40, 150], "dur_ns": [10, 710], "pid": [1, 1], "tid": [1, 1]},
    )
    sp = step_path(p, p.steps[0])
    assert sp is not None
    assert sp.total_ns == 860
    assert [(s.kind, s.weight_ns) for s in sp.segments] == [
        (SegmentKind.HOST, 40), (SegmentKind.HOST, 10), (SegmentKind.KERNEL, 400),
        (SegmentKind.KERNEL, 400), (SegmentKind.WAIT, 10)]
    assert [s.kernel for s in sp.segments if s.kind is SegmentKind.KERNEL] == [0, 1]
    assert sp.segments[0].host_op == 0
    kinds = sp.by_kind()
    assert kinds[SegmentKind.KERNEL] == 800 and kinds[SegmentKind.HOST] == 50


def test_step_path_host_bound_step_stays_on_the_host():
    """Tiny kernels behind slow host ops: the path is the host thread (kernels are hidden)."""
    p = _profile(
        {"name": ["A", "B"], "start_ns": [0, 300], "dur_ns": [300, 300], "pid": [1, 1], "tid": [1, 1]},
        {"name": ["k1", "k2"], "core": ["GPU", "GPU"], "start_ns": [100, 400], "dur_ns": [20, 20],
         "stream": [7, 7], "device": [0, 0], "step": [0, 0], "host_op": [0, 1]},
    )
    sp = step_path(p, p.steps[0])
    assert sp.total_ns == 600
    assert {s.kind for s in sp.segments} == {SegmentKind.HOST}
    assert sum(s.weight_ns for s in sp.segments if s.host_op == 1) == 300


def test_step_path_event_wait_follows_the_communication_stream():
    """Ascend: compute stream 1 runs EVENT_WAIT [100, 500) until the allreduce on stream 2
    ([80, 480)) records its event ([480, 490)); then MatMul [500, 600). The path runs through
    the collective: 40 host + 40 launch delay + 400 comm + 10 record + 10 record -> wait end
    + 100 MatMul = 600; the host's launch of MatMul at 90 was met long before, so no slack of
    it is on the path."""
    p = _profile(
        {"name": ["hcom", "mm"], "start_ns": [0, 50], "dur_ns": [40, 40], "pid": [1, 1], "tid": [1, 1]},
        {"name": ["hcom_allReduce__1_0_1", "EVENT_RECORD", "EVENT_WAIT", "MatMul1"],
         "core": ["HCCL", "", "", "AI_CORE"], "start_ns": [80, 480, 100, 500], "dur_ns": [400, 10, 400, 100],
         "stream": [2, 2, 1, 1], "device": [0, 0, 0, 0], "step": [0, 0, 0, 0], "host_op": [0, -1, -1, 1]},
    )
    sp = step_path(p, p.steps[0])
    assert sp.total_ns == 600
    assert [(s.kind, s.weight_ns) for s in sp.segments if s.kind is not SegmentKind.HOST] == [
        (SegmentKind.WAIT, 40), (SegmentKind.COMM, 400), (SegmentKind.WAIT, 10), (SegmentKind.WAIT, 10),
        (SegmentKind.KERNEL, 100)]
    assert sp.span_ns == 600
