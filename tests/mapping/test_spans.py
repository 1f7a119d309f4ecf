"""``Confidence.rank`` (mapping/spans.py): the order the rules compare anchors by."""

from __future__ import annotations

from msprof_lsp.mapping.spans import Confidence


def test_confidence_rank_orders_stack_over_module_over_inferred():
    assert [c.rank for c in (Confidence.STACK, Confidence.MODULE, Confidence.INFERRED)] == [2, 1, 0]
    assert sorted(Confidence, key=lambda c: c.rank) == [Confidence.INFERRED, Confidence.MODULE, Confidence.STACK]
    # a member read back from its value (the JSON and cache forms) ranks the same
    assert Confidence("module").rank == Confidence.MODULE.rank == 1
