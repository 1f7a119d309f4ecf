"""NPU104 dataloader-input: DataLoader time per step against dataloaderMaxUs and, as a share of the
wall-clock step, dataloaderMaxPercent; H2D copies against h2dMaxPercent; the 2024 fixture."""

from __future__ import annotations

import json

import pytest
from conftest import shared_fixture
from seedkit import L, Launch, UserCall, analyse, applied, backward, fwd, loop, optimizer_step, pct, span_text, step_run
from tests.synth import truth
from tests.synth.run import Gap, us

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.finding import Severity
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.spans import Confidence

TRACE_2024 = "Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"
LOOP = "for step, (x, y) in enumerate(loader):"
HEADER = LOOP[:-1]  # the loop header span ends before the colon


def _run(dl_ms: float, gap_ms: float = 0.5, copy_us: float = 20.0, workers: int = 0):
    lin = L.linear(32, 1024, 64, mm_us=60.0)
    items = [
        UserCall(L.DATALOADER_NEXT + loop(LOOP),
                 (Launch(L.dataloader(dl_ms, batch=32, sample_shape=(1024,), workers=workers).op),), label="dataloader"),
        UserCall(loop('x, y = x.to("npu"), y.to("npu")'),
                 (L.to_device((32, 1024), nbytes=32 * 1024 * 4, copy_us=copy_us),), label="h2d"),
        UserCall(fwd("x = self.drop(self.act(self.fc1(x)))"), (Launch(lin.op, lin.frames),), label="fc1"),
        backward(),
        optimizer_step(False),
        Gap(us(gap_ms * 1000)),
    ]
    return step_run(items, jitter_ns=0)


def _loader_figures(a):
    """DataLoader per step and the mean ProfilerStep duration, in µs, from trace_view.json."""
    trace = a.trace()
    steps = [e for e in trace if e.get("cat") == "cpu_op" and e["name"].startswith("ProfilerStep#")]
    loaders = [e for e in trace if e.get("name", "").startswith("enumerate(DataLoader)#")]
    n = len(steps)
    return sum(e["dur"] for e in loaders) / n, sum(e["dur"] for e in steps) / n


def test_fires_anchored_on_the_loop_with_the_construction_related(tmp_path):
    a = analyse(_run(12.0), tmp_path)
    [f] = a.run("NPU104")
    per_step, wall = _loader_figures(a)
    assert per_step == pytest.approx(12_000.0, abs=10)  # the synthetic fetch's children round it
    assert f.time_per_step_us == pytest.approx(per_step)
    assert f.share == pytest.approx(per_step / wall)
    assert f.message.startswith(f"DataLoader: 1 fetch, {per_step / 1000:.1f} ms/step ")
    assert f"({pct(per_step / wall)} of the wall step), single process: the NPU waits for the next batch." in f.message
    assert f.severity is Severity.WARNING and f.confidence is Confidence.STACK
    assert span_text(f.span) == HEADER
    assert [span_text(r.span) for r in f.related] == ["DataLoader(dataset, batch_size=32)"]
    _, new = applied(f, "workers")
    assert "DataLoader(dataset, batch_size=32, num_workers=4, pin_memory=True, persistent_workers=True, prefetch_factor=2)" in new
    _, new = applied(f, "non_blocking")
    assert 'x, y = x.to("npu", non_blocking=True), y.to("npu", non_blocking=True)' in new


def test_with_stacks_a_loader_built_elsewhere_still_gets_the_construction_fix(tmp_path):
    """The loop iterates a loader another function builds (no DataLoader binding in the loop's
    function): the workspace's one construction gets workers + pin_memory, as without stacks."""
    a = analyse(_run(12.0), tmp_path)
    train = a.project / "train.py"
    text = train.read_text(encoding="utf-8")
    built = "loader = DataLoader(dataset, batch_size=32)"
    assert built in text
    train.write_text(text.replace(built, "loader = make_loader(dataset)") +
                     "\n\ndef make_loader(ds):\n    return DataLoader(ds, batch_size=32)\n", encoding="utf-8")
    [f] = a.run("NPU104")
    assert f.confidence is Confidence.STACK and span_text(f.span) == HEADER
    _, new = applied(f, "workers")
    assert "return DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True, persistent_workers=True, prefetch_factor=2)" in new
    # the copies' fix needs the loader's construction in the loop's file to pin it: here it is not
    # bound in the loop's function, so it is not offered
    assert not [x for x in f.fixes if "non_blocking" in x.title]


