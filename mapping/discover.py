"""Find profiles on disk: every producer's root, its rank, and the newest run per rank.

Users point the tool at whatever their job left behind: a ``*_ascend_pt`` directory, a folder of
them (one per rank, several runs over time), a ``PROF_*`` directory of the msprof CLI, a DB export,
a Kineto ``*.pt.trace.json.gz``. Discovery walks the given paths (bounded depth, no VCS or virtual
environment folders, no symlink loops) once and recognises each producer's root without reading
trace contents beyond a small sniff; ``mapping.jobs`` groups what it finds into jobs, and
``select_newest`` picks each job's ranks.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import safe_io
from .errors import ProfileError
from .locations import ProfileLocation
from .model import ProfileKind

DEFAULT_MAX_DEPTH = 8
"""Directory levels below each given path; profiles sit a few levels down (prof/rank0/x_ascend_pt)."""

SNIFF_BYTES = 64 * 1024
"""How much of a JSON file discovery reads to tell a Kineto trace (object with traceEvents) from
anything else, and to find ``distributedInfo.rank``."""

GZ_TAIL_SCAN_LIMIT = 16 * 1024 * 1024
"""Compressed size up to which a gzipped Kineto trace is decompressed to its end to find
``distributedInfo`` (Kineto may write it after ``traceEvents``); bigger files rely on the head
and the file name."""

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
TEXT_OUTPUTS = ("trace_view.json", "kernel_details.csv", "operator_details.csv")
DONE_MARKER = "analyse.done"

_ROOT_RE = re.compile(r"_ascend_(?:pt|ms)$")
_ROOT_TS_RE = re.compile(r"_(\d{17})_ascend_(?:pt|ms)$")
PROF_DIR_RE = re.compile(r"^PROF_\d+_\d+_[0-9a-zA-Z]+")
_PROF_TS_RE = re.compile(r"^PROF_\d+_(\d{17})_")
_PROFILER_INFO_RE = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
_TORCH_DB_RE = re.compile(r"^ascend_pytorch_profiler(?:_(\d+))?\.db$")
_MSPROF_DB_RE = re.compile(r"^msprof_\d+\.db$")
_RANK_NAME_RE = re.compile(r"(?:^|[^a-z0-9])rank[_-]?(\d+)(?![0-9])", re.IGNORECASE)
_KINETO_TS_RE = re.compile(r"\.(\d{13})\.pt\.trace\.json(?:\.gz)?$")
_DIST_RANK_RE = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*"?(-?\d+)')

SKIP_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".nox",
        ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis", "site-packages",
        "dist-packages", ".idea", ".vscode", ".msprof-cache", "FRAMEWORK", "logs",
    }
)
"""Never profiles, often huge. ``FRAMEWORK``/``logs`` are torch_npu's raw data and parser logs."""

WHAT_WE_LOOK_FOR = (
    "*_ascend_pt / *_ascend_ms directories, ASCEND_PROFILER_OUTPUT, PROF_* directories, "
    "ascend_pytorch_profiler*.db, *.pt.trace.json[.gz] or Kineto *.json[.gz], trace_view.json"
)
"""One line for "no profile found" messages."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A profile as the walk found it, with what choosing between runs needs."""

    location: ProfileLocation
    has_output: bool  # False: a torch_npu root whose results were never parsed (only raw data)
    name_ts: int  # timestamp in the directory/file name, 0 if none (tie-breaker after mtime)


