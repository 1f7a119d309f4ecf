"""NPU202 operator-no-bound: built profiles at and just past each threshold (pipe ratio and
duration), the bound classes, and the real 2025 advisor kernel table and the real AlexNet Level1
exports (text kernel_details.csv and DB TASK_PMU_INFO), whose figures are counted here with the
csv and sqlite3 modules."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from conftest import shared_fixture
from rulekit import ProfileBuilder, findings, frame, line_of, only

from msprof_lsp.hints import profile_query as pq
from msprof_lsp.hints.config import RuleConfig, Thresholds
from msprof_lsp.hints.profile_query import AOE_COMMAND, Bound, classify_bound as classify
from msprof_lsp.mapping.profile.cluster import load_profile
from msprof_lsp.mapping.profile.model import Profile, ProfileKind, ProfileMeta
from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table
from msprof_lsp.mapping.spans import Confidence

KERNELS_2025 = "Ascend-msprof-analyze/test/ut/advisor/compute_advice/data/kernel_details.csv"
ALEXNET = "Ascend-msinsight/{}/level1/rank0_ascend_pt"
PIPES = ("vec", "mac", "scalar", "mte1", "mte2", "mte3")

SOURCE = '''import torch_npu


def attend(q, k, v):
    out = torch_npu.npu_fusion_attention(q, k, v, 8, "BSH")
    return out[0]
'''

FA_GRAD = "FlashAttentionScoreGrad_Tiling"


def _profile(path: Path, *, dur_us: float = 300.0, scalar: float = 0.80, **more: float) -> Profile:
    """One FlashAttentionScoreGrad kernel on a MIX_AIC core whose busiest pipe is ``scalar``."""
    b = ProfileBuilder()
    text = path.read_text()
    op = b.op("aten::npu_fusion_attention", 100, 60, stack=[frame(path, line_of(text, "npu_fusion_attention"), "attend")])
    pmu = {"aic_mac_ratio": 0.45, "aic_scalar_ratio": scalar, "aic_mte2_ratio": 0.52, "aiv_vec_ratio": 0.42,
           "aiv_scalar_ratio": 0.30, "aiv_mte2_ratio": 0.20, "aiv_mte3_ratio": 0.21, "aic_fixpipe_ratio": 0.99, **more}
    b.kernel(FA_GRAD, 150, dur_us, op=op, core="MIX_AIC", type="FlashAttentionScoreGrad", op_state="static", pmu=pmu)
    # a bound MatMul and a kernel without counters never fire
    b.kernel("MatMulV3", 600, 400, op=op, core="AI_CORE", type="MatMulV3", pmu={"aic_mac_ratio": 0.7, "aic_mte2_ratio": 0.95})
    b.kernel("hcom_allReduce__1", 1200, 500, core="HCCL", type="hcom_allReduce_", pmu={"aic_mac_ratio": 0.0})
    return b.build()


@pytest.fixture
def src(tmp_path) -> Path:
    p = tmp_path / "attn.py"
    p.write_text(SOURCE)
    return p


def test_no_bound_kernel_fires_on_its_line_with_the_aoe_command(src):
    (f,) = only(findings(_profile(src), ["NPU202"], [src.parent]), "NPU202")
    assert f.span.path == str(src) and f.span.line == line_of(SOURCE, "npu_fusion_attention")
    assert f.confidence is Confidence.STACK
    (k,) = f.evidence["kernels"].values()
    # fixpipe (0.99) is not one of the pipes the advisor reads; scalar is the larger of aic/aiv
    assert k["ratios"] == {"vec": 0.42, "mac": 0.45, "scalar": 0.8, "mte2": 0.52, "mte3": 0.21}  # no mte1 column
    assert k["type"] == "FlashAttentionScoreGrad" and k["count"] == 1 and k["total_us"] == 300.0
    assert f.evidence["busiest_ratio"] == 0.8 and f.evidence["threshold_ratio"] == 0.8
    assert f.evidence["aoe_command"] == "aoe --job_type=2 --model_path=./aoe_dump --tune_ops_file=operator_tuning_file.cfg"
    assert json.loads(f.evidence["tune_ops"]) == {"tune_ops_name": [FA_GRAD]}
    assert "op_state" not in f.evidence  # static
    assert f.message.startswith("Operator no-bound: 1 kernel, 300 µs/step (3.0% of the device step), busiest pipe 80% ≤ 80%")
    assert AOE_COMMAND in f.message and f.fixes == []


@pytest.mark.parametrize(("scalar", "fires"), [(0.80, True), (0.801, False)])
def test_bound_ratio_threshold(src, scalar, fires):
    assert bool(only(findings(_profile(src, scalar=scalar), ["NPU202"], [src.parent]), "NPU202")) is fires


@pytest.mark.parametrize(("dur_us", "fires"), [(19.9, False), (20.0, True)])
def test_duration_threshold(src, dur_us, fires):
    assert bool(only(findings(_profile(src, dur_us=dur_us), ["NPU202"], [src.parent]), "NPU202")) is fires


def test_thresholds_are_read(src):
    cfg = RuleConfig(min_share=0.0, thresholds=Thresholds(pipe_bound_percent=85, no_bound_min_us=400))
    assert not findings(_profile(src), ["NPU202"], [src.parent], config=cfg)  # 300 µs < 400 µs
    cfg = RuleConfig(min_share=0.0, thresholds=Thresholds(pipe_bound_percent=85))
    (f,) = only(findings(_profile(src, scalar=0.84), ["NPU202"], [src.parent], config=cfg), "NPU202")
    assert f.evidence["threshold_ratio"] == 0.85


def test_a_busy_vector_pipe_is_compute_bound_not_no_bound(src):
    assert not findings(_profile(src, aiv_vec_ratio=0.81), ["NPU202"], [src.parent])


def test_no_pipe_counters_no_finding(src):
    b = ProfileBuilder()
    b.kernel("FlashAttentionScoreGrad_1", 150, 300, core="MIX_AIC", type="FlashAttentionScoreGrad")
    assert not findings(b.build(), ["NPU202"])


def test_classify_by_busiest_pipe():
    ratios = pd.DataFrame({"vec": [0.9, 0.1, 0.1, 0.2, 0.0], "mac": [0.1, 0.2, 0.1, 0.3, 0.0],
                           "scalar": [0.1, 0.1, 0.85, 0.4, 0.0], "mte2": [0.5, 0.95, 0.1, 0.8, 0.0]})
    assert list(classify(ratios, 0.8)) == [Bound.COMPUTE, Bound.MEMORY, Bound.SCALAR, Bound.NONE, Bound.NO_DATA]


def _csv_no_bound(path: Path, min_us: float = 20.0, limit: float = 0.8) -> list[dict]:
    """Rows the advisor's check would list, read with the csv module: some pipe ratio written
    and non-zero, none above ``limit``, duration at least ``min_us``."""
    out = []
    with open(path, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            vals = [float(r[c]) for p in PIPES for c in (f"aic_{p}_ratio", f"aiv_{p}_ratio") if r.get(c) not in (None, "", "N/A")]
            if any(vals) and max(vals) <= limit and float(r["Duration(us)"]) >= min_us:
                out.append(r)
    return out


def test_real_2025_kernel_table_flash_attention_grad_is_no_bound():
    path = shared_fixture(KERNELS_2025)
    rows = _csv_no_bound(path)
    assert [r["Type"] for r in rows] == ["FlashAttentionScoreGrad"] * 4
    profile = Profile(ProfileMeta(ProfileKind.TORCH_NPU, str(path)), kernels=read_kernel_table(path).to_frame())
    (f,) = only(findings(profile, ["NPU202"]), "NPU202")
    assert f.span is None  # no host ops: a profile-level finding
    assert f.evidence["count"] == 4
    (name, k), = f.evidence["kernels"].items()
    assert name == rows[0]["Name"] and k["type"] == "FlashAttentionScoreGrad"
    assert k["total_us"] == round(sum(float(r["Duration(us)"]) for r in rows), 1)
    scal = [float(r["aic_scalar_ratio"]) for r in rows]
    assert k["ratios"]["scalar"] == round(sum(scal) / 4, 3) and f.evidence["busiest_ratio"] == max(scal) == 0.786
    assert json.loads(f.evidence["tune_ops"]) == {"tune_ops_name": [rows[0]["Name"]]}
    assert f.evidence["op_state"] == "dynamic"


@pytest.fixture(scope="module")
def alexnet_text() -> Profile:
    return load_profile([shared_fixture(ALEXNET.format("text"))], use_cache=False).profile


def test_real_alexnet_text_export_counts_match_the_csv(alexnet_text):
    path = shared_fixture(ALEXNET.format("text")) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    rows = [r for r in _csv_no_bound(path) if r["Step Id"]]
    assert len(rows) == 61
    fs = only(findings(alexnet_text, ["NPU202"]), "NPU202")
    assert sum(f.evidence["count"] for f in fs) == len(rows)
    names = {n for f in fs for n in f.evidence["kernels"]}
    assert names <= {r["Name"] for r in rows}
    assert {"ReduceSum7", "Conv2DBackpropFilter6"} <= names


def test_real_alexnet_db_reads_task_pmu_info():
    root = shared_fixture(ALEXNET.format("db"))
    db = root / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    pmu: dict[int, dict[str, float]] = {}
    for gid, name, value in con.execute(
            "SELECT p.globalTaskId, s.value, p.value FROM TASK_PMU_INFO p JOIN STRING_IDS s ON s.id = p.name"):
        pmu.setdefault(gid, {})[name] = value
    durs = dict(con.execute("SELECT globalTaskId, endNs - startNs FROM TASK"))
    con.close()
    limit = 0.8
    expected = 0
    for gid, cols in pmu.items():
        vals = [cols[c] for p in PIPES for c in (f"aic_{p}_ratio", f"aiv_{p}_ratio") if c in cols]
        if any(vals) and max(vals) <= limit and durs.get(gid, 0) >= 20_000:
            expected += 1
    profile = load_profile([root], use_cache=False).profile
    k = profile.kernels_in_steps()
    ratios = pq.pipe_ratios(k)
    assert ratios is not None and set(ratios.columns) == set(PIPES)
    fs = only(findings(profile, ["NPU202"]), "NPU202")
    # every kernel with counters in the DB is inside the one profiled step
    assert expected > 0 and sum(f.evidence["count"] for f in fs) == expected


RECORDED_SITE = "/home/z30057886/.local/lib/python3.9/site-packages"


def test_real_alexnet_findings_sit_on_the_layer_lines(alexnet_text):
    """With torchvision's alexnet.py in the workspace: one finding per statement; the conv stack of
    ``self.features = nn.Sequential(...)`` holds most kernels and is the one over minShare."""
    from msprof_lsp.hints.context import RuleContext
    from msprof_lsp.hints.engine import run_rules
    from msprof_lsp.hints.registry import rules_matching
    from msprof_lsp.mapping.source.attribute import attribute
    from msprof_lsp.mapping.source.workspace import SourceWorkspace

    workspace = shared_fixture("Ascend-msinsight/workspace")
    alexnet = workspace / "torchvision" / "models" / "alexnet.py"
    text = alexnet.read_text(encoding="utf-8")
    ws = SourceWorkspace([workspace], path_mappings=[(RECORDED_SITE, str(workspace))])
    ctx = RuleContext(alexnet_text, attribute(alexnet_text, ws), ws, RuleConfig())
    fs = only(run_rules(ctx, rules_matching(["NPU202"])), "NPU202")
    (f,) = fs  # the others are under minShare (1 %): the step is 137 ms of mostly communication
    assert f.span.path == str(alexnet.resolve()) and f.span.line == line_of(text, "self.features = nn.Sequential(")
    assert f.confidence is Confidence.STACK
    assert {"Conv2DBackpropFilter", "MaxPoolWithArgmaxV1", "TransData"} <= {k["type"] for k in f.evidence["kernels"].values()}
    assert len(json.loads(f.evidence["tune_ops"])["tune_ops_name"]) == 10  # the advisor's top 10
    everything = only(run_rules(RuleContext(alexnet_text, ctx.attribution, ws, RuleConfig(min_share=0.0)),
                                rules_matching(["NPU202"])), "NPU202")
    assert len({g.span for g in everything}) == len(everything)  # one finding per statement
    assert sum(g.evidence["count"] for g in everything) == 61
