"""Text edits: apply them to a document, and compute the smallest set that turns one text into another.

Positions follow ``mapping.spans``: 1-based lines, 0-based columns in code points. Lines end at
``\\n``, ``\\r\\n`` or ``\\r`` only (the LSP definition; ``str.splitlines`` also breaks on form feeds
and other separators, which would shift every later line).

Fix transforms rewrite the whole module with libcst and then call ``minimal_edits`` so that the
editor receives only the lines that really changed (an inserted import, one replaced call), which
keeps undo small and never clobbers unrelated text the user typed meanwhile.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from msprof_lsp.hints.finding import TextEdit
from msprof_lsp.mapping.source.positions import line_starts, split_lines

class PositionError(ValueError):
    """An edit position outside the document, or edits that overlap."""


def offset_of(text: str, line: int, col: int, *, starts: list[int] | None = None) -> int:
    """Offset of a (1-based line, 0-based code-point column) position."""
    starts = starts if starts is not None else line_starts(text)
    if line < 1 or line > len(starts):
        raise PositionError(f"line {line} outside the document (1..{len(starts)})")
    begin = starts[line - 1]
    end = starts[line] if line < len(starts) else len(text)
    content_end = end
    while content_end > begin and text[content_end - 1] in "\r\n":
        content_end -= 1
    if col < 0 or begin + col > content_end:
        raise PositionError(f"column {col} outside line {line} (0..{content_end - begin})")
    return begin + col


def position_of(text: str, offset: int, *, starts: list[int] | None = None) -> tuple[int, int]:
    """(1-based line, 0-based column) of an offset."""
    starts = starts if starts is not None else line_starts(text)
    if offset < 0 or offset > len(text):
        raise PositionError(f"offset {offset} outside the document (0..{len(text)})")
    idx = bisect_right(starts, offset) - 1
    # An offset between "\r" and "\n" of one CRLF belongs to no line; callers never produce it.
    return idx + 1, offset - starts[idx]


def apply_edits(text: str, edits: Iterable[TextEdit]) -> str:
    """Apply non-overlapping edits (all positions refer to the original text)."""
    starts = line_starts(text)
    spans = []
    for e in edits:
        a = offset_of(text, e.line, e.col, starts=starts)
        b = offset_of(text, e.end_line, e.end_col, starts=starts)
        if b < a:
            raise PositionError(f"edit ends before it starts: {e}")
        spans.append((a, b, e.new_text))
    # Stable for insertions at one offset: they apply in the order given.
    spans.sort(key=lambda s: (s[0], s[1]))
    out: list[str] = []
    pos = 0
    for a, b, new in spans:
        if a < pos:
            raise PositionError("overlapping edits")
        out.append(text[pos:a])
        out.append(new)
        pos = b
    out.append(text[pos:])
    return "".join(out)


def _edit(path: str, old: str, starts: list[int], a: int, b: int, new: str) -> TextEdit:
    line, col = position_of(old, a, starts=starts)
    end_line, end_col = position_of(old, b, starts=starts)
    return TextEdit(path, line, col, end_line, end_col, new)


MAX_DIFF_LINES = 2000
"""Beyond this many differing lines (never reached by a fix) the changed window is replaced whole."""


def _matching_blocks(a: list[int], b: list[int], max_d: int) -> list[tuple[int, int, int]] | None:
    """(i, j, size) runs where ``a`` and ``b`` agree, by Myers' greedy diff: O((N+M)·D) for D
    differing lines, so 20,000 identical lines cost no more than 20 distinct ones (difflib's
    matcher is quadratic on repeated lines). None when more than ``max_d`` lines differ."""
    n, m = len(a), len(b)
    off = max_d + 1
    v = [0] * (2 * max_d + 3)
    trace: list[list[int]] = []  # v over k = -d..d after each round d
    for d in range(max_d + 1):
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[off + k - 1] < v[off + k + 1]):
                x = v[off + k + 1]  # a line inserted from b
            else:
                x = v[off + k - 1] + 1  # a line of a deleted
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            v[off + k] = x
            if x >= n and y >= m:
                return _backtrack(trace, d, n, m)
        trace.append(v[off - d : off + d + 1])
    return None


def _backtrack(trace: list[list[int]], depth: int, n: int, m: int) -> list[tuple[int, int, int]]:
    blocks: list[tuple[int, int, int]] = []
    x, y = n, m
    for d in range(depth, 0, -1):
        prev = trace[d - 1]  # index k + (d - 1)
        k = x - y
        down = k == -d or (k != d and prev[k - 1 + d - 1] < prev[k + 1 + d - 1])
        pk = k + 1 if down else k - 1
        px = prev[pk + d - 1]
        py = px - pk
        sx, sy = (px, py + 1) if down else (px + 1, py)
        if x > sx:
            blocks.append((sx, sy, x - sx))
        x, y = px, py
    if x > 0:
        blocks.append((0, 0, x))
    blocks.reverse()
    return blocks


def _line_opcodes(a_lines: list[str], b_lines: list[str]) -> list[tuple[int, int, int, int]]:
    """(i1, i2, j1, j2) of each changed line range: common prefix and suffix trimmed first,
    then Myers' diff on line ids of the window between."""
    n, m = len(a_lines), len(b_lines)
    lo = 0
    while lo < n and lo < m and a_lines[lo] == b_lines[lo]:
        lo += 1
    hi = 0
    while hi < n - lo and hi < m - lo and a_lines[n - 1 - hi] == b_lines[m - 1 - hi]:
        hi += 1
    ids: dict[str, int] = {}
    a = [ids.setdefault(t, len(ids)) for t in a_lines[lo : n - hi]]
    b = [ids.setdefault(t, len(ids)) for t in b_lines[lo : m - hi]]
    blocks = _matching_blocks(a, b, MAX_DIFF_LINES)
    if blocks is None:
        return [(lo, n - hi, lo, m - hi)]
    out = []
    i = j = 0
    for bi, bj, size in [*blocks, (len(a), len(b), 0)]:
        if bi > i or bj > j:
            out.append((lo + i, lo + bi, lo + j, lo + bj))
        i, j = bi + size, bj + size
    return out


