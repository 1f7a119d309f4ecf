"""Library code as a mapping target: a frame under site-packages whose file is a workspace file is
the user's code for mapping; a library outside the workspace leaves the time on the user's own call
site, with the library line kept on the site (Site.library) and in the heat (SpanHeat.libraries)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import shared_fixture
from srcmap_builder import ProfileBuilder, locate

from msprof_lsp.mapping.source.attribute import attribute
from msprof_lsp.mapping.profile.frames import parse_frame
from msprof_lsp.mapping.profile.cluster import load_profile
from msprof_lsp.mapping.source.workspace import FrameKind, SourceWorkspace, library_label, package_path

SITE = "/home/u/.local/lib/python3.9/site-packages"


@pytest.mark.parametrize(("frame", "kind"), [
    (f"{SITE}/torchvision/models/alexnet.py(48): forward", FrameKind.LIBRARY),
    ("/opt/conda/lib/python3.10/dist-packages/timm/layers/mlp.py(45): forward", FrameKind.LIBRARY),
    (f"{SITE}/torch/nn/modules/conv.py(456): _conv_forward", FrameKind.FRAMEWORK),
    (f"{SITE}/torch_npu/utils/_step.py(40): f", FrameKind.FRAMEWORK),
    ("/home/u/miniconda3/lib/python3.9/multiprocessing/process.py(108): run", FrameKind.FRAMEWORK),
    ("torch/nn/functional.py(1500): relu", FrameKind.FRAMEWORK),
    ("/home/u/imagenet_script/main.py(354): train", FrameKind.USER),
    ("/work/vendor/megatron/core/layers.py(10): forward", FrameKind.THIRD_PARTY),
    ("<string>(1): <module>", FrameKind.SYNTHETIC),
    ("nn.Module: Linear_0", FrameKind.SYNTHETIC),
])
def test_frame_kinds(tmp_path, frame, kind):
    ws = SourceWorkspace([tmp_path], third_party_roots=["vendor/megatron"])
    assert ws.frame_kind(parse_frame(frame)) is kind


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    for rel in ("torchvision/models/alexnet.py", "models/alexnet.py", "train.py", "torch/nn/modules/conv.py",
                ".venv/lib/python3.9/site-packages/timm/layers/mlp.py", "vendor/timm/layers/mlp.py"):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x = 1\n", encoding="utf-8")
    return root


def test_library_frames_map_only_to_whole_package_paths_in_the_workspace(tmp_path):
    root = _tree(tmp_path)
    ws = SourceWorkspace([root], third_party_roots=["vendor/"])
    alexnet = parse_frame(f"{SITE}/torchvision/models/alexnet.py(48): forward")
    # the package path torchvision/models/alexnet.py is found whole (not models/alexnet.py)
    assert ws.frame_file(alexnet) == str(root / "torchvision" / "models" / "alexnet.py")
    assert package_path(alexnet.file) == "torchvision/models/alexnet.py"
    assert library_label(alexnet) == "torchvision/models/alexnet.py:48 (forward)"
    # a basename match is not enough for a library frame
    assert ws.frame_file(parse_frame(f"{SITE}/otherlib/train.py(3): main")) is None
    # the framework is never user code, even when the workspace holds a file of that path
    assert ws.frame_file(parse_frame(f"{SITE}/torch/nn/modules/conv.py(456): _conv_forward")) is None
    # a virtual environment inside the workspace is not the user's code; nor is a third-party root
    assert ws.frame_file(parse_frame(f"{root}/.venv/lib/python3.9/site-packages/timm/layers/mlp.py(4): f")) is None
    assert ws.frame_file(parse_frame(f"{SITE}/timm/layers/mlp.py(4): f")) is None  # only under vendor/ and .venv/


def test_path_mapping_of_site_packages_makes_library_frames_user_code(tmp_path):
    root = _tree(tmp_path)
    ws = SourceWorkspace([root], path_mappings=[(SITE, str(root / "models"))])
    # mapped: site-packages/alexnet.py -> models/alexnet.py (the suffix would pick torchvision/...)
    assert ws.frame_file(parse_frame(f"{SITE}/alexnet.py(48): forward")) == str(root / "models" / "alexnet.py")
    # a mapped path that is not a workspace file falls back to the package path
    assert ws.frame_file(parse_frame(f"{SITE}/torchvision/models/alexnet.py(48): forward")) == \
        str(root / "torchvision" / "models" / "alexnet.py")


TRAIN = """import torch


