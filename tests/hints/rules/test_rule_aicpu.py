"""NPU201 aicpu-fallback: the real 2024 trace and 2023 kernel table (figures computed here with the
json/csv modules), and built profiles for the threshold, stack and static anchors, the fixes and
the CUDA float64 variant."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import shared_fixture
from rulekit import ProfileBuilder, applied, findings, frame, line_of, only

from msprof_lsp.hints.finding import Severity
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import Backend, Profile, ProfileKind, ProfileMeta
from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table
from msprof_lsp.mapping.profile.readers.torch_npu import read
from msprof_lsp.mapping.spans import Confidence

TRACE_2024 = "Ascend-msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"
KERNELS_2023 = "Ascend-msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"


def test_real_2024_trace_aicpu_casts():
    path = shared_fixture(TRACE_2024)
    events = json.loads(path.read_text(encoding="utf-8"))
    hw = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"] == "Ascend Hardware"}
    aicpu = {e["name"]: float(e["dur"]) for e in events if e.get("ph") == "X" and e["pid"] in hw and e.get("args", {}).get("Task Type") == "AI_CPU"}
    assert round(aicpu["aclnnReduceSum_CastAiCpu_Cast"], 1) == 188.1 and round(aicpu["aclnnCast_CastAiCpu_Cast"], 1) == 139.4

    fs = only(findings(read(ProfileLocation(ProfileKind.TORCH_NPU, path)), ["NPU201"]), "NPU201")
    assert len(fs) == 1
    f = fs[0]
    assert f.span is None  # no stack, no workspace: profile-level
    assert {n: v["max_us"] for n, v in f.evidence["kernels"].items()} == {n: round(d, 1) for n, d in aicpu.items()}
    assert f.evidence["count"] == len(aicpu) == 2
    assert f.evidence["longest_us"] == round(max(aicpu.values()), 1)
    assert f.evidence["types"] == {"Cast": 2}  # from the aclnn names: trace_view.json has no Type
    assert f"{round(sum(aicpu.values()), 0):.0f} µs/step" in f.message  # one step in this trace
    assert f.fixes == []


def test_real_2023_kernels_int32_casts_are_reported_not_cast():
    path = shared_fixture(KERNELS_2023)
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["Accelerator Core"] == "AI_CPU"]
    durs = [float(r["Duration(us)"]) for r in rows]
    assert len(rows) == 7 and all(r["Name"].startswith("trans_Cast_") for r in rows)

    profile = Profile(ProfileMeta(ProfileKind.TORCH_NPU, str(path)), kernels=read_kernel_table(path).to_frame())
    (f,) = only(findings(profile, ["NPU201"]), "NPU201")
    assert f.evidence["count"] == 7
    assert f.evidence["input_dtypes"] == {"INT32": sum(r["Input Data Types"] == "INT32" for r in rows)}
    assert f.evidence["longest_us"] == round(max(durs), 1) and f.evidence["shortest_us"] == round(min(durs), 1)
    assert round(min(durs)) == 74 and round(max(durs)) == 198  # the catalog: 74-198 µs
    assert f.evidence["cause"] == "int" and "INT32" in f.message and "not cast" in f.message
    assert f.fixes == []


SOURCE = '''import torch


def reduce(x):
    y = x.double()
    return y.sum()


def main():
    x = torch.ones(4)
    print(reduce(x))
'''


def _double_profile(path: Path, dur_us: float) -> Profile:
    b = ProfileBuilder()
    text = path.read_text()
    stack = [frame(path, line_of(text, "return y.sum()"), "reduce"), frame(path, line_of(text, "print(reduce(x))"), "main")]
    op = b.op("aten::sum", 100, 60, stack=stack)
    scope = b.op("aclnnReduceSum", 110, 40)
    b.kernel("aclnnReduceSum_ReduceSumAiCpu_ReduceSum", 150, dur_us, op=scope, core="AI_CPU", type="ReduceSum",
             input_dtypes="DOUBLE", output_dtypes="DOUBLE")
    b.kernel("aclnnMm_MatMulCommon_MatMulV2", 400, 500, op=op, core="AI_CORE", type="MatMulV2")  # not AI_CPU
    return b.build()


def test_double_fallback_anchored_by_stack_with_fix(tmp_path):
    src = tmp_path / "train.py"
    src.write_text(SOURCE)
    (f,) = only(findings(_double_profile(src, 30.0), ["NPU201"], [tmp_path]), "NPU201")
    assert f.span.path == str(src) and f.span.line == line_of(SOURCE, "return y.sum()")
    assert f.confidence is Confidence.STACK
    assert f.evidence["cause"] == "double" and f.evidence["input_dtypes"] == {"DOUBLE": 1}
    assert [r.span.line for r in f.related] == [line_of(SOURCE, "y = x.double()")]
    # 30 µs of a 10 ms step: 0.3 % -> hint
    assert "30.0 µs/step (0.3% of the device step)" in f.message and f.severity is Severity.HINT
    (fix,) = f.fixes
    new = applied(SOURCE, fix)
    assert "y = x.float()" in new and ".double()" not in new and "(review)" in fix.title


@pytest.mark.parametrize(("dur_us", "fires"), [(19.9, False), (20.0, True)])
def test_aicpu_threshold_is_the_longest_kernel(tmp_path, dur_us, fires):
    src = tmp_path / "train.py"
    src.write_text(SOURCE)
    fs = only(findings(_double_profile(src, dur_us), ["NPU201"], [tmp_path]), "NPU201")
    assert bool(fs) is fires


def test_threshold_setting_is_read(tmp_path):
    from msprof_lsp.hints.config import RuleConfig, Thresholds

    src = tmp_path / "train.py"
    src.write_text(SOURCE)
    cfg = RuleConfig(min_share=0.0, thresholds=Thresholds(aicpu_min_us=40))
    assert not findings(_double_profile(src, 30.0), ["NPU201"], [tmp_path], config=cfg)


MASKED = '''import torch


def clean(scores):
    scores[scores < 0] = 0.0
    return scores
'''


def test_index_put_without_stack_is_inferred_from_source(tmp_path):
    src = tmp_path / "clean.py"
    src.write_text(MASKED)
    b = ProfileBuilder()
    op = b.op("aten::index_put_", 100, 80)
    b.kernel("aclnnIndexPutImpl_IndexPutV2AiCpu_IndexPutV2", 120, 50, op=op, core="AI_CPU", type="IndexPutV2",
             input_dtypes="FLOAT;BOOL;FLOAT")
    (f,) = only(findings(b.build(), ["NPU201"], [tmp_path]), "NPU201")
    assert f.confidence is Confidence.INFERRED and f.severity is Severity.HINT  # 50 µs of a 10 ms step: 0.5 %
    assert f.span.line == line_of(MASKED, "scores[scores < 0] = 0.0")
    assert f.evidence["cause"] == "index_put" and "masked_fill_" in f.evidence["guide"]
    new = applied(MASKED, f.fixes[0])
    assert "scores.masked_fill_(scores < 0, 0.0)" in new


def test_communication_aicpu_kernels_are_skipped():
    b = ProfileBuilder()
    op = b.op("HcclAllreduce", 100, 300)
    b.kernel("hcom_allReduce_AicpuKernel", 120, 250, op=op, core="AI_CPU", type="hcom_allReduce_")
    assert not only(findings(b.build(), ["NPU201"]), "NPU201")


def test_cuda_float64_is_a_hint(tmp_path):
    src = tmp_path / "train.py"
    src.write_text(SOURCE)
    b = ProfileBuilder(backend=Backend.CUDA, kind=ProfileKind.KINETO)
    stack = [frame(src, line_of(SOURCE, "y = x.double()"), "reduce")]
    op = b.op("aten::sum", 100, 900, stack=stack, input_types="double", input_dims="32,8")
    b.kernel("void at::native::reduce_kernel<double>", 150, 800, op=op, core="GPU")
    # a Python float argument is typed double too, but has no dims: no float64 kernel
    # (the 2021 tb_plugin trace: aten::mul_ ["float", "double"] with dims [[256], []] in SGD)
    scalar = b.op("aten::mul_", 1000, 900, stack=stack, input_types="float;double", input_dims="256;")
    b.kernel("void at::native::vectorized_elementwise_kernel<4, MulFunctor<float>>", 1050, 800, op=scalar, core="GPU")
    (f,) = only(findings(b.build(), ["NPU201"], [tmp_path]), "NPU201")
    # 800 µs of 10 ms = 8 % would be a warning; float64 on CUDA is only a hint
    assert "8.0% of the device step" in f.message and f.severity is Severity.HINT
    assert f.message.startswith("float64 kernels")
    assert "y = x.float()" in applied(SOURCE, f.fixes[0])


def test_cpu_traces_have_no_aicpu_rule():
    b = ProfileBuilder(backend=Backend.CPU, kind=ProfileKind.KINETO)
    b.op("aten::sum", 100, 900, input_types="double")
    assert not findings(b.build(), ["NPU201"])
