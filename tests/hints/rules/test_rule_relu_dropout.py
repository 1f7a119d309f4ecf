"""NPU101 relu-dropout-fusion on spec-exact profiles of a small project, on kernel-only tables and
on the real fixtures."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, shared_fixture
from seedkit import CALL_IMPL, MODEL, SEQUENTIAL, TRAIN, L, Launch, UserCall, analyse, applied, backward, fwd, optimizer_step, pct, span_text, step_run
from tests.synth import truth

from msprof_lsp.hints.config import RuleConfig, Thresholds
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.finding import Severity
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.model import KERNEL_SCHEMA, Profile, ProfileKind, ProfileMeta, Step, make_table
from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table
from msprof_lsp.mapping.spans import Confidence

KD_2023 = "Ascend-msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"
H = (32, 64)


def _pair(site, *, relu_us, gen_us, do_us, label, functional=False):
    """A Linear on the line plus its ReLU -> Dropout, the pair under its own label (truth per pair)."""
    lin = L.linear(32, 64, 64, mm_us=6.0)
    rf, df = (L.F_RELU, L.F_DROPOUT) if functional else (L.RELU_FWD, L.DROPOUT_FWD)
    return [
        UserCall(site, (Launch(lin.op, lin.frames),), label=f"{label}.linear", gap_ns=40_000),
        UserCall(site, (L.relu(H, dur_us=relu_us, frames=rf),
                        L.dropout(H, 0.3, genmask_us=gen_us, domask_us=do_us, mask_stream=3, frames=df)), label=label),
    ]


def _block():
    """``x = self.block(x)``: the Sequential's Linear, ReLU and Dropout (the Linear under its own label)."""
    lin = L.linear(32, 64, 64, mm_us=6.0)
    site = SEQUENTIAL + CALL_IMPL + fwd("x = self.block(x)")
    return UserCall(site, (Launch(L.relu(H, dur_us=4.0).op, L.RELU_FWD + CALL_IMPL),
                           Launch(L.dropout(H, 0.1, genmask_us=6.0, domask_us=5.0, mask_stream=3).op,
                                  L.DROPOUT_FWD + CALL_IMPL)), label="block"), lin


def _run(relu_us=4.0, gen_us=6.0, do_us=5.0, **kw):
    items = [
        *_pair(fwd("x = self.drop(self.act(self.fc1(x)))"), relu_us=relu_us, gen_us=gen_us, do_us=do_us, label="fc1"),
        *_pair(fwd("x = F.dropout(F.relu(self.fc2(x))"), relu_us=3.0, gen_us=4.0, do_us=3.5, label="fc2", functional=True),
        UserCall(SEQUENTIAL + CALL_IMPL + fwd("x = self.block(x)"), (Launch(_block()[1].op, _block()[1].frames + CALL_IMPL),),
                 label="block.linear"),
        _block()[0],
        UserCall(fwd("h = F.relu(x)"), (L.relu(H, dur_us=3.0, frames=L.F_RELU),), label="stmts"),
        UserCall(fwd("h = F.dropout(h, p=0.0"), (L.dropout(H, 0.0, genmask_us=4.0, domask_us=3.5, mask_stream=3,
                                                          frames=L.F_DROPOUT),), label="stmts"),
        backward(),
        optimizer_step(False),
    ]
    return step_run(items, **kw)


def _finding(findings, text):
    hits = [f for f in findings if f.span is not None and span_text(f.span) == text]
    assert len(hits) == 1, [(f.span and span_text(f.span), f.message) for f in findings]
    return hits[0]


