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


def _free_share(run) -> float:
    t = truth(run)
    return sum(s.free_ns for s in t.steps) / len(t.steps) / t.mean_step_time_ns


def test_free_share_just_below_and_above_free_max_percent(tmp_path):
    gaps = list(range(0, 4000, 5))
    above = next(g for g in gaps if _free_share(_run(g)) > 0.15)
    below = max(g for g in gaps if g < above and _free_share(_run(g)) <= 0.15)
    assert _free_share(_run(below)) <= 0.15 < _free_share(_run(above))
    t = truth(_run(below))
    assert sum(s.computing_ns for s in t.steps) / len(t.steps) / t.mean_step_time_ns >= 0.70  # not the other trigger
    assert analyse(_run(below), tmp_path / "below").run("NPU105", min_share=0.0) == []
    a = analyse(_run(above), tmp_path / "above")
    [f] = a.run("NPU105", min_share=0.0)
    t = truth(_run(above))
    free = sum(s.free_ns for s in t.steps) / len(t.steps)
    assert f.time_per_step_us == pytest.approx(free / 1000)
    assert f.share == pytest.approx(free / t.mean_step_time_ns)
    assert f.message.startswith("Device idle: ") and f"({pct(f.share)} of the device step), Computing " in f.message
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
    prof = load_location(locate(path), use_cache=False)
    [f] = run_rules(RuleContext(prof, None, None, RuleConfig()), [rule("NPU105")])
    assert f.time_per_step_us == pytest.approx(lanes["Free"], abs=0.1)  # per-slice ns rounding
    assert f.share == pytest.approx(lanes["Free"] / step, rel=1e-4)
    assert f.evidence["computing_us_per_step"] == pytest.approx(lanes["Computing"], abs=0.1)
    assert f.evidence["small_share"] == pytest.approx(small)
    assert "99% of kernels < 50 µs" in f.message and f.severity is Severity.WARNING
