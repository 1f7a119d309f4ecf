"""NPU230 gc-pauses: recorded GC events (built profiles, and a synth run written as the text and the
DB export, figures from the run's truth), the threshold, the conjectured variant and its Level1
gating, the loop anchor and the gc.freeze() fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from rulekit import ProfileBuilder, applied, findings, frame, line_of, only

from msprof_lsp.hints.finding import Severity
from msprof_lsp.mapping.profile.locations import ProfileLocation, no_progress
from msprof_lsp.mapping.profile.model import Backend, ProfileKind
from msprof_lsp.mapping.profile.readers import torch_npu, torch_npu_db
from msprof_lsp.mapping.spans import Confidence
from tests.synth import truth, write_torch_npu_db, write_torch_npu_text
from tests.synth.examples import small_run

TRAIN = '''import torch


def main(model, loader, opt):
    model.train()
    for x in loader:
        loss = model(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
'''


def _gc_profile(tmp_path: Path, pauses_us: list[float], *, threshold_ms: float | None = 1.0, backend=Backend.ASCEND):
    src = tmp_path / "train.py"
    src.write_text(TRAIN)
    b = ProfileBuilder(gc_detect_threshold=threshold_ms, backend=backend)
    b.op("Optimizer.step#AdamW.step", 500, 300, stack=[frame(src, line_of(TRAIN, "opt.step()"), "main")])
    for i, d in enumerate(pauses_us):
        b.event("GC", "gc", 1000 + 3000 * i, d)
    return b.build()


def test_recorded_pauses_anchor_on_the_training_loop(tmp_path):
    pauses = [1500.0, 2500.0, 999.9]
    (f,) = only(findings(_gc_profile(tmp_path, pauses), ["NPU230"], [tmp_path]), "NPU230")
    counted = [p for p in pauses if p >= 1000]
    assert f.time_per_step_us == pytest.approx(sum(counted))
    assert f.evidence["pauses"] == len(counted) and f.evidence["below_threshold"] == 1
    assert f.evidence["longest_us"] == max(pauses)
    #: µs below 10 ms
    assert f.message.startswith(f"GC pauses: 2 pauses, {sum(counted):,.0f} µs/step ({sum(counted) / 100:.1f}% of the wall step), longest 2,500 µs")
    assert f.span.line == line_of(TRAIN, "for x in loader:") and f.confidence is Confidence.STACK
    new = applied(TRAIN, f.fixes[0])
    lines = new.splitlines()
    assert lines[line_of(new, "for x in loader:") - 2].strip().startswith("gc.freeze()")
    assert "import gc" in new
    assert f.severity is Severity.WARNING  # 4 ms of a 10 ms step


@pytest.mark.parametrize(("pause", "fires"), [(999.9, False), (1000.0, True)])
def test_threshold_gc_min_us(tmp_path, pause, fires):
    fs = only(findings(_gc_profile(tmp_path, [pause]), ["NPU230"], [tmp_path]), "NPU230")
    assert bool(fs) is fires


def test_kineto_has_no_gc_rule(tmp_path):
    assert not findings(_gc_profile(tmp_path, [5000.0], backend=Backend.CPU), ["NPU230"], [tmp_path])


@pytest.fixture(scope="module")
def synth_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gc")
    run = small_run(steps=2, world_size=1)
    text = torch_npu.read(ProfileLocation(ProfileKind.TORCH_NPU, write_torch_npu_text(run, tmp / "text"), 0), no_progress)
    db = torch_npu_db.read(ProfileLocation(ProfileKind.TORCH_NPU_DB, write_torch_npu_db(run, tmp / "db"), 0), no_progress)
    return run, text, db


@pytest.mark.parametrize("form", ["text", "db"])
def test_synth_gc_events_text_and_db(synth_run, form):
    run, text, db = synth_run
    t = truth(run)
    profile = text if form == "text" else db
    (f,) = only(findings(profile, ["NPU230"]), "NPU230")
    assert t.gc_count == 1  # one 1.8 ms pause in the first of the two steps
    assert f.evidence["pauses"] == t.gc_count
    assert f.time_per_step_us == pytest.approx(t.gc_ns / 1000 / 2)
    assert f.span is None  # no workspace given


def _idle_profile(level: str, acl_calls: int, *, gap_us: float = 250_000, gc_threshold=None):
    b = ProfileBuilder(level=level, gc_detect_threshold=gc_threshold, step_us=400_000)
    b.kernel("k", 10, 100)
    b.lane("Computing", 10, 100)
    b.lane("Free", 1000, gap_us)
    for i in range(acl_calls):
        b.event("AscendCL@aclrtMemcpy", "cann", 2000 + 1000 * i, 50)
    return b.build()


def test_conjectured_gc_from_a_long_idle_gap():
    gap = 250_000.0
    (f,) = only(findings(_idle_profile("Level1", 1, gap_us=gap), ["NPU230"]), "NPU230")
    assert f.evidence["gaps"] == 1 and f.evidence["acl_calls_in_gaps"] == 1
    assert f.time_per_step_us == pytest.approx(gap)
    assert f.severity is Severity.INFO  # conjectured: never a warning
    assert "conjectured" in f.message


@pytest.mark.parametrize(("calls", "gap", "fires"), [
    (25, 250_000, True),   # 25 calls in 250 ms: one per 10 ms
    (26, 250_000, False),  # busier than that: not GC
    (1, 200_000, False),   # not longer than 200 ms
])
def test_conjectured_gc_limits(calls, gap, fires):
    assert bool(only(findings(_idle_profile("Level1", calls, gap_us=gap), ["NPU230"]), "NPU230")) is fires


def test_conjectured_gc_needs_level1_and_says_so():
    fs = findings(_idle_profile("Level0", 0), ["NPU230", "NPU901"])
    assert not only(fs, "NPU230")
    (notice,) = only(fs, "NPU901")
    assert "NPU230 gc-pauses" in notice.message and "NPU230" in notice.evidence["skipped"]


def test_no_conjecture_when_gc_events_were_requested():
    assert not findings(_idle_profile("Level1", 0, gc_threshold=1.0), ["NPU230"])
