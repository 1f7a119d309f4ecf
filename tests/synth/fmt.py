"""Exact text forms the producers write, and incremental file writers.

Times: epoch µs with 3 decimals as strings (``"1736413971558972.912"``); durations as the shortest
decimal of the ns value (``185.504``, ``16``). CSV cells follow the torch_npu files: comma-separated,
quoted when they contain a comma, quote, TAB or line break (quotes doubled), so a shape value
``"8,512"`` (quotes included) is written ``\"\"\"8,512\"\"\"`` and a time with its trailing
TAB ``"…972.912\\t"``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

_NEEDS_QUOTES = re.compile(r'[,"\r\n\t]')


def ts_text(ns: int) -> str:
    """Epoch ns -> ``"<µs>.<3 decimals>"`` (the trace_view.json ``ts`` string)."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def us_trim(ns: int) -> str:
    """ns -> shortest exact decimal µs: 185504 -> ``185.504``, 16000 -> ``16``, 1350 -> ``1.35``."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    whole, frac = divmod(ns, 1000)
    if not frac:
        return f"{sign}{whole}"
    return f"{sign}{whole}." + f"{frac:03d}".rstrip("0")


def us_float(ns: int) -> float:
    """ns -> float µs (trace_view ``dur``); float(ns/1000) round-trips to the same ns."""
    return ns / 1000


def csv_cell(value: Any) -> str:
    s = value if isinstance(value, str) else str(value)
    if _NEEDS_QUOTES.search(s):
        return '"' + s.replace('"', '""') + '"'
    return s


def quoted_shape(shapes: str) -> str:
    """The cell value torch_npu gives shapes: the list wrapped in literal quotes."""
    return f'"{shapes}"'


class CsvOut:
    """Write a CSV row by row (no whole-file buffer), with the given line ending."""

    def __init__(self, path: Path, header: Sequence[str], *, newline: str = "\r\n", encoding: str = "utf-8") -> None:
        self.path = path
        self.newline = newline
        self.f: IO[str] = open(path, "w", encoding=encoding, newline="")
        self.rows = 0
        self._write(header)

    def _write(self, cells: Iterable[Any]) -> None:
        self.f.write(",".join(csv_cell(c) for c in cells) + self.newline)

    def row(self, cells: Iterable[Any]) -> None:
        self._write(cells)
        self.rows += 1

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> CsvOut:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class JsonArrayOut:
    """Stream a bare JSON array: compact ``json.dumps`` defaults (``", "`` / ``": "``), UTF-8 text."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.f: IO[str] = open(path, "w", encoding="utf-8", newline="")
        self.enc = json.JSONEncoder(ensure_ascii=False)
        self.count = 0
        self.f.write("[")

    def extend(self, events: Iterable[dict]) -> None:
        batch = list(events)
        if not batch:
            return
        # One C-encoder call per batch: a list encodes as "[e1, e2]", exactly the file's separators.
        text = self.enc.encode(batch)[1:-1]
        self.f.write((", " if self.count else "") + text)
        self.count += len(batch)

    def close(self) -> None:
        self.f.write("]")
        self.f.close()


def dump_json(path: Path, obj: Any, *, indent: int | None = None) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent)
