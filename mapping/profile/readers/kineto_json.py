"""Decoding a Kineto Chrome trace file (``*.json``, ``*.pt.trace.json[.gz]``) into typed events.

msgspec decodes straight into small structs that hold only the fields the reader uses; unknown
keys are skipped inside the decoder, and the shape/type argument lists stay undecoded
(``msgspec.Raw``) until the reader converts each distinct one once. Measured against orjson and
the stdlib in docs/performance.md ("Kineto").

``traceEvents`` is not decoded as one list: the top level is parsed with it left undecoded (which
still checks the whole text is valid JSON), and ``KinetoFile.batches`` decodes it a block of
about ``CHUNK_BYTES`` at a time, cut after an event boundary. The reader turns each batch into
columns before the next is decoded, so the per-event objects of the whole trace (about 600 bytes
an event) never exist at once.

A file whose events do not fit the expected types (an id written as a string, say) is decoded
again untyped and converted event by event, leniently; events that still do not fit are
skipped and counted as an Issue instead of failing the whole load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Iterable, Iterator

import msgspec

from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.errors import Issue, ProfileError
from msprof_lsp.mapping.units import INT64_MAX, INT64_MIN


_NO_RAW = msgspec.Raw(b"")

# Values outside these ranges fail the typed decode, so the lenient pass skips their events with an
# Issue instead of letting a 400-digit pid or "ts": 1e308 overflow the int64 columns later.
Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
TimeUs = Annotated[float, msgspec.Meta(ge=-(2.0**62) / 1000, le=2.0**62 / 1000)]
IntUs = Annotated[int, msgspec.Meta(ge=-(2**62) // 1000, le=2**62 // 1000)]
BASE_NS_LIMIT = 1 << 61  # base + ts stays inside int64 (2**61 ns after 1970 is the year 2043)
BaseNs = Annotated[int, msgspec.Meta(ge=-BASE_NS_LIMIT, le=BASE_NS_LIMIT)]


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys the reader uses, across all event categories."""

    external_id: Int64 = msgspec.field(default=-1, name="External id")
    # the 2021 schema writes it lower-case on GPU activity and runtime calls
    external_id_lower: Int64 = msgspec.field(default=-1, name="external id")
    seq: Int64 = msgspec.field(default=-1, name="Sequence number")
    fwd_thread: Int64 = msgspec.field(default=-1, name="Fwd thread id")
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")
    call_stack: str = msgspec.field(default="", name="Call stack")
    python_id: Int64 | None = msgspec.field(default=None, name="Python id")
    python_parent_id: Int64 | None = msgspec.field(default=None, name="Python parent id")
    correlation: Int64 = -1
    device: Int64 = -1
    stream: Int64 = -1
    collective: str = msgspec.field(default="", name="Collective name")

    @property
    def ext_id(self) -> int:
        """The External id, in whichever spelling the schema used."""
        return self.external_id if self.external_id > 0 else self.external_id_lower


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Int64 | str = -1
    tid: Int64 | str = -1
    ts: IntUs | TimeUs | None = None  # µs relative to baseTimeNanoseconds (JSON integers stay int)
    dur: IntUs | TimeUs | None = None
    id: Int64 | str | None = None  # flow id
    args: Args | None = None


class _TraceFile(msgspec.Struct):
    traceEvents: msgspec.Raw  # decoded batch by batch (see _batches)
    baseTimeNanoseconds: BaseNs = 0
    schemaVersion: Any = None
    distributedInfo: Any = None
    deviceProperties: Any = None
    trace_id: Any = None
    host_name: Any = None
    with_stack: Any = None
    record_shapes: Any = None
    with_modules: Any = None
    profile_memory: Any = None
    with_flops: Any = None
    displayTimeUnit: Any = None
    traceName: Any = None


_METADATA_KEYS = tuple(
    f for f in _TraceFile.__struct_fields__ if f not in ("traceEvents", "baseTimeNanoseconds")
)


@dataclass(slots=True)
class KinetoFile:
    """A decoded trace: its events (decoded while ``batches`` is iterated, once) and the top-level
    metadata. ``issues`` gains the lenient decode's notice while the batches are read."""

    path: Path
    batches: Iterable[list[Event]]
    base_time_ns: int
    metadata: dict[str, Any] = field(default_factory=dict)  # the other top-level keys, non-null
    issues: list[Issue] = field(default_factory=list)
    size: int = 0  # decoded JSON bytes


def read_bytes(path: Path) -> bytearray:
    """The JSON text of the file, gunzipped when it is gzip (by magic bytes, not by name), within
    the size limits of mapping.safe_io (one buffer, never copied)."""
    return safe_io.read_maybe_gzip(path)


