"""Streaming decoder for bare-array Chrome traces: torch_npu ``trace_view.json`` and ``msprof_*.json``.

Files reach several GB, so the array is never ``json.load``-ed whole. The file is read in blocks of
``chunk_bytes``; each block is cut after the last event boundary (``}`` ``,`` ``{`` with optional
whitespace) and decoded as one small JSON array by a msgspec Struct decoder that keeps only the
fields the caller asked for. Each chunk is turned into numpy columns right away (strings interned
into one pool), so the per-event objects die young and peak memory stays near one chunk plus the
columns. docs/performance.md ("trace_view.json") has the measurements behind this choice.

A cut can fall inside a string or a nested value; that chunk is then not valid JSON, which msgspec
reports at the chunk's very end, and the chunk is merged with the next block. An error *before* the
end is a real defect in the file: the events before it are kept and an Issue names the byte offset
and line. A file without the closing ``]`` (still being written, or cut off) loads its complete
events with an Issue. A file that is not a JSON array at all raises ProfileError.
"""

from __future__ import annotations

import gc
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import msgspec
import numpy as np

from msprof_lsp.mapping.interning import Interner
from msprof_lsp.mapping.numbers import int64_of
from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.errors import Issue, ProfileError
from msprof_lsp.mapping.profile.locations import Progress, no_progress
from msprof_lsp.mapping.units import us_text_to_ns

NO_TIME = np.iinfo(np.int64).min
"""``ts_ns`` of events without a timestamp (metadata events)."""
NO_INT = np.iinfo(np.int64).min
"""Integer columns (``id``, int args) where the event has no value."""
NO_STR = -1
"""String-code columns where the event has no value."""

ArgKind = Literal["int", "str", "any"]

TORCH_NPU_ARGS: dict[str, ArgKind] = {
    # cpu_op
    "Sequence number": "int",
    "Fwd thread id": "int",
    "Input Dims": "str",
    "Input type": "str",
    "Call stack": "str",
    # metadata events: process_name / thread_name / process_labels
    "name": "str",
    "labels": "str",
    # enqueue / dequeue
    "correlation_id": "int",
    # device tasks
    "Task Type": "str",
    "Stream Id": "int",
    "Physic Stream Id": "int",
    "Task Id": "int",
    # CANN API events
    "level": "str",
    # counter events: the "AI Core Freq" process
    "MHz": "int",
    # python_function
    "Python id": "int",
    "Python parent id": "int",
}
"""The args the torch_npu reader needs; every other key is skipped by the decoder."""

DEFAULT_CHUNK_BYTES = 8 << 20

_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_BYTE_POS = re.compile(r"\(byte (\d+)\)")
_WS = b" \t\r\n"
_EPOCH_US_FLOAT_LIMIT = 2**53 / 1000  # numeric ts above this lose sub-ns digits as float64


@dataclass(slots=True)
class TraceEvents:
    """All events of one trace as columns; row i is the i-th event of the file.

    String-valued columns hold int32 codes into ``strings`` (``NO_STR`` = absent). ``pid``/``tid``
    strings that are not numbers get synthetic negative ids, named in ``pid_names``.
    """

    path: str
    strings: list[str]
    ph: np.ndarray  # int32 codes
    name: np.ndarray  # int32 codes
    cat: np.ndarray  # int32 codes
    pid: np.ndarray  # int64
    tid: np.ndarray  # int64
    ts_ns: np.ndarray  # int64, NO_TIME when absent
    dur_ns: np.ndarray  # int64, -1 when absent
    id: np.ndarray  # int64 flow id, NO_INT when absent (non-numeric string ids get negative codes)
    args: dict[str, np.ndarray]  # int args: int64 (NO_INT); str args: int32 codes; any: object
    issues: list[Issue] = field(default_factory=list)
    complete: bool = True  # the closing "]" was reached
    size: int = 0  # bytes in the file
    pid_names: dict[int, str] = field(default_factory=dict)
    _codes: dict[str, int] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.ph)

    def code(self, text: str) -> int:
        """The code of a string, or -2 (matches nothing) when it never occurs."""
        if not self._codes:
            self._codes = {s: i for i, s in enumerate(self.strings)}
        return self._codes.get(text, -2)

    def codes_where(self, predicate: Any) -> np.ndarray:
        """Codes of all pool strings for which ``predicate(text)`` holds."""
        return np.array([i for i, s in enumerate(self.strings) if predicate(s)], dtype=np.int32)

    def text(self, codes: np.ndarray) -> np.ndarray:
        """Decode string codes to an object array ("" for absent)."""
        pool = np.array(self.strings + [""], dtype=object)
        return pool[np.where(codes >= 0, codes, len(self.strings))]


