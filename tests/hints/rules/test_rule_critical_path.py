"""NPU251 critical-path-bound on built profiles whose critical path is worked out by hand (times
in µs from the step start), at and just above the threshold, and on a real trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from rulekit import ProfileBuilder, findings, frame, line_of, only

from msprof_lsp.hints.config import RuleConfig, Thresholds

SOURCE = '''import torch


def step(x, w):
    x = x.npu()
    y = torch.matmul(x, w)
    loss = y.sum().item()
    z = torch.add(x, 1)
    return torch.relu(z), loss
'''


@pytest.fixture
def src(tmp_path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(SOURCE)
    return p


def _cfg(percent: float) -> RuleConfig:
    return RuleConfig(min_share=0.0, thresholds=Thresholds(critical_path_min_percent=percent))


def _host_bound(path: Path):
    """aten::relu [100, 1100) launches a 10 µs kernel at 900: the step ends at the op's end, so
    the path is the op's 1000 µs self time; its own time is 1000 + 10: 99.0099 % on the path."""
    b = ProfileBuilder()
    op = b.op("aten::relu", 100, 1000, stack=[frame(path, line_of(SOURCE, "torch.relu"), "step")])
    b.kernel("Relu", 900, 10, op=op)
    return b.build()


def test_host_bound_line_fires_with_the_launch_advice(src):
    (f,) = only(findings(_host_bound(src), ["NPU251"], [src.parent], config=_cfg(50)), "NPU251")
    assert f.span.line == line_of(SOURCE, "torch.relu")
    assert f.evidence["bound"] == "host" and f.evidence["see"] == "NPU105"
    assert f.evidence["charged_us"]["host"] == 1000.0 and f.evidence["own_us"] == 1010.0
    assert f.evidence["path_share"] == round(1000 / 1010, 4)
    assert f.message.startswith("Critical path, host-bound: 1,000 µs/step (10.0% of the wall step), 99% of its time on the critical path")
    assert f.message.endswith("(NPU105).")


@pytest.mark.parametrize(("percent", "fires"), [(99.0, True), (99.01, False)])
def test_host_bound_threshold(src, percent, fires):
    assert bool(only(findings(_host_bound(src), ["NPU251"], [src.parent], config=_cfg(percent)), "NPU251")) is fires


def _sync_bound(path: Path):
    """matmul [900, 1000) launches MatMul [1000, 2580); .item() [2000, 2600) holds
    aclrtSynchronizeStream [2010, 2590); then add [2600, 3600) runs on the host alone.
    Path: MatMul 1580 (from its launch at 900: 100 of launch delay), sync end 10 after it, then the
    host relaunching: item's last 10 and add's 1000 -- charged to the sync: 10 + 10 + 1000.
    The .item() line's own time is its self time, 10 before the call and 10 after: 50 % on the path."""
    b = ProfileBuilder()
    mm = b.op("aten::matmul", 900, 100, stack=[frame(path, line_of(SOURCE, "torch.matmul"), "step")])
    b.kernel("MatMul", 1000, 1580, op=mm)
    b.op("aten::item", 2000, 600, stack=[frame(path, line_of(SOURCE, ".item()"), "step")])
    b.event("aclrtSynchronizeStream", "AscendCL", 2010, 580)
    b.op("aten::add", 2600, 1000, stack=[frame(path, line_of(SOURCE, "torch.add"), "step")])
    return b.build()


def test_sync_bound_line_names_the_wait(src):
    fs = only(findings(_sync_bound(src), ["NPU251"], [src.parent], config=_cfg(50)), "NPU251")
    (f,) = [f for f in fs if f.span.line == line_of(SOURCE, ".item()")]
    assert f.evidence["bound"] == "sync" and f.evidence["see"] == "NPU108"
    assert f.evidence["charged_us"]["sync"] == 1020.0
    assert f.evidence["path_share"] == 0.5
    assert f.evidence["waits"] == [{"name": "aclrtSynchronizeStream in aten::item", "us": 1020.0}]
    assert "waits: aclrtSynchronizeStream in aten::item" in f.message
    # the matmul line is compute-bound: not this rule's; the add line's host time went to the sync
    assert {f.span.line for f in fs} == {line_of(SOURCE, ".item()")}


