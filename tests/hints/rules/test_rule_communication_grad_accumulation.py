"""NPU102 grad-accumulation: Communication(Not Overlapped) against commMaxPercent on spec-exact
profiles (at and just below the threshold), the kernel fallback on the 2023 fixture (its 309 ms
init broadcast left out), anchor, related information and the accumulation fix."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import shared_fixture
from seedkit import L, Launch, UserCall, analyse, applied, backward, fwd, optimizer_step, pct, span_text, step_run
from tests.synth import truth
from tests.synth.run import Gap, us

from msprof_lsp.hints.config import RuleConfig, Thresholds
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.finding import Severity
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import Profile, ProfileKind, ProfileMeta
from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table
from msprof_lsp.mapping.profile.readers.kineto import read
from msprof_lsp.mapping.spans import Confidence

KD_2023 = "Ascend-msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"


def _run(comm_us: float):
    lin = L.linear(32, 1024, 64, mm_us=60.0)
    items = [
        UserCall(fwd("x = self.drop(self.act(self.fc1(x)))"), (Launch(lin.op, lin.frames),), label="fc1"),
        backward(comm_us, size_mb=2.0),
        optimizer_step(wait_comm=True),
        Gap(us(50)),
    ]
    return step_run(items, world_size=2)


def _expected_share(run) -> float:
    """Mean not-overlapped communication per step over the mean step time."""
    t = truth(run)
    return sum(s.comm_not_overlapped_ns for s in t.steps) / len(t.steps) / t.mean_step_time_ns


def _bracket(limit: float = 0.15) -> tuple[float, float]:
    """The all-reduce durations (10 µs grid) just below and at/above ``limit``."""
    prev = None
    for comm in range(20, 3000, 10):
        if _expected_share(_run(comm)) >= limit:
            assert prev is not None
            return prev, comm
        prev = comm
    raise AssertionError("no bracket")


def test_at_and_just_below_comm_max_percent(tmp_path):
    below, above = _bracket()
    share_below, share_above = _expected_share(_run(below)), _expected_share(_run(above))
    assert share_below < 0.15 <= share_above
    assert analyse(_run(below), tmp_path / "below").run("NPU102") == []
    a = analyse(_run(above), tmp_path / "above")
    [f] = a.run("NPU102")
    assert f.share == pytest.approx(share_above)
    t = truth(_run(above))
    per_step = sum(s.comm_not_overlapped_ns for s in t.steps) / len(t.steps)
    assert f.time_per_step_us == pytest.approx(per_step / 1000)
    assert f.message.startswith("HCCL not overlapped: ")
    assert f"({pct(share_above)} of the device step), 1 allReduce" in f.message
    # the synthetic collective is transfer-bound (its Transit is most of its Elapse): only then
    # is it called communication-bound
    assert ": communication-bound (transfers " in f.message
    assert f.message.endswith("Accumulate gradients with model.no_sync().")
    assert f.severity is Severity.WARNING and f.confidence is Confidence.STACK
    assert f.evidence["source"] == "step_trace_time.csv"
    # the gradient seed kernel ties the finding to the loop's backward call, related info to step()
    assert span_text(f.span) == "loss.backward()"
    assert [span_text(r.span) for r in f.related] == ["optimizer.step()"]
    path, new = applied(f, "Accumulate gradients")
    assert path.endswith("train.py")
    assert "ACCUM_STEPS = 4" in new and "model.no_sync()" in new and "/ ACCUM_STEPS" in new
    # a higher commMaxPercent silences it
    assert a.run("NPU102", thresholds=Thresholds(comm_max_percent=share_above * 100 + 0.1)) == []


def test_small_packets_from_communication_json(tmp_path):
    a = analyse(_run(_bracket()[1]), tmp_path)
    [f] = a.run("NPU102")
    import json

    comm = json.loads((a.root / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    packets = small = 0
    for step in comm.values():
        for op, info in step["collective"].items():
            if op == "Total Op Info":
                continue
            for link, bw in info["Communication Bandwidth Info"].items():
                if link in ("HCCS", "PCIE", "SIO", "SDMA"):
                    for size, (count, _ms) in bw["Size Distribution"].items():
                        packets += count
                        small += count if float(size) < 16 else 0
    assert packets > 0 and f.evidence["packets"]["SDMA"]["packets"] == packets
    assert (small / packets > 0.2) == ("small packets" in f.message) == ("SDMA" in f.evidence["small_packets"])


def _union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _intersection(a, b):
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _ns(text: str) -> int:
    whole, _, frac = text.strip().partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


def test_2023_fixture_fallback_ignores_the_init_broadcast():
    path = shared_fixture(KD_2023)
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    iv = lambda r: (_ns(r["Start Time(us)"]), _ns(r["Start Time(us)"]) + _ns(r["Duration(us)"]))  # noqa: E731
    hccl = [r for r in rows if r["Accelerator Core"] == "HCCL"]
    grad = [r for r in hccl if "broadcast" not in r["Type"]]
    init = [r for r in hccl if "broadcast" in r["Type"]]
    compute = _union([iv(r) for r in rows if r["Accelerator Core"] != "HCCL"])
    g = _union([iv(r) for r in grad])
    not_overlapped = sum(e - s for s, e in g) - _intersection(g, compute)
    b = _union([iv(r) for r in init])
    init_alone = sum(e - s for s, e in b) - _intersection(b, _union([iv(r) for r in rows if r not in init]))
    span = max(iv(r)[1] for r in rows) - min(iv(r)[0] for r in rows)
    share = not_overlapped / (span - init_alone)
    assert max(_ns(r["Duration(us)"]) for r in init) == 308_926_680  # the 309 ms broadcast
    prof = Profile(ProfileMeta(ProfileKind.TORCH_NPU, str(path)), kernels=read_kernel_table(path).to_frame())
    ctx = RuleContext(prof, None, None, RuleConfig())
    [f] = run_rules(ctx, [rule("NPU102")])
    assert f.evidence["source"] == "HCCL kernels"
    assert f.time_per_step_us == pytest.approx(not_overlapped / 1000)
    assert f.share == pytest.approx(share) and share >= 0.15
    assert sorted(e["us"] for e in f.evidence["ignored_collectives"]) == sorted(_ns(r["Duration(us)"]) / 1000 for r in init)
    n_ar = sum(r["Type"] == "hcom_allReduce_" for r in grad)
    n_ag = sum(r["Type"] == "hcom_allGather_" for r in grad)
    assert f"{n_ar} allReduce, {n_ag} allGather" in f.message
    assert f.severity is Severity.WARNING and f.span is None  # no source to anchor on
    # with the broadcast counted in the step, the same communication would stay under 15 %
    assert not_overlapped / span < 0.15


def test_no_communication_no_finding(tmp_path):
    lin = L.linear(32, 1024, 64, mm_us=60.0)
    run = step_run([UserCall(fwd("x = self.drop(self.act(self.fc1(x)))"), (Launch(lin.op, lin.frames),)),
                    backward(), optimizer_step(False)])
    assert analyse(run, tmp_path).run("NPU102") == []


T0 = 1_700_000_000_000_000  # epoch µs (Kineto writes JSON integers)


def _kineto(tmp_path, events):
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return read(ProfileLocation(ProfileKind.KINETO, path))


def _op(name, ts, dur, ext):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": 7, "ts": T0 + ts, "dur": dur,
            "args": {"External id": ext}}


def _kernel(name, stream, ts, dur, ext):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": T0 + ts, "dur": dur,
            "args": {"External id": ext, "device": 0, "stream": stream, "correlation": ext}}


AR = "ncclKernel_AllReduce_RING_LL_Sum_float"
BCAST = "ncclKernel_Broadcast_RING_LL_Sum_float"


def test_capture_span_step_leaves_the_init_broadcast_out(tmp_path):
    """No ProfilerStep: the step is the capture span, which the one-off broadcast opens."""
    p = _kineto(tmp_path, [
        _op("c10d::broadcast_", 0, 10, 1), _kernel(BCAST, 20, 0, 300, 1),
        _op("aten::mm", 280, 10, 2), _kernel("k_mm", 7, 300, 200, 2),
        _op("c10d::allreduce_", 440, 10, 3), _kernel(AR, 20, 450, 300, 3),
        _op("aten::mm", 790, 10, 4), _kernel("k_mm", 7, 800, 100, 4),
        _op("aten::add", 950, 50, 5),  # the capture ends at 1000
    ])
    assert p.step_time() == (1_000_000.0, "capture span")
    [f] = rule("NPU102").check(RuleContext(p, None, None, RuleConfig(min_share=0.0)))
    # gradient [450, 750); compute [300, 500) ∪ [800, 900): |G ∪ C| - |C| = 550 - 300 = 250 µs;
    # the broadcast alone [0, 300): |O ∪ G ∪ C| - |G ∪ C| = 850 - 550 = 300 µs out of the step
    assert f.evidence["source"] == "NCCL kernels"
    assert f.evidence["not_overlapped_us_per_step"] == 250.0 and f.evidence["communication_us_per_step"] == 300.0
    assert f.evidence["step_without_ignored"] and f.evidence["step_us"] == 700.0
    assert f.share == pytest.approx(250 / 700)
    assert [e["us"] for e in f.evidence["ignored_collectives"]] == [300.0]


def test_kernel_fallback_is_clipped_to_the_step_windows(tmp_path):
    """An all-reduce launched in the last step runs past its end: only the part inside counts."""
    p = _kineto(tmp_path, [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 7, "tid": 7, "ts": T0, "dur": 500,
         "args": {"External id": 100}},
        _op("aten::mm", 90, 10, 1), _kernel("k_mm", 7, 100, 200, 1),
        _op("c10d::allreduce_", 240, 10, 2), _kernel(AR, 20, 250, 450, 2),
    ])
    assert p.step_time() == (500_000.0, "ProfilerStep")
    [f] = rule("NPU102").check(RuleContext(p, None, None, RuleConfig(min_share=0.0)))
    # in [0, 500): gradient [250, 500), compute [100, 300): |G ∪ C| - |C| = 400 - 200 = 200 µs
    # (unclipped it would be 450 - 50 = 400 µs, 80 % of the step)
    assert f.evidence["not_overlapped_us_per_step"] == 200.0 and f.evidence["communication_us_per_step"] == 250.0
    assert not f.evidence["step_without_ignored"] and f.share == pytest.approx(0.4)


# -- issue 23: what the collectives' time is, read from communication.json ----------------------

ALEXNET = "Ascend-msinsight/{}/level1"
QWEN_PP = "Ascend-msinsight-st-level2/level2"


def _job_findings(relative: str, code: str = "NPU102"):
    from msprof_lsp.mapping.profile.cluster import load_profile

    loaded = load_profile([shared_fixture(relative)], use_cache=False)
    ctx = RuleContext(loaded.profile, None, None, RuleConfig(min_share=0.0), cluster=loaded.cluster)
    return run_rules(ctx, [rule(code)]), loaded


def _time_info(root, op: str = "Total Op Info") -> dict:
    comm = json.loads((root / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    [step] = comm.values()
    return step["collective"][op]["Communication Time Info"]


def test_real_alexnet_collectives_wait_for_the_late_rank_not_small_packets():
    """The real 2-rank AlexNet DDP job: 106 ms in the all-reduces of rank 0, 3.7 ms of it transfer,
    5.9 ms waiting for rank 1 (whose own waits are 0.2 ms), 96.4 ms idle: not small packets."""
    [f], loaded = _job_findings(ALEXNET.format("text"))
    assert loaded.cluster is not None and loaded.cluster.analysed_rank == 0
    info = _time_info(shared_fixture(ALEXNET.format("text") + "/rank0_ascend_pt"))
    split = f.evidence["time_split"]
    for key, field in (("elapse_us", "Elapse Time(ms)"), ("transit_us", "Transit Time(ms)"),
                       ("wait_us", "Wait Time(ms)"), ("idle_us", "Idle Time(ms)")):
        assert split[key] == pytest.approx(info[field] * 1000, abs=2e-3)
    assert (round(split["transit_us"] / 1000, 1), round(split["wait_us"] / 1000, 1),
            round(split["idle_us"] / 1000, 1), round(split["elapse_us"] / 1000)) == (3.7, 5.9, 96.4, 106)
    assert split["late_rank"] == 1 and not split["transfer_bound"]
    assert "small packets" not in f.message and "communication-bound" not in f.message
    assert "not transfer-bound: the collectives wait for a late rank (rank 1)" in f.message
    assert "Balance rank 1's work first" in f.message


def test_real_alexnet_one_rank_alone_still_reads_the_split():
    """Rank 0 loaded alone: no other rank to name, the wait and the idle are still said."""
    from msprof_lsp.mapping.profile.cluster import load_profile

    profile = load_profile([shared_fixture(ALEXNET.format("text") + "/rank0_ascend_pt")], use_cache=False).profile
    [f] = run_rules(RuleContext(profile, None, None, RuleConfig(min_share=0.0)), [rule("NPU102")])
    assert f.evidence["time_split"]["late_rank"] is None
    assert "the collectives wait for a late rank and sit idle between transfers" in f.message
    assert "small packets" not in f.message and "Accumulate gradients" in f.message


def test_real_alexnet_db_export_reads_comm_analyzer_time():
    [f], _ = _job_findings(ALEXNET.format("db"))
    split = f.evidence["time_split"]
    assert 0 < split["transit_us"] < split["elapse_us"] / 2 and split["idle_us"] > split["transit_us"]
    assert "communication-bound" not in f.message and "small packets" not in f.message


def test_real_pipeline_send_recv_is_not_gradient_communication():
    """Qwen3 PP=2 DP=2 (MindSpeed): on rank 0 batchSendRecv (pipeline p2p) is 314 of its 420 ms of
    communication; grad accumulation is advised on the gradient collectives' part only."""
    root = shared_fixture(QWEN_PP + "/rank_0_ascend_pt")
    from msprof_lsp.mapping.profile.cluster import load_profile

    profile = load_profile([root], use_cache=False).profile
    comm = json.loads((root / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    [step] = comm.values()
    p2p = sum(v["Communication Time Info"]["Elapse Time(ms)"] for k, v in step["p2p"].items() if k != "Total Op Info")
    coll = sum(v["Communication Time Info"]["Elapse Time(ms)"] for k, v in step["collective"].items()
               if k != "Total Op Info")
    assert p2p > 2 * coll  # the pipeline's send/recv dominate
    low = RuleConfig(min_share=0.0, thresholds=Thresholds(comm_max_percent=5))
    [f] = run_rules(RuleContext(profile, None, None, low), [rule("NPU102")])
    with open(root / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as fh:
        [row] = list(csv.DictReader(fh))
    not_ov_us = float(row["Communication(Not Overlapped)"])
    assert f.time_per_step_us == pytest.approx(not_ov_us * coll / (coll + p2p), rel=1e-6)
    assert f.evidence["pipeline_not_overlapped_us_per_step"] == pytest.approx(not_ov_us * p2p / (coll + p2p), rel=1e-6)
    assert "pipeline send/recv" in f.message and "not counted" in f.message
    # at the default 15% the gradient part (13% of the step) does not fire; all 420 ms (52%) did
    assert f.share == pytest.approx(0.131, abs=1e-3)
    assert run_rules(RuleContext(profile, None, None, RuleConfig()), [rule("NPU102")]) == []
