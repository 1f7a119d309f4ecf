"""NPU105 device-idle: Free and Computing shares of the step, small kernels and launch waits; the
2024 trace fixture (Free 67 % of ProfilerStep#1, 99 % of kernels < 50 µs)."""

from __future__ import annotations

import json

import pytest
from conftest import shared_fixture
from seedkit import CALL_IMPL, L, Launch, UserCall, analyse, backward, fwd, optimizer_step, pct, span_text, step_run
from tests.synth import truth
from tests.synth.run import us

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.finding import Severity
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.load import load_location, locate

TRACE_2024 = "Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"
X, W, OUT = (32, 3, 16, 16), (16, 3, 3, 3), (32, 16, 16, 16)


def _run(gap_us: float):
    """Two long Conv kernels with host time between their launches: the device idles in between."""
    items = []
    for needle in ("c = self.conv(img)", "x = self.drop(self.act(self.fc1(x)))"):
        conv = L.conv2d(X, W, OUT, conv_us=900.0, trans_us=2.0)
        items.append(UserCall(fwd(needle), (Launch(conv.op, conv.frames + CALL_IMPL),), gap_ns=us(gap_us)))
    items += [backward(), optimizer_step(False)]
    return step_run(items, jitter_ns=0)


def _idle(run) -> tuple[float, float]:
    """(idle Preparing + in-step gaps, the step they are a share of) per step, from the run's
    truth (docs/rules/NPU105.md): Preparing counts up to wall − Stage (before that the device still
    runs the previous step); with it the step is the wall step, else the device's step."""
    t = truth(run)
    n = len(t.steps)
    wall = sum(s.host_dur_ns for s in t.steps) / n
    stage = sum(s.last_task_ns - s.first_task_ns for s in t.steps) / n
    preparing = min(sum(s.preparing_ns for s in t.steps) / n, max(0.0, wall - stage))
    idle = sum(s.free_ns for s in t.steps) / n + preparing
    return idle, (max(wall, stage) if preparing > 0 else max(stage, t.mean_step_time_ns))


def _free_share(run) -> float:
    idle, step = _idle(run)
    return idle / step


def test_free_share_just_below_and_above_free_max_percent(tmp_path):
    gaps = list(range(0, 4000, 5))
    above = next(g for g in gaps if _free_share(_run(g)) > 0.15)
    below = max(g for g in gaps if g < above and _free_share(_run(g)) <= 0.15)
    assert _free_share(_run(below)) <= 0.15 < _free_share(_run(above))
    t = truth(_run(below))
    assert sum(s.computing_ns for s in t.steps) / len(t.steps) / _idle(_run(below))[1] >= 0.70  # not the other trigger
    assert analyse(_run(below), tmp_path / "below").run("NPU105", min_share=0.0) == []
    a = analyse(_run(above), tmp_path / "above")
    [f] = a.run("NPU105", min_share=0.0)
    t = truth(_run(above))
    idle, step = _idle(_run(above))
    assert f.time_per_step_us == pytest.approx(idle / 1000)
    assert f.share == pytest.approx(idle / step)
    parts = f.evidence["parts"]
    # the host runs ahead of the device here (its wall step is shorter than the Stage): the device
    # is never free before a step's first kernel, whatever Preparing says
    assert parts["preparing"]["us_per_step"] == 0 and f.evidence["preparing_us_per_step"] > 0
    assert parts["in_step_gaps"]["us_per_step"] == pytest.approx(sum(s.free_ns for s in t.steps) / len(t.steps) / 1000)
    # the gaps between the convolutions are the larger part: launch advice, not the input pipeline
    assert f.evidence["main_part"] == "in_step_gaps" and "Compile the model" in f.message
    assert f.message.startswith("Device idle: ") and f"({pct(f.share)} of the {f.share_of.value.replace('-', ' ')}), " in f.message
    # anchored on the training loop header; manual fix only (no edits)
    assert span_text(f.span) == "for step, (x, y) in enumerate(loader)"
    assert f.fixes == [] and f.evidence["manual_fix"]
    assert any("TASK_QUEUE_ENABLE=2" in m for m in f.evidence["manual_fix"])
    assert not any("enable_parallel_compile" in m for m in f.evidence["manual_fix"])  # not a torch_npu API


def _overlap_lanes(events):
    pid = next(e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
               and e["args"].get("name") == "Overlap Analysis")
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name" and e["pid"] == pid}
    lanes: dict[str, float] = {}
    for e in events:
        if e.get("ph") == "X" and e["pid"] == pid:
            lanes[names[e["tid"]]] = lanes.get(names[e["tid"]], 0.0) + float(e["dur"])
    return lanes


