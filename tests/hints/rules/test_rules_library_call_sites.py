"""A model that lives in an installed library the workspace lacks: the finding goes on the user's own
call into it, with the library line named in the message, in relatedInformation and in evidence."""

from __future__ import annotations

from rulekit import LIB, ProfileBuilder, applied, findings, frame, line_of, only

INFER = '''import torch
from timm import create_model


def predict(loader):
    model = create_model("vit_tiny_patch16_224")
    outs = []
    for x in loader:
        x = x.float()
        out = model(x)
        outs.append(out.argmax(-1).item())
    return outs
'''
TORCH_DROPOUT = f"{LIB}/torch/nn/functional.py(1295): dropout"
TIMM_MLP = f"{LIB}/timm/layers/mlp.py(46): forward"
TIMM_VIT = f"{LIB}/timm/models/vision_transformer.py(120): forward"
CALL_IMPL = f"{LIB}/torch/nn/modules/module.py(1527): _call_impl"


def _profile(infer):
    line = line_of(INFER, "out = model(x)")
    outer = [frame(infer, line, "predict"), frame(infer, 30, "<module>")]
    b = ProfileBuilder()
    cast = b.op("aten::to", 50, 20, stack=[frame(infer, line - 1, "predict"), *outer[1:]])
    b.kernel("aclnnCast_Cast_Cast", 60, 2.0, op=cast, type="Cast", core="AI_VECTOR_CORE")
    for t0, lib in ((100, TIMM_MLP), (400, TIMM_VIT)):
        b.op("aten::dropout", t0, 60, stack=[TORCH_DROPOUT, lib, CALL_IMPL, *outer])
        g = b.op("aclnnDropoutGenMaskV2", t0 + 10, 10)
        d = b.op("aclnnDropoutDoMask", t0 + 30, 10)
        b.kernel("aclnnDropoutGenMaskV2_DropOutGenMaskV4_DropOutGenMaskV4", t0 + 20, 6.0 if lib == TIMM_MLP else 2.0,
                 op=g, type="DropOutGenMaskV4")
        b.kernel("aclnnDropoutDoMask_DropOutDoMask_DropOutDoMask", t0 + 40, 4.0 if lib == TIMM_MLP else 1.0,
                 op=d, type="DropOutDoMask")
    item = b.op("aten::item", 900, 20, stack=[frame(infer, line + 1, "predict"), *outer[1:]])
    b.kernel("MemCopy", 910, 1.0, op=item, type="MemCopy")
    return b.build()


def test_finding_goes_on_the_users_call_and_names_the_library_line(tmp_path):
    infer = tmp_path / "infer.py"
    infer.write_text(INFER)
    (f,) = only(findings(_profile(infer), ["NPU250"], [tmp_path]), "NPU250")
    line = line_of(INFER, "out = model(x)")
    assert f.span.path == str(infer) and f.span.line == line
    # the library line with the most dropout time first (6+4 µs in mlp.py, 2+1 µs in vision_transformer.py)
    assert f.message.endswith(
        " Hot code in an installed library: timm/layers/mlp.py:46 (forward) and 1 more.")
    libs = [r for r in f.related if "installed library" in r.message]
    assert [r.message.split(" (")[0] for r in libs] == ["calls into timm/layers/mlp.py:46",
                                                         "calls into timm/models/vision_transformer.py:120"]
    assert all(r.span.path == str(infer) and r.span.line == line for r in libs)
    assert "10.0 µs/step" in libs[0].message and "3.0 µs/step" in libs[1].message
    assert [(e["path"], e["line"], e["function"]) for e in f.evidence["library_lines"]] == [
        (f"{LIB}/timm/layers/mlp.py", 46, "forward"), (f"{LIB}/timm/models/vision_transformer.py", 120, "forward")]
    assert [e["time_per_step_us"] for e in f.evidence["library_lines"]] == [10.0, 3.0]
    # the fixes edit the user's file, which is where the change can be made
    assert f.fixes and all(e.path == str(infer) for fix in f.fixes for e in fix.edits)
    assert "model.eval()" in applied(INFER, f.fixes[0])


def test_library_in_the_workspace_takes_the_finding_itself(tmp_path):
    """The same stacks with timm's files in the workspace: the frames there are the user's code."""
    infer = tmp_path / "infer.py"
    infer.write_text(INFER)
    for rel, line in (("timm/layers/mlp.py", 46), ("timm/models/vision_transformer.py", 120)):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        head = "import torch.nn.functional as F\n\n\nclass Block:\n    def forward(self, x):\n"
        pad = "        # ...\n" * (line - 1 - head.count("\n"))
        p.write_text(head + pad + "        x = F.dropout(x, 0.1, self.training)\n        return x\n")
    (f,) = only(findings(_profile(infer), ["NPU250"], [tmp_path]), "NPU250")
    assert "installed library" not in f.message and "library_lines" not in f.evidence
    # the dropout call that ran is in the workspace now: the related information points there
    assert {r.span.path for r in f.related} == {str(tmp_path / "timm" / "layers" / "mlp.py")}
    assert f.span.path == str(infer) and f.span.line == line_of(INFER, "out = model(x)")
