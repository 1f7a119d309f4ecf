"""NPU201 AI-CPU fallbacks, NPU220/NPU221 fused optimizer and clipping, NPU250 eval()."""

from __future__ import annotations

import inspect

import pytest
import torch

import npu_standin
from fixkit import check_fix, line_of, load, model_source
from msprof_lsp.hints.fixes import aicpu, inference, optimizer

ENTRY = model_source("ascend_finetune.py")

MODEL_CODE = '''import torch
from torch import nn


class Scorer(nn.Module):
    """打分器: scores with a float64 reduction and a masked fill."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, idx_src: int = 3) -> torch.Tensor:
        h = self.proj(x)
        total = h.double().sum(-1)  # 双精度
        h[h < 0] = 0.0
        perm = torch.randperm(idx_src, generator=torch.Generator().manual_seed(0))
        picked = h[perm]
        return picked.sum() + total.to(h.dtype).sum()
'''


def _run(text: str, name: str, x: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(0)
    model = load(text, name)["Scorer"]()
    return model(x)


def test_aicpu_fixes_apply_and_keep_results():
    x = torch.randn(5, 4)
    ref = _run(MODEL_CODE, "aicpu_ref", x)
    new = MODEL_CODE
    for fn, needle in ((aicpu.double_to_float, "h.double()"), (aicpu.masked_fill, "h[h < 0] = 0.0"), (aicpu.index_select, "picked = h[perm]")):
        ln = line_of(new, needle)
        res = fn(new, ln)
        new = check_fix(new, res, allowed_lines={ln}, safe=False)
        assert fn(new, ln) is None  # idempotent
    assert "total = h.float().sum(-1)  # 双精度" in new
    assert "h.masked_fill_(h < 0, 0.0)" in new
    assert "picked = torch.index_select(h, 0, perm)" in new
    assert torch.allclose(_run(new, "aicpu_new", x), ref, atol=1e-5)


def test_double_to_float_edits_every_float64_site_of_the_function():
    """The accumulator too: one float64 operand left keeps the Add on the AI CPU. Both anchors (the
    stack form's op line, the no-stack form's first match) give the same edit; other functions
    keep theirs."""
    src = ("import torch\n\n\ndef stats(xs):\n    total = torch.zeros((), dtype=torch.float64)\n    for x in xs:\n"
           "        total = total + x.double().sum()\n    return total\n\n\ndef other(x):\n    return x.double()\n")
    at_op, at_acc = line_of(src, "total = total + x.double()"), line_of(src, "total = torch.zeros(")
    res = aicpu.double_to_float(src, at_op)
    new = check_fix(src, res, allowed_lines={at_op, at_acc}, safe=False)
    assert "total = torch.zeros((), dtype=torch.float32)" in new and "total = total + x.float().sum()" in new
    assert new.endswith("    return x.double()\n") and any("2 lines" in n for n in res.notes)
    assert aicpu.double_to_float(src, at_acc).new_source == new
    xs = [torch.randn(3) for _ in range(2)]
    assert load(new, "acc_new")["stats"](xs).dtype == torch.float32


def test_float64_dtype_attribute_renamed():
    src = "import torch\n\nbuf = torch.zeros(3, dtype=torch.float64)  # 统计\n"
    new = check_fix(src, aicpu.double_to_float(src, 3), allowed_lines={3})
    assert new == "import torch\n\nbuf = torch.zeros(3, dtype=torch.float32)  # 统计\n"


@pytest.mark.parametrize(
    ("stmt", "reason"),
    [("t[idx] = 0", "boolean"), ("t[t > 0] = other", "scalar"), ("t[1:3] = 0", "name[mask]")],
)
def test_masked_fill_refusals(stmt, reason):
    src = f"def f(t, idx, other):\n    {stmt}\n"
    why: list[str] = []
    assert aicpu.masked_fill(src, 2, why=why) is None
    assert any(reason in w for w in why), why


def test_index_select_needs_a_visible_index_tensor():
    src = "import torch\n\ndef f(t, i):\n    return t[i]\n"
    why: list[str] = []
    assert aicpu.index_select(src, 4, why=why) is None and "index tensor" in why[0]


# -- NPU220 / NPU221 -------------------------------------------------------------------------------


def test_positional_orders_match_torch():
    """NpuFused<Name>'s parameters are torch.optim.<Name>'s leading positional ones, in order: the
    fix keeps a call's positional arguments as they are (the stand-in mirrors torch_npu's)."""
    for name, order in optimizer.NPU_FUSED.items():
        params = list(inspect.signature(getattr(torch.optim, name).__init__).parameters)[2:]
        assert tuple(params[: len(order)]) == order, name
        standin = getattr(npu_standin, f"NpuFused{name}", None)
        if standin is not None:
            assert tuple(inspect.signature(standin.__init__).parameters)[2:] == order, name
    for name in optimizer.FUSED_CAPABLE:
        assert "fused" in inspect.signature(getattr(torch.optim, name).__init__).parameters
    assert inspect.signature(torch.optim.SGD.__init__).parameters["lr"].default == 0.001


def test_fused_true_added_and_same_params_after_steps():
    ln = line_of(ENTRY, "optimizer = torch.optim.AdamW(")
    res = optimizer.fused_optimizer(ENTRY, ln)
    new = check_fix(ENTRY, res, allowed_lines={ln}, safe=False)
    assert "torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05, fused=True)" in new
    assert optimizer.fused_optimizer(new, ln) is None
    # the same construction, run on CPU (fused AdamW has a CPU kernel in torch 2.13)
    stmt = new.splitlines()[ln - 1].strip().replace("args.lr", "0.01")
    torch.manual_seed(0)
    a = torch.nn.Linear(8, 3)
    b = torch.nn.Linear(8, 3)
    b.load_state_dict(a.state_dict())
    opt_a = torch.optim.AdamW(a.parameters(), lr=0.01, weight_decay=0.05)
    ns = {"torch": torch, "model": b}
    exec(stmt, ns)  # noqa: S102 - the fixed statement itself
    opt_b = ns["optimizer"]
    assert opt_b.defaults["fused"] is True
    x = torch.randn(16, 8)
    for _ in range(3):
        for m, o in ((a, opt_a), (b, opt_b)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=1e-6)


def test_fused_refused_with_foreach():
    src = "import torch\nopt = torch.optim.Adam([], foreach=True)\n"
    why: list[str] = []
    assert optimizer.fused_optimizer(src, 2, why=why) is None and "foreach" in why[0]
    assert optimizer.fused_optimizer("import torch\nopt = torch.optim.RMSprop([])\n", 2) is None


def test_npu_fused_optimizer_and_fused_clip_run_on_the_stand_in():
    ln = line_of(ENTRY, "optimizer = torch.optim.AdamW(")
    res = optimizer.npu_fused_optimizer(ENTRY, ln)
    new = check_fix(ENTRY, res, allowed_lines={ln}, safe=False)
    assert "optimizer = torch_npu.optim.NpuFusedAdamW(model.parameters(), lr=args.lr, weight_decay=0.05)" in new
    assert any("bf16" in n for n in res.notes)
    cl = line_of(new, "clip_grad_norm_(")
    res2 = optimizer.fused_grad_clip(new, cl)
    new2 = check_fix(new, res2, allowed_lines={cl}, safe=False)
    assert "        optimizer.clip_grad_norm_fused_(1.0)\n" in new2
    stub = npu_standin.make()
    for text, name in ((ENTRY, "opt_ref"), (new2, "opt_fused")):
        body = text.replace("torch.npu.synchronize()", "pass").replace("torch.npu.empty_cache()", "pass")
        ns = load(body, name, torch_npu=stub)
        torch.manual_seed(0)
        model = ns["build_model"]()
        args = type("A", (), {"batch_size": 64, "lr": 1e-3})()
        torch.manual_seed(1)
        ns["train"](args, model, torch.device("cpu"))
        if name == "opt_ref":
            ref = [p.detach().clone() for p in model.parameters()]
        else:
            for p, q in zip(ref, model.parameters()):
                assert torch.allclose(p, q, atol=1e-6)


def test_npu_fused_keeps_positional_arguments_and_refuses_torch_only_ones():
    src = "import torch\nimport torch_npu\nopt = torch.optim.AdamW(params, 1e-3, (0.9, 0.99))\n"
    new = check_fix(src, optimizer.npu_fused_optimizer(src, 3), allowed_lines={3})
    assert "opt = torch_npu.optim.NpuFusedAdamW(params, 1e-3, (0.9, 0.99))" in new
    # Adadelta's sixth positional parameter is torch's foreach, which NpuFusedAdadelta lacks
    why: list[str] = []
    src = "import torch\nopt = torch.optim.Adadelta(params, 1.0, 0.9, 1e-6, 0, None)\n"
    assert optimizer.npu_fused_optimizer(src, 2, why=why) is None and "line up" in why[0]


def test_npu_fused_sgd_gets_explicit_lr_and_refuses_unknown_args():
    src = "import torch\nimport torch_npu\nopt = torch.optim.SGD(params, momentum=0.9)\n"
    new = check_fix(src, optimizer.npu_fused_optimizer(src, 3), allowed_lines={3})
    assert "opt = torch_npu.optim.NpuFusedSGD(params, momentum=0.9, lr=0.001)" in new
    why: list[str] = []
    assert optimizer.npu_fused_optimizer("import torch\nopt = torch.optim.AdamW(p, maximize=True)\n", 2, why=why) is None
    assert "maximize" in why[0]


def test_clip_gets_foreach_without_npu_optimizer():
    ln = line_of(ENTRY, "clip_grad_norm_(")
    res = optimizer.fused_grad_clip(ENTRY, ln)
    new = check_fix(ENTRY, res, allowed_lines={ln}, safe=False)
    assert "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)" in new
    assert optimizer.fused_grad_clip(new, ln) is None
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 4)
    m(torch.randn(3, 4)).sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    n1 = torch.nn.utils.clip_grad_norm_(m.parameters(), 0.1)
    clipped = [p.grad.clone() for p in m.parameters()]
    for p, g in zip(m.parameters(), grads):
        p.grad = g.clone()
    n2 = torch.nn.utils.clip_grad_norm_(m.parameters(), 0.1, foreach=True)
    assert torch.allclose(n1, n2)
    assert all(torch.allclose(a, p.grad) for a, p in zip(clipped, m.parameters()))


