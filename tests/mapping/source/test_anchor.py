"""Frame -> call anchoring, through ``attribute`` on profiles built the way readers link them."""

from __future__ import annotations

from pathlib import Path

from srcmap_builder import ProfileBuilder, locate, span_tuple

from msprof_lsp.mapping.source.attribute import attribute
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.source.workspace import SourceWorkspace

MODEL = '''import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self, d=8, classes=2):
        super().__init__()
        self.fc1 = nn.Linear(d, d)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(d, classes)
        self.block = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Dropout(0.1))

    def forward(self, x):
        s = "中文😋"; x = self.block(x)
        x = self.drop(self.act(self.fc1(x)))
        x = F.dropout(F.relu(x), p=0.1, training=self.training)
        h = F.relu(x) + F.relu(-x)
        return self.fc2(h)

    def head(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def train(model, batches, opt):
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        print(loss.item())
'''
REMOTE = "/home/ma-user/work/proj/model.py"
LIB = "/usr/local/python3.9/lib/python3.9/site-packages/torch/nn/modules/module.py(1747): _call_impl"
TRAIN = "/home/ma-user/work/proj/train.py(40): main"


def line_of(text: str, needle: str, nth: int = 0) -> int:
    return locate(text, needle, nth)[0]


def ascend_stack(line: int, func: str = "forward") -> list[str]:
    """A torch_npu Call stack: innermost first, executing lines, library frames in between."""
    return [f"{REMOTE}({line}): {func}", LIB, TRAIN]


def workspace(tmp_path: Path, text: str = MODEL) -> SourceWorkspace:
    root = tmp_path / "proj"
    root.mkdir(exist_ok=True)
    (root / "model.py").write_text(text, encoding="utf-8")
    return SourceWorkspace([root])


def op_with_kernel(b: ProfileBuilder, name: str, scope: str, ktype: str, t: int, *, parent: int, stack=None,
                   module: int = -1, dur: int = 10) -> tuple[int, int]:
    """aten op > dispatch scope > one kernel; returns (aten op row, kernel row)."""
    op = b.op(name, t, 50, parent=parent, stack=stack, module=module)
    sc = b.op(scope, t + 1, 40, parent=op, stack=stack, module=module)
    k = b.kernel(f"{scope}_{ktype}_{ktype}", ktype, t + 100, dur, host_op=sc, step=1)
    return op, k


def test_relu_and_dropout_on_one_line_get_distinct_spans(tmp_path):
    line = line_of(MODEL, "x = F.dropout(F.relu(x)")
    b = ProfileBuilder()
    b.step(1, 0, 10_000)
    st = b.op("ProfilerStep#1", 0, 10_000)
    _, k_relu = op_with_kernel(b, "aten::relu", "aclnnRelu", "Relu", 100, parent=st, stack=ascend_stack(line))
    drop = b.op("aten::dropout", 300, 80, parent=st, stack=ascend_stack(line))
    nd = b.op("npu::_npu_dropout", 301, 70, parent=drop, stack=ascend_stack(line))
    k_mask = b.kernel("StatelessDropOutGenMask23", "DSAStatelessGenBitMask", 400, 99, host_op=nd, core="DSA_SQE",
                      step=1)
    k_do = b.kernel("DropOutDoMask24", "DropOutDoMask", 500, 26, host_op=nd, step=1)
    a = attribute(b.build(), workspace(tmp_path))
    relu = a.site_of_kernel(k_relu)
    assert span_tuple(relu.span) == locate(MODEL, "F.relu(x)")
    assert relu.call_text == "F.relu(x)" and relu.confidence is Confidence.STACK
    assert relu.function == "Net.forward" and relu.frame.line == line
    for k in (k_mask, k_do):
        site = a.site_of_kernel(k)
        assert span_tuple(site.span) == locate(MODEL, "F.dropout(F.relu(x), p=0.1, training=self.training)")
    assert relu.span.path == str((tmp_path / "proj" / "model.py").resolve())


