"""Loops over module lists as the flattened forward sees them (the zoo's recommender and
mixture-of-experts): a loop variable bound through ``enumerate`` / ``.items()`` / ``.values()``
or in a comprehension runs the container's elements; a ``ModuleList`` built with a
comprehension has one element construction; a call of an ``nn.Sequential`` is one position per
element in the flattened forward."""

from __future__ import annotations

from msprof_lsp.mapping.source.constructs import call_keys, module_class_called
from msprof_lsp.mapping.source.sequence_anchor import SequenceAnchorer
from msprof_lsp.mapping.source.source_index import SourceIndex
from msprof_lsp.mapping.source.workspace import SourceWorkspace

MODEL = '''\
import torch
import torch.nn as nn


class Towers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bags = nn.ModuleList([nn.EmbeddingBag(1000, 16) for _ in range(3)])
        self.heads = nn.ModuleDict({"a": nn.Linear(16, 4)})
        self.mlp = nn.Sequential(nn.Linear(48, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 16))

    def forward(self, ids, offsets):
        pooled = [bag(ids[i], offsets[i]) for i, bag in enumerate(self.bags)]
        for i, bag in enumerate(self.bags):
            bag(ids[i], offsets[i])
        for name, head in self.heads.items():
            head(pooled[0])
        return self.mlp(torch.cat(pooled, dim=1))
'''


def _calls(ix: SourceIndex, text: str) -> list:
    return [c for c in ix.calls if c.text == text]


def test_enumerate_comprehension_and_items_bind_the_loop_variable_to_the_container() -> None:
    ix = SourceIndex.build("/w/towers.py", MODEL)
    comp, loop = _calls(ix, "bag(ids[i], offsets[i])")
    assert comp.loop_attr == loop.loop_attr == "bags"
    [head] = _calls(ix, "head(pooled[0])")
    assert head.loop_attr == "heads"
    # the comprehension's element construction is the ModuleList's element: its class and keys
    [elem] = ix.module_attr("Towers", "bags").elements
    assert (elem.class_name, elem.index) == ("EmbeddingBag", -1)
    assert module_class_called(ix, comp) == ("EmbeddingBag",)
    assert call_keys(ix, comp.idx) == frozenset({"embedding"})


def test_a_sequential_call_is_one_position_per_element(tmp_path) -> None:
    (tmp_path / "towers.py").write_text(MODEL, encoding="utf-8")
    seq = SequenceAnchorer(SourceWorkspace([tmp_path]))
    flat = [(e.element.text if e.element is not None else e.call.text) for e in seq.flat if not e.inlined]
    i = flat.index("nn.Linear(48, 32)")
    assert flat[i:i + 4] == ["nn.Linear(48, 32)", "nn.ReLU()", "nn.Dropout(0.1)", "nn.Linear(32, 16)"]
