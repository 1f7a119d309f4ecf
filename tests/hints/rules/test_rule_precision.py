"""NPU222 fp32-compute: the real AlexNet Level1 exports (fp32 MatMul and Conv kernels, text with
``HF32 Eligible``, DB without it), counted here with the csv module; the real bf16 Level2 export
(no finding); built profiles for the threshold, the measured fp32/bf16 rate ratio of the effect and
the PyTorch gate."""

from __future__ import annotations

import csv
import re

import pytest
from conftest import shared_fixture
from rulekit import ProfileBuilder, findings, only

from msprof_lsp.hints.config import RuleConfig, Thresholds
from msprof_lsp.hints.finding import Target
from msprof_lsp.hints.rules.precision import PEAK_RATIO, precision
from msprof_lsp.mapping.profile.cluster import load_profile
from msprof_lsp.mapping.profile.model import ProfileKind

ALEXNET = "Ascend-msinsight/{}/level1/rank0_ascend_pt"
LEVEL2 = "Ascend-msinsight-st-level2/level2/rank_0_ascend_pt"
CUBE = re.compile(r"MatMul|^Conv2D")


@pytest.mark.parametrize(("dtypes", "want"), [
    ("FLOAT;FLOAT", "fp32"), ("FLOAT;INT32;FLOAT", "fp32"), ("INT32;FLOAT;FLOAT", "fp32"), ("DT_FLOAT;DT_FLOAT", "fp32"),
    ("DT_BF16;DT_BF16", "half"), ("FLOAT16;FLOAT16", "half"), ("FLOAT;DT_BF16", ""), ("INT32;INT64", ""), ("", ""),
])
def test_precision_of_the_floating_inputs(dtypes, want):
    assert precision(dtypes) == want


def _csv_fp32_cube(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["Step Id"]]
    out = []
    for r in rows:
        floats = [t for t in r["Input Data Types"].split(";") if t in ("FLOAT", "FLOAT16", "DT_BF16")]
        if CUBE.search(r["Type"]) and floats and all(t == "FLOAT" for t in floats):
            out.append(r)
    return out


