"""The critical path: the longest-path core on a hand-built DAG, the step graph on hand-built and
synthetic steps (tests/synth), and per-line on-path time through attribution."""

from __future__ import annotations

from pathlib import Path

import pytest

from msprof_lsp.mapping.source.critical_path import Edge, SegmentKind, critical_path, longest_path, step_path
from msprof_lsp.mapping.profile.model import HOST_EVENT_SCHEMA, HOST_OP_SCHEMA, KERNEL_SCHEMA, Profile, ProfileKind, ProfileMeta, Step, make_table


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
        (SegmentKind.HOST, 50), (SegmentKind.KERNEL, 400), (SegmentKind.KERNEL, 400), (SegmentKind.WAIT, 10)]
    assert sp.segments[-1].name == "sync"
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


def test_synthetic_kineto_step(tmp_path):
    """A synthetic CUDA step (tests/synth): a host-bound DataLoader fetch, then the model.
    Independent counts: the fetch, during which nothing else runs, lies wholly on the path;
    the segments follow each other in time; kinds add up to the total; the total fits the span."""
    from pathlib import Path

    from msprof_lsp.mapping.profile.load import load_location, locate
    from tests.synth.examples import small_run
    from tests.synth.write_kineto import write_kineto

    trace = write_kineto(small_run(steps=2, world_size=1), tmp_path / "trace.pt.trace.json")
    profile = load_location(locate(Path(trace)), use_cache=False)
    cp = critical_path(profile)
    assert [p.step for p in cp.steps] == [s.id for s in profile.steps] == [1, 2]
    h = profile.host_ops
    for sp, step in zip(cp.steps, profile.steps):
        assert sum(sp.by_kind().values()) == sp.total_ns <= sp.span_ns <= step.dur_ns
        for a, b in zip(sp.segments, sp.segments[1:]):
            assert a.end_ns <= b.start_ns
        fetch = h[h["name"].astype(str).str.startswith("enumerate(DataLoader)")
                  & (h["start_ns"] >= step.start_ns) & (h["start_ns"] < step.end_ns)]
        assert len(fetch) == 1
        f0 = int(fetch["start_ns"].iloc[0])
        f1 = f0 + int(fetch["dur_ns"].iloc[0])
        inside = sum(min(s.end_ns, f1) - max(s.start_ns, f0) for s in sp.segments if s.start_ns < f1 and s.end_ns > f0)
        assert inside == f1 - f0
        assert sp.by_kind()[SegmentKind.KERNEL] > 0  # the model's kernels reach the path too


def test_lines_on_path_through_attribution():
    """Per line: kernels on the path count for the line their kernel_site names; a kernel off
    the path does not; host self time goes to host_on_path."""
    import numpy as np

    from msprof_lsp.mapping.source.heat import Attribution, LineHeat, Site, SourceHeat
    from msprof_lsp.mapping.spans import Confidence, Span

    p = _profile(
        {"name": ["A", "B"], "start_ns": [0, 100], "dur_ns": [100, 50], "pid": [1, 1], "tid": [1, 1]},
        {"name": ["k1", "k2", "k3"], "core": ["GPU"] * 3, "start_ns": [50, 450, 60], "dur_ns": [400, 400, 10],
         "stream": [7, 7, 8], "device": [0] * 3, "step": [0] * 3, "host_op": [0, 1, 0]},
        {"name": ["cudaLaunchKernel", "cudaDeviceSynchronize"], "cat": ["cuda_runtime"] * 2,
         "start_ns": [40, 150], "dur_ns": [10, 710], "pid": [1, 1], "tid": [1, 1]},
    )
    sites = [Site(Span("/w/m.py", 3, 0, 3, 5), Confidence.STACK, "f", "a()"),
             Site(Span("/w/m.py", 4, 0, 4, 5), Confidence.STACK, "f", "b()")]
    heat = SourceHeat(1000.0, 1, [], [LineHeat("/w/m.py", 3, 410, 410.0, 0.41), LineHeat("/w/m.py", 4, 400, 400.0, 0.4)],
                      [], 810, 810, 0)
    att = Attribution(sites, np.array([0, 1, 0]), np.array([0, 1]), heat)
    cp = critical_path(p, att)
    by_line = {lp.line: lp for lp in cp.lines}
    assert by_line[3].on_path_per_step_ns == 400  # k1; k3 (stream 8) is off the path
    assert by_line[3].total_per_step_ns == 410.0
    assert by_line[4].on_path_per_step_ns == 400
    assert by_line[3].host_on_path_per_step_ns == 50  # A's time up to k1's launch call's end
    assert by_line[4].host_on_path_per_step_ns == 0  # B's slack is off the path


def test_real_cuda_trace_hta_control():
    """HTA's trace_diff/control (a real 6-step CUDA training trace). Independent counts: every
    kernel segment weighs its kernel's own duration from the table (each kernel is its own
    segment); kinds add up; the path fits its span, and that the step with its kernels; it reaches the
    device (HTA's path there holds ~10 kernels per step; ours more, see docs/numbers.md)."""
    from tests.conftest import shared_fixture

    from msprof_lsp.mapping.profile.load import load_location, locate

    trace = shared_fixture("HolisticTraceAnalysis/trace_diff/control/control.json.gz")
    profile = load_location(locate(trace), use_cache=False)
    cp = critical_path(profile, max_steps=2)
    assert [p.step for p in cp.steps] == [1009, 1010]
    dur = profile.kernels["dur_ns"].to_numpy()
    k = profile.kernels
    k_end = (k["start_ns"] + k["dur_ns"]).to_numpy()
    for sp, step in zip(cp.steps, profile.steps):
        # the step's kernels (launched inside it) may run past its host end
        last = max(step.end_ns, int(k_end[k["step"].to_numpy() == step.id].max()))
        assert sum(sp.by_kind().values()) == sp.total_ns <= sp.span_ns <= last - step.start_ns
        assert sp.segments[0].start_ns >= step.start_ns and sp.segments[-1].end_ns <= last
        ks = [s for s in sp.segments if s.kernel >= 0 and s.kind is SegmentKind.KERNEL]
        assert len(ks) >= 10
        for s in ks:
            assert s.weight_ns == s.end_ns - s.start_ns == dur[s.kernel]


