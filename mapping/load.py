"""Load one profile location: the cache, else the producer's reader (then fill the cache)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from . import cache, safe_io
from .errors import NoProfileFound, ProfileError
from .locations import Progress, ProfileLocation, no_progress
from .model import Profile, ProfileKind

READER_MODULES = {
    ProfileKind.TORCH_NPU: "torch_npu",
    ProfileKind.TORCH_NPU_DB: "torch_npu_db",
    ProfileKind.MSPROF: "msprof_cli",
    ProfileKind.KINETO: "kineto",
}
"""``msprof_lsp.mapping.readers.<module>.read(location, progress) -> Profile`` per kind."""


def _reader(location: ProfileLocation):  # noqa: ANN202
    name = READER_MODULES.get(location.kind)
    module_name = f"{__package__}.readers.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise ProfileError(location.path, f"this build has no reader for {location.kind.value} profiles") from None
    return module.read


def load_location(
    location: ProfileLocation,
    *,
    use_cache: bool = True,
    cache_dir: Path | None = None,
    progress: Progress = no_progress,
) -> Profile:
    """The loaded, linked Profile of one location (from the cache when its inputs are unchanged)."""
    read = _reader(location)
    discarded = None
    if use_cache:
        progress("Checking the profile cache", None)
        lookup = cache.load(location, cache_dir)
        if lookup.profile is not None:
            progress("Loaded from cache", 1.0)
            return lookup.profile
        discarded = lookup.discarded
    stamps = cache.fingerprint(location) if use_cache else ()
    safe_io.note_reading(location.path)
    try:
        profile = read(location, progress)
    except OSError as exc:
        raise ProfileError(exc.filename or location.path, f"cannot read: {exc.strerror or exc}") from None
    except Exception as exc:
        raise safe_io.mark(exc)  # a bug, but its one-line report still names the file being read
    if use_cache:
        cache.store(location, profile, stamps, cache_dir)
    if discarded:  # after the store: the notice belongs to this load, not to the new entry
        profile.issues.append(discarded)
    return profile


_INFO_RANK = re.compile(r"^profiler_info_(\d+)\.json$")


def locate(path: Path) -> ProfileLocation:
    """Minimal location for the forms a torch_npu user points at (full discovery: mapping.discover).

    A ``*_ascend_pt`` root, its ``ASCEND_PROFILER_OUTPUT``, a lone ``trace_view.json`` (JSON array);
    a JSON object file is taken as Kineto, ``*.db`` as the torch_npu DB export, ``PROF_*`` as msprof.
    """
    path = Path(path)
    if path.is_file():
        name = path.name
        if name.endswith(".db"):
            return ProfileLocation(ProfileKind.TORCH_NPU_DB, path, mtime=path.stat().st_mtime)
        if name.endswith(".json.gz"):
            return ProfileLocation(ProfileKind.KINETO, path, mtime=path.stat().st_mtime)
        if name.endswith(".json"):
            kind = ProfileKind.KINETO if _first_byte(path) == b"{" else ProfileKind.TORCH_NPU
            return ProfileLocation(kind, path, mtime=path.stat().st_mtime)
        raise NoProfileFound(path, "is not a profile file (expected trace_view.json, *.json[.gz] or *.db)")
    if not path.is_dir():
        raise NoProfileFound(path, "does not exist")
    if path.name.startswith("PROF_"):
        return ProfileLocation(ProfileKind.MSPROF, path, mtime=path.stat().st_mtime)
    root = path.parent if path.name == "ASCEND_PROFILER_OUTPUT" else path
    output = root / "ASCEND_PROFILER_OUTPUT"
    if output.is_dir():
        rank = None
        for p in root.iterdir():
            m = _INFO_RANK.match(p.name)
            if m:
                rank = int(m.group(1))
                break
        return ProfileLocation(
            ProfileKind.TORCH_NPU,
            path,
            rank=rank,
            mtime=output.stat().st_mtime,
            complete=(output / "analyse.done").exists(),
        )
    raise NoProfileFound(path, "holds no torch_npu result (no ASCEND_PROFILER_OUTPUT/)")


def _first_byte(path: Path) -> bytes:
    return safe_io.read_head(path, 4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
