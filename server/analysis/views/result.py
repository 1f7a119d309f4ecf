"""What one check run produced: its analysed jobs, from which ``rows.report`` builds the view models."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprof_lsp.hints.consolidate import SAME_CAUSE
from msprof_lsp.hints.finding import Finding, Fix
from msprof_lsp.hints.fixes.edits import edited_lines
from msprof_lsp.hints.verify import FindingChange
from msprof_lsp.mapping.source.compare import Comparison
from msprof_lsp.mapping.source.critical_path import CriticalPath
from msprof_lsp.mapping.source.heat import Attribution, SourceHeat
from msprof_lsp.mapping.profile.model import ClusterSummary, Profile
from msprof_lsp.server.analysis.run import UnreadableJob

from ...analysis.ranks import AllRanks

from . import document


@dataclass(slots=True)
class JobReport:
    """One analysed job (profile of one rank, with its cluster context)."""

    profile: Profile
    heat: SourceHeat
    findings: list[Finding]
    cluster: ClusterSummary | None = None
    ranks: list[int] = field(default_factory=list)
    comparison: Comparison | None = None
    finding_changes: list[FindingChange] = field(default_factory=list)  # with a baseline: per finding
    notes: list[str] = field(default_factory=list)
    critical_path: CriticalPath | None = None
    attribution: Attribution | None = None  # per-task source lines (the HTML report's timeline)
    source_text: Callable[[str], str | None] | None = None  # a workspace file's current text
    all_ranks: AllRanks | None = None  # --ranks all: every rank's findings, grouped


def merge_repeated(jobs: list[JobReport], cwd: Path) -> None:
    """One finding per (code, file, line) across jobs: a folder with a Kineto and an NPU profile of
    the same source would report, fix and upload every shared finding twice.

    The first job's finding stays (its message and numbers); it takes the highest severity of the
    copies and the fixes only a later copy offers, and ``evidence["profiles"]`` names every
    profile that found it, each with its own severity, share and time. The later copies are
    dropped from their jobs.
    """
    kept: dict[tuple[str, str, int], tuple[int, Finding, list[dict[str, Any]]]] = {}
    for n, job in enumerate(jobs):
        path = document.rel_path(job.profile.meta.path, cwd)
        stay: list[Finding] = []
        for f in job.findings:
            key = (f.code, f.span.path, f.span.line) if f.span is not None else None
            first = kept.get(key) if key is not None else None
            if key is None or (first is not None and first[0] == n):
                stay.append(f)  # profile-level, or a second finding of one profile on one line
            elif first is None:
                kept[key] = (n, f, [_seen_in(f, path)])
                stay.append(f)
            else:
                orig = first[1]
                first[2].append(_seen_in(f, path))
                if f.severity.rank > orig.severity.rank:
                    orig.severity = f.severity
                orig.fixes += _other_fixes(orig.fixes, f.fixes)
                _same_cause_of(orig, f)
        job.findings = stay
    for _n, f, seen in kept.values():
        if len(seen) > 1:
            f.evidence["profiles"] = seen


def _same_cause_of(orig: Finding, copy: Finding) -> None:
    """What the dropped copy's profile folded into it (hints.consolidate) stays named: its codes in
    ``same_cause`` and its same-cause related entries."""
    more = [c for c in copy.evidence.get("same_cause", []) if c != orig.code]
    if not more:
        return
    orig.evidence["same_cause"] = list(dict.fromkeys([*orig.evidence.get("same_cause", []), *more]))
    orig.evidence["same_cause_findings"] = [*orig.evidence.get("same_cause_findings", []),
                                            *copy.evidence.get("same_cause_findings", [])]
    have = {(r.span, r.message) for r in orig.related}
    orig.related += [r for r in copy.related if r.message.startswith(SAME_CAUSE) and (r.span, r.message) not in have]


def _other_fixes(have: list[Fix], more: list[Fix]) -> list[Fix]:
    """The fixes of a later copy worth adding (NpuFused is offered for an NPU profile only): new
    titles that are an alternative in an existing group or touch lines no existing fix touches
    (two variants of one edit, 4 or 8 workers, would clash)."""
    titles = {x.title for x in have}
    groups = {x.group for x in have if x.group}
    lines = set().union(*(edited_lines(x.edits) for x in have)) if have else set()
    return [x for x in more if x.title not in titles and ((x.group and x.group in groups) or not edited_lines(x.edits) & lines)]


def _seen_in(f: Finding, profile_path: str) -> dict[str, Any]:
    return {"path": profile_path, "severity": f.severity.value, "share": round(f.share, 6),
            "device_time_us": round(f.time_per_step_us, 3)}


@dataclass(slots=True)
class CheckRun:
    jobs: list[JobReport]
    cwd: Path
    tool_version: str
    unreadable: list[UnreadableJob] = field(default_factory=list)  # jobs of several that could not be read

    @property
    def findings(self) -> list[Finding]:
        return [f for job in self.jobs for f in job.findings]
