"""Applying several fixes computed on one text: at most one of a group, none whose construct
another applied fix already changed. What ``source.fixAll`` and the tests apply."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from msprof_lsp.hints.finding import Fix, FixOffer, TextEdit

from .edits import apply_edits, edited_lines


@dataclass(frozen=True, slots=True)
class Declined:
    """A fix not applied, or an offer whose construct the transform did not match, and why."""

    fix: Fix | FixOffer
    reason: str


@dataclass(frozen=True, slots=True)
class Applied:
    source: str  # the text after the applied fixes
    applied: tuple[Fix, ...]
    declined: tuple[Declined, ...]


def apply_fixes(source: str, fixes: Iterable[Fix], path: str | None = None) -> Applied:
    """Apply ``fixes`` (all computed on ``source``) in order, refusing with a reason a fix that

    * is an alternative (same ``group``) to a fix already applied,
    * edits a line an applied fix edited (its construct changed: the edit was made for text that
      is no longer there), or
    * edits another file than ``path`` (when given).

    An insertion identical to one already applied (the same ``import torch_npu``) is made once.
    """
    applied: list[Fix] = []
    declined: list[Declined] = []
    taken: dict[int, Fix] = {}  # original line -> the applied fix that edited it
    groups: dict[str, Fix] = {}
    edits: list[TextEdit] = []
    for fix in fixes:
        if path is not None and any(e.path != path for e in fix.edits):
            declined.append(Declined(fix, f"it edits another file than {path}"))
            continue
        if fix.group and fix.group in groups:
            declined.append(Declined(fix, f"an alternative to '{groups[fix.group].title}', which was applied"))
            continue
        new = [e for e in fix.edits if not any(_same(e, o) for o in edits)]
        clash = sorted(edited_lines(new) & taken.keys())
        if clash or _overlaps(new, edits):
            by = taken[clash[0]].title if clash else "another fix"
            where = f"line {clash[0]}" if clash else "its text"
            declined.append(Declined(fix, f"its construct ({where}) was already changed by '{by}'"))
            continue
        edits.extend(new)
        applied.append(fix)
        for line in edited_lines(new):
            taken[line] = fix
        if fix.group:
            groups[fix.group] = fix
    return Applied(apply_edits(source, edits), tuple(applied), tuple(declined))


def _same(a: TextEdit, b: TextEdit) -> bool:
    return (a.line, a.col, a.end_line, a.end_col, a.new_text) == (b.line, b.col, b.end_line, b.end_col, b.new_text)


def _overlaps(new: list[TextEdit], old: list[TextEdit]) -> bool:
    """Edits whose ranges share text clash (insertions at one point apply in the order given)."""
    for a in new:
        for b in old:
            if (a.line, a.col) < (b.end_line, b.end_col) and (b.line, b.col) < (a.end_line, a.end_col):
                return True
    return False
