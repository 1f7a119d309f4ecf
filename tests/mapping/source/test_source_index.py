from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from msprof_lsp.mapping.source import source_index as si
from msprof_lsp.mapping.source.source_index import MODULE_SCOPE, SourceIndex, SourceSyntaxError

MODEL = '''"""A small classifier.

Some notes at column 0 inside the docstring:
def not_a_function():
"""
import torch
import torch.nn as tnn
import torch.nn.functional as F
from torch import nn

try:
    import torch_npu  # noqa: F401
except ImportError:  # CPU / CUDA machines
    torch_npu = None


class Head(nn.Module):
    def __init__(self, d, classes):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.ReLU()
        self.drop = tnn.Dropout(0.3)
        self.fc2 = nn.Linear(4 * d, classes)
        self.block = nn.Sequential(
            nn.Linear(d, d),
            nn.ReLU(),
            nn.Dropout(0.1),
        )
        self.layers = nn.ModuleList([nn.Linear(d, d), nn.GELU()])

    @torch.no_grad()
    def forward(self, x):
        # 中文注释: 前向 😋
        x = self.block(x)
        for layer in self.layers:
            x = layer(x)
        x = self.drop(self.act(self.fc1(x)))
        y = F.dropout(F.relu(x), p=0.1, training=self.training)
        return self.fc2(y) @ y.t().float()


def train(model, loader, steps):
    import torch.optim as optim
    opt = optim.AdamW(model.parameters())
    for step, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(float(loss.item()))
        if step == steps:
            break


if __name__ == "__main__":
    train(Head(8, 2), [], 3)
'''


def at(text: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """(1-based line, code-point column) of the nth occurrence of ``needle`` -- computed without libcst."""
    pos = -1
    for _ in range(nth + 1):
        pos = text.index(needle, pos + 1)
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1)
    return line, col


@pytest.fixture(scope="module")
def index() -> SourceIndex:
    return SourceIndex.build("/w/model.py", MODEL)


def test_calls_have_exact_spans_and_text(index):
    for needle in ("self.fc1(x)", "F.relu(x)", "y.t()", "loss.item()", "self.drop(self.act(self.fc1(x)))"):
        line, col = at(MODEL, needle)
        found = [c for c in index.calls if c.text == needle and not c.operator]
        assert len(found) == 1, needle
        c = found[0]
        assert (c.span.path, c.span.line, c.span.col) == ("/w/model.py", line, col)
        assert (c.span.end_line, c.span.end_col) == (line, col + len(needle))


def test_qualified_names_follow_import_aliases(index):
    by_text = {c.text: c for c in index.calls}
    assert by_text["F.relu(x)"].qualname == "torch.nn.functional.relu"
    assert by_text["nn.ReLU()"].qualname == "torch.nn.ReLU"  # from torch import nn
    assert by_text["tnn.Dropout(0.3)"].qualname == "torch.nn.Dropout"  # import torch.nn as tnn
    assert by_text["torch.no_grad()"].qualname == "torch.no_grad"
    assert by_text["optim.AdamW(model.parameters())"].qualname == "torch.optim.AdamW"  # function-local import
    assert by_text["print(float(loss.item()))"].qualname == "builtins.print"
    assert by_text["Head(8, 2)"].qualname == "Head"  # defined in the file
    assert by_text["y.t()"].qualname == "" and by_text["y.t()"].receiver == "y"
    assert by_text["self.act(self.fc1(x))"].self_attr == "act"


def test_enclosing_function_statement_and_execution_order(index):
    fwd = index.functions["Head.forward"]
    assert fwd.def_line == at(MODEL, "def forward")[0]
    assert fwd.first_line == at(MODEL, "@torch.no_grad()")[0]  # what co_firstlineno reports
    assert fwd.cls == "Head"
    texts = [c.text for c in index.calls_in("Head.forward") if not c.operator]
    # arguments run before the call that takes them
    assert texts.index("self.fc1(x)") < texts.index("self.act(self.fc1(x))") < texts.index(
        "self.drop(self.act(self.fc1(x)))")
    assert texts.index("F.relu(x)") < texts.index("F.dropout(F.relu(x), p=0.1, training=self.training)")
    relu = next(c for c in index.calls if c.text == "F.relu(x)")
    line = MODEL.splitlines()[relu.span.line - 1]
    assert relu.function == "Head.forward"
    assert (relu.stmt.line, relu.stmt.col, relu.stmt.end_col) == (relu.span.line, 8, len(line))
    assert relu.depth == 1
    # the decorator runs in the class body, not in forward
    deco = next(c for c in index.calls if c.text == "torch.no_grad()")
    assert deco.function == "Head"
    item = next(c for c in index.calls if c.text == "loss.item()")
    assert item.in_loop and item.function == "train"
    occ = [c.occurrence for c in index.calls if c.text == "nn.Linear(d, d)"]
    assert occ == [0, 1]  # Sequential element and ModuleList element, same text


