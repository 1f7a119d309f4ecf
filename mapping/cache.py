"""On-disk cache of loaded, linked profiles.

A cache entry is one file named after the profile's identity (kind, resolved path, rank). It holds
two pickles in a row (protocol 5): a small header -- cache format, package version and the stamp
(resolved path, size, mtime_ns) of every input file -- and then the Profile. A load reads the
header first and unpickles the Profile only when every stamp still matches, so a stale entry costs
one stat per file. Entries are written to a temporary file and renamed into place, so readers
never see half an entry; an unreadable or corrupt entry is treated as a miss and rewritten.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .locations import ProfileLocation
from .model import Profile, ProfileKind

CACHE_FORMAT = 2
"""Bump when the model or the readers change what a cached Profile means."""

# Directories no reader of ours reads: torch_npu's raw TLV/logs, and under a torch_npu root the
# CANN raw PROF_* data (thousands of files; the text export already holds what we use).
_SKIP_DIRS = frozenset({"FRAMEWORK", "logs", "mindstudio_profiler_log"})


@dataclass(frozen=True, slots=True)
class FileStamp:
    path: str
    size: int
    mtime_ns: int


def package_version() -> str:
    try:
        from importlib.metadata import version

        return version("msprof-lsp")
    except Exception:  # noqa: BLE001 - not installed as a distribution (source checkout)
        return "0"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "msprof-lsp"


def input_files(location: ProfileLocation) -> list[Path]:
    """Every file the location's reader may read (the cache key covers all of them)."""
    root = Path(location.path)
    if root.is_file():
        if location.kind is ProfileKind.TORCH_NPU_DB:
            # The DB reader also reads analysis.db beside it and the run root's profiler_info.
            from .readers.torch_npu_db import companion_files

            return [root, *companion_files(root)]
        return [root]
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in _SKIP_DIRS
            and not (location.kind is ProfileKind.TORCH_NPU and d.startswith("PROF_"))
            # msprof: device_*/data and host/data hold the raw collection (thousands of files)
            and not (location.kind is ProfileKind.MSPROF and d == "data")
        )
        found.extend(Path(dirpath) / f for f in sorted(filenames))
    return found


def fingerprint(location: ProfileLocation) -> tuple[FileStamp, ...]:
    stamps = []
    for p in input_files(location):
        try:
            st = p.stat()
        except OSError:
            continue  # vanished between listing and stat: the next load sees the new state
        stamps.append(FileStamp(str(p.resolve()), st.st_size, st.st_mtime_ns))
    return tuple(stamps)


def entry_path(location: ProfileLocation, cache_dir: Path | None = None) -> Path:
    identity = f"{location.kind.value}\0{Path(location.path).resolve()}\0{location.rank}"
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return (cache_dir or default_cache_dir()) / f"{digest}.pickle"


def _header(location: ProfileLocation, stamps: tuple[FileStamp, ...]) -> dict:
    return {
        "format": CACHE_FORMAT,
        "version": package_version(),
        "kind": location.kind.value,
        "path": str(Path(location.path).resolve()),
        "rank": location.rank,
        "stamps": stamps,
    }


def load(location: ProfileLocation, cache_dir: Path | None = None) -> Profile | None:
    """The cached Profile if every input file is unchanged, else None (never raises)."""
    path = entry_path(location, cache_dir)
    try:
        with open(path, "rb") as f:
            header = pickle.load(f)
            if header != _header(location, fingerprint(location)):
                return None
            profile = pickle.load(f)
    except Exception:  # noqa: BLE001 - missing, truncated, corrupt or from another build: a miss
        return None
    return profile if isinstance(profile, Profile) else None


def store(
    location: ProfileLocation, profile: Profile, stamps: tuple[FileStamp, ...], cache_dir: Path | None = None
) -> bool:
    """Write the entry atomically; False (and nothing written) when that is not possible.

    ``stamps`` is the fingerprint taken *before* reading: if any input changed during the read, the
    entry would describe files that no longer exist, so it is not written.
    """
    if fingerprint(location) != stamps:
        return False
    path = entry_path(location, cache_dir)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.stem, suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            pickle.dump(_header(location, stamps), f, protocol=5)
            pickle.dump(profile, f, protocol=5)
        os.replace(tmp, path)
        return True
    except Exception:  # noqa: BLE001 - read-only or full disk, unpicklable extra: no cache
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return False
