"""The one way the product reads files it did not write: profiles and workspace sources.

A profile or a repository may be hostile or broken. Everything read here is a regular file (a
FIFO, a device or a socket is refused before a byte is read, and opening never blocks), under a
size limit; gzip is inflated as a stream and counted; JSON and CSV text is scanned for nesting
depth and string/cell size before a decoder sees it; Python source is tokenized for the shapes that
make the parser crash or go quadratic. Each limit has a name and a value (docs/limits.md), and the
error says which one was hit and in which file.

The module also remembers, per thread, the file being read, so that an unexpected exception can
still be reported as one line naming that file (``file_of``).
"""

from __future__ import annotations

import enum
import io
import os
import re
import stat
import sys
import threading
import tokenize
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from msprof_lsp.mapping.errors import ProfileError

MiB = 1 << 20
GiB = 1 << 30


class Limit(enum.Enum):
    """The named limits; the value is how messages and docs/limits.md spell them."""

    FILE_SIZE = "file size"
    INFLATED_SIZE = "decompressed size"
    INFLATE_RATIO = "compression ratio"
    JSON_DEPTH = "JSON nesting depth"
    STRING_SIZE = "string size"
    CSV_CELL = "CSV cell size"
    EVENT_COUNT = "event count"
    SOURCE_SIZE = "source file size"
    SOURCE_LINE = "source line length"
    SOURCE_DEPTH = "bracket depth"
    SOURCE_CHAIN = "operator chain"
    SOURCE_WORK = "parse work"
    CONFIG_SIZE = "config file size"
    CONFIG_DEPTH = "TOML nesting depth"


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds no real profile or model file comes near (docs/limits.md says why each value)."""

    json_file_bytes: int = 1 * GiB  # small JSON files read whole (profiler_info, communication.json)
    whole_file_bytes: int = 4 * GiB  # a Kineto trace (decoded whole), after gunzip
    inflate_ratio: int = 200  # inflated/compressed once past ``ratio_floor_bytes``
    ratio_floor_bytes: int = 64 * MiB
    string_bytes: int = 16 * MiB  # one JSON string, one streamed event
    csv_cell_bytes: int = 16 * MiB
    events: int = 200_000_000  # events of one trace file
    wal_copy_bytes: int = 4 * GiB  # a DB export + its pending -wal, copied to a private folder to read
    source_bytes: int = 2 * MiB  # libcst holds ~1 GB per MiB of dense code (docs/limits.md)
    source_line_chars: int = 1 * MiB
    source_depth: int = 100  # brackets open at once (CPython's own parser stops at 200)
    source_chain: int = 500  # operators chained in one expression without a bracket
    source_work: int = 4_000_000  # sum over chains of length squared (libcst's cost grows so)
    config_bytes: int = 1 * MiB  # a pyproject.toml (real ones are a few KiB)
    config_depth: int = 32  # brackets open + dotted key parts in a TOML file (real ones: under 8)


LIMITS = Limits()


class LimitExceeded(ProfileError):
    """A file is over one of the limits; ``limit`` names which."""

    def __init__(self, path: str | Path, limit: Limit, detail: str, line: int | None = None) -> None:
        self.limit = limit
        super().__init__(path, f"over the {limit.value} limit: {detail} (the input is refused)", line)


# ---------------------------------------------------------------------------------------------
# The file being read (for one-line reports of unexpected errors)

_local = threading.local()


def note_reading(path: str | Path) -> None:
    """Remember ``path`` as the file this thread is reading now."""
    _local.path = str(path)


def reading() -> str | None:
    """The file this thread opened last through this module (or named with note_reading)."""
    return getattr(_local, "path", None)


def mark(exc: BaseException, path: str | Path | None = None) -> BaseException:
    """Attach the file being read to an unexpected exception (the first file attached wins)."""
    where = str(path) if path is not None else reading()
    if where and getattr(exc, "msprof_file", None) is None:
        try:
            exc.msprof_file = where  # type: ignore[attr-defined]
        except (AttributeError, TypeError):  # exceptions with __slots__ cannot carry it
            pass
    return exc


def file_of(exc: BaseException) -> str | None:
    """The file an unexpected exception happened in, else the file this thread read last."""
    return getattr(exc, "msprof_file", None) or reading()


def describe_unexpected(exc: BaseException) -> str:
    """One line for an unexpected exception, naming the file that was being read."""
    where = file_of(exc)
    text = " ".join(str(exc).split())[:300]  # one line, whatever the message holds
    if where:
        return f"internal error while reading {where}: {type(exc).__name__}: {text}"
    return f"internal error (no file was being read): {type(exc).__name__}: {text}"


# ---------------------------------------------------------------------------------------------
# Opening


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | Path, max_bytes: int | None = None) -> BinaryIO:
    """Open a regular file for reading; ProfileError for anything else, or a file over ``max_bytes``.

    O_NONBLOCK keeps the open of a FIFO from waiting for a writer; the type is checked on the
    open descriptor (fstat), so a path swapped after a check cannot slip through.
    """
    path = Path(path)
    note_reading(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ProfileError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ProfileError(path, f"is {_kind(st.st_mode)}, not a regular file; not read")
        if max_bytes is not None and st.st_size > max_bytes:
            raise LimitExceeded(path, Limit.FILE_SIZE, f"{st.st_size:,} bytes, at most {max_bytes:,}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _mode(path: str | Path) -> int:
    """The file's mode, 0 for one that cannot be stat'ed: absent, or a name the file system
    refuses (ENAMETOOLONG from a repository's setting), which Python 3.11's ``Path.is_dir`` raises."""
    try:
        return os.stat(path).st_mode
    except (OSError, ValueError):
        return 0


def is_regular(path: str | Path) -> bool:
    return stat.S_ISREG(_mode(path))


def is_folder(path: str | Path) -> bool:
    return stat.S_ISDIR(_mode(path))


def read_bytes(path: str | Path, max_bytes: int = LIMITS.json_file_bytes) -> bytes:
    """The whole content of a regular file of at most ``max_bytes`` (a growing file is cut there)."""
    with open_regular(path, max_bytes) as f:
        try:
            data = f.read(min(os.fstat(f.fileno()).st_size, max_bytes) + 1)
        except OSError as exc:
            raise ProfileError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise LimitExceeded(path, Limit.FILE_SIZE, f"more than {max_bytes:,} bytes")
    return data


def read_head(path: str | Path, n: int) -> bytes:
    """The first ``n`` bytes of a regular file."""
    with open_regular(path) as f:
        return f.read(n)


GZIP_MAGIC = b"\x1f\x8b"
INFLATE_CHUNK = 1 * MiB  # inflated bytes produced per step, checked before they are kept
_READ_CHUNK = 256 * 1024  # compressed bytes read per step


def read_maybe_gzip(path: str | Path, limits: Limits = LIMITS) -> bytearray:
    """The bytes of a file, inflated when it is gzip (by magic bytes), within the size limits.

    One buffer, filled in place: a plain file is read into a buffer of its size; a gzip stream is
    inflated chunk by chunk into a buffer sized from its trailer (when the trailer is plausible),
    each chunk counted against the limits *before* it is kept, so a bomb stops one byte past the
    limit and memory never holds more than the limit. The buffer is returned as is (no final
    copy: the decoders read a bytearray as they read bytes).
    """
    path = Path(path)
    with open_regular(path, limits.whole_file_bytes) as f:
        if f.read(2) != GZIP_MAGIC:
            f.seek(0)
            return _read_into(path, f, limits.whole_file_bytes)
        f.seek(0)
        buf = bytearray(_size_hint(f, limits))
        n = 0
        for block in inflate(path, f, limits):
            room = len(buf) - n
            if room >= len(block):
                buf[n:n + len(block)] = block
            else:  # past the hint: append (a realloc in place, not a copy beside the buffer)
                view = memoryview(block)
                if room > 0:
                    buf[n:] = view[:room]
                buf += view[max(room, 0):]
                view.release()
            n += len(block)
        del buf[n:]  # a trailer that promised more (a multi-member file, damage): give it back
    return buf


def _read_into(path: Path, f: BinaryIO, max_bytes: int) -> bytearray:
    size = min(os.fstat(f.fileno()).st_size, max_bytes)
    buf = bytearray(size + 1)  # one byte more: a file that grew past the limit since the open shows
    view = memoryview(buf)
    n = 0
    try:
        while n < len(buf) and (k := f.readinto(view[n:])):
            n += k
    except OSError as exc:
        raise ProfileError(path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        view.release()
    if n > max_bytes:
        raise LimitExceeded(path, Limit.FILE_SIZE, f"more than {max_bytes:,} bytes")
    del buf[n:]
    return buf


def _size_hint(f: BinaryIO, limits: Limits) -> int:
    """The inflated size a gzip file's trailer (ISIZE: the last member's size mod 2**32) gives,
    when it is plausible for a JSON trace (at most 64x the compressed size and within the limit);
    else 0 and the buffer grows as the data comes. Only a hint: the limits count what inflates."""
    size = os.fstat(f.fileno()).st_size
    if size < 18:  # header + trailer
        return 0
    f.seek(size - 4)
    isize = int.from_bytes(f.read(4), "little")
    f.seek(0)
    return isize if size <= isize <= min(64 * size + MiB, limits.whole_file_bytes) else 0


def inflate(path: str | Path, f: BinaryIO, limits: Limits = LIMITS, chunk: int = INFLATE_CHUNK) -> Iterator[bytes]:
    """The inflated blocks (at most ``chunk`` bytes each) of the gzip stream ``f``, concatenated
    members included, each counted against the limits before it is handed out.

    A small file that would inflate to gigabytes stops at the limit instead of after it: no block
    goes past ``whole_file_bytes`` + 1, so the refusal comes with at most the limit inflated. Past
    ``ratio_floor_bytes`` the output may not outgrow the input read so far more than
    ``inflate_ratio`` times (JSON traces compress 5-30x). ProfileError for a truncated or corrupt
    stream. zlib directly (not GzipFile): half the time per byte, same checks (the trailer's
    CRC-32 and length are verified by zlib itself).
    """
    path = Path(path)
    inflated = 0
    compressed = 0
    pending = b""  # compressed input not yet given to the decompressor
    z = zlib.decompressobj(16 + zlib.MAX_WBITS)
    member_started = False
    try:
        while True:
            if not pending:
                pending = f.read(_READ_CHUNK)
                compressed += len(pending)
                if not pending:
                    if member_started and not z.eof:
                        raise EOFError
                    return
            if z.eof:  # a member ended: another may follow (zero padding is allowed between)
                pending = pending.lstrip(b"\0")
                if not pending:
                    continue
                z = zlib.decompressobj(16 + zlib.MAX_WBITS)
                member_started = False
            member_started = True
            room = limits.whole_file_bytes + 1 - inflated  # never inflate more than one byte past it
            block = z.decompress(pending, min(chunk, room))
            pending = z.unconsumed_tail or z.unused_data
            if block:
                inflated += len(block)
                _check_inflated(path, inflated, compressed - len(pending), limits)
                yield block
    except EOFError:
        raise ProfileError(path, "the gzip stream ends early (truncated, or still being written)") from None
    except zlib.error as exc:
        raise ProfileError(path, f"corrupt gzip data: {exc}") from None
    except OSError as exc:
        raise ProfileError(path, f"cannot read: {exc.strerror or exc}") from None


def _check_inflated(path: Path, inflated: int, compressed: int, limits: Limits) -> None:
    if inflated > limits.whole_file_bytes:
        raise LimitExceeded(path, Limit.INFLATED_SIZE, f"inflates to more than {limits.whole_file_bytes:,} bytes")
    if inflated > limits.ratio_floor_bytes and inflated > limits.inflate_ratio * max(compressed, 1):
        raise LimitExceeded(
            path, Limit.INFLATE_RATIO,
            f"{compressed:,} compressed bytes inflate to over {inflated:,} (more than {limits.inflate_ratio}:1; a gzip bomb?)",
        )


# ---------------------------------------------------------------------------------------------
# JSON and CSV shape scans

_SCAN_BLOCK = 32 * MiB
_QUOTE, _BACKSLASH, _SEP = 1, 2, 3
_JSON_CLASS = np.zeros(256, dtype=np.uint8)
_JSON_CLASS[ord('"')] = _QUOTE
_JSON_CLASS[ord("\\")] = _BACKSLASH
_CSV_CLASS = np.zeros(256, dtype=np.uint8)
_CSV_CLASS[ord('"')] = _QUOTE
_CSV_CLASS[[ord(","), ord("\n")]] = _SEP
_PLAIN_QUOTE = re.compile(rb'(?<!\\)"')


def _unescaped(pos: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Mask of the quote tokens not escaped by an odd run of backslashes right before them."""
    quote = kinds == _QUOTE
    n = len(pos)
    if n == 0:
        return quote
    is_bs = kinds == _BACKSLASH
    after_bs = np.zeros(n, dtype=bool)
    after_bs[1:] = is_bs[:-1] & (pos[:-1] + 1 == pos[1:])
    candidates = np.flatnonzero(quote & after_bs)
    if len(candidates) == 0:
        return quote
    # Start index of each backslash run: a backslash not directly after another one starts it.
    starts = is_bs & ~after_bs
    run_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    run_len = candidates - run_start[candidates - 1]
    escaped = np.zeros(n, dtype=bool)
    escaped[candidates[run_len % 2 == 1]] = True
    return quote & ~escaped


