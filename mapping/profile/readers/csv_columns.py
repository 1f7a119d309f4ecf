"""Column-wise parsing of profiler CSVs: one pandas C-engine pass, then vectorised conversions.

Readers describe the columns they want (:class:`Col`: output key, header spellings, kind) and get
typed numpy/categorical columns back. Why this shape (measured in benchmarks/bench_csv.py, see
docs/performance.md "CSV readers"):

* text columns are read as ``category``: the C parser builds the categories itself, and the
  clean-ups (``N/A`` -> "", the triple quotes around shapes) then run once per distinct value;
* PMU ratios and durations are parsed as float64 by the C parser (no Python object per cell);
  :func:`scaled_half_up` turns µs into ns exactly for what the producers write;
* epoch timestamps are too large for float64, so they stay strings and go through an exact
  integer split (:func:`us_cells_to_ns`);
* integer ids go through categories too, so ``N/A`` and the 4294967295 / 18446744073709551615
  sentinels map to -1 per distinct value.

A cell that does not parse never aborts the read: the row is dropped when the column is required
(a kernel without a start) or the cell left at its default otherwise, with an Issue naming the
line. If the fast float parse meets such a cell, the file is parsed again with those columns as
strings -- slower, but only for broken files.
"""

from __future__ import annotations

import csv
import io
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from msprof_lsp.mapping.errors import Issue, ProfileError
from msprof_lsp.mapping.numbers import float_of, int64_of
from msprof_lsp.mapping.units import us_text_to_ns
from msprof_lsp.mapping.profile.readers.csv_text import CsvSource, header_key

MISSING_TOKENS = frozenset({"", "N/A", "NULL", "NA", "None"})
"""Cells that mean "no value" in Ascend CSVs."""

SENTINEL_MIN = 4294967295
"""Integer ids at or above 2**32-1 are sentinels (Model ID, Subtask Id, invalid notify ids)."""

_I64_MISSING = np.iinfo(np.int64).min
_I64_BAD = _I64_MISSING + 1
_I64_MAX = np.iinfo(np.int64).max
_MAX_LINE_ISSUES = 5  # per column; the rest are summarised in one Issue

# Col kinds: text (categorical, N/A -> ""), shape (text, outer quotes stripped), rawcat
# (categorical, as written), raw (object str, as written), time (exact µs string -> ns), dur
# (µs via float -> ns), int, float, bytes (size with its unit in the header: (B)/(KB)/(MB)/(GB)).
_CAT_KINDS = frozenset({"text", "shape", "int", "rawcat"})
_FLOAT_KINDS = frozenset({"dur", "float", "bytes"})
_UNIT_RE = re.compile(r"\((B|KB|MB|GB)\)\s*$", re.IGNORECASE)
_BYTES_PER = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
_BAD_LINE_RE = re.compile(r"Skipping line (\d+): expected (\d+) fields, saw (\d+)")
_LINE_RE = re.compile(r"line (\d+)|row (\d+)")


@dataclass(frozen=True, slots=True)
class Col:
    """One wanted column: ``key`` in the output, header spellings, kind, whether rows need it."""

    key: str
    names: tuple[str, ...]
    kind: str
    required: bool = False
    missing: frozenset[str] = frozenset()  # extra cell values meaning "none" (e.g. "host")
    sentinels: bool = True  # int: ids >= 2**32-1 mean "none" (off for pointers, counts)


@dataclass(slots=True)
class Columns:
    """Parsed columns of one file, all of length ``length`` (rows that failed dropped)."""

    source: CsvSource
    data: dict[str, Any]  # key -> np.ndarray (int64/float64/object) or pd.Categorical
    length: int
    found: dict[str, str]  # key -> the header spelling present in the file
    extras: dict[str, np.ndarray] = field(default_factory=dict)  # header -> float64
    issues: list[Issue] = field(default_factory=list)
    _lines: _LazyLines | None = None
    _kept: np.ndarray | None = None  # original row of each kept row, when rows were dropped

    def has(self, key: str) -> bool:
        return key in self.found

    def line(self, row: int) -> int | None:
        """Physical line (1-based) where kept row ``row`` starts, for Issues."""
        if self._lines is None:
            return None
        original = int(self._kept[row]) if self._kept is not None else row
        return self._lines[original] or None


