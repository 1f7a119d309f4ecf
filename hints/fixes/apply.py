"""Applying several fixes computed on one text: at most one of a group, none whose construct
another applied fix already changed. What ``source.fixAll`` and the tests apply."""

from __future__ import annotations

import dataclasses
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

    An insertion identical to one already applied (the same ``import torch_npu``) is made once, and
    one that extends an applied insertion at the same point (a helper, then a class using it) adds
    only what follows (``_beyond``).
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
        new = [e for e in (_beyond(x, edits) for x in fix.edits) if e is not None]
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


def _beyond(edit: TextEdit, applied: list[TextEdit]) -> TextEdit | None:
    """``edit`` less what the applied edits already insert at its point: None when one inserts
    the same text or more, the rest when one inserts a prefix of it (fixes computed on one text
    that add the same helper, one of them with more after it)."""
    if any(_same(edit, o) for o in applied):
        return None
    if (edit.line, edit.col) != (edit.end_line, edit.end_col):
        return edit
    at = [o.new_text for o in applied if (o.line, o.col, o.end_line, o.end_col) == (edit.line, edit.col, edit.line, edit.col)]
    if any(t.startswith(edit.new_text) for t in at):
        return None
    done = max((t for t in at if edit.new_text.startswith(t)), key=len, default="")
    return dataclasses.replace(edit, new_text=edit.new_text[len(done):]) if done else edit


def _overlaps(new: list[TextEdit], old: list[TextEdit]) -> bool:
    """Edits whose ranges share text clash (insertions at one point apply in the order given)."""
    for a in new:
        for b in old:
            if (a.line, a.col) < (b.end_line, b.end_col) and (b.line, b.col) < (a.end_line, a.end_col):
                return True
    return False
