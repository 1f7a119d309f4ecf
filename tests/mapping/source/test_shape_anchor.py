"""Static layer sizes (mapping.sizes) and shape anchoring of stackless kernels (mapping.shape_anchor)."""

from __future__ import annotations

from pathlib import Path

import pytest
from srcmap_builder import ProfileBuilder, locate, span_tuple

from msprof_lsp.mapping.source.attribute import attribute
from msprof_lsp.mapping.source.heat import SiteKind
from msprof_lsp.mapping.profile.model import ProfileKind
from msprof_lsp.mapping.source.shape_anchor import Form, ShapeAnchorer, match_layer
from msprof_lsp.mapping.source.sizes import LayerKind, resolve_sizes
from msprof_lsp.mapping.source.source_index import SourceIndex
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.source.workspace import SourceWorkspace

SIZES = '''import argparse
from dataclasses import dataclass, field

import torch
from torch import nn

HIDDEN = 1000
VOCAB = 4095


@dataclass
class Config:
    d_model: int = 256
    heads: int = 4
    vocab: int = field(default=32000)


cfg = Config(d_model=512)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


class Block(nn.Module):
    def __init__(self, d, mult=4):
        super().__init__()
        self.norm = RMSNorm(d)
        self.up = nn.Linear(d, mult * d)
        self.down = nn.Linear(in_features=mult * d, out_features=d)
        self.attn = nn.MultiheadAttention(d, cfg.heads)
        self.mlp = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Dropout(0.1))


class Net(nn.Module):
    def __init__(self, c: Config = cfg, width=HIDDEN):
        super().__init__()
        self.c = c
        self.width = width // 2
        self.emb = nn.Embedding(c.vocab, c.d_model)
        self.block = Block(c.d_model)
        self.head = nn.Linear(HIDDEN, VOCAB)
        self.mid = nn.Linear(self.width, 7)
        self.conv = nn.Conv2d(3, 64, kernel_size=7, stride=2)
        self.conv3 = nn.Conv3d(4, 8, (1, 3, 3), groups=2)
        self.W = nn.Parameter(torch.randn(self.c.d_model, 10))
        self.ln = nn.LayerNorm(c.d_model)


class Bad(nn.Module):
    def __init__(self, n, m):
        super().__init__()
        self.fc = nn.Linear(n, 10)
        self.g = nn.Linear(compute(), 10)
        self.h = nn.Linear(m, 10)
        k = 3
        k = 4
        self.i = nn.Linear(k, 10)


def main():
    args = argparse.ArgumentParser().parse_args()
    m = Net()
    b = Bad(args.n)
'''


def _table(text: str, name: str = "model.py"):
    return resolve_sizes([SourceIndex.build(f"/ws/{name}", text)])


def _by_text(table, needle: str):
    line = locate(SIZES, needle)[0]
    return [c for c in table.constructions if c.span.line == line]


@pytest.mark.parametrize(("needle", "kind", "label", "weights"), [
    # literal arguments and module-level constants
    ("nn.Linear(HIDDEN, VOCAB)", LayerKind.LINEAR, "nn.Linear(1000, 4095)", ((4095, 1000),)),
    # a dataclass instance with an override (d_model) and a field(default=...) default (vocab)
    ("nn.Embedding(c.vocab, c.d_model)", LayerKind.EMBEDDING, "nn.Embedding(32000, 512)", ((32000, 512),)),
    # arguments passed down from Net.__init__ to Block(c.d_model), a default (mult=4), keywords
    ("nn.Linear(d, mult * d)", LayerKind.LINEAR, "nn.Linear(512, 2048)", ((2048, 512),)),
    ("nn.Linear(in_features=mult * d, out_features=d)", LayerKind.LINEAR, "nn.Linear(2048, 512)",
     ((512, 2048),)),
    # a module-level config instance read directly
    ("nn.MultiheadAttention(d, cfg.heads)", LayerKind.ATTENTION, "nn.MultiheadAttention(512, 4)",
     ((1536, 512), (512, 512))),
    # an element of nn.Sequential
    ("nn.Sequential(nn.Linear(d, d)", LayerKind.LINEAR, "nn.Linear(512, 512)", ((512, 512),)),
    # self.x assigned earlier in __init__ from a default argument
    ("nn.Linear(self.width, 7)", LayerKind.LINEAR, "nn.Linear(500, 7)", ((7, 500),)),
    ("nn.Conv2d(3, 64, kernel_size=7, stride=2)", LayerKind.CONV, "nn.Conv2d(3, 64, kernel_size=7)",
     ((64, 3, 7, 7),)),
    ("nn.Conv3d(4, 8, (1, 3, 3), groups=2)", LayerKind.CONV, "nn.Conv3d(4, 8, kernel_size=(1, 3, 3))",
     ((8, 2, 1, 3, 3),)),
    ("nn.Parameter(torch.randn(self.c.d_model, 10))", LayerKind.PARAMETER, "nn.Parameter(512, 10)",
     ((512, 10),)),
    ("nn.LayerNorm(c.d_model)", LayerKind.NORM, "nn.LayerNorm(512)", ((512,),)),
    # RMSNorm-style: a 1-D parameter, sized through Block(d) -> RMSNorm(d)
    ("nn.Parameter(torch.ones(dim))", LayerKind.NORM, "nn.Parameter(512)", ((512,),)),
])
def test_static_sizes_of_each_construct(needle, kind, label, weights):
    found = _by_text(_table(SIZES), needle)
    assert len(found) == 1, [c.label for c in found]
    c = found[0]
    assert (c.kind, c.label, c.weights) == (kind, label, weights)


