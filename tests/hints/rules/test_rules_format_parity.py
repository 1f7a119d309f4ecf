"""The same problem classes from every Ascend format (the advisor-parity item): dynamic shapes
(NPU107's OP State variant) and AI_CPU fallbacks (NPU201) from one run written by the spec-exact
writers as the torch_npu text export, the DB export and the msprof CLI result -- each at its
threshold and just below -- plus the real DB export (no opState column: said, not guessed) and
Level0 (no OP State recorded: NPU901's line says dynamic shape could not be judged)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import shared_fixture
from seedkit import CALL_IMPL, Launch, ProfilerConfig, UserCall, fwd, step_run

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.registry import rule
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.profile.model import Profile
from msprof_lsp.mapping.profile.readers.torch_npu_db import read as read_db
from msprof_lsp.mapping.profile.locations import ProfileLocation, no_progress
from msprof_lsp.mapping.profile.model import ProfileKind
from tests.synth import library as L
from tests.synth import write_msprof_cli, write_torch_npu_db, write_torch_npu_text
from tests.synth.run import AI_CPU, KernelSpec, OpSpec, Run

FORMATS = ("text", "db", "msprof")
X, W, OUT = (32, 3, 16, 16), (16, 3, 3, 3), (32, 16, 16, 16)


def _with_kernels(op: OpSpec, change) -> OpSpec:
    """``op`` with ``change(kernel)`` applied to every kernel of its tree (backward included)."""
    return replace(op, kernels=tuple(change(k) for k in op.kernels),
                   children=tuple(_with_kernels(c, change) for c in op.children),
                   backward=tuple(_with_kernels(b, change) for b in op.backward))


def _run(op: OpSpec, frames, **kw) -> Run:
    return step_run([UserCall(fwd("c = self.conv(img)"), (Launch(op, frames + CALL_IMPL),), label="conv")], steps=1, **kw)


def _load(run: Run, form: str, tmp: Path) -> Profile:
    writer = {"text": write_torch_npu_text, "db": write_torch_npu_db, "msprof": write_msprof_cli}[form]
    return load_location(locate(writer(run, tmp / form)), use_cache=False)


def _rule(profile: Profile, code: str) -> tuple[list, RuleContext]:
    ctx = RuleContext(profile, None, None, RuleConfig(min_share=0.0))
    return run_rules(ctx, [rule(code)]), ctx


def _conv_run(static_kernels: int, **kw) -> Run:
    conv = L.conv2d(X, W, OUT, conv_us=30.0)
    seen = [0]

    def state(k: KernelSpec) -> KernelSpec:
        seen[0] += 1
        return replace(k, op_state="static" if seen[0] <= static_kernels else "dynamic")

    return _run(_with_kernels(conv.op, state), conv.frames, **kw)


@pytest.mark.parametrize("form", FORMATS)
@pytest.mark.parametrize(("static", "fires"), [(0, True), (1, False)])
def test_all_dynamic_op_state_on_every_format(tmp_path, form, static, fires):
    profile = _load(_conv_run(static), form, tmp_path)
    states = set(profile.kernels["op_state"].astype(str))
    assert {"dynamic"} <= states and (("static" in states) is bool(static))
    if form == "msprof":
        # the msprof CLI writes no framework layer: without a torch version or torch source behind
        # the kernels, the program is not known to be PyTorch and torch_npu's advice is not given
        assert _rule(profile, "NPU107")[0] == []
        profile.meta.torch_npu_version = "2.1.0.post8"
    found, _ = _rule(profile, "NPU107")
    assert [f.evidence.get("variant") for f in found] == (["all dynamic"] if fires else [])
    if fires:
        compute = profile.kernels[profile.kernels["op_state"].astype(str) == "dynamic"]
        assert found[0].evidence["dynamic_kernels"] == len(compute) == 3  # trans_Cast, trans_TransData, Conv2D (forward only)


def test_level0_says_dynamic_shape_cannot_be_judged(tmp_path):
    profile = _load(_conv_run(0, config=ProfilerConfig(level="Level0")), "text", tmp_path)
    assert set(profile.kernels["op_state"].astype(str)) <= {"", "N/A"}  # no OP State column at Level0
    found, ctx = _rule(profile, "NPU107")
    assert found == []
    assert "dynamic-shape operators cannot be judged" in ctx.level1_skips["NPU107"]
    notice = run_rules(ctx, [rule("NPU901")])
    assert len(notice) == 1 and "dynamic-shape operators cannot be judged" in str(notice[0].evidence)


def test_level1_with_op_state_names_only_the_count(tmp_path):
    profile = _load(_conv_run(1), "text", tmp_path)
    ctx = RuleContext(profile, None, None, RuleConfig(min_share=0.0))
    run_rules(ctx, [rule("NPU107")])
    assert ctx.level1_skips == {}  # Level1: nothing skipped


def test_real_db_without_op_state_says_so():
    root = shared_fixture("Ascend-msinsight/db/level1/rank0_ascend_pt")
    profile = read_db(ProfileLocation(ProfileKind.TORCH_NPU_DB, root, 0), no_progress)
    assert set(profile.kernels["op_state"].astype(str)) <= {""}
    assert any("no opState column" in i.message for i in profile.issues)
    found, _ = _rule(profile, "NPU107")
    assert found == []  # the real text capture of the same job is all dynamic; the DB cannot tell


def _aicpu_run(dur_us: float) -> Run:
    conv = L.conv2d(X, W, OUT, conv_us=30.0)
    first = [True]

    def to_aicpu(k: KernelSpec) -> KernelSpec:
        if first[0] and k.type == "Cast":
            first[0] = False
            return replace(k, core=AI_CPU, name="Cast_AiCpu", dur_ns=int(round(dur_us * 1000)))
        return k

    return _run(_with_kernels(conv.op, to_aicpu), conv.frames, jitter_ns=0)  # exact durations at the boundary


@pytest.mark.parametrize("form", FORMATS)
@pytest.mark.parametrize(("dur_us", "fires"), [(20.0, True), (19.9, False)])
def test_aicpu_from_the_task_type_on_every_format(tmp_path, form, dur_us, fires):
    profile = _load(_aicpu_run(dur_us), form, tmp_path)
    k = profile.kernels
    assert (k["core"].astype(str) == AI_CPU).sum() == 1
    found, _ = _rule(profile, "NPU201")
    assert bool(found) is fires
    if fires:
        assert found[0].evidence["longest_us"] == pytest.approx(20.0)
    assert float(k["dur_ns"][k["core"].astype(str) == AI_CPU].iloc[0]) == dur_us * 1000
