"""On-disk cache of loaded, linked profiles, in a format that cannot run code when read.

A cache entry is one file named after the profile's identity (kind, resolved path, rank):

    magic (8 bytes) | u32 format | u32 header length | header sha256 (32) | header | payload

The header is msgpack decoded into a typed struct: the package version, the entry's identity, the
stamp (resolved path, size, mtime_ns) of every input file, the schema digest of the payload
(mapping.codec), the payload's size and its sha256 digest. A load checks the magic and format,
then the header against its digest, and reads the payload only when every stamp still matches,
so a stale entry costs one stat per file. The payload is verified against its digest before it is decoded, and
decoding builds only typed records and numeric arrays (see mapping.codec) -- there is no pickle.

An entry that is not one (another format, a planted pickle, truncated, a flipped byte, a link or
not a regular file) is discarded with one notice on the rebuilt profile; a stale entry (inputs
changed, another package version) is simply rebuilt. Entries are written to a temporary file and
renamed into place, so readers never see half an entry.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from msprof_lsp.mapping.profile import codec
from msprof_lsp.mapping.errors import Issue
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.model import Profile, RankSummary
from msprof_lsp.mapping.profile.readers.registry import reader_for

CACHE_FORMAT = 6
"""Bump when the readers change what a cached Profile means (the model's shape is in the schema
digest already, the code that wrote it in ``code_version``). 3: msgpack + numeric buffers (2 was
pickle). 4: the Kineto reader reads the 2021 schema and gives a trace without step markers its
capture span as the step. 5: the DB reader reads META_DATA's ENV_VARIABLES into meta.env. 6: the
header carries the code digest; derived values in a file of their own beside the entry."""

MAGIC = b"MSPLCACH"
DERIVED_MAGIC = b"MSPLDERV"
_PREAMBLE = struct.Struct("<8sII32s")  # magic, format, header length, header digest
MAX_HEADER_BYTES = 64 * 1024 * 1024  # stamps of every input file; real profiles use kilobytes
SUFFIX = ".msplc"
DERIVED_SUFFIX = ".derived.msplc"
MAX_DERIVED_BYTES = 512 * 1024 * 1024  # critical paths and op token strings: megabytes for a 500 MB trace

@dataclass(frozen=True, slots=True)
class FileStamp:
    path: str
    size: int
    mtime_ns: int


_VERSION: list[str] = []


def package_version() -> str:
    if not _VERSION:  # once per process: each lookup scans the installed distributions
        try:
            from importlib.metadata import version

            _VERSION.append(version("msprof-lsp"))
        except Exception:  # noqa: BLE001 - not installed as a distribution (source checkout)
            _VERSION.append("0")
    return _VERSION[0]


_CODE: dict[tuple[str, ...], str] = {}


def code_version(*packages: str) -> str:
    """A digest of the source of the product's ``packages`` (folders beside ``mapping``, e.g.
    "mapping", "hints"): what wrote an entry, beyond the package version (which a source checkout
    never bumps). Read once per process (~70 files: milliseconds)."""
    hit = _CODE.get(packages)
    if hit is None:
        hit = _CODE[packages] = source_digest(Path(__file__).resolve().parents[2], packages)
    return hit


def source_digest(root: Path, packages: tuple[str, ...]) -> str:
    """sha256 over the path and bytes of every ``*.py`` under ``root/<package>``, in path order."""
    digest = hashlib.sha256()
    for name in packages:
        for path in sorted((root / name).rglob("*.py")):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            digest.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
            digest.update(data)
    return digest.hexdigest()[:32]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "msprof-lsp"


def input_files(location: ProfileLocation) -> list[Path]:
    """Every file the location's reader may read (``Reader.inputs``): the cache key covers all of them."""
    return reader_for(location.kind, location.path).inputs(location)


def fingerprint(location: ProfileLocation) -> tuple[FileStamp, ...]:
    return stamps_of(input_files(location))


def stamps_of(paths: Iterable[Path]) -> tuple[FileStamp, ...]:
    """(resolved path, size, mtime_ns) of each path, in order; a path gone between listing and
    stat is left out (the next load sees the new state)."""
    stamps = []
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            continue
        stamps.append(FileStamp(str(p.resolve()), st.st_size, st.st_mtime_ns))
    return tuple(stamps)


def entry_path(location: ProfileLocation, cache_dir: Path | None = None) -> Path:
    identity = f"{location.kind.value}\0{Path(location.path).resolve()}\0{location.rank}"
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return (cache_dir or default_cache_dir()) / f"{digest}{SUFFIX}"