def discover(paths: Sequence[Path], *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[ProfileLocation]:
    """Every profile under ``paths`` taken as one pool: newest run per rank, sorted by rank.

    The product groups into jobs first (``mapping.jobs.discover_jobs``); this pool view is for
    tools and tests that point at one run. Unranked locations are dropped beside ranked ones.
    """
    return select_newest(find_candidates(paths, max_depth=max_depth))


def find_all(paths: Sequence[Path], *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[ProfileLocation]:
    """Every profile under ``paths`` (all runs, no selection), in walk order."""
    return [c.location for c in find_candidates(paths, max_depth=max_depth)]


def find_candidates(paths: Sequence[Path], *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[Candidate]:
    found: list[Candidate] = []
    seen_dirs: set[tuple[int, int]] = set()
    seen_paths: set[Path] = set()
    for path in paths:
        path = Path(path)
        for cand in _walk_root(path, max_depth, seen_dirs):
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


def _walk_root(path: Path, max_depth: int, seen_dirs: set[tuple[int, int]]) -> Iterable[Candidate]:
    try:
        is_dir = path.is_dir()
        is_file = path.is_file()
    except OSError:
        return
    if is_file:
        cand = _classify_file(path, explicit=True)
        if cand is not None:
            yield cand
        return
    if not is_dir:
        return
    if path.name == OUTPUT_DIR:  # a bare ASCEND_PROFILER_OUTPUT given directly
        parent = path.parent
        if _is_torch_root(parent, _list(parent)):
            cand = _classify_torch_root(parent, _list(parent))
        else:
            cand = _classify_torch_root(path, _list(path), bare_output=True)
        if cand is not None:
            yield cand
        return
    if path.suffix == "" and path.name.startswith("PROF_") and PROF_DIR_RE.match(path.name):
        # Given a PROF dir directly: inside a torch_npu root it is raw data, the root is the profile.
        for ancestor in (path.parent, path.parent.parent):
            if _is_torch_root(ancestor, _list(ancestor)):
                cand = _classify_torch_root(ancestor, _list(ancestor))
                if cand is not None:
                    yield cand
                return
    yield from _walk_dir(path, 0, max_depth, seen_dirs)


def _list(path: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []


def _walk_dir(
    path: Path, depth: int, max_depth: int, seen_dirs: set[tuple[int, int]]
) -> Iterable[Candidate]:
    try:
        st = path.stat()
    except OSError:
        return
    key = (st.st_dev, st.st_ino)
    if key in seen_dirs:  # symlink loop or the same folder reached twice
        return
    seen_dirs.add(key)
    entries = _list(path)
    if _is_torch_root(path, entries):
        cand = _classify_torch_root(path, entries)
        if cand is not None:
            yield cand
        return  # FRAMEWORK/, PROF_*/ inside are raw data of this run
    if PROF_DIR_RE.match(path.name):
        cand = _classify_prof_dir(path, entries)
        if cand is not None:
            yield cand
        return
    if any(e.name == "pyvenv.cfg" for e in entries):  # a virtual environment
        return
    bare = _has_output_dir(entries)
    if bare:  # results copied out of their root: the output dir is the profile
        out = path / OUTPUT_DIR
        cand = _classify_torch_root(out, _list(out), bare_output=True)
        if cand is not None:
            yield cand
    subdirs: list[Path] = []
    for entry in sorted(entries, key=lambda e: e.name):
        try:
            if entry.is_dir():
                if bare and (entry.name == OUTPUT_DIR or PROF_DIR_RE.match(entry.name)):
                    continue  # that run's raw CANN data
                if entry.name not in SKIP_DIRS and depth < max_depth:
                    subdirs.append(Path(entry.path))
                continue
            if not entry.is_file():
                continue
        except OSError:
            continue
        cand = _classify_file(Path(entry.path), explicit=False)
        if cand is not None:
            yield cand
    for sub in subdirs:
        yield from _walk_dir(sub, depth + 1, max_depth, seen_dirs)


# ---------------------------------------------------------------------------------------------
# torch_npu roots


def _is_torch_root(path: Path, entries: list[os.DirEntry[str]]) -> bool:
    if _ROOT_RE.search(path.name):
        return True
    # A renamed root still has its profiler_info*.json.
    return any(_PROFILER_INFO_RE.match(e.name) for e in entries)


def _has_output_dir(entries: list[os.DirEntry[str]]) -> bool:
    return any(e.name == OUTPUT_DIR and _is_dir(e) for e in entries)


def _classify_torch_root(
    root: Path, entries: list[os.DirEntry[str]], *, bare_output: bool = False
) -> Candidate | None:
    out = root if bare_output else root / OUTPUT_DIR
    out_entries = entries if bare_output else _list(out)
    out_names = {e.name: e for e in out_entries}
    info_rank: int | None = None
    mtimes: list[float] = []
    if not bare_output:
        for e in entries:
            m = _PROFILER_INFO_RE.match(e.name)
            if m:
                mtimes.append(_mtime(e))
                if m.group(1) is not None:
                    info_rank = int(m.group(1))
                elif info_rank is None:
                    info_rank = _rank_from_profiler_info(Path(e.path))
            elif e.name == "profiler_metadata.json":
                mtimes.append(_mtime(e))
    name_ts = _int_or_zero(_ROOT_TS_RE.search(root.name))
    has_text = any(n in out_names for n in TEXT_OUTPUTS)
    dbs = sorted(
        (e for e in out_entries if _TORCH_DB_RE.match(e.name)), key=lambda e: e.name
    )
    if has_text or not dbs:
        files = [e for e in out_entries if _is_file(e)]
        has_output = bool(files)
        mtimes.extend(_mtime(e) for e in files)
        rank = info_rank if info_rank is not None else _rank_from_names(root)
        loc = ProfileLocation(
            kind=ProfileKind.TORCH_NPU,
            path=root,
            rank=rank,
            mtime=max(mtimes, default=_mtime_path(root)),
            complete=DONE_MARKER in out_names,
        )
        return Candidate(loc, has_output, name_ts)
    # DB-only export: the DB file is the location; analysis.db beside it is read with it.
    db = dbs[-1]
    m = _TORCH_DB_RE.match(db.name)
    db_rank = int(m.group(1)) if m and m.group(1) is not None else None
    rank = info_rank if info_rank is not None else db_rank
    if rank is None:
        rank = _rank_from_names(root)
    mtimes.append(_mtime(db))
    if "analysis.db" in out_names:
        mtimes.append(_mtime(out_names["analysis.db"]))
    loc = ProfileLocation(
        kind=ProfileKind.TORCH_NPU_DB,
        path=Path(db.path),
        rank=rank,
        mtime=max(mtimes),
        complete=True,
    )
    return Candidate(loc, True, name_ts)


def _rank_from_profiler_info(path: Path) -> int | None:
    """``rank_id`` of a small profiler_info.json: string ``"0"`` or int ``0``; -1 = not distributed."""
    try:
        data = json.loads(safe_io.read_bytes(path, 1024 * 1024))
    except (ProfileError, ValueError, RecursionError):
        return None
    value = data.get("rank_id") if isinstance(data, dict) else None
    return _as_rank(value)


def _as_rank(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        rank = int(value.strip())
        return rank if rank >= 0 else None
    return None


# ---------------------------------------------------------------------------------------------
# msprof PROF_* directories


_PROF_INPUT_DIRS = ("mindstudio_profiler_output",)


def _classify_prof_dir(path: Path, entries: list[os.DirEntry[str]]) -> Candidate | None:
    mtimes: list[float] = []
    has_output = False
    for e in entries:
        if e.name in _PROF_INPUT_DIRS and e.is_dir():
            files = [f for f in _list(Path(e.path)) if _is_file(f)]
            has_output = has_output or bool(files)
            mtimes.extend(_mtime(f) for f in files)
        elif e.name.startswith("device_") and e.is_dir():
            for sub in ("summary", "timeline"):
                files = [f for f in _list(Path(e.path) / sub) if _is_file(f)]
                has_output = has_output or bool(files)
                mtimes.extend(_mtime(f) for f in files)
        elif _MSPROF_DB_RE.match(e.name):
            has_output = True
            mtimes.append(_mtime(e))
        elif e.name == "host" and e.is_dir():
            info = Path(e.path) / "info.json"
            if info.is_file():
                mtimes.append(info.stat().st_mtime)
    rank = _rank_from_names(path)
    if rank is None:
        rank = _rank_from_msprof_info(path / "host" / "info.json")
    loc = ProfileLocation(
        kind=ProfileKind.MSPROF,
        path=path,
        rank=rank,
        mtime=max(mtimes, default=_mtime_path(path)),
        complete=has_output,
    )
    return Candidate(loc, has_output, _int_or_zero(_PROF_TS_RE.match(path.name)))


def _rank_from_msprof_info(path: Path) -> int | None:
    # msprof's host/info.json may carry a rank id for distributed jobs [inferred]; -1 = none.
    try:
        data = json.loads(safe_io.read_bytes(path, 4 * 1024 * 1024))
    except (ProfileError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    for key in ("rank_id", "rankId", "rank"):
        rank = _as_rank(data.get(key))
        if rank is not None:
            return rank
    return None


# ---------------------------------------------------------------------------------------------
# Single files


def _classify_file(path: Path, *, explicit: bool) -> Candidate | None:
    name = path.name
    m = _TORCH_DB_RE.match(name)
    if m:
        return _db_candidate(path, int(m.group(1)) if m.group(1) is not None else None)
    if _MSPROF_DB_RE.match(name):
        # Only as part of its PROF dir; given directly, read that PROF dir.
        if explicit and PROF_DIR_RE.match(path.parent.name):
            return _classify_prof_dir(path.parent, _list(path.parent))
        return None
    if explicit and name.endswith(".db"):
        return _db_candidate(path, None)
    lower = name.lower()
    if lower.endswith(".pt.trace.json") or lower.endswith(".pt.trace.json.gz"):
        head, gz = _sniff(path)
        return _kineto_candidate(path, head, gz)
    if name == "trace_view.json":
        return _lone_trace(path)
    if lower.endswith(".json"):
        head, _ = _sniff(path)
        kind = _json_kind(head)
        if kind == "kineto":
            return _kineto_candidate(path, head, False)
        if kind == "array" and explicit:
            return _lone_trace(path)
    elif lower.endswith(".json.gz"):
        # Kineto traces are not always *.pt.trace.json.gz: HTA and job scripts write
        # rank-3.json.gz, sampled_rank-0.json.gz, <job>_trace.json.gz; the sniff reads 64 KiB.
        head, _ = _sniff(path)
        if _json_kind(head) == "kineto":
            return _kineto_candidate(path, head, True)
    return None


def _db_candidate(path: Path, suffix_rank: int | None) -> Candidate:
    rank = suffix_rank
    if rank is None:
        # The root above ASCEND_PROFILER_OUTPUT may have profiler_info_{rank}.json.
        root = path.parent.parent if path.parent.name == OUTPUT_DIR else path.parent
        for e in _list(root):
            m = _PROFILER_INFO_RE.match(e.name)
            if m:
                rank = int(m.group(1)) if m.group(1) is not None else _rank_from_profiler_info(Path(e.path))
                if rank is not None:
                    break
    if rank is None:
        rank = _rank_from_names(path)
    mtimes = [_mtime_path(path)]
    analysis = path.parent / "analysis.db"
    if analysis.is_file():
        mtimes.append(_mtime_path(analysis))
    root_name = path.parent.parent.name if path.parent.name == OUTPUT_DIR else path.parent.name
    loc = ProfileLocation(ProfileKind.TORCH_NPU_DB, path, rank, max(mtimes), True)
    return Candidate(loc, True, _int_or_zero(_ROOT_TS_RE.search(root_name)))


def _lone_trace(path: Path) -> Candidate:
    loc = ProfileLocation(ProfileKind.TORCH_NPU, path, _rank_from_names(path), _mtime_path(path), True)
    return Candidate(loc, True, 0)


def _kineto_candidate(path: Path, head: bytes, gz: bool) -> Candidate:
    rank = _rank_from_kineto(path, head, gz)
    if rank is None:
        rank = _rank_from_names(path)
    loc = ProfileLocation(ProfileKind.KINETO, path, rank, _mtime_path(path), True)
    return Candidate(loc, True, _int_or_zero(_KINETO_TS_RE.search(path.name)))


def _sniff(path: Path) -> tuple[bytes, bool]:
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


def _json_kind(head: bytes) -> str:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"["):
        return "array"
    if text.startswith(b"{") and b'"traceEvents"' in text:
        return "kineto"
    return ""


def _rank_from_kineto(path: Path, head: bytes, gz: bool) -> int | None:
    m = _DIST_RANK_RE.search(head)
    if m:
        return _as_rank(int(m.group(1)))
    tail = _tail(path, gz)
    m = _DIST_RANK_RE.search(tail)
    return _as_rank(int(m.group(1))) if m else None


def _tail(path: Path, gz: bool) -> bytes:
    try:
        with safe_io.open_regular(path) as f:
            if not gz:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - SNIFF_BYTES))
                return f.read()
            if os.fstat(f.fileno()).st_size > GZ_TAIL_SCAN_LIMIT:
                return b""
            tail = b""
            for chunk in safe_io.inflate(path, f):
                tail = (tail + chunk)[-SNIFF_BYTES:]
            return tail
    except (ProfileError, OSError):
        return b""


# ---------------------------------------------------------------------------------------------
# Helpers


def _rank_from_names(path: Path) -> int | None:
    """``rank3``, ``rank_3``, ``rank-3`` in the file name or one of its two parent folders."""
    for part in (path.name, path.parent.name, path.parent.parent.name):
        m = _RANK_NAME_RE.search(part)
        if m:
            return int(m.group(1))
    return None


def _int_or_zero(m: re.Match[str] | None) -> int:
    return int(m.group(1)) if m else 0


def _is_dir(e: os.DirEntry[str]) -> bool:
    try:
        return e.is_dir()
    except OSError:
        return False


def _is_file(e: os.DirEntry[str]) -> bool:
    try:
        return e.is_file()
    except OSError:
        return False


def _mtime(e: os.DirEntry[str]) -> float:
    try:
        return e.stat().st_mtime
    except OSError:
        return 0.0


def _mtime_path(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
