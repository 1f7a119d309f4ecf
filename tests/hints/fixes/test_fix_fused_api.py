"""NPU210-NPU217 fused-API swaps on a tiny LLaMA-style block: exact recognition, no edit otherwise,
and the fixed block computing the same outputs (torch_npu APIs via the documented-semantics stand-in;
the CUDA/CPU variants with real torch)."""

from __future__ import annotations

import pytest
import torch

import npu_standin
from fixkit import check_fix, line_of, load, model_source
from msprof_lsp.hints.fixes import fused_api as fa

LLAMA = model_source("tiny_llama.py")

NPU_STEPS = [
    (fa.rms_norm, "return x * torch.rsqrt(", "torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]"),
    (fa.rotary_mul, "return q * cos + rotate_half(q) * sin", "return torch_npu.npu_rotary_mul(q, cos, sin)"),
    (fa.swiglu, "return self.w3(F.silu(a) * b)", "return self.w3(torch_npu.npu_swiglu(h, dim=-1))"),
    (fa.attention, "ctx = probs @ v", 'ctx = torch_npu.npu_fusion_attention(q, k, v, q.shape[1], "BNSD", atten_mask=causal, '
     "scale=1 / math.sqrt(self.head_dim), keep_prob=1 - (self.attn_drop.p if self.training else 0.0))[0]"),
    (fa.confusion_transpose, "ctx = ctx.permute(0, 2, 1, 3)", "ctx = torch_npu.npu_confusion_transpose(ctx, [0, 2, 1, 3], [b, s, d], True)"),
    (fa.add_layer_norm, "h = x + r", "y, _, _, h = torch_npu.npu_add_layer_norm(x, r, self.post_norm.weight, self.post_norm.bias, "
     "self.post_norm.eps, additional_output=True)"),
    (fa.scaled_masked_softmax, 'return F.softmax((x * scale).masked_fill(', "return torch_npu.npu_scaled_masked_softmax(x, mask, scale=scale)"),
]


def _inputs(seed: int = 0):
    torch.manual_seed(seed)
    x = torch.randn(2, 6, 32)
    causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    return x, causal


def _block_out(text: str, name: str, state=None, **stubs):
    ns = load(text, name, **stubs)
    torch.manual_seed(0)
    block = ns["Block"](ns["Config"]())
    if state is not None:
        block.load_state_dict(state, strict=True)
    block.eval()
    x, causal = _inputs()
    cos, sin = ns["rope_tables"](6, 8)
    with torch.no_grad():
        return block(x, cos, sin, causal), block.state_dict(), ns


GUARD = "try:\n    import torch_npu  # (the NPU path; None where torch_npu is not installed)\nexcept ImportError:\n    torch_npu = None\n"


def test_each_swap_edits_only_its_lines_and_is_idempotent():
    torch_line = LLAMA.splitlines().index("import torch") + 1
    at_import = {torch_line, torch_line + 1}
    for fn, needle, expected in NPU_STEPS:
        first = line_of(LLAMA, needle)
        res = fn(LLAMA, first)
        # multi-statement matches may also delete the statements they consumed right above
        span = {first} | (set(range(first - 4, first)) if fn is fa.attention else set()) | (
            {first - 1} if fn is fa.swiglu else set()) | ({first + 1} if fn is fa.add_layer_norm else set())
        new = check_fix(LLAMA, res, allowed_lines=span | at_import, safe=False)
        assert expected in new, (fn.__name__, new)
        # the file did not import torch_npu: the guarded import, never a bare one, after `import torch`
        assert new.count(GUARD) == 1 and new.index("import torch\n") < new.index(GUARD)
        # the fused call behind the test, the original code as the else branch
        assert "if torch_npu is not None:\n" in new and new.index("if torch_npu is not None:") < new.index(expected)
        assert LLAMA.splitlines()[first - 1].strip() in new[new.index(expected):]
        again = fn(new, line_of(new, expected.split("(")[0]))
        assert again is None, fn.__name__
        why: list[str] = []
        assert fn(new, line_of(new, needle), why=why) is None, fn.__name__  # the fallback is not fused again
        assert why and ("fallback" in why[-1] or "no " in why[-1]), (fn.__name__, why)


