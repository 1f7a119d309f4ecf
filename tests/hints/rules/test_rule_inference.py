"""NPU250 dropout-in-inference: Ascend dropout kernels and Kineto train-mode dropout in runs without
backward or optimizer, anchored on the model call in the inference loop, with both fixes applied;
training runs (built, and the recorded sample trace) stay quiet."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from conftest import shared_fixture
from rulekit import ProfileBuilder, applied, findings, frame, line_of, only

from msprof_lsp.hints.rules.inference import training_evidence
from msprof_lsp.mapping.profile.load import load_location, locate
from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table
from msprof_lsp.mapping.profile.model import Backend, ProfileKind

REPO = Path(__file__).resolve().parents[3]

MODEL = '''import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(F.relu(self.fc(x)))
'''
INFER = '''import torch

from model import Net


def predict(loader):
    model = Net()
    model.load_state_dict(torch.load("net.pt"))
    outs = []
    for x in loader:
        out = model(x)
        outs.append(out)
    return outs
'''


def _write(tmp_path: Path) -> tuple[Path, Path]:
    m, i = tmp_path / "model.py", tmp_path / "infer.py"
    m.write_text(MODEL)
    i.write_text(INFER)
    return m, i


def _ascend(tmp_path: Path, *, extra: str = "", durs=(6.0, 4.0)):
    m, i = _write(tmp_path)
    stack = [frame(m, line_of(MODEL, "return self.drop("), "forward"), frame(i, line_of(INFER, "out = model(x)"), "predict"),
             frame(i, 20, "<module>")]
    b = ProfileBuilder()
    drop = b.op("aten::dropout", 100, 60, stack=stack)
    inner = b.op("npu::_npu_dropout", 105, 50)
    g = b.op("aclnnDropoutGenMaskV2", 110, 10)
    d = b.op("aclnnDropoutDoMask", 130, 10)
    b.kernel("aclnnDropoutGenMaskV2_DropOutGenMaskV4_DropOutGenMaskV4", 120, durs[0], op=g, type="DropOutGenMaskV4")
    b.kernel("aclnnDropoutDoMask_DropOutDoMask_DropOutDoMask", 140, durs[1], op=d, type="DropOutDoMask")
    del drop, inner
    if extra:
        b.op(extra, 300, 50, tid=2)
    return b.build()


def test_ascend_dropout_without_training_anchors_on_the_model_call(tmp_path):
    (f,) = only(findings(_ascend(tmp_path), ["NPU250"], [tmp_path]), "NPU250")
    assert f.span.path.endswith("infer.py") and f.span.line == line_of(INFER, "out = model(x)")
    assert f.time_per_step_us == pytest.approx(6.0 + 4.0) and f.evidence["count"] == 2
    assert [r.span.line for r in f.related] == [line_of(MODEL, "return self.drop(")]
    safe, review = f.fixes
    assert safe.safe and not review.safe
    new = applied(INFER, safe)
    assert new.splitlines()[line_of(new, "for x in loader:") - 2].strip() == "model.eval()"
    assert "with torch.inference_mode():" in applied(INFER, review)


@pytest.mark.parametrize("extra", ["autograd::engine::evaluate_function: ReluBackward0", "ReluBackward0", "Optimizer.step#SGD.step"])
def test_training_evidence_silences_it(tmp_path, extra):
    assert not only(findings(_ascend(tmp_path, extra=extra), ["NPU250"], [tmp_path]), "NPU250")


@pytest.mark.parametrize(("flag", "fires"), [("True", True), ("False", False)])
def test_kineto_dropout_train_flag(tmp_path, flag, fires):
    m, i = _write(tmp_path)
    b = ProfileBuilder(backend=Backend.CPU, kind=ProfileKind.KINETO)
    stack = [frame(m, 11, "forward"), frame(i, line_of(INFER, "out = model(x)"), "predict")]
    b.op("aten::dropout", 100, 42.5, stack=stack, concrete_inputs=f'["", "0.10000000000000001", "{flag}"]')
    b.op("aten::dropout", 300, 40.0, stack=stack, concrete_inputs=f'["", "0.10000000000000001", "{flag}"]')
    fs = only(findings(b.build(), ["NPU250"], [tmp_path]), "NPU250")
    assert bool(fs) is fires
    if fires:
        assert fs[0].time_per_step_us == pytest.approx(82.5)  # host time: a CPU trace has no kernels
        assert "2 dropout calls" in fs[0].message


def test_kernel_only_profiles_need_no_grad_kernels():
    b = ProfileBuilder()
    b.kernel("DropOutDoMask1", 100, 5, type="DropOutDoMask")
    (f,) = only(findings(b.build(), ["NPU250"]), "NPU250")
    assert f.span is None
    b.kernel("ReluGrad2", 200, 5, type="ReluGrad")
    assert not only(findings(b.build(), ["NPU250"]), "NPU250")


def test_recorded_training_trace_is_quiet():
    sample = REPO / "samples" / "cnn_classifier"
    trace = sorted((sample / "kineto").glob("*.pt.trace.json.gz"))[0]
    profile = load_location(locate(trace), use_cache=False)
    assert (profile.host_ops["concrete_inputs"].astype(str).str.contains('"True"')).any()  # train-mode dropout is there
    assert not only(findings(profile, ["NPU250"], [sample]), "NPU250")


# -- inference is judged from the whole profile ---------------------------------------------------

KD_2023 = "Ascend-msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"


def test_real_megatron_training_kernels_with_host_ops_are_quiet():
    """The 2023 Megatron export's kernels (dropout, ApplyAdamW, hcom_allReduce_, no *Grad types)
    with a forward-only host op table: no autograd node or Optimizer.step# on the host side, yet
    the kernels say training, so NPU250 is silent."""
    path = shared_fixture(KD_2023)
    kernels = read_kernel_table(path).to_frame()
    types = kernels["type"].astype(str)
    assert (types == "DropOutDoMask").sum() == 7 and (types == "ApplyAdamW").sum() == 28
    assert (types == "hcom_allReduce_").sum() == 14 and not types.str.contains("Grad").any()
    b = ProfileBuilder()
    b.op("aten::dropout", 100, 60)
    profile = replace(b.build(), kernels=kernels, steps=[])
    assert not only(findings(profile, ["NPU250"]), "NPU250")
    ev = training_evidence(profile)
    assert ev["optimizer_kernels"] == 28 and ev["gradient_collectives"] == 14 + 1  # allReduce + reduceScatter
    assert ev["backward_ops"] == ev["optimizer_steps"] == 0
    # the same export without its training kernels is an inference run: the rule fires
    keep = ~types.str.match(r"ApplyAdamW|hcom_").to_numpy()
    inference = replace(profile, kernels=kernels[keep].reset_index(drop=True))
    (f,) = only(findings(inference, ["NPU250"]), "NPU250")
    assert f.evidence["count"] == 14 and not any(training_evidence(inference).values())  # 7 masks, 7 DoMask


@pytest.mark.parametrize(("name", "type_", "core"), [
    ("aclnnLayerNormBackward_LayerNormGrad_LayerNormGrad", "LayerNormGrad", "AI_VECTOR_CORE"),
    ("aclnnApplyAdamW_ApplyAdamW_ApplyAdamW", "ApplyAdamW", "AI_VECTOR_CORE"),
    ("hcom_allReduce__428_0_1", "hcom_allReduce_", "HCCL"),
    ("hcom_reduceScatter__12_0_1", "hcom_reduceScatter_", "HCCL"),
])
def test_any_training_kernel_silences_it_even_with_host_ops(tmp_path, name, type_, core):
    """Host ops without autograd nodes or an optimizer scope (the one marker the rule used to look
    for) but one kernel of the backward pass, an optimizer update or a gradient collective."""
    profile = _ascend(tmp_path)
    b = _builder_with_kernel(tmp_path, name, type_, core)
    assert only(findings(profile, ["NPU250"], [tmp_path]), "NPU250")  # the inference run fires
    assert not only(findings(b, ["NPU250"], [tmp_path]), "NPU250")


def test_parameter_gathers_are_not_gradient_communication(tmp_path):
    (f,) = only(findings(_builder_with_kernel(tmp_path, "hcom_allGather__3_0_1", "hcom_allGather_", "HCCL"),
                         ["NPU250"], [tmp_path]), "NPU250")
    assert f.evidence["gradient_collectives"] == 0 and f.evidence["count"] == 2


def _builder_with_kernel(tmp_path: Path, name: str, type_: str, core: str):
    base = _ascend(tmp_path)
    b = ProfileBuilder()
    b.kernel(name, 500, 3.0, type=type_, core=core)
    extra = b.build().kernels
    kernels = pd.concat([base.kernels, extra], ignore_index=True)
    for col in base.kernels.columns:
        if isinstance(base.kernels[col].dtype, pd.CategoricalDtype):
            kernels[col] = kernels[col].astype(str).astype("category")
    return replace(base, kernels=kernels)
