"""Read-only access to the profilers' SQLite exports (torch_npu DB export, msprof ``--type=db``).

Nothing is ever written beside a profile. The file is opened through a ``mode=ro`` URI (no journal,
no schema upgrade). A WAL-mode file (torch_npu writes its DB export so) would still get
``-wal``/``-shm`` files created or modified beside it by a read-only open, so:

* with no write-ahead log pending (no ``-wal`` file, or an empty one) it is opened ``immutable``:
  SQLite then touches no other file;
* a non-empty ``-wal`` means the profiler is still writing (or crashed before a checkpoint), and its
  committed rows live only in the log. The file and its log are copied into a private temporary
  folder (at most ``wal_copy_bytes`` together, read through ``safe_io``) and the copy is opened:
  SQLite builds its ``-shm`` index there, the rows in the log are read, and the folder is removed
  when the database is closed. A file that changes while it is copied is copied again, then
  refused as "still being written".

Every sqlite failure becomes a ProfileError naming the file: not a database,
truncated/corrupt, locked by the profiler that is still writing it. Tables and columns are looked
up by name, so newer versions with extra tables or columns read the same, and a missing optional
table reads as an empty frame.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from msprof_lsp.mapping.numbers import int64_of
from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.errors import ProfileError

SQLITE_MAGIC = b"SQLite format 3\x00"
INT_CHUNK_ROWS = 2_000_000
"""Rowids per group_concat query: keeps each concatenated text far below SQLite's 1 GB limit."""
LOCK_TIMEOUT_S = 2.0
"""How long to wait for a writer's lock before giving up with "still being written"."""


COPY_ATTEMPTS = 3
"""Copies of a pending-WAL file tried before it is reported as still being written."""
_COPY_CHUNK = 1 << 20


def _wal_state(path: Path) -> tuple[bool, bool]:
    """(WAL mode: header bytes 18-19 = 2, a non-empty ``-wal`` file beside it)."""
    try:
        with path.open("rb") as fh:
            header = fh.read(20)
    except OSError:
        return False, False
    if header[18:20] != b"\x02\x02":
        return False, False
    wal = _wal_of(path)
    try:
        return True, wal.stat().st_size > 0
    except OSError:  # no -wal file (or unreadable): nothing pending that we could read
        return True, False


def _wal_of(path: Path) -> Path:
    """The log SQLite would use: beside the file a link points to (the connection opens that one)."""
    real = path.resolve()
    return real.with_name(real.name + "-wal")


