"""NPU209 block-dim: built profiles at and just past the block dim and duration thresholds, the
core counts from msprof's info.json (the synthetic msprof CLI writer's spec-exact PROF_* output,
whose kernel table is counted here with the csv module), and the real torch_npu exports, which
write no core count: nothing is judged there."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import shared_fixture
from rulekit import ProfileBuilder, findings, frame, line_of, only

from msprof_lsp.hints.config import RuleConfig, Thresholds
from msprof_lsp.mapping.profile.cluster import load_profile
from tests.synth.examples import small_run
from tests.synth.write_msprof import write_msprof_cli

SOURCE = '''import torch


def block(x, w):
    return torch.matmul(x, w)
'''
CORES = {"ai_core_num": 24, "aiv_num": 48}


def _profile(src: Path, *, block_dim: int, core: str = "AI_CORE", dur_us: float = 100.0, cores=CORES):
    b = ProfileBuilder(extra=dict(cores))
    op = b.op("aten::matmul", 100, 60, stack=[frame(src, line_of(SOURCE, "torch.matmul"), "block")])
    b.kernel("MatMulV3_1", 150, dur_us, op=op, core=core, type="MatMulV3", block_dim=block_dim)
    return b.build()


@pytest.fixture
def src(tmp_path) -> Path:
    p = tmp_path / "block.py"
    p.write_text(SOURCE)
    return p


def test_block_dim_not_a_multiple_fires_on_the_call(src):
    (f,) = only(findings(_profile(src, block_dim=30), ["NPU209"], [src.parent]), "NPU209")
    assert f.span.line == line_of(SOURCE, "torch.matmul")
    (k,) = f.evidence["kernels"]
    assert (k["block_dim"], k["cores"], k["count"]) == (30, 24, 1)
    assert k["idle_core_share"] == pytest.approx(1 - 30 / 48, abs=1e-4)  # 2 waves of 24, 18 cores idle in the second
    assert f.message.startswith("Block dim: 1 kernel, 100 µs/step (1.0% of the device step), MatMulV3 block dim 30 on 24 cores: 38% of")


@pytest.mark.parametrize(("block_dim", "fires"), [(24, False), (48, False), (23, True), (25, True), (8, True)])
def test_multiples_of_the_core_count_are_fine(src, block_dim, fires):
    assert bool(only(findings(_profile(src, block_dim=block_dim), ["NPU209"], [src.parent]), "NPU209")) is fires


@pytest.mark.parametrize(("dur_us", "fires"), [(19.9, False), (20.0, True)])
def test_duration_threshold(src, dur_us, fires):
    assert bool(only(findings(_profile(src, block_dim=30, dur_us=dur_us), ["NPU209"], [src.parent]), "NPU209")) is fires
    cfg = RuleConfig(min_share=0.0, thresholds=Thresholds(block_dim_min_us=50))
    assert not findings(_profile(src, block_dim=30, dur_us=40), ["NPU209"], [src.parent], config=cfg)


def test_vector_kernels_use_the_vector_core_count(src):
    assert not findings(_profile(src, block_dim=48, core="AI_VECTOR_CORE"), ["NPU209"], [src.parent])
    (f,) = findings(_profile(src, block_dim=24, core="AI_VECTOR_CORE"), ["NPU209"], [src.parent])
    assert f.evidence["kernels"][0]["cores"] == 48


def test_unknown_core_count_judges_nothing(src):
    assert not findings(_profile(src, block_dim=30, cores={}), ["NPU209"], [src.parent])


def test_synthetic_msprof_output_counts_match_its_op_summary(tmp_path):
    root = write_msprof_cli(small_run(), tmp_path)
    info = json.loads((root / "host" / "info.json").read_text(encoding="utf-8"))
    aic, aiv = info["DeviceInfo"][0]["ai_core_num"], info["DeviceInfo"][0]["aiv_num"]
    (summary,) = root.glob("mindstudio_profiler_output/op_summary_*.csv")
    with open(summary, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    bad = [r for r in rows if r["Task Type"] in ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC")
           and float(r["Task Duration(us)"]) >= 20 and int(r["Block Num"]) > 0
           and int(r["Block Num"]) % (aic if r["Task Type"] == "AI_CORE" else aiv)]
    fs = only(findings(load_profile([root], use_cache=False).profile, ["NPU209"]), "NPU209")
    assert bad and sum(f.evidence["count"] for f in fs) == len(bad)
    assert {(k["type"], k["block_dim"]) for f in fs for k in f.evidence["kernels"]} == {
        (r["OP Type"], int(r["Block Num"])) for r in bad}


@pytest.mark.parametrize("fmt", ["text", "db"])
def test_real_torch_npu_exports_write_no_core_count(fmt):
    profile = load_profile([shared_fixture(f"Ascend-msinsight/{fmt}/level1/rank0_ascend_pt")], use_cache=False).profile
    assert "ai_core_num" not in profile.meta.extra and (profile.kernels["block_dim"] > 0).any()
    assert not findings(profile, ["NPU209"])
