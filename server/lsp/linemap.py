"""Where the lines of an analysed text are in the buffer the user is typing in.

Findings and heat are computed on a snapshot of each file; between two analyses the user keeps
editing. A :class:`LineMap` carries analysis-time line numbers to current ones so diagnostics,
lenses and fixes follow the code at keystroke speed; the next analysis (re-anchoring through
``mapping.attribute``) replaces the map with fresh positions.

Each edit step is reduced to one block: the common prefix and suffix lines of the old and new
text stay (the suffix shifted by the change in line count); lines in between are "changed" and
map to nothing. Columns on unchanged lines stay valid because the line's text is identical.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_NEWLINE = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """Lines as LSP counts them (``\\r\\n``, ``\\r``, ``\\n``), without terminators."""
    return _NEWLINE.split(text)


@dataclass(frozen=True, slots=True)
class _Step:
    prefix: int  # old lines 1..prefix are unchanged, same number
    old_end: int  # old lines prefix+1..old_end were replaced (old_end == prefix: pure insertion)
    delta: int  # new line count - old line count; old lines > old_end move by delta

    def line(self, line: int) -> int | None:
        if line <= self.prefix:
            return line
        if line > self.old_end:
            return line + self.delta
        return None

    def untouched(self, line: int, end_line: int) -> bool:
        """No replaced line and no insertion point lies inside lines ``line..end_line``."""
        return end_line <= self.prefix or line > self.old_end


MAX_STEPS = 64


def _fold(steps: tuple[_Step, ...]) -> _Step:
    """One block covering every line any of ``steps`` changed (in the first step's coordinates)."""
    acc = steps[0]
    for nxt in steps[1:]:
        prefix = min(acc.prefix, nxt.prefix)
        old_end = max(acc.old_end, nxt.old_end - acc.delta)
        acc = _Step(prefix, max(prefix, old_end), acc.delta + nxt.delta)
    return acc


class LineMap:
    """A composition of edit steps from an old text to the current one."""

    __slots__ = ("_steps",)

    def __init__(self, steps: tuple[_Step, ...] = ()) -> None:
        self._steps = steps

    @classmethod
    def identity(cls) -> LineMap:
        return cls(())

    @classmethod
    def diff(cls, old: Sequence[str], new: Sequence[str]) -> LineMap:
        """The one-block map between two line lists (identity when they are equal)."""
        n, m = len(old), len(new)
        limit = min(n, m)
        p = 0
        while p < limit and old[p] == new[p]:
            p += 1
        if p == n == m:
            return cls(())
        s = 0
        while s < limit - p and old[n - 1 - s] == new[m - 1 - s]:
            s += 1
        return cls((_Step(p, n - s, m - n),))

    @property
    def is_identity(self) -> bool:
        return not self._steps

    def then(self, other: LineMap) -> LineMap:
        """This map followed by ``other`` (self: A -> B, other: B -> C; result: A -> C).

        Long chains (a burst of keystrokes before the next analysis) are folded into one bounding
        block, so mapping stays cheap; positions inside the bound wait for the next analysis.
        """
        if not other._steps:
            return self
        steps = self._steps + other._steps
        if len(steps) > MAX_STEPS:
            steps = (_fold(steps),)
        return LineMap(steps)

    def line(self, line: int) -> int | None:
        """Current number of an old (1-based) line, None when that line was changed."""
        for step in self._steps:
            mapped = step.line(line)
            if mapped is None:
                return None
            line = mapped
        return line

    def lines(self, line: int, end_line: int) -> tuple[int, int] | None:
        """Both ends of a range mapped (the range may have grown or shrunk inside)."""
        a = self.line(line)
        if a is None:
            return None
        b = self.line(end_line)
        if b is None or b < a:
            return None
        return a, b

    def untouched(self, line: int, end_line: int) -> tuple[int, int] | None:
        """The range's new lines when nothing inside it changed (for edits computed on the old text)."""
        for step in self._steps:
            if not step.untouched(line, end_line):
                return None
            line, end_line = step.line(line), step.line(end_line)  # type: ignore[assignment]
        return line, end_line
