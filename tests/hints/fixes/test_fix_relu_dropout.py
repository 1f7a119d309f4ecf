"""NPU101 fixes on realistic model code: edits, idempotence, and torch numerics before/after."""

from __future__ import annotations

import pytest
import torch

from fixkit import check_fix, line_of, lines_with, load, model_source
from msprof_lsp.hints.fixes import relu_dropout as rd

MLP = model_source("mlp_classifier.py")
CNN = model_source("conv_net.py")


def _apply_all(text: str, fn, needles: list[str], **opts) -> str:
    """Apply ``fn`` at the line of each needle in turn (re-locating lines in the new text)."""
    for needle in needles:
        res = fn(text, line_of(text, needle), **opts)
        text = check_fix(text, res, allowed_lines=lines_with(text, needle) | _pair_lines(text, needle))
    return text


def _pair_lines(text: str, needle: str) -> set[int]:
    """The statement after a `y = F.relu(y)` line belongs to the same consecutive pair."""
    n = line_of(text, needle)
    return {n, n + 1}


# -- compile the pair -------------------------------------------------------------------------


def test_nested_module_pair_rewrites_one_line_and_adds_helper_once():
    ln = line_of(MLP, "h = self.drop(self.act(")
    res = rd.compile_pair(MLP, ln, backend="npu")
    new = check_fix(MLP, res, allowed_lines={ln})
    assert "h = _relu_dropout(self.fc1(x), self.drop.p, self.training)  # first block" in new
    # the "npu" backend is looked up on the first call, not at import, and only with torchair
    assert new.count("def _relu_dropout_fn():") == 1 and new.count("def _relu_dropout(x, p, training):") == 1
    assert 'return torch.compile(pair, backend="npu")' in new and "import torchair" in new
    assert "\nimport torch_npu" not in new and "    import torch_npu" not in new and "@functools.cache" in new and "import functools\n" in new
    assert "torchair" in " ".join(res.notes) and "where torchair can fuse" in res.title
    # the helper sits after the imports and before the class
    assert line_of(new, "import torch.nn.functional as F") < line_of(new, "def _relu_dropout_fn") < line_of(new, "class MLP")
    # second application on the rewritten line: nothing left to do
    assert rd.compile_pair(new, line_of(new, "h = _relu_dropout"), backend="npu") is None
    # a second site reuses the helper
    again = rd.compile_pair(new, line_of(new, "z = F.dropout(F.relu("), backend="npu")
    new2 = check_fix(new, again, allowed_lines={line_of(new, "z = F.dropout(F.relu(")})
    assert new2.count("def _relu_dropout_fn():") == 1


def test_consecutive_statements_become_one():
    ln = line_of(MLP, "y = F.relu(y)")
    why: list[str] = []
    res = rd.compile_pair(MLP, ln + 1, why=why)  # anchored on the dropout line
    new = check_fix(MLP, res, allowed_lines={ln, ln + 1})
    assert "y = _relu_dropout(y, self.p, self.training)" in new
    assert "y = F.relu(y)" not in new
    assert len(new.splitlines()) == len(MLP.splitlines()) + 2 - 1  # helper + blank line in, one line out
    assert rd.compile_pair(new, line_of(new, "y = _relu_dropout(y")) is None


def test_sequential_pair_keeps_state_dict_keys():
    ln = line_of(MLP, "nn.Dropout(0.2)")
    res = rd.compile_pair(MLP, ln)
    new = check_fix(MLP, res, allowed_lines={ln - 1, ln})
    assert "ReLUDropout(0.2)," in new and "nn.Identity()," in new
    assert new.count("class ReLUDropout(nn.Module):") == 1
    assert any("state_dict keys stay the same" in n for n in res.notes)
    torch.manual_seed(0)
    before = load(MLP, "mlp_before")["MLP"]()
    after = load(new, "mlp_after")["MLP"]()
    assert list(before.state_dict()) == list(after.state_dict())
    # anchored on the forward call of that Sequential: same construct, already rewritten
    assert rd.compile_pair(new, line_of(new, "return self.head(z)")) is None


def test_all_sites_compiled_with_inductor_match_eval_outputs():
    """The real thing: torch.compile(backend="inductor") on CPU, eval mode (dropout = identity)."""
    new = MLP
    for needle in ("h = self.drop(self.act(", "y = F.relu(y)", "z = F.dropout(F.relu(", "nn.Dropout(0.2)"):
        res = rd.compile_pair(new, line_of(new, needle), backend="inductor")
        assert res is not None, needle
        new = res.new_source
    assert "F.relu" not in new.split("class MLP")[1] and "nn.Dropout(0.2)" not in new
    torch.manual_seed(0)
    ref = load(MLP, "mlp_ref")["MLP"]()
    fixed_ns = load(new, "mlp_fixed")
    fixed = fixed_ns["MLP"]()
    fixed.load_state_dict(ref.state_dict(), strict=True)
    ref.eval()
    fixed.eval()
    x = torch.randn(8, 32)
    with torch.no_grad():
        assert torch.allclose(ref(x), fixed(x), atol=1e-6)
    # train mode: same distribution, different random stream; check the kept-unit scaling instead
    fixed.train()
    y = fixed_ns["_relu_dropout"](torch.ones(20000), 0.25, True)
    kept = y[y > 0]
    assert torch.allclose(kept, torch.full_like(kept, 1 / 0.75))
    assert abs(kept.numel() / 20000 - 0.75) < 0.02


