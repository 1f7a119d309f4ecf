"""The reader protocol, and what one discovery pass shares between the readers' probes.

Every reader module defines ``READER = Reader(kind, read, probe_dir, probe_file, ...)`` and is one
line in :mod:`.registry`. Discovery lists each folder once (:class:`Listings`) and offers every
folder and file it meets to the probes in table order; the first probe that recognises one returns
a :class:`Candidate` whose location carries the reader's own layout (the files it found), so
reading starts from that layout instead of classifying the folder again. What else discovery, job
grouping, the cache key and the time model need to know of a producer is declared on its
:class:`Reader` too; none of them names a reader.

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
from msprof_lsp.mapping.profile.model import BreakdownSource, Profile, ProfileKind

SNIFF_BYTES = 64 * 1024
"""How much of a JSON file a probe reads to tell a Kineto trace (object with traceEvents) from
anything else, and to find ``distributedInfo.rank``."""

PROF_DIR_RE = re.compile(r"^PROF_\d+_\d+_[0-9a-zA-Z]+")
"""CANN's ``PROF_<n>_<time>_<letters>`` folder: the msprof CLI's profile, and raw data inside a
torch_npu result (shared by both readers)."""

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


def _no_probe(_: object) -> None:
    return None


def _no_folders(_: Path) -> tuple[Path, ...]:
    return ()


def own_path(location: ProfileLocation) -> Path:
    return Path(location.path)


def every_file(location: ProfileLocation) -> list[Path]:
    """The location's file, or every file under its folder."""
    return files_below(Path(location.path))


@dataclass(frozen=True, slots=True)
class Held:
    """A folder no probe claimed that holds one of a reader's results copied out of its root:
    ``profile`` is offered to the probes, the subfolders ``data`` names (that run's output and raw
    data) are never walked; the folder's other entries are."""

    profile: Folder
    data: Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class Reader:
    """One producer's reader: its kind, how it recognises its files, how it reads them, and what
    discovery, jobs and the cache need to know of its layout (the defaults suit a producer that
    writes one self-contained file or folder per rank, as Kineto does).

    Recognising (discovery; see ``docs/formats.md#adding-a-reader``):
    ``probe_dir`` claims a folder as a profile root (discovery does not descend into it);
    ``probe_file`` recognises a single file. Both return None for what is not theirs.
    ``holder`` recognises a folder that holds a result copied out of its root (:class:`Held`);
    ``enclosing`` names the folders above a path the user gave that may be a result holding it (a
    path named inside a result is read as that result); ``raw_dirs`` are folder names that only
    ever hold the producer's raw data or logs (never walked); ``looks_for`` says what its files
    are called, for the one "no profile found" line; ``watch`` are the globs (below a workspace
    folder) of its files that the editor asks its client to watch for a reload.

    Reading: ``read`` loads a location; ``summary`` reads only the small per-rank files a cluster
    view needs (see :class:`RankFiles`; readers without one are loaded whole for the cluster
    view); ``inputs`` lists every file ``read`` may read (each stamps the cache key: a change to
    any of them rebuilds the entry); ``breakdown_source`` names the producer's own step figures
    (``Profile.step_breakdown`` rows not derived here).

    Jobs (``mapping.jobs``): ``run_root`` is a location's own run folder or file (runs are grouped
    by the folder above it); ``same_job_as`` names another reader whose runs can be ranks of one
    job with this one's; ``job_by_name``: file names, digits aside, tell jobs apart; ``detail``
    ranks what a profile carries (device pipelines, AI Core metrics) when the editor chooses
    between equally new jobs.
    """

    kind: ProfileKind
    read: Callable[[ProfileLocation, Progress], Profile]
    probe_dir: Callable[[Folder], Candidate | None] = _no_probe
    probe_file: Callable[[SeenFile], Candidate | None] = _no_probe
    summary: Callable[[ProfileLocation], RankFiles | None] | None = None
    looks_for: str = ""
    watch: tuple[str, ...] = ()
    holder: Callable[[Folder], Held | None] = _no_probe
    enclosing: Callable[[Path], tuple[Path, ...]] = _no_folders
    raw_dirs: frozenset[str] = frozenset()
    inputs: Callable[[ProfileLocation], list[Path]] = every_file
    breakdown_source: BreakdownSource = BreakdownSource.STEP_TRACE_TIME
    run_root: Callable[[ProfileLocation], Path] = own_path
    same_job_as: ProfileKind | None = None
    job_by_name: bool = False
    detail: int = 0

    @property
    def family(self) -> ProfileKind:
        """The kind whose runs this reader's join in one job (its own unless ``same_job_as``)."""
        return self.same_job_as or self.kind


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


def _keep(_: str) -> bool:
    return False


def files_below(root: Path, skip: Callable[[str], bool] = _keep) -> list[Path]:
    """``root`` when it is a file; else every file under it in sorted order, leaving out the
    folders whose name ``skip`` accepts (a reader's raw data: thousands of files it never reads)."""
    if root.is_file():
        return [root]
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not skip(d))
        found.extend(Path(dirpath) / f for f in sorted(filenames))
    return found


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
