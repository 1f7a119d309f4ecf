"""Group discovered profiles into jobs, and find the source folder that belongs to each job.

A folder such as ``samples/`` can hold profiles of several unrelated jobs (one per sample); a
training job's ranks all land in one folder (``tensorboard_trace_handler(dir)``). So a job is the
set of profiles sharing a parent folder; separate per-rank parents under one folder with distinct
ranks of one kind are one job too (``prof/rank0/…``, ``prof/rank1/…``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .locations import ProfileLocation


@dataclass(frozen=True, slots=True)
class Job:
    folder: Path  # the folder the job's profiles were found in
    locations: tuple[ProfileLocation, ...]


def group_jobs(locations: Sequence[ProfileLocation]) -> list[Job]:
    by_parent: dict[Path, list[ProfileLocation]] = {}
    for loc in locations:
        by_parent.setdefault(loc.path.parent, []).append(loc)

    # Merge single-rank siblings (prof/rank0/x_ascend_pt, prof/rank1/y_ascend_pt) into one job.
    by_grandparent: dict[Path, list[Path]] = {}
    for parent, locs in by_parent.items():
        if len(locs) == 1 and locs[0].rank is not None:
            by_grandparent.setdefault(parent.parent, []).append(parent)
    for grand, parents in by_grandparent.items():
        locs = [by_parent[p][0] for p in parents]
        kinds = {loc.kind for loc in locs}
        ranks = [loc.rank for loc in locs]
        if len(parents) > 1 and len(kinds) == 1 and len(set(ranks)) == len(ranks):
            for p in parents:
                del by_parent[p]
            by_parent[grand] = locs

    jobs = [Job(folder, tuple(sorted(locs, key=lambda l: (l.rank is None, l.rank or 0, str(l.path))))) for folder, locs in by_parent.items()]
    return sorted(jobs, key=lambda j: str(j.folder))


def source_root_for(profile_path: Path, boundary: Path) -> Path:
    """The nearest folder at or above the profile (not above ``boundary``) holding Python files.

    Kineto traces record prefix-stripped paths (``model.py``); resolving them against the job's
    own folder first keeps two samples' ``model.py`` apart.
    """
    boundary = boundary.resolve()
    here = profile_path.resolve()
    here = here if here.is_dir() else here.parent
    for d in (here, *here.parents):
        try:
            if any(p.suffix == ".py" for p in d.iterdir() if p.is_file()):
                return d
        except OSError:
            pass
        if d == boundary or boundary not in d.parents:
            break
    return boundary if boundary.is_dir() else boundary.parent