def test_sub_module_calls_on_one_line_with_module_events(tmp_path):
    """self.drop(self.act(self.fc1(x))): linear, relu and dropout each go to their attribute call."""
    line = line_of(MODEL, "x = self.drop(")
    b = ProfileBuilder()
    b.step(1, 0, 10_000)
    st = b.op("ProfilerStep#1", 0, 10_000)
    net = b.module("Net", 0, 50, 5000)
    lin = b.module("Linear", 0, 100, 100, parent=net)
    act = b.module("ReLU", 0, 300, 100, parent=net)
    drp = b.module("Dropout", 0, 500, 100, parent=net)
    kernels = {}
    for name, scope, ktype, t, mod in (("aten::linear", "aclnnAddmm", "MatMulV2", 100, lin),
                                       ("aten::relu", "aclnnRelu", "Relu", 300, act),
                                       ("aten::dropout", "npu::_npu_dropout", "DropOutDoMask", 500, drp)):
        kernels[name] = op_with_kernel(b, name, scope, ktype, t, parent=st, stack=ascend_stack(line), module=mod)[1]
    a = attribute(b.build(), workspace(tmp_path))
    assert span_tuple(a.site_of_kernel(kernels["aten::linear"]).span) == locate(MODEL, "self.fc1(x)")
    assert span_tuple(a.site_of_kernel(kernels["aten::relu"]).span) == locate(MODEL, "self.act(self.fc1(x))")
    assert span_tuple(a.site_of_kernel(kernels["aten::dropout"]).span) == locate(
        MODEL, "self.drop(self.act(self.fc1(x)))")


def test_same_op_twice_on_a_line_follows_execution_order(tmp_path):
    """self.fc2(F.relu(self.fc1(x))) without module events: the first aten::linear of each step is
    fc1 (arguments run first), the second fc2."""
    line = line_of(MODEL, "return self.fc2(F.relu(self.fc1(x)))")
    b = ProfileBuilder()
    ks = []
    for step in (1, 2):
        t0 = step * 100_000
        b.step(step, t0, t0 + 50_000)
        st = b.op(f"ProfilerStep#{step}", t0, 50_000)
        for i in range(2):
            op = b.op("aten::linear", t0 + 1000 * (i + 1), 500, parent=st, stack=ascend_stack(line, "head"))
            mm = b.op("aten::addmm", t0 + 1000 * (i + 1) + 10, 400, parent=op, stack=ascend_stack(line, "head"))
            ks.append(b.kernel("aclnnAddmm_MatMulCommon_MatMulV2", "MatMulV2", t0 + 1000 * (i + 1) + 50, 30 + i,
                               host_op=mm, step=step))
    a = attribute(b.build(), workspace(tmp_path))
    fc1 = locate(MODEL, "self.fc1(x)", 1)  # the one in head()
    fc2 = locate(MODEL, "self.fc2(F.relu(self.fc1(x)))")
    assert [span_tuple(a.site_of_kernel(k).span) for k in ks] == [fc1, fc2, fc1, fc2]


def test_uneven_counts_fall_back_to_the_statement(tmp_path):
    line = line_of(MODEL, "return self.fc2(F.relu(self.fc1(x)))")
    b = ProfileBuilder()
    b.step(1, 0, 50_000)
    st = b.op("ProfilerStep#1", 0, 50_000)
    ks = [op_with_kernel(b, "aten::linear", "aclnnMm", "MatMulV2", 1000 * (i + 1), parent=st,
                         stack=ascend_stack(line, "head"))[1] for i in range(3)]
    a = attribute(b.build(), workspace(tmp_path))
    stmt = locate(MODEL, "return self.fc2(F.relu(self.fc1(x)))")
    for k in ks:
        site = a.site_of_kernel(k)
        assert span_tuple(site.span) == stmt and site.kind == "statement"


def kineto_stack(*inner: str, def_line: int, outer=("nn.Module: Net_0", "train.py(21): main")) -> str:
    """Kineto verbose ``Call stack``: ';'-joined, innermost first, trailing ';', def-line frames."""
    return ";".join((*inner, f"model.py({def_line}): forward", *outer)) + ";"


