"""NPU250 dropout-in-inference: Ascend dropout kernels and Kineto train-mode dropout in runs without
backward or optimizer, anchored on the model call in the inference loop, with both fixes applied;
training runs (built, and the recorded sample trace) stay quiet."""

from __future__ import annotations

from pathlib import Path

import pytest
from rulekit import ProfileBuilder, applied, findings, frame, line_of, only

from msprof_lsp.mapping.load import load_location, locate
from msprof_lsp.mapping.model import Backend, ProfileKind

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
