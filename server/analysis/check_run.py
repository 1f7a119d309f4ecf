"""The check run every structured front-end reads (``--check``, the MCP server, the Python API):
per checked path its settings, then per job found there the per-job run (``run.analyse_paths``:
discover -> load -> attribute -> rules, with savings and fixes), the baseline comparison
(``baseline``), and one ``JobReport``; findings repeated across jobs are merged. The front-ends
add only their arguments (``RunRequest``, how each path's settings resolve) and their rendering;
the editor builds its ``JobReport`` with ``job_report`` from the analysis it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from msprof_lsp.mapping.profile.jobs import Job
from msprof_lsp.mapping.profile.locations import Progress, no_progress
from msprof_lsp.mapping.source.critical_path import critical_path

from . import run
from .baseline import BaselineResult, against_baseline, load_baseline
from .settings import Settings
from .views.result import CheckRun, JobReport, merge_repeated


class CheckFailed(Exception):
    """The run cannot go on: a path it was given does not exist. The message is the one line said."""


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What to check. ``paths``: the checked folders or files (``cwd`` when empty); ``profile``:
    analyse the jobs under it, each against all of ``paths``; ``baseline``: compare with it
    (None: the settings' ``baseline``, if any); ``critical_path``: compute each job's critical
    path for the report (memoized per profile, so the rule that reads it shares the one run)."""

    cwd: Path  # the report's paths are relative to it
    tool_version: str
    paths: tuple[Path, ...] = ()
    profile: Path | None = None
    baseline: Path | None = None
    use_cache: bool = True
    critical_path: bool = False


@dataclass(frozen=True, slots=True)
class RunHooks:
    """What the front-end hears during a run: progress, the jobs found under a path before any is
    loaded (``on_jobs(jobs, base)``), and each job of several that could not be read (the others
    are still analysed and the run lists it in ``CheckRun.unreadable``)."""

    progress: Progress = no_progress
    on_jobs: Callable[[list[Job], Path], None] | None = None
    on_unreadable: Callable[[run.UnreadableJob], None] | None = None


def _exists(path: Path, what: str = "") -> Path:
    try:
        there = path.exists()
    except OSError as e:  # a name the file system refuses (ENAMETOOLONG from a repository's setting)
        raise CheckFailed(f"{path}: cannot be opened: {e.strerror or e}{what}") from None
    if not there:
        raise CheckFailed(f"{path}: no such file or directory{what}")
    return path


def job_report(a: run.Analysis, against: BaselineResult | None = None, *, with_critical_path: bool = False) -> JobReport:
    """One analysed job as the reports read it (its cluster, ranks and baseline states)."""
    return JobReport(
        profile=a.profile, heat=a.attribution.heat, findings=a.findings, cluster=a.loaded.cluster,
        critical_path=critical_path(a.profile, a.attribution) if with_critical_path else None,
        ranks=sorted({loc.rank for loc in a.loaded.locations if loc.rank is not None}),
        comparison=against.comparison if against else None, finding_changes=against.changes if against else [],
        attribution=a.attribution, source_text=a.workspace.text, all_ranks=a.all_ranks)


def _jobs_of(path: Path, settings: Settings, request: RunRequest, hooks: RunHooks,
             unreadable: list[run.UnreadableJob]) -> list[JobReport]:
    def say_unreadable(bad: run.UnreadableJob) -> None:
        unreadable.append(bad)
        if hooks.on_unreadable is not None:
            hooks.on_unreadable(bad)

    chosen = request.profile or (settings.resolve_path(settings.profile) if settings.profile else None)
    analyses = run.analyse_paths([path], settings, profile=chosen, use_cache=request.use_cache,
                                 progress=hooks.progress, on_jobs=hooks.on_jobs, on_unreadable=say_unreadable)
    baseline = request.baseline or (settings.resolve_path(settings.baseline) if settings.baseline else None)
    out = []
    for a in analyses:
        against = None
        if baseline is not None:
            held = load_baseline(_exists(baseline, " (--baseline)"), a.workspace, settings,
                                 use_cache=request.use_cache)
            against = against_baseline(held, a.loaded, a.attribution, a.findings, a.workspace, settings)
        out.append(job_report(a, against, with_critical_path=request.critical_path))
    return out


def check_run(request: RunRequest, settings_of: Callable[[Path], Settings], hooks: RunHooks = RunHooks()) -> CheckRun:
    """Every job under ``request.paths``; ``settings_of(path)`` resolves each checked path's
    settings (all first: a bad setting stops the run before any analysis). Raises CheckFailed,
    ProfileError."""
    paths: Sequence[Path] = [_exists(p) for p in request.paths] or [request.cwd]
    if request.profile is not None:
        _exists(request.profile, " (--profile)")
    every = [(path, settings_of(path)) for path in paths]
    unreadable: list[run.UnreadableJob] = []
    jobs = [job for path, settings in every for job in _jobs_of(path, settings, request, hooks, unreadable)]
    merge_repeated(jobs, request.cwd)
    return CheckRun(jobs=jobs, cwd=request.cwd, tool_version=request.tool_version, unreadable=unreadable)