def test_a_plain_import_keeps_the_fused_call_unguarded():
    text = LLAMA.replace("import torch\n", "import torch\nimport torch_npu\n", 1)
    res = fa.rms_norm(text, line_of(text, "return x * torch.rsqrt("))
    new = check_fix(text, res, allowed_lines={line_of(text, "return x * torch.rsqrt(")}, safe=False)
    assert "is not None" not in new and new.count("import torch_npu") == 1


def test_all_npu_swaps_compute_the_same_block_output():
    ref, state, _ = _block_out(LLAMA, "llama_ref")
    new = LLAMA
    for fn, needle, _expected in NPU_STEPS:
        res = fn(new, line_of(new, needle))
        assert res is not None, fn.__name__
        new = res.new_source
    assert new.count("import torch_npu") == 1 and new.count(GUARD) == 1
    out, _, ns = _block_out(new, "llama_npu", state, torch_npu=npu_standin.make())
    assert torch.allclose(ref, out, atol=1e-5)
    x = torch.randn(2, 4, 8, 8)
    mask = torch.rand(8, 8) > 0.5
    mask[:, 0] = False
    ref_ns = load(LLAMA, "llama_ref2")
    assert torch.allclose(ns["scaled_scores"](x, mask, 0.5), ref_ns["scaled_scores"](x, mask, 0.5), atol=1e-6)
    # where torch_npu is not installed (None in sys.modules: the import raises ImportError) the
    # original code runs: the same output exactly
    out_cpu, _, ns_cpu = _block_out(new, "llama_cpu", state, torch_npu=None)
    assert ns_cpu["torch_npu"] is None and torch.equal(ref, out_cpu)


def test_cpu_backend_variants_run_with_torch():
    ref, state, _ = _block_out(LLAMA, "llama_ref3")
    res = fa.attention(LLAMA, line_of(LLAMA, "ctx = probs @ v"), backend="cpu")
    new = check_fix(LLAMA, res, allowed_lines=set(range(line_of(LLAMA, "ctx = probs @ v") - 4, line_of(LLAMA, "ctx = probs @ v") + 1)))
    assert (
        "ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=~(causal), "
        "dropout_p=self.attn_drop.p if self.training else 0.0, scale=1 / math.sqrt(self.head_dim))"
    ) in new
    assert "import torch_npu" not in new
    out, _, _ = _block_out(new, "llama_sdpa", state)
    assert torch.allclose(ref, out, atol=1e-5)
    g = fa.fast_gelu(new, line_of(new, "y = F.gelu("), backend="cpu")
    new2 = check_fix(new, g, allowed_lines={line_of(new, "y = F.gelu(")})
    assert 'y = F.gelu(self.gelu_proj(y), approximate="tanh")' in new2
    assert fa.fast_gelu(new2, line_of(new2, "y = F.gelu(")) is None
    out2, _, _ = _block_out(new2, "llama_gelu", state)
    assert torch.allclose(ref, out2, atol=1e-2) and not torch.equal(ref, out2)  # an approximation


def test_npu_gelu_swap_text():
    ln = line_of(LLAMA, "y = F.gelu(")
    new = check_fix(LLAMA, fa.fast_gelu(LLAMA, ln), allowed_lines={ln})
    assert "y = torch_npu.fast_gelu(self.gelu_proj(y))" in new


@pytest.mark.parametrize(
    ("fn", "code"),
    [
        (fa.rms_norm, "def f(x, w, eps):\n    return x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + eps) * w\n"),
        (fa.rms_norm, "def f(x, y, w, eps):\n    return x * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps) * w\n"),
        (fa.swiglu, "def f(x):\n    a, b = x.chunk(3, dim=-1)\n    return F.silu(a) * b\n"),
        (fa.swiglu, "def f(x):\n    b, a = x.chunk(2, dim=-1)\n    return F.silu(a) * b\n"),
        (fa.rotary_mul, "def rotate_half(x):\n    return x\n\ndef f(q, cos, sin):\n    return q * cos + rotate_half(q) * sin\n"),
        (fa.attention, "def f(q, k, v, bias):\n    return F.softmax(q @ k.transpose(-2, -1) + bias, dim=-1) @ v\n"),
        (fa.confusion_transpose, "def f(x, b, s):\n    return x.permute(0, 2, 1, 3).contiguous().view(b, s, -1)\n"),
        (fa.scaled_masked_softmax, "def f(x, m):\n    return F.softmax(x.masked_fill(m, -1e4), dim=-1)\n"),
    ],
)
def test_near_misses_get_no_edit(fn, code):
    src = "import torch\nimport torch.nn.functional as F\n\n\n" + code
    why: list[str] = []
    last = len(src.splitlines())
    assert fn(src, last, why=why) is None, fn.__name__
    assert why


