"""Attribution of profile time to source spans: heat numbers, the no-stack paths, host time, edits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from srcmap_builder import ProfileBuilder, locate, span_tuple

from msprof_lsp.mapping.source.attribute import Attributor, attribute, reanchor
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.mapping.source.source_index import SourceIndex
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.source.workspace import SourceWorkspace

MODEL = '''import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return F.gelu(self.proj(x))


class Net(nn.Module):
    def __init__(self, d=8, classes=2):
        super().__init__()
        self.fc1 = nn.Linear(d, d)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.3)
        self.block = Block(d)
        self.fc2 = nn.Linear(d, classes)

    def forward(self, x):
        x = F.dropout(F.relu(self.fc1(x)), p=0.1, training=self.training)
        x = self.drop(self.act(self.block(x)))
        return self.fc2(x).log_softmax(-1)
'''
REMOTE = "/home/ma-user/work/proj/model.py"
LIB = "/usr/local/lib/python3.9/site-packages/torch/nn/modules/module.py(1747): _call_impl"


def ws_with(tmp_path: Path, text: str = MODEL) -> tuple[SourceWorkspace, Path]:
    root = tmp_path / "proj"
    root.mkdir(exist_ok=True)
    path = root / "model.py"
    path.write_text(text, encoding="utf-8")
    return SourceWorkspace([root]), path


def stack_at(needle: str) -> list[str]:
    return [f"{REMOTE}({locate(MODEL, needle)[0]}): forward", LIB, "/home/ma-user/work/proj/train.py(30): main"]


# ---------------------------------------------------------------------------------------------
# heat numbers

STEPS = [(1, 0, 10_000), (2, 20_000, 32_000)]
# per step: (op, scope, [(kernel type, core, dur, shapes)], backward kernels [(type, dur)])
RELU = [("Relu", "AI_VECTOR_CORE", 40, "8,8"), ("Relu", "AI_VECTOR_CORE", 60, "4,8")]
DROP = [("DSAStatelessGenBitMask", "DSA_SQE", 99, ""), ("DropOutDoMask", "AI_VECTOR_CORE", 26, "8,8")]
RELU_GRAD = 15


def heat_profile():
    b = ProfileBuilder()
    rows = {"relu": [], "drop": [], "grad": [], "outside": [], "nohost": []}
    line_stack = stack_at("x = F.dropout(F.relu(self.fc1(x))")
    host_self = {"relu": 0, "drop": 0}
    for (sid, t0, t1), (rtype, rcore, rdur, rshape) in zip(STEPS, RELU):
        b.step(sid, t0, t1)
        st = b.op(f"ProfilerStep#{sid}", t0, t1 - t0)
        relu = b.op("aten::relu", t0 + 100, 300, parent=st, stack=line_stack)
        sc = b.op("aclnnRelu", t0 + 110, 200, parent=relu)
        host_self["relu"] += (300 - 200) + 200
        rows["relu"].append(b.kernel("aclnnRelu_Relu_Relu", rtype, t0 + 500, rdur, host_op=sc, core=rcore, step=sid,
                                     shapes=rshape))
        drop = b.op("aten::dropout", t0 + 1000, 400, parent=st, stack=line_stack)
        nd = b.op("npu::_npu_dropout", t0 + 1010, 350, parent=drop, stack=line_stack)
        host_self["drop"] += (400 - 350) + 350
        for dtype, dcore, ddur, dshape in DROP:
            rows["drop"].append(b.kernel(f"{dtype}24", dtype, t0 + 2000, ddur, host_op=nd, core=dcore, step=sid,
                                         shapes=dshape))
        # backward: autograd node linked to the forward relu (fwdbwd)
        node = b.op("ReluBackward0", t0 + 5000, 100, parent=st, fwd_op=relu, tid=2)
        tb = b.op("aten::threshold_backward", t0 + 5010, 50, parent=node, tid=2)
        rows["grad"].append(b.kernel("aclnnThresholdBackward_ReluGrad_ReluGrad", "ReluGrad", t0 + 6000, RELU_GRAD,
                                     host_op=tb, backward=True, fwd_op=relu, core="AI_VECTOR_CORE", step=sid))
        host_self["relu"] += 100 - 50 + 50  # the backward ops count as host time of the forward call
    # outside any step (warm-up): not part of per-step figures
    o = b.op("aten::relu", 50_000, 300, stack=line_stack)
    rows["outside"].append(b.kernel("aclnnRelu_Relu_Relu", "Relu", 50_100, 1000, host_op=o, step=-1))
    # a kernel the profile could not link to any host op (and no construct launches MemSet)
    rows["nohost"].append(b.kernel("MEMSET", "MemSet", 3000, 7, step=1))
    return b.build(), rows, host_self


def test_heat_per_span_line_and_function(tmp_path):
    p, rows, host_self = heat_profile()
    ws, path = ws_with(tmp_path)
    a = attribute(p, ws)
    dur = p.kernels["dur_ns"].to_numpy()
    step_time = sum(t1 - t0 for _, t0, t1 in STEPS) / len(STEPS)
    relu_fwd = sum(d for _, _, d, _ in RELU)
    relu_bwd = RELU_GRAD * len(STEPS)
    drop = sum(d for *_, d, _ in DROP) * len(STEPS)
    assert a.heat.step_time_ns == step_time and a.heat.num_steps == 2

    by_text = {s.site.call_text: s for s in a.heat.spans}
    relu = by_text["F.relu(self.fc1(x))"]
    assert span_tuple(relu.site.span) == locate(MODEL, "F.relu(self.fc1(x))")
    assert (relu.device_ns, relu.fwd_ns, relu.bwd_ns) == (relu_fwd + relu_bwd, relu_fwd, relu_bwd)
    assert relu.per_step_ns == (relu_fwd + relu_bwd) / 2
    assert relu.share == pytest.approx((relu_fwd + relu_bwd) / 2 / step_time)
    assert relu.calls == 2 and relu.host_ns == host_self["relu"]
    assert relu.site.note == "" and relu.site.confidence is Confidence.STACK
    ops = {(o.type, o.backward): o for o in relu.ops}
    assert (ops[("Relu", False)].count, ops[("Relu", False)].total_ns) == (2, relu_fwd)
    assert ops[("Relu", False)].shapes == ("4,8", "8,8")  # most time first
    assert ops[("Relu", False)].core == "AI_VECTOR_CORE" and ops[("Relu", False)].name == "aclnnRelu_Relu_Relu"
    assert (ops[("ReluGrad", True)].count, ops[("ReluGrad", True)].total_ns) == (2, relu_bwd)
    assert relu.ops[0].type == "Relu"  # most time first
    # backward kernels point at the forward call, flagged
    bsite = a.site_of_kernel(rows["grad"][0])
    assert bsite.span == relu.site.span and bsite.note == "backward of aten::relu"
    assert a.site_of_kernel(rows["relu"][0]).note == ""

    dsp = by_text["F.dropout(F.relu(self.fc1(x)), p=0.1, training=self.training)"]
    assert (dsp.device_ns, dsp.bwd_ns, dsp.calls, dsp.host_ns) == (drop, 0, 2, host_self["drop"])
    assert {o.type for o in dsp.ops} == {"DSAStatelessGenBitMask", "DropOutDoMask"}

    line = locate(MODEL, "x = F.dropout(F.relu")[0]
    (lh,) = [x for x in a.heat.lines if x.line == line]
    assert lh.path == str(path.resolve())
    assert (lh.device_ns, lh.fwd_ns, lh.bwd_ns) == (relu_fwd + relu_bwd + drop, relu_fwd + drop, relu_bwd)
    assert lh.share == pytest.approx(lh.device_ns / 2 / step_time)
    (fh,) = [f for f in a.heat.functions if f.function == "Net.forward"]
    assert fh.device_ns == lh.device_ns
    assert (fh.span.line, fh.span.end_line) == (locate(MODEL, "def forward", 1)[0], MODEL.count("\n"))

    in_steps = dur[p.kernels["step"].to_numpy() >= 0].sum()
    assert a.heat.total_device_ns == in_steps  # the warm-up kernel outside the steps is left out
    assert a.heat.attributed_ns == relu_fwd + relu_bwd + drop
    assert a.heat.unattributed_ns == in_steps - a.heat.attributed_ns == 7
    assert (a.heat.fwd_ns, a.heat.bwd_ns) == (relu_fwd + drop, relu_bwd)
    assert a.heat.mapped_share == pytest.approx(a.heat.attributed_ns / in_steps)
    # per-row arrays
    assert len(a.kernel_site) == len(p.kernels) and len(a.op_site) == len(p.host_ops)
    assert a.site_of_kernel(rows["outside"][0]).span == relu.site.span  # mapped, just not in the step figures
    assert a.site_of_kernel(rows["nohost"][0]) is None
    assert a.site_of_op(0) is None  # ProfilerStep#1 is a scope, not a call


# ---------------------------------------------------------------------------------------------
# no stacks: module events, then pattern search


def module_profile():
    """with_modules, no with_stack: Net_0 > Linear_0 (fc1), Net_0 > Block_0 > Linear_1 (proj),
    Net_0 > ReLU_0 (act), Dropout_0 (drop), Linear_2 (fc2); functional ops directly in Net_0/Block_0."""
    b = ProfileBuilder()
    b.step(1, 0, 100_000)
    st = b.op("ProfilerStep#1", 0, 100_000)
    net = b.module("Net", 0, 10, 90_000)
    rows = {}

    def op(key, name, ktype, t, module):
        o = b.op(name, t, 100, parent=st, module=module)
        rows[key] = (o, b.kernel(f"{name}_{ktype}", ktype, t + 50, 10 + len(rows), host_op=o, step=1))

    op("fc1", "aten::linear", "MatMulV2", 1000, b.module("Linear", 0, 990, 200, parent=net))
    op("relu_f", "aten::relu", "Relu", 2000, net)
    op("dropout_f", "aten::dropout", "DropOutDoMask", 3000, net)
    blk = b.module("Block", 0, 3990, 3000, parent=net)
    op("proj", "aten::linear", "MatMulV2", 4000, b.module("Linear", 1, 3995, 200, parent=blk))
    op("gelu", "aten::gelu", "Gelu", 5000, blk)
    op("act", "aten::relu", "Relu", 7000, b.module("ReLU", 0, 6990, 200, parent=net))
    op("drop", "aten::dropout", "DropOutDoMask", 8000, b.module("Dropout", 0, 7990, 200, parent=net))
    op("fc2", "aten::linear", "MatMulV2", 9000, b.module("Linear", 2, 8990, 200, parent=net))
    op("logsm", "aten::log_softmax", "LogSoftmaxV2", 10_000, net)
    return b.build(), rows


MODULE_EXPECTED = {
    "fc1": "self.fc1(x)", "relu_f": "F.relu(self.fc1(x))",
    "dropout_f": "F.dropout(F.relu(self.fc1(x)), p=0.1, training=self.training)",
    "proj": "self.proj(x)", "gelu": "F.gelu(self.proj(x))", "act": "self.act(self.block(x))",
    "drop": "self.drop(self.act(self.block(x)))", "fc2": "self.fc2(x)", "logsm": "self.fc2(x).log_softmax(-1)",
}


def test_without_stacks_module_events_find_the_attribute_calls(tmp_path):
    p, rows = module_profile()
    assert not p.has_call_stacks
    ws, _ = ws_with(tmp_path)
    a = attribute(p, ws)
    for key, needle in MODULE_EXPECTED.items():
        site = a.site_of_kernel(rows[key][1])
        assert site is not None, (key, a.heat.notes)
        assert span_tuple(site.span) == locate(MODEL, needle), key
        assert site.confidence is Confidence.MODULE and site.frame is None
        assert a.site_of_op(rows[key][0]) == site
    assert a.heat.attributed_ns == a.heat.total_device_ns


def test_inferred_from_kernel_types_only_when_unique(tmp_path):
    """msprof CLI output: kernels, no host ops. Gelu and LogSoftmax have one construct in the
    workspace; MatMul has three (fc1, proj, fc2) and Relu two (F.relu, self.act): not attributed."""
    b = ProfileBuilder(kind=ProfileKind.MSPROF)
    ks = {t: b.kernel(f"{t}1", t, 100 * i, 10 * (i + 1)) for i, t in enumerate(
        ("Gelu", "LogSoftmaxV2", "MatMulV2", "Relu", "TransData"))}
    p = b.build()
    ws, _ = ws_with(tmp_path)
    a = attribute(p, ws)
    gelu = a.site_of_kernel(ks["Gelu"])
    assert span_tuple(gelu.span) == locate(MODEL, "F.gelu(self.proj(x))")
    assert gelu.confidence is Confidence.INFERRED and "inferred" in gelu.note
    assert span_tuple(a.site_of_kernel(ks["LogSoftmaxV2"]).span) == locate(MODEL, "self.fc2(x).log_softmax(-1)")
    assert a.site_of_kernel(ks["MatMulV2"]) is None and a.site_of_kernel(ks["Relu"]) is None
    assert a.site_of_kernel(ks["TransData"]) is None
    assert any("several constructs" in n for n in a.heat.notes)
    durs = p.kernels["dur_ns"].to_numpy()
    assert a.heat.attributed_ns == durs[ks["Gelu"]] + durs[ks["LogSoftmaxV2"]]


# ---------------------------------------------------------------------------------------------
# profiles without device kernels: host op self time


def test_cpu_profile_uses_host_self_time(tmp_path):
    b = ProfileBuilder(kind=ProfileKind.KINETO)
    b.step(1, 0, 10_000)
    st = b.op("ProfilerStep#1", 0, 10_000, cat="user_annotation")
    # Kineto verbose stacks: def-line frames, nn.Module entries, ';'-joined with a trailing ';'
    fwd = f"model.py({locate(MODEL, 'def forward', 1)[0]}): forward;nn.Module: Net_0;train.py(30): main;"
    relu_stack = "<built-in method relu of type object at 0x7f>;torch/nn/functional.py(1760): relu;" + fwd
    drop_stack = "<built-in method dropout of type object at 0x7f>;torch/nn/functional.py(1467): dropout;" + fwd
    relu = b.op("aten::relu", 100, 500, parent=st, stack=relu_stack)
    b.op("aten::clamp_min", 150, 300, parent=relu, stack=relu_stack)
    drop = b.op("aten::dropout", 1000, 900, parent=st, stack=drop_stack)
    for i, name in enumerate(("aten::empty_like", "aten::bernoulli_", "aten::div_", "aten::mul")):
        b.op(name, 1010 + 200 * i, 100 + 10 * i, parent=drop, stack=drop_stack)
    b.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 3000, 2000, parent=st,
         cat="user_annotation")
    p = b.build()
    ws, _ = ws_with(tmp_path)
    a = attribute(p, ws)
    assert a.heat.time_source == "host"
    by_text = {s.site.call_text: s for s in a.heat.spans}
    # self times add up to the top op's duration: 500 for relu, 900 for dropout
    assert by_text["F.relu(self.fc1(x))"].device_ns == 500
    assert by_text["F.dropout(F.relu(self.fc1(x)), p=0.1, training=self.training)"].device_ns == 900
    assert a.heat.total_device_ns == 1400  # annotations are scopes, not op time
    assert a.heat.spans[0].share == pytest.approx(900 / 10_000)
    assert len(a.kernel_site) == 0


# ---------------------------------------------------------------------------------------------
# per keystroke


def test_edits_move_sites_with_their_call_and_drop_removed_ones(tmp_path):
    p, rows, _ = heat_profile()
    ws, path = ws_with(tmp_path)
    a = attribute(p, ws)
    relu_k = rows["relu"][0]
    before = a.site_of_kernel(relu_k)
    total = a.heat.attributed_ns

    edited = MODEL.replace("    def forward(self, x):\n        x = F.dropout",
                           "    def forward(self, x):\n        # 两行注释\n        x = x * 1\n        x = F.dropout")
    ws.set_text(path, edited)
    b = reanchor(a, path)
    moved = b.site_of_kernel(relu_k)
    assert span_tuple(moved.span) == locate(edited, "F.relu(self.fc1(x))")
    assert moved.span.line == before.span.line + 2 and moved.confidence == before.confidence
    assert b.heat.attributed_ns == total
    assert b.site_of_kernel(rows["grad"][0]).span == moved.span

    removed = edited.replace("        x = F.dropout(F.relu(self.fc1(x)), p=0.1, training=self.training)\n", "")
    ws.set_text(path, removed)
    c = reanchor(b, path)
    assert c.site_of_kernel(relu_k) is None
    assert c.heat.attributed_ns == 0 and c.heat.unattributed_ns == c.heat.total_device_ns
    assert any("no longer in model.py" in n for n in c.heat.notes)

    ws.set_text(path, edited)  # undo: the time comes back
    d = reanchor(c, path, SourceIndex.build(str(path.resolve()), edited))
    assert d.site_of_kernel(relu_k).span == moved.span and d.heat.attributed_ns == total


def test_profile_lines_follow_their_statement_after_edits(tmp_path):
    """A frame's line (as profiled) is found in the edited text by its statement's text, even
    with lines inserted above, between and below; a deleted statement's line is gone."""
    p, _, _ = heat_profile()
    ws, path = ws_with(tmp_path)
    a = attribute(p, ws)
    key = str(path.resolve())
    drop_line = locate(MODEL, "x = F.dropout(F.relu(")[0]
    block_line = locate(MODEL, "x = self.drop(self.act(")[0]
    assert a.line_now(key, drop_line) == drop_line  # nothing edited: the same line
    edited = "# 头\n\n" + MODEL.replace("        x = self.drop(", "\n        # between\n        x = self.drop(")
    edited = edited.replace("        return self.fc2(x)", "        # below\n        return self.fc2(x)")
    ws.set_text(path, edited)
    b = reanchor(a, path)
    assert b.line_now(key, drop_line) == locate(edited, "x = F.dropout(F.relu(")[0] == drop_line + 2
    assert b.line_now(key, block_line) == locate(edited, "x = self.drop(self.act(")[0] == block_line + 4
    blank = MODEL.split("\n").index("") + 1
    assert b.line_now(key, blank) is None  # not a statement as profiled: nothing to follow
    removed = edited.replace("        x = self.drop(self.act(self.block(x)))\n", "")
    ws.set_text(path, removed)
    c = reanchor(b, path)
    assert c.line_now(key, block_line) is None and c.line_now(key, drop_line) == drop_line + 2


