"""Fixes and suppressions applied to the samples' real files, then imported and run: the bugs
found that way (a backend that exists only after `import torch_npu`, a suppression comment that
landed in a docstring, a removed synchronize that took its comment and left `if ...: pass`)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import npu_standin
from fixkit import check_fix, line_of, load
from msprof_lsp.hints import suppress
from msprof_lsp.hints.fixes import apply_fixes, dataloader, host_sync, offer, optimizer, relu_dropout
from msprof_lsp.hints.fixes.edits import apply_edits

SAMPLES = Path(__file__).resolve().parents[3] / "samples"
CNN = SAMPLES / "cnn_classifier"

pytestmark = pytest.mark.skipif(not (CNN / "model.py").exists(), reason="samples/ not in this checkout")


# -- NPU101 with backend="npu": looked up on the first call, compiled only where it can fuse ------


def _cnn_out(source: str, name: str, state: dict) -> tuple[torch.Tensor, dict]:
    ns = load(source, name)
    net = ns["CNNClassifier"]()
    net.load_state_dict(state, strict=True)
    net.eval()
    with torch.no_grad():
        return net(torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))), ns


def test_npu_compile_fix_imports_anywhere_and_compiles_only_with_the_backend_and_torchair(monkeypatch):
    """The sample's model.py is imported before train.py imports torch_npu, and on a CPU without
    it: the fixed module looks nothing up at import. Without torchair the eager pair runs (no
    fusion claimed); with torch_npu's backend and torchair the pair is torch.compile'd with it."""
    text = (CNN / "model.py").read_text(encoding="utf-8")
    ln = line_of(text, "x = F.dropout(F.relu(self.fc2(x))")
    res = relu_dropout.compile_pair(text, ln, backend="npu")
    new = res.new_source
    assert "import torch_npu" not in new and 'torch.compile(pair, backend="npu")' in new
    torch.manual_seed(0)
    state = load(text, "cnn_npu_ref")["CNNClassifier"]().state_dict()
    ref, _ = _cnn_out(text, "cnn_npu_ref_out", state)
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # a CPU without torch_npu: the import fails
    out, ns = _cnn_out(new, "cnn_npu_cpu", state)
    assert torch.equal(ref, out) and ns["_relu_dropout_fn"]().__name__ == "pair"
    monkeypatch.delitem(sys.modules, "torch_npu")
    with npu_standin.importable() as registered:
        _, ns = _cnn_out(new, "cnn_npu_early", state)  # imported before torch_npu: no lookup yet
        import torch_npu  # noqa: F401  (train.py's import: registers the "npu" backend)

        assert registered == ["npu"]
        out = ns["CNNClassifier"]
        net = out()
        net.load_state_dict(state, strict=True)
        net.eval()
        eager = ns["_relu_dropout_fn"]()
        assert eager.__name__ == "pair" and not hasattr(eager, "_torchdynamo_orig_callable")  # no torchair: eager
        ns["_relu_dropout_fn"].cache_clear()
        monkeypatch.setitem(sys.modules, "torchair", types.ModuleType("torchair"))  # torchair installed
        compiled = ns["_relu_dropout_fn"]()
        assert getattr(compiled, "_torchdynamo_orig_callable", None) is not None  # torch.compile's wrapper
        with torch.no_grad():
            assert torch.allclose(net(torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))), ref, atol=1e-5)
    # applied again: nothing more
    assert relu_dropout.compile_pair(new, line_of(new, "x = _relu_dropout(self.fc2(x)"), backend="npu") is None


def test_npu_compile_fix_keeps_an_existing_guard():
    text = "import torch\nimport torch.nn.functional as F\ntry:\n    import torch_npu\nexcept ImportError:\n    torch_npu = None\n\n\ndef f(x):\n    return F.dropout(F.relu(x), p=0.1, training=True)\n"
    new = relu_dropout.compile_pair(text, 10, backend="npu").new_source
    assert new.count("import torch_npu") == 1
    assert relu_dropout.compile_pair(text, 10, backend="inductor").new_source.count("import torch_npu") == 1


# -- "Disable for this line/file" never lands in a docstring ---------------------------------------


def test_file_level_suppression_goes_after_the_docstring_and_silences_the_file():
    text = (CNN / "model.py").read_text(encoding="utf-8")
    edit = suppress.file_suppression_edit(text, "NPU241", str(CNN / "model.py"))
    new = apply_edits(text, [edit])
    table = suppress.suppressions(new)
    assert suppress.is_suppressed(table, 1, "NPU241") and suppress.is_suppressed(table, 40, "NPU241")
    assert not suppress.is_suppressed(table, 1, "NPU101")
    doc = load(text, "cnn_doc_ref")["__doc__"]
    assert load(new, "cnn_doc_file")["__doc__"] == doc
    again = suppress.file_suppression_edit(new, "NPU101")
    newer = apply_edits(new, [again])
    assert newer.count("# msprof: ignore-file[") == 1 and "# msprof: ignore-file[NPU241, NPU101]" in newer
    assert suppress.file_suppression_edit(newer, "NPU101") is None


def test_line_suppression_on_a_docstring_line_goes_after_the_closing_quotes():
    text = (CNN / "model.py").read_text(encoding="utf-8")
    edit = suppress.suppression_edit(text, 1, "NPU241")
    closing = [i for i, ln in enumerate(text.splitlines(), 1) if ln.strip() == '"""'][0]
    assert text.startswith('"""') and edit.line == closing > 1
    new = apply_edits(text, [edit])
    assert load(new, "cnn_doc_line")["__doc__"] == load(text, "cnn_doc_ref2")["__doc__"]
    table = suppress.suppressions(new)
    assert all(suppress.is_suppressed(table, n, "NPU241") for n in range(1, closing + 1))
    assert not suppress.is_suppressed(table, closing + 1, "NPU241")