# ---------------------------------------------------------------------------------------------
# Struct types


_TYPES_LOCK = threading.Lock()
_TYPES: dict[tuple[tuple[str, str], ...], tuple[type, type, type]] = {}

_ARG_TYPES: dict[str, Any] = {"int": int | str | None, "str": str | None, "any": Any}


def _event_types(args_spec: Mapping[str, ArgKind]) -> tuple[type, type, type]:
    """(Event, ExactEvent, Args) Struct types for one args spec (cached).

    ExactEvent decodes ``ts`` as Decimal so numeric epoch timestamps stay exact.
    """
    key = tuple(args_spec.items())
    with _TYPES_LOCK:
        found = _TYPES.get(key)
        if found:
            return found
        names = [f"a{i}" for i in range(len(key))]
        args_t = msgspec.defstruct(
            "Args",
            [(n, _ARG_TYPES[kind], None) for n, (_, kind) in zip(names, key)],
            rename=dict(zip(names, (k for k, _ in key))),
            gc=False,
        )

        def event(ts_type: Any, name: str) -> type:
            return msgspec.defstruct(
                name,
                [
                    ("ph", str, ""),
                    ("name", str | None, None),
                    ("cat", str | None, None),
                    ("pid", int | str | None, None),
                    ("tid", int | str | None, None),
                    ("ts", ts_type, None),
                    ("dur", float | None, None),
                    ("id", int | str | None, None),
                    ("args", args_t | None, None),
                ],
                gc=False,
            )

        found = (event(str | float | None, "Event"), event(Decimal | None, "ExactEvent"), args_t)
        _TYPES[key] = found
        return found


# ---------------------------------------------------------------------------------------------
# Column builders


class _NeedsExact(Exception):
    """A chunk has epoch timestamps as JSON numbers: decode it again with ``ts`` as Decimal."""


def _pool() -> Interner[str]:
    """The shared string pool: ids become strings; None maps to NO_STR, so absent values need no branch."""
    return Interner(normalize=lambda v: v if v.__class__ is str else str(v), fixed={None: NO_STR},
                    dtype=np.int32)


def _int_column(values: list[Any], pool: Interner[str], *, synthetic: dict[int, str] | None = None) -> np.ndarray:
    """ints / numeric strings -> int64; None -> NO_INT; other strings -> synthetic negative ids."""
    n = len(values)
    try:
        # float64 first: C-speed, None -> NaN. Exact below 2**53; larger values (flow ids are epoch
        # ns) are redone from the Python ints below.
        f = np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        f = None
    if f is not None:
        nan = np.isnan(f)
        # Only values float64 holds exactly are cast; NaN, inf and huge ids (HCCL writes
        # notify_id 2**64-1, beyond int64) take the exact per-value path below.
        big_mask = ~nan & ~(np.abs(f) < 2**53)
        out = np.where(nan | big_mask, 0, f).astype(np.int64)
        out[nan] = NO_INT
        big = np.flatnonzero(big_mask).tolist()
        if big:
            try:  # Python ints convert exactly
                out[big] = np.array([values[i] for i in big], dtype=np.int64)
            except (ValueError, TypeError, OverflowError):
                for i in big:
                    out[i] = _one_int(values[i], pool, synthetic)
        return out
    out = np.empty(n, dtype=np.int64)
    for i, v in enumerate(values):
        out[i] = _one_int(v, pool, synthetic)
    return out