@pytest.mark.parametrize("npu", ["absent", "stand-in"])
def test_npu_form_imports_everywhere_and_compiles_only_where_the_backend_can_fuse(npu):
    """backend="npu": the module imports and runs on a CPU without torch_npu (no backend looked
    up at import), and with torch_npu but no torchair the eager pair runs (nothing claimed)."""
    import npu_standin

    new = MLP
    for needle in ("h = self.drop(self.act(", "z = F.dropout(F.relu("):
        new = rd.compile_pair(new, line_of(new, needle), backend="npu").new_source
    torch.manual_seed(0)
    ref = load(MLP, "mlp_ref_npu")["MLP"]()
    with npu_standin.importable() if npu == "stand-in" else _no_torch_npu():
        if npu == "stand-in":
            import torch_npu  # noqa: F401  (as the script does: registers the "npu" backend)
            assert "npu" in torch.compiler.list_backends(exclude_tags=())
        ns = load(new, f"mlp_fixed_{npu}")
        fixed = ns["MLP"]()
        fixed.load_state_dict(ref.state_dict(), strict=True)
        ref.eval()
        fixed.eval()
        x = torch.randn(8, 32)
        with torch.no_grad():
            assert torch.equal(ref(x), fixed(x))
        assert ns["_relu_dropout_fn"]().__name__ == "pair"  # not compiled: no torchair here


@pytest.mark.parametrize("order", ["sequential first", "call first"])
def test_npu_fixes_applied_together_add_the_helper_once(order):
    """Fix all: each fix computed on the same text adds the helper (one also the ReLUDropout class
    after it); applied together the helper is written once, the class once."""
    from msprof_lsp.hints.fixes import apply_fixes

    fixes = [rd.compile_pair(MLP, line_of(MLP, needle), backend="npu").fix
             for needle in ("nn.Dropout(0.2)", "h = self.drop(self.act(")]
    done = apply_fixes(MLP, fixes if order == "sequential first" else fixes[::-1])
    assert len(done.applied) == 2 and not done.declined
    new = done.source
    assert new.count("def _relu_dropout_fn():") == 1 and new.count("class ReLUDropout(") == 1
    assert new.count("import functools") == 1
    compile(new, "mlp.py", "exec")


def _no_torch_npu():
    import contextlib
    import sys

    @contextlib.contextmanager
    def blocked():
        saved = sys.modules.get("torch_npu")
        sys.modules["torch_npu"] = None  # type: ignore[assignment]  # the import raises ImportError
        try:
            yield
        finally:
            sys.modules.pop("torch_npu", None)
            if saved is not None:
                sys.modules["torch_npu"] = saved

    return blocked()


def test_inplace_relu_input_blocks_compiling():
    src = '''import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        y = F.dropout(F.relu(h, inplace=True), p=0.1, training=self.training)
        return y + h
'''
    why: list[str] = []
    assert rd.compile_pair(src, line_of(src, "F.dropout(F.relu"), why=why) is None
    assert "in-place" in why[0]


def test_no_pair_gives_reason():
    why: list[str] = []
    assert rd.compile_pair(MLP, line_of(MLP, "self.fc1 = nn.Linear"), why=why) is None
    assert why and "no recognised" in why[-1]
    assert rd.compile_pair("def broken(:\n", 1, why=why) is None and "parse" in why[-1]
    with pytest.raises(ValueError):
        rd.compile_pair(MLP, 1, backend="tensorrt")


# -- in-place ReLU -------------------------------------------------------------------------------


def test_inplace_on_module_functional_and_sequential_sites():
    new = MLP
    for needle in ("self.act = nn.ReLU(", "y = F.relu(y", "z = F.dropout(F.relu(y + h", "return self.head(z)"):
        ln = line_of(new, needle)
        res = rd.inplace_relu(new, ln)
        # edits land on the ReLU itself: the module constructor / the call line / the Sequential element
        allowed = {ln} | lines_with(new, "self.act = nn.ReLU(", "            nn.ReLU(")
        new = check_fix(new, res, allowed_lines=allowed, safe=False)
        assert rd.inplace_relu(new, line_of(new, needle)) is None  # idempotent
    assert "self.act = nn.ReLU(inplace=True)" in new
    assert "y = F.relu(y, inplace=True)" in new
    assert "F.relu(y + h, inplace=True)" in new
    assert "            nn.ReLU(inplace=True)," in new

    # train mode with the same dropout masks: identical outputs and gradients
    torch.manual_seed(0)
    ref = load(MLP, "mlp_ref2")["MLP"]()
    fixed = load(new, "mlp_inplace")["MLP"]()
    fixed.load_state_dict(ref.state_dict())
    x = torch.randn(16, 32)
    outs = []
    for m in (ref, fixed):
        m.train()
        m.zero_grad()
        torch.manual_seed(123)
        out = m(x)
        out.square().mean().backward()
        outs.append((out.detach(), [p.grad.clone() for p in m.parameters()]))
    assert torch.allclose(outs[0][0], outs[1][0])
    for g0, g1 in zip(outs[0][1], outs[1][1]):
        assert torch.allclose(g0, g1)


