"""What one ``--check`` run produced, in the pieces every renderer reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprof_lsp.hints.finding import Finding, Severity
from msprof_lsp.mapping.compare import Comparison
from msprof_lsp.mapping.heat import SourceHeat
from msprof_lsp.mapping.model import ClusterSummary, Profile

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
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class CheckRun:
    jobs: list[JobReport]
    cwd: Path
    tool_version: str

    @property
    def findings(self) -> list[Finding]:
        return [f for job in self.jobs for f in job.findings]

    def counts(self) -> dict[Severity, int]:
        counts = {s: 0 for s in Severity}
        for f in self.findings:
            counts[f.severity] += 1
        return counts

    def to_document(self) -> dict[str, Any]:
        cwd = self.cwd
        profiles = []
        findings = []
        hotspots = []
        for job in self.jobs:
            pdict = document.profile_dict(job.profile, job.cluster, job.ranks, cwd, job.heat.mapped_share)
            profiles.append(pdict)
            for f in sorted(job.findings, key=Finding.sort_key):
                findings.append(document.finding_dict(f, cwd, pdict["path"]))
            for h in document.hot_spans(job.heat)[: document.MAX_HOTSPOTS]:
                d = document.hotspot_dict(h, cwd, job.profile.num_steps)
                d["profile_path"] = pdict["path"]
                hotspots.append(d)
        first = self.jobs[0] if self.jobs else None
        return {
            "version": document.SCHEMA_VERSION,
            "tool": {"name": "msprof-lsp", "version": self.tool_version},
            "profile": profiles[0] if profiles else None,
            "profiles": profiles,
            "findings": findings,
            "hotspots": hotspots,
            "baseline": document.baseline_dict(first.comparison if first else None, cwd),
        }