def test_elements_and_attributes_are_named():
    t = _table(SIZES)
    (mlp0,) = _by_text(t, "nn.Sequential(nn.Linear(d, d)")
    assert (mlp0.cls, mlp0.attr, mlp0.element) == ("Block", "mlp", 0)
    (head,) = _by_text(t, "nn.Linear(HIDDEN, VOCAB)")
    assert (head.cls, head.attr, head.element) == ("Net", "head", -1)


@pytest.mark.parametrize(("needle", "reason"), [
    ("nn.Linear(n, 10)", "`args.n`"),  # a command-line value
    ("nn.Linear(compute(), 10)", "computed by a call"),
    ("nn.Linear(m, 10)", "parameter `m` of Bad.__init__ has no default and the call does not pass it"),
    ("nn.Linear(k, 10)", "assigned more than once"),
])
def test_the_resolver_refuses_what_it_cannot_know(needle, reason):
    t = _table(SIZES)
    line = locate(SIZES, needle)[0]
    assert not [c for c in t.constructions if c.span.line == line]
    reasons = [r.reason for r in t.refusals if r.span.line == line]
    assert reasons and any(reason in r for r in reasons), reasons


def test_a_class_built_with_two_sizes_gives_both():
    text = '''from torch import nn

class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Mlp(64)
        self.b = Mlp(128)
'''
    t = _table(text)
    assert sorted(c.weights for c in t.constructions) == [((64, 64),), ((128, 128),)]
    assert not t.refusals


def test_never_constructed_class_uses_defaults_and_refuses_required_args():
    text = '''import torch.nn as nn

class Head(nn.Module):
    def __init__(self, classes=10, d=None):
        super().__init__()
        self.fc = nn.Linear(64, classes)
        self.proj = nn.Linear(d, 64)
'''
    t = _table(text)
    assert [c.label for c in t.constructions] == ["nn.Linear(64, 10)"]
    assert [r.text for r in t.refusals] == ["nn.Linear(d, 64)"]


# ---------------------------------------------------------------------------------------------
# matching kernel shapes


def _linear(table, needle="nn.Linear(HIDDEN, VOCAB)"):
    return _by_text(table, needle)[0]


@pytest.mark.parametrize(("ins", "outs", "bwd", "transposed", "form"), [
    ([(8192, 1000), (4095, 1000)], [(8192, 4095)], False, False, Form.FORWARD),  # X · Wᵀ, W as stored
    ([(8192, 1000), (1000, 4095)], [(8192, 4095)], False, True, Form.FORWARD),  # Wᵀ materialised
    ([(16, 512, 1000), (4095, 1000)], [(16, 512, 4095)], False, False, Form.FORWARD),  # batched activations
    ([(8192, 4095), (4095, 1000)], [(8192, 1000)], True, False, Form.INPUT_GRAD),  # dX = dY · W
    ([(8192, 4095), (8192, 1000)], [(4095, 1000)], True, False, Form.WEIGHT_GRAD),  # dW = dYᵀ · X
    ([(4095, 8192), (8192, 1000)], [(4095, 1000)], True, False, Form.WEIGHT_GRAD),  # dYᵀ materialised
    ([(8192, 1000), (4095, 1000)], [], False, False, Form.FORWARD),  # no output shapes recorded
])
def test_linear_forms(ins, outs, bwd, transposed, form):
    c = _linear(_table(SIZES))
    assert match_layer(c, "MatMulV2", ins, outs, bwd, transposed) is form
    assert match_layer(c, "MatMulV2", ins, outs, bwd, not transposed) is None