def _line_col(data: bytes, offset: int) -> tuple[int, int]:
    offset = max(0, min(offset, len(data)))
    line = data.count(b"\n", 0, offset) + 1
    col = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return line, col


def _decode_error(path: Path, data: bytes, exc: msgspec.DecodeError) -> ProfileError:
    text = str(exc)
    if "truncated" in text:
        line, _ = _line_col(data, len(data))
        return ProfileError(path, "the JSON ends early (truncated, or still being written)", line)
    # msgspec reports "JSON is malformed: <what> (byte N)".
    offset = None
    if "(byte " in text:
        try:
            offset = int(text.rsplit("(byte ", 1)[1].rstrip(")"))
        except ValueError:
            offset = None
    if offset is None:
        return ProfileError(path, f"not valid JSON: {text}")
    line, col = _line_col(data, offset)
    what = text.split("(byte ")[0].strip().removeprefix("JSON is malformed:").strip()
    return ProfileError(path, f"not valid JSON: {what} (column {col})", line)


_LEADING = re.compile(rb"(?:\xef\xbb\xbf)?[ \t\r\n]*")  # a UTF-8 BOM, whitespace


def _first_byte(data: bytes) -> bytes:
    """The first significant byte (without copying a multi-GB buffer to strip it)."""
    end = _LEADING.match(data).end()  # type: ignore[union-attr]
    return data[end : end + 1]


def decode(path: Path, data: bytes | bytearray) -> KinetoFile:
    """Decode the JSON text of a Kineto trace; ProfileError for anything that is not one."""
    first = _first_byte(data)
    if not first:
        raise ProfileError(path, "the file is empty")
    if first == b"[":
        raise ProfileError(
            path,
            "the file is a JSON array of events, not a Kineto trace object with 'traceEvents' "
            "(a torch_npu trace_view.json? open its *_ascend_pt directory as a torch_npu profile)",
        )
    if data[:3] == b"\xef\xbb\xbf":
        if isinstance(data, bytearray):
            data[:3] = b"   "  # JSON whitespace in place of the BOM: slicing it off would copy the file
        else:
            data = data[3:]
    safe_io.check_json(path, data)
    try:
        top = msgspec.json.decode(data, type=_TraceFile)
    except RecursionError:
        raise safe_io.too_deep(path) from None
    except msgspec.DecodeError as exc:
        if isinstance(exc, msgspec.ValidationError):
            return _decode_leniently(path, data)
        raise _decode_error(path, data, exc) from None
    with memoryview(top.traceEvents) as value:  # a Raw starts at its value's first byte
        is_list = value[:1] == b"["
    if not is_list:
        return _decode_leniently(path, data)  # null, an object...: it says what was found
    meta = {k: getattr(top, k) for k in _METADATA_KEYS if getattr(top, k) is not None}
    trace = KinetoFile(path, (), top.baseTimeNanoseconds, meta, [], len(data))
    trace.batches = _batches(trace, top.traceEvents)
    return trace


CHUNK_BYTES = 4 << 20
"""JSON text decoded into events at a time: large enough that the per-call cost vanishes, small
enough that one batch's events (about 6x its text) stay far below the file."""

_CUT = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")  # between two events (or inside a string)


def _batches(trace: KinetoFile, events: msgspec.Raw) -> Iterator[list[Event]]:
    """The events of ``traceEvents`` (the array's JSON text) in file order, a block at a time.

    A block ends at a ``},{``; one that falls inside a string or a nested value leaves the block
    unbalanced, never valid JSON, so its decode fails and the block doubles (to the next cut). The
    top-level decode already checked the whole text, so no other syntax error can occur here.
    A block whose events do not all fit the typed decode is decoded again event by event,
    leniently; the count of skipped events and the first one (its index in the whole array) go
    into one Issue. Each event is decoded from its own text, so its arg lists keep their text as
    written whichever block it is in.
    """
    view = memoryview(events)
    inner = view[1 : len(view) - 1]  # within [ ]; validated JSON, so the last byte is the ]
    typed = msgspec.json.Decoder(list[Event]).decode
    lenient = _Lenient()
    chunk_bytes = CHUNK_BYTES  # read at call time: tests cut small traces into many blocks
    start, size = 0, len(inner)
    try:
        while start < size:
            end = _cut_after(inner, start + chunk_bytes)
            while True:
                piece = b"[" + inner[start:end] + b"]"
                try:
                    batch = typed(piece)
                    lenient.index += len(batch)
                    break
                except msgspec.ValidationError:
                    try:
                        batch = lenient.raws(msgspec.json.decode(piece, type=list[msgspec.Raw]))
                        break
                    except msgspec.DecodeError:
                        pass
                except msgspec.DecodeError:
                    pass
                except RecursionError:
                    raise safe_io.too_deep(trace.path) from None
                if end >= size:
                    raise ProfileError(trace.path, "not valid JSON in 'traceEvents'")
                # Double the block: a string full of "},{" would otherwise cost one decode of the
                # whole growing block per occurrence (quadratic); this way a few, linear in all.
                end = _cut_after(inner, max(end + 1, start + 2 * (end - start)))
            del piece
            start = end
            while start < size and inner[start] in b" \t\r\n,":  # the comma left after the cut
                start += 1
            yield batch
            del batch
    finally:
        inner.release()
        view.release()
        issue = lenient.issue(trace.path)
        if issue is not None:
            trace.issues.append(issue)