def test_inplace_cnn_stem_and_block_but_not_after_flatten():
    new = CNN
    for needle in ("x = self.stem(x)", "out = F.relu(out)", "return F.relu(out + x)"):
        res = rd.inplace_relu(new, line_of(new, needle))
        assert res is not None, needle
        new = res.new_source
    why: list[str] = []
    assert rd.inplace_relu(new, line_of(new, "return self.head(x)"), why=why) is None
    assert any("view" in w for w in why)
    assert "nn.Flatten(),\n            nn.ReLU(),  # after a view" in new
    torch.manual_seed(0)
    ref = load(CNN, "cnn_ref")["ConvNet"]()
    fixed = load(new, "cnn_fixed")["ConvNet"]()
    fixed.load_state_dict(ref.state_dict())
    x = torch.randn(4, 3, 16, 16)
    ref.train()
    fixed.train()
    a, b = ref(x), fixed(x)
    a.sum().backward()
    b.sum().backward()
    assert torch.allclose(a, b, atol=1e-6)
    for p0, p1 in zip(ref.parameters(), fixed.parameters()):
        assert torch.allclose(p0.grad, p1.grad, atol=1e-5)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("h = self.fc(x)\n        out = F.relu(h)\n        return out + h", "read again"),
        ("return F.relu(x)", "parameter"),
        ("h = self.fc(x)\n        skip = h\n        return F.relu(h) + skip", "read before"),
        ("h = torch.sigmoid(self.fc(x))\n        return F.relu(h)", "alias"),
        ("h = self.fc(x)\n        for _ in range(2):\n            h = F.relu(h)\n        return h", "loop"),
        ("h = x.view(-1, 4)\n        return F.relu(h)", "alias"),
    ],
)
def test_inplace_refused_when_input_may_be_read(body, reason):
    src = f'''import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        {body}
'''
    why: list[str] = []
    assert rd.inplace_relu(src, line_of(src, "F.relu("), why=why) is None
    assert any(reason in w for w in why), why


def test_inplace_module_used_on_parameter_is_refused():
    src = '''import torch.nn as nn


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(x)
'''
    assert rd.inplace_relu(src, line_of(src, "self.act = nn.ReLU()")) is None


# -- dropout with p = 0 ------------------------------------------------------------------------


def test_zero_dropout_removed_safely():
    ln = line_of(CNN, "x = F.dropout(x, p=0.0")
    res = rd.drop_zero_dropout(CNN, ln)
    new = check_fix(CNN, res, allowed_lines={ln}, safe=True)
    assert "F.dropout" not in new
    assert len(new.splitlines()) == len(CNN.splitlines()) - 1
    ln2 = line_of(new, "nn.Dropout(0.0)")
    res2 = rd.drop_zero_dropout(new, ln2)
    new2 = check_fix(new, res2, allowed_lines={ln2}, safe=True)
    assert "            nn.Identity(),\n" in new2
    assert rd.drop_zero_dropout(new2, ln2) is None
    torch.manual_seed(0)
    ref = load(CNN, "cnn_ref_p0")["ConvNet"]()
    fixed = load(new2, "cnn_p0")["ConvNet"]()
    fixed.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(2, 3, 16, 16)
    ref.train()
    fixed.train()
    assert torch.allclose(ref(x), fixed(x), atol=1e-6)


def test_nonzero_dropout_is_not_removed():
    why: list[str] = []
    assert rd.drop_zero_dropout(MLP, line_of(MLP, "self.drop = nn.Dropout(p)"), why=why) is None
    inline = "import torch.nn.functional as F\n\ndef f(h):\n    return F.dropout(h, 0.)  # 关闭\n"
    res = rd.drop_zero_dropout(inline, 4)
    assert check_fix(inline, res, allowed_lines={4}).endswith("    return h  # 关闭\n")


def test_compile_backend_setting():
    assert rd.compile_backend("auto", "ascend") == "npu"
    assert rd.compile_backend("auto", "cuda") == "inductor" == rd.compile_backend("auto", "cpu")
    assert rd.compile_backend("inductor", "ascend") == "inductor"
    with pytest.raises(ValueError):
        rd.compile_backend("tvm", "cpu")