def test_a_file_that_did_not_parse_is_anchored_once_it_does(tmp_path):
    p, rows, _ = heat_profile()
    ws, path = ws_with(tmp_path, MODEL.replace("def forward(self, x):", "def forward(self, x:", 1))
    at = Attributor(p, ws)
    assert at.attribution.heat.attributed_ns == 0
    assert any("syntax error" in n for n in at.attribution.heat.notes)
    ws.set_text(path, MODEL)
    a = at.update_file(path)
    assert span_tuple(a.site_of_kernel(rows["relu"][0]).span) == locate(MODEL, "F.relu(self.fc1(x))")


def test_bad_links_do_not_crash(tmp_path):
    """Out-of-range ids (a truncated profile) are ignored, not indexed; what is left still maps."""
    p, rows, _ = heat_profile()
    p.kernels.loc[rows["relu"][0], "host_op"] = 10_000  # its own stack is still valid
    p.kernels.loc[rows["relu"][1], "stack"] = 77  # its launching op still has a stack
    p.kernels.loc[rows["drop"][0], ["host_op", "stack"]] = (-5, 10**9)  # nothing left: the op type
    p.host_ops.loc[3, "parent"] = 99_999
    ws, _ = ws_with(tmp_path)
    a = attribute(p, ws)
    relu = locate(MODEL, "F.relu(self.fc1(x))")
    assert span_tuple(a.site_of_kernel(rows["relu"][0]).span) == relu
    assert span_tuple(a.site_of_kernel(rows["relu"][1]).span) == relu
    assert a.site_of_kernel(rows["drop"][0]) is None  # mask-gen: F.dropout and self.drop both match
    assert isinstance(a.kernel_site, np.ndarray) and a.kernel_site.dtype == np.int64