# -- NPU250 ---------------------------------------------------------------------------------------

INFER = '''import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 2))

    def forward(self, x):
        return self.net(x)


def predict(batches):
    torch.manual_seed(0)
    clf = Classifier()
    outputs = []
    # 推理循环
    for x in batches:
        outputs.append(clf(x).argmax(-1))
    return torch.cat(outputs)
'''


def test_eval_before_inference_loop_is_safe_and_deterministic():
    ln = line_of(INFER, "outputs.append(clf(x)")
    res = inference.eval_before_loop(INFER, ln)
    new = check_fix(INFER, res, allowed_lines=set(), safe=True)
    assert "    # 推理循环\n    clf.eval()\n    for x in batches:" in new
    assert inference.eval_before_loop(new, line_of(new, "outputs.append(clf(x)")) is None
    batches = [torch.randn(32, 6) for _ in range(3)]
    got = load(new, "infer_new")["predict"](batches)
    torch.manual_seed(0)
    ref_model = load(INFER, "infer_ref")["Classifier"]()
    ref_model.eval()
    assert torch.equal(got, torch.cat([ref_model(b).argmax(-1) for b in batches]))


def test_inference_mode_wrap_and_refusal_for_training_loops():
    ln = line_of(INFER, "outputs.append(clf(x)")
    res = inference.inference_mode(INFER, ln)
    new = check_fix(INFER, res, allowed_lines={ln - 1, ln}, safe=False)
    assert "    with torch.inference_mode():\n        for x in batches:\n            outputs.append(clf(x).argmax(-1))\n" in new
    ns = load(new, "infer_mode")
    seen: list[bool] = []

    class Recording(ns["Classifier"]):
        def forward(self, x):
            seen.append(torch.is_inference_mode_enabled())
            return super().forward(x)

    ns["Classifier"] = Recording
    ns["predict"]([torch.randn(4, 6), torch.randn(4, 6)])
    assert seen == [True, True]
    why: list[str] = []
    assert inference.eval_before_loop(ENTRY, line_of(ENTRY, "loss.backward()"), why=why) is None and "training" in why[0]
