"""NPU108 host-sync: blocking ops and sync APIs timed on the host against the wall-clock step,
syncs inside Optimizer.step left to NPU220, anchors on ``loss.item()`` / ``torch.npu.synchronize()``
and their fixes; the 2024 trace fixture (the aten::item after the optimizer step, 2401.6 µs)."""

from __future__ import annotations

import json

import pytest
from conftest import shared_fixture
from seedkit import L, Launch, OpSpec, UserCall, analyse, applied, backward, fwd, item_call, loop, optimizer_step, pct, span_text, step_run

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.finding import Severity
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.spans import Confidence

TRACE_2024 = "Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"


def _run(*, in_optimizer: bool = False):
    lin = L.linear(32, 1024, 64, mm_us=900.0)  # a long kernel still running when the host syncs
    opt = (UserCall(loop("optimizer.step()"), (Launch(OpSpec("Optimizer.step#SGD.step", children=(L.item().op,))),),
                    label="optimizer") if in_optimizer else optimizer_step(False))
    items = [
        UserCall(fwd("x = self.drop(self.act(self.fc1(x)))"), (Launch(lin.op, lin.frames),), label="fc1"),
        backward(),
        opt,
        UserCall(loop("optimizer.zero_grad()"), (L.zero_grad_to_none("SGD"),), label="zero_grad"),
        UserCall(loop("torch.npu.synchronize()"), sync_api="AscendCL@aclrtSynchronizeDevice", label="sync"),
        item_call(),
    ]
    return step_run(items)


def test_two_syncs_on_one_line_per_step_are_plural(tmp_path):
    """Two loss.item() per step on one line are one finding, "2 syncs" (one is "1 sync", above)."""
    lin = L.linear(32, 1024, 64, mm_us=900.0)
    items = [UserCall(fwd("x = self.drop(self.act(self.fc1(x)))"), (Launch(lin.op, lin.frames),), label="fc1"),
             backward(), optimizer_step(False), item_call(), item_call()]
    [item] = [f for f in analyse(step_run(items), tmp_path).run("NPU108", min_share=0.0) if span_text(f.span) == "loss.item()"]
    assert item.message.startswith("loss.item(): 2 syncs, ")


def _host(a):
    trace = a.trace()
    steps = [e for e in trace if e.get("cat") == "cpu_op" and e["name"].startswith("ProfilerStep#")]
    wall = sum(e["dur"] for e in steps) / len(steps)
    return trace, steps, wall


def test_loss_item_and_synchronize(tmp_path):
    a = analyse(_run(), tmp_path)
    trace, steps, wall = _host(a)
    n = len(steps)
    found = {span_text(f.span): f for f in a.run("NPU108", min_share=0.0)}
    assert set(found) == {"loss.item()", "torch.npu.synchronize()"}
    item = found["loss.item()"]
    item_us = sum(e["dur"] for e in trace if e.get("name") == "aten::item") / n
    assert item.time_per_step_us == pytest.approx(item_us, abs=1e-3)
    assert item.share == pytest.approx(item_us / wall, rel=1e-6)
    # blocked time is no share of the step: the message gives the time alone (the share is the JSON's)
    assert item.message == (f"loss.item(): 1 sync, {item.message.split(', ')[1].split(':')[0]}: "
                            "host blocked, waiting for the NPU. "
                            "Accumulate loss.detach(); call .item() every N steps.")
    assert item.confidence is Confidence.STACK
    _, new = applied(item, "every 100 steps")
    assert "if step % 100 == 0:" in new
    sync = found["torch.npu.synchronize()"]
    sync_us = sum(e["dur"] for e in trace if e.get("name") == "AscendCL@aclrtSynchronizeDevice") / n
    assert sync.time_per_step_us == pytest.approx(sync_us, abs=1e-3)
    # no framework op around it: placed between the anchored ops before and after it on the thread
    assert sync.confidence is Confidence.MODULE
    _, new = applied(sync, "synchronize")
    assert "torch.npu.synchronize()" not in new


def test_min_share_boundary(tmp_path):
    a = analyse(_run(), tmp_path)
    trace, steps, wall = _host(a)
    share = sum(e["dur"] for e in trace if e.get("name") == "aten::item") / len(steps) / wall
    assert any(span_text(f.span) == "loss.item()" for f in a.run("NPU108", min_share=share * 0.99))
    assert not any(span_text(f.span) == "loss.item()" for f in a.run("NPU108", min_share=share * 1.01))


