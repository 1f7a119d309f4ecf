"""NPU216 fused-api-scaled-masked-softmax, a truth case: a generated torch_npu export (tests/synth)
of a script that writes the masked softmax out in the order the fused kernel computes it (scale,
masked_fill, softmax), beside softmax-first code the rule must leave alone. The finding lands on
the masked softmax's line with the time of its kernels (both passes, from the run description's
truth), its quick fix applies, and the fixed script runs with the torch_npu stand-in and where
torch_npu is not installed, giving the unfixed script's numbers on both paths. Written with the mask
filled in place (``scores = x * scale``, ``scores.masked_fill_(mask, -inf)``, the softmax of
``scores``, statements of their own) it gets the same edit, and declines, saying why in ``no_fix``,
where the masked scores are read again after the softmax.

The msprof CLI form (kernel types only) of a second script finds the boolean mask's fill
(``Muls-ViewCopy-MaskedFill-SoftmaxV2``) and a float mask added (``Muls-Add-SoftmaxV2``, the scale
on a line of its own) on the lines the stack form names, and not the softmax-first code; before
the eager kernel patterns it found neither (the graph-mode ``Cast-Mul-MaskedFill-SoftmaxV2-Cast``
only)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from seedkit import (
    CALL_IMPL, Analysed, L, Launch, Source, UserCall, applied, mask_train, span_text, step_run, train_loop, write_project,
)
from tests.synth import truth
from tests.synth.write_msprof import write_msprof_cli
from tests.synth.write_text import write_torch_npu_text

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.profile_query import host_tokens, pattern_regex
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.source.attribute import attribute
from msprof_lsp.mapping.source.workspace import SourceWorkspace
from msprof_lsp.mapping.spans import Confidence

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixes"))
import npu_standin  # noqa: E402  (tests/hints/fixes: the torch_npu stand-in and the model loader)
from fixkit import load  # noqa: E402


MODEL_PY = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


def masked_probs(x, mask, scale):
    return F.softmax((x * scale).masked_fill(mask, float("-inf")), dim=-1)


def weighted_probs(x, mask, w):
    p = F.softmax(x, dim=-1) * w
    return p.masked_fill_(mask, 0.0)


class Scorer(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.scale = dim**-0.5

    def forward(self, x, mask):
        h = self.proj(x)
        p = masked_probs(h, mask, self.scale)
        q = weighted_probs(h, mask, 0.5)
        return p + q
'''

TRAIN = mask_train("Scorer")
TRAIN_PY = TRAIN.text

MODEL = Source("model.py", MODEL_PY)
POSITIVE = 'return F.softmax((x * scale).masked_fill(mask, float("-inf")), dim=-1)'
# the same masked softmax with the mask filled in place: scale, fill and softmax statements of their own
IN_PLACE = ("scores = x * scale", 'scores.masked_fill_(mask, float("-inf"))', "return F.softmax(scores, dim=-1)")
IN_PLACE_MODEL = Source("model.py", MODEL_PY.replace(POSITIVE, "\n    ".join(IN_PLACE)))
X, MASK = (8, 4, 64, 64), (64, 64)


def _loop(needle: str) -> tuple:
    return train_loop(TRAIN, needle)


def _in(needle: str, func: str, call: str | None = None, model: Source = MODEL) -> tuple:
    """A line of ``func`` in model.py (called from Scorer.forward's ``call`` line) run by the loop's forward call."""
    outer = (model.frame(call, "Scorer.forward"),) if call else ()
    return (model.frame(needle, func), *outer, *CALL_IMPL, *_loop("loss = model(x, mask).sum()"))


def _mul(shape, dur_us: float) -> Launch:
    back = L.backward_of("aten::mul", "aclnnMuls", "Muls", shape, dur_us=dur_us, n_inputs=1)
    return L.elementwise("aten::mul", "aclnnMuls", "Muls", shape, dur_us=dur_us, scalar=True, autograd="MulBackward0",
                         bwd=back)


def _run(model: Source = MODEL):
    """``model``: MODEL, or the in-place form (IN_PLACE's model): its scale, fill and softmax each
    on a statement of their own."""
    lin = L.linear_nd(8 * 4 * 64, 64, 64, mm_us=20.0)

    def masked(needle: str, *launches: Launch, label: str = "masked") -> UserCall:
        return UserCall(_in(needle, "masked_probs", "p = masked_probs(h, mask, self.scale)", model), launches,
                        label=label)

    inplace = model is not MODEL
    mul, fill = _mul(X, 30.0), L.masked_fill(X, MASK, dur_us=35.0, inplace=inplace)
    # scale, mask, softmax: what npu_scaled_masked_softmax computes in one kernel
    scaled = [masked(IN_PLACE[0], mul), masked(IN_PLACE[1], fill, label="masked.fill"),
              masked(IN_PLACE[2], L.softmax(X, dur_us=40.0), label="masked.softmax")] \
        if inplace else [masked(POSITIVE, mul, fill, L.softmax(X, dur_us=40.0))]
    items = [
        UserCall(_in("h = self.proj(x)", "Scorer.forward", model=model), (Launch(lin.op, lin.frames),), label="proj"),
        *scaled,
        # softmax first, then a mul and a fill: no masked softmax (what the old, reversed patterns flagged)
        UserCall(_in("p = F.softmax(x, dim=-1) * w", "weighted_probs", "q = weighted_probs(h, mask, 0.5)", model),
                 (L.softmax(X, dur_us=40.0), _mul(X, 30.0)), label="weighted"),
        UserCall(_in("return p.masked_fill_(mask, 0.0)", "weighted_probs", "q = weighted_probs(h, mask, 0.5)", model),
                 (L.masked_fill(X, MASK, dur_us=35.0, inplace=True),), label="weighted.fill"),
        UserCall(_in("return p + q", "Scorer.forward", model=model),
                 (L.elementwise("aten::add", "aclnnAdd", "Add", X, dur_us=20.0, autograd="AddBackward0"),), label="sum"),
        UserCall(L.BACKWARD + _loop("loss.backward()"), (Launch(L.grad_seed().op),), label="backward", backward=True),
        UserCall(_loop("optimizer.step()"), (L.sgd_step(((64, 64), (64,)), kernel_us=2.0),), label="optimizer"),
    ]
    return step_run(items, steps=3)


def _analyse(run, tmp_path: Path, model: Source = MODEL) -> Analysed:
    root = write_torch_npu_text(run, tmp_path / "prof")
    proj = write_project(tmp_path, model.text, TRAIN_PY)
    profile = load_location(locate(root), use_cache=False)
    ws = SourceWorkspace([proj])
    return Analysed(root, proj, profile, RuleContext(profile, attribute(profile, ws), ws, RuleConfig()))


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    run = _run()
    return run, _analyse(run, tmp_path_factory.mktemp("masked_softmax"))


def test_fires_on_the_masked_softmax_line_with_its_kernels_time(analysed):
    run, a = analysed
    (f,) = a.run("NPU216", min_share=0.0)  # the softmax-first function makes none
    assert f.span.path.endswith("model.py") and span_text(f.span) == POSITIVE  # the statement
    assert f.confidence is Confidence.STACK
    assert f.evidence["sequence"] == "mul-masked_fill-softmax" and f.evidence["matched_in"] == "host ops"
    assert f.evidence["pattern"] == "(mul){0,1}-(masked_fill|masked_fill_)-softmax"
    t = truth(run)
    # the three ops' forward kernels (the fill's clone copy among them) and their backward kernels
    assert f.time_per_step_us == pytest.approx(t.per_step(t.kernel_ns_by_label["masked"]) / 1000)
    assert f.evidence["kernel_types"] == {"Muls": 6, "MaskedFill": 6, "SoftmaxV2": 3, "SoftmaxGrad": 3, "ViewCopy": 3}
    assert f.saving is not None and f.saving.known  # the kernels are recorded: the fused-API model replays them
    # the patterns before issue 23's fix (softmax first) flag only the softmax-first function
    toks = host_tokens(a.ctx)
    old = {toks.sequence(*m) for p in ("softmax-(mul){0,1}-(masked_fill_)", "softmax-(mul){0,1}-(add)")
           for m in toks.find(pattern_regex(p))}
    assert old == {"softmax-mul-masked_fill_"}


def test_the_fix_applies_and_the_fixed_script_runs_on_both_paths(analysed):
    import torch

    _, a = analysed
    (f,) = a.run("NPU216", min_share=0.0)
    path, new = applied(f, "npu_scaled_masked_softmax")  # parses
    assert path.endswith("model.py")
    assert "return torch_npu.npu_scaled_masked_softmax(x, mask, scale=scale)" in new
    assert "if torch_npu is not None:" in new and POSITIVE in new  # the original stays as the else branch
    ref = load(MODEL_PY, "scorer_ref")
    npu = load(new, "scorer_npu", torch_npu=npu_standin.make())
    cpu = load(new, "scorer_cpu", torch_npu=None)
    assert npu["torch_npu"] is not None and cpu["torch_npu"] is None
    torch.manual_seed(0)
    x = torch.randn(2, 4, 32, 64)
    mask = torch.rand(32, 64) > 0.5
    mask[:, 0] = False  # no row fully masked (-inf everywhere is NaN in both forms)
    outs = []
    for ns in (ref, npu, cpu):
        torch.manual_seed(1)
        model = ns["Scorer"]().eval()
        with torch.no_grad():
            outs.append(model(x, mask))
    assert torch.allclose(outs[0], outs[1], atol=1e-6)  # the stand-in computes the documented semantics
    assert torch.equal(outs[0], outs[2])  # without torch_npu: the original code


def _scorer_outputs(*texts_and_stubs) -> list:
    import torch

    torch.manual_seed(0)
    x = torch.randn(2, 4, 32, 64)
    mask = torch.rand(32, 64) > 0.5  # True = masked out
    mask[:, 0] = False  # no row fully masked (-inf everywhere is NaN in both forms)
    outs = []
    for i, (text, stubs) in enumerate(texts_and_stubs):
        torch.manual_seed(1)
        model = load(text, f"scorer_{i}", **stubs)["Scorer"]().eval()
        with torch.no_grad():
            outs.append(model(x, mask))
    return outs


def test_the_in_place_fill_gets_the_edit_and_the_fixed_script_runs_on_both_paths(tmp_path):
    """``scores = x * scale; scores.masked_fill_(mask, -inf); return F.softmax(scores, dim=-1)``: the
    finding (on the scale's line) gets the edit of the one-expression form, the three statements
    one fused call on the NPU path (the mask as it is: True = masked out), the original the else
    branch; both paths give the unfixed script's numbers."""
    import torch

    (f,) = _analyse(_run(IN_PLACE_MODEL), tmp_path, IN_PLACE_MODEL).run("NPU216", min_share=0.0)
    assert span_text(f.span) == IN_PLACE[0] and f.evidence["sequence"] == "mul-masked_fill_-softmax"
    _, new = applied(f, "npu_scaled_masked_softmax")  # parses
    fused = new.index("return torch_npu.npu_scaled_masked_softmax(x, mask, scale=scale)")
    assert "masked_fill_" not in new[new.index("def masked_probs"):fused]  # gone from the fused path
    assert "\n        ".join(IN_PLACE) in new[new.index("else:", fused):]  # the path without torch_npu
    ref, npu, cpu = _scorer_outputs((IN_PLACE_MODEL.text, {}), (new, {"torch_npu": npu_standin.make()}),
                                    (new, {"torch_npu": None}))
    assert torch.allclose(ref, npu, atol=1e-6) and torch.equal(ref, cpu)


def test_an_in_place_fill_read_again_gets_no_edit_and_says_why(tmp_path):
    """The masked scores read after the softmax: deleting the in-place fill would change what that
    read sees, so no edit, and the finding's ``no_fix`` says why (the same words as NPU213's)."""
    model = Source("model.py", IN_PLACE_MODEL.text.replace(IN_PLACE[2], IN_PLACE[2] + " * scores.isfinite()"))
    (f,) = _analyse(_run(model), tmp_path, model).run("NPU216", min_share=0.0)
    assert not f.fixes
    assert f"`scores` is read again after the softmax (line {model.line(IN_PLACE[2])})" in f.evidence["no_fix"]


# -- the patterns themselves, over token strings -------------------------------------------------------

NPU216 = rule("NPU216")


def _matches(seq: str) -> bool:
    text = "".join(f"-{n}-" for n in seq.split("-"))
    return any(pattern_regex(p).search(text) for p, _v in NPU216.patterns)


@pytest.mark.parametrize("seq", ["mul-masked_fill-softmax", "masked_fill-softmax", "mul-masked_fill_-softmax",
                                 "masked_fill_-softmax", "mul-add-softmax", "add-softmax"])
def test_scale_and_mask_before_the_softmax_match(seq):
    assert _matches(seq)


@pytest.mark.parametrize("seq", ["softmax-mul-masked_fill_", "softmax-masked_fill_", "softmax-mul-add", "softmax-add",
                                 "softmax-mul", "mul-softmax", "softmax"])
def test_softmax_first_or_no_mask_does_not_match(seq):
    assert not _matches(seq)


@pytest.mark.parametrize("seq", ["Muls-ViewCopy-MaskedFill-SoftmaxV2", "Muls-TensorMove-MaskedFill-SoftmaxV2",
                                 "Muls-MaskedFill-SoftmaxV2", "MaskedFill-SoftmaxV2", "Muls-Add-SoftmaxV2", "Mul-Add-SoftmaxV2",
                                 "Add-SoftmaxV2", "Cast-Mul-MaskedFill-SoftmaxV2-Cast"])
def test_eager_kernel_types_of_scale_and_mask_before_the_softmax_match(seq):
    assert _matches_kernels(seq)


@pytest.mark.parametrize("seq", ["SoftmaxV2-Muls-MaskedFill", "SoftmaxV2-Muls-Add", "Muls-SoftmaxV2", "ViewCopy-SoftmaxV2",
                                 "Muls-Adds-SoftmaxV2"])  # Adds: a scalar added, no mask
def test_eager_kernel_types_without_a_mask_before_the_softmax_do_not_match(seq):
    assert not _matches_kernels(seq)


def _matches_kernels(seq: str) -> bool:
    text = "".join(f"-{n}-" for n in seq.split("-"))
    return any(pattern_regex(p).search(text) for p in NPU216.kernel_patterns)


# -- the msprof CLI form: kernel types only, placed by the mapping ---------------------------------------

EAGER_PY = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Scorer(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.proj = nn.Linear(48, dim, bias=False)
        self.out = nn.Linear(dim, 10, bias=False)
        self.scale = dim**-0.5
        self.register_buffer("bias", torch.full((dim, dim), float("-inf")).triu(1))

    def forward(self, x, mask):
        h = self.proj(x)
        p = F.softmax((h * self.scale).masked_fill(mask, float("-inf")), dim=-1)
        s = h * self.scale
        r = F.softmax(s + self.bias, dim=-1)
        q = F.softmax(h, dim=-1) * 0.5
        q = q.masked_fill_(mask, 0.0)
        return self.out(p + q + r)
'''
EAGER = Source("model.py", EAGER_PY)
MASKED, SCALED = 'p = F.softmax((h * self.scale).masked_fill(mask, float("-inf")), dim=-1)', "s = h * self.scale"


def _eager_run():
    def at(needle: str) -> tuple:
        return (EAGER.frame(needle, "Scorer.forward"), *CALL_IMPL, *_loop("loss = model(x, mask).sum()"))

    def add(shape) -> Launch:
        return L.elementwise("aten::add", "aclnnAdd", "Add", shape, dur_us=20.0, autograd="AddBackward0",
                             bwd=L.backward_of("aten::add", "aclnnAdd", "Add", shape, dur_us=20.0))

    # the two projections' shapes differ: the mapping's landmarks around the softmaxes
    proj, out = L.linear_nd(8 * 4 * 64, 48, 64, mm_us=20.0), L.linear_nd(8 * 4 * 64, 64, 10, mm_us=10.0)
    items = [
        UserCall(at("h = self.proj(x)"), (Launch(proj.op, proj.frames),), label="proj"),
        # the bool mask filled out of place: Muls, the clone's copy, MaskedFill, SoftmaxV2
        UserCall(at(MASKED), (_mul(X, 30.0), L.masked_fill(X, MASK, dur_us=35.0), L.softmax(X, dur_us=40.0)),
                 label="masked"),
        # a float mask added, the scale on a line of its own: Muls, Add, SoftmaxV2
        UserCall(at(SCALED), (_mul(X, 30.0),), label="biased.scale"),
        UserCall(at("r = F.softmax(s + self.bias, dim=-1)"), (add(X), L.softmax(X, dur_us=40.0)), label="biased"),
        # softmax first: no masked softmax
        UserCall(at("q = F.softmax(h, dim=-1) * 0.5"), (L.softmax(X, dur_us=40.0), _mul(X, 30.0)), label="weighted"),
        UserCall(at("q = q.masked_fill_(mask, 0.0)"), (L.masked_fill(X, MASK, dur_us=35.0, inplace=True),),
                 label="weighted.fill"),
        UserCall(at("return self.out(p + q + r)"), (add(X), add(X), Launch(out.op, out.frames)), label="out"),
        UserCall(L.BACKWARD + _loop("loss.backward()"), (Launch(L.grad_seed().op),), label="backward", backward=True),
        UserCall(_loop("optimizer.step()"), (L.sgd_step(((64, 48), (10, 64)), kernel_us=2.0),), label="optimizer"),
    ]
    return step_run(items, steps=3)


@pytest.mark.parametrize("form", ["text", "msprof"])
def test_the_msprof_form_finds_both_masks_where_the_stack_form_does(tmp_path, form):
    """Each masked softmax on the line the stack form names (the scale's line where it is split off:
    the match starts there); the softmax-first function stays silent in both."""
    run = _eager_run()
    root = write_torch_npu_text(run, tmp_path / "prof") if form == "text" else \
        write_msprof_cli(run, tmp_path / "prof", step_trace=False)
    proj = write_project(tmp_path, EAGER_PY, TRAIN_PY)
    profile = load_location(locate(root), use_cache=False)
    ws = SourceWorkspace([proj])
    ctx = RuleContext(profile, attribute(profile, ws), ws, RuleConfig(min_share=0.0))
    found = Analysed(root, proj, profile, ctx).run("NPU216")
    assert sorted(f.span.line for f in found) == sorted([EAGER.line(MASKED), EAGER.line(SCALED)])
    by_line = {f.span.line: f for f in found}
    masked, biased = by_line[EAGER.line(MASKED)], by_line[EAGER.line(SCALED)]
    if form == "msprof":
        assert {f.evidence["matched_in"] for f in found} == {"kernel types"}
        assert all(f.confidence is Confidence.INFERRED for f in found)
        assert masked.evidence["sequence"] == "Muls-ViewCopy-MaskedFill-SoftmaxV2"
        assert biased.evidence["sequence"] == "Muls-Add-SoftmaxV2"
    else:
        assert masked.evidence["sequence"] == "mul-masked_fill-softmax"
        assert biased.evidence["sequence"] == "mul-add-softmax"