class _Header(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    schema: str
    version: str
    code: str  # code_version("mapping"): the readers and the model that wrote it
    kind: str
    path: str
    rank: int | None
    stamps: tuple[FileStamp, ...]
    payload_size: int
    payload_digest: bytes


_HEADER_DECODER = msgspec.msgpack.Decoder(_Header)
_ENCODER = msgspec.msgpack.Encoder()
_SCHEMA: str | None = None


def schema() -> str:
    global _SCHEMA
    if _SCHEMA is None:
        _SCHEMA = codec.schema_id()
    return _SCHEMA


class BadEntry(Exception):
    """The file at the entry's name is not a valid entry of this format."""


@dataclass(frozen=True, slots=True)
class Lookup:
    profile: Profile | None  # the hit
    discarded: Issue | None = None  # a bad entry thrown away: the one notice to show


def _same_identity(header: _Header, location: ProfileLocation, stamps: tuple[FileStamp, ...]) -> bool:
    return (
        header.schema == schema()
        and header.version == package_version()
        and header.code == code_version("mapping")
        and header.kind == location.kind.value
        and header.path == str(Path(location.path).resolve())
        and header.rank == location.rank
        and header.stamps == stamps
    )


DIGEST = "sha256"
"""Checksum of header and payload: sha256 runs at ~3x blake2b where the CPU has SHA instructions
(benchmarks/bench_cache.py prints both); either detects any damage."""


def _digest(data: bytes | bytearray | memoryview) -> bytes:
    return hashlib.new(DIGEST, data).digest()


def _read_exact(fd: int, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise BadEntry("truncated")
        got += k
    return buf


def _open_entry(path: Path) -> int | None:
    """A read descriptor on the entry if it is a regular file (links are not followed); None if absent."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadEntry(f"cannot be opened as a regular file ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadEntry("not a regular file")
    return fd


def _read(path: Path, location: ProfileLocation) -> Profile | None:
    """The entry's Profile; None when absent or stale; BadEntry when it is not a valid entry."""
    fd = _open_entry(path)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        if size < _PREAMBLE.size:
            raise BadEntry("truncated")
        magic, fmt, head_len, head_digest = _PREAMBLE.unpack(_read_exact(fd, _PREAMBLE.size))
        if magic != MAGIC:
            raise BadEntry("not a msprof-lsp cache entry")
        if fmt != CACHE_FORMAT:
            raise BadEntry(f"written in cache format {fmt}, this build reads {CACHE_FORMAT}")
        if head_len > min(MAX_HEADER_BYTES, size - _PREAMBLE.size):
            raise BadEntry("truncated")
        head = _read_exact(fd, head_len)
        if _digest(head) != head_digest:
            raise BadEntry("header checksum mismatch")
        try:
            header = _HEADER_DECODER.decode(head)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise BadEntry(f"bad header ({exc})") from None
        if header.schema != schema():
            raise BadEntry("written for another profile schema")
        if not _same_identity(header, location, fingerprint(location)):
            return None  # stale: rebuilt and overwritten without a notice
        if size != _PREAMBLE.size + head_len + header.payload_size:
            raise BadEntry("truncated" if size < _PREAMBLE.size + head_len + header.payload_size else "trailing bytes")
        payload = _read_exact(fd, header.payload_size)
    finally:
        os.close(fd)
    if _digest(payload) != header.payload_digest:
        raise BadEntry("payload checksum mismatch")
    try:
        profile = codec.decode(payload)
    except codec.CodecError as exc:
        raise BadEntry(str(exc)) from None
    profile.derived.entry, profile.derived.stored_for = header.payload_digest, profile.fields()
    _attach_derived(path, profile)
    return profile


def load(location: ProfileLocation, cache_dir: Path | None = None) -> Lookup:
    """The cached Profile if every input file is unchanged (never raises).

    A bad entry is removed and named in ``discarded``; the caller rebuilds it.
    """
    path = entry_path(location, cache_dir)
    try:
        return Lookup(_read(path, location))
    except BadEntry as exc:
        reason = str(exc)
    except (OSError, MemoryError) as exc:
        reason = f"cannot be read ({exc})"
    except Exception as exc:  # noqa: BLE001 - whatever else a crafted entry provokes: still only a miss
        reason = f"cannot be decoded ({type(exc).__name__}: {exc})"
    try:
        os.unlink(path)
    except OSError:
        pass
    return Lookup(None, Issue(str(path), f"cache entry discarded and rebuilt: {reason}"))


def store(
    location: ProfileLocation, profile: Profile, stamps: tuple[FileStamp, ...], cache_dir: Path | None = None
) -> bool:
    """Write the entry atomically; False (and nothing written) when that is not possible.

    ``stamps`` is the fingerprint taken *before* reading: if any input changed during the read, the
    entry would describe files that no longer exist, so it is not written.
    """
    if fingerprint(location) != stamps:
        return False
    try:
        pieces = codec.encode(profile)
    except Exception:  # noqa: BLE001 - a value the format does not hold: no cache
        return False
    digest = _pieces_digest(pieces)
    path = entry_path(location, cache_dir)
    if not write_entry(path, location, stamps, pieces, digest):
        return False
    profile.derived.entry, profile.derived.stored_for = digest, profile.fields()
    profile.derived.stored = {}
    _remove(_derived_path(path))  # the previous entry's values
    return True


def _pieces_digest(pieces: list[memoryview]) -> bytes:
    digest = hashlib.new(DIGEST)
    for piece in pieces:
        digest.update(piece)
    return digest.digest()


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_entry(path: Path, location: ProfileLocation, stamps: tuple[FileStamp, ...], pieces: list[memoryview],
                payload_digest: bytes | None = None) -> bool:
    """Frame an encoded payload (header, digests) and put it at ``path`` atomically."""
    try:
        header = _ENCODER.encode(
            _Header(
                schema=schema(),
                version=package_version(),
                code=code_version("mapping"),
                kind=location.kind.value,
                path=str(Path(location.path).resolve()),
                rank=location.rank,
                stamps=stamps,
                payload_size=sum(p.nbytes for p in pieces),
                payload_digest=payload_digest or _pieces_digest(pieces),
            )
        )
    except OSError:
        return False
    return _write_atomic(path, [memoryview(_PREAMBLE.pack(MAGIC, CACHE_FORMAT, len(header), _digest(header))),
                                memoryview(header), *pieces])


def _write_atomic(path: Path, pieces: list[memoryview]) -> bool:
    """Write ``pieces`` to a temporary file beside ``path`` and rename it into place."""
    tmp = None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.stem, suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
        os.replace(tmp, path)
        return True
    except OSError:  # read-only or full disk: no cache
        if tmp is not None:
            _remove(Path(tmp))
        return False


# ---------------------------------------------------------------------------------------------
# Derived values (critical paths, op token strings): computed during an analysis, after the entry
# was written, so they go to a file of their own beside it:
#
#     magic (8 bytes) | u32 format | u32 body length | body sha256 (32) | body
#
# The body is msgpack decoded into a typed struct: package version, code digest (mapping and
# hints: the code that computes them), the payload digest of the entry they belong to, and per
# value name its encoded bytes, which the value's own typed decoder turns back into data on first
# use (Profile.derived.memo). Anything else -- another entry's, another build's, damaged, a link,
# not a regular file, too large -- is ignored and removed: the values are computed again.


class _DerivedFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: str
    code: str
    entry: bytes  # payload digest of the entry
    values: dict[str, bytes]


_DERIVED_DECODER = msgspec.msgpack.Decoder(_DerivedFile)


def _derived_path(entry: Path) -> Path:
    return entry.with_name(entry.stem + DERIVED_SUFFIX)


def _derived_code() -> str:
    return code_version("mapping", "hints")


def _read_derived(path: Path, entry_digest: bytes) -> dict[str, bytes] | None:
    """The values of ``path`` if it is a derived-values file of this build for that entry; None if absent or stale."""
    fd = _open_entry(path)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        if size < _PREAMBLE.size or size > MAX_DERIVED_BYTES:
            raise BadEntry("size")
        magic, fmt, body_len, body_digest = _PREAMBLE.unpack(_read_exact(fd, _PREAMBLE.size))
        if magic != DERIVED_MAGIC or fmt != CACHE_FORMAT or body_len != size - _PREAMBLE.size:
            raise BadEntry("not a derived-values file of this format")
        body = _read_exact(fd, body_len)
    finally:
        os.close(fd)
    if _digest(body) != body_digest:
        raise BadEntry("checksum mismatch")
    try:
        held = _DERIVED_DECODER.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise BadEntry(str(exc)) from None
    if held.entry != entry_digest or held.version != package_version() or held.code != _derived_code():
        return None
    return held.values


def _attach_derived(entry: Path, profile: Profile) -> None:
    """Give a profile just read from ``entry`` the derived values stored for it (never raises)."""
    path = _derived_path(entry)
    try:
        values = _read_derived(path, profile.derived.entry or b"")
    except Exception:  # noqa: BLE001 - BadEntry, OSError, whatever a crafted file provokes: computed again
        _remove(path)
        return
    if values:
        profile.derived.stored = dict(values)


def store_derived(location: ProfileLocation, profile: Profile, cache_dir: Path | None = None) -> bool:
    """Write the derived values the analysis computed (``Profile.derived``) beside the profile's
    entry, with those it already held; False when there is nothing new or no entry to go with."""
    derived = profile.derived
    if derived.entry is None:
        return False
    new = derived.to_store()
    if not new:
        return False
    entry = entry_path(location, cache_dir)
    values = {**derived.stored, **new}
    body = _ENCODER.encode(_DerivedFile(package_version(), _derived_code(), derived.entry, values))
    if _PREAMBLE.size + len(body) > MAX_DERIVED_BYTES:
        return False
    head = _PREAMBLE.pack(DERIVED_MAGIC, CACHE_FORMAT, len(body), _digest(body))
    if not _write_atomic(_derived_path(entry), [memoryview(head), memoryview(body)]):
        return False
    derived.written(values)
    return True


# ---------------------------------------------------------------------------------------------
# Rank summaries (a job's cluster view): one small file per rank, beside the profile entries,
#
#     magic (8 bytes) | body sha256 (32) | body
#
# the body msgpack decoded into a typed struct (no pickle): package version and code digest, the
# stamps of the files the summary was read from and of their folders (a file added or removed
# changes its folder's mtime), and the RankSummary. A lookup is one read and a stat per stamp.

SUMMARY_MAGIC = b"MSPLRANK"
SUMMARY_SUFFIX = ".rank.msplc"
MAX_SUMMARY_BYTES = 16 * 1024 * 1024  # a rank's links and breakdown: kilobytes


class _SummaryFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: str
    code: str
    stamps: tuple[FileStamp, ...]
    summary: RankSummary


_SUMMARY_DECODER = msgspec.msgpack.Decoder(_SummaryFile)


def summary_stamps(files: tuple[Path, ...]) -> tuple[FileStamp, ...]:
    """Stamps of ``files`` and of the folders holding them (sorted, each once)."""
    return stamps_of(sorted({*files, *(Path(f).parent for f in files)}))


def _summary_path(location: ProfileLocation, cache_dir: Path | None) -> Path:
    return entry_path(location, cache_dir).with_suffix(SUMMARY_SUFFIX)


def load_summary(location: ProfileLocation, cache_dir: Path | None = None) -> RankSummary | None:
    """The rank's cached summary when every file it was read from is unchanged (never raises;
    anything that is not a valid entry is removed and read again)."""
    path = _summary_path(location, cache_dir)
    try:
        fd = _open_entry(path)
        if fd is None:
            return None
        try:
            size = os.fstat(fd).st_size
            if not 40 <= size <= MAX_SUMMARY_BYTES:
                raise BadEntry("size")
            data = _read_exact(fd, size)
        finally:
            os.close(fd)
        if data[:8] != SUMMARY_MAGIC or _digest(data[40:]) != data[8:40]:
            raise BadEntry("not a rank summary entry")
        entry = _SUMMARY_DECODER.decode(data[40:])
    except Exception:  # noqa: BLE001 - damaged, crafted or another build's: only a miss
        _remove(path)
        return None
    if entry.version != package_version() or entry.code != code_version("mapping"):
        return None
    files = tuple(Path(s.path) for s in entry.stamps if not Path(s.path).is_dir())
    if summary_stamps(files) != entry.stamps:
        return None
    return entry.summary


RACY_NS = 2_000_000_000  # a file written this close to the read may have changed during it


def store_summary(location: ProfileLocation, summary: RankSummary, files: tuple[Path, ...], read_started_ns: int,
                  cache_dir: Path | None = None) -> bool:
    """Write the rank's summary entry, stamped with ``files`` (those the summary was read from).

    Nothing is written when any of them (or their folders) changed within RACY_NS of the read's
    start (``time.time_ns()`` before reading): the summary might describe a half-written file, and
    its stamp would then vouch for it.
    """
    stamps = summary_stamps(files)
    if any(s.mtime_ns >= read_started_ns - RACY_NS for s in stamps):
        return False
    try:
        body = msgspec.msgpack.encode(_SummaryFile(package_version(), code_version("mapping"), stamps, summary))
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return False
    return _write_atomic(_summary_path(location, cache_dir),
                         [memoryview(SUMMARY_MAGIC), memoryview(_digest(body)), memoryview(body)])