def _one_int(v: Any, pool: Interner[str], synthetic: dict[int, str] | None) -> int:
    if v is None:
        return NO_INT
    if v.__class__ is int:
        return v if -(2**63) < v < 2**63 else _synthetic(str(v), pool, synthetic)
    if isinstance(v, float):
        return int(v) if v == v and abs(v) < 2**63 else NO_INT
    text = str(v).strip()
    n = int64_of(text)  # ASCII digits only: "²", "٣" and "1_0" are names (synthetic ids), as 2**63 is
    if n is not None and n != NO_INT:
        return n
    return _synthetic(text, pool, synthetic)


def _synthetic(text: str, pool: Interner[str], synthetic: dict[int, str] | None) -> int:
    """A stable negative id for a non-numeric pid/tid/id string (below -1, the model's 'none')."""
    code = int(pool.codes([text])[0])
    n = -1000 - code
    if synthetic is not None:
        synthetic[n] = text
    return n


def us_values_to_ns(values: list[Any]) -> tuple[np.ndarray, int, bool]:
    """Convert µs time values (strings, numbers, Decimals, None) to int64 ns exactly.

    Returns the array (NO_TIME where absent or unreadable), the count of unreadable values, and
    whether a float was too large to be exact (epoch µs as a JSON number: decode again as Decimal).
    Fast path: strings with exactly three decimals (what torch_npu writes) drop their dot and
    are read as integers; everything else goes through :func:`us_text_to_ns` one by one.
    """
    try:
        fast = [
            int(v.replace(".", "", 1)) if v.__class__ is str and v[-4:-3] == "." else NO_TIME for v in values
        ]
        out = np.array(fast, dtype=np.int64)
    except (ValueError, OverflowError):
        out = np.full(len(values), NO_TIME, dtype=np.int64)
    bad = 0
    inexact = False
    for i in np.flatnonzero(out == NO_TIME).tolist():
        v = values[i]
        if v is None:
            continue
        if v.__class__ is float and abs(v) >= _EPOCH_US_FLOAT_LIMIT:
            inexact = True
        try:
            out[i] = us_text_to_ns(v if v.__class__ is str else str(v))
        except (ValueError, TypeError):
            bad += 1
    return out, bad, inexact


def _dur_column(values: list[Any]) -> np.ndarray:
    try:
        f = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        f = np.array([_float_or_nan(v) for v in values], dtype=np.float64)
    nan = ~(np.abs(f) < _DUR_US_LIMIT)  # NaN, inf and absurd values read as absent
    out = np.rint(np.where(nan, 0.0, f) * 1000.0).astype(np.int64)
    out[nan] = -1
    return out


_DUR_US_LIMIT = 2.0**62 / 1000  # the largest duration whose ns fit int64