def test_recorded_with_workers_offers_no_workers_fix(tmp_path):
    # the run already had worker processes: writing them again changes nothing, and the fix being
    # "in the source" must not make a profile recorded after it read as one that predates it
    a = analyse(_run(12.0, workers=4), tmp_path)
    [f] = a.run("NPU104")
    assert "worker processes: the NPU waits for the next batch." in f.message
    assert f.evidence["worker_processes"] is True and "fixed_in_source" not in f.evidence
    assert [x.title for x in f.fixes] == [x.title for x in f.fixes if "non_blocking" in x.title] != []


def test_absolute_limit_just_below_and_at(tmp_path):
    # a long step keeps the share under 5 %: only dataloaderMaxUs can fire
    below = analyse(_run(9.99, gap_ms=250), tmp_path / "below")
    per_step, wall = _loader_figures(below)
    assert per_step < 10_000 and per_step / wall < 0.05
    assert below.run("NPU104") == []
    at = analyse(_run(10.01, gap_ms=250), tmp_path / "at")
    per_step, wall = _loader_figures(at)
    assert per_step >= 10_000 and per_step / wall < 0.05
    [f] = at.run("NPU104", min_share=0.0)
    assert f.evidence["crossed"] == ["dataloader"]


def test_share_limit_just_below_and_at(tmp_path):
    fetch_us, _ = _loader_figures(analyse(_run(1.0), tmp_path / "probe"))  # the same for every gap

    def share(gap_ms):
        t = truth(_run(1.0, gap_ms=gap_ms))
        wall = sum(s.host_dur_ns for s in t.steps) / len(t.steps)
        return fetch_us * 1000 / wall

    gaps = [g / 10 for g in range(10, 400)]
    at = next(g for g in reversed(gaps) if share(g) >= 0.05)
    below = next(g for g in gaps if share(g) < 0.05)
    assert share(below) < 0.05 <= share(at) and abs(below - at) < 0.15
    assert analyse(_run(1.0, gap_ms=below), tmp_path / "below").run("NPU104", min_share=0.0) == []
    [f] = analyse(_run(1.0, gap_ms=at), tmp_path / "at").run("NPU104", min_share=0.0)
    assert f.share == pytest.approx(share(at))


def test_h2d_copies_over_h2d_max_percent(tmp_path):
    run = _run(0.01, gap_ms=50, copy_us=2500.0)
    a = analyse(run, tmp_path)
    t = truth(run)
    per_step = t.memcpy_ns / len(t.steps)
    share = per_step / t.mean_step_time_ns
    assert share >= 0.25 and per_step == us(2500.0) + 0  # one copy per step, no jitter
    [f] = a.run("NPU104")
    assert f.evidence["crossed"] == ["h2d"]
    assert f.message.startswith("H2D copies: 1 copy, ") and f.share == pytest.approx(share)
    assert span_text(f.span) == HEADER


def test_2024_fixture_dataloader_share_of_profiler_step():
    path = shared_fixture(TRACE_2024)
    events = json.loads(path.read_text(encoding="utf-8"))
    step = next(e for e in events if e.get("name") == "ProfilerStep#1")
    loaders = [e for e in events if "dataloader" in e.get("name", "").lower() and e.get("ph") == "X"]
    per_step = sum(float(e["dur"]) for e in loaders)
    share = per_step / float(step["dur"])
    assert [round(float(e["dur"]), 1) for e in loaders] == [1302.0, 16.6] and float(step["dur"]) == 14091.97
    assert round(share * 100, 1) == 9.4
    prof = load_location(locate(path), use_cache=False)
    [f] = run_rules(RuleContext(prof, None, None, RuleConfig()), [rule("NPU104")])
    assert f.severity is Severity.WARNING
    assert f.time_per_step_us == pytest.approx(per_step, abs=1e-3)
    assert f.share == pytest.approx(share, rel=1e-6)
    assert "(9.4% of the wall step)" in f.message and f.span is None


def test_an_accelerator_run_is_not_charged_the_receive(tmp_path):
    """The collate stacks two tensors here too, but on an NPU run the fix's pinned memory takes the
    batch on the pin thread: the estimate removes the whole fetch (the CPU case: test_savings)."""
    a = analyse(_run(12.0), tmp_path)
    [f] = a.run("NPU104")
    s = f.saving
    assert s is not None and s.known and "tensors" not in s.basis
    assert s.us_per_step == pytest.approx(s.high_us) and s.us_per_step == pytest.approx(f.time_per_step_us, rel=0.02)
