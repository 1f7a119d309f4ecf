"""Load one profile location: the cache, else the producer's reader (then fill the cache)."""

from __future__ import annotations

from pathlib import Path

from msprof_lsp.mapping.profile import cache, safe_io
from msprof_lsp.mapping.profile.discover import find_all, require_found
from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.numbers import fit_int64_in_place
from msprof_lsp.mapping.profile.locations import Progress, ProfileLocation, no_progress
from msprof_lsp.mapping.profile.model import Profile
from msprof_lsp.mapping.profile.readers.registry import reader_for
from msprof_lsp.mapping.profile.timemodel import profile_breakdown


def load_location(
    location: ProfileLocation,
    *,
    use_cache: bool = True,
    cache_dir: Path | None = None,
    progress: Progress = no_progress,
) -> Profile:
    """The loaded, linked Profile of one location (from the cache when its inputs are unchanged)."""
    read = reader_for(location.kind, location.path).read
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
    # Metadata kept as written may hold 2**64 or a 400-digit number: as text, it still fits the
    # cache and the rank workers' codec (int64) instead of failing the run far from the file.
    fit_int64_in_place(profile.meta.extra)
    fit_int64_in_place(profile.meta.parallel_groups)
    if use_cache:
        profile_breakdown(profile)  # every analysis asks for it: compute it once, into the entry
        cache.store(location, profile, stamps, cache_dir)
    if discarded:  # after the store: the notice belongs to this load, not to the new entry
        profile.issues.append(discarded)
    return profile


def locate(path: Path) -> ProfileLocation:
    """The one profile at ``path`` as discovery finds it (tools and tests that name one run).

    NoProfileFound when there is none; ProfileError when ``path`` holds several (point at one).
    """
    path = Path(path)
    found = require_found(find_all([path]), path, [path])
    if len(found) > 1:
        raise ProfileError(path, f"holds {len(found)} profiles, point at one: "
                                 + ", ".join(str(loc.path) for loc in found[:5]))
    return found[0]