def _float_or_nan(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return float("nan")


@dataclass(slots=True)
class _Chunk:
    ph: np.ndarray
    name: np.ndarray
    cat: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    ts_ns: np.ndarray
    dur_ns: np.ndarray
    id: np.ndarray
    args: dict[str, np.ndarray]


_EXTRACTORS: dict[int, Any] = {}


def _extractor(n_fields: int) -> Any:
    """``f(args) -> ([a.a0 for a in args], [a.a1 ...], ...)``: one list comprehension per field.

    Generated once per field count: a comprehension with a literal attribute name is several times
    faster than getattr/attrgetter or astuple+zip over tens of thousands of structs.
    """
    fn = _EXTRACTORS.get(n_fields)
    if fn is None:
        body = ", ".join(f"[a.a{i} for a in args]" for i in range(n_fields))
        namespace: dict[str, Any] = {}
        exec(f"def extract(args):\n    return ({body}{',' if n_fields == 1 else ''})\n", namespace)  # noqa: S102
        fn = _EXTRACTORS[n_fields] = namespace["extract"]
    return fn


def _to_columns(
    events: list[Any], spec: Mapping[str, ArgKind], pool: Interner[str], pid_names: dict[int, str]
) -> tuple[_Chunk, int]:
    # Plain list comprehensions over the structs: the fastest way out of Python objects here.
    ts, bad, inexact = us_values_to_ns([e.ts for e in events])
    if inexact:
        raise _NeedsExact
    args_all = [e.args for e in events]
    with_args = [i for i, a in enumerate(args_all) if a is not None]
    n = len(events)
    present = [args_all[i] for i in with_args] if len(with_args) < n else args_all
    columns = _extractor(len(spec))(present) if with_args else [[] for _ in spec]
    args: dict[str, np.ndarray] = {}
    for (key, kind), values in zip(spec.items(), columns):
        if kind == "int":
            col = np.full(n, NO_INT, dtype=np.int64)
            if values:
                col[with_args] = _int_column(values, pool)
        elif kind == "str":
            col = np.full(n, NO_STR, dtype=np.int32)
            if values:
                col[with_args] = pool.codes(values)
        else:
            col = np.full(n, None, dtype=object)
            if values:
                col[with_args] = np.array(values + [None], dtype=object)[:-1]
        args[key] = col
    chunk = _Chunk(
        ph=pool.codes([e.ph for e in events]),
        name=pool.codes([e.name for e in events]),
        cat=pool.codes([e.cat for e in events]),
        pid=_int_column([e.pid for e in events], pool, synthetic=pid_names),
        tid=_int_column([e.tid for e in events], pool, synthetic=pid_names),
        ts_ns=ts,
        dur_ns=_dur_column([e.dur for e in events]),
        id=_int_column([e.id for e in events], pool),
        args=args,
    )
    return chunk, bad


# ---------------------------------------------------------------------------------------------
# Lenient path: a chunk whose values do not fit the typed decoder


def _coerce_events(items: Any, event_t: type, args_t: type, spec: Mapping[str, ArgKind]) -> tuple[list[Any], int]:
    """Rebuild typed events from untyped JSON values; returns (events, skipped non-objects)."""
    keys = list(spec.items())
    events = []
    skipped = 0
    for it in items:
        if not isinstance(it, dict):
            skipped += 1
            continue
        a = it.get("args")
        args = None
        if isinstance(a, dict):
            vals = []
            for key, kind in keys:
                v = a.get(key)
                if kind == "int":
                    v = _loose_id(v)
                elif kind == "str" and not isinstance(v, str):
                    v = None
                vals.append(v)
            args = args_t(*vals)
        events.append(
            event_t(
                ph=it.get("ph") if isinstance(it.get("ph"), str) else "",
                name=it.get("name") if isinstance(it.get("name"), str) else None,
                cat=it.get("cat") if isinstance(it.get("cat"), str) else None,
                pid=_loose_id(it.get("pid")),
                tid=_loose_id(it.get("tid")),
                ts=it.get("ts") if isinstance(it.get("ts"), (str, int, float, Decimal)) else None,
                dur=_loose_float(it.get("dur")),
                id=_loose_id(it.get("id")),
                args=args,
            )
        )
    return events, skipped


def _loose_id(v: Any) -> Any:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, str)):
        return v
    if isinstance(v, (float, Decimal)) and v == v and abs(v) < 2**63:
        return int(v)
    return None


