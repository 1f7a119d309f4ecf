"""Source files are confined to the workspace: paths a profile records (``../outside/model.py``, an
absolute path elsewhere, a symlink out of the workspace, a path mapping into another folder) are
never read, never reported and never edited; their time counts as unattributed.

"Never read" is checked with an audit hook that records every ``open`` of a path in the outside
folder while the product maps, runs the rules and builds fixes."""

from __future__ import annotations

from pathlib import Path

import pytest
from srcmap_builder import ProfileBuilder

from tests.security.open_audit import opens_under

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.mapping.source.attribute import attribute
from msprof_lsp.mapping.profile.frames import parse_frame
from msprof_lsp.mapping.source.workspace import SourceWorkspace

MODEL = '''import torch.nn.functional as F


def forward(x):
    return F.dropout(F.relu(x), 0.1)  # MARKER-OUTSIDE
'''
INFER = '''import torch

from model import forward


def predict(loader):
    outs = []
    for x in loader:
        out = forward(x)
        outs.append(out)
    return outs
'''

@pytest.fixture()
def layout(tmp_path: Path):
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "model.py").write_text(MODEL)
    (outside / "infer.py").write_text(INFER)
    (root / "main.py").write_text("print('the workspace')\n")
    (root / "linked.py").symlink_to(outside / "model.py")  # a link out of the workspace
    return root, outside


def _profile(model_path: str, infer_path: str):
    """ReLU -> dropout in an inference loop (no backward): NPU101 and NPU250 would fire on it,
    with fixes, if the frames' files were read."""
    b = ProfileBuilder()
    b.step(1, 0, 100_000)
    stack = [f"{model_path}(5): forward", f"{infer_path}(9): predict", f"{infer_path}(20): <module>"]
    for i in range(4):
        t = 1000 + i * 10_000
        relu = b.op("aten::relu", t, 300, stack=stack)
        b.kernel("aclnnRelu_Relu_Relu", "Relu", t + 400, 20, host_op=relu, core="AI_VECTOR_CORE", step=1)
        drop = b.op("aten::dropout", t + 1000, 400, stack=stack)
        b.kernel("DropOutGenMaskV4_1", "DropOutGenMaskV4", t + 1500, 30, host_op=drop, core="AI_VECTOR_CORE", step=1)
        b.kernel("DropOutDoMask_1", "DropOutDoMask", t + 1600, 25, host_op=drop, core="AI_VECTOR_CORE", step=1)
    return b.build()


def _check(profile, ws: SourceWorkspace, outside: Path):
    """(attribution, findings, the files under ``outside`` that were opened)."""
    with opens_under(outside) as opened:
        attribution = attribute(profile, ws)
        found = run_rules(RuleContext(profile, attribution, ws, RuleConfig(min_share=0.0)))
    return attribution, found, opened


def _paths_of(attribution, found) -> set[str]:
    paths = {s.site.span.path for s in attribution.heat.spans}
    paths |= {lh.path for lh in attribution.heat.lines} | {fh.path for fh in attribution.heat.functions}
    for f in found:
        if f.span is not None:
            paths.add(f.span.path)
        paths |= {r.span.path for r in f.related}
        paths |= {e.path for fix in f.fixes for e in fix.edits}
    return paths


def test_the_audit_hook_sees_the_reads_it_guards(layout):
    """Control: with the outside folder as the workspace the same profile is read, mapped and
    fixed there (so the checks below can fail)."""
    _root, outside = layout
    ws = SourceWorkspace([outside])
    attribution, found, opened = _check(_profile(str(outside / "model.py"), str(outside / "infer.py")), ws, outside)
    assert attribution.heat.attributed_ns > 0
    assert any(p.endswith("model.py") for p in opened)
    assert {f.code for f in found} >= {"NPU101", "NPU250"}
    assert {f.span.path for f in found if f.span} == {str((outside / n).resolve()) for n in ("model.py", "infer.py")}
    assert any(e.path == str((outside / "model.py").resolve()) for f in found for fix in f.fixes for e in fix.edits)


@pytest.mark.parametrize("how", ["relative", "absolute", "symlink", "mapping"])
def test_frames_outside_the_workspace_are_never_read_reported_or_edited(layout, how):
    root, outside = layout
    mappings: list[tuple[str, str]] = []
    if how == "relative":  # resolved against the root: <root>/../outside/model.py
        model, infer = "../outside/model.py", "../outside/infer.py"
    elif how == "absolute":
        model, infer = str(outside / "model.py"), str(outside / "infer.py")
    elif how == "symlink":  # the workspace's linked.py points outside
        model, infer = str(root / "linked.py"), "/remote/elsewhere/infer.py"
    else:  # a mapping (e.g. from a workspace's pyproject.toml) into a folder that is not a root
        model, infer = "/remote/proj/model.py", "/remote/proj/infer.py"
        mappings = [("/remote/proj", str(outside))]
    ws = SourceWorkspace([root], path_mappings=mappings)
    profile = _profile(model, infer)
    attribution, found, opened = _check(profile, ws, outside)
    assert opened == []
    assert attribution.heat.attributed_ns == 0 and attribution.heat.unattributed_ns > 0
    assert _paths_of(attribution, found) == set()
    assert all(f.span is None for f in found)
    # and the workspace hands none of them out, without opening them
    with opens_under(outside) as opened:
        for p in (model, infer, "../outside/model.py", str(outside / "model.py")):
            assert ws.resolve(p) is None
            assert ws.frame_file(parse_frame(f"{p}(5): forward")) is None
        assert ws.text(outside / "model.py") is None and ws.index(outside / "model.py") is None
        assert str(root / "linked.py") not in ws.python_files() and ws.python_files() == [str(root / "main.py")]
    assert opened == []


def test_contains_resolves_symlinks_and_dot_dot(layout):
    root, outside = layout
    ws = SourceWorkspace([root])
    assert ws.contains(root / "main.py") and ws.contains(root)
    assert not ws.contains(root / ".." / "outside" / "model.py")
    assert not ws.contains(root / "linked.py")  # its target is outside
    assert not ws.contains(str(root) + "-sibling/x.py")  # a prefix of the name is not a parent
    (root / "sub").mkdir()
    (root / "sub" / "inner.py").write_text("x = 1\n")
    (root / "alias.py").symlink_to(root / "sub" / "inner.py")  # a link inside the workspace is fine
    assert ws.contains(root / "alias.py")
