"""The rule framework: registry contract, context helpers (messages, per-step numbers) and the
engine's selection, severity, min_share, suppression, crash isolation and ordering."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from msprof_lsp.hints import registry
from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext, format_message
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.finding import Severity
from msprof_lsp.hints.registry import Rule, RuleError, register
from msprof_lsp.mapping.profile.model import Backend, Profile, ProfileKind, ProfileMeta, Step
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.mapping.source.workspace import SourceWorkspace
from tests.hints.rules.rulekit import FakeRule, fake_rule

MS = 1_000_000  # ns


def _profile(steps: int = 2, step_ms: int = 10, backend: Backend = Backend.ASCEND) -> Profile:
    meta = ProfileMeta(kind=ProfileKind.TORCH_NPU, path="/prof", backend=backend)
    return Profile(meta=meta, steps=[Step(i, i * step_ms * MS, (i + 1) * step_ms * MS) for i in range(steps)])


def _ctx(config: RuleConfig | None = None, workspace: SourceWorkspace | None = None, **kw) -> RuleContext:
    return RuleContext(_profile(**kw), None, workspace, config or RuleConfig())


def _rule(code: str, emit, *, severity: Severity | None = None, backends=registry.BACKENDS, **declared) -> Rule:
    """A rule whose check() calls ``emit(rule, ctx)``; built per test, never registered."""
    return fake_rule(code, emit, default_severity=severity, backends=backends, **declared)


def _at(path: str, line: int) -> Span:
    return Span(path, line, 0, line, 10)


def test_a_declaration_is_checked_when_it_is_made():
    def bad(code="NPU998", name="bad-rule", **declared):
        return FakeRule(code, name, lambda rule, ctx: [], summary="x", rationale="y", **declared)

    with pytest.raises(RuleError, match="code"):
        bad(code="npu1")
    with pytest.raises(RuleError, match="kebab"):
        bad(name="Bad_Name")
    with pytest.raises(RuleError, match="threshold"):
        bad(thresholds=("noSuchKey",))
    with pytest.raises(RuleError, match="backends"):
        bad(backends=("tpu",))
    with pytest.raises(RuleError, match="needs"):
        bad(needs=("kernels",))
    assert bad(backends=("cuda",)).backends == (Backend.CUDA,)  # spelt as a string, held as the enum


def test_register_lookup_and_duplicates():
    one = fake_rule("TST901", lambda rule, ctx: [], thresholds=("smallKernelUs",))
    other = FakeRule("TST901", "test-other", lambda rule, ctx: [], summary="Other.", rationale="r.")

    try:
        register(one)
        assert registry.rule("tst901") is one
        assert registry.rule("TST901").doc == "docs/rules/TST901.md"
        assert any(r.code == "TST901" for r in registry.rules_matching(["TST9"]))
        with pytest.raises(RuleError, match="duplicate"):
            register(other)
        with pytest.raises(KeyError):
            registry.rule("TST999")
    finally:
        registry._REGISTRY.pop("TST901", None)


def test_all_rules_imports_rule_modules_and_orders_by_code():
    rules = registry.all_rules()
    assert [r.code for r in rules] == sorted(r.code for r in rules)
    for r in rules:
        registry.validate(r)


def test_message_format_matches_the_catalog_examples():
    assert format_message(
        "ReLU→Dropout", count=3, unit="kernels", per_step_us=412, share=0.048, qualifier="each < 50 µs",
        diagnosis="dispatch-bound", fix="No fused NPU API; compile the pair or use inplace ReLU",
    ) == "ReLU→Dropout: 3 kernels, 412 µs/step (4.8% of the device step), each < 50 µs: dispatch-bound. No fused NPU API; compile the pair or use inplace ReLU."
    assert format_message(
        "HCCL not overlapped", per_step_us=13_400, share=0.22, qualifier="48 allReduce",
        diagnosis="communication-bound", fix="Accumulate gradients with model.no_sync().",
    ) == "HCCL not overlapped: 13.4 ms/step (22.0% of the device step), 48 allReduce: communication-bound. Accumulate gradients with model.no_sync()."
    with pytest.raises(ValueError):
        format_message("X", per_step_us=1, share=0, diagnosis="d", fix="one two three four five six seven eight nine ten eleven twelve thirteen")


def test_context_numbers_per_step_and_share():
    ctx = _ctx(steps=4, step_ms=20)
    assert ctx.num_steps == 4 and ctx.step_time_ns == 20 * MS
    assert ctx.per_step_us(8 * MS) == 2000.0
    assert ctx.share(ctx.per_step_ns(8 * MS)) == pytest.approx(0.1)
    assert ctx.message("Copy", total_ns=8 * MS, count=2, unit="copies", diagnosis="input-bound", fix="Pin memory") == \
        "Copy: 2 copies, 2,000 µs/step (10.0% of the device step): input-bound. Pin memory."
    assert ctx.backend == "ascend"


def _emit_shares(*shares_and_lines, code="NPU777", confidence=Confidence.STACK, path="/src/train.py"):
    def emit(rule, ctx):
        for share, line in shares_and_lines:
            total = share * ctx.step_time_ns * ctx.num_steps
            yield ctx.finding(rule, span=_at(path, line), message=f"{share}", total_ns=total, confidence=confidence)
    return emit


def test_severity_from_share_and_min_share_cut():
    rule = _rule("NPU777", _emit_shares((0.06, 1), (0.04, 2), (0.02, 3), (0.005, 4)))
    got = run_rules(_ctx(), [rule])
    assert [(f.span.line, f.severity) for f in got] == [(1, Severity.WARNING), (2, Severity.INFO), (3, Severity.HINT)]
    assert got[0].share == pytest.approx(0.06) and got[0].time_per_step_us == pytest.approx(600.0)
    got = run_rules(_ctx(RuleConfig(min_share=0.03)), [rule])
    assert [f.span.line for f in got] == [1, 2]


def test_severity_is_the_time_at_stake_whatever_the_anchor():
    """Issue 25 defect 4: a 20 % share is a warning whether its line came from a call stack or a
    pattern search (adding the profiled source must not turn warnings into hints)."""
    for confidence in Confidence:
        rule = _rule("NPU777", _emit_shares((0.2, 1), confidence=confidence))
        [f] = run_rules(_ctx(), [rule])
        assert f.severity is Severity.WARNING and f.confidence is confidence
    cfg = RuleConfig(severity={"NPU7": Severity.ERROR})
    assert run_rules(_ctx(cfg), [rule])[0].severity is Severity.ERROR


def test_rule_may_lower_but_not_raise_its_severity():
    def emit(rule, ctx):
        total = 0.2 * ctx.step_time_ns * ctx.num_steps
        yield ctx.finding(rule, span=_at("/a.py", 1), message="weak", total_ns=total, severity=Severity.HINT)
        f = ctx.finding(rule, span=_at("/a.py", 2), message="raised", total_ns=0.02 * ctx.step_time_ns * ctx.num_steps)
        f.severity = Severity.ERROR
        yield f

    got = run_rules(_ctx(), [_rule("NPU777", emit)])
    assert [f.severity for f in got] == [Severity.HINT, Severity.HINT]


def test_fixed_severity_rules_ignore_min_share():
    def emit(rule, ctx):
        yield ctx.finding(rule, span=None, message="env")

    env = _rule("NPU243", emit, severity=Severity.INFO)
    (f,) = run_rules(_ctx(RuleConfig(min_share=0.5)), [env])
    assert f.severity is Severity.INFO and f.share == 0.0
    (f,) = run_rules(_ctx(RuleConfig(severity={"NPU243": Severity.WARNING})), [env])
    assert f.severity is Severity.WARNING


def test_findings_of_zero_time_are_dropped_in_one_place():
    """A finding whose time per step prints as 0.0 µs saves nothing (issue 23): dropped for every
    share-based rule whatever minShare says; settings and notices (fixed severity) carry no time."""
    def emit(rule, ctx):
        for line, us in ((1, 0.0), (2, 0.04), (3, 0.05), (4, 120.0)):
            yield ctx.finding(rule, span=_at("/a.py", line), message=f"{us}", total_ns=us * 1000 * ctx.num_steps)

    got = run_rules(_ctx(RuleConfig(min_share=0.0)), [_rule("NPU777", emit)])
    assert [f.span.line for f in got] == [3, 4]
    env = _rule("NPU243", lambda rule, ctx: iter([ctx.finding(rule, span=None, message="env")]), severity=Severity.INFO)
    assert len(run_rules(_ctx(RuleConfig(min_share=0.0)), [env])) == 1


def test_pytorch_rules_do_not_run_on_a_program_that_is_not_pytorch():
    """An msprof CLI capture with no framework layer and no torch source behind its kernels is not a
    PyTorch program: a ``pytorch_only`` rule stays silent there; torch versions, aten ops or a
    torch_npu/Kineto export make it one."""
    torch_advice = _rule("NPU778", _emit_shares((0.1, 1)), pytorch_only=True)
    msprof = Profile(meta=ProfileMeta(kind=ProfileKind.MSPROF, path="/prof"), steps=_profile().steps)
    assert run_rules(RuleContext(msprof, None, None, RuleConfig()), [torch_advice]) == []
    assert len(run_rules(RuleContext(msprof, None, None, RuleConfig()), [_rule("NPU779", _emit_shares((0.1, 1)))])) == 1
    msprof.meta.torch_npu_version = "2.1.0.post8"
    assert len(run_rules(RuleContext(msprof, None, None, RuleConfig()), [torch_advice])) == 1
    assert len(run_rules(_ctx(), [torch_advice])) == 1  # a torch_npu export


def test_select_ignore_by_code_and_prefix_and_backend():
    rules = [_rule(c, _emit_shares((0.1, i))) for i, c in enumerate(["NPU101", "NPU102", "NPU201"], 1)]
    codes = lambda cfg: [f.code for f in run_rules(_ctx(cfg), rules)]  # noqa: E731
    assert codes(RuleConfig()) == ["NPU101", "NPU102", "NPU201"]
    assert codes(RuleConfig(select=("NPU1",))) == ["NPU101", "NPU102"]
    assert codes(RuleConfig(select=("NPU1",), ignore=("NPU102",))) == ["NPU101"]
    cuda_only = _rule("NPU301", _emit_shares((0.1, 9)), backends=("cuda",))
    assert run_rules(_ctx(), [cuda_only]) == []
    assert len(run_rules(_ctx(backend=Backend.CUDA), [cuda_only])) == 1


def test_suppression_comments_are_honoured(tmp_path: Path):
    src = tmp_path / "train.py"
    src.write_text("a = 1  # msprof: ignore[NPU777]\nb = 2  # msprof: ignore\nc = 3  # msprof: ignore[NPU1]\nd = 4\n", encoding="utf-8")
    rule = _rule("NPU777", _emit_shares((0.1, 1), (0.1, 2), (0.1, 3), (0.1, 4), path=str(src)))
    # source text (and so its suppression comments) comes from the workspace
    assert [f.span.line for f in run_rules(_ctx(workspace=SourceWorkspace([tmp_path])), [rule])] == [3, 4]


def test_a_crashing_rule_becomes_one_notice_and_others_still_run(caplog):
    def boom(rule, ctx):
        yield ctx.finding(rule, span=_at("/a.py", 1), message="partial", total_ns=ctx.step_time_ns)
        raise RuntimeError("bad column")

    ok = _rule("NPU101", _emit_shares((0.1, 5)))
    with caplog.at_level(logging.ERROR, logger="msprof_lsp.hints"):
        got = run_rules(_ctx(), [_rule("NPU777", boom), ok])
    assert [f.code for f in got] == ["NPU777", "NPU101"]  # profile-level notice first (no span)
    notice = got[0]
    assert notice.span is None and notice.severity is Severity.INFO and "RuntimeError: bad column" in notice.message
    assert "NPU777" in caplog.text and "bad column" in caplog.text
    # one line, no traceback (the fuzz campaign found rule tracebacks on --check's stderr)
    assert "Traceback" not in caplog.text and all(r.exc_info is None for r in caplog.records if r.levelno >= logging.ERROR)


def test_output_order_is_stable():
    rule = _rule("NPU777", _emit_shares((0.1, 9), (0.1, 2), path="/b.py"))
    rule2 = _rule("NPU555", _emit_shares((0.1, 9), path="/a.py"))
    got = run_rules(_ctx(), [rule, rule2])
    assert [(f.span.path, f.span.line) for f in got] == [("/a.py", 9), ("/b.py", 2), ("/b.py", 9)]
