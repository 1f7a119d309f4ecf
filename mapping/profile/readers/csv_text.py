"""Checking a profiler CSV before it is parsed: encoding, binary content, truncation, header.

Profiler CSVs reach hundreds of MB, so the file is scanned once in chunks (never held whole in
memory on the common path) and the parser then reads it straight from disk. Only the rare cases
-- a GB18030 file, or a last row cut off mid-way -- are parsed from an in-memory copy.
"""

from __future__ import annotations

import codecs
import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.errors import Issue, ProfileError

_CHUNK = 16 << 20
_BOM = codecs.BOM_UTF8


@dataclass(slots=True)
class CsvSource:
    """A CSV file that passed the checks, ready for the column parser.

    ``buffer`` is None when the parser can read ``path`` itself (UTF-8, complete last row);
    otherwise it holds the UTF-8 bytes of the complete rows. Header cells are stripped of
    surrounding whitespace (and the BOM).
    """

    path: Path
    header: list[str]
    buffer: bytes | None = None
    issues: list[Issue] = field(default_factory=list)
    lines: int = 0  # physical lines handed to the parser, header included

    @property
    def name(self) -> str:
        return str(self.path)


def open_csv(path: Path) -> CsvSource:
    """Check ``path`` and read its header.

    Raises ProfileError for a missing/unreadable or empty file, NUL bytes (binary content or a
    UTF-16 export) and text that is neither UTF-8 nor GB18030. Adds Issues for a GB18030 file and
    for a last row that stops mid-way (the row is dropped; a complete last row without a final
    line break is kept).
    """
    path = Path(path)
    issues: list[Issue] = []
    f = safe_io.open_regular(path)
    size = os.fstat(f.fileno()).st_size
    with f:
        if size == 0:
            raise ProfileError(path, "empty file")
        ascii_only, utf8_ok, quotes, newlines, last = _scan(f, path)
    if ascii_only or utf8_ok:
        encoding = "utf-8"
    else:
        encoding = "gb18030"
        issues.append(Issue(str(path), "not valid UTF-8; decoded as GB18030 (Chinese Windows export)"))

    need_buffer = encoding != "utf-8"
    data: bytes | None = None
    cut_line: int | None = None
    if last not in (b"\n", b"\r") or quotes % 2:
        # No final line break, or a quoted cell left open (a multi-line cell cut after one of
        # its line breaks): the last row is complete only if it is outside any quote and has
        # every field; decide on the tail (the file is read into memory only on this path).
        data = safe_io.read_bytes(path, size)
        cut = _last_row_start(data, quotes)
        tail = data[cut:]
        if not _tail_is_complete(tail, quotes % 2 == 0, data, encoding):
            cut_line = data.count(b"\n", 0, cut) + 1
            data = data[:cut]
            need_buffer = True
    if need_buffer:
        if data is None:
            data = safe_io.read_bytes(path, size)
        if encoding != "utf-8":
            try:
                data = data.decode(encoding).encode("utf-8")
            except UnicodeDecodeError as exc:
                line = data.count(b"\n", 0, exc.start) + 1
                raise ProfileError(path, "not UTF-8 or GB18030 text", line) from None
        if data.startswith(_BOM):
            data = data[len(_BOM):]
    else:
        data = None

    header = _read_header(path, data, encoding)
    if cut_line is not None:
        if cut_line == 1:
            raise ProfileError(path, "file ends inside its header line", 1)
        why = "; a quoted cell is never closed" if quotes % 2 else ""
        issues.append(
            Issue(str(path), f"file ends mid-row at line {cut_line}{why}; row dropped", cut_line)
        )
    if data is not None:
        newlines = data.count(b"\n")
        last = data[-1:]
    lines = newlines + (0 if last == b"\n" else 1)
    return CsvSource(path, header, data, issues, lines=lines)


def _scan(f: io.BufferedReader, path: Path) -> tuple[bool, bool, int, int, bytes]:
    """One pass: NUL check, ASCII/UTF-8 validity, count of quotes and line breaks, last byte."""
    ascii_only = True
    decoder = codecs.getincrementaldecoder("utf-8")()
    utf8_ok = True
    quotes = newlines = 0
    last = b""
    line = 1
    cells = safe_io.CsvCells(str(path))
    while chunk := f.read(_CHUNK):
        nul = chunk.find(b"\x00")
        if nul >= 0:
            at = line + chunk.count(b"\n", 0, nul)
            raise ProfileError(path, "binary content (NUL bytes): not a CSV text file", at)
        if utf8_ok and not (ascii_only and chunk.isascii()):
            ascii_only = False
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError:
                utf8_ok = False
        cells.feed(chunk)  # before any parser sees a cell of a gigabyte
        quotes += chunk.count(b'"')
        n = chunk.count(b"\n")
        newlines += n
        line += n
        last = chunk[-1:]
    if utf8_ok and not ascii_only:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            utf8_ok = False  # ends inside a multi-byte character: treat as not UTF-8
    return ascii_only, utf8_ok, quotes, newlines, last


def _last_row_start(data: bytes, quotes: int) -> int:
    """Offset where the last (unterminated) row starts: after the last line break that lies
    outside quotes. Quote parity before a position = total parity XOR parity after it."""
    parity = quotes % 2
    end = len(data)
    while True:
        nl = data.rfind(b"\n", 0, end)
        if nl < 0:
            return 0
        after = data.count(b'"', nl + 1)
        if (parity - after) % 2 == 0:
            return nl + 1
        end = nl


def _tail_is_complete(tail: bytes, balanced: bool, data: bytes, encoding: str) -> bool:
    if not balanced:
        return False  # ends inside a quoted cell
    if not tail.strip():
        return True
    head_end = data.find(b"\n")
    head = data[: head_end if head_end >= 0 else len(data)]
    try:
        n_header = len(next(csv.reader([head.decode(encoding, "replace").lstrip("\ufeff")])))
        n_tail = len(next(csv.reader([tail.decode(encoding, "replace")])))
    except (csv.Error, StopIteration):
        return False
    return n_tail >= n_header


def _read_header(path: Path, data: bytes | None, encoding: str) -> list[str]:
    if data is None:
        with safe_io.open_regular(path) as f:
            first = f.readline()
    else:
        end = data.find(b"\n")
        first = data[: end + 1 if end >= 0 else len(data)]
    text = first.decode(encoding, "replace").lstrip("\ufeff")
    try:
        cells = next(csv.reader([text.rstrip("\r\n")]))
    except (csv.Error, StopIteration):
        cells = []
    header = [c.strip() for c in cells]
    if not any(header):
        raise ProfileError(path, "no header row", 1)
    return header


def header_key(name: str) -> str:
    """Header cell folded for alias matching: case, spaces and underscores ignored
    (``Step Id``/``Step ID``, ``cube_utilization( %)``/``cube_utilization(%)``)."""
    return "".join(name.split()).replace("_", "").lower()
