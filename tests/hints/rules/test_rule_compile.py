"""NPU107 online-compile: aclopCompileAndExecute events against opCompileMaxCount, Level0 gating
(NPU901), the global switch's anchor and fix, and the real fixtures (2024 trace: 11 events, no
finding; 2025 kernels: all OP State dynamic -> the weak variant as a hint)."""

from __future__ import annotations

import csv
import json

import pytest

from conftest import shared_fixture
from seedkit import CALL_IMPL, TRAIN_PY, L, Launch, ProfilerConfig, UserCall, analyse, applied, fwd, span_text, step_run

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.finding import Severity
from msprof_lsp.hints.fixes import expand
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.profile.model import Profile, ProfileKind, ProfileMeta
from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table

TRACE_2024 = "Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"
KD_2025 = "Ascend-msprof-analyze/test/ut/advisor/compute_advice/data/kernel_details.csv"
X, W, OUT = (32, 3, 16, 16), (16, 3, 3, 3), (32, 16, 16, 16)


def _run(convs: int, **kw):
    """``convs`` acl_op Conv2D launches in one step, each compiled online (forward only)."""
    items = []
    for _ in range(convs):
        conv = L.conv2d(X, W, OUT, conv_us=30.0, compile=True)
        items.append(UserCall(fwd("c = self.conv(img)"), (Launch(conv.op, conv.frames + CALL_IMPL),), label="conv"))
    return step_run(items, steps=1, **kw)


def _compile_events(a) -> tuple[int, float]:
    ev = [e for e in a.trace() if e.get("ph") == "X" and e.get("name") in
          ("AscendCL@aclopCompileAndExecute", "AscendCL@opCompile")]
    calls = [e for e in ev if e["name"] == "AscendCL@aclopCompileAndExecute"]
    return len(calls), sum(float(e["dur"]) for e in ev)


def test_count_at_and_just_below_op_compile_max_count(tmp_path):
    below = analyse(_run(19), tmp_path / "below")
    assert _compile_events(below)[0] == 19
    assert below.raw("NPU107") == [] or all(f.evidence.get("variant") == "all dynamic" for f in below.raw("NPU107"))
    at = analyse(_run(20), tmp_path / "at")
    count, host_us = _compile_events(at)
    assert count == 20
    [f] = [f for f in at.raw("NPU107") if f.evidence.get("variant") != "all dynamic"]
    assert f.evidence["aclopCompileAndExecute"] == 20
    assert f.time_per_step_us == pytest.approx(host_us, abs=0.01)
    assert f.message.startswith("Online compile: 20 aclopCompileAndExecute, ")
    assert f.message.endswith("Use prebuilt binaries: set_compile_mode(jit_compile=False).")
    # anchored on `import torch_npu` of the entry script, where the switch goes
    assert span_text(f.span) == "import torch_npu"
    path, new = applied(f, "set_compile_mode")
    assert "import torch_npu\ntorch_npu.npu.set_compile_mode(jit_compile=False)\n" in new
    assert not f.fixes[0].safe  # inserted: the default differs per chip


def test_explicit_jit_compile_true_is_flipped_safely(tmp_path):
    train = TRAIN_PY.replace("import torch_npu\n", "import torch_npu\n\ntorch_npu.npu.set_compile_mode(jit_compile=True)\n")
    a = analyse(_run(20), tmp_path)
    (a.project / "train.py").write_text(train, encoding="utf-8")
    ctx = RuleContext(a.profile, a.ctx.attribution, type(a.ctx.workspace)([a.project]), RuleConfig())
    [f] = [f for f in rule("NPU107").check(ctx) if f.evidence.get("variant") != "all dynamic"]
    expand([f], ctx.source_text)
    assert span_text(f.span) == "torch_npu.npu.set_compile_mode(jit_compile=True)"
    assert f.fixes[0].safe
    _, new = applied(f, "set_compile_mode")
    assert "torch_npu.npu.set_compile_mode(jit_compile=False)" in new and "jit_compile=True" not in new


def test_level0_skips_and_records_the_need(tmp_path):
    a = analyse(_run(20, config=ProfilerConfig(level="Level0")), tmp_path)
    assert not any(e.get("name", "").startswith("AscendCL@") for e in a.trace())  # pruned at Level0
    found = a.raw("NPU107")
    assert all(f.evidence.get("variant") == "all dynamic" for f in found)
    assert "NPU107" in a.ctx.level1_skips


def test_2024_fixture_eleven_compiles_do_not_fire():
    path = shared_fixture(TRACE_2024)
    events = json.loads(path.read_text(encoding="utf-8"))
    assert sum(e.get("name") == "AscendCL@aclopCompileAndExecute" for e in events) == 11
    prof = load_location(locate(path), use_cache=False)
    assert run_rules(RuleContext(prof, None, None, RuleConfig(min_share=0.0)), [rule("NPU107")]) == []


def test_2025_fixture_all_dynamic_is_a_hint():
    path = shared_fixture(KD_2025)
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["OP State"] for r in rows} == {"dynamic"}
    prof = Profile(ProfileMeta(ProfileKind.TORCH_NPU, str(path)), kernels=read_kernel_table(path).to_frame())
    ctx = RuleContext(prof, None, None, RuleConfig(min_share=0.0))
    [f] = run_rules(ctx, [rule("NPU107")])
    assert f.severity is Severity.HINT and f.evidence["variant"] == "all dynamic"
    assert f.evidence["dynamic_kernels"] == len(rows) and f.evidence["static_kernels"] == 0
    shapes: dict[str, set[str]] = {}
    for r in rows:
        shapes.setdefault(r["Type"], set()).add(r["Input Shapes"].strip('"'))
    assert f.evidence["distinct_input_shapes"] == {t: len(v) for t, v in shapes.items()}
    assert "NPU107" in ctx.level1_skips  # no CANN events in a kernel table: the count is not judged