def longest_json_string(data: bytes | bytearray | memoryview) -> int:
    """Bytes in the longest string of a JSON text (escapes counted as written)."""
    arr = np.frombuffer(data, dtype=np.uint8)
    longest = 0
    in_string = False
    string_start = 0
    start = 0
    while start < len(arr):
        end = min(start + _SCAN_BLOCK, len(arr))
        while end < len(arr) and arr[end - 1] == ord("\\"):
            end += 1  # a block never ends inside a backslash run
        cls = _JSON_CLASS[arr[start:end]]
        pos = np.flatnonzero(cls)
        kinds = cls[pos]
        quote = _unescaped(pos, kinds)
        qpos = pos[quote] + start
        if in_string:
            qpos = np.concatenate(([string_start], qpos))
        if len(qpos) >= 2:
            pairs = len(qpos) // 2 * 2
            longest = max(longest, int((qpos[1:pairs:2] - qpos[0:pairs:2]).max()) - 1)
        in_string = len(qpos) % 2 == 1
        if in_string:
            string_start = int(qpos[-1])
            longest = max(longest, end - string_start - 1)
        start = end
    return longest


def too_deep(path: str | Path) -> LimitExceeded:
    """The error for a RecursionError out of a JSON decoder (nesting past Python's recursion limit)."""
    return LimitExceeded(path, Limit.JSON_DEPTH, f"nested deeper than the decoder allows (about {sys.getrecursionlimit():,} levels)")


