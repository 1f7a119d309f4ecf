"""The per-job run, shared by ``--check`` and the language server:
discover -> load -> attribute (SourceHeat) -> rules (``hints.engine.run_rules``) -> findings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.finding import Finding
from msprof_lsp.mapping.errors import ProfileError
from msprof_lsp.mapping.profile import cache, safe_io
from msprof_lsp.mapping.source.attribute import attribute
from msprof_lsp.mapping.profile.cluster import LoadResult, load_job, load_profile
from msprof_lsp.mapping.profile.discover import require_found
from msprof_lsp.mapping.source.heat import Attribution
from msprof_lsp.mapping.profile.jobs import Job, discover_jobs
from msprof_lsp.mapping.profile.locations import Progress, no_progress
from msprof_lsp.mapping.profile.model import ClusterSummary, Profile
from msprof_lsp.mapping.source.workspace import SourceWorkspace

from .ranks import AllRanks, analyse_all
from .settings import Settings


@dataclass(slots=True)
class Analysis:
    """One job's profile, analysed against its source."""

    loaded: LoadResult
    workspace: SourceWorkspace
    attribution: Attribution
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)
    all_ranks: AllRanks | None = None  # ranks "all": every rank's findings, grouped

    @property
    def profile(self):  # noqa: ANN201 - Profile; kept short for callers
        return self.loaded.profile


def build_workspace(roots: Sequence[Path], settings: Settings) -> SourceWorkspace:
    return SourceWorkspace(
        [Path(r) for r in roots],
        path_mappings=settings.path_mappings,
        third_party_roots=settings.third_party_roots,
    )


def load(
    profile_paths: Sequence[Path],
    settings: Settings,
    *,
    use_cache: bool = True,
    progress: Progress = no_progress,
) -> LoadResult:
    return load_profile(
        list(profile_paths), rank=settings.rank, use_cache=use_cache, cache_dir=_cache_dir(settings), progress=progress
    )


def findings_for(
    profile: Profile, attribution: Attribution, workspace: SourceWorkspace, settings: Settings, *, fixes: bool = True,
    cluster: ClusterSummary | None = None,
) -> list[Finding]:
    """Run the rules (selection, severities, min_share and suppressions from ``settings``);
    ``fixes=False`` leaves the fix offers unexpanded (the language server expands them on demand);
    ``cluster``: the job's ranks compared, for the cluster rules."""
    return run_rules(RuleContext(profile, attribution, workspace, settings.rule_config(), cluster=cluster), fixes=fixes)


def analyse_loaded(loaded: LoadResult, workspace: SourceWorkspace, settings: Settings) -> Analysis:
    try:
        attribution = attribute(loaded.profile, workspace)
        findings = findings_for(loaded.profile, attribution, workspace, settings, cluster=loaded.cluster)
    except Exception as exc:
        raise safe_io.mark(exc, safe_io.reading() or loaded.profile.path)  # named in the one-line report
    return Analysis(loaded, workspace, attribution, findings)


def keep_derived(loaded: LoadResult, settings: Settings) -> None:
    """Write what the analysis derived from the profile alone (critical paths, op tokens) beside
    its cache entry, so the next run reads it (mapping.cache.store_derived); a profile that did
    not come from or go to the cache (``--no-cache``, ranks of a process pool) has no entry."""
    cache.store_derived(loaded.location, loaded.profile, _cache_dir(settings))


def _cache_dir(settings: Settings) -> Path | None:
    return settings.resolve_path(settings.cache_dir) if settings.cache_dir else None


def load_found_job(job: Job, settings: Settings, *, use_cache: bool = True, progress: Progress = no_progress) -> LoadResult:
    """Load a job that discovery already found (its ranks are not looked for again)."""
    return load_job(job.locations, job.folder, rank=settings.rank, use_cache=use_cache,
                    cache_dir=_cache_dir(settings), progress=progress)


def find_jobs(paths: Sequence[Path]) -> list[Job]:
    # One walk; runs are grouped into jobs first and newest-run-per-rank is chosen inside a job,
    # so two samples' rank-0 profiles never compete and unrelated traces never form a cluster.
    return list(require_found(discover_jobs(list(paths)), ", ".join(str(p) for p in paths)))


@dataclass(frozen=True, slots=True)
class UnreadableJob:
    """One job of several that could not be read: the file and why, as the one-line error says it."""

    job: str  # Job.describe(base)
    error: ProfileError


def analyse_paths(
    paths: Sequence[Path],
    settings: Settings,
    *,
    profile: Path | None = None,
    use_cache: bool = True,
    progress: Progress = no_progress,
    on_jobs: Callable[[list[Job], Path], None] | None = None,
    on_unreadable: Callable[[UnreadableJob], None] | None = None,
) -> list[Analysis]:
    """``--check`` semantics: one analysis per job found under ``paths`` (or under ``profile``).

    Each job is checked against the source folder nearest to it (so two samples' ``model.py``
    stay apart); the jobs of ``--profile`` are each checked against all of ``paths``.
    ``on_jobs(jobs, base)`` hears which jobs were found before any is loaded. With
    ``on_unreadable``, a job that cannot be read while others can is handed to it and the others
    are still analysed (one bad run never hides the good ones); when none can be read, or without
    it, the first error is raised.
    """
    paths = [p.resolve() for p in paths]
    base = profile.resolve() if profile is not None else paths[0]
    jobs = find_jobs([profile] if profile is not None else paths)
    if on_jobs is not None:
        on_jobs(jobs, base if base.is_dir() else base.parent)
    analyses = []
    failed: list[UnreadableJob] = []
    base_dir = base if base.is_dir() else base.parent
    for job in jobs:
        if profile is not None:
            roots = paths
        else:
            boundary = next((p for p in paths if p == job.folder or p in job.folder.parents), paths[0])
            roots = [job.source_root(boundary)]
        try:
            loaded = load_found_job(job, settings, use_cache=use_cache, progress=progress)
        except ProfileError as exc:
            if on_unreadable is None or len(jobs) < 2:
                raise
            failed.append(UnreadableJob(job.describe(base_dir), exc))
            continue
        analysis = analyse_loaded(loaded, build_workspace(roots, settings), settings)
        if settings.ranks == "all" and loaded.cluster is not None:
            analysis.all_ranks = analyse_all(loaded.locations, roots, settings, use_cache=use_cache,
                                             cache_dir=_cache_dir(settings), progress=progress)
        analyses.append(analysis)
        if use_cache:
            keep_derived(loaded, settings)
    if failed and not analyses:
        raise failed[0].error
    for bad in failed:
        on_unreadable(bad)  # type: ignore[misc]  # failed is only filled with a callback
    return analyses
