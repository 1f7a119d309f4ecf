"""Column conversions between code points (our spans) and the units editors count in.

Spans carry 0-based **code-point** columns (libcst's convention). LSP clients count in the
negotiated encoding: UTF-16 code units by default (VS Code), UTF-8 bytes (Neovim lists it first),
or UTF-32 (= code points). A character above U+FFFF is 1 code point, 2 UTF-16 units and 4 UTF-8
bytes, so ``'中文😋'`` before a call shifts its column differently per encoding.

No pygls import: the server adapts these plain functions to its document objects.
"""

from __future__ import annotations

import bisect
import re
from typing import Literal

Encoding = Literal["utf-8", "utf-16", "utf-32"]
ENCODINGS: tuple[str, ...] = ("utf-8", "utf-16", "utf-32")

# The line terminators Python's tokenizer and LSP agree on (str.splitlines also splits on \f, \v,
# \x1c.. and U+2028, which neither does).
NEWLINE_RE = re.compile(r"\r\n|\r|\n")


def line_starts(text: str) -> list[int]:
    """Offset of the first character of every line (line 1 at index 0), as LSP and the tokenizer
    count lines."""
    return [0, *(m.end() for m in NEWLINE_RE.finditer(text))]


def split_lines(text: str, *, keepends: bool = False) -> list[str]:
    """The lines of ``text`` as LSP counts them (never ``str.splitlines``, which also splits on
    ``\f``, ``\v``, U+2028 ...); ``keepends``: with their terminators (the last may lack one)."""
    if not keepends:
        return NEWLINE_RE.split(text)
    starts = line_starts(text)
    return [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)])]


def _check(encoding: str) -> str:
    enc = encoding.lower().replace("_", "-")
    if enc in ("utf8",):
        enc = "utf-8"
    elif enc in ("utf16",):
        enc = "utf-16"
    elif enc in ("utf32",):
        enc = "utf-32"
    if enc not in ENCODINGS:
        raise ValueError(f"unknown position encoding {encoding!r} (expected one of {', '.join(ENCODINGS)})")
    return enc


def utf16_units(text: str) -> int:
    """Length of ``text`` in UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def utf8_units(text: str) -> int:
    """Length of ``text`` in UTF-8 bytes (lone surrogates count as 3, as editors do)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def col_to_units(line_text: str, col: int, encoding: str = "utf-16") -> int:
    """Code-point column on ``line_text`` -> column in ``encoding`` units (clamped to the line)."""
    enc = _check(encoding)
    col = max(0, min(col, len(line_text)))
    if enc == "utf-32":
        return col
    prefix = line_text[:col]
    return utf16_units(prefix) if enc == "utf-16" else utf8_units(prefix)


def col_from_units(line_text: str, units: int, encoding: str = "utf-16") -> int:
    """Column in ``encoding`` units -> code-point column.

    Past the end of the line gives the line length (LSP: "defaults back to the line length"); a
    position inside a character (half a surrogate pair, a byte inside a UTF-8 sequence) gives the
    start of that character.
    """
    enc = _check(encoding)
    units = max(0, units)
    if enc == "utf-32" or line_text.isascii():
        return min(units, len(line_text))
    count = 0
    for i, ch in enumerate(line_text):
        o = ord(ch)
        if enc == "utf-16":
            width = 2 if o > 0xFFFF else 1
        else:
            width = 1 if o < 0x80 else 2 if o < 0x800 else 3 if o < 0x10000 else 4
        if count + width > units:
            return i
        count += width
    return len(line_text)


class LineIndex:
    """Line starts of a whole document, for offset <-> (line, column) conversions.

    Lines are 1-based and columns 0-based code points, as in :class:`~.spans.Span`; offsets are
    code-point offsets into the document string. ``\\r\\n``, ``\\r`` and ``\\n`` end lines.
    """

    __slots__ = ("text", "_starts", "_ends")

    def __init__(self, text: str) -> None:
        self.text = text
        starts = [0]
        ends = []
        for m in NEWLINE_RE.finditer(text):
            ends.append(m.start())
            starts.append(m.end())
        ends.append(len(text))
        self._starts = starts
        self._ends = ends

    @property
    def line_count(self) -> int:
        return len(self._starts)

    def line_text(self, line: int) -> str:
        """Text of 1-based ``line`` without its terminator ("" outside the document)."""
        if not 1 <= line <= len(self._starts):
            return ""
        return self.text[self._starts[line - 1] : self._ends[line - 1]]

    def offset(self, line: int, col: int) -> int:
        """Code-point offset of (1-based line, code-point col), clamped into the document."""
        if line < 1:
            return 0
        if line > len(self._starts):
            return len(self.text)
        start, end = self._starts[line - 1], self._ends[line - 1]
        return start + max(0, min(col, end - start))

    def position(self, offset: int) -> tuple[int, int]:
        """(1-based line, code-point col) of a code-point offset (clamped)."""
        offset = max(0, min(offset, len(self.text)))
        i = bisect.bisect_right(self._starts, offset) - 1
        col = min(offset, self._ends[i]) - self._starts[i]
        return i + 1, col

    def to_units(self, line: int, col: int, encoding: str = "utf-16") -> tuple[int, int]:
        """(1-based line, code-point col) -> LSP (0-based line, character in ``encoding``)."""
        return line - 1, col_to_units(self.line_text(line), col, encoding)

    def from_units(self, line0: int, character: int, encoding: str = "utf-16") -> tuple[int, int]:
        """LSP (0-based line, character in ``encoding``) -> (1-based line, code-point col)."""
        return line0 + 1, col_from_units(self.line_text(line0 + 1), character, encoding)

    def slice(self, line: int, col: int, end_line: int, end_col: int) -> str:
        """Document text between two (line, code-point col) positions."""
        return self.text[self.offset(line, col) : self.offset(end_line, end_col)]

    def utf8_offset(self, line: int, col: int) -> int:
        """Byte offset of a position in the UTF-8 encoding of the document."""
        return utf8_units(self.text[: self.offset(line, col)])


def span_to_units(lines: LineIndex, line: int, col: int, end_line: int, end_col: int,
                  encoding: str = "utf-16") -> tuple[int, int, int, int]:
    """A code-point range -> LSP range numbers (0-based lines, ``encoding`` characters)."""
    sl, sc = lines.to_units(line, col, encoding)
    el, ec = lines.to_units(end_line, end_col, encoding)
    return sl, sc, el, ec