def test_empty_op_closes_right_after_it_opens():
    """Host op A [0, 300) holds an empty op Z at 10 (a zero-duration aten::empty is common in
    Kineto traces): A's self time after Z is still A's, Z has none."""
    p = _profile(
        {"name": ["A", "Z"], "start_ns": [0, 10], "dur_ns": [300, 0], "pid": [1, 1], "tid": [1, 1]},
        {"name": ["k1"], "core": ["GPU"], "start_ns": [100], "dur_ns": [20],
         "stream": [7], "device": [0], "step": [0], "host_op": [0]},
    )
    sp = step_path(p, p.steps[0])
    assert sp.total_ns == 300
    assert sum(s.weight_ns for s in sp.segments if s.host_op == 0) == 300
    assert not [s for s in sp.segments if s.host_op == 1]
    assert dict(zip(sp.host_ops.tolist(), sp.host_self_ns.tolist())) == {0: 300, 1: 0}


def test_task_before_its_launching_op_is_not_a_cycle():
    """A kernel that starts before the op linked as its launcher began (clock skew): its launch
    edge would close a cycle through the sync that waits for it; it is left out and counted."""
    p = _profile(
        {"name": ["A", "B"], "start_ns": [0, 500], "dur_ns": [100, 100], "pid": [1, 1], "tid": [1, 1]},
        {"name": ["k1"], "core": ["GPU"], "start_ns": [50], "dur_ns": [100],
         "stream": [7], "device": [0], "step": [0], "host_op": [1]},
        {"name": ["cudaDeviceSynchronize"], "cat": ["cuda_runtime"], "start_ns": [120], "dur_ns": [60],
         "pid": [1], "tid": [1]},
    )
    sp = step_path(p, p.steps[0])
    assert sp is not None and sp.late_launches == 1
    # k1 [50, 150) starts the device side with nothing before it (100 ns to the sync's arrival);
    # the host reaches the sync at 120 and carries on: A 100, 20 between ops, the sync's last 30
    # (after k1's end), 320 to B, B 100
    assert sp.total_ns == 570
    assert [(s.kind, s.weight_ns, s.name) for s in sp.segments] == [
        (SegmentKind.HOST, 100, "A"), (SegmentKind.HOST, 20, ""), (SegmentKind.WAIT, 30, "sync"),
        (SegmentKind.HOST, 320, ""), (SegmentKind.HOST, 100, "B")]
    assert sp.segments[2].call == 0  # the cudaDeviceSynchronize row it waited in


def test_unavailable_says_why():
    """No path is guessed: a capture without step markers, and kernels linked to no host op."""
    from tests.conftest import shared_fixture

    from msprof_lsp.mapping.profile.load import load_location, locate
    from msprof_lsp.mapping.profile.model import StepsSource
    from msprof_lsp.server.analysis.views.parts import CriticalPathView
    from msprof_lsp.server.analysis.views.rows import PathFigures

    alexnet = load_location(locate(shared_fixture("HolisticTraceAnalysis/critical_path/alexnet")), use_cache=False)
    assert alexnet.meta.steps_source is StepsSource.CAPTURE
    cp = critical_path(alexnet)
    assert cp.steps == [] and "no step markers" in cp.unavailable
    doc = CriticalPathView.of(cp, Path("/")).as_dict()
    assert doc["unavailable"] == cp.unavailable and doc["steps"] == [] and doc["total_us"] == 0.0
    assert PathFigures.of(cp, "/x.py", 1).as_dict() == {"on_path_us": None, "critical_path_unavailable": cp.unavailable}
    p = _profile(
        {"name": ["A"], "start_ns": [0], "dur_ns": [100], "pid": [1], "tid": [1]},
        {"name": ["k1"], "core": ["GPU"], "start_ns": [50], "dur_ns": [400],
         "stream": [7], "device": [0], "step": [0], "host_op": [-1]},
    )
    assert "no flow events or correlation ids" in critical_path(p).unavailable


def test_the_path_is_computed_once_per_profile(monkeypatch):
    """Rules, lens and hover ask again and again (every edit re-attributes the lines): the paths are
    kept with the profile and only computed again when its tables are replaced."""
    from msprof_lsp.mapping.source import critical_path as cp_mod

    p = _profile(
        {"name": ["A"], "start_ns": [0], "dur_ns": [100], "pid": [1], "tid": [1]},
        {"name": ["k1"], "core": ["GPU"], "start_ns": [50], "dur_ns": [400],
         "stream": [7], "device": [0], "step": [0], "host_op": [0]},
    )
    calls = []
    real = cp_mod._step_paths
    monkeypatch.setattr(cp_mod, "_step_paths", lambda *a: calls.append(1) or real(*a))
    first = cp_mod.step_paths(p)
    assert cp_mod.step_paths(p) is first and critical_path(p).steps is first.steps and len(calls) == 1
    p.kernels = p.kernels.copy()
    cp_mod.step_paths(p)
    assert len(calls) == 2
