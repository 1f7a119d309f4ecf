from __future__ import annotations

from pathlib import Path

import pytest

from msprof_lsp.mapping.profile.frames import parse_frame
from msprof_lsp.mapping.source.workspace import SourceWorkspace


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    for rel, text in {
        "proj/model.py": "import torch\n\n\ndef f(x):\n    return torch.relu(x)\n",
        "proj/train.py": "print(1)\n",
        "proj/pkg/model.py": "y = 2\n",
        "proj/.venv/lib/python3.11/site-packages/lib_mod.py": "z = 3\n",
        "proj/venv2/pyvenv.cfg": "home = /usr\n",
        "proj/venv2/inside.py": "w = 4\n",
    }.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return tmp_path / "proj"


def test_remote_path_maps_by_longest_suffix(tree):
    ws = SourceWorkspace([tree])
    assert ws.resolve("/home/ma-user/work/proj/pkg/model.py") == tree / "pkg" / "model.py"
    assert ws.resolve("/home/ma-user/work/proj/train.py") == tree / "train.py"
    # two local model.py files match "model.py" equally well: no guess
    assert ws.resolve("/home/ma-user/model.py") is None
    # prefix-stripped Kineto path, resolved against the roots
    assert ws.resolve("model.py") == tree / "model.py"
    assert ws.resolve("pkg/model.py") == tree / "pkg" / "model.py"
    # Windows separators and drive letters
    assert ws.resolve("D:\\jobs\\PROJ\\pkg\\model.py") == tree / "pkg" / "model.py"
    # nothing from virtual environments is a candidate
    assert ws.resolve("/x/inside.py") is None and ws.resolve("/x/lib_mod.py") is None
    assert sorted(Path(p).name for p in ws.python_files()) == ["model.py", "model.py", "train.py"]


def test_explicit_mapping_wins_over_suffix(tree, tmp_path):
    other = tmp_path / "checkout"
    other.mkdir()
    (other / "train.py").write_text("print(2)\n")
    ws = SourceWorkspace([tree, other], path_mappings=[("/home/ma-user/work/proj/", str(other))])
    assert ws.resolve("/home/ma-user/work/proj/train.py") == other / "train.py"
    # a mapping whose target lacks the file falls back to suffix matching
    assert ws.resolve("/home/ma-user/work/proj/pkg/model.py") == tree / "pkg" / "model.py"
    # a mapping into a folder that is not a workspace root is not followed: suffix matching instead
    confined = SourceWorkspace([tree], path_mappings=[("/home/ma-user/work/proj/", str(other))])
    assert confined.resolve("/home/ma-user/work/proj/train.py") == tree / "train.py"


def test_unmapped_paths_are_reported_once(tree):
    ws = SourceWorkspace([tree])
    for _ in range(3):
        assert ws.resolve("/remote/elsewhere/utils.py") is None
        ws.note_unmapped("/remote/elsewhere/utils.py")
    ws.note_unmapped("/remote/other.py")
    assert ws.unmapped == ["/remote/elsewhere/utils.py", "/remote/other.py"]
    assert ws.take_new_unmapped() == ["/remote/elsewhere/utils.py", "/remote/other.py"]
    ws.note_unmapped("/remote/other.py")
    assert ws.take_new_unmapped() == []


@pytest.mark.parametrize("frame, user", [
    ("/usr/lib/python3.9/site-packages/torch/nn/functional.py(1500): relu", False),
    ("/opt/conda/lib/python3.10/dist-packages/apex/amp.py(12): f", False),
    ("torch/nn/modules/module.py(1747): _call_impl", False),  # Kineto, prefix-stripped
    ("/home/u/miniconda3/lib/python3.10/runpy.py(86): _run_code", False),  # stdlib
    ("/usr/local/Ascend/pytorch/torch_npu/utils/_step.py(40): f", False),
    ("<frozen runpy>(88): _run_code", False),
    ("<string>(1): <module>", False),
    ("<built-in method relu of type object at 0x7f>", False),
    ("nn.Module: Linear_0", False),
    ("/home/ma-user/work/proj/model.py(31): forward", True),
    ("model.py(14): forward", True),
    ("C:\\work\\proj\\train.py(9): main", True),
    ("/home/ma-user/work/vendor/megatron/core/layers.py(10): forward", False),  # third-party root
])
def test_user_frames(tree, frame, user):
    ws = SourceWorkspace([tree], third_party_roots=["vendor/megatron"])
    assert ws.is_user_frame(parse_frame(frame)) is user


def test_workspace_under_a_torch_directory_still_has_user_frames(tmp_path):
    root = tmp_path / "src" / "torch" / "examples"
    root.mkdir(parents=True)
    ws = SourceWorkspace([root])
    assert ws.is_user_frame(parse_frame(f"{root}/mnist.py(3): main"))
    assert not ws.is_user_frame(parse_frame("/other/torch/nn/functional.py(3): relu"))


def test_buffers_override_disk_and_syntax_errors_keep_the_last_good_index(tree):
    ws = SourceWorkspace([tree])
    path = tree / "model.py"
    first = ws.index(path)
    assert first is not None and "f" in first.functions
    assert ws.index(path) is first  # unchanged: cached
    ws.set_text(path, "def g(x):\n    return x\n")
    second = ws.index(path)
    assert second is not first and "g" in second.functions
    ws.set_text(path, "def g(x:\n    return x\n")
    assert ws.index(path) is second  # last good index
    err = ws.error(path)
    assert err is not None and err.line >= 1 and str(path) in str(err)
    ws.drop_text(path)
    assert "f" in ws.index(path).functions and ws.error(path) is None
    # a buffer for a file that is not on disk yet takes part in suffix matching
    ws.python_files()
    new = tree / "extra" / "layers.py"
    ws.set_text(new, "x = 1\n")
    assert ws.resolve("/remote/proj/extra/layers.py") == new


def test_source_encodings(tmp_path):
    p = tmp_path / "latin.py"
    p.write_bytes("# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n".encode("latin-1"))
    q = tmp_path / "bom.py"
    q.write_bytes(b"\xef\xbb\xbfx = '\xe4\xb8\xad'\n")
    ws = SourceWorkspace([tmp_path])
    assert "café" in ws.text(p)
    assert ws.text(q) == "x = '中'\n"
    assert ws.index(q) is not None
    assert ws.text(tmp_path / "missing.py") is None and ws.index(tmp_path / "missing.py") is None
