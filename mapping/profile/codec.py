"""A Profile as bytes that decoding cannot turn into code: typed msgpack plus raw numeric buffers.

The payload is ``u64 manifest length | manifest | padding | blob``. The manifest is msgpack
decoded by msgspec into the typed structs below (so a wrong shape is a ValidationError, never an
object of someone's choosing); the blob holds every numeric column and every categorical's codes
as plain little-endian arrays at 64-byte aligned offsets, which decode as zero-copy numpy views.
Only numeric dtypes (bool, int, uint, float) may come from a buffer, and every buffer's range and
length is checked against the blob and its table before it is used. Strings (object columns,
categories, stacks) live in the manifest.

Used by the on-disk cache (mapping.cache) and to hand loaded ranks back from worker processes.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, Literal

import msgspec
import numpy as np
import pandas as pd

from msprof_lsp.mapping.interning import Interner
from msprof_lsp.mapping.errors import Issue
from msprof_lsp.mapping.profile.frames import Frame
from msprof_lsp.mapping.profile.model import CommOp, OpStatistic, Profile, ProfileMeta, Step, StepBreakdown, TimeBreakdown

ALIGN = 64
_LEN = struct.Struct("<Q")


class CodecError(Exception):
    """The bytes are not a payload this build wrote (damaged, or of another schema)."""


class _Buffer(msgspec.Struct, array_like=True, frozen=True):
    offset: int  # from the start of the blob
    nbytes: int


class _Column(msgspec.Struct, array_like=True, frozen=True):
    name: str
    kind: Literal["num", "cat", "obj", "ext"]
    dtype: str  # num: numpy dtype of the data; cat: dtype of the codes; ext: pandas dtype name
    data: _Buffer | None = None  # num values / cat codes
    values: list[Any] | None = None  # obj / ext values (None for missing in ext)
    categories: _Column | None = None  # cat: the categories, themselves a column
    ordered: bool = False


class _Table(msgspec.Struct, array_like=True, frozen=True):
    length: int
    index: tuple[int, int, int]  # RangeIndex start, stop, step
    columns: list[_Column]


class _Manifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    meta: ProfileMeta
    tables: dict[str, _Table | None]
    frames: list[tuple[str, int, str, str]]  # unique frames: file, line, func, raw
    stacks: list[list[int]]  # frame ids, innermost first
    steps: list[Step]
    step_breakdown: list[StepBreakdown]
    comm_ops: list[CommOp]
    comm_matrix: dict[str, Any]
    op_statistic: list[OpStatistic]
    issues: list[Issue]
    breakdown: TimeBreakdown | None = None  # Profile.derived, when it was computed for these fields


TABLE_FIELDS = ("kernels", "host_ops", "modules", "host_events", "overlap", "api_statistic", "op_memory", "memory_record")
PLAIN_FIELDS = ("steps", "step_breakdown", "comm_ops", "comm_matrix", "op_statistic", "issues")
# Every Profile field has one place above; a new field must be added here (tests/mapping/profile/test_cache_format.py).
COVERED_FIELDS = frozenset(("meta", "stacks", "derived", *TABLE_FIELDS, *PLAIN_FIELDS))


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, np.generic):  # a numpy scalar a reader left in a record
        return obj.item()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_DECODER = msgspec.msgpack.Decoder(_Manifest)


def schema_id() -> str:
    """A digest of the manifest's JSON schema: any change of the model's records changes it."""
    text = msgspec.json.encode(msgspec.json.schema(_Manifest))
    return hashlib.blake2b(text, digest_size=12).hexdigest()


# ---------------------------------------------------------------------------------------------
# Encoding


class _Blob:
    def __init__(self) -> None:
        self.pieces: list[memoryview] = []
        self.size = 0

    def add(self, array: np.ndarray) -> _Buffer:
        array = np.ascontiguousarray(array)
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        pad = -self.size % ALIGN
        if pad:
            self.pieces.append(memoryview(bytes(pad)))
            self.size += pad
        view = memoryview(array).cast("B")
        buf = _Buffer(self.size, view.nbytes)
        self.pieces.append(view)
        self.size += view.nbytes
        return buf


def _numeric(dtype: np.dtype) -> bool:
    return dtype.kind in "biuf" and dtype.fields is None and dtype.subdtype is None


def _encode_column(name: str, values: pd.Series | pd.Index, blob: _Blob) -> _Column:
    dtype = values.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        cat = values.array
        codes = np.asarray(cat.codes)
        return _Column(
            name, "cat", codes.dtype.str, data=blob.add(codes),
            categories=_encode_column("", cat.categories, blob), ordered=bool(dtype.ordered),
        )
    if isinstance(dtype, np.dtype):
        if _numeric(dtype):
            return _Column(name, "num", dtype.newbyteorder("<").str, data=blob.add(values.to_numpy()))
        if dtype.kind == "O":
            return _Column(name, "obj", "object", values=values.to_numpy().tolist())
        raise TypeError(f"column {name!r}: dtype {dtype} is not cached")
    # A pandas extension dtype (string, nullable integer): values with missing ones as None.
    return _Column(name, "ext", str(dtype), values=[None if v is pd.NA else v for v in values.array.tolist()])


def _encode_table(frame: pd.DataFrame, blob: _Blob) -> _Table:
    index = frame.index
    if not isinstance(index, pd.RangeIndex):
        raise TypeError("only tables with a RangeIndex are cached")
    if not frame.columns.is_unique:
        raise TypeError("duplicate column names")
    columns = [_encode_column(str(col), frame[col], blob) for col in frame.columns]
    return _Table(len(frame), (index.start, index.stop, index.step), columns)


def encode(profile: Profile) -> list[memoryview]:
    """The payload as pieces to write in order (their concatenation is the payload).

    Raises TypeError (or msgspec.EncodeError) for something this format does not hold.
    """
    blob = _Blob()
    tables = {}
    for name in TABLE_FIELDS:
        table = getattr(profile, name)
        tables[name] = None if table is None else _encode_table(table, blob)
    frame_ids: Interner[Frame] = Interner()
    stacks = [[frame_ids.code(fr) for fr in stack] for stack in profile.stacks]
    frames = [(fr.file, fr.line, fr.func, fr.raw) for fr in frame_ids.values]
    manifest = _Manifest(
        meta=profile.meta,
        tables=tables,
        frames=frames,
        stacks=stacks,
        **{name: getattr(profile, name) for name in PLAIN_FIELDS},
        breakdown=profile.derived.breakdown if profile.derived.holds(profile) else None,
    )
    head = _ENCODER.encode(manifest)
    pad = -(_LEN.size + len(head)) % ALIGN
    return [memoryview(_LEN.pack(len(head))), memoryview(head), memoryview(bytes(pad)), *blob.pieces]


def encode_bytes(profile: Profile) -> bytes:
    return b"".join(encode(profile))


# ---------------------------------------------------------------------------------------------
# Decoding


def _array(buf: _Buffer | None, dtype_text: str, length: int, blob: memoryview) -> np.ndarray:
    if buf is None:
        raise CodecError("a column has no data")
    try:
        dtype = np.dtype(dtype_text)
    except TypeError:
        raise CodecError(f"bad dtype {dtype_text!r}") from None
    if not _numeric(dtype):
        raise CodecError(f"dtype {dtype_text!r} cannot come from a buffer")
    if buf.offset < 0 or buf.nbytes < 0 or buf.offset + buf.nbytes > len(blob):
        raise CodecError("a buffer lies outside the payload")
    if buf.nbytes != length * dtype.itemsize:
        raise CodecError("a buffer does not match its table's length")
    return np.frombuffer(blob, dtype=dtype, count=length, offset=buf.offset)


def _own_length(col: _Column) -> int:
    """Length of a categories column (it has no table of its own)."""
    if col.values is not None:
        return len(col.values)
    if col.data is None:
        raise CodecError("a column has no data")
    try:
        itemsize = np.dtype(col.dtype).itemsize
    except TypeError:
        raise CodecError(f"bad dtype {col.dtype!r}") from None
    if not itemsize:
        raise CodecError(f"bad dtype {col.dtype!r}")
    return col.data.nbytes // itemsize


def _decode_column(col: _Column, length: int, blob: memoryview) -> Any:
    if col.kind == "num":
        return _array(col.data, col.dtype, length, blob)
    if col.kind in ("obj", "ext"):
        if col.values is None or len(col.values) != length:
            raise CodecError(f"column {col.name!r} does not match its table's length")
        if col.kind == "obj":
            out = np.empty(length, dtype=object)
            out[:] = col.values
            return out
        try:
            return pd.array(col.values, dtype=col.dtype)
        except (TypeError, ValueError) as exc:
            raise CodecError(f"column {col.name!r}: {exc}") from None
    codes = _array(col.data, col.dtype, length, blob)
    if codes.dtype.kind != "i" or col.categories is None or col.categories.kind == "cat":
        raise CodecError(f"column {col.name!r}: bad categorical")
    categories = _decode_column(col.categories, _own_length(col.categories), blob)
    try:
        dtype = pd.CategoricalDtype(pd.Index(categories, dtype=categories.dtype), ordered=col.ordered)
        return pd.Categorical.from_codes(codes, dtype=dtype, validate=True)
    except (TypeError, ValueError) as exc:
        raise CodecError(f"column {col.name!r}: {exc}") from None


def _decode_table(table: _Table, blob: memoryview) -> pd.DataFrame:
    names = [c.name for c in table.columns]
    if len(set(names)) != len(names):
        raise CodecError("duplicate column names")
    start, stop, step = table.index
    if step == 0 or len(range(start, stop, step)) != table.length:
        raise CodecError("index does not match the table's length")
    data = {c.name: _decode_column(c, table.length, blob) for c in table.columns}
    index = pd.RangeIndex(start, stop, step)
    # copy=False: the columns stay views into the payload instead of being copied into blocks.
    return pd.DataFrame(data, index=index, copy=False) if data else pd.DataFrame(index=index)


def decode(payload: bytearray | memoryview | bytes) -> Profile:
    """The Profile ``encode`` wrote; CodecError for anything else.

    Numeric columns are views into ``payload`` (writable when it is a bytearray), so keep it alive
    and do not reuse it.
    """
    view = memoryview(payload)
    if len(view) < _LEN.size:
        raise CodecError("payload too short")
    (head_len,) = _LEN.unpack_from(view)
    if head_len > len(view) - _LEN.size:
        raise CodecError("manifest longer than the payload")
    head_end = _LEN.size + head_len
    try:
        manifest = _DECODER.decode(view[_LEN.size:head_end])
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:  # deep nesting: RecursionError
        raise CodecError(f"manifest: {exc}") from None
    blob = view[head_end + (-head_end % ALIGN):]
    if set(manifest.tables) != set(TABLE_FIELDS):
        raise CodecError("the tables are not the ones this build writes")
    tables = {name: None if t is None else _decode_table(t, blob) for name, t in manifest.tables.items()}
    for name in TABLE_FIELDS[:5]:
        if tables[name] is None:
            raise CodecError(f"table {name} missing")
    frames = [Frame(*f) for f in manifest.frames]
    try:
        stacks = [tuple(frames[i] for i in ids) for ids in manifest.stacks]
    except IndexError:
        raise CodecError("a stack refers to a frame that is not there") from None
    if any(i < 0 for ids in manifest.stacks for i in ids):
        raise CodecError("a stack refers to a frame that is not there")
    profile = Profile(
        meta=manifest.meta,
        stacks=stacks,
        **tables,
        **{name: getattr(manifest, name) for name in PLAIN_FIELDS},
    )
    if manifest.breakdown is not None:
        profile.derived.keep(profile, manifest.breakdown)
    return profile