def main(model, loader):
    for x in loader:
        x = x.float()
        out = model(x)
        out.sum().item()
"""
LIB_FRAMES = [
    f"{SITE}/torch/nn/functional.py(1500): relu",
    f"{SITE}/timm/layers/mlp.py(45): forward",
    f"{SITE}/torch/nn/modules/module.py(1527): _call_impl",
    f"{SITE}/timm/models/vit.py(300): forward",
    f"{SITE}/torch/nn/modules/module.py(1527): _call_impl",
]


def test_library_outside_the_workspace_leaves_the_time_on_the_users_call_site(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(TRAIN, encoding="utf-8")
    line = locate(TRAIN, "model(x)")[0]
    b = ProfileBuilder()
    b.step(1, 0, 10_000)
    relu = b.op("aten::relu", 100, 300, stack=[*LIB_FRAMES, f"/remote/proj/train.py({line}): main"])
    b.kernel("aclnnRelu_Relu_Relu", "Relu", 500, 400, host_op=relu, core="AI_VECTOR_CORE", step=1)
    # ops the neighbouring lines launched directly (they also show the lines still hold up)
    cast = b.op("aten::to", 20, 50, stack=[f"/remote/proj/train.py({line - 1}): main"])
    b.kernel("aclnnCast_Cast_Cast", "Cast", 60, 20, host_op=cast, core="AI_VECTOR_CORE", step=1)
    direct = b.op("aten::item", 2000, 50, stack=[f"/remote/proj/train.py({line + 1}): main"])
    b.kernel("MemCopy", "MemCopy", 2100, 30, host_op=direct, step=1)
    heat = attribute(b.build(), SourceWorkspace([root])).heat
    by_line = {s.site.span.line: s for s in heat.spans}
    call = by_line[line]
    assert call.site.call_text == "out = model(x)" and call.device_ns == 400
    # the innermost library frame outside the framework: where the hot code is
    assert call.site.library is not None and call.site.library.file == f"{SITE}/timm/layers/mlp.py"
    assert [(library_label(f), ns) for f, ns in call.libraries] == [("timm/layers/mlp.py:45 (forward)", 400)]
    # an op the user's line launched through torch alone names no library
    assert by_line[line + 1].site.library is None and by_line[line + 1].libraries == []
    assert heat.unmapped_files == []  # library frames are not "unmapped user files"


MSINSIGHT = "Ascend-msinsight"
RECORDED_SITE = "/home/z30057886/.local/lib/python3.9/site-packages"


_LOADED: dict[str, object] = {}


def _msinsight(export: str):
    if export not in _LOADED:
        path = shared_fixture(f"{MSINSIGHT}/{export}/level1/rank0_ascend_pt")
        _LOADED[export] = load_profile([path], use_cache=False).profile
    return _LOADED[export]


@pytest.fixture(scope="module")
def msinsight_profile():
    return _msinsight("text")


@pytest.mark.parametrize("export", ["text", "db"])
@pytest.mark.parametrize("mapped", [True, False])
def test_real_alexnet_frames_map_to_forward_lines_48_to_51(export, mapped):
    """The real DDP AlexNet export (text and DB captures): its stacks run through
    torchvision/models/alexnet.py(48..51) under the recorded site-packages. With the workspace
    holding that file (and the path map, or by its package path alone), those frames are the
    user's code."""
    workspace = shared_fixture(f"{MSINSIGHT}/workspace")
    alexnet = str((workspace / "torchvision" / "models" / "alexnet.py").resolve())
    ws = SourceWorkspace([workspace], path_mappings=[(RECORDED_SITE, str(workspace))] if mapped else [])
    heat = attribute(_msinsight(export), ws).heat
    assert heat.attributed_ns > 0 and heat.spans
    frames = {(s.site.frame.file, s.site.frame.line, s.site.frame.func) for s in heat.spans}
    assert {line for _, line, _ in frames} <= {48, 49, 50, 51}
    assert {f for f, _, _ in frames} == {f"{RECORDED_SITE}/torchvision/models/alexnet.py"}
    assert {s.site.span.path for s in heat.spans} == {alexnet}
    # self.features(x) / self.classifier(x) run nn.Sequential elements: the time reaches the
    # element lines in __init__ and counts in forward; avgpool is line 49 itself
    assert {s.site.function for s in heat.spans} <= {"AlexNet.__init__", "AlexNet.forward"}
    assert any(s.site.span.line == 49 for s in heat.spans)
    forward = [f for f in heat.functions if f.function == "AlexNet.forward"]
    assert forward and forward[0].device_ns == heat.attributed_ns
    # main.py (the job's own script) is not in the workspace: listed, never guessed
    assert heat.unmapped_files == ["/home/z30057886/imagenet_script/main.py"]