@pytest.mark.parametrize(("percent", "fires"), [(50.0, True), (50.01, False)])
def test_sync_bound_threshold(src, percent, fires):
    fs = only(findings(_sync_bound(src), ["NPU251"], [src.parent], config=_cfg(percent)), "NPU251")
    assert any(f.span.line == line_of(SOURCE, ".item()") for f in fs) is fires


def _item_without_runtime_call(path: Path):
    """As ``_sync_bound`` but no runtime sync call was recorded inside .item() (a Level0 capture,
    a trace without the CANN/CUDA API events): the host's 600 µs in aten::item lie on the path
    as host time -- the host waiting for the MatMul's value, not failing to launch."""
    b = ProfileBuilder()
    mm = b.op("aten::matmul", 900, 100, stack=[frame(path, line_of(SOURCE, "torch.matmul"), "step")])
    b.kernel("MatMul", 1000, 1580, op=mm)
    b.op("aten::item", 2000, 600, stack=[frame(path, line_of(SOURCE, ".item()"), "step")])
    b.op("aten::add", 2600, 1000, stack=[frame(path, line_of(SOURCE, "torch.add"), "step")])
    return b.build()


def test_item_is_a_sync_never_the_device_waiting_for_a_launch(src, monkeypatch):
    """issue 23: NPU251 said the device waits for the host to launch during .item()."""
    # the two lines' diagnoses, each on its own: their idle is one cause, which consolidation
    # (tested in tests/hints/test_consolidate.py) would fold into one finding
    monkeypatch.setattr("msprof_lsp.hints.engine.consolidate", lambda out, ctx: out)
    fs = only(findings(_item_without_runtime_call(src), ["NPU251"], [src.parent], config=_cfg(50)), "NPU251")
    (f,) = [f for f in fs if f.span.line == line_of(SOURCE, ".item()")]
    assert f.evidence["bound"] == "sync" and f.evidence["see"] == "NPU108"
    assert f.evidence["charged_us"]["sync"] == 600.0 and f.evidence["charged_us"]["host"] == 0.0
    assert f.evidence["waits"] == [{"name": "aten::item (host blocked for a device value)", "us": 600.0}]
    assert "waits for the host to launch" not in f.message and "the host blocks here until the device is done" in f.message
    # the add line's host time is still the host's own: launch-bound
    (add,) = [f for f in fs if f.span.line == line_of(SOURCE, "torch.add")]
    assert add.evidence["bound"] == "host" and "waits for the host to launch" in add.message


def test_samples_item_lines_are_never_launch_bound():
    """Both NPU samples call .item() every step (tiny_transformer: print(loss.item()); cnn: its
    loss log): the host's time in aten::item / _local_scalar_dense on the path is a sync, and no
    NPU251 finding on those lines says the device waits for a launch."""
    from conftest import REPO

    from msprof_lsp.server.analysis.run import analyse_paths
    from msprof_lsp.server.analysis.settings import Settings

    for sample, needle in (("tiny_transformer", "loss.item()"), ("cnn_classifier", ".item()")):
        root = REPO / "samples" / sample
        item_lines = {i + 1 for i, text in enumerate((root / "train.py").read_text().splitlines()) if needle in text}
        assert item_lines
        [a] = analyse_paths([root], Settings(min_share=0.0, select=("NPU251",)), profile=root / "npu_profile",
                            use_cache=False)
        fs = a.findings
        assert fs  # the samples' host-bound lines still fire
        on_item = [f for f in fs if f.span is not None and f.span.path.endswith("train.py") and f.span.line in item_lines]
        assert all("waits for the host to launch" not in f.message for f in on_item), [f.message for f in on_item]
        if sample == "tiny_transformer":  # its .item() lies on the path: 24.5 µs in _local_scalar_dense
            (f,) = on_item
            assert f.evidence["bound"] == "sync" and f.evidence["see"] == "NPU108"
            assert f.evidence["waits"][0]["name"].startswith("aten::_local_scalar_dense (host blocked")