def test_file_suppression_after_a_shebang_and_in_a_file_without_docstring():
    edit = suppress.file_suppression_edit("#!/usr/bin/env python\n# -*- coding: utf-8 -*-\nimport os\n", "NPU241")
    assert (edit.line, edit.new_text) == (3, "# msprof: ignore-file[NPU241]\n")
    edit = suppress.file_suppression_edit('"""doc"""', "NPU241")
    assert apply_edits('"""doc"""', [edit]) == '"""doc"""\n# msprof: ignore-file[NPU241]'
    # only a real comment counts
    assert suppress.FILE not in suppress.suppressions('s = "# msprof: ignore-file[NPU241]"\n')


# -- NPU108: removing a synchronize keeps its comment, and an `if` left empty goes when pure ------


def test_sample_synchronize_removed_with_its_if_and_comment_and_the_script_runs(tmp_path):
    text = (CNN / "train.py").read_text(encoding="utf-8")
    ln = line_of(text, "torch.npu.synchronize()")
    res = host_sync.remove_synchronize(text, ln)
    new = check_fix(text, res, allowed_lines={ln - 1, ln}, safe=False)
    assert 'if device.type == "npu":' not in new and "pass" not in new.splitlines()[ln - 2]
    assert "# make the per-step log line reflect finished work" in new
    assert host_sync.remove_synchronize(new, ln) is None
    outputs = []
    for name, source in (("ref", text), ("fixed", new)):
        work = tmp_path / name
        shutil.copytree(CNN, work, ignore=shutil.ignore_patterns("kineto", "npu_profile", "__pycache__"))
        (work / "train.py").write_text(source, encoding="utf-8")
        proc = subprocess.run([sys.executable, "train.py", "--steps", "2", "--batch-size", "4", "--device", "cpu"],
                              cwd=work, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outputs.append([ln for ln in proc.stdout.splitlines() if ln.startswith("step ")])
    assert outputs[0] == outputs[1] and len(outputs[0]) == 2


SYNC_IN_IFS = '''import torch


def step(xs, dev, flags):
    total = 0
    for x in xs:
        total += x
        if dev.type == "npu" and not flags.fast:
            # wait for the device
            torch.npu.synchronize()  # keep logs honest
        if ready(dev):
            torch.npu.synchronize()  # ready() may do work
        if flags.a:
            pass
        elif flags.b:
            torch.npu.synchronize()  # the elif stays
    return total
'''


def test_synchronize_in_pure_if_impure_if_and_elif():
    pure = host_sync.remove_synchronize(SYNC_IN_IFS, line_of(SYNC_IN_IFS, "keep logs honest")).new_source
    assert 'if dev.type == "npu"' not in pure
    assert "        # wait for the device\n        # keep logs honest\n        if ready(dev):" in pure
    impure = host_sync.remove_synchronize(SYNC_IN_IFS, line_of(SYNC_IN_IFS, "ready() may do work")).new_source
    assert "        if ready(dev):\n            pass  # ready() may do work\n" in impure
    elif_ = host_sync.remove_synchronize(SYNC_IN_IFS, line_of(SYNC_IN_IFS, "the elif stays")).new_source
    assert "        elif flags.b:\n            pass  # the elif stays\n" in elif_
    calls: list[str] = []
    ns = load(pure, "sync_pure", torch=_torch_with_npu(calls))
    flags = type("F", (), {"fast": False, "a": True, "b": False})()
    dev = type("D", (), {"type": "npu"})()
    ns["ready"] = lambda d: calls.append("ready") or False
    assert ns["step"]([1, 2, 3], dev, flags) == 6 and calls == ["ready"] * 3  # ready() still runs


def _torch_with_npu(calls: list[str]):
    import types

    fake = types.ModuleType("torch")
    fake.npu = types.SimpleNamespace(synchronize=lambda: calls.append("sync"))
    return fake


# -- alternatives for one construct: one group, and never both applied ----------------------------

OPTIM = '''import torch
import torch.nn as nn


def build(seed):
    torch.manual_seed(seed)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, optimizer
'''


def _trained(ns: dict) -> torch.Tensor:
    model, opt = ns["build"](0)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    return model.weight.detach().clone()


def _optimizer_fixes(text: str) -> list:
    ln = line_of(text, "torch.optim.SGD(")
    out = [offer(t, text, ln, path="opt.py") for t in (optimizer.fused_optimizer, optimizer.npu_fused_optimizer)]
    assert all(r is not None for r in out)
    return [r.fix for r in out]


def test_optimizer_alternatives_share_a_group_and_only_the_first_applies():
    fused, npu = _optimizer_fixes(OPTIM)
    assert fused.group and fused.group == npu.group
    ref = _trained(load(OPTIM, "opt_ref"))
    for first, second, stub in ((fused, npu, {}), (npu, fused, {"torch_npu": npu_standin.make()})):
        done = apply_fixes(OPTIM, [first, second], path="opt.py")
        assert done.applied == (first,) and [d.fix for d in done.declined] == [second]
        assert f"an alternative to '{first.title}'" in done.declined[0].reason
        assert not ("NpuFusedSGD" in done.source and "fused=True" in done.source)
        assert torch.allclose(_trained(load(done.source, "opt_fixed", **stub)), ref, atol=1e-6)
        # on the fixed text, the other transform refuses and says why
        why: list[str] = []
        other = optimizer.npu_fused_optimizer if first is fused else optimizer.fused_optimizer
        assert other(done.source, line_of(done.source, "optimizer = "), why=why) is None
        assert "the other NPU220 fix" in why[0]


def test_a_fix_whose_construct_another_fix_changed_is_refused():
    text = (CNN / "train.py").read_text(encoding="utf-8")
    ln = line_of(text, "loader = DataLoader(dataset")
    two, four = (offer(dataloader.tune_dataloader, text, ln, workers=w).fix for w in (2, 4))
    assert not two.group  # not declared alternatives: refused for touching the same line
    done = apply_fixes(text, [two, four])
    assert done.applied == (two,) and f"line {ln}" in done.declined[0].reason and two.title in done.declined[0].reason
    assert "num_workers=2" in done.source and "num_workers=4" not in done.source
    ast.parse(done.source)