def test_snippets_cover_every_code():
    assert sorted(fa.SNIPPETS) == [f"NPU21{i}" for i in range(8)]
    assert all("torch_npu." in s for s in fa.SNIPPETS.values())


# -- NPU213 with the mask filled in place -------------------------------------------------------------

IN_PLACE_FILL = '''\
import math

import torch
import torch.nn.functional as F


def attend(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores.masked_fill_(mask, float("-inf"))
    probs = F.softmax(scores, dim=-1)
    return probs @ v
'''
FILL_STMT = 'scores.masked_fill_(mask, float("-inf"))'


def _attend(text: str, name: str, **stubs):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    mask = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)  # True = masked out
    return load(text, name, **stubs)["attend"](q, k, v, mask)


@pytest.mark.parametrize("backend", ["ascend", "cpu"])
def test_the_in_place_fill_statement_is_fused_and_gone(backend):
    """``scores.masked_fill_(mask, -inf)`` as a statement of its own is read as the fill of the
    softmax's input: the same edit as ``scores = scores.masked_fill(...)``, the fill statement
    consumed with the other temporaries (a plain torch_npu import: no fallback branch keeps it)."""
    text = IN_PLACE_FILL.replace("import torch\n", "import torch\nimport torch_npu\n", 1) if backend == "ascend" else IN_PLACE_FILL
    last = line_of(text, "return probs @ v")
    new = check_fix(text, fa.attention(text, last, backend=backend), allowed_lines=set(range(last - 3, last + 1)), safe=False)
    assert FILL_STMT not in new and "masked_fill" not in new and "scores" not in new
    if backend == "ascend":
        assert 'return torch_npu.npu_fusion_attention(q, k, v, q.shape[1], "BNSD", atten_mask=mask, ' \
               "scale=1 / math.sqrt(q.shape[-1]))[0]" in new
        out = _attend(new, "attend_npu", torch_npu=npu_standin.make())
    else:
        assert "return F.scaled_dot_product_attention(q, k, v, attn_mask=~(mask), scale=1 / math.sqrt(q.shape[-1]))" in new
        out = _attend(new, "attend_sdpa")
    assert torch.allclose(_attend(IN_PLACE_FILL, "attend_ref"), out, atol=1e-5)


def test_the_in_place_fill_stays_as_the_path_without_torch_npu():
    last = line_of(IN_PLACE_FILL, "return probs @ v")
    new = check_fix(IN_PLACE_FILL, fa.attention(IN_PLACE_FILL, last), allowed_lines=set(range(1, last + 1)), safe=False)
    fused = new.index("torch_npu.npu_fusion_attention(")
    assert FILL_STMT not in new[:fused] and FILL_STMT in new[new.index("else:"):]
    ref = _attend(IN_PLACE_FILL, "attend_ref2")
    assert torch.equal(ref, _attend(new, "attend_cpu", torch_npu=None))  # the CPU path: the original code
    assert torch.allclose(ref, _attend(new, "attend_npu2", torch_npu=npu_standin.make()), atol=1e-5)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        # the masked scores read later: deleting the in-place fill would change what that read sees
        (("return probs @ v", "return probs @ v, scores.amax()"), "`scores` is read again after the softmax (line 11)"),
        # a read between: the fill is no longer right before the softmax's statement
        ((FILL_STMT, FILL_STMT + "\n    n = scores.isinf().sum()"), "no exactly recognised attention expression here"),
        ((FILL_STMT, "scores.masked_fill_(mask, -1e9)"), "is not `scores.masked_fill_(mask, -inf)`"),
    ],
)
def test_an_unsafe_in_place_fill_is_declined_with_its_reason(change, reason):
    text = IN_PLACE_FILL.replace(*change)
    why: list[str] = []
    assert fa.attention(text, line_of(text, "return probs @ v"), why=why) is None
    assert why and reason in why[-1], why


# -- NPU216 with the mask filled in place -------------------------------------------------------------