@pytest.mark.parametrize(("ins", "outs"), [
    ([(8192, 1000), (1000, 1000)], [(8192, 1000)]),  # another weight
    ([(8192, 4096), (4096, 1000)], [(8192, 1000)]),
    ([(8192, 4095), (8192, 999)], [(4095, 999)]),  # a dW of another layer
    ([(16, 8, 4095, 1000)], [(16, 8, 4095, 1000)]),  # one 4-D tensor: not a matmul of this weight
])
def test_other_shapes_do_not_match(ins, outs):
    c = _linear(_table(SIZES))
    assert match_layer(c, "MatMulV2", ins, outs, False) is None


def test_conv_embedding_and_norm_forms():
    t = _table(SIZES)
    (conv,) = _by_text(t, "nn.Conv2d(3, 64, kernel_size=7, stride=2)")
    assert match_layer(conv, "Conv2D", [(32, 3, 224, 224), (64, 3, 7, 7)], [(32, 64, 109, 109)], False) is Form.FORWARD
    assert match_layer(conv, "Conv2DBackpropInput", [(4,), (64, 3, 7, 7), (32, 64, 109, 109)], [], True) \
        is Form.INPUT_GRAD
    assert match_layer(conv, "Conv2DBackpropFilter", [(32, 3, 224, 224), (4,), (32, 64, 109, 109)],
                       [(64, 3, 7, 7)], True) is Form.WEIGHT_GRAD
    (emb,) = _by_text(t, "nn.Embedding(c.vocab, c.d_model)")
    assert match_layer(emb, "GatherV2", [(32000, 512), (16, 128), (1,)], [(16, 128, 512)], False) is Form.FORWARD
    assert match_layer(emb, "EmbeddingDenseGrad", [(16, 128, 512), (16, 128)], [(32000, 512)], True) \
        is Form.WEIGHT_GRAD
    (ln,) = _by_text(t, "nn.LayerNorm(c.d_model)")
    assert match_layer(ln, "LayerNormV3", [(16, 128, 512), (512,), (512,)], [(16, 128, 512)], False) is Form.FORWARD
    assert match_layer(ln, "LayerNormV3", [(16, 128, 256), (256,), (256,)], [], False) is None


# ---------------------------------------------------------------------------------------------
# anchoring through the attribution (msprof CLI output: kernels only, no host ops, no stacks)

MODEL = '''import torch
from torch import nn

HIDDEN = 1000


class Mlp(nn.Module):
    def __init__(self, d_in=HIDDEN, d_out=4095):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_out)
        self.fc2 = nn.Linear(d_out, d_in)
        self.sq1 = nn.Linear(256, 256)
        self.sq2 = nn.Linear(256, 256)
        self.act = nn.ReLU()

    def forward(self, x):
        x = self.act(self.fc1(x))
        x = self.fc2(x)
        return self.sq2(self.sq1(x[..., :256]))
'''


def _ws(tmp_path: Path, text: str = MODEL) -> SourceWorkspace:
    root = tmp_path / "proj"
    root.mkdir(exist_ok=True)
    (root / "model.py").write_text(text, encoding="utf-8")
    return SourceWorkspace([root])