def test_syncs_inside_the_optimizer_step_belong_to_npu220(tmp_path):
    a = analyse(_run(in_optimizer=True), tmp_path)
    trace, steps, _ = _host(a)
    opt = [e for e in trace if e.get("name") == "Optimizer.step#SGD.step"]
    inside = [e for e in trace if e.get("name") == "aten::item" and any(_within(e, o) for o in opt)]
    assert len(inside) == len(steps)
    found = a.run("NPU108", min_share=0.0)
    assert all(f.evidence["in_optimizer_step"]["count"] == len(inside) for f in found)
    assert sum(s["count"] for f in found for s in f.evidence["syncs"] if s["op"] == "aten::item") == len(steps)


def _within(e, o):
    return o["tid"] == e["tid"] and float(o["ts"]) <= float(e["ts"]) <= float(o["ts"]) + float(o["dur"])


def test_2024_fixture_item_after_the_optimizer_step():
    path = shared_fixture(TRACE_2024)
    events = json.loads(path.read_text(encoding="utf-8"))
    step = float(next(e for e in events if e.get("name") == "ProfilerStep#1")["dur"])
    opt = [e for e in events if e.get("name", "").startswith("Optimizer.step#")]
    items = [e for e in events if e.get("name") == "aten::item"]
    inside = [e for e in items if any(_within(e, o) for o in opt)]
    outside = [e for e in items if e not in inside]
    assert (len(items), len(inside)) == (45, 40)
    longest = max(float(e["dur"]) for e in outside)
    assert round(longest, 1) == 2401.6 and round(longest / step * 100) == 17
    prof = load_location(locate(path), use_cache=False)
    found = run_rules(RuleContext(prof, None, None, RuleConfig()), [rule("NPU108")])
    [f] = [f for f in found if f.evidence["longest"]["op"] == "aten::item"]
    assert f.evidence["in_optimizer_step"]["count"] == 40
    assert f.evidence["longest"]["us"] == pytest.approx(longest, abs=1e-3)
    assert f.evidence["longest"]["share_of_wall_step"] == pytest.approx(longest / step, rel=1e-6)
    total = sum(float(e["dur"]) for e in outside)
    assert f.time_per_step_us == pytest.approx(total, abs=1e-2)
    assert f.share == pytest.approx(total / step, rel=1e-5)
    assert f.severity is Severity.WARNING and f.span is None


# -- msprof CLI form: no framework ops, only the runtime's stream sync and the read after it ---------

LOOP_SRC = '''import torch


def train(model, loader, optimizer):
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f}")
'''


def _msprof_sync(tmp_path, src: str):
    from rulekit import ProfileBuilder, findings

    from msprof_lsp.mapping.profile.model import ProfileKind

    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(src, encoding="utf-8")
    b = ProfileBuilder(kind=ProfileKind.MSPROF, steps=2, step_us=5_000)
    for s in range(2):
        t = 5_000 * s
        b.kernel("aclnnMm_MatMulCommon_MatMulV2", t + 100, 2_000, type="MatMulV2")
        b.event("AscendCL@aclrtSynchronizeStream", "cann", t + 150, 1_950)
        b.event("AscendCL@aclrtMemcpy", "cann", t + 2_110, 9)
    return findings(b.build(), ["NPU108"], [root]), root


def test_msprof_stream_sync_lands_on_the_only_blocking_statement_of_the_training_loop(tmp_path):
    from rulekit import applied

    fs, root = _msprof_sync(tmp_path, LOOP_SRC)
    [f] = fs
    assert f.confidence is Confidence.INFERRED and span_text(f.span) == "loss.item()"
    assert f.time_per_step_us == pytest.approx(1_950)
    assert f.evidence["syncs"] == [{"op": "AscendCL@aclrtSynchronizeStream", "count": 2, "total_us": 3900.0}]
    new = applied(LOOP_SRC, f.fixes[0])
    compile(new, "train.py", "exec")
    assert "loss.item()" in new and "if step % " in new


def test_msprof_stream_sync_with_two_blocking_statements_in_the_loop_names_no_line(tmp_path):
    two = LOOP_SRC.replace("        optimizer.zero_grad()\n", "        optimizer.zero_grad()\n        grad = x.grad.cpu()\n")
    assert two != LOOP_SRC
    [f] = _msprof_sync(tmp_path, two)[0]
    assert f.span is None