def test_module_attributes_sequential_elements_and_where_they_are_called(index):
    head = index.classes["Head"]
    assert head.bases == ("torch.nn.Module",)
    fc1 = head.attrs["fc1"]
    assert (fc1.class_name, fc1.ctor_qualname) == ("Linear", "torch.nn.Linear")
    assert (fc1.span.line, fc1.span.col) == at(MODEL, "nn.Linear(d, 4 * d)")
    assert head.attrs["drop"].ctor_qualname == "torch.nn.Dropout"
    block = head.attrs["block"]
    assert block.is_container
    assert [(e.index, e.class_name) for e in block.elements] == [(0, "Linear"), (1, "ReLU"), (2, "Dropout")]
    assert (block.elements[1].span.line, block.elements[1].span.col) == at(MODEL, "nn.ReLU()", 1)
    layers = head.attrs["layers"]
    assert [e.class_name for e in layers.elements] == ["Linear", "GELU"]
    calls = {attr: [index.calls[i].text for i in idx] for attr, idx in head.attr_calls.items()}
    assert calls["drop"] == ["self.drop(self.act(self.fc1(x)))"]
    assert calls["block"] == ["self.block(x)"]
    loop_call = next(c for c in index.calls if c.text == "layer(x)")
    assert loop_call.loop_attr == "layers"
    assert index.module_attr("Head", "act").class_name == "ReLU"


def test_imports_loops_and_entry_point(index):
    bound = {i.bound: i.target for i in index.imports if i.function == MODULE_SCOPE}
    assert bound == {"torch": "torch", "tnn": "torch.nn", "F": "torch.nn.functional", "nn": "torch.nn",
                     "torch_npu": "torch_npu"}
    assert index.torch_npu_import is not None
    assert index.torch_npu_import.span.line == at(MODEL, "import torch_npu")[0]
    assert index.main_guard is not None and index.main_guard.line == at(MODEL, 'if __name__ == "__main__":')[0]
    loops = {lp.function: lp for lp in index.loops}
    train_loop = loops["train"]
    assert train_loop.kind == "for" and train_loop.iter_text == "enumerate(loader)"
    assert train_loop.header.line == at(MODEL, "for step, (x, y)")[0]
    body = [index.calls[i].text for i in train_loop.calls]
    assert "loss.backward()" in body and "opt.step()" in body and "enumerate(loader)" not in body
    assert loops["Head.forward"].target == "layer"
    b = next(b for b in index.bindings if b.name == "opt")
    assert b.ctor_qualname == "torch.optim.AdamW"


def test_lookups_by_line(index):
    line = at(MODEL, "x = self.drop")[0]
    calls = index.calls_on_line(line)
    assert [c.text for c in calls][:1] == ["self.fc1(x)"]  # innermost first
    assert index.scope_at(line) == "Head.forward"
    assert index.scope_at(at(MODEL, "@torch.no_grad()")[0]) == "Head"
    assert index.scope_at(1) == MODULE_SCOPE
    assert index.statement_at(line).text == "x = self.drop(self.act(self.fc1(x)))"
    assert [f.qualname for f in index.functions_starting_at(at(MODEL, "@torch.no_grad()")[0])] == ["Head.forward"]


def test_syntax_error_is_specific_and_names_the_line():
    broken = MODEL.replace("        x = self.block(x)\n", "        x = self.block(x\n")
    with pytest.raises(SourceSyntaxError) as err:
        SourceIndex.build("/w/model.py", broken)
    assert err.value.path == "/w/model.py"
    assert err.value.line >= at(broken, "x = self.block(x")[0]
    assert "/w/model.py:" in str(err.value)


def _signature(ix: SourceIndex):
    return ([(c.span, c.text, c.qualname, c.function, c.order, c.stmt, c.occurrence, c.depth, c.in_loop)
             for c in ix.calls],
            [(f.qualname, f.span, f.body, f.def_line, f.first_line, f.calls) for f in ix.functions.values()],
            [(c.qualname, c.span, c.bases, dict(c.attrs), dict(c.attr_calls)) for c in ix.classes.values()],
            ix.imports, ix.loops, ix.statements, ix.bindings, ix.main_guard)