def test_kineto_def_line_frames_find_the_call_in_the_body(tmp_path):
    def_line = line_of(MODEL, "def forward")
    b = ProfileBuilder(kind=ProfileKind.KINETO)
    b.step(1, 0, 100_000)
    st = b.op("ProfilerStep#1", 0, 100_000)
    relu_mod = kineto_stack("torch/nn/functional.py(1760): relu", "torch/nn/modules/activation.py(139): forward",
                            "nn.Module: ReLU_1", def_line=def_line)
    seq_relu = kineto_stack("torch/nn/functional.py(1760): relu", "torch/nn/modules/activation.py(139): forward",
                            "nn.Module: ReLU_0", "torch/nn/modules/container.py(250): forward",
                            "nn.Module: Sequential_0", def_line=def_line)
    functional = kineto_stack("torch/nn/functional.py(1760): relu", def_line=def_line)
    rows = {}
    t = 100
    for key, stack in (("seq", seq_relu), ("act", relu_mod), ("f1", functional), ("f2", functional),
                       ("f3", functional)):
        rows[key] = b.op("aten::relu", t, 50, parent=st, stack=stack)
        b.op("aten::clamp_min", t + 5, 20, parent=rows[key], stack=stack)
        t += 1000
    p = b.build()
    assert not len(p.kernels)  # a CPU trace: host self time is the time source
    a = attribute(p, workspace(tmp_path))
    got = {key: a.site_of_op(row) for key, row in rows.items()}
    assert span_tuple(got["seq"].span) == locate(MODEL, "nn.ReLU()", 1)  # the Sequential element
    assert span_tuple(got["act"].span) == locate(MODEL, "self.act(self.fc1(x))")
    # three functional relus in forward, in execution order
    assert span_tuple(got["f1"].span) == locate(MODEL, "F.relu(x)")
    assert span_tuple(got["f2"].span) == locate(MODEL, "F.relu(x)", 1)
    assert span_tuple(got["f3"].span) == locate(MODEL, "F.relu(-x)")
    assert all(s.confidence is Confidence.MODULE for s in got.values())
    assert a.heat.time_source == "host"


def test_kineto_autograd_engine_work_lands_on_the_backward_call(tmp_path):
    """AccumulateGrad / DDP all-reduce run inside ``loss.backward()`` with no forward op of their
    own; the stack shows ``train`` (def line) calling ``torch/_tensor.py: backward``, so the one
    ``.backward()`` call in train's body holds them — not train's def line."""
    def_line = line_of(MODEL, "def train")
    stack = ";".join(("torch/autograd/graph.py(824): _engine_run_backward",
                      "torch/autograd/__init__.py(354): backward",
                      "torch/_tensor.py(625): backward",
                      f"model.py({def_line}): train", "train.py(21): main")) + ";"
    b = ProfileBuilder(kind=ProfileKind.KINETO)
    b.step(1, 0, 100_000)
    st = b.op("ProfilerStep#1", 0, 100_000)
    acc = b.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 100, 400, parent=st,
               stack=stack)
    b.op("aten::add_", 150, 200, parent=acc, stack=stack)
    ddp = b.op("c10d::allreduce_", 600, 300, parent=st, stack=stack)
    p = b.build()
    a = attribute(p, workspace(tmp_path))
    for row in (acc, ddp):
        site = a.site_of_op(row)
        assert site is not None and span_tuple(site.span) == locate(MODEL, "loss.backward()"), site
        assert site.confidence is Confidence.MODULE and "inside backward()" in site.note


INSERTED = MODEL.replace("    def forward(self, x):\n",
                         "    def forward(self, x):\n        # 新增: 两行\n        x = x.contiguous()\n")
REMOVED = MODEL.replace("        x = F.dropout(F.relu(x), p=0.1, training=self.training)\n", "")