def test_module_pair_numbers_anchor_related_and_fixes(tmp_path):
    run = _run()
    a = analyse(run, tmp_path)
    t = truth(run)
    steps = len(t.steps)
    f = _finding(a.run("NPU101"), "self.drop(self.act(self.fc1(x)))")
    per_step = t.kernel_ns_by_label["fc1"] / steps
    share = per_step / t.mean_step_time_ns
    assert f.time_per_step_us == pytest.approx(per_step / 1000)
    assert f.share == pytest.approx(share)
    # Relu, mask generation, DoMask forward; ReluGrad, DoMask backward: 5 kernels a step
    assert f.message.startswith("ReLU→Dropout: 5 kernels, ")
    assert f"({pct(share)} of the device step), each < 50 µs" in f.message
    assert f.message.endswith("No fused NPU API; compile the pair or use inplace ReLU.")
    types = {k["type"]: k["count"] for k in f.evidence["kernels"]}
    assert types == {"Relu": steps, "DropOutGenMaskV4": steps, "DropOutDoMask": steps, "ReluGrad": steps}
    assert sum(k["count"] for k in f.evidence["kernels"]) == 5 * steps
    assert f.confidence is Confidence.STACK and f.evidence["construct"] == "nested"
    expected_sev = Severity.WARNING if share >= 0.05 else Severity.INFO if share >= 0.03 else Severity.HINT
    assert f.severity is expected_sev
    assert sorted(span_text(r.span) for r in f.related) == ["nn.Dropout(0.3)", "nn.ReLU()"]
    # the fixes: compile the pair (npu backend for an Ascend profile), in-place ReLU; both apply and parse
    path, new = applied(f, "torch.compile")
    assert path.endswith("model.py")
    assert "_relu_dropout(self.fc1(x), self.drop.p, self.training)" in new and 'backend="npu"' in new
    path, new = applied(f, "in-place")
    assert "self.act = nn.ReLU(inplace=True)" in new


def test_dispatch_bound_from_the_written_wait_times(tmp_path):
    # durations unique to the fc1 pair (no jitter), so its kernel_details rows can be picked by them
    run = _run(relu_us=4.5, gen_us=6.5, do_us=5.5, jitter_ns=0)
    a = analyse(run, tmp_path)
    f = _finding(a.run("NPU101", min_share=0.0), "self.drop(self.act(self.fc1(x)))")
    mine = {("Relu", "4.5"), ("ReluGrad", "5.4"), ("DropOutGenMaskV4", "6.5"), ("DropOutDoMask", "5.5")}
    rows = [r for r in a.kernel_rows() if (r["Type"], r["Duration(us)"].rstrip("0").rstrip(".")) in mine]
    assert len(rows) == 5 * len(run.steps)
    mean_wait = sum(float(r["Wait Time(us)"]) for r in rows) / len(rows)
    assert f.evidence["mean_wait_us"] == pytest.approx(mean_wait, abs=1e-3)
    assert mean_wait >= 5.0 and "dispatch-bound" in f.message  # the host gaps before each line show on the device
    raised = a.run("NPU101", min_share=0.0, thresholds=Thresholds(scheduling_delay_us=mean_wait + 0.01))
    assert "dispatch-bound" not in _finding(raised, "self.drop(self.act(self.fc1(x)))").message


def test_functional_nested_and_statement_pairs(tmp_path):
    run = _run()
    a = analyse(run, tmp_path)
    t = truth(run)
    findings = a.run("NPU101", min_share=0.0)
    nested = _finding(findings, "F.dropout(F.relu(self.fc2(x)), p=self.p, training=self.training)")
    assert nested.time_per_step_us == pytest.approx(t.kernel_ns_by_label["fc2"] / len(t.steps) / 1000)
    _, new = applied(nested, "torch.compile")
    assert "x = _relu_dropout(self.fc2(x), self.p, self.training)" in new
    stmts = _finding(findings, "h = F.relu(x)\n        h = F.dropout(h, p=0.0, training=self.training)")
    assert stmts.evidence["construct"] == "statements"
    # the p=0 dropout only copies: deleting it is the safe (preferred) fix
    assert stmts.fixes[0].safe and "p=0" in stmts.fixes[0].title
    path, new = applied(stmts, "p=0")
    assert "F.dropout(h, p=0.0" not in new and "h = F.relu(x)" in new


def test_qualifier_boundary_at_small_kernel_us(tmp_path):
    # no timing jitter: the described durations are the written ones
    just_below = analyse(_run(do_us=49.9, jitter_ns=0), tmp_path / "a")
    f = _finding(just_below.run("NPU101", min_share=0.0), "self.drop(self.act(self.fc1(x)))")
    assert "each < 50 µs" in f.message
    at = analyse(_run(do_us=50.0, jitter_ns=0), tmp_path / "b")
    f = _finding(at.run("NPU101", min_share=0.0), "self.drop(self.act(self.fc1(x)))")
    assert "each < 50 µs" not in f.message and not f.evidence["each_below_small_kernel"]
    # and the same profile with smallKernelUs raised over the DoMask: the qualifier is back
    raised = RuleConfig(min_share=0.0, thresholds=Thresholds(small_kernel_us=60))
    ctx = RuleContext(at.profile, at.ctx.attribution, at.ctx.workspace, raised)
    f = _finding(run_rules(ctx, [rule("NPU101")]), "self.drop(self.act(self.fc1(x)))")
    assert "each < 60 µs" in f.message