def _copy_bound(path: Path):
    """.npu() [100, 200) launches an H2D copy MEMCPY_ASYNC [200, 1200) that ends the step: the
    copy's 1000 is on the path (bandwidth), with 100 of launch delay (host); own 1000 + 100."""
    b = ProfileBuilder()
    op = b.op("aten::to", 100, 100, stack=[frame(path, line_of(SOURCE, "x.npu()"), "step")])
    b.kernel("MEMCPY_ASYNC", 200, 1000, op=op, core="MEMCPY_ASYNC", type="MEMCPY_ASYNC")
    return b.build()


def test_bandwidth_bound_copy_line(src):
    (f,) = only(findings(_copy_bound(src), ["NPU251"], [src.parent], config=_cfg(50)), "NPU251")
    assert f.evidence["bound"] == "bandwidth" and f.evidence["see"] == "NPU205"
    assert f.evidence["charged_us"]["bandwidth"] == 1000.0 and f.evidence["charged_us"]["host"] == 100.0
    assert f.message.startswith("Critical path, bandwidth-bound: 1,000 µs/step")


def test_no_path_no_finding(src):
    """A profile whose kernels name no launching op: the path is unavailable, the rule silent."""
    b = ProfileBuilder()
    b.op("aten::relu", 100, 1000, stack=[frame(src, line_of(SOURCE, "torch.relu"), "step")])
    b.kernel("Relu", 900, 10)
    assert only(findings(b.build(), ["NPU251"], [src.parent], config=_cfg(0)), "NPU251") == []


RESNET = "pytorch-kineto-tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def test_real_resnet_copies_line_is_sync_bound_on_the_path():
    """The tb_plugin ResNet-50 trace (6 steps, real): line 44's two pageable `.to(device)` copies
    per step sit wholly on the critical path -- their time there equals their durations counted
    from the trace with gzip/json -- and the stream synchronisation inside aten::copy_ binds it."""
    import gzip
    import json

    from conftest import shared_fixture

    from msprof_lsp.hints.context import RuleContext
    from msprof_lsp.hints.engine import run_rules
    from msprof_lsp.hints.registry import rule
    from msprof_lsp.mapping.profile.cluster import load_profile
    from msprof_lsp.mapping.source.attribute import attribute
    from msprof_lsp.mapping.source.workspace import SourceWorkspace

    trace = shared_fixture(RESNET)
    with gzip.open(trace, "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    h2d_us = sum(e["dur"] for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("Memcpy HtoD")
                 and any(a <= e["ts"] < b for a, b in steps))
    profile = load_profile([trace], use_cache=False).profile
    ws = SourceWorkspace([shared_fixture("pytorch-kineto-tb_plugin/workspace")])
    ctx = RuleContext(profile, attribute(profile, ws), ws, RuleConfig(min_share=0.0))
    lp = next(lp for lp in ctx.critical_path.lines if lp.line == 44)
    assert len(ctx.critical_path.steps) == len(steps) == 6
    assert lp.on_path_per_step_ns / 1000 == pytest.approx(h2d_us / 6, rel=1e-3)
    assert 0.99 <= lp.path_share <= 1.0
    (f,) = [f for f in run_rules(ctx, [rule("NPU251")]) if f.span.line == 44]
    assert f.evidence["bound"] == "sync" and f.evidence["see"] == "NPU108"
    assert f.evidence["waits"][0]["name"] == "cudaStreamSynchronize in aten::copy_"
