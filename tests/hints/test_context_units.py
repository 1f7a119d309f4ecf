"""``RuleContext.message``'s counts: ``events`` over the capture printed per step, and a ``Unit``
printed singular or plural by that count (hints/context.py)."""

from __future__ import annotations

import pytest

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext, Unit
from msprof_lsp.mapping.profile.model import Profile, ProfileKind, ProfileMeta, Step


def _context(steps: int) -> RuleContext:
    profile = Profile(meta=ProfileMeta(kind=ProfileKind.TORCH_NPU, path="/prof"),
                      steps=[Step(i, i * 1000, (i + 1) * 1000) for i in range(steps)])
    return RuleContext(profile, None, None, RuleConfig())


@pytest.mark.parametrize("unit, count, word", [
    (Unit.KERNEL, 1, "kernel"), (Unit.KERNEL, 2, "kernels"), (Unit.KERNEL, 0, "kernels"),
    (Unit.COPY, 1, "copy"), (Unit.COPY, 3, "copies"), (Unit.FETCH, 2, "fetches"), (Unit.IDLE_GAP, 1, "idle gap"),
    (Unit.PAIR, 1, "pair"), (Unit.PAIR, 2, "pairs"),
])
def test_unit_is_singular_only_for_one(unit, count, word):
    assert unit.of(count) == word


def test_events_are_counted_per_step_with_the_unit_agreeing():
    ctx = _context(steps=4)
    # 4 events over 4 steps: 1 per step, singular; 2 over 4 rounds to 1 but never below 1
    for events in (4, 2, 1):
        assert ctx.message("X", total_ns=0, events=events, unit=Unit.KERNEL, diagnosis="d", fix="f").startswith("X: 1 kernel, ")
    assert ctx.message("X", total_ns=0, events=12, unit=Unit.COPY, diagnosis="d", fix="f").startswith("X: 3 copies, ")
    # none at all is 0, never rounded up to 1, and plural
    assert ctx.per_step_count(0) == 0
    assert ctx.message("X", total_ns=0, events=0, unit=Unit.FOREACH_KERNEL, diagnosis="d", fix="f").startswith("X: 0 _foreach_ kernels, ")
    # a plain-string unit is printed as it is, and a count given per step is kept
    assert ctx.message("X", total_ns=0, count=1, unit="kernels", diagnosis="d", fix="f").startswith("X: 1 kernels, ")
    assert ctx.message("X", total_ns=0, count=2, unit=Unit.SYNC, diagnosis="d", fix="f").startswith("X: 2 syncs, ")
