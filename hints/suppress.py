"""Line suppressions: ``# msprof: ignore[CODE, ...]`` and bare ``# msprof: ignore``.

Only real comments count (a ``#`` inside a string is not one), so the source is tokenized. Code
being edited is often incomplete (an unclosed bracket, a half-typed string); tokenize then stops
early, and the lines it did not reach are scanned by a small quote-aware line scanner instead.

A code may be a prefix (``NPU1`` silences NPU101..NPU109), as in ``select``/``ignore``.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

from .finding import TextEdit

_DIRECTIVE = re.compile(r"#\s*msprof:\s*ignore(?:\[(?P<codes>[^\]]*)\]|(?![\w\[-]))", re.IGNORECASE)
_CODE = re.compile(r"^[A-Za-z]+[0-9]*$")
_EOL = re.compile(r"\r\n|\r|\n")

ALL: frozenset[str] = frozenset({"*"})
"""The code set of a bare ``# msprof: ignore``."""


@dataclass(frozen=True, slots=True)
class Comment:
    line: int  # 1-based
    col: int  # 0-based code points of "#"
    text: str


def _lines(text: str) -> list[str]:
    return _EOL.split(text)


def comments(text: str) -> list[Comment]:
    """Every comment in the text: tokenize where it can, the line scanner past where it stops."""
    found: list[Comment] = []
    reached = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                found.append(Comment(tok.start[0], tok.start[1], tok.string))
            reached = max(reached, tok.end[0])
    except (tokenize.TokenError, IndentationError, SyntaxError):
        lines = _lines(text)
        # The failing token starts at or before `reached`; rescan from there (duplicates removed).
        start = max(reached, 1)
        seen = {c.line for c in found}
        in_triple: str | None = None
        for n in range(1, len(lines) + 1):
            col, in_triple = _scan_line(lines[n - 1], in_triple)
            if n >= start and col is not None and n not in seen:
                found.append(Comment(n, col, lines[n - 1][col:]))
    return found


def _scan_line(line: str, in_triple: str | None) -> tuple[int | None, str | None]:
    """Column of the comment on a line (None: no comment) and the triple-quote state after it."""
    i, n = 0, len(line)
    quote: str | None = None
    while i < n:
        ch = line[i]
        if in_triple:
            if line.startswith(in_triple, i):
                i += 3
                in_triple = None
                continue
            i += 2 if ch == "\\" else 1
            continue
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
            i += 1
            continue
        if ch == "#":
            return i, None
        if line.startswith('"""', i) or line.startswith("'''", i):
            in_triple = line[i : i + 3]
            i += 3
            continue
        if ch in "\"'":
            quote = ch
        i += 1
    return None, in_triple


def parse_codes(comment: str) -> frozenset[str] | None:
    """The codes a comment silences: ALL for a bare directive, None when it has no directive."""
    m = _DIRECTIVE.search(comment)
    if m is None:
        return None
    if m.group("codes") is None:
        return ALL
    codes = frozenset(c.strip().upper() for c in re.split(r"[,\s]+", m.group("codes")) if c.strip())
    codes = frozenset(c for c in codes if _CODE.match(c))
    return codes or ALL


def suppressions(text: str) -> dict[int, frozenset[str]]:
    """Line -> codes silenced there (ALL for every code)."""
    out: dict[int, frozenset[str]] = {}
    for c in comments(text):
        codes = parse_codes(c.text)
        if codes is not None:
            out[c.line] = ALL if (codes is ALL or out.get(c.line) is ALL) else out.get(c.line, frozenset()) | codes
    return out


def is_suppressed(table: dict[int, frozenset[str]], line: int, code: str) -> bool:
    codes = table.get(line)
    if codes is None:
        return False
    return codes is ALL or "*" in codes or any(code.upper().startswith(c) for c in codes)


def suppression_edit(text: str, line: int, code: str, path: str = "") -> TextEdit | None:
    """The edit that silences ``code`` on ``line``; None when it already is (or cannot be).

    Appends to an existing ``# msprof: ignore[...]``; otherwise adds ``  # msprof: ignore[CODE]`` at
    the end of the line, after any comment already there (``# noqa`` stays first).
    """
    lines = _lines(text)
    if not 1 <= line <= len(lines):
        return None
    content = lines[line - 1]
    comment = next((c for c in comments(text) if c.line == line), None)
    if comment is not None:
        m = _DIRECTIVE.search(comment.text)
        if m is not None:
            if m.group("codes") is None:
                return None  # bare ignore already silences everything
            codes = [c.strip() for c in re.split(r"[,\s]+", m.group("codes")) if c.strip()]
            if any(code.upper().startswith(c.upper()) for c in codes):
                return None
            end = comment.col + m.end("codes")
            body = m.group("codes").rstrip()
            sep = ", " if body else ""
            start = comment.col + m.start("codes") + len(body)
            return TextEdit(path, line, start, line, end, f"{sep}{code}")
    stripped = content.rstrip()
    if comment is None and stripped.endswith("\\"):
        return None  # a comment after a line continuation is a syntax error
    return TextEdit(path, line, len(stripped), line, len(content), f"  # msprof: ignore[{code}]")