def _loose_float(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    f = _float_or_nan(v)
    return None if f != f else f


# ---------------------------------------------------------------------------------------------
# The reader


class _Decoder:
    def __init__(self, path: Path, spec: Mapping[str, ArgKind]) -> None:
        self.path = path
        self.spec = dict(spec)
        event_t, exact_t, self.args_t = _event_types(self.spec)
        self.event_t = event_t
        self.fast = msgspec.json.Decoder(list[event_t])
        self.exact = msgspec.json.Decoder(list[exact_t])
        # float_hook: numbers stay exact (Decimal) on this rare path, so numeric ts need no retry
        self.untyped = msgspec.json.Decoder(float_hook=Decimal)
        self.pool = _pool()
        self.pid_names: dict[int, str] = {}
        self.chunks: list[_Chunk] = []
        self.issues: list[Issue] = []
        self.bad_times = 0
        self.skipped = 0
        self.lenient_chunks = 0
        self.replaced_utf8 = False
        self.truncated = False
        self.last_end = 0  # file offset just after the last decoded event

    def count(self) -> int:
        return sum(len(c.ph) for c in self.chunks)

    def decode(self, piece: bytes | bytearray) -> None:
        """Decode ``[`` + piece + ``]`` into a chunk; raises msgspec.DecodeError on bad JSON."""
        try:
            self._decode(piece)
        except RecursionError:
            raise safe_io.too_deep(self.path) from None

    def _decode(self, piece: bytes | bytearray) -> None:
        safe_io.check_json(self.path, piece)  # free below the string limit; a piece only grows past it for one
        data = b"[" + piece + b"]"
        try:
            events = self.fast.decode(data)
        except msgspec.ValidationError:
            items = self.untyped.decode(data)
            events, skipped = _coerce_events(items, self.event_t, self.args_t, self.spec)
            self.skipped += skipped
            self.lenient_chunks += 1
        except msgspec.DecodeError as exc:
            if "UTF-8" not in str(exc):
                raise
            fixed = bytes(piece).decode("utf-8", "replace").encode("utf-8")
            if fixed == bytes(piece):
                raise
            self.replaced_utf8 = True
            self._decode(fixed)
            return
        if not events:
            return
        if self.count() + len(events) > safe_io.LIMITS.events:
            raise safe_io.LimitExceeded(self.path, safe_io.Limit.EVENT_COUNT,
                                        f"more than {safe_io.LIMITS.events:,} events")
        try:
            chunk, bad = _to_columns(events, self.spec, self.pool, self.pid_names)
        except _NeedsExact:
            events = self.exact.decode(data)
            chunk, bad = _to_columns(events, self.spec, self.pool, self.pid_names)
        self.bad_times += bad
        self.chunks.append(chunk)

    def result(self, size: int, complete: bool) -> TraceEvents:
        def cat(attr: str, dtype: Any) -> np.ndarray:
            parts = [getattr(c, attr) for c in self.chunks]
            return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)

        args: dict[str, np.ndarray] = {}
        for key, kind in self.spec.items():
            parts = [c.args[key] for c in self.chunks]
            dtype = {"int": np.int64, "str": np.int32, "any": object}[kind]
            args[key] = np.concatenate(parts) if parts else np.empty(0, dtype=dtype)
        issues = list(self.issues)
        where = str(self.path)
        if self.skipped:
            issues.append(Issue(where, f"{self.skipped} array entries are not JSON objects; skipped"))
        if self.bad_times:
            issues.append(Issue(where, f"{self.bad_times} events have an unreadable 'ts'; kept without a time"))
        if self.replaced_utf8:
            issues.append(Issue(where, "invalid UTF-8 bytes were replaced with U+FFFD"))
        return TraceEvents(
            path=where,
            strings=self.pool.values,
            ph=cat("ph", np.int32),
            name=cat("name", np.int32),
            cat=cat("cat", np.int32),
            pid=cat("pid", np.int64),
            tid=cat("tid", np.int64),
            ts_ns=cat("ts_ns", np.int64),
            dur_ns=cat("dur_ns", np.int64),
            id=cat("id", np.int64),
            args=args,
            issues=issues,
            complete=complete,
            size=size,
            pid_names=self.pid_names,
        )


def _error_pos(exc: Exception) -> int | None:
    m = _BYTE_POS.search(str(exc))
    return int(m.group(1)) if m else None