@pytest.mark.parametrize("seed", range(12))
def test_module_chains_level_by_level_match_walking_each_row(seed):
    """``_module_paths`` interns the nn.Module chains level by level; each row's chain is the one a
    walk up its parents gives (outermost first), and a parent cycle (bad data) neither hangs nor
    gives its rows a chain."""
    from msprof_lsp.mapping.profile.model import MODULE_SCHEMA, Profile, ProfileMeta, make_table

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    parent = np.array([int(rng.integers(-1, i)) if i else -1 for i in range(n)])  # parents come first...
    perm = rng.permutation(n)  # ...then the rows are shuffled: parents anywhere in the table
    inv = np.argsort(perm)
    parent = np.where(parent[perm] >= 0, inv[np.maximum(parent[perm], 0)], -1)
    if seed % 3 == 0 and n >= 3:  # a cycle: rows a and b each other's parent
        a, b = int(rng.integers(0, n)), int(rng.integers(0, n))
        parent[a], parent[b] = b, a
    cls = rng.choice(["Linear", "ReLU", "Block"], n)
    ks = rng.integers(0, 3, n)
    p = Profile(meta=ProfileMeta(ProfileKind.KINETO, "/nowhere"))
    p.modules = make_table(MODULE_SCHEMA, {"cls": list(cls), "k": ks, "parent": parent})
    att = object.__new__(Attributor)
    att.profile, att.n_host, att.h_module = p, 0, np.zeros(0, np.int64)
    att._module_paths()

    def walk(i):
        seen, chain = set(), []
        while i >= 0:
            if i in seen:
                return None  # on or below a cycle
            seen.add(i)
            chain.append((str(cls[i]), int(ks[i])))
            i = int(parent[i])
        return tuple(reversed(chain))

    assert [att.chains[c] if c >= 0 else None for c in att.m_path.tolist()] == [walk(i) for i in range(n)]
    assert len(set(att.chains)) == len(att.chains)  # each chain once