def test_stackless_matmuls_land_on_the_layer_call_with_inferred_confidence(tmp_path):
    b = ProfileBuilder(kind=ProfileKind.MSPROF)
    k = {
        "fwd1": b.kernel("MatMulV2_1", "MatMulV2", 0, 50, shapes="8192,1000;4095,1000", out_shapes="8192,4095"),
        "fwd2": b.kernel("MatMulV2_2", "MatMulV2", 100, 40, shapes="8192,4095;1000,4095", out_shapes="8192,1000"),
        "dx2": b.kernel("MatMulV2_3", "MatMulV2", 200, 30, shapes="8192,1000;1000,4095", out_shapes="8192,4095",
                        backward=True),
        "dw1": b.kernel("MatMulV2_4", "MatMulV2", 300, 20, shapes="8192,4095;8192,1000", out_shapes="4095,1000",
                        backward=True),
        "square": b.kernel("MatMulV2_5", "MatMulV2", 400, 10, shapes="8192,256;256,256", out_shapes="8192,256"),
        "other": b.kernel("MatMulV2_6", "MatMulV2", 500, 10, shapes="8192,77;77,77", out_shapes="8192,77"),
    }
    p = b.build()
    a = attribute(p, _ws(tmp_path))
    fc1 = a.site_of_kernel(k["fwd1"])
    assert fc1 is not None and span_tuple(fc1.span) == locate(MODEL, "self.fc1(x)")
    assert fc1.confidence is Confidence.INFERRED
    line_ctor = locate(MODEL, "nn.Linear(d_in, d_out)")[0]
    line_call = locate(MODEL, "self.fc1(x)")[0]
    assert (f"by shape 8192×1000 · 4095×1000 → 8192×4095 to nn.Linear(1000, 4095) at line {line_ctor}, "
            f"called at line {line_call} (forward)") in fc1.note
    assert span_tuple(a.site_of_kernel(k["fwd2"]).span) == locate(MODEL, "self.fc2(x)")
    dx2 = a.site_of_kernel(k["dx2"])
    assert span_tuple(dx2.span) == locate(MODEL, "self.fc2(x)") and "dX = dY·W" in dx2.note
    dw1 = a.site_of_kernel(k["dw1"])
    assert span_tuple(dw1.span) == locate(MODEL, "self.fc1(x)") and "dW = dYᵀ·X" in dw1.note
    # two square layers fit: both are named, none is picked
    assert a.site_of_kernel(k["square"]) is None
    amb = [n for n in a.heat.notes if "fit 2 layers" in n]
    assert amb and "nn.Linear(256, 256) at line 12" in amb[0] and "nn.Linear(256, 256) at line 13" in amb[0]
    assert a.site_of_kernel(k["other"]) is None
    assert any("match no layer built with static sizes" in n for n in a.heat.notes)
    durs = p.kernels["dur_ns"].to_numpy()
    assert a.heat.attributed_ns == sum(int(durs[k[n]]) for n in ("fwd1", "fwd2", "dx2", "dw1"))


def test_shape_anchorer_names_the_sequential_element(tmp_path):
    text = '''from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 16))

    def forward(self, x):
        return self.body(x)
'''
    sa = ShapeAnchorer(_ws(tmp_path, text))
    hit = sa.anchor(frozenset({"matmul"}), "MatMulV2", "MatMulV2", "64,48;16,48", "64,16", False)
    assert hit.site is not None and span_tuple(hit.site.span) == locate(text, "nn.Linear(48, 16)")
    assert hit.site.kind is SiteKind.ELEMENT and "nn.Linear(48, 16) at line 6" in hit.note


def test_a_layer_called_twice_is_not_picked(tmp_path):
    text = '''from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        return self.fc(self.fc(x))
'''
    sa = ShapeAnchorer(_ws(tmp_path, text))
    hit = sa.anchor(frozenset({"matmul"}), "MatMulV2", "MatMulV2", "64,32;32,32", "64,32", False)
    assert hit.site is None and "self.fc is called at 2 places" in hit.note


# ---------------------------------------------------------------------------------------------
# sequence anchoring between shape-anchored kernels

SEQ_MODEL = '''import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, 2 * d)

    def forward(self, x):
        return torch.tanh(self.proj(x))


class Net(nn.Module):
    def __init__(self, d=64, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(d, d)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.1)
        self.block = Block(d)
        self.fc2 = nn.Linear(2 * d, classes)

    def forward(self, x):
        x = self.drop(self.act(self.fc1(x)))
        x = self.block(x)
        x = F.gelu(x)
        return self.fc2(x)
'''


