"""NPU210-NPU217: the advisor's aten-sequence detection on built profiles (numbers from the test's
own kernel durations), CANN gating, thread and nesting boundaries, the kernel-type variant, and
the samples (tiny_transformer's generated NPU profile and its recorded Kineto CPU trace)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rulekit import ProfileBuilder, applied, findings, frame, line_of, only

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.profile_query import pattern_regex
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.profile.model import Backend, ProfileKind
from msprof_lsp.mapping.spans import Confidence

REPO = Path(__file__).resolve().parents[3]
TINY = REPO / "samples" / "tiny_transformer"

RMS_SRC = '''import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
'''
RMS_OPS = [("aten::pow", "aclnnPowTensorScalar", "Pow", 7.0), ("aten::mean", "aclnnMean", "ReduceMean", 11.0),
           ("aten::add", "aclnnAdds", "Add", 5.0), ("aten::rsqrt", "aclnnRsqrt", "Rsqrt", 6.0),
           ("aten::mul", "aclnnMul", "Mul", 9.0), ("aten::mul", "aclnnMul", "Mul", 8.0)]


def _rms_profile(path: Path, *, repeat: int = 1, cann: str = "8.0.RC3", tids: tuple[int, ...] = (), step_us: float = 10_000):
    b = ProfileBuilder(cann_version=cann, step_us=step_us)
    line = line_of(path.read_text(), "return x * torch.rsqrt(")
    stack = [frame(path, line, "forward"), frame(path.parent / "train.py", 20, "<module>")]
    t = 100.0
    for _ in range(repeat):
        for i, (aten, scope, ktype, dur) in enumerate(RMS_OPS):
            tid = tids[i] if tids else 1
            op = b.op(aten, t, 30, stack=stack, tid=tid)
            sc = b.op(scope, t + 5, 20, tid=tid)
            b.kernel(f"{scope}_{ktype}AiCore_{ktype}", t + 10, dur, op=sc, type=ktype, core="AI_VECTOR_CORE")
            t += 40
    return b.build()


@pytest.fixture
def rms_file(tmp_path):
    p = tmp_path / "norm.py"
    p.write_text(RMS_SRC)
    return p


def test_rms_norm_sequence_numbers_anchor_and_fix(rms_file, tmp_path):
    (f,) = only(findings(_rms_profile(rms_file, repeat=3), ["NPU210"], [tmp_path]), "NPU210")
    # the advisor's pattern ends at the first mul (...-rsqrt-mul-(type_as){0,1}); the match takes
    # the weight's mul too: npu_rms_norm replaces it (the spec's tail, on the same function)
    matched = RMS_OPS
    expected_us = 3 * sum(d for *_, d in matched)
    assert f.evidence["sequence"] == "-".join(a[6:] for a, *_ in matched)
    assert f.evidence["matches"] == 3 and f.evidence["kernels"] == 18
    assert f.time_per_step_us == pytest.approx(expected_us)
    assert f.share == pytest.approx(expected_us / 10_000)
    assert expected_us >= 100 and f.message.startswith(f"RMSNorm written out: 3 matches, {expected_us:.0f} µs/step")
    assert f.span.line == line_of(RMS_SRC, "return x * torch.rsqrt(") and f.confidence is Confidence.STACK
    new = applied(RMS_SRC, f.fixes[0])
    assert "torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]" in new
    assert f.evidence["snippet"].startswith("y = torch_npu.npu_rms_norm")


def test_the_match_takes_the_weights_mul_from_the_norms_own_function_only(rms_file, tmp_path):
    """npu_rms_norm replaces the ``* weight`` the advisor's pattern leaves out (the spec's tail),
    but a mul right after the norm that runs in another function is other code: not charged."""
    other = tmp_path / "other.py"
    other.write_text("def scale(y, w):\n    return y * w\n")
    b = ProfileBuilder(cann_version="8.0.RC3", step_us=10_000)
    norm = [frame(rms_file, line_of(RMS_SRC, "return x * torch.rsqrt("), "forward"), frame(tmp_path / "train.py", 20, "<module>")]
    for i, (aten, scope, ktype, dur) in enumerate(RMS_OPS):
        stack = norm if i < 5 else [frame(other, 2, "scale"), frame(tmp_path / "train.py", 21, "<module>")]
        b.op(aten, 100 + 40 * i, 30, stack=stack)
        sc = b.op(scope, 105 + 40 * i, 20)
        b.kernel(f"{scope}_{ktype}AiCore_{ktype}", 110 + 40 * i, dur, op=sc, type=ktype, core="AI_VECTOR_CORE")
    (f,) = only(findings(b.build(), ["NPU210"], [tmp_path]), "NPU210")
    assert f.evidence["sequence"] == "pow-mean-add-rsqrt-mul"
    assert f.time_per_step_us == pytest.approx(sum(d for *_, d in RMS_OPS[:5]))


@pytest.mark.parametrize(("cann", "fires"), [("6.3.RC2", False), ("7.0.RC1", False), ("7.0.0", True), ("8.0.RC3", True), ("", True)])
def test_rms_norm_is_gated_on_cann_7_0_0(rms_file, tmp_path, cann, fires):
    fs = only(findings(_rms_profile(rms_file, cann=cann), ["NPU210"], [tmp_path]), "NPU210")
    assert bool(fs) is fires


def test_sequence_split_over_threads_does_not_match(rms_file, tmp_path):
    # rsqrt ends thread 1, the muls run on thread 2: joined they would match -rsqrt--mul-
    fs = findings(_rms_profile(rms_file, tids=(1, 1, 1, 1, 2, 2)), ["NPU210"], [tmp_path])
    assert not only(fs, "NPU210")
    assert only(findings(_rms_profile(rms_file, tids=(1, 1, 1, 1, 1, 2)), ["NPU210"], [tmp_path]), "NPU210")


def test_min_share_cuts_just_below(rms_file, tmp_path):
    total_us = sum(d for *_, d in RMS_OPS)  # 46 µs per step
    at = RuleConfig(min_share=total_us / 10_000)
    above = RuleConfig(min_share=total_us / 10_000 + 1e-6)
    assert only(findings(_rms_profile(rms_file), ["NPU210"], [tmp_path], config=at), "NPU210")
    assert not only(findings(_rms_profile(rms_file), ["NPU210"], [tmp_path], config=above), "NPU210")


def test_only_outermost_forward_ops_count():
    b = ProfileBuilder()
    # gelu nested inside another aten op is not what user code called; backward gelu is not either
    outer = b.op("aten::linear", 100, 100)
    b.op("aten::gelu", 110, 20)
    node = b.op("autograd::engine::evaluate_function: GeluBackward0", 300, 100, tid=2)
    b.op("aten::gelu", 320, 20, tid=2)
    del outer, node
    assert not only(findings(b.build(), ["NPU214"]), "NPU214")
    b2 = ProfileBuilder()
    b2.op("aten::gelu", 110, 20)
    assert only(findings(b2.build(), ["NPU214"]), "NPU214")


def test_pattern_regex_tokens_are_whole_op_names():
    rx = pattern_regex("(slice|chunk)-silu-mul")
    assert rx.search("-chunk--silu--mul-") and rx.search("-slice--silu--mul-")
    assert not rx.search("-chunk--silu--mul_-") and not rx.search("-chunk--silu_--mul-")
    rx2 = pattern_regex("(chunk)-neg-cat-(mul){0,2}-add")
    assert rx2.fullmatch("-chunk--neg--cat--mul--mul--add-") and rx2.fullmatch("-chunk--neg--cat--add-")
    assert not rx2.fullmatch("-chunk--neg--cat--mul--mul--mul--add-")
    with pytest.raises(ValueError):
        pattern_regex("pow-(mean")


def test_kernel_type_variant_is_inferred():
    b = ProfileBuilder()
    durs = [12.0, 30.0, 4.0, 12.0, 31.0]
    for i, d in enumerate(durs):
        b.kernel(f"k{i}", 100 + 50 * i, d, type=("Add", "LayerNorm")[i % 2], core="AI_VECTOR_CORE")
    (f,) = only(findings(b.build(), ["NPU217"]), "NPU217")
    assert f.confidence is Confidence.INFERRED and f.evidence["matched_in"] == "kernel types"
    assert f.evidence["matches"] == 2  # Add-LayerNorm twice; the trailing Add has no LayerNorm
    assert f.time_per_step_us == pytest.approx(sum(durs[:4]))


def test_cuda_backend_names_the_cuda_analogue(rms_file, tmp_path):
    b = ProfileBuilder(backend=Backend.CUDA, kind=ProfileKind.KINETO)
    line = line_of(RMS_SRC, "return x * torch.rsqrt(")
    for i, (aten, _scope, _t, dur) in enumerate(RMS_OPS):
        op = b.op(aten, 100 + 40 * i, 30, stack=[frame(rms_file, line, "forward")])
        b.kernel(f"void elementwise_kernel_{i}", 110 + 40 * i, dur, op=op, core="GPU")
    (f,) = only(findings(b.build(), ["NPU210"], [tmp_path]), "NPU210")
    assert "F.rms_norm" in f.message and "torch_npu" not in f.message
    assert f.fixes == []  # the npu_rms_norm rewrite is Ascend-only; the hover shows F.rms_norm
    assert f.evidence["snippet"].startswith("y = F.rms_norm(")


# -- the samples ---------------------------------------------------------------------------------


def _tiny_npu():
    roots = sorted((TINY / "npu_profile").glob("*_ascend_pt"))
    assert roots, "the tiny_transformer sample profile is missing"
    return load_location(locate(roots[0]), use_cache=False)


def test_tiny_transformer_npu_profile(tmp_path):
    model = (TINY / "model.py").read_text(encoding="utf-8")
    fs = findings(_tiny_npu(), ["NPU21"], [TINY], config=RuleConfig())  # default minShare
    rms = only(fs, "NPU210")
    assert [f.span.line for f in rms] == [line_of(model, "return x * torch.rsqrt(")]
    assert rms[0].evidence["matches_per_step"] == 5  # 2 blocks x 2 norms + the final norm (Config n_layers=2)
    assert "npu_rms_norm" in applied(model, rms[0].fixes[0])
    (att,) = only(fs, "NPU213")
    assert att.span.line == line_of(model, "scores = q @ k.transpose(-2, -1) * self.scale")
    assert line_of(model, "out = attn @ v") in {r.span.line for r in att.related}
    # the sample adds a float -inf mask: npu_fusion_attention needs a boolean one, so no edit
    assert att.fixes == [] and "additive float mask" in att.evidence["no_fix"]
    assert "npu_fusion_attention" in att.evidence["snippet"]


def test_tiny_transformer_rms_norm_charges_its_backward_kernels():
    """The fused kernel replaces both passes: NPU210 charges the forward kernels of the matched
    ops and the backward kernels linked to them (``kernels.fwd_op``). Before: 99.7 µs/step (the
    forward only, 1.1 % of the step); then 199.3 µs/step, 2.2 % (both passes of five ops); now
    239.4 µs/step with the weight's mul the advisor's pattern leaves out. The backward part is
    counted here from the tables: the line's forward ops, six per norm (pow, mean, add, rsqrt,
    mul, mul), and the backward kernels linked to them."""
    model = (TINY / "model.py").read_text(encoding="utf-8")
    profile = _tiny_npu()
    (f,) = only(findings(profile, ["NPU210"], [TINY], config=RuleConfig()), "NPU210")
    line = line_of(model, "return x * torch.rsqrt(")
    h = profile.host_ops
    names, stacks, starts = h["name"].astype(str).to_numpy(), h["stack"].to_numpy(), h["start_ns"].to_numpy()
    k = profile.kernels_in_steps()
    linked = set(k["fwd_op"].to_numpy()[k["backward"].to_numpy()].tolist())
    on_line = sorted((int(starts[r]), r) for r in linked
                     if r >= 0 and names[r].startswith("aten::")
                     and any(fr.line == line and fr.file.endswith("model.py") for fr in profile.stack_of(int(stacks[r]))))
    assert [names[r] for _, r in on_line[:6]] == ["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul"]
    matched = {r for _, r in on_line}
    sel = k["backward"].to_numpy() & k["fwd_op"].isin(matched).to_numpy()
    back_us = k["dur_ns"].to_numpy()[sel].sum() / 1000 / profile.num_steps
    assert back_us > 90 and f.evidence["backward_us_per_step"] == round(back_us, 1)
    assert f.evidence["time_us_per_step"] == 239.4 and f.evidence["kernels"] == 60  # 5 matches x (6 forward + 6 backward)
    assert f.message.startswith("RMSNorm written out: 5 matches, 239 µs/step (2.7% of the device step), 12 kernels each")
    # the effect fuses each pass on its own: forward kernels, backward kernels, and the autograd
    # nodes of the matched ops at one call per match
    from msprof_lsp.hints.finding import Target
    from msprof_lsp.hints.profile_query import backward_mask
    host = [c for c in f.effect.changes if c.target is Target.HOST_OPS]
    assert len(host) == 2 and host[1].factor == 5 / 30  # 30 autograd nodes (6 per norm), 5 matches
    assert backward_mask(profile)[list(host[1].rows)].all() and not backward_mask(profile)[list(host[0].rows)].any()
    kernels = [c for c in f.effect.changes if c.target is Target.KERNELS]
    assert sum(len(c.rows) for c in kernels) == 60


def test_tiny_transformer_npu_profile_lower_share_rules():
    model = (TINY / "model.py").read_text(encoding="utf-8")
    fs = findings(_tiny_npu(), ["NPU21"], [TINY])  # minShare 0
    rot = only(fs, "NPU212")
    assert sorted(f.span.line for f in rot) == [line_of(model, "q = q * cos + rotate_half(q)"), line_of(model, "k = k * cos + rotate_half(k)")]
    assert all("npu_rotary_mul" in applied(model, f.fixes[0]) for f in rot)
    (swi,) = only(fs, "NPU211")
    assert swi.span.line == line_of(model, "a, b = x.chunk(2, dim=-1)")  # the sequence starts at the chunk ...
    assert "torch_npu.npu_swiglu(" in applied(model, swi.fixes[0])  # ... the rewrite is of the product line
    perm = [f for f in only(fs, "NPU215") if f.evidence["sequence"] == "permute-contiguous-view"]
    assert [f.span.line for f in perm] == [line_of(model, "out = out.permute(0, 2, 1, 3)")]
    # the attention's scale, float mask and softmax (mul-add-softmax) are NPU216's pattern too: the
    # same kernels, one cause, kept by NPU213 (hints.consolidate), never a second finding
    (att,) = only(fs, "NPU213")
    assert not only(fs, "NPU216") and att.evidence["same_cause"] == ["NPU216"]


def test_tiny_transformer_kineto_cpu_analogues():
    traces = sorted((TINY / "kineto").glob("*.pt.trace.json.gz"))
    profile = load_location(locate(traces[0]), use_cache=False)
    model = (TINY / "model.py").read_text(encoding="utf-8")
    fs = findings(profile, ["NPU21"], [TINY])
    (att,) = only(fs, "NPU213")
    assert att.span.line == line_of(model, "scores = q @ k.transpose(-2, -1) * self.scale")
    assert "scaled_dot_product_attention" in att.message
    new = applied(model, att.fixes[0])
    assert "F.scaled_dot_product_attention(q, k, v, attn_mask=mask" in new
    (rms,) = only(fs, "NPU210")
    # Kineto records def lines: the line is found statically inside RMSNorm.forward
    assert rms.span.line == line_of(model, "return x * torch.rsqrt(") and rms.confidence is Confidence.MODULE
    assert "F.rms_norm" in rms.message and rms.evidence["time_source"] == "host"
    assert rms.evidence["matches"] == 5 * profile.num_steps
    # no kernels on a CPU trace: the two findings charge the matched host ops, NPU216's inside NPU213's
    assert not only(fs, "NPU216") and att.evidence["same_cause"] == ["NPU216"]


# -- every code: fires at its minimum CANN version, not just below it; the fix applies ----------

LLAMA = REPO / "tests" / "hints" / "fixes" / "models" / "tiny_llama.py"
CASES = {
    # code: (ops as (aten op, line needle, function), ops in the match, min CANN, just below, fix text)
    "NPU211": ([("aten::chunk", "a, b = h.chunk(2", "forward"), ("aten::silu", "return self.w3(F.silu(a) * b)", "forward"),
                ("aten::mul", "return self.w3(F.silu(a) * b)", "forward")], 3, "7.0.0", "7.0.RC1", "torch_npu.npu_swiglu(h, dim=-1)"),
    "NPU212": ([("aten::slice", "x1 = x[..., : x.shape[-1] // 2]", "rotate_half"), ("aten::slice", "x2 = x[..., x.shape[-1] // 2 :]", "rotate_half"),
                ("aten::neg", "return torch.cat((-x2, x1), dim=-1)", "rotate_half"), ("aten::cat", "return torch.cat((-x2, x1), dim=-1)", "rotate_half"),
                ("aten::mul", "return q * cos + rotate_half(q) * sin", "apply_rotary"), ("aten::add", "return q * cos + rotate_half(q) * sin", "apply_rotary")],
               6, "7.0.RC1", "6.3.RC2", "torch_npu.npu_rotary_mul(q, cos, sin)"),
    "NPU213": ([("aten::matmul", "scores = q @ k.transpose(-2, -1)", "forward"), ("aten::masked_fill_", "scores = scores.masked_fill(causal", "forward"),
                ("aten::softmax", "probs = F.softmax(scores, dim=-1)", "forward"), ("aten::dropout", "probs = self.attn_drop(probs)", "forward"),
                ("aten::matmul", "ctx = probs @ v", "forward")], 5, "7.0.RC1", "6.3.RC2", "torch_npu.npu_fusion_attention(q, k, v, q.shape[1], \"BNSD\""),
    "NPU214": ([("aten::gelu", "y = F.gelu(self.gelu_proj(y))", "forward")], 1, "6.3.RC2", "6.3.RC1", "torch_npu.fast_gelu(self.gelu_proj(y))"),
    "NPU215": ([("aten::permute", "ctx = ctx.permute(0, 2, 1, 3)", "forward"), ("aten::contiguous", "ctx = ctx.permute(0, 2, 1, 3)", "forward"),
                ("aten::view", "ctx = ctx.permute(0, 2, 1, 3)", "forward")], 3, "6.3.RC2", "6.3.RC1", "torch_npu.npu_confusion_transpose(ctx, [0, 2, 1, 3]"),
    # scale, mask, softmax in time order; the line's out-of-place masked_fill records aten::masked_fill
    "NPU216": ([("aten::mul", "return F.softmax((x * scale)", "scaled_scores"), ("aten::masked_fill", "return F.softmax((x * scale)", "scaled_scores"),
                ("aten::softmax", "return F.softmax((x * scale)", "scaled_scores")], 3, "6.3.RC2", "6.3.RC1",
               "torch_npu.npu_scaled_masked_softmax(x, mask, scale=scale)"),
    "NPU217": ([("aten::add", "h = x + r", "forward"), ("aten::layer_norm", "y = self.post_norm(h)", "forward")], 2, "8.0.RC1", "7.0.0",
               "torch_npu.npu_add_layer_norm(x, r, self.post_norm.weight"),
}


def _case_profile(path: Path, code: str, cann: str):
    ops = CASES[code][0]
    text = path.read_text(encoding="utf-8")
    outer = {"rotate_half": [frame(path, line_of(text, "return q * cos + rotate_half(q) * sin"), "apply_rotary")]}
    b = ProfileBuilder(cann_version=cann)
    for i, (aten, needle, func) in enumerate(ops):
        t = 100 + 50 * i
        op = b.op(aten, t, 40, stack=[frame(path, line_of(text, needle), func), *outer.get(func, []), frame(path, 500, "<module>")])
        sc = b.op("aclnnOp", t + 5, 30)
        b.kernel(f"aclnnOp_K{i}_K{i}", t + 10, 10.0, op=sc, type=f"K{i}")
        del op
    return b.build()


@pytest.mark.parametrize("code", sorted(CASES))
def test_each_code_gated_anchored_and_fixed(tmp_path, code):
    ops, n_matched, minimum, below, fixed = CASES[code]
    path = tmp_path / "llama.py"
    text = LLAMA.read_text(encoding="utf-8")
    path.write_text(text)
    assert not only(findings(_case_profile(path, code, below), [code], [tmp_path]), code)
    (f,) = only(findings(_case_profile(path, code, minimum), [code], [tmp_path]), code)
    first = ops[len(ops) - n_matched]
    assert f.span.line == (line_of(text, "return q * cos + rotate_half(q) * sin") if code == "NPU212" else line_of(text, first[1]))
    assert f.time_per_step_us == pytest.approx(10.0 * n_matched)
    assert f.evidence["sequence"] == "-".join(a[6:] for a, *_ in ops[len(ops) - n_matched:])
    assert fixed in applied(text, f.fixes[0])


# -- msprof CLI form: eager aclnn kernel types, anchored by the attribution --------------------------

KERNEL_SRC = '''import torch
from torch import nn


class Mixer(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.inp = nn.Linear(48, d)
        self.out = nn.Linear(d, 10)
        self.eps = 1e-6
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        x = self.inp(x)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        y = x.view(2, 16, 64).permute(1, 0, 2).contiguous()
        return self.out(y)
'''


def _kernel_only(tmp_path: Path, kernels, src: str = KERNEL_SRC) -> list:
    """msprof CLI profile (kernels only) of ``KERNEL_SRC``: the attribution anchors the kernels
    between the shape-matched ``inp`` and ``out`` matmuls by launch order."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "mapping" / "source"))
    from srcmap_builder import ProfileBuilder as KernelProfile

    from msprof_lsp.hints.context import RuleContext
    from msprof_lsp.hints.engine import run_rules
    from msprof_lsp.hints.registry import rules_matching
    from msprof_lsp.mapping.source.attribute import attribute
    from msprof_lsp.mapping.source.workspace import SourceWorkspace

    root = tmp_path / "proj"
    root.mkdir(parents=True)
    (root / "mixer.py").write_text(src, encoding="utf-8")
    b = KernelProfile(kind=ProfileKind.MSPROF)
    for t, (api, typ, shapes, out) in enumerate(kernels):
        b.kernel(f"{api}_{typ}AiCore_{typ}", typ, 1000 * t, 100, core="AI_VECTOR_CORE", shapes=shapes,
                 out_shapes=out)
    prof = b.build()
    ws = SourceWorkspace([root])
    ctx = RuleContext(prof, attribute(prof, ws), ws, RuleConfig(min_share=0.0))
    return run_rules(ctx, rules_matching(["NPU210", "NPU215"]))


