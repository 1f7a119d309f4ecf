"""Gradient checkpointing as the source index and the flattened forward see it (the zoo's
``ckpt_transformer``): a call of ``torch.utils.checkpoint.checkpoint`` / ``checkpoint_sequential``
(any import alias) is a call of the module in its first argument, so the module's ``forward`` is
inlined where it is checkpointed; and kernels between one pass of a loop over a module list and
the next are aligned across the loop's end (forward and backward)."""

from __future__ import annotations

from msprof_lsp.mapping.source.anchor import call_site
from msprof_lsp.mapping.source.constructs import call_keys, module_class_called
from msprof_lsp.mapping.source.sequence_anchor import SequenceAnchorer
from msprof_lsp.mapping.source.source_index import SourceIndex
from msprof_lsp.mapping.source.workspace import SourceWorkspace
from msprof_lsp.mapping.spans import Confidence

MODEL = '''\
import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from torch.utils.checkpoint import checkpoint, checkpoint_sequential


def run(m, x):
    return m(x)


class Stem(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 64)

    def forward(self, x):
        return torch.tanh(self.proj(x))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.out = nn.Linear(64, 64)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return x + self.out(h)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = Stem()
        self.blocks = nn.ModuleList([Block() for _ in range(4)])
        self.tail = nn.Sequential(nn.Linear(64, 64), nn.GELU())
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        x = cp.checkpoint(self.stem, x, use_reentrant=False)
        for blk in self.blocks:
            x = checkpoint(blk, x)
        x = checkpoint_sequential(self.tail, 2, x)
        return run(self.head, x)
'''


def _call(ix: SourceIndex, text: str):
    [c] = [c for c in ix.calls if c.text == text]
    return c


def test_a_checkpoint_call_is_indexed_as_a_call_of_its_first_argument() -> None:
    ix = SourceIndex.build("/w/net.py", MODEL)
    stem = _call(ix, "cp.checkpoint(self.stem, x, use_reentrant=False)")
    assert (stem.self_attr, stem.qualname) == ("stem", "torch.utils.checkpoint.checkpoint")
    blk = _call(ix, "checkpoint(blk, x)")
    assert (blk.loop_attr, blk.self_attr) == ("blocks", "")
    assert module_class_called(ix, blk) == ("Block",)
    tail = _call(ix, "checkpoint_sequential(self.tail, 2, x)")
    assert tail.self_attr == "tail" and call_keys(ix, tail.idx) == frozenset({"matmul", "gelu"})
    # any other function given a module is not a call of it
    head = _call(ix, "run(self.head, x)")
    assert (head.self_attr, head.loop_attr, head.qualname) == ("", "", "run")


def test_the_checkpointed_modules_forward_is_inlined_in_the_flattened_forward(tmp_path) -> None:
    (tmp_path / "net.py").write_text(MODEL, encoding="utf-8")
    seq = SequenceAnchorer(SourceWorkspace([tmp_path]))
    flat = [(e.element.text if e.element is not None else e.call.text) for e in seq.flat if not e.inlined]
    assert flat == ["self.proj(x)", "torch.tanh(self.proj(x))", "self.fc(x)", "torch.relu(self.fc(x))", "self.out(h)",
                    "x + self.out(h)", "nn.Linear(64, 64)", "nn.GELU()", "run(self.head, x)"]


def test_kernels_between_two_passes_of_a_module_list_loop_are_aligned_across_the_loops_end(tmp_path) -> None:
    (tmp_path / "net.py").write_text(MODEL, encoding="utf-8")
    ws = SourceWorkspace([tmp_path])
    ix = ws.index(tmp_path / "net.py")
    seq = SequenceAnchorer(ws)
    fc, out = (call_site(_call(ix, t), Confidence.INFERRED) for t in ("self.fc(x)", "self.out(h)"))
    plus = _call(ix, "x + self.out(h)")
    add = frozenset({"add"})
    # forward: after block k's out projection, before block k+1's fc: the residual add of block k
    (site,) = seq.align(out, fc, True, [add])
    assert site is not None and site.span == plus.span and "before self.fc(x)" in site.note
    # backward: after block k+1's fc gradient, before block k's out projection gradient
    (site,) = seq.align(fc, out, False, [add])
    assert site is not None and site.span == plus.span
    # in between within one pass (fc, then out) the relu is found as before
    (site,) = seq.align(fc, out, True, [frozenset({"relu"})])
    assert site is not None and site.span == _call(ix, "torch.relu(self.fc(x))").span
