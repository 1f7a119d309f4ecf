"""NPU102: the gradient-accumulation rewrite, its refusals, and torch checks that N micro-batches
give the same update as one batch N times larger (plain, AMP-structured, and DDP with no_sync)."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
from torch import nn

from fixkit import check_fix, line_of, load, model_source
from msprof_lsp.hints.fixes.grad_accum import accumulate_gradients

SCRIPT = model_source("train_regression.py")


def _loop_lines(text: str, header: str, last: str) -> set[int]:
    return set(range(line_of(text, header), line_of(text, last) + 1))


def _fixed(anchor_needle: str, header: str, last: str, **opts) -> tuple[str, object]:
    res = accumulate_gradients(SCRIPT, line_of(SCRIPT, anchor_needle), **opts)
    new = check_fix(SCRIPT, res, allowed_lines=_loop_lines(SCRIPT, header, last), safe=False)
    return new, res


class CountingSGD(torch.optim.SGD):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.steps = 0

    def step(self, closure=None):
        self.steps += 1
        return super().step(closure)


def test_plain_loop_shape():
    new, res = _fixed("loss.backward()", "    for x, y in loader:", "        last = loss.item()")
    assert "ACCUM_STEPS = 4  # micro-batches per optimizer step" in new
    assert "    for step, (x, y) in enumerate(loader):" in new
    assert "        sync_now = (step + 1) % ACCUM_STEPS == 0 or step + 1 == len(loader)" in new
    assert "        loss = criterion(pred, y) / ACCUM_STEPS" in new
    assert "        if sync_now:\n            optimizer.step()\n            optimizer.zero_grad()  # 梯度清零\n" in new
    assert "no_sync" not in new and "import contextlib" not in new  # no DDP in train()
    # idempotent: the rewritten loop is recognised as already accumulating
    why: list[str] = []
    assert accumulate_gradients(new, line_of(new, "loss.backward()"), why=why) is None
    assert "already" in why[0]


def test_accumulated_update_equals_big_batch_update():
    new, _ = _fixed("loss.backward()", "    for x, y in loader:", "        last = loss.item()", accum_steps=4)
    ref_ns, fix_ns = load(SCRIPT, "reg_ref"), load(new, "reg_fix")
    torch.manual_seed(0)
    ref_model = ref_ns["Regressor"]()
    fix_model = fix_ns["Regressor"]()
    fix_model.load_state_dict(ref_model.state_dict())
    ref_opt = CountingSGD(ref_model.parameters(), lr=0.1)
    fix_opt = CountingSGD(fix_model.parameters(), lr=0.1)
    ref_ns["train"](ref_model, ref_ns["make_loader"](8, 8), ref_opt, nn.MSELoss())  # one batch of 8
    fix_ns["train"](fix_model, fix_ns["make_loader"](8, 2), fix_opt, nn.MSELoss())  # 4 micro-batches of 2
    assert ref_opt.steps == 1 and fix_opt.steps == 1
    for p0, p1 in zip(ref_model.parameters(), fix_model.parameters()):
        assert torch.allclose(p0, p1, atol=1e-6)
    # 6 micro-batches: one boundary step plus the leftover step at the end of the epoch
    fix_opt.steps = 0
    fix_ns["train"](fix_model, fix_ns["make_loader"](12, 2), fix_opt, nn.MSELoss())
    assert fix_opt.steps == 2


def test_amp_loop_moves_unscale_clip_step_update_scheduler_under_boundary():
    new, res = _fixed("scaler.scale(loss).backward()", "        for i, (x, y) in enumerate(loader):", "            optimizer.zero_grad(set_to_none=True)")
    assert "            sync_now = (i + 1) % ACCUM_STEPS == 0 or i + 1 == len(loader)" in new
    assert "                loss = criterion(model(x), y) / ACCUM_STEPS" in new
    block = (
        "            scaler.scale(loss).backward()\n"
        "            if sync_now:\n"
        "                scaler.unscale_(optimizer)\n"
        "                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=100.0)\n"
        "                scaler.step(optimizer)\n"
        "                scaler.update()\n"
        "                scheduler.step()\n"
        "                optimizer.zero_grad(set_to_none=True)\n"
    )
    assert block in new
    assert any("AMP" in n for n in res.notes)
    # run it: 8 micro-batches of 2 vs 2 steps over batches of 8 (same samples, same order)
    ref_ns, fix_ns = load(SCRIPT, "amp_ref"), load(new, "amp_fix")
    torch.manual_seed(0)
    models = [ref_ns["Regressor"](), fix_ns["Regressor"]()]
    models[1].load_state_dict(models[0].state_dict())
    runs = ((ref_ns, models[0], 8), (fix_ns, models[1], 2))
    for ns, model, bs in runs:
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
        ns["train_amp"](model, ns["make_loader"](16, bs), opt, sched, scaler, nn.MSELoss())
        assert sched.last_epoch == 2  # the scheduler counted optimizer steps, not micro-batches
    for p0, p1 in zip(*(m.parameters() for m in models)):
        assert torch.allclose(p0, p1, atol=1e-5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gloo_group():
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(_free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_ddp_loop_gets_no_sync_and_matches_big_batch(gloo_group):
    res = accumulate_gradients(SCRIPT, line_of(SCRIPT, "loss = criterion(model(x), y) * 1.0"))
    loop = set(range(line_of(SCRIPT, "    for it in range(steps):"), line_of(SCRIPT, "    return model")))
    new = check_fix(SCRIPT, res, allowed_lines=loop, safe=False)
    assert "import contextlib\n" in new and new.index("import argparse") < new.index("import contextlib") < new.index("import torch\n")
    assert "        sync_now = (it + 1) % ACCUM_STEPS == 0 or it + 1 == steps" in new
    assert (
        "        with (contextlib.nullcontext() if sync_now else model.no_sync()):\n"
        "            loss = (criterion(model(x), y) * 1.0 + 0.0) / ACCUM_STEPS\n"
        "            loss.backward()\n"
    ) in new
    assert "        x, y = next(data)\n        with" in new  # data loading stays outside no_sync
    assert "model.no_sync()" in res.title
    ref_ns, fix_ns = load(SCRIPT, "ddp_ref"), load(new, "ddp_fix")
    torch.manual_seed(0)
    a, b = ref_ns["Regressor"](), fix_ns["Regressor"]()
    b.load_state_dict(a.state_dict())
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.1)
    ref_ns["train_ddp"](a, ref_ns["make_loader"](16, 8), opt_a, nn.MSELoss(), 2)
    fix_ns["train_ddp"](b, fix_ns["make_loader"](16, 2), opt_b, nn.MSELoss(), 8)
    for p0, p1 in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p0, p1, atol=1e-6)


def test_ddp_passed_as_parameter_is_detected():
    src = '''import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def fit(net, batches, opt):
    for x, y in batches:
        out = net(x)
        loss = ((out - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


def main(model, batches):
    model = DDP(model)
    opt = torch.optim.AdamW(model.parameters())
    fit(model, batches, opt)
'''
    res = accumulate_gradients(src, line_of(src, "loss.backward()"))
    new = check_fix(src, res, allowed_lines=set(range(6, 12)))
    assert "with (contextlib.nullcontext() if sync_now else net.no_sync()):" in new
    assert "loss = ((out - y) ** 2).mean() / ACCUM_STEPS" in new
    assert "sync_now = (step + 1) % ACCUM_STEPS == 0\n" in new  # len(batches) unknown: no guard
    assert any("leftover" in n for n in res.notes)


@pytest.mark.parametrize(
    ("loop", "reason"),
    [
        ("for x in data:\n        loss = f(x)\n        loss.backward()\n        loss.backward()\n        opt.step()\n        opt.zero_grad()", "exactly one"),
        ("for x in data:\n        loss = f(x)\n        loss.backward()\n        if x:\n            opt.step()\n        opt.zero_grad()", "nested"),
        ("while True:\n        loss = f(1)\n        loss.backward()\n        opt.step()\n        opt.zero_grad()", "for-loop"),
        ("for x in data:\n        loss = f(x)\n        loss.backward()\n        thing.step()\n        opt.zero_grad()", "unrecognised .step()"),
        ("for i, x in enumerate(data, 1):\n        loss = f(x)\n        loss.backward()\n        opt.step()\n        opt.zero_grad()", "start"),
        ("for x in data:\n        loss = f(x)\n        loss.backward()\n        opt.step()\n        log(x)\n        sched.step()\n        opt.zero_grad()", "between"),
    ],
)
def test_unrecognised_loops_are_refused_with_reason(loop, reason):
    src = f"import torch\n\n\ndef run(data, f, opt, sched, thing, log):\n    opt = torch.optim.SGD([], lr=1)\n    {loop}\n"
    why: list[str] = []
    assert accumulate_gradients(src, line_of(src, "backward()"), why=why) is None
    assert any(reason in w for w in why), why


def test_loss_not_assigned_in_loop_divides_at_backward():
    src = '''def run(model, batches, optimizer):
    for batch in batches:
        model(batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
'''
    why: list[str] = []
    assert accumulate_gradients(src, 3, why=why) is None  # backward on an expression, not a name
    src2 = src.replace("        model(batch).loss.backward()", "        loss = model(batch).loss\n        loss += 0\n        loss.backward()")
    res = accumulate_gradients(src2, line_of(src2, "loss.backward()"), accum_steps=8)
    new = check_fix(src2, res, allowed_lines=set(range(2, 8)))
    assert "(loss / ACCUM_STEPS).backward()" in new and "ACCUM_STEPS = 8" in new