def _last_boundary(buf: bytes | bytearray, start: int = 0) -> tuple[int, int] | None:
    """(end of the event before, start of the next event) of the last boundary at/after ``start``."""
    end = len(buf)
    while True:
        i = buf.rfind(b"{", start, end)
        if i <= start:
            return None
        j = i - 1
        while j > start and buf[j] in _WS:
            j -= 1
        if buf[j] == 0x2C:  # ","
            k = j - 1
            while k > start and buf[k] in _WS:
                k -= 1
            if buf[k] == 0x7D:  # "}"
                return k + 1, i
        end = i


def _line_of(path: Path, offset: int) -> int:
    lines = 1
    with open(path, "rb") as f:
        left = offset
        while left > 0:
            block = f.read(min(left, 1 << 22))
            if not block:
                break
            lines += block.count(b"\n")
            left -= len(block)
    return lines


def read_trace_events(
    path: str | Path,
    *,
    args: Mapping[str, ArgKind] = TORCH_NPU_ARGS,
    progress: Progress = no_progress,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> TraceEvents:
    """Decode a bare-array Chrome trace into columns.

    Raises ProfileError when the file cannot be read or is not a JSON array of events (a JSON object
    is most likely a Kineto trace and is reported as such). Truncated or partly malformed files load
    the complete events before the defect, with an Issue naming the byte offset and line.
    """
    path = Path(path)
    # Millions of short-lived containers trigger the cyclic GC over and over (quadratic in the live
    # set); nothing here forms cycles, so it is paused for the read and restored after.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _read(path, args, progress, chunk_bytes)
    finally:
        if was_enabled:
            gc.enable()


def _read(path: Path, args: Mapping[str, ArgKind], progress: Progress, chunk_bytes: int) -> TraceEvents:
    f = safe_io.open_regular(path)
    with f:
        size = os.fstat(f.fileno()).st_size
        dec = _Decoder(path, args)
        label = f"Reading {path.name}"
        progress(label, 0.0)
        try:
            head = f.read(min(chunk_bytes, 1 << 16))
        except OSError as exc:
            raise ProfileError(path, f"cannot read: {exc.strerror or exc}") from None
        start = _array_start(path, head)
        buf = bytearray(head[start:])
        base = start  # file offset of buf[0]
        # A cut that keeps failing this long is not a cut inside a string but a defect without a
        # byte position (msgspec reports some as "truncated"), or one event over the string size
        # limit; stop merging so memory stays bounded.
        max_buf = max(8 * chunk_bytes, safe_io.LIMITS.string_bytes) + (1 << 20)
        while True:
            try:
                block = f.read(chunk_bytes)
            except OSError as exc:
                dec.issues.append(Issue(str(path), f"read error at byte {base + len(buf)}: {exc}"))
                block = b""
            if not block:
                _finish(dec, path, buf, base)
                break
            buf += block
            cut = _last_boundary(buf)
            if cut is None:
                if len(buf) > max_buf:
                    _keep_prefix(dec, path, buf, base, len(buf), _oversized(max_buf), eof_missing=False)
                    break
                continue  # one event larger than a block: read more
            end, nxt = cut
            try:
                dec.decode(memoryview(buf)[:end])
            except msgspec.DecodeError as exc:
                pos = _error_pos(exc)
                artefact = pos is None or pos > end  # error at the appended "]": cut in a string
                if artefact and len(buf) <= max_buf:
                    continue
                _keep_prefix(dec, path, buf, base, end if pos is None else pos - 1, exc, eof_missing=False)
                break
            dec.last_end = base + end
            del buf[:nxt]
            base += nxt
            progress(label, min(base / size, 1.0) if size else None)
    progress(label, 1.0)
    return dec.result(size, complete=not dec.truncated)


def _array_start(path: Path, head: bytes) -> int:
    """Offset just after the opening ``[``; ProfileError when the file is not an event array."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ProfileError(path, "is UTF-16 encoded; profiler traces are UTF-8 JSON")
    i = 3 if head.startswith(b"\xef\xbb\xbf") else 0
    while i < len(head) and head[i] in _WS:
        i += 1
    if i >= len(head):
        raise ProfileError(path, "is empty: no trace events (the profiler may not have finished writing)")
    first = head[i : i + 1]
    if first == b"[":
        return i + 1
    if first == b"{":
        raise ProfileError(
            path,
            "is a JSON object, not a JSON array of events: this looks like a Kineto/PyTorch trace "
            '({"traceEvents": [...]}), not a torch_npu trace_view.json',
        )
    raise ProfileError(path, "is not JSON: expected a JSON array of trace events", line=1)


def _finish(dec: _Decoder, path: Path, buf: bytearray, base: int) -> None:
    """Decode the last piece: normally the final events and the closing ``]``."""
    body = bytes(buf).rstrip(_WS)
    closed = body.endswith(b"]")
    if closed:
        body = body[:-1].rstrip(_WS)
    if body:
        try:
            dec.decode(body)
            dec.last_end = base + len(body)
        except msgspec.DecodeError as exc:
            pos = _error_pos(exc)
            limit = len(body) if pos is None or pos > len(body) else pos - 1
            _keep_prefix(dec, path, body, base, limit, exc, eof_missing=not closed)
            return
    if not closed:
        dec.truncated = True
        dec.issues.append(_truncated_issue(path, dec.last_end, dec.count()))


def _keep_prefix(
    dec: _Decoder, path: Path, buf: bytes | bytearray, base: int, limit: int, exc: object, *, eof_missing: bool
) -> None:
    """Decode the longest run of whole events in ``buf[:limit]`` and record why the rest was dropped."""
    data = bytes(buf[: max(limit, 0)])
    bounds = [m.start() + 1 for m in _BOUNDARY.finditer(data)]
    tail = data.rstrip(_WS + b",")
    if tail.endswith(b"}"):
        bounds.append(len(tail))
    # Longest decodable prefix ending at an event boundary. Candidates inside strings are not
    # boundaries and fail; try the last few one by one (real data has few such), then bisect.
    best = -1
    for k in range(len(bounds) - 1, max(len(bounds) - 17, -1), -1):
        if _decodes(data[: bounds[k]]):
            best = k
            break
    else:
        lo, hi = 0, len(bounds) - 17
        while lo <= hi:
            mid = (lo + hi) // 2
            if _decodes(data[: bounds[mid]]):
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
    kept_end = bounds[best] if best >= 0 else 0
    if kept_end:
        dec.decode(data[:kept_end])
        dec.last_end = base + kept_end
    n = dec.count()
    if eof_missing:
        dec.truncated = True
        dec.issues.append(_truncated_issue(path, dec.last_end, n))
        return
    offset = base + max(limit, 0)
    line = _line_of(path, offset)
    if n == 0:
        raise ProfileError(path, f"is not valid JSON at byte {offset}: {_reason(exc)}", line=line)
    dec.issues.append(
        Issue(
            str(path),
            f"malformed JSON at byte {offset} ({_reason(exc)}); loaded the {n} events before it, "
            "the rest of the file was skipped",
            line=line,
        )
    )


def _oversized(max_buf: int) -> str:
    return (f"no event boundary within {max_buf:,} bytes: one event over the {safe_io.Limit.STRING_SIZE.value} "
            f"limit ({safe_io.LIMITS.string_bytes:,} bytes), or not an event array")


def _decodes(data: bytes) -> bool:
    try:
        msgspec.json.decode(b"[" + data + b"]")
        return True
    except (msgspec.DecodeError, RecursionError):
        return False


def _reason(exc: object) -> str:
    """msgspec's message without its chunk-relative "(byte N)" (the Issue gives the file offset)."""
    return _BYTE_POS.sub("", str(exc)).strip()


def _truncated_issue(path: Path, stop: int, n: int) -> Issue:
    head = "truncated: the event array has no closing ']' (still being written, or cut off); "
    if n == 0:
        return Issue(str(path), head + "not one complete event in it", line=1)
    return Issue(
        str(path),
        head + f"loaded {n} complete events; the last one ends at byte {stop}",
        line=_line_of(path, stop),
    )