def forward_profile(module_events: bool) -> tuple[ProfileBuilder, dict[str, int]]:
    """Ops of every line of forward, recorded against MODEL's line numbers."""
    b = ProfileBuilder()
    b.step(1, 0, 100_000)
    st = b.op("ProfilerStep#1", 0, 100_000)
    net = b.module("Net", 0, 10, 90_000) if module_events else -1

    def mod(cls, k, t):
        return b.module(cls, k, t, 500, parent=net) if module_events else net

    l17 = line_of(MODEL, "x = self.drop(")
    l18 = line_of(MODEL, "x = F.dropout(F.relu(x)")
    l19 = line_of(MODEL, "h = F.relu(x) + F.relu(-x)")
    ks = {}
    ks["fc1"] = op_with_kernel(b, "aten::linear", "aclnnMm", "MatMulV2", 1000, parent=st,
                               stack=ascend_stack(l17), module=mod("Linear", 0, 1000))[1]
    ks["act"] = op_with_kernel(b, "aten::relu", "aclnnRelu", "Relu", 2000, parent=st,
                               stack=ascend_stack(l17), module=mod("ReLU", 0, 2000))[1]
    ks["drop"] = op_with_kernel(b, "aten::dropout", "npu::_npu_dropout", "DropOutDoMask", 3000, parent=st,
                                stack=ascend_stack(l17), module=mod("Dropout", 0, 3000))[1]
    ks["frelu"] = op_with_kernel(b, "aten::relu", "aclnnRelu", "Relu", 4000, parent=st, stack=ascend_stack(l18),
                                 module=net)[1]
    ks["fdrop"] = op_with_kernel(b, "aten::dropout", "npu::_npu_dropout", "DropOutDoMask", 5000, parent=st,
                                 stack=ascend_stack(l18), module=net)[1]
    ks["h1"] = op_with_kernel(b, "aten::relu", "aclnnRelu", "Relu", 6000, parent=st, stack=ascend_stack(l19),
                              module=net)[1]
    ks["h2"] = op_with_kernel(b, "aten::relu", "aclnnRelu", "Relu", 7000, parent=st, stack=ascend_stack(l19),
                              module=net)[1]
    return b, ks


EXPECTED = {
    "fc1": ("self.fc1(x)", 0), "act": ("self.act(self.fc1(x))", 0), "drop": ("self.drop(self.act(self.fc1(x)))", 0),
    "frelu": ("F.relu(x)", 0), "fdrop": ("F.dropout(F.relu(x), p=0.1, training=self.training)", 0),
    "h1": ("F.relu(x)", 1), "h2": ("F.relu(-x)", 0),
}


def test_lines_inserted_above_calls_are_followed(tmp_path):
    for module_events in (True, False):
        b, ks = forward_profile(module_events)
        a = attribute(b.build(), workspace(tmp_path, INSERTED))
        for key, (needle, nth) in EXPECTED.items():
            site = a.site_of_kernel(ks[key])
            assert site is not None, (module_events, key, a.heat.notes)
            assert span_tuple(site.span) == locate(INSERTED, needle, nth), (module_events, key)
            assert site.confidence is Confidence.MODULE and "re-anchored" in site.note
    # unchanged file: exact, STACK, no note
    b, ks = forward_profile(True)
    a = attribute(b.build(), workspace(tmp_path, MODEL))
    for key, (needle, nth) in EXPECTED.items():
        site = a.site_of_kernel(ks[key])
        assert span_tuple(site.span) == locate(MODEL, needle, nth)
        assert site.confidence is Confidence.STACK and site.note == ""


def test_a_removed_call_is_dropped_never_moved_to_an_unrelated_line(tmp_path):
    b, ks = forward_profile(True)
    p = b.build()
    a = attribute(p, workspace(tmp_path, REMOVED))
    # the line's relu and dropout are gone: nothing maps them, the notes say why
    assert a.site_of_kernel(ks["fdrop"]) is None
    assert a.site_of_kernel(ks["frelu"]) is None
    assert any("no longer" in n or "not mapped" in n for n in a.heat.notes)
    # the calls above the removed line are untouched, those below moved up one line
    for key in ("fc1", "act", "drop"):
        needle, nth = EXPECTED[key]
        assert span_tuple(a.site_of_kernel(ks[key]).span) == locate(REMOVED, needle, nth)
        assert a.site_of_kernel(ks[key]).confidence is Confidence.STACK
    assert span_tuple(a.site_of_kernel(ks["h1"]).span) == locate(REMOVED, "F.relu(x)")
    assert span_tuple(a.site_of_kernel(ks["h2"]).span) == locate(REMOVED, "F.relu(-x)")
    assert "re-anchored" in a.site_of_kernel(ks["h2"]).note
    # whatever did map points at a call of the op's own kind
    for key, k in ks.items():
        site = a.site_of_kernel(k)
        if site is not None:
            text = REMOVED.splitlines()[site.span.line - 1]
            kind = p.kernels["type"][k]
            assert ("relu" in text or "act" in text) if kind == "Relu" else True
    unattributed = sum(int(p.kernels["dur_ns"][ks[k]]) for k in ("frelu", "fdrop"))
    assert a.heat.unattributed_ns >= unattributed