@dataclass(slots=True)
class _Header:
    """Where the wanted columns (and the kept extras) are in one file's header."""

    positions: dict[str, int]  # col.key -> header position
    found: dict[str, str]  # col.key -> the header spelling present in the file
    extra_pos: dict[int, str]  # header position -> the name an extra column is kept under


def read_columns(
    source: CsvSource,
    cols: Sequence[Col],
    *,
    extras: bool = False,
    ignore: Iterable[str] = (),
    alias_extras: dict[str, str] | None = None,
) -> Columns:
    """Parse ``source`` into the wanted columns.

    ``extras``: keep every other column that holds numbers as float64 (under its header, or the
    name ``alias_extras`` maps its folded header to); ``ignore``: headers never kept.
    Raises ProfileError when a required column is absent or the text cannot be tokenised.
    """
    path = source.name
    issues = list(source.issues)
    head = _find_columns(source, cols, issues, extras=extras, ignore=ignore, alias_extras=alias_extras or {})
    kinds = {head.positions[c.key]: c.kind for c in cols if c.key in head.positions}
    float_pos = [i for i, k in kinds.items() if k in _FLOAT_KINDS] + list(head.extra_pos)
    frame, skipped = _parse(source, kinds, float_pos, as_float=True)
    if frame is None:  # a float column holds text: parse those columns as strings instead
        frame, skipped = _parse(source, kinds, float_pos, as_float=False)
        assert frame is not None
    for line, expected, saw in skipped[:_MAX_LINE_ISSUES]:
        issues.append(Issue(path, f"row has {saw} fields, header has {expected}; row skipped", line))
    if len(skipped) > _MAX_LINE_ISSUES:
        issues.append(Issue(path, f"{len(skipped) - _MAX_LINE_ISSUES} more rows with a wrong number of "
                                  f"fields (last at line {skipped[-1][0]}); skipped"))

    n = len(frame)
    lines = _LazyLines(source, n, [s[0] for s in skipped])
    result = Columns(source, {}, n, head.found, issues=issues, _lines=lines)
    drop = _convert_columns(frame, cols, head, result, lines)
    if drop.any():
        keep = ~drop
        result.data = {k: v[keep] for k, v in result.data.items()}
        result.extras = {k: v[keep] for k, v in result.extras.items()}
        result.length = int(keep.sum())
        result._kept = np.flatnonzero(keep)
    return result


def _find_columns(
    source: CsvSource, cols: Sequence[Col], issues: list[Issue], *, extras: bool, ignore: Iterable[str],
    alias_extras: dict[str, str],
) -> _Header:
    """Match the header against the wanted spellings (a repeated column: the first kept); with
    ``extras``, the other numeric columns. ProfileError when a required column is absent."""
    path = source.name
    by_key: dict[str, Col] = {}
    for col in cols:
        for name in col.names:
            by_key.setdefault(header_key(name), col)
    ignored = {header_key(n) for n in ignore}
    head = _Header({}, {}, {})
    for i, name in enumerate(source.header):
        hk = header_key(name)
        col = by_key.get(hk)
        if col is not None:
            if col.key in head.positions:
                issues.append(Issue(path, f"duplicate column {name!r} ignored", 1))
                continue
            head.positions[col.key] = i
            head.found[col.key] = name
        elif extras and name and hk not in ignored:
            head.extra_pos[i] = alias_extras.get(hk, name)
    if head.extra_pos:
        head.extra_pos = _numeric_extras(source, head.extra_pos, issues)

    missing = [c for c in cols if c.required and c.key not in head.positions]
    if missing:
        wanted = ", ".join(repr(c.names[0]) for c in missing)
        raise ProfileError(
            path, f"missing required column {wanted}; header is: {','.join(source.header)}", 1
        )
    return head