def test_2024_fixture_free_and_small_kernels():
    path = shared_fixture(TRACE_2024)
    events = json.loads(path.read_text(encoding="utf-8"))
    lanes = _overlap_lanes(events)
    step = float(next(e for e in events if e.get("name") == "ProfilerStep#1")["dur"])
    hw = next(e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
              and e["args"].get("name") == "Ascend Hardware")
    kernels = [float(e["dur"]) for e in events if e.get("ph") == "X" and e["pid"] == hw and e["name"] != "MEMCPY_ASYNC"]
    small = sum(d < 50 for d in kernels) / len(kernels)
    assert round(lanes["Free"], 1) == 9481.7 and round(lanes["Free"] / step * 100) == 67
    assert round(small * 100) == 99
    # Preparing: ProfilerStep#1's start to the first device task (the device is idle then: its
    # Stage is shorter than the step, so it runs no earlier step's work)
    first = min(float(e["ts"]) for e in events if e.get("ph") == "X" and e["pid"] == hw and e["name"] != "MEMCPY_ASYNC")
    preparing = first - float(next(e for e in events if e.get("name") == "ProfilerStep#1")["ts"])
    assert round(preparing) == 2615
    prof = load_location(locate(path), use_cache=False)
    [f] = run_rules(RuleContext(prof, None, None, RuleConfig()), [rule("NPU105")])
    assert f.time_per_step_us == pytest.approx(lanes["Free"] + preparing, abs=0.5)  # per-slice ns rounding
    assert f.share == pytest.approx((lanes["Free"] + preparing) / step, rel=1e-4)
    parts = f.evidence["parts"]
    assert parts["preparing"]["us_per_step"] == pytest.approx(preparing, abs=0.5)
    assert parts["in_step_gaps"]["us_per_step"] == pytest.approx(lanes["Free"], abs=0.1)
    # the gaps are the larger part: their advice, and Preparing is said by name beside them
    assert f.evidence["main_part"] == "in_step_gaps" and "Compile the model" in f.message
    assert f"Preparing {round(preparing):,} µs, in-step gaps 9,482 µs" in f.message
    assert f.evidence["computing_us_per_step"] == pytest.approx(lanes["Computing"], abs=0.1)
    assert f.evidence["small_share"] == pytest.approx(small)
    assert "99% of kernels < 50 µs" in f.message and f.severity is Severity.WARNING


# -- issue 23: Preparing (before the step's first kernel) told apart from in-step gaps -----------

ALEXNET = "Ascend-msinsight/text/level1/rank0_ascend_pt"


def _step_trace(root) -> dict[str, float]:
    import csv

    with open(root / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as fh:
        [row] = list(csv.DictReader(fh))
    return {k: float(v) for k, v in row.items()}


def test_real_alexnet_idle_split_into_preparing_and_in_step_gaps():
    """The real AlexNet job's step_trace_time.csv: Preparing 17,902.5 µs, Free 25,744.1 µs, Stage
    136,581 µs; its ProfilerStep#50 is long enough that the device is idle all of Preparing."""
    root = shared_fixture(ALEXNET)
    row = _step_trace(root)
    prof = load_location(locate(root), use_cache=False)
    wall_us = prof.wall_step_ns() / 1000
    assert wall_us - row["Stage"] >= row["Preparing"]  # the device is free before the first kernel
    [f] = run_rules(RuleContext(prof, None, None, RuleConfig(min_share=0.0)), [rule("NPU105")])
    parts = f.evidence["parts"]
    assert parts["preparing"]["us_per_step"] == pytest.approx(row["Preparing"], abs=1e-3)
    assert parts["in_step_gaps"]["us_per_step"] == pytest.approx(row["Free"], abs=1e-3)
    assert f.time_per_step_us == pytest.approx(row["Preparing"] + row["Free"], abs=1e-3)
    assert f.share == pytest.approx((row["Preparing"] + row["Free"]) / wall_us, rel=1e-6)
    assert f.share_of.value == "wall-step" and f.evidence["step_is_wall"]
    # each part with its own advice: input pipeline for Preparing, launch for the gaps (the larger here)
    assert "DataLoader" in parts["preparing"]["fix"] and "ompile" not in parts["preparing"]["fix"]
    assert "Compile the model" in parts["in_step_gaps"]["fix"]
    assert "Preparing 17.9 ms, in-step gaps 25.7 ms" in f.message and "Compile the model" in f.message


def test_sample_preparing_is_the_input_pipeline_never_compile():
    """The tiny_transformer sample's DataLoader (11.2 ms of Preparing against 5.6 ms of in-step
    gaps): NPU105 points at the input pipeline, not at compiling or a larger batch."""
    from conftest import REPO

    root = next((REPO / "samples" / "tiny_transformer" / "npu_profile").glob("*_ascend_pt"))
    row = _step_trace(root)
    prof = load_location(locate(root), use_cache=False)
    [f] = run_rules(RuleContext(prof, None, None, RuleConfig(min_share=0.0)), [rule("NPU105")])
    assert f.evidence["main_part"] == "preparing"
    assert f.evidence["parts"]["preparing"]["us_per_step"] == pytest.approx(row["Preparing"], abs=1e-3)
    assert "waits for the next batch before the step's first kernel" in f.message
    assert "DataLoader workers" in f.message
    assert "ompile" not in f.message and "batch size" not in f.message
    assert f.related == []  # the small-kernel functions belong to the in-step advice