def test_below_min_share_is_not_reported(tmp_path):
    a = analyse(_run(), tmp_path)
    t = truth(_run())
    share = t.kernel_ns_by_label["fc1"] / len(t.steps) / t.mean_step_time_ns
    assert _finding(a.run("NPU101", min_share=share * 0.99), "self.drop(self.act(self.fc1(x)))")
    kept = [f for f in a.run("NPU101", min_share=share * 1.01) if f.span and "fc1" in span_text(f.span)]
    assert kept == []


def test_sequential_pair_anchor(tmp_path):
    run = _run()
    a = analyse(run, tmp_path)
    t = truth(run)
    f = _finding(a.run("NPU101", min_share=0.0), "nn.ReLU(), nn.Dropout(0.1)")
    assert f.evidence["construct"] == "sequential"
    assert f.time_per_step_us == pytest.approx(t.kernel_ns_by_label["block"] / len(t.steps) / 1000)
    assert [span_text(r.span) for r in f.related] == ["self.block(x)"]
    _, new = applied(f, "torch.compile")
    assert "nn.Sequential(nn.Linear(64, 64), ReLUDropout(0.1), nn.Identity())" in new


def test_kernel_only_fallback_is_inferred(tmp_path):
    run = _run()
    a = analyse(run, tmp_path)
    table = read_kernel_table(a.root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    prof = Profile(ProfileMeta(ProfileKind.TORCH_NPU, str(a.root)), kernels=table.to_frame())
    ctx = RuleContext(prof, None, None, RuleConfig(min_share=0.0))
    [f] = run_rules(ctx, [rule("NPU101")])
    # every forward pair of the run: Relu then DropOutDoMask within 3 rows of the same step
    rows = a.kernel_rows()
    expected = 0
    for i, r in enumerate(rows):
        if r["Type"] == "Relu":
            nxt = rows[i + 1: i + 4]
            if any(x["Type"] == "DropOutDoMask" and x["Step Id"] == r["Step Id"] for x in nxt):
                expected += 1
    assert f.evidence["pairs"] == expected == 4 * 2  # fc1, fc2, the Sequential, the statements; two steps
    assert f.evidence["evidence"] == "kernel order" and f.confidence is Confidence.INFERRED
    # severity is the time at stake whatever the anchor (docs/rules/README.md): not capped to a hint
    assert f.severity is ctx.severity(f.code, f.share) and f.severity is not Severity.HINT and f.span is None


def test_the_kernel_count_word_agrees_with_the_count():
    """One pair's Relu and DropOutDoMask over three steps: 2 kernels / 3 steps is 1 a step, printed
    "1 kernel" (it read "1 kernels")."""
    cols: dict[str, list] = {c: [] for c in KERNEL_SCHEMA}
    for name, typ, start in (("Relu1", "Relu", 1000), ("DropOutDoMask1", "DropOutDoMask", 5000)):
        row = {"name": name, "type": typ, "core": "AI_VECTOR_CORE", "start_ns": start, "dur_ns": 3000, "wait_ns": 0,
               "stream": 2, "step": 0}
        for c, (_, default) in KERNEL_SCHEMA.items():
            cols[c].append(row.get(c, default))
    prof = Profile(ProfileMeta(ProfileKind.TORCH_NPU, "/prof"), kernels=make_table(KERNEL_SCHEMA, cols),
                   steps=[Step(i, i * 100_000, (i + 1) * 100_000) for i in range(3)])
    [f] = run_rules(RuleContext(prof, None, None, RuleConfig(min_share=0.0)), [rule("NPU101")])
    assert f.evidence["kernels_per_step"] == pytest.approx(2 / 3)
    assert f.message.startswith("ReLU→Dropout: 1 kernel, "), f.message


def _fixture_rows():
    path = shared_fixture(KD_2023)
    with open(path, newline="", encoding="utf-8") as fh:
        return path, list(csv.DictReader(fh))


def test_2023_fixture_has_no_relu_so_no_pair():
    path, rows = _fixture_rows()
    assert sum(r["Type"] == "Relu" for r in rows) == 0  # the GPT block uses FastGelu
    prof = Profile(ProfileMeta(ProfileKind.TORCH_NPU, str(path)), kernels=read_kernel_table(path).to_frame())
    assert list(rule("NPU101").check(RuleContext(prof, None, None, RuleConfig(min_share=0.0)))) == []


def test_2023_fixture_dropout_kernels_are_above_the_small_kernel_limit():
    """With a 3 µs Relu placed just before each of the fixture's mask generations (99-396 µs on the
    second stream; DoMask 26-129 µs), the pairs the kernel-order rule finds are reported without
    "each < 50 µs"."""
    path, rows = _fixture_rows()
    frame = read_kernel_table(path).to_frame()
    cols = {c: list(frame[c]) for c in KERNEL_SCHEMA}
    for g in sorted(np.flatnonzero(frame["type"].astype(str).to_numpy() == "DSAStatelessGenBitMask"), reverse=True):
        g = int(g)
        for c in cols:
            cols[c].insert(g, cols[c][g])
        cols["name"][g], cols["type"][g], cols["core"][g] = "Relu1", "Relu", "AI_VECTOR_CORE"
        cols["start_ns"][g] -= 5000
        cols["dur_ns"][g] = 3000
    prof = Profile(ProfileMeta(ProfileKind.TORCH_NPU, str(path)), kernels=make_table(KERNEL_SCHEMA, cols))
    [f] = rule("NPU101").check(RuleContext(prof, None, None, RuleConfig(min_share=0.0)))
    # the same rule on plain rows: sorted by start, Relu then DropOutDoMask within 3 rows
    plain = sorted(zip(cols["start_ns"], cols["type"], cols["dur_ns"]))
    groups = []
    for i, (_, t, d) in enumerate(plain):
        if t == "Relu":
            nxt = [x for x in plain[i + 1: i + 4]]
            j = next((k for k, x in enumerate(nxt) if x[1] == "DropOutDoMask"), None)
            if j is not None:
                groups.append([d] + [x[2] for x in nxt[: j + 1] if x[1] in ("DropOutDoMask", "DSAStatelessGenBitMask")])
    assert f.evidence["pairs"] == len(groups) > 0
    assert f.evidence["max_kernel_us"] == pytest.approx(max(max(g) for g in groups) / 1000)
    gen_us = [float(r["Duration(us)"]) for r in rows if r["Type"] == "DSAStatelessGenBitMask"]
    do_us = [float(r["Duration(us)"]) for r in rows if r["Type"] == "DropOutDoMask"]
    assert (min(gen_us), max(gen_us)) == (99.52, 395.74) and (min(do_us), max(do_us)) == (26.34, 128.72)
    assert "each < 50 µs" not in f.message and not f.evidence["each_below_small_kernel"]
    assert f.confidence is Confidence.INFERRED


def test_recorded_cpu_trace_finds_the_three_constructs():
    trace = next((REPO / "samples" / "cnn_classifier" / "kineto").glob("*.pt.trace.json.gz"))
    from msprof_lsp.mapping.source.attribute import attribute
    from msprof_lsp.mapping.profile.load import load_location, locate
    from msprof_lsp.mapping.source.workspace import SourceWorkspace

    prof = load_location(locate(trace), use_cache=False)
    ws = SourceWorkspace([REPO / "samples" / "cnn_classifier"])
    ctx = RuleContext(prof, attribute(prof, ws), ws, RuleConfig(min_share=0.0))
    found = {span_text(f.span): f for f in rule("NPU101").check(ctx)}
    model = (REPO / "samples" / "cnn_classifier" / "model.py").read_text(encoding="utf-8")
    assert set(found) == {"nn.ReLU(),\n            nn.Dropout(0.2)", "self.drop(self.act(self.fc1(x)))",
                          "F.dropout(F.relu(self.fc2(x)), p=self.dropout, training=self.training)"}
    assert all(text.split("\n")[0] in model for text in found)
    events = json.loads(gzip.open(trace).read())["traceEvents"]
    relu = [e for e in events if e.get("name") == "aten::relu" and e.get("cat") == "cpu_op"]
    drop = [e for e in events if e.get("name") == "aten::dropout"]
    assert sum(f.evidence["pairs"] for f in found.values()) == len(drop) == 6
    for f in found.values():
        # CPU: no kernels, host time of the pair (forward ops and their backward nodes)
        assert f.evidence["kernels"] == [] and f.evidence["host_time_us"] > 0
        assert "torch.compile" in f.message and f.confidence is Confidence.MODULE
    # forward: each dropout with the ReLU just before it on its thread; backward: at most every node
    pairs = 0.0
    for d in drop:
        r = max((e for e in relu if e["tid"] == d["tid"] and e["ts"] < d["ts"]), key=lambda e: e["ts"])
        pairs += r["dur"] + d["dur"]
    bwd = sum(e["dur"] for e in events if e.get("cat") == "cpu_op" and e["name"].endswith("Backward0")
              and not e["name"].startswith("autograd::"))
    host = sum(f.evidence["host_time_us"] for f in found.values())
    assert pairs <= host + 1e-6 and host - pairs <= bwd


def test_anchor_spans_in_the_project_are_real_calls(tmp_path):
    """The spans the project helper computes agree with the source (a guard for the other tests)."""
    ln, col, _, _ = MODEL.span_of("self.drop(self.act(self.fc1(x)))")
    assert MODEL.lines[ln - 1][col:].startswith("self.drop(")
    assert TRAIN.line("loss.backward()") < TRAIN.line("optimizer.step()")
    assert Path(tmp_path).exists()


def test_kernel_only_pair_lands_where_the_attribution_placed_it(tmp_path):
    """msprof CLI form (kernels only, no stacks): two ReLU→Dropout constructs in the workspace, so
    the type-only search refuses; the launch order between the two shape-anchored Linear kernels
    places the pair on ``self.drop(self.act(self.fc1(x)))``."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "mapping" / "source"))
    from srcmap_builder import ProfileBuilder

    from msprof_lsp.mapping.source.attribute import attribute
    from msprof_lsp.mapping.source.workspace import SourceWorkspace

    text = '''import torch.nn.functional as F
from torch import nn


class Head(nn.Module):
    def __init__(self, d=64, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.2)
        self.fc2 = nn.Linear(2 * d, classes)

    def forward(self, x):
        x = self.drop(self.act(self.fc1(x)))
        return self.fc2(x)


def other(x):
    return F.dropout(F.relu(x), p=0.5)
'''
    root = tmp_path / "proj"
    root.mkdir()
    (root / "model.py").write_text(text, encoding="utf-8")
    b = ProfileBuilder(kind=ProfileKind.MSPROF)
    for t, (typ, shapes, out) in enumerate((
            ("MatMulV2", "32,64;128,64", "32,128"), ("Relu", "32,128", "32,128"),
            ("DropOutGenMaskV4", "2", "512"), ("DropOutDoMask", "32,128;512;", "32,128"),
            ("MatMulV2", "32,128;10,128", "32,10"),
            # backward: dX of fc2, the dropout and ReLU gradients, dW of fc1
            ("MatMulV2", "32,10;10,128", "32,128"), ("DropOutDoMask", "32,128;512;", "32,128"),
            ("ReluGrad", "32,128;32,128", "32,128"), ("MatMulV2", "32,128;32,64", "128,64"))):
        b.kernel(f"{typ}_{t}", typ, 1000 * t, 100, core="AI_VECTOR_CORE", shapes=shapes, out_shapes=out)
    prof = b.build()
    ws = SourceWorkspace([root])
    ctx = RuleContext(prof, attribute(prof, ws), ws, RuleConfig(min_share=0.0))
    [f] = run_rules(ctx, [rule("NPU101")])
    assert f.evidence["evidence"] == "kernel order" and f.confidence is Confidence.INFERRED
    assert f.span is not None and span_text(f.span) == "self.drop(self.act(self.fc1(x)))"
    # the forward pair and the backward kernels the attribution placed on its calls
    assert {k["type"]: k["count"] for k in f.evidence["kernels"]} == {
        "Relu": 1, "DropOutGenMaskV4": 1, "DropOutDoMask": 2, "ReluGrad": 1}
    assert f.evidence["pairs"] == 1