def _stamp(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _copy_bounded(src: Path, dst: Path, budget: int) -> int:
    """Copy a regular file through safe_io, refusing it past ``budget`` bytes; the bytes copied."""
    done = 0
    with safe_io.open_regular(src, budget) as fin, dst.open("xb") as fout:
        while chunk := fin.read(_COPY_CHUNK):
            done += len(chunk)
            if done > budget:  # the file grew past the limit while it was copied
                raise safe_io.LimitExceeded(src, safe_io.Limit.FILE_SIZE, f"more than {budget:,} bytes (with its -wal)")
            fout.write(chunk)
    return done


def _private_copy(path: Path, folder: Path, limits: safe_io.Limits = safe_io.LIMITS) -> Path:
    """``path`` and its ``-wal`` copied into ``folder``: a consistent pair, or ProfileError."""
    wal = _wal_of(path)
    dst = folder / path.name
    dst_wal = folder / (dst.name + "-wal")  # the name SQLite looks for beside the copy
    for _ in range(COPY_ATTEMPTS):
        for p in (dst, dst_wal):
            p.unlink(missing_ok=True)
        try:
            before = (_stamp(path), _stamp(wal))
        except OSError as exc:
            raise ProfileError(path, f"cannot read: {exc.strerror or exc}") from None
        used = _copy_bounded(path, dst, limits.wal_copy_bytes)
        _copy_bounded(wal, dst_wal, limits.wal_copy_bytes - used)
        try:
            after = (_stamp(path), _stamp(wal))
        except OSError as exc:
            raise ProfileError(path, f"cannot read: {exc.strerror or exc}") from None
        if before == after:  # neither file moved while it was copied: the pair is one state
            return dst
    raise ProfileError(path, "database is still being written (it changed while it was copied); "
                             "retry when the profiler has finished")


class SqliteDb:
    """One open, read-only SQLite file with its table/column catalogue."""

    def __init__(self, path: Path) -> None:
        self.path = path
        _check_header(path)
        self._private: Path | None = None  # the temporary folder of a pending-WAL copy
        self._cleanup: weakref.finalize | None = None
        wal_mode, pending = _wal_state(path)
        target, immutable = path, wal_mode and not pending
        if pending:
            # SQLite would create or update "-shm" beside the profile: read a private copy instead.
            try:
                self._private = Path(tempfile.mkdtemp(prefix="msprof-lsp-wal-"))
                self._cleanup = weakref.finalize(self, shutil.rmtree, self._private, True)
                target = _private_copy(path, self._private)
            except BaseException as exc:
                self._remove_copy()
                if isinstance(exc, OSError):  # no temporary folder, or a full disk
                    why = exc.strerror or exc
                    raise ProfileError(path, f"cannot copy it with its pending -wal to read it: {why}") from None
                raise
        try:
            self._con = sqlite3.connect(
                f"{target.resolve().as_uri()}?mode=ro{'&immutable=1' if immutable else ''}",
                uri=True, timeout=LOCK_TIMEOUT_S,
                isolation_level=None,
            )
        except sqlite3.Error as exc:
            self._remove_copy()
            raise _error(path, exc) from None
        # Damaged pages can hold invalid UTF-8 in any text cell: replaced, never a decode error.
        self._con.text_factory = _text
        self.tables: dict[str, list[str]] = {}
        try:
            with self.guard():
                # One read transaction for the whole load: every table is read from the same
                # snapshot even if the profiler is still appending to the file.
                self._con.execute("BEGIN")
                names = [r[0] for r in self._con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
                for name in names:
                    cols = [r[1] for r in self._con.execute(f"PRAGMA table_info({_quote(name)})")]
                    self.tables[name] = cols
        except ProfileError:
            self._con.close()
            self._remove_copy()
            raise
        self._strings: pd.Series | None = None
        self.unreadable_string_ids = 0  # STRING_IDS rows whose id is no integer (left out)

    def close(self) -> None:
        try:
            if self._con.in_transaction:
                self._con.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        self._con.close()
        self._remove_copy()

    def _remove_copy(self) -> None:
        if self._cleanup is not None:
            self._cleanup()  # runs once; also at exit or collection if close() is never called

    def __enter__(self) -> SqliteDb:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Turn sqlite errors raised inside into a ProfileError naming this file."""
        try:
            yield
        except sqlite3.Error as exc:
            raise _error(self.path, exc) from None
        except UnicodeDecodeError:  # sqlite's own message quotes the damaged schema bytes
            raise ProfileError(self.path, "corrupt SQLite database (damaged schema or text pages)") from None

    # -- catalogue ----------------------------------------------------------------------------

    def has(self, table: str) -> bool:
        return table in self.tables

    def column(self, table: str, *aliases: str) -> str | None:
        """The first of ``aliases`` the table has (``blockNum`` / ``blockDim``), else None."""
        cols = self.tables.get(table, ())
        for alias in aliases:
            if alias in cols:
                return alias
        return None

    # -- queries ------------------------------------------------------------------------------

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        """Rows of ``sql``; a BLOB cell comes back as text like a damaged text cell (no table of a
        profile holds binary data, and a ``b"\\xff"`` name or value failed the load downstream)."""
        with self.guard():
            rows = self._con.execute(sql, params).fetchall()
        if any(type(v) is bytes for row in rows for v in row):
            rows = [tuple(_text(v) if type(v) is bytes else v for v in row) for row in rows]
        return rows

    def frame(self, table: str, columns: dict[str, tuple[Sequence[str], str]]) -> pd.DataFrame:
        """Select ``{out: ((aliases...), kind)}`` from ``table``; kind ``int`` / ``real`` / ``any``.

        ``int`` columns come back as int64 with NULL → -1 (times stored as TEXT are cast in SQL,
        exactly); ``real`` as float64 with NULL → NaN; ``any`` (STRING_IDS ids, or text in some
        builds) as int64 when every value is an integer or NULL, else as stored (object).
        Columns the table lacks come back filled with -1 / NaN / None; a missing table gives an
        empty frame. Rows are in rowid order in every column.
        """
        present: dict[str, tuple[str, str]] = {}
        for out, (aliases, kind) in columns.items():
            col = self.column(table, *aliases)
            if col is not None:
                present[out] = (_quote(col), kind)
        any_cols = [out for out, (_, kind) in present.items() if kind == "any"]
        if table in self.tables and any_cols:
            checks = ", ".join(f"COALESCE(SUM(typeof({present[o][0]}) NOT IN ('integer', 'null')), 0)" for o in any_cols)
            for out, non_int in zip(any_cols, self.query(f"SELECT {checks} FROM {_quote(table)}")[0]):
                if not non_int:
                    present[out] = (present[out][0], "int")
        ints = [o for o, (_, k) in present.items() if k == "int"]
        others = [o for o, (_, k) in present.items() if k != "int"]
        values: dict[str, np.ndarray] = {}
        n = 0
        if table in self.tables and present:
            if ints:
                arrays = self._int_columns(table, [present[o][0] for o in ints])
                values.update(zip(ints, arrays))
                n = len(arrays[0])
            if others:
                exprs = [f"CAST({present[o][0]} AS REAL)" if present[o][1] == "real" else present[o][0] for o in others]
                rows = self.query(f"SELECT {', '.join(exprs)} FROM {_quote(table)} ORDER BY rowid")
                if ints and len(rows) != n:
                    raise ProfileError(self.path, f"table {table} changed while it was read")
                n = len(rows)
                cols = list(zip(*rows)) if rows else [()] * len(others)
                for out, col in zip(others, cols):
                    if present[out][1] == "real":
                        values[out] = np.array([np.nan if v is None else v for v in col], dtype=np.float64)
                    else:
                        values[out] = np.array(col, dtype=object)
        data: dict[str, object] = {}
        for out, (_, kind) in columns.items():
            v = values.get(out)
            if v is None:
                v = np.full(n, -1, np.int64) if kind == "int" else np.full(n, np.nan) if kind == "real" else np.full(n, None, dtype=object)
            # object columns stay object (pandas would convert text to its string dtype, slowly)
            data[out] = pd.Series(v, dtype=object) if v.dtype == object else v
        return pd.DataFrame(data)

    def _int_columns(self, table: str, exprs: list[str]) -> list[np.ndarray]:
        """Integer columns, fast: SQLite concatenates each column into one text per chunk of
        rowids and numpy parses it (about 2.5x faster than fetchall for wide tables; see
        docs/performance.md). NULL → -1."""
        q = _quote(table)
        lo, count = self.query(f"SELECT MIN(rowid), COUNT(*) FROM {q}")[0]
        if not count:
            return [np.empty(0, dtype=np.int64) for _ in exprs]
        casts = [f"COALESCE(CAST({e} AS INTEGER), -1)" for e in exprs]
        inner = ", ".join(f"{c} AS c{i}" for i, c in enumerate(casts))
        outer = ", ".join(f"group_concat(c{i}, ' ')" for i in range(len(exprs)))
        parts: list[list[np.ndarray]] = [[] for _ in exprs]
        # Chunks of rows after the last rowid read (keyset), not of the rowid range: a hostile
        # rowid of -2^63 or 2^63-1 made a range walk take 2^63 / chunk queries (a fuzz hang).
        cond, after, done = "rowid >= ?", lo, 0
        while done < count:
            row = self.query(
                f"SELECT MAX(r), COUNT(*), {outer} FROM "
                f"(SELECT rowid AS r, {inner} FROM {q} WHERE {cond} ORDER BY rowid LIMIT ?)",
                (after, INT_CHUNK_ROWS),
            )[0]
            if not row[1]:
                break  # rows deleted while read: the length check below or the caller's says so
            for i, text in enumerate(row[2:]):
                if text:
                    parts[i].append(np.fromstring(text, dtype=np.int64, sep=" "))
            cond, after, done = "rowid > ?", row[0], done + row[1]
        arrays = [np.concatenate(p) if p else np.empty(0, dtype=np.int64) for p in parts]
        if len({len(a) for a in arrays}) > 1:  # cannot happen with integer text; be sure anyway
            raise ProfileError(self.path, f"inconsistent column lengths reading table {table}")
        return arrays

    # -- STRING_IDS -----------------------------------------------------------------------------

    def strings(self) -> pd.Series:
        """STRING_IDS as a Series id → value (empty when the table is missing)."""
        if self._strings is None:
            rows = self.query("SELECT id, value FROM STRING_IDS") if self.has("STRING_IDS") else []
            keys = [int64_of(r[0], integral_floats=False) for r in rows]
            if None in keys:  # an id of 'abc', '²' or 1e20 (a table made without INTEGER PRIMARY KEY)
                self.unreadable_string_ids = keys.count(None)  # no int reference can name it: left out
                rows = [r for r, k in zip(rows, keys) if k is not None]
                keys = [k for k in keys if k is not None]
            ids = np.fromiter(keys, dtype=np.int64, count=len(rows))
            # a value column without TEXT affinity may hold numbers: names are text everywhere after
            values = np.array([r[1] if isinstance(r[1], str) else "" if r[1] is None else str(r[1]) for r in rows],
                              dtype=object)
            s = pd.Series(values, index=ids, dtype=object)
            self._strings = s[~s.index.duplicated(keep="first")]
        return self._strings

    def resolve(self, values: Sequence[object] | np.ndarray | pd.Series) -> np.ndarray:
        """Map STRING_IDS ids to their text; text stored directly (older builds) is kept; NULL,
        -1 and unknown ids give ""."""
        arr = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
        strings = self.strings()
        if arr.dtype != object:
            idx = strings.index.get_indexer(arr)
            out = np.where(idx >= 0, strings.to_numpy()[np.maximum(idx, 0)] if len(strings) else "", "")
            return out.astype(object)
        codes, uniques = pd.factorize(pd.Series(arr, dtype=object), use_na_sentinel=False)
        lookup = strings.to_dict()
        mapped = np.array(
            [
                v if isinstance(v, str) and not _is_int_text(v) else lookup.get(_as_int(v), "")
                for v in uniques
            ],
            dtype=object,
        )
        return mapped[codes] if len(arr) else np.empty(0, dtype=object)


def _is_int_text(v: str) -> bool:
    return v.isascii() and v.isdigit()  # "²" passes str.isdigit() alone, then int() raises


def _as_int(v: object) -> int:
    """A STRING_IDS key, -1 (no string) for anything else: "²", 30 digits, NaN, 1e999."""
    n = int64_of(v, integral_floats=False)
    return -1 if n is None else n


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _check_header(path: Path) -> None:
    if not Path(path).exists():
        raise ProfileError(path, "file not found")
    head = safe_io.read_head(path, len(SQLITE_MAGIC))
    if not head:
        raise ProfileError(path, "empty file (the profiler may still be writing it)")
    if head != SQLITE_MAGIC:
        raise ProfileError(path, "not a SQLite database (expected a torch_npu/msprof DB export)")


def _error(path: Path, exc: sqlite3.Error) -> ProfileError:
    text = str(exc)
    low = text.lower()
    if "locked" in low or "busy" in low:
        return ProfileError(path, f"database is locked ({text}): the profiler may still be writing it; retry when it has finished")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return ProfileError(path, f"corrupt or truncated SQLite database ({text})")
    return ProfileError(path, f"cannot read SQLite database: {text}")