def test_unknown_ops_take_the_statement_and_library_only_stacks_stay_unmapped(tmp_path):
    b = ProfileBuilder()
    b.step(1, 0, 10_000)
    st = b.op("ProfilerStep#1", 0, 10_000)
    # ops inside an optimizer step belong to the .step() call, whatever they are
    line = line_of(MODEL, "opt.step()")
    opt = b.op("Optimizer.step#AdamW.step", 100, 5000, parent=st, stack=ascend_stack(line, "train"))
    _, k1 = op_with_kernel(b, "aten::_foreach_add_", "aclnnForeachAddList", "ForeachAddList", 200,
                           parent=opt, stack=ascend_stack(line, "train"))
    # an op no construct is known for: the statement on its line
    bline = line_of(MODEL, "loss.backward()")
    _, k0 = op_with_kernel(b, "aten::ones_like", "aclnnInplaceOne", "Fills", 250, parent=st,
                           stack=ascend_stack(bline, "train"))
    lib_only = ["/usr/lib/python3.9/site-packages/torch/optim/adamw.py(160): step", LIB]
    _, k2 = op_with_kernel(b, "aten::mul", "aclnnMul", "Mul", 300, parent=st, stack=lib_only)
    elsewhere = ["/home/ma-user/work/other/utils.py(3): helper", TRAIN]
    _, k3 = op_with_kernel(b, "aten::add", "aclnnAdd", "Add", 400, parent=st, stack=elsewhere)
    _, k4 = op_with_kernel(b, "aten::add", "aclnnAdd", "Add", 500, parent=st, stack=elsewhere)
    a = attribute(b.build(), workspace(tmp_path))
    site = a.site_of_kernel(k1)
    assert site.kind == "call" and span_tuple(site.span) == locate(MODEL, "opt.step()")
    assert site.confidence is Confidence.STACK
    site = a.site_of_kernel(k0)
    assert site.kind == "statement" and span_tuple(site.span) == locate(MODEL, "loss.backward()")
    assert a.site_of_kernel(k2) is None and a.site_of_kernel(k3) is None and a.site_of_kernel(k4) is None
    assert "no user frame in the call stack" in a.heat.notes
    assert a.heat.unmapped_files == ["/home/ma-user/work/other/utils.py", "/home/ma-user/work/proj/train.py"]


def test_kineto_def_line_that_moved_is_found_by_name(tmp_path):
    """A method was added above forward after profiling: the recorded def line now points into
    it; forward is found by name and searched as usual, with a note."""
    old_def = line_of(MODEL, "def forward")
    edited = MODEL.replace("    def forward(self, x):\n",
                           "    def extra(self, x):\n        return F.relu(x)\n\n    def forward(self, x):\n")
    b = ProfileBuilder(kind=ProfileKind.KINETO)
    b.step(1, 0, 100_000)
    st = b.op("ProfilerStep#1", 0, 100_000)
    act = b.op("aten::relu", 100, 50, parent=st, stack=kineto_stack(
        "torch/nn/functional.py(1760): relu", "nn.Module: ReLU_1", def_line=old_def))
    a = attribute(b.build(), workspace(tmp_path, edited))
    site = a.site_of_op(act)
    assert span_tuple(site.span) == locate(edited, "self.act(self.fc1(x))")
    assert site.confidence is Confidence.MODULE and "re-anchored" in site.note
