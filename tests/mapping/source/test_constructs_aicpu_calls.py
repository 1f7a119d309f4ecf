"""AI_CPU kernels of ops that have their own call (the zoo's ``moe_lm``: ``torch.bincount`` of the
routing): the kernel type, the host op and the torch call share a key, so a stackless kernel is
placed on the one call that launches it; with two such calls both are named, none is picked."""

from __future__ import annotations

from msprof_lsp.mapping.source.anchor import Anchorer, OpContext
from msprof_lsp.mapping.source.constructs import call_keys, kernel_type_keys, op_keys
from msprof_lsp.mapping.source.source_index import SourceIndex
from msprof_lsp.mapping.source.workspace import SourceWorkspace

ROUTER = '''\
import torch


def route(chosen, mask, a, b, probs):
    counts = torch.bincount(chosen.flatten(), minlength=8)
    idx = torch.where(mask)
    picked = torch.where(mask, a, b)
    kinds = chosen.unique()
    draws = torch.multinomial(probs, 1)
    return counts, idx, picked, kinds, draws
'''


def test_kernel_types_host_ops_and_calls_share_the_ai_cpu_keys() -> None:
    assert kernel_type_keys("Bincount") == op_keys("aten::bincount") == op_keys("aclnnBincount") == {"bincount"}
    assert kernel_type_keys("NonZero") == op_keys("aten::nonzero") == {"nonzero"}
    assert kernel_type_keys("UniqueWithCountsAndSorting") == op_keys("aten::_unique2") == {"unique"}
    assert kernel_type_keys("Multinomial") == {"multinomial"}
    ix = SourceIndex.build("/w/router.py", ROUTER)
    keys = {c.text: call_keys(ix, c.idx) for c in ix.calls}
    assert keys["torch.bincount(chosen.flatten(), minlength=8)"] == {"bincount"}
    assert keys["torch.where(mask)"] == {"nonzero"}  # one argument: the indices, a NonZero kernel
    assert keys["torch.where(mask, a, b)"] == frozenset()  # a select
    assert keys["chosen.unique()"] == {"unique"}
    assert keys["torch.multinomial(probs, 1)"] == {"multinomial"}


def test_a_kernel_goes_to_its_one_call_and_two_candidates_are_both_named(tmp_path) -> None:
    (tmp_path / "router.py").write_text(ROUTER, encoding="utf-8")
    anchor = Anchorer(SourceWorkspace([tmp_path])).anchor_inferred(OpContext(kernel_types=("Bincount",)))
    (site,) = anchor.sites
    assert (site.span.line, site.call_text) == (5, "torch.bincount(chosen.flatten(), minlength=8)")
    (tmp_path / "stats.py").write_text("import torch\n\n\ndef load(ids):\n    return torch.bincount(ids)\n",
                                       encoding="utf-8")
    anchor = Anchorer(SourceWorkspace([tmp_path])).anchor_inferred(OpContext(kernel_types=("Bincount",)))
    assert not anchor.sites
    assert "router.py:5 torch.bincount(" in anchor.note and "stats.py:5 torch.bincount(ids)" in anchor.note