@pytest.mark.parametrize("name", ["argparse.py", "dataclasses.py", "textwrap.py", "functools.py", "string.py"])
def test_chunked_build_equals_whole_file_parse(name):
    """The per-statement chunking is an optimisation only: same index as one whole-file parse."""
    path = Path(sysconfig.get_paths()["stdlib"]) / name
    if not path.exists():
        pytest.skip(f"{path} not in this Python installation")
    text = path.read_text(encoding="utf-8")
    chunked = SourceIndex.build(str(path), text)
    whole = SourceIndex.build(str(path), text, chunked=False)
    assert len(chunked._chunks) > 5  # really chunked
    assert _signature(chunked) == _signature(whole)


def test_incremental_build_reuses_untouched_statements():
    first = SourceIndex.build("/w/model.py", MODEL)
    edited = MODEL.replace("        x = self.block(x)\n", "        x = self.block(x)\n        x = x * 2\n")
    again = SourceIndex.build("/w/model.py", edited, previous=first)
    assert _signature(again) == _signature(SourceIndex.build("/w/model.py", edited, chunked=False))
    reused = [c for c, frag in again._chunks.items() if first._chunks.get(c) is frag]
    assert reused and len(reused) == len(again._chunks) - 1  # only the class chunk was parsed again
    # the train() function moved one line down, with everything in it
    assert again.functions["train"].def_line == first.functions["train"].def_line + 1


def test_a_wrong_cut_falls_back_to_one_parse(monkeypatch):
    """If the chunk scan ever cuts inside a statement, the whole file is parsed in one piece."""
    real = si._split_chunks

    def bad_split(text):
        chunks = real(text)
        line, chunk = chunks[-1]
        half = chunk.index("(") + 1  # cut inside brackets: that piece cannot parse alone
        return chunks[:-1] + [(line, chunk[:half]), (line, chunk[half:])]

    monkeypatch.setattr(si, "_split_chunks", bad_split)
    ix = SourceIndex.build("/w/model.py", MODEL)
    assert _signature(ix) == _signature(SourceIndex.build("/w/model.py", MODEL, chunked=False))


def test_scanner_keeps_strings_brackets_and_decorators_together():
    text = ('x = """\nclass Fake:\n"""\n'
            "y = foo(\n1,\n)\n"
            "@dec\n@dec2\ndef f():\n    pass\n"
            "if x:\n    pass\nelse:\n    pass\n"
            "z = 1 + \\\n2\n")
    starts = [line for line, _ in si._split_chunks(text)]
    assert starts == [1, 4, 7, 11, 15]


def test_unary_minus_of_a_tensor_is_an_operator_site_literals_are_not():
    text = "import torch\n\n\ndef rotate_half(x):\n    x1, x2 = x.chunk(2, dim=-1)\n    return torch.cat((-x2, x1), dim=-1)\n"
    idx = SourceIndex.build("/w/rot.py", text)
    negs = [c for c in idx.calls if c.operator and c.callee == "u-"]
    assert [c.text for c in negs] == ["-x2"]  # not the two `-1` literals
    (neg,) = negs
    line = text.splitlines()[5]
    assert (neg.span.line, neg.span.col, neg.span.end_col) == (6, line.index("-x2"), line.index("-x2") + 3)
    from msprof_lsp.mapping.source.constructs import call_keys, op_keys

    assert op_keys("aten::neg") & call_keys(idx, neg.idx)  # aten::neg anchors on it


def test_optimizer_calls_of_a_module_level_script_are_optimizer_sites():
    # A script's module-level `optimizer` resolves to itself (a name of this file): its .step() and
    # .zero_grad() still anchor the Optimizer.step# / Optimizer.zero_grad# scopes (the tb_plugin
    # ResNet-50 script is such a script); a scheduler's or profiler's .step() does not.
    from msprof_lsp.mapping.source.constructs import annotation_keys, call_keys

    text = ("import torch\n"
            "optimizer = torch.optim.SGD(params, lr=0.1)\n"
            "sched = torch.optim.lr_scheduler.StepLR(optimizer, 1)\n"
            "optimizer.zero_grad()\n"
            "optimizer.step()\n"
            "sched.step()\n"
            "p.step()\n")
    idx = SourceIndex.build("/w/script.py", text)
    keys = {c.text: call_keys(idx, c.idx) for c in idx.calls if c.name in ("step", "zero_grad")}
    assert keys["optimizer.step()"] == annotation_keys("Optimizer.step#SGD.step")
    assert keys["optimizer.zero_grad()"] == annotation_keys("Optimizer.zero_grad#SGD.zero_grad")
    assert not keys["sched.step()"] and not keys["p.step()"]
