"""NPU900-NPU903 notices and the needs-Level1 helper: the real 2024 trace (no stacks), the real
Level0 profiler_info.json, file times around end_info.collectionTimeEnd, and unattributed time
around the 5 % mark."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import SHARED, shared_fixture
from rulekit import LIB, ProfileBuilder, fake_rule, findings, frame, only

from msprof_lsp.hints import registry
from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.finding import Severity
from msprof_lsp.hints.registry import Rule, rule
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import Backend, Profile, ProfileKind, ProfileMeta
from msprof_lsp.mapping.profile.readers.ascend_json import read_profiler_info
from msprof_lsp.mapping.profile.readers.torch_npu import read
from msprof_lsp.mapping.spans import Span

TRACE_2024 = "Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"
INFO_LEVEL0 = "verl-project-rl-insight/data/recipe/memory_data/20260526_085155_ascend_pt/profiler_info_0.json"
INFO_LEVEL1 = "verl-project-rl-insight/data/recipe/mstx_data/mstx_profile/agent_loop_rollout_replica_0/xxx_ascend_pt/profiler_info_0.json"


def _capture_advice() -> str:
    ref = SHARED / "reference" / "ascend-formats.md"
    if not ref.exists():
        pytest.skip("../shared/reference is absent")
    m = re.search(r"Capture advice to print when data is missing \[code\]:\s*`([^`]+)`", ref.read_text(encoding="utf-8"))
    assert m
    return m.group(1)


# -- NPU900 -----------------------------------------------------------------------------------


def test_no_stacks_in_the_real_trace_gives_the_capture_advice():
    profile = read(ProfileLocation(ProfileKind.TORCH_NPU, shared_fixture(TRACE_2024)))
    assert not profile.stacks
    (f,) = only(findings(profile, ["NPU900"]), "NPU900")
    assert _capture_advice() in f.message and "with_stack=True" in f.message
    assert f.severity is Severity.INFO and f.span is None


def test_stacks_present_no_notice_and_kineto_advice(tmp_path):
    b = ProfileBuilder()
    b.op("aten::add", 10, 5, stack=[frame(tmp_path / "a.py", 3, "f")])
    assert not findings(b.build(), ["NPU900"])
    k = ProfileBuilder(backend=Backend.CPU, kind=ProfileKind.KINETO)
    k.op("aten::add", 10, 5)
    (f,) = findings(k.build(), ["NPU900"])
    assert "torch.profiler.profile(" in f.message and "torch_npu" not in f.message


# -- NPU901 and ctx.needs_level1 -----------------------------------------------------------------


def _level_profile(info: Path | None, *, free_us: float = 0) -> Profile:
    meta = ProfileMeta(ProfileKind.TORCH_NPU, "/prof")
    if info is not None:
        assert read_profiler_info(info, meta) == []
    b = ProfileBuilder(step_us=400_000)
    b.meta = meta
    b.kernel("k", 10, 100)
    if free_us:
        b.lane("Free", 1000, free_us)
    return b.build()


def _recording_rule(code: str, reason: str) -> Rule:
    return fake_rule(code, lambda rule, ctx: [] if ctx.needs_level1(rule) else [], level1=reason)


def test_level0_fixture_names_the_skipped_rules():
    profile = _level_profile(shared_fixture(INFO_LEVEL0), free_us=300_000)
    assert profile.meta.level == "Level0"
    ctx = RuleContext(profile, None, None, RuleConfig(min_share=0.0))
    probe = _recording_rule("TST107", "AscendCL@aclopCompileAndExecute events")
    fs = run_rules(ctx, [probe, rule("NPU230"), rule("NPU901")])
    (f,) = only(fs, "NPU901")
    assert ctx.level1_skips == {"TST107": "AscendCL@aclopCompileAndExecute events",
                                "NPU230": "AscendCL@ API events (GC conjectured from long device-idle gaps)"}
    assert "NPU230 gc-pauses" in f.message and "TST107" in f.message and "Level0" in f.message
    assert "ProfilerLevel.Level1" in f.message and f.severity is Severity.INFO
    assert not only(fs, "NPU230")  # skipped, not "no problem"


def test_level1_fixture_needs_nothing():
    profile = _level_profile(shared_fixture(INFO_LEVEL1), free_us=300_000)
    assert profile.meta.level == "Level1"
    ctx = RuleContext(profile, None, None, RuleConfig())
    assert ctx.needs_level1(_recording_rule("TST107", "x")) is False and ctx.level1_skips == {}
    assert not only(run_rules(ctx, [rule("NPU901")]), "NPU901")


def test_lone_trace_without_cann_events_counts_as_level0():
    ctx = RuleContext(_level_profile(None), None, None, RuleConfig())
    assert ctx.level1_gap is not None and "no CANN API events" in ctx.level1_gap
    real = read(ProfileLocation(ProfileKind.TORCH_NPU, shared_fixture(TRACE_2024)))  # has AscendCL@ events
    assert RuleContext(real, None, None, RuleConfig()).level1_gap is None


def test_no_skip_no_notice():
    ctx = RuleContext(_level_profile(None), None, None, RuleConfig())
    assert not run_rules(ctx, [rule("NPU901")])


# -- NPU902 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset_s", "edited", "fires"),
    [(-1, True, True), (-1, False, False), (1, True, False)],
    ids=["newer-and-moved", "newer-lines-intact", "older"],
)
def test_source_newer_than_the_capture(tmp_path, offset_s, edited, fires):
    """Fires for a file saved after the capture whose recorded call moved (line 5 -> 7); a
    newer file whose recorded lines still hold their calls (a fresh checkout) stays quiet."""
    src = tmp_path / "train.py"
    body = "import torch\n\n\ndef f(x):\n    return torch.relu(x)\n"
    src.write_text("# added\n# lines\n" + body if edited else body)
    mtime_ns = 1_750_000_000 * 10**9
    os.utime(src, ns=(mtime_ns, mtime_ns))
    b = ProfileBuilder(collection_end_ns=mtime_ns + offset_s * 10**9)
    op = b.op("aten::relu", 10, 20, stack=[frame(src, 5, "f")])
    sc = b.op("aclnnRelu", 12, 10)
    b.kernel("aclnnRelu_Relu_Relu", 14, 5, op=sc, type="Relu")
    del op
    fs = only(findings(b.build(), ["NPU902"], [tmp_path]), "NPU902")
    assert bool(fs) is fires
    if fires:
        assert fs[0].span == Span(str(src), 1, 0, 1, 0)
        assert fs[0].evidence["file_mtime_ns"] == mtime_ns and "lines may have moved" in fs[0].message
        assert fs[0].evidence["re_anchored"] >= 1


def _stale(tmp_path: Path, text: str, line: int, *, newer: bool = True):
    """train.py saved 1 s after (or before) the capture, an aten::relu recorded at ``line`` of f()."""
    src = tmp_path / "train.py"
    src.write_text(text)
    mtime_ns = 1_750_000_000 * 10**9
    os.utime(src, ns=(mtime_ns, mtime_ns))
    b = ProfileBuilder(collection_end_ns=mtime_ns - 10**9 if newer else mtime_ns + 10**9)
    b.op("aten::relu", 10, 20, stack=[frame(src, line, "f")])
    sc = b.op("aclnnRelu", 12, 10)
    b.kernel("aclnnRelu_Relu_Relu", 14, 5, op=sc, type="Relu")
    return only(findings(b.build(), ["NPU902"], [tmp_path]), "NPU902")


RECORDED = "import torch\n\n\ndef f(x):\n    y = helper(x)\n    return torch.relu(y)\n\n\ndef helper(x):\n    return x\n"


def test_touched_file_whose_lines_still_hold_their_calls_is_quiet(tmp_path):
    """issue 23: a newer mtime alone never fires. The op is recorded at line 5, which holds
    helper(x), not a relu: the anchoring re-finds torch.relu on line 6 (a miss on an unedited
    file), which used to fire NPU902; the recorded line still holds a call of f(): no notice."""
    assert _stale(tmp_path, RECORDED, 5) == []


def test_edited_anchored_call_fires(tmp_path):
    """The call on the recorded line 5 was edited away (an assignment without a call took its
    line, the relu moved to line 6): NPU902, naming line 5."""
    edited = "import torch\n\n\ndef f(x):\n    x = x * 2\n    return torch.relu(x)\n"
    [f] = _stale(tmp_path, edited, 5)
    # re-found on line 6 (the forward site and its backward's)
    assert f.evidence["changed_lines"] == [5] and f.evidence["re_anchored"] == 2
    assert "recorded line 5 no longer holds the recorded call" in f.message
    older = tmp_path / "older"
    older.mkdir()
    assert _stale(older, edited, 5, newer=False) == []  # saved before the capture ended: not stale


def test_call_replaced_by_another_torch_call_fires(tmp_path):
    """torch.relu on the recorded line replaced by torch.sigmoid: a torch function named otherwise
    cannot have launched the recorded aten::relu."""
    edited = "import torch\n\n\ndef f(x):\n    return torch.sigmoid(x)\n"
    [f] = _stale(tmp_path, edited, 5)
    assert f.evidence["changed_lines"] == [5] and f.evidence["dropped"] == 1


def test_dropped_anchor_on_an_edited_line_fires(tmp_path):
    """The relu is gone from f() and line 5 is blank now: the anchor is dropped and NPU902 says so."""
    edited = "import torch\n\n\ndef f(x):\n\n    return x\n"
    [f] = _stale(tmp_path, edited, 5)
    assert f.evidence["dropped"] == 1 and f.evidence["changed_lines"] == [5]


# -- NPU903 ------------------------------------------------------------------------------------


def _unattributed(tmp_path: Path, lost_us: float) -> Profile:
    src = tmp_path / "train.py"
    src.write_text("import torch\n\n\ndef f(x):\n    return torch.relu(x)\n")
    b = ProfileBuilder()
    mine = b.op("aten::relu", 10, 20, stack=[frame(src, 5, "f")])
    b.kernel("aclnnRelu_Relu_Relu", 14, 100, op=mine, type="Relu")
    lib = b.op("aten::mm", 100, 900, stack=[frame(f"{LIB}/deepspeed/runtime/engine.py", 1200, "step")])
    b.kernel("aclnnMm_MatMulCommon_MatMulV2", 110, lost_us * 0.75, op=lib, type="MatMulV2")
    b.kernel("aclnnMm_TransData_TransData", 110 + lost_us, lost_us * 0.25, op=lib, type="TransData")
    return b.build()


@pytest.mark.parametrize(("lost_us", "fires"), [(499.0, False), (500.0, True)])
def test_unattributed_time_at_five_percent(tmp_path, lost_us, fires):
    fs = only(findings(_unattributed(tmp_path, lost_us), ["NPU903"], [tmp_path]), "NPU903")
    assert bool(fs) is fires
    if fires:
        f = fs[0]
        assert f.evidence["time_us_per_step"] == pytest.approx(lost_us)
        assert f.evidence["kernels"] == 2 and f.evidence["with_stack_no_user_frame"] == 2
        assert list(f.evidence["top_kernels"]) == ["aclnnMm_MatMulCommon_MatMulV2", "aclnnMm_TransData_TransData"]
        assert "5.0% of the device time" in f.message and f.severity is Severity.INFO


def test_declared_level1_rules():
    # declared on the rule, and each declared rule asks ctx.needs_level1 for that data
    assert registry.declared_level1() == {"NPU107": rule("NPU107").level1, "NPU109": rule("NPU109").level1,
                                          "NPU230": rule("NPU230").level1}
    assert "AscendCL@" in registry.declared_level1()["NPU230"]


def test_the_notice_runs_after_the_rules_whose_skips_it_names_whatever_the_order_given():
    profile = _level_profile(shared_fixture(INFO_LEVEL0), free_us=300_000)
    late = _recording_rule("TST999", "AscendCL@ events")  # a code after NPU901's
    fs = run_rules(RuleContext(profile, None, None, RuleConfig(min_share=0.0)), [rule("NPU901"), late])
    (f,) = only(fs, "NPU901")
    assert "TST999" in f.message


def test_sample_touched_is_quiet_and_edited_fires(tmp_path):
    """The tiny_transformer sample copied and touched (every file newer than its capture, same
    text): no NPU902. Two lines inserted at the top of model.py: NPU902 on model.py only."""
    import shutil

    from conftest import REPO

    from msprof_lsp.server.analysis.run import analyse_paths
    from msprof_lsp.server.analysis.settings import Settings

    root = tmp_path / "tiny_transformer"
    shutil.copytree(REPO / "samples" / "tiny_transformer", root)
    settings = Settings(min_share=0.0, select=("NPU902",))

    def run():
        [a] = analyse_paths([root], settings, profile=root / "npu_profile", use_cache=False)
        return a.findings

    for py in root.glob("*.py"):
        os.utime(py)  # now: years after the 2025 capture
    assert run() == []
    model = root / "model.py"
    model.write_text("# a comment\n# another\n" + model.read_text())
    [f] = run()
    assert f.span.path == str(model) and f.evidence["changed_lines"]