def minimal_edits(old: str, new: str, path: str = "") -> tuple[TextEdit, ...]:
    """Edits that turn ``old`` into ``new``, touching only the lines that differ.

    Lines are matched by :func:`_line_opcodes` (near-linear for the few changes a fix makes);
    inside a one-line change the common prefix and suffix are trimmed, so renaming
    ``.double()`` to ``.float()`` edits six characters, not the line.
    """
    if old == new:
        return ()
    a_lines = split_lines(old, keepends=True)
    b_lines = split_lines(new, keepends=True)
    starts = line_starts(old)
    a_off = [*starts[: len(a_lines)], len(old)]
    b_off = [0]
    for ln in b_lines:
        b_off.append(b_off[-1] + len(ln))
    edits: list[TextEdit] = []
    for i1, i2, j1, j2 in _line_opcodes(a_lines, b_lines):
        a0, a1 = a_off[i1], a_off[i2]
        b0, b1 = b_off[j1], b_off[j2]
        old_part, new_part = old[a0:a1], new[b0:b1]
        # Trim the common prefix/suffix (never splitting a CRLF pair) so one-line changes stay small.
        p = 0
        lim = min(len(old_part), len(new_part))
        while p < lim and old_part[p] == new_part[p]:
            p += 1
        while p and old_part[p - 1] == "\r" and p < len(old_part) and old_part[p] == "\n":
            p -= 1
        s = 0
        lim2 = min(len(old_part), len(new_part)) - p
        while s < lim2 and old_part[-1 - s] == new_part[-1 - s]:
            s += 1
        while s and old_part[len(old_part) - s] == "\n" and len(old_part) - s - 1 >= 0 and old_part[len(old_part) - s - 1] == "\r":
            s -= 1
        edits.append(_edit(path, old, starts, a0 + p, a1 - s, new_part[p : len(new_part) - s]))
    return tuple(edits)


def edited_lines(edits: Iterable[TextEdit]) -> set[int]:
    """Original lines an edit touches (an insertion at column 0 touches no existing text)."""
    lines: set[int] = set()
    for e in edits:
        if e.line == e.end_line and e.col == e.end_col and e.col == 0:
            continue  # pure insertion before a line
        last = e.end_line if e.end_col > 0 or e.end_line == e.line else e.end_line - 1
        lines.update(range(e.line, last + 1))
    return lines