def check_json(path: str | Path, data: bytes | bytearray | memoryview, limits: Limits = LIMITS) -> None:
    """LimitExceeded when ``data`` holds a string longer than ``limits.string_bytes``.

    Fast path: a string that long covers a whole aligned window of half its length without an
    unescaped-looking quote; the windows are few and each search stops at its first quote, so a
    normal file costs next to nothing. Only a window without one gets the exact scan.
    """
    window = max(limits.string_bytes // 2, 1)
    n = len(data)
    if n <= limits.string_bytes:
        return
    view = data if isinstance(data, (bytes, bytearray)) else bytes(data)
    if all(_PLAIN_QUOTE.search(view, k, min(k + window, n)) for k in range(0, n - window + 1, window)):
        return
    if longest_json_string(view) > limits.string_bytes:
        raise LimitExceeded(path, Limit.STRING_SIZE, f"a string of more than {limits.string_bytes:,} bytes")


@dataclass(slots=True)
class CsvCells:
    """Running longest cell over CSV bytes fed in pieces (a doubled quote toggles twice)."""

    path: str
    limits: Limits = LIMITS
    offset: int = 0
    quoted: bool = False
    cell_start: int = 0
    line: int = 1

    def feed(self, chunk: bytes) -> None:
        arr = np.frombuffer(chunk, dtype=np.uint8)
        cls = _CSV_CLASS[arr]
        pos = np.flatnonzero(cls)
        kinds = cls[pos]
        quote = kinds == _QUOTE
        inside_before = ((np.cumsum(quote, dtype=np.int64) - quote) + int(self.quoted)) % 2 == 1
        seps = pos[(kinds == _SEP) & ~inside_before] + self.offset
        if len(seps):
            bounds = np.concatenate(([self.cell_start], seps + 1))
            widths = np.diff(bounds) - 1
            worst = int(np.argmax(widths))
            if widths[worst] > self.limits.csv_cell_bytes:
                self._fail(chunk, int(bounds[worst]) - self.offset)
            self.cell_start = int(seps[-1]) + 1
        self.quoted = bool((int(quote.sum()) + int(self.quoted)) % 2)
        self.offset += len(arr)
        if self.offset - self.cell_start > self.limits.csv_cell_bytes:
            self._fail(chunk, self.cell_start - (self.offset - len(arr)))
        self.line += chunk.count(b"\n")

    def _fail(self, chunk: bytes, at: int) -> None:
        before = self.line + (chunk.count(b"\n", 0, at) if at > 0 else 0)
        raise LimitExceeded(self.path, Limit.CSV_CELL, f"a cell of more than {self.limits.csv_cell_bytes:,} bytes",
                            line=before)


# ---------------------------------------------------------------------------------------------
# Numbers



# ---------------------------------------------------------------------------------------------
# Python source


_CHAIN_OPS = frozenset(
    ". + - * / // % ** @ << >> & | ^ ~ < > <= >= == != and or not in is".split()
)
_OPENERS = frozenset("([{")
_CLOSERS = frozenset(")]}")


@dataclass(frozen=True, slots=True)
class SourceRejected:
    """Why a source file is not handed to the parser."""

    limit: Limit
    line: int
    detail: str

    def message(self) -> str:
        return f"not parsed: over the {self.limit.value} limit ({self.detail})"


def check_source(text: str, limits: Limits = LIMITS) -> SourceRejected | None:
    """None when ``text`` is safe to give libcst; else the first limit it exceeds.

    libcst's parser recurses once per chained operator (``a.b.b.b...`` or ``a + a + ...``) and
    spends time growing with the square of the chain, so 20,000 links crash the process. A run
    is the operators between two separators (``,`` ``:`` ``=`` ...) at one bracket level; a
    bracketed group counts as one operand of the run around it.
    """
    if len(text) > limits.source_bytes:
        return SourceRejected(Limit.SOURCE_SIZE, 1, f"{len(text):,} characters, at most {limits.source_bytes:,}")
    runs = [0]  # chain length per open bracket level
    work = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.NEWLINE:
                work += sum(r * r for r in runs)
                runs = [0]
            elif tok.type == tokenize.OP or (tok.type == tokenize.NAME and tok.string in _CHAIN_OPS):
                s = tok.string
                if s in _OPENERS:
                    runs.append(0)
                    if len(runs) > limits.source_depth:
                        return SourceRejected(Limit.SOURCE_DEPTH, tok.start[0], f"more than {limits.source_depth} brackets open")
                elif s in _CLOSERS:
                    if len(runs) > 1:
                        r = runs.pop()
                        work += r * r
                elif s in _CHAIN_OPS:
                    runs[-1] += 1
                    if runs[-1] > limits.source_chain:
                        return SourceRejected(Limit.SOURCE_CHAIN, tok.start[0],
                                              f"more than {limits.source_chain} operators chained in one expression")
                else:
                    work += runs[-1] * runs[-1]
                    runs[-1] = 0
            if tok.end[1] > limits.source_line_chars:
                return SourceRejected(Limit.SOURCE_LINE, tok.end[0], f"a line longer than {limits.source_line_chars:,} characters")
            if work > limits.source_work:
                return SourceRejected(Limit.SOURCE_WORK, tok.start[0], "too many long operator chains")
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None  # the parser reports the syntax error itself, on a prefix tokenize accepted
    return None


# ---------------------------------------------------------------------------------------------
# TOML (a repository's pyproject.toml)

# The tokens that matter for nesting: string openers (their bodies are skipped whole), comments,
# brackets, the dots of dotted keys and what ends a key.
_TOML_TOKEN = re.compile(r"""\"\"\"|'''|["'#\[\]{}.=,\n]""")
_TOML_STRING_END = {  # unrolled loops: linear, no backtracking
    '"': re.compile(r'[^"\\\n]*(?:\\.[^"\\\n]*)*"'),
    "'": re.compile(r"[^'\n]*'"),
    '"""': re.compile(r'[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"""{1,3}', re.S),
    "'''": re.compile(r"[^']*(?:'(?!'')[^']*)*'''{1,3}"),
}


def _line_end(text: str, pos: int) -> int:
    nl = text.find("\n", pos)
    return len(text) if nl < 0 else nl


def toml_depth(text: str, limit: int) -> int:
    """The deepest nesting in a TOML text: open brackets plus the parts of the dotted key being
    read. The scan stops at the first point past ``limit``.

    tomllib recurses once per open bracket (about 450 of them exhaust Python's recursion limit)
    and spends quadratic time and memory on a dotted key (10,000 parts: 8 s and 600 MB; 100,000:
    killed), so the text is measured before the parser sees it. Strings and comments are
    skipped.
    """
    depth = parts = deepest = 0
    pos = 0
    while (m := _TOML_TOKEN.search(text, pos)) is not None:
        tok = m.group()
        pos = m.end()
        if tok in _TOML_STRING_END:
            end = _TOML_STRING_END[tok].match(text, pos)
            if end is not None:
                pos = end.end()
            elif len(tok) == 3:
                break  # a multi-line string open to the end: the parser stops there too
            else:
                pos = _line_end(text, pos)  # a one-line string open to the line end
            continue
        if tok == "#":
            pos = _line_end(text, pos)
            continue
        if tok in "[{":
            depth += 1
            parts = 0
        elif tok in "]}":
            depth = max(depth - 1, 0)
            parts = 0
        elif tok == ".":
            parts += 1  # a float's one dot counts too: harmless, the limit is far above it
        else:  # = , or a newline: the key (or the value) ends
            parts = 0
        deepest = max(deepest, depth + parts)
        if deepest > limit:
            break
    return deepest


def read_toml(path: str | Path, limits: Limits = LIMITS) -> dict:
    """A repository's TOML file (pyproject.toml) parsed within the config limits: a regular file of
    at most ``config_bytes``, UTF-8, nested at most ``config_depth`` deep. ProfileError naming the
    file (and the limit) for anything else; never RecursionError, MemoryError or a whole read of
    an oversized file (the size is checked on the open descriptor before a byte is read)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    with open_regular(path) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > limits.config_bytes:
                raise LimitExceeded(path, Limit.CONFIG_SIZE, f"{size:,} bytes, at most {limits.config_bytes:,}")
            data = f.read(limits.config_bytes + 1)
        except OSError as exc:
            raise ProfileError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > limits.config_bytes:  # grew after the check
        raise LimitExceeded(path, Limit.CONFIG_SIZE, f"more than {limits.config_bytes:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if toml_depth(text, limits.config_depth) > limits.config_depth:
        raise LimitExceeded(path, Limit.CONFIG_DEPTH, f"nested more than {limits.config_depth} levels deep")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(path, f"not valid TOML: {exc}") from None
    except RecursionError:  # the scan above keeps this out of reach; still never a traceback
        raise LimitExceeded(path, Limit.CONFIG_DEPTH, "nested deeper than the TOML parser allows") from None
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
        raise ProfileError(path, f"not valid TOML: {exc}") from None


def read_source_text(path: str | Path, limits: Limits = LIMITS) -> str | None:
    """A workspace source file decoded per PEP 263 (undecodable bytes replaced); None when it is
    not a regular file, is over the source size limit or cannot be read."""
    try:
        data = read_bytes(path, limits.source_bytes)
    except ProfileError:
        return None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return data.decode("utf-8", "replace")
