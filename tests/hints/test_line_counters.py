"""The hover's counter table data (hints.line_counters): one row per hot line and operator with the
mean PipeUtilization ratios (per pipe the larger of the cube and vector core's) and NPU202's bound
class of those means; computed once per analysis (the engine keeps it with the attribution)."""

from __future__ import annotations

import csv
from pathlib import Path

from conftest import shared_fixture
from tests.hints.rules.rulekit import ProfileBuilder, context, frame, line_of

from msprof_lsp.hints.line_counters import line_counters
from msprof_lsp.server.lsp.state.engine import Engine, LoadRequest
from msprof_lsp.server.analysis.settings import Settings

SOURCE = '''import torch


def block(x, w):
    y = torch.matmul(x, w)
    return y.relu()
'''


def _profile(src: Path):
    b = ProfileBuilder()
    mm = b.op("aten::matmul", 100, 60, stack=[frame(src, line_of(SOURCE, "torch.matmul"), "block")])
    relu = b.op("aten::relu", 300, 20, stack=[frame(src, line_of(SOURCE, "y.relu()"), "block")])
    for i, mac in enumerate((0.6, 0.9)):  # two MatMuls: mean mac 0.75, mte2 0.5
        b.kernel(f"MatMulV3_{i}", 150 + 100 * i, 80, op=mm, core="AI_CORE", type="MatMulV3",
                 pmu={"aic_mac_ratio": mac, "aic_mte2_ratio": 0.5, "aiv_vec_ratio": 0.0})
    b.kernel("Relu_1", 320, 10, op=relu, core="AI_VECTOR_CORE", type="Relu",
             pmu={"aic_mac_ratio": 0.0, "aiv_vec_ratio": 0.3, "aiv_mte2_ratio": 0.85, "aiv_mte3_ratio": 0.4})
    b.kernel("Cast_1", 340, 10, op=relu, core="AI_CPU", type="Cast")  # no counters: not a row
    return b.build()


def test_rows_per_line_and_operator(tmp_path):
    src = tmp_path / "block.py"
    src.write_text(SOURCE)
    ctx = context(_profile(src), [tmp_path])
    table = line_counters(ctx.profile, ctx.attribution)
    by_line = table[str(src.resolve())] if str(src.resolve()) in table else table[str(src)]
    (mm,) = by_line[line_of(SOURCE, "torch.matmul")]
    assert (mm.type, mm.kernel_class, mm.count, mm.bound) == ("MatMulV3", "Cube", 2, "no-bound")
    assert dict(mm.ratios)["mac"] == 0.75 and dict(mm.ratios)["mte2"] == 0.5 and mm.name == "MatMulV3_0"
    (relu,) = by_line[line_of(SOURCE, "y.relu()")]
    assert (relu.type, relu.kernel_class, relu.bound) == ("Relu", "Vector", "memory-bound")
    assert dict(relu.ratios) == {"vec": 0.3, "mac": 0.0, "mte2": 0.85, "mte3": 0.4}


def test_no_counters_no_table(tmp_path):
    src = tmp_path / "block.py"
    src.write_text(SOURCE)
    b = ProfileBuilder()
    op = b.op("aten::matmul", 100, 60, stack=[frame(src, line_of(SOURCE, "torch.matmul"), "block")])
    b.kernel("MatMulV3_1", 150, 80, op=op, core="AI_CORE", type="MatMulV3")
    ctx = context(b.build(), [tmp_path])
    assert line_counters(ctx.profile, ctx.attribution) == {}


RECORDED_SITE = "/home/z30057886/.local/lib/python3.9/site-packages"  # where the job's stacks point


def test_engine_keeps_the_real_table_with_the_attribution():
    """The real AlexNet Level1 text export with torchvision's alexnet.py: the classifier's forward
    MatMulV2 row on ``nn.Linear(256 * 6 * 6, 4096)`` is the csv's own counters, and another
    snapshot of the same attribution reuses the table instead of recomputing it."""
    workspace = shared_fixture("Ascend-msinsight/workspace")
    root = shared_fixture("Ascend-msinsight/text/level1/rank0_ascend_pt")
    settings = Settings(path_mappings=((RECORDED_SITE, str(workspace)),))
    engine = Engine()
    snap = engine.load(LoadRequest(folders=[workspace], settings=settings, explicit=root, use_cache=False))
    alexnet = workspace / "torchvision" / "models" / "alexnet.py"
    line = line_of(alexnet.read_text(encoding="utf-8"), "nn.Linear(256 * 6 * 6, 4096)")
    rows = snap.counters[str(alexnet.resolve())][line]
    with open(root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="", encoding="utf-8") as fh:
        mm = [r for r in csv.DictReader(fh) if r["Name"] == "aclnnAddmm_MatMulCommon_MatMulV2"
              and r["Input Shapes"].strip('"').startswith("32,9216;")]
    assert len(mm) == 1
    fwd = next(o for o in rows if o.type == "MatMulV2" and not o.backward)
    assert fwd.kernel_class == "Cube" and fwd.count == 1
    assert dict(fwd.ratios)["mte2"] == float(mm[0]["aic_mte2_ratio"]) and fwd.bound == "memory-bound"
    again = engine.reconfigure(engine.settings)
    assert again is not None and again.counters is snap.counters