def _convert_columns(frame: pd.DataFrame, cols: Sequence[Col], head: _Header, result: Columns,
                     lines: _LazyLines) -> np.ndarray:
    """Convert each found column into ``result`` (bad cells reported); returns the rows to drop
    (a required cell that does not convert)."""
    source, issues = result.source, result.issues
    path = source.name
    drop = np.zeros(len(frame), dtype=bool)
    for col in cols:
        if col.key not in head.positions:
            continue
        pos = head.positions[col.key]
        name = head.found[col.key]
        values, bad, bad_cells = _convert(frame[pos], col, name)
        if bad is not None and bad.any():
            rows = np.flatnonzero(bad)
            if col.required:
                drop[rows] = True
            _report(issues, path, name, rows, bad_cells, lines, col.required)
        result.data[col.key] = values
    for pos, name in head.extra_pos.items():
        values, bad, bad_cells = _to_float(frame[pos], frozenset())
        if bad is not None and bad.any():
            _report(issues, path, source.header[pos], np.flatnonzero(bad), bad_cells, lines, False)
        result.extras[name] = values
    return drop


# -- parsing -----------------------------------------------------------------------------------

_SNIFF_ROWS = 2000


def _numeric_extras(source: CsvSource, extra_pos: dict[int, str], issues: list[Issue]) -> dict[int, str]:
    """Keep the unknown columns whose first rows hold mostly numbers (or nothing).

    A text column from a newer producer version must not be read as float: that would send
    every read of the file down the slow string path. A numeric column with a stray bad cell is
    kept (the full parse reports the cell).
    """
    src: Any = io.BytesIO(source.buffer) if source.buffer is not None else source.path
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            head = pd.read_csv(
                src, header=None, skiprows=1, nrows=_SNIFF_ROWS, names=list(range(len(source.header))),
                usecols=list(extra_pos), dtype=object, keep_default_na=False, na_filter=False,
                on_bad_lines="skip", engine="c", encoding="utf-8",
            )
    except (ValueError, OSError):
        return extra_pos  # the full parse reports what is wrong
    keep: dict[int, str] = {}
    for pos, name in extra_pos.items():
        values, bad, _ = _to_float(head[pos], frozenset())
        numbers = int(np.count_nonzero(~np.isnan(values)))
        if bad is not None and int(bad.sum()) > numbers:
            issues.append(Issue(source.name, f"column {source.header[pos]!r} holds text; not kept"))
        else:
            keep[pos] = name
    return keep


def _parse(
    source: CsvSource, kinds: dict[int, str], float_pos: list[int], *, as_float: bool
) -> tuple[pd.DataFrame | None, list[tuple[int, int, int]]]:
    ncols = len(source.header)
    dtype: dict[int, Any] = {}
    for i in range(ncols):
        kind = kinds.get(i)
        if as_float and i in float_pos:
            dtype[i] = "float64"
        elif kind in _CAT_KINDS or kind is None and i not in float_pos:
            dtype[i] = "category"
        else:
            dtype[i] = object
    na_values = {i: list(MISSING_TOKENS) for i in float_pos} if as_float else {}
    src: Any = io.BytesIO(source.buffer) if source.buffer is not None else source.path
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            frame = pd.read_csv(
                src,
                header=None,
                skiprows=1,
                names=list(range(ncols)),
                dtype=dtype,
                keep_default_na=False,
                na_values=na_values,
                na_filter=bool(na_values),
                on_bad_lines="warn",
                engine="c",
                encoding="utf-8",
                skip_blank_lines=True,
            )
    except ValueError as exc:
        if as_float and not isinstance(exc, pd.errors.ParserError):
            return None, []
        raise _parser_error(source, exc) from None
    except (OSError, pd.errors.ParserError) as exc:
        raise _parser_error(source, exc) from None
    skipped: list[tuple[int, int, int]] = []
    for w in caught:
        for m in _BAD_LINE_RE.finditer(str(w.message)):
            skipped.append((int(m.group(1)), int(m.group(2)), int(m.group(3))))
    skipped.sort()
    return frame, skipped