def test_sequence_anchoring_places_kernels_between_shape_landmarks(tmp_path):
    """msprof CLI form of one step of SEQ_MODEL: the elementwise kernels have several candidate
    constructs in the workspace (two ReLU-like, two Dropout-like would defeat the type-only rule)
    but one between their neighbouring layers; backward runs the same intervals in reverse."""
    text = SEQ_MODEL + '''

def other(x):
    return F.dropout(F.relu(x)), torch.tanh(x), F.gelu(x)
'''
    b = ProfileBuilder(kind=ProfileKind.MSPROF)
    t = iter(range(0, 10_000, 100))
    k = {}

    def kern(key, name, typ, shapes="", out=""):
        k[key] = b.kernel(name, typ, next(t), 10, shapes=shapes, out_shapes=out)

    kern("fc1", "mm", "MatMulV2", "32,64;64,64", "32,64")
    kern("relu", "relu", "Relu", "32,64", "32,64")
    kern("mask", "genmask", "DropOutGenMask", "2", "256")
    kern("domask", "domask", "DropOutDoMask", "32,64;256;1", "32,64")
    kern("proj", "mm", "MatMulV2", "32,64;128,64", "32,128")
    kern("tanh", "tanh", "Tanh", "32,128", "32,128")
    kern("gelu", "gelu", "Gelu", "32,128", "32,128")
    kern("fc2", "mm", "MatMulV2", "32,128;10,128", "32,10")
    # backward, reverse order
    kern("fc2_dx", "mm", "MatMulV2", "32,10;10,128", "32,128")
    kern("gelu_grad", "gelug", "GeluGrad", "32,128;32,128;32,128", "32,128")
    kern("tanh_grad", "tanhg", "TanhGrad", "32,128;32,128", "32,128")
    kern("proj_dw", "mm", "MatMulV2", "32,128;32,64", "128,64")
    kern("relu_grad", "relug", "ReluGrad", "32,64;32,64", "32,64")
    kern("fc1_dw", "mm", "MatMulV2", "32,64;32,64", "64,64")
    p = b.build()
    a = attribute(p, _ws(tmp_path, text))
    expect = {
        "relu": "self.act(self.fc1(x))", "domask": "self.drop(self.act(self.fc1(x)))",
        "mask": "self.drop(self.act(self.fc1(x)))", "tanh": "torch.tanh(self.proj(x))", "gelu": "F.gelu(x)",
        "gelu_grad": "F.gelu(x)", "tanh_grad": "torch.tanh(self.proj(x))", "relu_grad": "self.act(self.fc1(x))",
    }
    for key, needle in expect.items():
        site = a.site_of_kernel(k[key])
        assert site is not None, (key, a.heat.notes)
        assert span_tuple(site.span) == locate(text, needle), key
        assert site.confidence is Confidence.INFERRED and "by launch order" in site.note
    relu = a.site_of_kernel(k["relu"])
    assert f"after self.fc1(x) (line {locate(text, 'self.fc1(x)')[0]})" in relu.note
    # fc1's own forward and dW are square 64x64: fc1 is the only 64x64 layer, so shape decides
    assert span_tuple(a.site_of_kernel(k["fc1_dw"]).span) == locate(text, "self.fc1(x)")
    assert a.heat.attributed_ns == a.heat.total_device_ns


def test_optimizer_update_kernels_land_on_optimizer_step(tmp_path):
    """msprof CLI form: no Optimizer.step# scope, only the fused update kernels."""
    text = SEQ_MODEL + '''

def train(model, loader):
    opt = torch.optim.AdamW(model.parameters())
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
'''
    b = ProfileBuilder(kind=ProfileKind.MSPROF)
    kid = b.kernel("ApplyAdamWV2_1", "ApplyAdamWV2", 0, 40, core="AI_VECTOR_CORE", shapes="64,64;64,64;64,64;64,64")
    a = attribute(b.build(), _ws(tmp_path, text))
    site = a.site_of_kernel(kid)
    assert site is not None and span_tuple(site.span) == locate(text, "opt.step()")
    assert site.confidence is Confidence.INFERRED


def test_type_only_candidates_in_one_statement_give_the_statement(tmp_path):
    """``aten::item`` with no stack: ``loss.item()`` and the ``print`` around it are both
    candidates, in one statement; ``float("-inf")`` reads no tensor and is none."""
    text = '''import torch


def train(model, batches):
    mask = torch.full((4, 4), float("-inf"))
    for x in batches:
        loss = model(x, mask)
        print(f"loss {loss.item():.4f}")
'''
    b = ProfileBuilder(kind=ProfileKind.TORCH_NPU)
    op = b.op("aten::item", 0, 100)
    b.op("aten::_local_scalar_dense", 10, 80, parent=op)
    a = attribute(b.build(), _ws(tmp_path, text))
    site = a.site_of_op(op)
    assert site is not None and site.kind is SiteKind.STATEMENT and site.confidence is Confidence.INFERRED
    assert span_tuple(site.span) == locate(text, 'print(f"loss {loss.item():.4f}")')
