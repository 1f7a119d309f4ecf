"""Where the lines of an analysed text are in the buffer the user is typing in.

Findings and heat are computed on a snapshot of each file; between two analyses the user keeps
editing. A :class:`LineMap` carries analysis-time line numbers to current ones so diagnostics,
lenses and fixes follow the code at keystroke speed; the next analysis (re-anchoring through
``mapping.attribute``) replaces the map with fresh positions.

The map is a sorted list of *unchanged runs*: old lines ``a..b`` are now lines ``c..c+(b-a)``
with the same text. Each edit is reduced to one block by trimming the common prefix and suffix
lines of the old and new text; composing two maps intersects their runs, so the list grows with
the number of distinct places edited, not with the number of keystrokes. Columns on unchanged
lines stay valid because the line's text is identical.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from msprof_lsp.mapping.source.positions import split_lines

END = 1 << 62  # "to the end of the file": the last run is open-ended


Run = tuple[int, int, int]  # (first old line, last old line, first new line), 1-based


class LineMap:
    """Old (analysed) line -> current line, for lines whose text is unchanged."""

    __slots__ = ("_runs", "_starts")

    def __init__(self, runs: Sequence[Run] = ((1, END, 1),)) -> None:
        self._runs: tuple[Run, ...] = tuple(runs)
        self._starts = [r[0] for r in self._runs]

    @classmethod
    def identity(cls) -> LineMap:
        return cls()

    @classmethod
    def diff(cls, old: Sequence[str], new: Sequence[str]) -> LineMap:
        """The map between two line lists: common prefix and suffix kept, the middle changed."""
        n, m = len(old), len(new)
        limit = min(n, m)
        p = 0
        while p < limit and old[p] == new[p]:
            p += 1
        if p == n == m:
            return cls()
        s = 0
        while s < limit - p and old[n - 1 - s] == new[m - 1 - s]:
            s += 1
        runs: list[Run] = []
        if p:
            runs.append((1, p, 1))
        runs.append((n - s + 1, END, m - s + 1))  # the suffix, open-ended
        return cls(runs)

    @classmethod
    def edit(cls, start_line: int, start_char: int, end_line: int, end_char: int, text: str) -> LineMap:
        """The map of one range change (1-based lines) that put ``text`` in place of the range:
        what is above stays, what is below shifts, the lines touched changed. Whole lines
        inserted or replaced at line starts leave the line after them intact. A didChange with
        several changes (multi-cursor, replace all) is their composition, so code between two
        of them keeps its place."""
        breaks = len(split_lines(text)) - 1
        if start_char == 0 and end_char == 0 and (not text or text.endswith(("\n", "\r"))):
            first, last, count = start_line, end_line - 1, breaks  # whole lines; end_line intact
        else:
            first, last, count = start_line, end_line, breaks + 1
        runs: list[Run] = [(1, first - 1, 1)] if first > 1 else []
        runs.append((last + 1, END, first + count))
        return cls(runs)

    @property
    def is_identity(self) -> bool:
        return self._runs == ((1, END, 1),)

    def then(self, other: LineMap) -> LineMap:
        """This map followed by ``other`` (self: A -> B, other: B -> C; result: A -> C)."""
        if other.is_identity:
            return self
        if self.is_identity:
            return other
        out: list[Run] = []
        for a0, a1, b0 in self._runs:
            b1 = b0 + (a1 - a0) if a1 < END else END
            i = max(0, bisect.bisect_right(other._starts, b0) - 1)
            while i < len(other._runs):
                s0, s1, c0 = other._runs[i]
                if s0 > b1:
                    break
                lo, hi = max(b0, s0), min(b1, s1)
                if lo <= hi:
                    first = a0 + (lo - b0)
                    last = a0 + (hi - b0) if hi < END else END
                    out.append((first, last, c0 + (lo - s0)))
                i += 1
        return LineMap(out)

    def _run(self, line: int) -> Run | None:
        i = bisect.bisect_right(self._starts, line) - 1
        if i < 0:
            return None
        run = self._runs[i]
        return run if line <= run[1] else None

    def line(self, line: int) -> int | None:
        """Current number of an old (1-based) line, None when that line was changed."""
        run = self._run(line)
        return None if run is None else run[2] + (line - run[0])

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
        """The range's new lines when nothing inside it changed (for edits computed on the old
        text): both ends in one unchanged run."""
        run = self._run(line)
        if run is None or end_line > run[1]:
            return None
        return run[2] + (line - run[0]), run[2] + (end_line - run[0])