def _parser_error(source: CsvSource, exc: Exception) -> ProfileError:
    text = str(exc).replace("Error tokenizing data. C error: ", "")
    m = _LINE_RE.search(text)
    line = None
    if m and m.group(1):
        line = int(m.group(1))
    elif m and m.group(2):  # pandas counts data rows from 1 after the skipped header
        line = int(m.group(2)) + 1
    return ProfileError(source.path, f"cannot parse CSV: {text.strip()}", line)


class _LazyLines:
    """Physical line number of each parsed row, computed only when an Issue needs one."""

    def __init__(self, source: CsvSource, rows: int, skipped: list[int]) -> None:
        self.source = source
        self.rows = rows
        self.skipped = skipped
        self.computed: np.ndarray | None = None

    def __getitem__(self, row: int) -> int:
        if self.computed is None:
            self.computed = self._compute()
        return int(self.computed[row])

    def _compute(self) -> np.ndarray:
        src = self.source
        if self.rows + len(self.skipped) + 1 == src.lines:
            # one physical line per row (no quoted line breaks, no blank lines)
            lines = np.arange(2, src.lines + 1, dtype=np.int64)
            if self.skipped:
                lines = lines[~np.isin(lines, np.asarray(self.skipped))]
            return lines
        # Quoted cells span lines (operator_details.csv) or blank lines exist: scan the records.
        if src.buffer is not None:
            text = io.StringIO(src.buffer.decode("utf-8"), newline="")
        else:
            text = open(src.path, encoding="utf-8", newline="")  # noqa: SIM115
        starts: list[int] = []
        skipped = set(self.skipped)
        with text:
            reader = csv.reader(text)
            end = 0
            try:
                for record in reader:
                    start, end = end + 1, reader.line_num
                    if start == 1 or not record or (len(record) == 1 and not record[0].strip()):
                        continue
                    if start not in skipped:
                        starts.append(start)
            except csv.Error:
                pass
        starts += [0] * max(0, self.rows - len(starts))
        return np.asarray(starts[: self.rows], dtype=np.int64)


def _report(
    issues: list[Issue],
    path: str,
    header: str,
    rows: np.ndarray,
    cells: Sequence[str],
    lines: _LazyLines,
    required: bool,
) -> None:
    action = "row skipped" if required else "value left empty"
    for row, cell in zip(rows[:_MAX_LINE_ISSUES], cells):
        what = f"unparseable {header!r} value {cell!r}" if cell else f"no {header!r} value"
        issues.append(Issue(path, f"{what}; {action}", lines[row]))
    if len(rows) > _MAX_LINE_ISSUES:
        more = len(rows) - _MAX_LINE_ISSUES
        issues.append(
            Issue(path, f"{more} more rows with unparseable {header!r} values (last at line "
                  f"{lines[rows[-1]]}); {action}")
        )


# -- conversions -------------------------------------------------------------------------------


