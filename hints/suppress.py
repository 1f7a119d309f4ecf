"""Line suppressions: ``# msprof: ignore[CODE, ...]`` and bare ``# msprof: ignore``.

Only real comments count (a ``#`` inside a string is not one), so the source is tokenized. Code
being edited is often incomplete (an unclosed bracket, a half-typed string); tokenize then stops
early, and the lines it did not reach are scanned by a small quote-aware line scanner instead.

A line inside a multi-line string cannot hold a comment: the comment after the string's closing
quotes covers every line of the string.

A code may be a prefix (``NPU1`` silences NPU101..NPU109), as in ``select``/``ignore``.

``# msprof: ignore-file[CODE, ...]`` (or bare ``# msprof: ignore-file``), a comment anywhere in
the file, silences the codes in the whole file: the suppression for findings about the file rather than a
line (an environment variable, a missing import), kept in the table under line ``FILE``.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

from msprof_lsp.mapping.source.positions import NEWLINE_RE, split_lines

from .finding import TextEdit

_DIRECTIVE = re.compile(r"#\s*msprof:\s*ignore(?:\[(?P<codes>[^\]]*)\]|(?![\w\[-]))", re.IGNORECASE)
_FILE_DIRECTIVE = re.compile(r"^#\s*msprof:\s*ignore-file(?:\[(?P<codes>[^\]]*)\]|(?![\w\[-]))", re.IGNORECASE)
_CODE = re.compile(r"^[A-Za-z]+[0-9]*$")

ALL: frozenset[str] = frozenset({"*"})
"""The code set of a bare ``# msprof: ignore``."""

FILE = 0
"""The key of ``# msprof: ignore-file[...]`` in a suppression table (lines are 1-based)."""


@dataclass(frozen=True, slots=True)
class Comment:
    line: int  # 1-based
    col: int  # 0-based code points of "#"
    text: str


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
        lines = split_lines(text)
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


def _codes_of(m: re.Match[str]) -> frozenset[str]:
    if m.group("codes") is None:
        return ALL
    codes = frozenset(c.strip().upper() for c in re.split(r"[,\s]+", m.group("codes")) if c.strip())
    codes = frozenset(c for c in codes if _CODE.match(c))
    return codes or ALL


def parse_codes(comment: str) -> frozenset[str] | None:
    """The codes a comment silences: ALL for a bare directive, None when it has no directive."""
    m = _DIRECTIVE.search(comment)
    if m is None:
        return None
    return _codes_of(m)


def parse_file_codes(comment: str) -> frozenset[str] | None:
    """The codes an ``ignore-file`` comment silences in its file (None: not one)."""
    m = _FILE_DIRECTIVE.match(comment)
    return _codes_of(m) if m is not None else None


def _union(a: frozenset[str] | None, b: frozenset[str]) -> frozenset[str]:
    if a is None:
        return b
    return ALL if (a is ALL or b is ALL) else a | b

def _multiline_strings(text: str) -> dict[int, int]:
    """Last line -> first line of each string token that spans lines (tokenize where it can)."""
    out: dict[int, int] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type not in _NO_TEXT and tok.end[0] > tok.start[0]:
                out[tok.end[0]] = min(tok.start[0], out.get(tok.end[0], tok.start[0]))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


_NO_TEXT = frozenset({tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.COMMENT})


def suppressions(text: str) -> dict[int, frozenset[str]]:
    """Line -> codes silenced there (ALL for every code); ``FILE`` -> codes silenced in the file."""
    out: dict[int, frozenset[str]] = {}
    spans: dict[int, int] | None = None
    for c in comments(text):
        whole = parse_file_codes(c.text)
        if whole is not None:
            out[FILE] = _union(out.get(FILE), whole)
            continue
        codes = parse_codes(c.text)
        if codes is None:
            continue
        if spans is None:
            spans = _multiline_strings(text)
        for line in range(spans.get(c.line, c.line), c.line + 1):
            out[line] = _union(out.get(line), codes)
    return out


def _silences(codes: frozenset[str] | None, code: str) -> bool:
    if codes is None:
        return False
    return codes is ALL or "*" in codes or any(code.upper().startswith(c) for c in codes)