def _cut_after(inner: memoryview, pos: int) -> int:
    """The end of the event whose closing brace is the first ``},{`` at or after ``pos``."""
    if pos >= len(inner):
        return len(inner)
    m = _CUT.search(inner, pos)
    return len(inner) if m is None else m.start() + 1


class _Lenient:
    """Events converted one at a time, skipping those that do not fit (with a count)."""

    def __init__(self) -> None:
        self.index = 0  # events seen before the current batch
        self.bad = 0
        self.first_bad = ""
        self._encode = msgspec.json.Encoder().encode
        self._decode = msgspec.json.Decoder(Event, strict=False).decode

    def raws(self, texts: list[msgspec.Raw]) -> list[Event]:
        """Events from their JSON texts."""
        return self._convert(texts, self._decode)

    def objects(self, raw_events: list[Any]) -> list[Event]:
        """Events from already decoded JSON values (the whole-file lenient path)."""
        # Round trip through JSON so the Raw fields work; only this slow path pays for it.
        return self._convert(raw_events, lambda raw: self._decode(self._encode(raw)))

    def _convert(self, items: list[Any], convert: Any) -> list[Event]:
        events: list[Event] = []
        for index, item in enumerate(items, self.index):
            try:
                events.append(convert(item))
            except msgspec.ValidationError as exc:
                self.bad += 1
                if not self.first_bad:
                    self.first_bad = f"event #{index}: {exc}"
        self.index += len(items)
        return events

    def issue(self, path: Path) -> Issue | None:
        if not self.bad:
            return None
        return Issue(str(path), f"skipped {self.bad} event(s) of unexpected form (first: {self.first_bad})")


def _decode_leniently(path: Path, data: bytes | bytearray) -> KinetoFile:
    """Second pass for files whose top level does not fit the typed decode."""
    try:
        obj = msgspec.json.decode(data)
    except RecursionError:
        raise safe_io.too_deep(path) from None
    except msgspec.DecodeError as exc:
        raise _decode_error(path, data, exc) from None
    if not isinstance(obj, dict):
        raise ProfileError(path, f"expected a JSON object with 'traceEvents', found {type(obj).__name__}")
    raw_events = obj.get("traceEvents")
    if raw_events is None:
        raise ProfileError(path, "no 'traceEvents' key: not a Kineto (Chrome) trace")
    if not isinstance(raw_events, list):
        raise ProfileError(path, f"'traceEvents' is a {type(raw_events).__name__}, expected a list")
    base = obj.get("baseTimeNanoseconds", 0)
    if not isinstance(base, int):
        try:
            base = int(base)
        except (TypeError, ValueError, OverflowError):
            raise ProfileError(path, f"'baseTimeNanoseconds' is not an integer: {str(base)[:40]!r}") from None
    if not -BASE_NS_LIMIT <= base <= BASE_NS_LIMIT:
        raise ProfileError(path, f"'baseTimeNanoseconds' is out of range: {str(base)[:40]}")
    meta = {k: obj[k] for k in _METADATA_KEYS if obj.get(k) is not None}
    del obj
    trace = KinetoFile(path, (), base, meta, [], len(data))
    trace.batches = _lenient_batches(trace, raw_events)
    return trace


def _lenient_batches(trace: KinetoFile, raw_events: list[Any], size: int = 20_000) -> Iterator[list[Event]]:
    lenient = _Lenient()
    try:
        for i in range(0, len(raw_events), size):
            yield lenient.objects(raw_events[i : i + size])
    finally:
        issue = lenient.issue(trace.path)
        if issue is not None:
            trace.issues.append(issue)


def load(path: Path) -> KinetoFile:
    data = read_bytes(path)
    return decode(path, data)
