"""Issue 25 defect 7: an msprof capture of bare kernels (a TileLang-style program: no framework
layer, no torch versions, no torch source) gets no PyTorch advice -- no torch.compile, DataLoader,
torch_npu.profiler(with_stack), AOE dumps or torch_npu allocator variables. The same kernels in a
torch_npu export get them. Spec-exact data: no real msprof capture of bare kernels is public."""

from __future__ import annotations

import re

import pytest
from rulekit import ProfileBuilder, findings

from msprof_lsp.hints.registry import all_rules
from msprof_lsp.mapping.profile.model import ProfileKind

FRAMEWORK = re.compile(r"torch|set_compile_mode|with_stack|\bAOE\b|aoe|DataLoader|PYTORCH_NPU_ALLOC_CONF|HOST_CACHE_CAPACITY")
PMU = {"aic_mac_ratio": 0.2, "aic_scalar_ratio": 0.3, "aic_mte2_ratio": 0.3, "aiv_vec_ratio": 0.2,
       "aiv_scalar_ratio": 0.2, "aiv_mte2_ratio": 0.2, "aiv_mte3_ratio": 0.2, "aic_fixpipe_ratio": 0.2}


def _bare_kernels(kind: ProfileKind):
    """100 µs kernels every 1 ms of a 10 ms step (90 % idle), pipes at most 30 % busy, dynamic
    op state, PYTORCH_NPU_ALLOC_CONF and HOST_CACHE_CAPACITY unset, no call stacks."""
    b = ProfileBuilder(kind=kind, env={"PYTORCH_NPU_ALLOC_CONF": "", "HOST_CACHE_CAPACITY": ""})
    for i in range(10):
        b.kernel(f"tilelang_gemm_kernel_{i % 2}", 1000 * i, 100, core="AI_CORE", type="tilelang_gemm",
                 op_state="dynamic", pmu=PMU)
    return b.build()


def test_torch_npu_export_gets_the_framework_advice():
    codes = {f.code for f in findings(_bare_kernels(ProfileKind.TORCH_NPU), ["NPU"])}
    assert {"NPU105", "NPU244", "NPU245", "NPU900"} <= codes


def test_msprof_bare_kernels_get_no_framework_advice():
    fs = findings(_bare_kernels(ProfileKind.MSPROF), ["NPU"])
    said = [(f.code, f.message) for f in fs if FRAMEWORK.search(f.message)]
    assert said == []
    assert not {"NPU105", "NPU202", "NPU244", "NPU245", "NPU900", "NPU901"} & {f.code for f in fs}


@pytest.mark.parametrize("code", ["NPU105", "NPU202", "NPU244", "NPU245", "NPU900", "NPU901"])
def test_rules_that_advise_pytorch_are_pytorch_only(code):
    assert next(r for r in all_rules() if r.code == code).pytorch_only
