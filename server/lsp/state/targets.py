"""Which profiles the editor session analyses.

Order: a profile chosen with ``msprof-lsp.selectProfile`` -> the ``profile`` setting -> discovery
under the workspace folders. A folder can hold several jobs (one per sample, one per training
script): every file is served by the job that owns it (:func:`owner`), and the job of the most
recently opened file is the primary one (the status), else the newest job (ties: the job whose
profiles carry more, ``Job.detail``: Ascend profiles before Kineto traces).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from msprof_lsp.mapping.errors import NoProfileFound
from msprof_lsp.mapping.profile.discover import require_found
from msprof_lsp.mapping.profile.jobs import Job

from ...analysis import run


@dataclass(frozen=True, slots=True)
class JobChoice:
    folder: Path  # where the job's profiles are
    source_root: Path  # the source folder its frames resolve against
    newest: float  # newest input file mtime of its profiles
    kinds: tuple[str, ...]
    ranks: tuple[int, ...]
    job: Job  # what discovery found: loaded as it is, the folder is not walked again

    def contains(self, path: str) -> bool:
        p = Path(path)
        return p == self.source_root or self.source_root in p.parents


def find_jobs(folders: Sequence[Path]) -> list[JobChoice]:
    """Every job under the folders, with the source folder each belongs to.

    Several runs written to one folder are the same code profiled again: the editor serves the
    newest (jobs are held by folder), ``--check`` reports each.
    """
    out: list[JobChoice] = []
    for folder in folders:
        try:
            jobs = run.find_jobs([folder])  # the grouping --check uses
        except NoProfileFound:
            continue
        for job in jobs:
            out.append(
                JobChoice(
                    folder=job.folder.resolve(),
                    source_root=job.source_root(folder).resolve(),
                    newest=max((loc.mtime for loc in job.locations), default=0.0),
                    kinds=job.kinds,
                    ranks=job.ranks,
                    job=job,
                )
            )
    newest: dict[Path, JobChoice] = {}
    for choice in out:
        held = newest.get(choice.folder)
        if held is None or (choice.newest, choice.job.detail) > (held.newest, held.job.detail):
            newest[choice.folder] = choice
    return [c for c in out if newest[c.folder] is c]


def owner(path: str, jobs: Sequence[JobChoice]) -> JobChoice | None:
    """The job whose diagnostics ``path`` gets: of the jobs whose source folder holds it, the
    deepest folder (the most specific), then the newest, then the more detailed (``Job.detail``)."""
    owning = [j for j in jobs if j.contains(path)]
    if not owning:
        return None
    return max(owning, key=lambda j: (len(j.source_root.parts), j.newest, j.job.detail, str(j.folder)))


def discovered(folders: Sequence[Path]) -> list[JobChoice]:
    """``find_jobs``, at least one: NoProfileFound (naming the folders) when there is none."""
    return list(require_found(find_jobs(folders), ", ".join(str(f) for f in folders) or "the workspace"))


def choose_job(jobs: Sequence[JobChoice], open_paths_newest_last: Sequence[str]) -> JobChoice:
    """The primary job of ``jobs`` (at least one, as ``discovered`` returns them)."""
    for path in reversed(open_paths_newest_last):
        job = owner(path, jobs)
        if job is not None:
            return job
    return max(jobs, key=lambda j: (j.newest, j.job.detail, str(j.folder)))