# (aclnn API, OpType, input shapes, output shapes): the msprof op name embeds the API
MM_IN = ("aclnnMm", "MatMulV2", "32,48;64,48", "32,64")
MM_OUT = ("aclnnMm", "MatMulV2", "32,64;10,64", "32,10")
RMS_KERNELS = (("aclnnPowTensorScalar", "Pow", "32,64", "32,64"), ("aclnnMean", "ReduceMean", "32,64", "32,1"),
               ("aclnnAdds", "Adds", "32,1", "32,1"), ("aclnnRsqrt", "Rsqrt", "32,1", "32,1"),
               ("aclnnMul", "Mul", "32,64;32,1", "32,64"), ("aclnnMul", "Mul", "32,64;64", "32,64"))
TRANSPOSE = ("aclnnInplaceCopy", "Transpose", "32,64", "64,32")
FORWARD = (MM_IN, *RMS_KERNELS, TRANSPOSE, MM_OUT)


def test_eager_rms_norm_kernels_land_on_the_written_out_norm(tmp_path):
    """Pow-ReduceMean-Adds-Rsqrt-Mul (the eager aclnn kernels of the written-out norm): the
    attribution puts the first two on the matmul's line before it, the rest on the norm's; the
    finding takes the first of those statements that spells the norm (rsqrt), inferred."""
    fs = _kernel_only(tmp_path, FORWARD)
    [f] = only(fs, "NPU210")
    assert f.confidence is Confidence.INFERRED and f.evidence["matched_in"] == "kernel types"
    assert f.span is not None and f.span.line == line_of(KERNEL_SRC, "x = x * torch.rsqrt(")
    assert f.evidence["sequence"] == "Pow-ReduceMean-Adds-Rsqrt-Mul"
    assert f.evidence["kernels"] == 5




def test_a_transpose_kernel_counts_as_confusion_transpose_only_where_the_line_spells_view_and_permute(tmp_path):
    """A ``Transpose`` kernel only says a permuted tensor was copied; the view/reshape has no
    kernel, so NPU215 reports where the anchored statement spells permute + view
    (``view(...).permute(...).contiguous()``) and stays silent on a copy with no view."""
    [f] = only(_kernel_only(tmp_path, FORWARD), "NPU215")
    assert f.span is not None and f.span.line == line_of(KERNEL_SRC, "y = x.view(2, 16, 64)")
    no_view = KERNEL_SRC.replace("x.view(2, 16, 64).permute(1, 0, 2).contiguous()", "x.t().contiguous()")
    assert no_view != KERNEL_SRC
    assert only(_kernel_only(tmp_path / "other", FORWARD, no_view), "NPU215") == []
