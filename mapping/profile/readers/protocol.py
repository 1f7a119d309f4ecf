"""The reader protocol, and what one discovery pass shares between the readers' probes.

Every reader module defines ``READER = Reader(kind, read, probe_dir, probe_file)`` and is one line
in :mod:`.registry`. Discovery lists each folder once (:class:`Listings`) and offers every folder
and file it meets to the probes in table order; the first probe that recognises one returns a
:class:`Candidate` whose location carries the reader's own layout (the files it found), so
reading starts from that layout instead of classifying the folder again.

Probes are cheap: they look at names in listings already made (a subfolder they need is listed
through the same :class:`Listings`, so still once per pass) and sniff at most the head of a file.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.numbers import int64_of
from msprof_lsp.mapping.profile.locations import Layout, Progress, ProfileLocation
from msprof_lsp.mapping.profile.model import Profile, ProfileKind

SNIFF_BYTES = 64 * 1024
"""How much of a JSON file a probe reads to tell a Kineto trace (object with traceEvents) from
anything else, and to find ``distributedInfo.rank``."""

_RANK_NAME_RE = re.compile(r"(?:^|[^a-z0-9])rank[_-]?(\d+)(?![0-9])", re.IGNORECASE)


class Listings:
    """The directory listings of one discovery pass: each folder is listed at most once."""

    def __init__(self) -> None:
        self._made: dict[Path, tuple[os.DirEntry[str], ...]] = {}

    def entries(self, path: Path) -> tuple[os.DirEntry[str], ...]:
        found = self._made.get(path)
        if found is None:
            try:
                with os.scandir(path) as it:
                    found = tuple(it)
            except OSError:
                found = ()
            self._made[path] = found
        return found

    def folder(self, path: Path) -> Folder:
        return Folder(Path(path), self.entries(Path(path)), self)

    def made(self, path: Path) -> tuple[os.DirEntry[str], ...] | None:
        """The listing of ``path`` if this pass made one (None: not listed; nothing is listed here)."""
        return self._made.get(Path(path))


@dataclass(frozen=True, slots=True)
class Folder:
    """A folder as the pass listed it."""

    path: Path
    entries: tuple[os.DirEntry[str], ...]
    listings: Listings = field(repr=False, compare=False)

    def entry(self, name: str) -> os.DirEntry[str] | None:
        return next((e for e in self.entries if e.name == name), None)

    def has_dir(self, name: str) -> bool:
        e = self.entry(name)
        return e is not None and is_dir(e)

    def sub(self, name: str) -> Folder:
        """The child folder ``name``, listed through the pass (an empty listing when absent)."""
        return self.listings.folder(self.path / name)

    def files(self) -> list[os.DirEntry[str]]:
        return [e for e in self.entries if is_file(e)]

    @property
    def parent(self) -> Folder:
        return self.listings.folder(self.path.parent)


@dataclass(slots=True)
class SeenFile:
    """A file the pass met; ``explicit`` when the user named it (not found by walking)."""

    path: Path
    explicit: bool
    listings: Listings = field(repr=False)
    _head: tuple[bytes, bool] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.path.name

    def head(self) -> tuple[bytes, bool]:
        """The first bytes (decompressed when gzipped) and whether the file is gzipped; read once."""
        if self._head is None:
            self._head = sniff(self.path)
        return self._head


@dataclass(frozen=True, slots=True)
class Candidate:
    """A profile as the walk found it, with what choosing between runs needs."""

    location: ProfileLocation
    has_output: bool  # False: a torch_npu root whose results were never parsed (only raw data)
    name_ts: int  # timestamp in the directory/file name, 0 if none (tie-breaker after mtime)


def _no_probe(_: object) -> Candidate | None:
    return None


@dataclass(frozen=True, slots=True)
class Reader:
    """One producer's reader: its kind, how it recognises its files, and how it reads them.

    ``probe_dir`` claims a folder as a profile root (discovery does not descend into it);
    ``probe_file`` recognises a single file. Both return None for what is not theirs.
    ``summary`` reads only the small per-rank files a cluster view needs (see :class:`RankFiles`);
    readers without one are loaded whole for the cluster view.
    """

    kind: ProfileKind
    read: Callable[[ProfileLocation, Progress], Profile]
    probe_dir: Callable[[Folder], Candidate | None] = _no_probe
    probe_file: Callable[[SeenFile], Candidate | None] = _no_probe
    summary: Callable[[ProfileLocation], RankFiles | None] | None = None


@dataclass(slots=True)
class RankFiles:
    """One rank read from its summary files only (a job's cluster view; never its trace).

    ``profile`` holds the metadata, the producer's step breakdown and the communication ops and
    matrix -- nothing else; ``device_data`` says whether the rank kept the files the kernel rules
    read (a rank that kept only summaries is never the one analysed in full when another has
    them); ``files`` are the files read, the key of the rank's summary cache entry.
    """

    profile: Profile
    device_data: bool
    files: tuple[Path, ...]


def _probe_path(reader: Reader, path: Path) -> Candidate | None:
    """``reader``'s own probe on one path (a location made by hand, without a layout)."""
    path = Path(path)
    listings = Listings()
    try:
        if path.is_file():
            return reader.probe_file(SeenFile(path, True, listings))
        if path.is_dir():
            return reader.probe_dir(listings.folder(path))
    except OSError:
        pass
    return None


L = TypeVar("L", bound=Layout)


def own_layout(location: ProfileLocation, reader: Reader, kind: type[L], expected: str) -> L:
    """The ``kind`` layout discovery found for ``location``, else ``reader``'s probe on its path.

    ProfileError when the path is missing or not the reader's (``expected`` says what was looked for).
    """
    if isinstance(location.layout, kind):
        return location.layout
    found = _probe_path(reader, location.path)
    if found is not None and isinstance(found.location.layout, kind):
        return found.location.layout
    path = Path(location.path)
    raise ProfileError(path, expected if path.exists() else "does not exist")


# ---------------------------------------------------------------------------------------------
# Helpers the probes share


def rank_from_names(path: Path) -> int | None:
    """``rank3``, ``rank_3``, ``rank-3`` in the file name or one of its two parent folders."""
    for part in (path.name, path.parent.name, path.parent.parent.name):
        m = _RANK_NAME_RE.search(part)
        if m:
            return as_rank(m.group(1))  # "rank_" + 30 digits is no rank (int64 checked there)
    return None


def as_rank(value: object) -> int | None:
    """A rank from a JSON value: int or digit string; negative (-1 = not distributed) is none."""
    if not isinstance(value, (int, str)):  # 1.0 is no rank; bools are refused by int64_of
        return None
    rank = int64_of(value)  # "²" and 400 digits are none, not an exception or an int64 overflow
    return rank if rank is not None and rank >= 0 else None


def int_or_zero(m: re.Match[str] | None) -> int:
    """The number a name pattern captured (a time stamp), 0 when absent or beyond int64."""
    return (int64_of(m.group(1)) or 0) if m else 0


def is_dir(e: os.DirEntry[str]) -> bool:
    try:
        return e.is_dir()
    except OSError:
        return False


def is_file(e: os.DirEntry[str]) -> bool:
    try:
        return e.is_file()
    except OSError:
        return False


def mtime(e: os.DirEntry[str]) -> float:
    try:
        return e.stat().st_mtime
    except OSError:
        return 0.0


def mtime_path(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def sniff(path: Path) -> tuple[bytes, bool]:
    """The first bytes of a (possibly gzipped) file; never the whole file."""
    try:
        head = safe_io.read_head(path, SNIFF_BYTES)
    except (ProfileError, OSError):
        return b"", False
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as g:
                return g.read(SNIFF_BYTES), True
        except (OSError, EOFError, zlib.error):
            return b"", True
    return head, False
