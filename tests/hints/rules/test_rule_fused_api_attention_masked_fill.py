"""NPU213 fused-api-attention with a boolean mask filled in place or not: a generated training run
(tests/synth) of a written-out causal attention whose mask is applied with
``scores = scores.masked_fill(mask, -inf)`` (aten::masked_fill: a clone, then the in-place fill
inside it; eager kernels ViewCopy, MaskedFill) or ``scores.masked_fill_(mask, -inf)``
(aten::masked_fill_; MaskedFill), written in every form the rule reads: the torch_npu text and DB exports
with stacks and without (placed by the mapping) and the msprof CLI result (kernel types only). In each the attention is one finding on the scores line, the
sequence the mask's fill included. The out-of-place fill was matched in no form before issue 23's
fix (the patterns named ``masked_fill_`` and ``MaskedFill`` right after the scale only)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from seedkit import Analysed, L, Launch, Source, UserCall, applied, mask_train, step_run, train_loop, write_project
from tests.synth import write_msprof_cli, write_torch_npu_db, write_torch_npu_text
from tests.synth.sample_runs import mod

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.profile_query import pattern_regex
from msprof_lsp.hints.registry import rule
from msprof_lsp.hints.rules.fused_api import FusedSpec
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.source.attribute import attribute
from msprof_lsp.mapping.source.workspace import SourceWorkspace
from msprof_lsp.mapping.spans import Confidence

OUT_OF_PLACE = 'scores = scores.masked_fill(mask, float("-inf"))'
IN_PLACE = 'scores.masked_fill_(mask, float("-inf"))'

MODEL_PY = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalAttention(nn.Module):
    def __init__(self, dim: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * self.scale
        FILL
        attn = F.softmax(scores, dim=-1)
        y = (attn @ v).transpose(1, 2).contiguous().view(b, s, d)
        return self.out(y)
'''

TRAIN = mask_train("CausalAttention")
TRAIN_PY = TRAIN.text

SCORES = "scores = q @ k.transpose(-2, -1) * self.scale"
B, S, D, NH = 8, 128, 256, 4
HD, T = D // NH, B * S
XH, SC, MASK = (B, NH, S, HD), (B, NH, S, S), (S, S)
FORMS = ("text", "db", "nostack", "db_nostack", "msprof")  # *_nostack: placed by the mapping


def _model(fill: str) -> Source:
    return Source("model.py", MODEL_PY.replace("FILL", fill))


def _loop(needle: str) -> tuple:
    return train_loop(TRAIN, needle)


def _run(model: Source, inplace: bool):
    def at(needle: str) -> tuple:
        return (model.frame(needle, "CausalAttention.forward"), *mod("CausalAttention", 0),
                *_loop("loss = model(x, mask).sum()"))

    def ew(aten: str, api: str, typ: str, autograd: str) -> Launch:
        return L.elementwise(aten, api, typ, SC, dur_us=30.0, autograd=autograd,
                             bwd=L.backward_of(aten, api, typ, SC, dur_us=30.0))

    qkv, out = L.linear_nd(T, D, 3 * D, mm_us=70.0), L.linear_nd(T, D, D, mm_us=30.0)
    items = [
        UserCall(at("q, k, v = self.qkv(x)"), (
            Launch(qkv.op, qkv.frames + mod("Linear", 0)),
            L.no_kernel("aten::view", inputs=((T, 3 * D), ()), autograd="ViewBackward0"),
            L.no_kernel("aten::permute", inputs=((B, S, 3, NH, HD), ()), autograd="PermuteBackward0"),
        ), label="qkv"),
        UserCall(at(SCORES), (
            L.no_kernel("aten::transpose", inputs=(XH, (), ()), autograd="TransposeBackward0"),
            L.matmul(XH, (B, NH, HD, S), SC, dur_us=90.0),
            ew("aten::mul", "aclnnMuls", "Muls", "MulBackward0"),
        ), label="scores"),
        UserCall(at(IN_PLACE if inplace else OUT_OF_PLACE),
                 (L.masked_fill(SC, MASK, dur_us=35.0, inplace=inplace),), label="fill"),
        UserCall(at("attn = F.softmax(scores, dim=-1)"), (L.softmax(SC, dur_us=120.0),), label="softmax"),
        UserCall(at("y = (attn @ v).transpose(1, 2).contiguous().view(b, s, d)"), (
            L.matmul(SC, XH, XH, dur_us=90.0),
            L.no_kernel("aten::transpose", inputs=(XH, (), ()), autograd="TransposeBackward0"),
            L.contiguous(XH, (B, S, NH, HD), dur_us=70.0),
            L.no_kernel("aten::view", inputs=((B, S, NH, HD), ()), autograd="ViewBackward0"),
        ), label="merge_heads"),
        UserCall(at("return self.out(y)"), (Launch(out.op, out.frames + mod("Linear", 1)),), label="out"),
        UserCall(L.BACKWARD + _loop("loss.backward()"), (Launch(L.grad_seed().op),), label="backward", backward=True),
        UserCall(_loop("optimizer.step()"), (L.sgd_step(((3 * D, D), (D, D)), kernel_us=2.0),), label="optimizer"),
    ]
    return step_run(items, steps=3)


def _write(run, form: str, out: Path) -> Path:
    if form == "text":
        return write_torch_npu_text(run, out)
    if form == "nostack":
        return write_torch_npu_text(dataclasses.replace(run, config=dataclasses.replace(run.config, with_stack=False)), out)
    if form in ("db", "db_nostack"):
        cfg = dataclasses.replace(run.config, export_type=("db",), with_stack=form == "db")
        return write_torch_npu_db(dataclasses.replace(run, config=cfg), out)
    return write_msprof_cli(run, out, step_trace=False)


def _analyse(model: Source, inplace: bool, form: str, tmp: Path) -> Analysed:
    root = _write(_run(model, inplace), form, tmp / "prof")
    proj = write_project(tmp, model.text, TRAIN_PY)
    profile = load_location(locate(root), use_cache=False)
    ws = SourceWorkspace([proj])
    return Analysed(root, proj, profile, RuleContext(profile, attribute(profile, ws), ws, RuleConfig()))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("inplace", [False, True], ids=["masked_fill", "masked_fill_"])
def test_written_out_attention_with_either_fill_is_one_finding_on_the_scores_line(tmp_path, form, inplace):
    model = _model(IN_PLACE if inplace else OUT_OF_PLACE)
    a = _analyse(model, inplace, form, tmp_path)
    (f,) = a.run("NPU213", min_share=0.0)
    assert f.span is not None and f.span.path.endswith("model.py") and f.span.line == model.line(SCORES)
    seq, types = f.evidence["sequence"], f.evidence["kernel_types"]
    if form == "msprof":
        assert f.evidence["matched_in"] == "kernel types" and f.confidence is Confidence.INFERRED
        fill = "MaskedFill" if inplace else "ViewCopy-MaskedFill"
        assert seq == f"BatchMatMulV2-Muls-{fill}-SoftmaxV2-BatchMatMulV2"
        # the forward kernels of the match, once per step
        assert types == {"BatchMatMulV2": 6, "Muls": 3, "MaskedFill": 3, "SoftmaxV2": 3, **({} if inplace else {"ViewCopy": 3})}
    else:
        assert f.evidence["matched_in"] == "host ops"
        assert f.confidence is (Confidence.INFERRED if form.endswith("nostack") else Confidence.STACK)
        fill = "masked_fill_" if inplace else "masked_fill"
        assert seq == f"transpose-matmul-mul-{fill}-softmax-matmul"
        # both passes of the matched ops: the fill's forward and backward MaskedFill, the clone's copy
        assert types == {"BatchMatMulV2": 18, "Muls": 6, "MaskedFill": 6, "SoftmaxV2": 3, "SoftmaxGrad": 3,
                         **({} if inplace else {"ViewCopy": 3})}


@pytest.mark.parametrize("inplace", [False, True], ids=["masked_fill", "masked_fill_"])
def test_either_fill_gets_the_fused_attention_edit(tmp_path, inplace):
    """The transform recognises the fill spread over its own single-use assignment, or as an
    in-place statement of its own: the edit reaches the user (the mask becomes ``atten_mask``,
    True = masked out, as masked_fill's)."""
    fill = IN_PLACE if inplace else OUT_OF_PLACE
    model = _model(fill)
    (f,) = _analyse(model, inplace, "text", tmp_path).run("NPU213", min_share=0.0)
    path, new = applied(f, "npu_fusion_attention")
    assert path.endswith("model.py")
    fused = new.index('torch_npu.npu_fusion_attention(q, k, v, q.shape[1], "BNSD", atten_mask=mask, scale=self.scale)')
    # the fill is gone from the fused path and stays as the path without torch_npu
    assert fill not in new[:fused] and fill in new[new.index("else:", fused):]


# -- the patterns themselves, over token strings -------------------------------------------------------

NPU213 = rule("NPU213")
assert isinstance(NPU213, FusedSpec)


def _matches(seq: str, patterns) -> bool:
    text = "".join(f"-{n}-" for n in seq.split("-"))
    return any(pattern_regex(p).search(text) for p in patterns)


@pytest.mark.parametrize("seq", ["matmul-mul-masked_fill-softmax-matmul", "matmul-mul-masked_fill_-softmax-matmul",
                                 "matmul-masked_fill-softmax-dropout-matmul", "matmul-mul-masked_fill-add-softmax-matmul",
                                 "matmul-mul-add-softmax-matmul", "matmul-softmax-matmul"])
def test_host_patterns_take_either_fill(seq):
    assert _matches(seq, [p for p, _v in NPU213.patterns])


@pytest.mark.parametrize("seq", ["BatchMatMulV2-Muls-ViewCopy-MaskedFill-SoftmaxV2-BatchMatMulV2",
                                 "BatchMatMulV2-Muls-TensorMove-MaskedFill-SoftmaxV2-BatchMatMulV2",
                                 "BatchMatMulV2-Muls-MaskedFill-SoftmaxV2-BatchMatMulV2",
                                 "BatchMatMul-Muls-Add-SoftmaxV2-DropOutDoMaskV3-BatchMatMul"])
def test_kernel_patterns_take_either_fill(seq):
    assert _matches(seq, NPU213.kernel_patterns)


@pytest.mark.parametrize("seq", ["BatchMatMulV2-Muls-ViewCopy-SoftmaxV2-BatchMatMulV2",  # a copy is no mask
                                 "BatchMatMulV2-Muls-MaskedFill-ViewCopy-SoftmaxV2-BatchMatMulV2",
                                 "MatMulV2-Muls-MaskedFill-SoftmaxV2-MatMulV2"])
def test_kernel_patterns_take_no_bare_copy(seq):
    assert not _matches(seq, NPU213.kernel_patterns)
