"""Find profiles on disk: every producer's root, its rank, and the newest run per rank.

Users point the tool at whatever their job left behind: a ``*_ascend_pt`` directory, a folder of
them (one per rank, several runs over time), a ``PROF_*`` directory of the msprof CLI, a DB export,
a Kineto ``*.pt.trace.json.gz``. Discovery walks the given paths (bounded depth, no VCS or virtual
environment folders, no symlink loops, never into a linked folder leading out of the given path)
once, listing each folder once, and offers every folder and file to the readers' probes
(``readers.registry``): the first probe that recognises one returns its location with the reader's
layout, so nothing is classified twice. What else the walk must know of a producer (a result
copied out of its root, a path named inside one, folders of raw data) the readers declare; this
module names none of them. ``mapping.jobs`` groups what it finds into jobs, and ``select_newest``
picks each job's ranks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from msprof_lsp.mapping.errors import NoProfileFound, ProfileError
from msprof_lsp.mapping.profile.locations import ProfileLocation
from msprof_lsp.mapping.profile.readers.protocol import Candidate, Folder, Held, Listings, SeenFile, sniff
from msprof_lsp.mapping.profile.readers.registry import READERS

DEFAULT_MAX_DEPTH = 8
"""Directory levels below each given path; profiles sit a few levels down (prof/rank0/x_ascend_pt)."""

SKIP_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".nox",
        ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis", "site-packages",
        "dist-packages", ".idea", ".vscode", ".msprof-cache",
    }
).union(*(r.raw_dirs for r in READERS))
"""Never profiles, often huge: tool folders, and the producers' raw data and logs (``raw_dirs``)."""

WHAT_WE_LOOK_FOR = ", ".join(dict.fromkeys(r.looks_for for r in READERS if r.looks_for))
"""One line for "no profile found" messages: what each reader's files are called."""

T = TypeVar("T")


# Files of other profilers that users name as the profile: said for what they are (their head
# holds the marker), never "no profile found ... record one".
FOREIGN_FORMATS = (
    (b'"rocprofiler-sdk-tool"', "a rocprofv3 JSON (ROCm rocprofiler-sdk tool output)"),
)


def require_found(found: Sequence[T], where: str | Path, given: Sequence[Path] = ()) -> Sequence[T]:
    """``found`` (jobs, a job's profiles, the editor's job choices) when it holds one; else
    NoProfileFound naming ``where`` -- the one place that raises it: "no such file or directory"
    when none of the ``given`` paths exists, else "no profile found" and what we look for. A file
    of another profiler (FOREIGN_FORMATS) is a ProfileError naming what it is (a profile is there,
    in a format we do not read: no "record one")."""
    if not found:
        if given and not any(Path(p).exists() for p in given):
            raise NoProfileFound(where, "no such file or directory")
        what = foreign_format(Path(where))
        if what is not None:
            raise ProfileError(where, f"{what}, not a format msprof-lsp reads: profile the job with "
                                        "torch.profiler and point at its Kineto trace (*.pt.trace.json[.gz]; "
                                        "ROCm builds of PyTorch write it too)")
        raise NoProfileFound(where, f"no profile found (looked for {WHAT_WE_LOOK_FOR})")
    return found


def foreign_format(path: Path) -> str | None:
    """What another profiler's file at ``path`` is, from its first bytes; None for anything else."""
    try:
        if not path.is_file():
            return None
    except OSError:  # a name too long for the file system (ENAMETOOLONG): no file, so no format
        return None
    head, _gz = sniff(path)
    return next((what for marker, what in FOREIGN_FORMATS if marker in head), None)