def test_real_alexnet_text_export_fp32_matmuls_and_convolutions():
    root = shared_fixture(ALEXNET.format("text"))
    rows = _csv_fp32_cube(root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    assert len(rows) == 23 and {r["Type"] for r in rows} == {"MatMulV2", "MatMulV3", "Conv2D", "Conv2DBackpropFilter",
                                                             "Conv2DBackpropInput"}
    profile = load_profile([root], use_cache=False).profile
    (f,) = only(findings(profile, ["NPU222"]), "NPU222")
    ev = f.evidence
    assert ev["kernels"] == 23 and ev["fp32_cube_us"] == round(sum(float(r["Duration(us)"]) for r in rows), 1)
    assert ev["hf32_eligible"] == {"YES": sum(r["HF32 Eligible"] == "YES" for r in rows),
                                   "NO": sum(r["HF32 Eligible"] == "NO" for r in rows)} == {"YES": 14, "NO": 9}
    assert 0.3 < ev["share_of_compute"] < 0.33  # 2,806 of the 8,874 µs of Computing
    assert f.message.startswith("fp32 compute: 23 kernels, 2,806 µs/step (2.1% of the device step), 32% of the compute time, most in MatMulV2")
    # no bf16 kernel in the job: the peak ratio as the best case, the worst case unknown (nothing saved)
    assert f.effect is not None and all(c.target is Target.KERNELS for c in f.effect.changes)
    assert {(c.factor, c.best, c.worst) for c in f.effect.changes} == {(PEAK_RATIO, PEAK_RATIO, 1.0)}
    assert sum(len(c.rows) for c in f.effect.changes) == 23 and "worst case unknown" in f.effect.basis
    assert f.offers == [] and "torch.autocast" in ev["manual_fix"][0] and "allow_hf32" in ev["manual_fix"][1]


def test_real_alexnet_db_export_has_no_hf32_column():
    profile = load_profile([shared_fixture(ALEXNET.format("db"))], use_cache=False).profile
    (f,) = only(findings(profile, ["NPU222"]), "NPU222")
    assert f.evidence["kernels"] == 23 and f.evidence["hf32_eligible"] == "not written"


def test_real_bf16_job_has_no_finding():
    profile = load_profile([shared_fixture(LEVEL2)], use_cache=False).profile
    assert not only(findings(profile, ["NPU222"], config=RuleConfig(min_share=0.0)), "NPU222")


def _profile(fp32_us: float, *, bf16_us: float | None = 100.0, other_us: float = 300.0, kind=ProfileKind.TORCH_NPU):
    b = ProfileBuilder(kind=kind)
    mm = {"core": "AI_CORE", "type": "MatMulV2", "input_shapes": "1024,1024;1024,1024", "output_shapes": "1024,1024"}
    b.kernel("MatMul_fp32", 100, fp32_us, input_dtypes="FLOAT;FLOAT", output_dtypes="FLOAT", **mm)
    if bf16_us is not None:
        b.kernel("MatMul_bf16", 2000, bf16_us, input_dtypes="DT_BF16;DT_BF16", output_dtypes="DT_BF16", **mm)
    b.kernel("Add_1", 3000, other_us, core="AI_VECTOR_CORE", type="Add", input_dtypes="FLOAT;FLOAT")
    return b.build()


def test_the_effect_is_the_profiles_own_rate_ratio():
    """400 µs in fp32 where the same MatMul took 100 µs in bf16: the fix takes 1/4 of the time."""
    (f,) = only(findings(_profile(400.0), ["NPU222"]), "NPU222")
    (c,) = f.effect.changes
    assert (c.factor, c.best, c.worst) == (0.25, 0.25, 0.25) and len(c.rows) == 1
    assert f.evidence["factors"][0]["measured"] is True and "rate ratio" in f.effect.basis


@pytest.mark.parametrize(("fp32_us", "fires"), [(100.0, True), (99.0, False)])
def test_share_of_compute_threshold(fp32_us, fires):
    # 100 of (100 + 100 bf16 + 300 other) = 20 %; minShare 0 so only the rule's own threshold cuts
    assert bool(only(findings(_profile(fp32_us), ["NPU222"], config=RuleConfig(min_share=0.0)), "NPU222")) is fires
    cfg = RuleConfig(min_share=0.0, thresholds=Thresholds(fp32_cube_min_percent=10))
    assert only(findings(_profile(60.0), ["NPU222"], config=cfg), "NPU222")


def test_not_for_a_program_that_is_not_pytorch():
    assert not only(findings(_profile(400.0, kind=ProfileKind.MSPROF), ["NPU222"]), "NPU222")


RECORDED_SITE = "/home/z30057886/.local/lib/python3.9/site-packages"


def test_real_alexnet_anchors_at_the_layers_with_the_most_fp32_time():
    """With torchvision's alexnet.py in the workspace: one finding, on the conv stack (most fp32
    cube time), the classifier's Linear layers as related information."""
    from rulekit import line_of

    from msprof_lsp.hints.context import RuleContext
    from msprof_lsp.hints.engine import run_rules
    from msprof_lsp.hints.registry import rules_matching
    from msprof_lsp.mapping.source.attribute import attribute
    from msprof_lsp.mapping.source.workspace import SourceWorkspace

    workspace = shared_fixture("Ascend-msinsight/workspace")
    alexnet = workspace / "torchvision" / "models" / "alexnet.py"
    text = alexnet.read_text(encoding="utf-8")
    profile = load_profile([shared_fixture(ALEXNET.format("text"))], use_cache=False).profile
    ws = SourceWorkspace([workspace], path_mappings=[(RECORDED_SITE, str(workspace))])
    ctx = RuleContext(profile, attribute(profile, ws), ws, RuleConfig())
    (f,) = only(run_rules(ctx, rules_matching(["NPU222"])), "NPU222")
    assert f.span.path == str(alexnet.resolve()) and f.span.line == line_of(text, "self.features = nn.Sequential(")
    assert [r.span.line for r in f.related] == [line_of(text, "self.classifier = nn.Sequential(")]