IN_PLACE_SOFTMAX = '''\
import torch
import torch.nn.functional as F


def probs(x, mask, scale):
    scores = x * scale
    scores.masked_fill_(mask, float("-inf"))
    return F.softmax(scores, dim=-1)
'''
SOFTMAX_FILL = 'scores.masked_fill_(mask, float("-inf"))'
FUSED_SOFTMAX = "return torch_npu.npu_scaled_masked_softmax(x, mask, scale=scale)"


def _probs(text: str, name: str, **stubs):
    torch.manual_seed(0)
    x = torch.randn(2, 4, 32, 32)
    mask = torch.rand(32, 32) > 0.5  # True = masked out, as masked_fill_ fills it
    mask[:, 0] = False  # no row fully masked (-inf everywhere is NaN in every form)
    return load(text, name, **stubs)["probs"](x, mask, 0.125)


def test_the_in_place_softmax_fill_is_fused_as_the_out_of_place_one():
    """``scores = x * scale; scores.masked_fill_(mask, -inf); F.softmax(scores, -1)`` is the
    out-of-place ``F.softmax((x * scale).masked_fill(mask, -inf), -1)`` spread over statements: the
    same fused call (the mask passed as it is, True = masked out), the fill and the scale's
    statements consumed (a plain torch_npu import: no fallback branch keeps them)."""
    text = IN_PLACE_SOFTMAX.replace("import torch\n", "import torch\nimport torch_npu\n", 1)
    last = line_of(text, "return F.softmax(scores, dim=-1)")
    new = check_fix(text, fa.scaled_masked_softmax(text, last), allowed_lines={last - 2, last - 1, last}, safe=False)
    assert FUSED_SOFTMAX in new and "masked_fill" not in new and "scores" not in new
    one = "def probs(x, mask, scale):\n    return F.softmax((x * scale).masked_fill(mask, float(\"-inf\")), dim=-1)\n"
    out_of_place = text[:text.index("def probs")] + one
    assert FUSED_SOFTMAX in fa.scaled_masked_softmax(out_of_place, line_of(out_of_place, "return F.softmax(")).new_source
    assert torch.allclose(_probs(IN_PLACE_SOFTMAX, "probs_ref"), _probs(new, "probs_npu", torch_npu=npu_standin.make()),
                          atol=1e-6)


def test_the_in_place_softmax_fill_stays_as_the_path_without_torch_npu():
    last = line_of(IN_PLACE_SOFTMAX, "return F.softmax(scores, dim=-1)")
    new = check_fix(IN_PLACE_SOFTMAX, fa.scaled_masked_softmax(IN_PLACE_SOFTMAX, last),
                    allowed_lines=set(range(1, last + 1)), safe=False)
    fused = new.index(FUSED_SOFTMAX)
    assert "masked_fill" not in new[:fused] and SOFTMAX_FILL in new[new.index("else:", fused):]
    ref = _probs(IN_PLACE_SOFTMAX, "probs_ref2")
    assert torch.equal(ref, _probs(new, "probs_cpu", torch_npu=None))  # the path without torch_npu: the original code
    assert torch.allclose(ref, _probs(new, "probs_npu2", torch_npu=npu_standin.make()), atol=1e-6)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        # NPU213's two refusals, the same words
        (("return F.softmax(scores, dim=-1)", "p = F.softmax(scores, dim=-1)\n    return p, scores.amax()"),
         "`scores` is read again after the softmax (line 9)"),
        ((SOFTMAX_FILL, "scores.masked_fill_(mask, -1e9)"), "is not `scores.masked_fill_(mask, -inf)`"),
        # scores not a new tensor of its own: a view of x (the fill changes x too) or a parameter
        (("scores = x * scale", "scores = x.view(x.shape)"), "`scores` is not assigned `x * s` (x a name) right before"),
        (("x, mask, scale):\n    scores = x * scale\n", "scores, mask, scale):\n"), "`scores` is not assigned `x * s`"),
    ],
)
def test_an_unsafe_in_place_softmax_fill_is_declined_with_its_reason(change, reason):
    text = IN_PLACE_SOFTMAX.replace(*change)
    assert text != IN_PLACE_SOFTMAX
    why: list[str] = []
    assert fa.scaled_masked_softmax(text, line_of(text, "F.softmax(scores, dim=-1)"), why=why) is None
    assert why and reason in why[-1], why