def is_suppressed(table: dict[int, frozenset[str]], line: int, code: str) -> bool:
    """Silenced on ``line`` or in the whole file."""
    return _silences(table.get(line), code) or _silences(table.get(FILE), code)


def span_suppressed(table: dict[int, frozenset[str]], line: int, end_line: int, code: str) -> bool:
    """Whether a finding on lines ``line``..``end_line`` is silenced: a directive on its first or
    its last line (a call split over lines takes one on either), or for the whole file. The one
    check: the rules engine applies it to findings, the editor to directives typed since."""
    return is_suppressed(table, line, code) or is_suppressed(table, end_line, code)


def _string_end(text: str, line: int) -> int | None:
    """The closing line of the multi-line string that ``line`` opens or continues (not ends)."""
    for end, start in _multiline_strings(text).items():
        if start <= line < end:
            return end
    return None


def _append_code(comment: Comment, m: re.Match[str], code: str, path: str) -> TextEdit | None:
    """Add ``code`` to the codes of an existing directive; None when it is already silenced."""
    if m.group("codes") is None:
        return None  # the bare directive already silences everything
    codes = [c.strip() for c in re.split(r"[,\s]+", m.group("codes")) if c.strip()]
    if any(code.upper().startswith(c.upper()) for c in codes):
        return None
    body = m.group("codes").rstrip()
    sep = ", " if body else ""
    start = comment.col + m.start("codes") + len(body)
    return TextEdit(path, comment.line, start, comment.line, comment.col + m.end("codes"), f"{sep}{code}")


def file_suppression_edit(text: str, code: str, path: str = "") -> TextEdit | None:
    """The edit that silences ``code`` in the whole file; None when it already is.

    Appends to an existing ``# msprof: ignore-file[...]``; otherwise inserts that comment as its
    own line after the module docstring (or after a shebang / coding line), never inside a string.
    """
    for c in comments(text):
        m = _FILE_DIRECTIVE.match(c.text)
        if m is not None:
            return _append_code(c, m, code, path)
    lines = split_lines(text)
    eol = m.group(0) if (m := NEWLINE_RE.search(text)) else "\n"
    at = _after_header(text, lines)
    directive = f"# msprof: ignore-file[{code}]"
    if at < len(lines):
        return TextEdit(path, at + 1, 0, at + 1, 0, directive + eol)
    last = lines[-1]
    return TextEdit(path, len(lines), len(last), len(lines), len(last), eol + directive)


def _after_header(text: str, lines: list[str]) -> int:
    """Lines (0-based count) before the place for a file-level comment: shebang, coding line, docstring."""
    at = 0
    while at < min(2, len(lines)) and (lines[at].startswith("#!") or re.match(r"^[ \t\f]*#.*coding[:=]", lines[at])):
        at += 1
    try:
        toks = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
                if t.type not in (tokenize.NL, tokenize.COMMENT, tokenize.ENCODING)][:2]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return at
    if len(toks) == 2 and toks[0].type == tokenize.STRING and toks[1].type in (tokenize.NEWLINE, tokenize.ENDMARKER):
        at = max(at, toks[0].end[0])  # the module docstring ends there
    return at


def suppression_edit(text: str, line: int, code: str, path: str = "") -> TextEdit | None:
    """The edit that silences ``code`` on ``line``; None when it already is (or cannot be).

    Appends to an existing ``# msprof: ignore[...]``; otherwise adds ``  # msprof: ignore[CODE]`` at
    the end of the line, after any comment already there (``# noqa`` stays first). A line inside
    a multi-line string (a docstring) takes the comment after the closing quotes instead.
    """
    lines = split_lines(text)
    if not 1 <= line <= len(lines):
        return None
    end = _string_end(text, line)
    if end is not None:
        line = end
    content = lines[line - 1]
    comment = next((c for c in comments(text) if c.line == line), None)
    if comment is not None:
        m = _DIRECTIVE.search(comment.text)
        if m is not None:
            return _append_code(comment, m, code, path)
    stripped = content.rstrip()
    if comment is None and stripped.endswith("\\"):
        return None  # a comment after a line continuation is a syntax error
    return TextEdit(path, line, len(stripped), line, len(content), f"  # msprof: ignore[{code}]")