def _convert(series: pd.Series, col: Col, header: str) -> tuple[Any, np.ndarray | None, list[str]]:
    kind = col.kind
    if kind == "text":
        return _map_categories(series, _text_cell), None, []
    if kind == "shape":
        return _map_categories(series, _shape_cell), None, []
    if kind == "rawcat":
        return _map_categories(series, str), None, []
    if kind == "raw":
        values = series.to_numpy(dtype=object)
        return np.where(pd.isna(values), "", values).astype(object), None, []
    if kind == "int":
        return _int_column(series, col.missing, col.sentinels)
    if kind == "time":
        return _time_column(series, col.missing, col.required)
    if kind in ("dur", "bytes"):
        scale = 1000.0
        if kind == "bytes":
            m = _UNIT_RE.search(header)
            scale = float(_BYTES_PER[m.group(1).upper()]) if m else 1.0
        floats, bad, cells = _to_float(series, col.missing)
        out = np.full(len(floats), -1, dtype=np.int64)
        with np.errstate(invalid="ignore", over="ignore"):
            huge = ~(np.abs(floats) * scale < 2.0**62)  # a 400-digit cell: unreadable, not wrapped
        too_big = huge & ~np.isnan(floats)
        if kind == "dur":
            too_big |= floats < 0  # a negative duration is as unreadable as a 400-digit one
        ok = np.isfinite(floats) & ~too_big
        out[ok] = scaled_half_up(floats[ok], scale)
        if too_big.any():
            bad = too_big | (bad if bad is not None else False)
            cells = [str(v) for v in series.to_numpy(dtype=object)[bad][:_MAX_LINE_ISSUES]]
        if col.required and not ok.all():
            bad = ~ok  # a required duration that is absent cannot be defaulted
            raw = series.to_numpy(dtype=object)[bad][:_MAX_LINE_ISSUES]
            cells = ["" if isinstance(v, float) else str(v) for v in raw]
        return out, bad, cells
    if kind == "float":
        return _to_float(series, col.missing)
    raise ValueError(f"unknown column kind {kind!r}")


_TIE = 1e-3  # |fraction - 0.5| below this is a decimal tie blurred by float rounding


def scaled_half_up(values: np.ndarray, scale: float) -> np.ndarray:
    """``values * scale`` rounded half away from zero to int64, like mapping.units does.

    The C parser's float64 is the nearest double to the decimal text, so ``values * scale`` is
    within about 1e-16 relative of the exact product: every result is exact when the text has
    at most three decimals (µs -> ns) and |value| < 2**51 ns. A fourth decimal of exactly 5 (a
    tie such as ``38.0125``) can land either side of .5 in float; ties are detected with a
    tolerance far below the 0.1 ns step of four-decimal input and rounded up in magnitude.
    """
    y = np.abs(values * scale)
    whole = np.floor(y)
    frac = y - whole
    up = (frac > 0.5) | (np.abs(frac - 0.5) < _TIE)
    out = (whole + up).astype(np.int64)
    return np.where(values < 0, -out, out)


def _text_cell(value: str) -> str:
    value = value.strip()
    return "" if value in MISSING_TOKENS else value