def _independent_alexnet_forward(trace: Path) -> tuple[int, int]:
    """(kernels, ns) launched from ops whose call stack runs through alexnet.py, counted from
    trace_view.json with plain json: torch_to_npu flows tie a host op (the innermost cpu_op around
    the flow start, its stack the nearest one recorded on it or an enclosing op) to a kernel
    (the Ascend Hardware slice at the flow end)."""
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events

    def ns(t) -> int:
        return int(Decimal(str(t)) * 1000)

    hw = next(e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
              and e["args"]["name"] == "Ascend Hardware")
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    slices = {(e["tid"], ns(e["ts"])): e for e in events if e.get("ph") == "X" and e["pid"] == hw}
    starts = {e["id"]: e for e in events if e.get("cat") == "async_npu" and e["ph"] == "s"}
    count = total = 0
    for f in (e for e in events if e.get("cat") == "async_npu" and e["ph"] == "f"):
        s, k = starts[f["id"]], slices.get((f["tid"], ns(f["ts"])))
        if k is None:
            continue
        t = ns(s["ts"])
        around = sorted((o for o in ops if o["tid"] == s["tid"] and ns(o["ts"]) <= t <= ns(o["ts"]) + ns(o["dur"])),
                        key=lambda o: ns(o["dur"]))
        stack = next((o["args"]["Call stack"] for o in around if "Call stack" in o.get("args", {})), "")
        if "/torchvision/models/alexnet.py(" in stack:
            count += 1
            total += ns(k["dur"])
    return count, total


def test_real_alexnet_forward_time_equals_an_independent_count(msinsight_profile):
    """Forward device time reaching alexnet.py equals the kernels the trace itself links to ops
    under alexnet frames: 48 kernels, 2,318.9 µs in the one profiled step (the backward kernels
    reach the same lines through the autograd links on top of that)."""
    root = shared_fixture(f"{MSINSIGHT}/text/level1/rank0_ascend_pt")
    count, total = _independent_alexnet_forward(root / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    assert count == 48 and total == pytest.approx(2_318_931, abs=1_000)
    heat = attribute(msinsight_profile, SourceWorkspace([shared_fixture(f"{MSINSIGHT}/workspace")])).heat
    assert heat.fwd_ns == pytest.approx(total, rel=1e-4)
    assert heat.bwd_ns > 0 and heat.attributed_ns == heat.fwd_ns + heat.bwd_ns