def discover(paths: Sequence[Path], *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[ProfileLocation]:
    """Every profile under ``paths`` taken as one pool: newest run per rank, sorted by rank.

    The product groups into jobs first (``mapping.jobs.discover_jobs``); this pool view is for
    tools and tests that point at one run. Unranked locations are dropped beside ranked ones.
    """
    return select_newest(find_candidates(paths, max_depth=max_depth))


def find_all(paths: Sequence[Path], *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[ProfileLocation]:
    """Every profile under ``paths`` (all runs, no selection), in walk order."""
    return [c.location for c in find_candidates(paths, max_depth=max_depth)]


def find_candidates(
    paths: Sequence[Path], *, max_depth: int = DEFAULT_MAX_DEPTH, listings: Listings | None = None
) -> list[Candidate]:
    """One pass over ``paths``: every profile, in walk order, each folder listed once (in
    ``listings`` when given, so the caller can consult what the pass saw)."""
    found: list[Candidate] = []
    seen_dirs: set[tuple[int, int]] = set()
    seen_paths: set[Path] = set()
    listings = listings if listings is not None else Listings()
    for path in paths:
        # Absolute: the layouts found here are read in pool workers, which run in another folder.
        path = Path(path).absolute()
        for cand in _walk_root(path, max_depth, seen_dirs, listings):
            key = cand.location.path
            if key not in seen_paths:
                seen_paths.add(key)
                found.append(cand)
    return found


def select_newest(candidates: Iterable[Candidate]) -> list[ProfileLocation]:
    """Newest run per rank, sorted by rank (unranked first); unranked ones are dropped when some
    carry a rank: they cannot be placed in the multi-rank picture."""
    by_rank: dict[int | None, Candidate] = {}
    for cand in candidates:
        best = by_rank.get(cand.location.rank)
        if best is None or _newer(cand, best):
            by_rank[cand.location.rank] = cand
    if any(rank is not None for rank in by_rank):
        by_rank.pop(None, None)
    return [by_rank[r].location for r in sorted(by_rank, key=lambda r: -1 if r is None else r)]


def _newer(a: Candidate, b: Candidate) -> bool:
    # A run with results beats raw-only data; then the newest input file; then the name stamp.
    return (a.has_output, a.location.mtime, a.name_ts) > (b.has_output, b.location.mtime, b.name_ts)


# ---------------------------------------------------------------------------------------------
# Walking


def _claim(seen: Folder | SeenFile) -> Candidate | None:
    """The first reader (in table order) that recognises a folder or file."""
    for reader in READERS:
        cand = reader.probe_dir(seen) if isinstance(seen, Folder) else reader.probe_file(seen)
        if cand is not None:
            return cand
    return None


def _held(folder: Folder) -> Held | None:
    """The first reader's result held in an unclaimed folder (copied out of its root)."""
    return next((held for r in READERS if (held := r.holder(folder)) is not None), None)


def _walk_root(path: Path, max_depth: int, seen_dirs: set[tuple[int, int]], listings: Listings) -> Iterable[Candidate]:
    try:
        is_dir = path.is_dir()
        is_file = path.is_file()
    except OSError:
        return
    if is_file:
        cand = _claim(SeenFile(path, True, listings))
        if cand is not None:
            yield cand
        return
    if not is_dir:
        return
    # Named inside a result (its raw data): the result around it is the profile.
    for outer in dict.fromkeys(p for r in READERS for p in r.enclosing(path)):
        cand = _claim(listings.folder(outer))
        if cand is not None:
            yield cand
            return
    try:
        home = path.resolve()
    except (OSError, RuntimeError):
        return
    yield from _walk_dir(path, 0, max_depth, seen_dirs, listings, home)


def _leads_out(entry: os.DirEntry[str], home: Path) -> bool:
    """A symlink whose target is not inside ``home`` (the walked path, resolved)."""
    if not entry.is_symlink():
        return False
    try:
        return not Path(entry.path).resolve().is_relative_to(home)
    except (OSError, RuntimeError):  # a loop or an unreadable link: not followed
        return True


def _walk_dir(
    path: Path, depth: int, max_depth: int, seen_dirs: set[tuple[int, int]], listings: Listings, home: Path
) -> Iterable[Candidate]:
    try:
        st = path.stat()
    except OSError:
        return
    key = (st.st_dev, st.st_ino)
    if key in seen_dirs:  # symlink loop or the same folder reached twice
        return
    seen_dirs.add(key)
    folder = listings.folder(path)
    cand = _claim(folder)
    if cand is not None:
        yield cand
        return  # FRAMEWORK/, PROF_*/ inside a result are its raw data
    if folder.entry("pyvenv.cfg") is not None:  # a virtual environment
        return
    held = _held(folder)
    if held is not None:  # a result copied out of its root
        cand = _claim(held.profile)
        if cand is not None:
            yield cand
    subdirs: list[Path] = []
    for entry in sorted(folder.entries, key=lambda e: e.name):
        try:
            if entry.is_dir():
                if held is not None and held.data(entry.name):
                    continue  # that run's output and raw data
                if entry.name in SKIP_DIRS:
                    continue
                if _leads_out(entry, home):
                    # A repository's `ln -s / x` would have the walk list the whole file system and
                    # offer every job on it, what `profile = "/"` may no longer do (settings.confine):
                    # a linked folder leading out is a profile itself or nothing, never walked.
                    cand = _claim(listings.folder(Path(entry.path)))
                    if cand is not None:
                        yield cand
                elif depth < max_depth:
                    subdirs.append(Path(entry.path))
                continue
            if not entry.is_file():
                continue
        except OSError:
            continue
        cand = _claim(SeenFile(Path(entry.path), False, listings))
        if cand is not None:
            yield cand
    for sub in subdirs:
        yield from _walk_dir(sub, depth + 1, max_depth, seen_dirs, listings, home)