def _shape_cell(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        return value[1:-1].strip()
    return "" if value in MISSING_TOKENS else value


def _categories(series: pd.Series) -> tuple[np.ndarray, list[str]]:
    if not isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype("category")
    cat = series.cat
    return cat.codes.to_numpy(), [str(c) for c in cat.categories]


def _map_categories(series: pd.Series, fn: Any) -> pd.Categorical:
    """Apply ``fn`` once per distinct value; missing cells become ""."""
    codes, cats = _categories(series)
    mapped = [fn(c) for c in cats] + [""]  # last slot: code -1 (absent cell)
    uniq, inverse = np.unique(np.asarray(mapped, dtype=object), return_inverse=True)
    return pd.Categorical.from_codes(inverse[codes], categories=pd.Index(uniq, dtype=object))


def int_cell(value: str, missing: frozenset[str] = frozenset(), sentinels: bool = True) -> int | None:
    """One integer cell: -1 for missing (and sentinel) values, None when it is not a number."""
    s = value.strip()
    if s in MISSING_TOKENS or s in missing:
        return -1
    n = int64_of(s)
    if n is None and sentinels and len(s) <= 20 and s.isascii() and s.isdigit() and int(s) < 2**64:
        return -1  # 18446744073709551615 and kin: the producers' uint64 "no value"
    if n is None:  # "3.0" from some writers is 3; "²", 2**64, 1e300, 1.5: unreadable (noticed)
        f = float_of(s)
        n = int64_of(f) if f is not None else None
        if n is None:
            return None
    if n >= SENTINEL_MIN and sentinels:
        return -1
    return n


def _int_column(
    series: pd.Series, missing: frozenset[str], sentinels: bool
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    codes, cats = _categories(series)
    parsed = [int_cell(c, missing, sentinels) for c in cats]
    values = np.asarray([-1 if p is None else p for p in parsed] + [-1], dtype=np.int64)
    bad_cat = np.asarray([p is None for p in parsed] + [False], dtype=bool)
    bad = bad_cat[codes]
    cells = [cats[c] for c in codes[bad][:_MAX_LINE_ISSUES]] if bad.any() else []
    return values[codes], bad, cells


def time_cell_ns(text: str, missing: frozenset[str] = frozenset()) -> int:
    """Exact ns of one µs cell; ``_I64_MISSING`` for no value, ``_I64_BAD`` for garbage.

    The common form (digits, optional dot and digits, TAB/space around) is handled inline; the
    rest (signs, exponents, ``.5``) by :func:`mapping.units.us_text_to_ns`, which it matches.
    """
    s = text.strip()
    whole, _, frac = s.partition(".")
    if len(whole) > 19:  # past int64 ns whatever follows (and past Python's 4,300-digit int limit)
        return _I64_MISSING if s in missing else _I64_BAD
    if whole.isdigit() and whole.isascii() and (not frac or (frac.isdigit() and frac.isascii())):
        ns = int(whole) * 1000
        if frac:
            ns += int(frac[:3].ljust(3, "0"))
            if len(frac) > 3 and frac[3] >= "5":
                ns += 1
    elif s in MISSING_TOKENS or s in missing:
        return _I64_MISSING
    else:
        try:
            ns = us_text_to_ns(s)
        except (ValueError, OverflowError):
            return _I64_BAD
    # int64 ns reach year 2262 in epoch time; anything beyond is not a profiler time
    return ns if _I64_BAD < ns <= _I64_MAX else _I64_BAD


def us_cells_to_ns(values: Iterable[Any], count: int = -1) -> np.ndarray:
    """Vector form of :func:`time_cell_ns` (non-strings count as missing)."""
    return np.fromiter(
        (time_cell_ns(v) if isinstance(v, str) else _I64_MISSING for v in values),
        dtype=np.int64,
        count=count,
    )


def _time_column(
    series: pd.Series, missing: frozenset[str], required: bool
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    raw = series.to_numpy(dtype=object)
    if missing:
        ns = np.fromiter(
            (time_cell_ns(v, missing) if isinstance(v, str) else _I64_MISSING for v in raw),
            dtype=np.int64,
            count=len(raw),
        )
    else:
        ns = us_cells_to_ns(raw, len(raw))
    bad = ns == _I64_BAD
    absent = ns == _I64_MISSING
    if required:
        bad |= absent  # a row that needs this time cannot do without it
    cells = [str(v) for v in raw[bad][:_MAX_LINE_ISSUES]] if bad.any() else []
    ns[bad | absent] = -1
    return ns, bad, cells


def _to_float(series: pd.Series, missing: frozenset[str]) -> tuple[np.ndarray, np.ndarray | None, list[str]]:
    """Float64 values; NaN for missing cells. ``bad`` marks cells that are text (slow path only:
    on the fast path the C parser already produced floats)."""
    if series.dtype == np.float64:
        return series.to_numpy(), None, []
    text = pd.Series(series.to_numpy(dtype=object), dtype=object).str.strip()
    out = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, copy=True)
    absent = (text.isna() | text.isin(MISSING_TOKENS | missing)).to_numpy()
    bad = np.isnan(out) & ~absent & (text.str.lower() != "nan").to_numpy()
    out[absent] = np.nan
    raw = series.to_numpy(dtype=object)
    cells = [str(v) for v in raw[bad][:_MAX_LINE_ISSUES]] if bad.any() else []
    return out, bad, cells
