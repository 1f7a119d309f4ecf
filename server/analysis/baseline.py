"""The one baseline flow, for ``--check --baseline`` and the editor: an earlier profile of the same
code, attributed and checked against the current source, then compared with the current run --
per line (``compare``) and per finding (``hints.verify.classify``: resolved / improved /
persisting / regressed / new).

Both sides run the same rules the same way: the cluster rules see each side's own ranks (the
baseline's ``cluster`` too), and both sides' findings are placed by the text the analysis saw (an
editor's open buffers, else the file on disk).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from msprof_lsp.hints.finding import Finding
from msprof_lsp.hints.verify import FindingChange, classify
from msprof_lsp.mapping.profile.cluster import LoadResult
from msprof_lsp.mapping.profile.locations import Progress, no_progress
from msprof_lsp.mapping.source.attribute import attribute, reanchor
from msprof_lsp.mapping.source.compare import Comparison, compare
from msprof_lsp.mapping.source.heat import Attribution
from msprof_lsp.mapping.source.positions import split_lines
from msprof_lsp.mapping.source.workspace import SourceWorkspace

from . import run
from .settings import Settings


@dataclass(slots=True)
class Baseline:
    """A loaded baseline profile, attributed against the current job's source workspace."""

    path: str
    loaded: LoadResult
    attribution: Attribution

    def reanchor(self, path: str) -> None:
        """``path`` was edited: its lines move with the current run's."""
        self.attribution = reanchor(self.attribution, path)


@dataclass(slots=True)
class BaselineResult:
    comparison: Comparison  # per line and step time, before -> after
    changes: list[FindingChange]  # per finding: its state against the baseline


def load_baseline(
    path: Path, workspace: SourceWorkspace, settings: Settings, *, use_cache: bool = True,
    progress: Progress = no_progress,
) -> Baseline:
    """Load ``path`` (rank and cache as ``settings`` say) and attribute it against ``workspace``
    (the current run's), so both sides match by the same text. Raises ProfileError."""
    loaded = run.load([path], settings, use_cache=use_cache, progress=progress)
    return Baseline(str(path), loaded, attribute(loaded.profile, workspace))


def against_baseline(
    baseline: Baseline, loaded: LoadResult, attribution: Attribution, findings: list[Finding],
    workspace: SourceWorkspace, settings: Settings,
) -> BaselineResult:
    """The current run (``loaded``, ``attribution`` and its ``findings``) against ``baseline``."""
    before = run.findings_for(baseline.loaded.profile, baseline.attribution, workspace, settings, fixes=False,
                              cluster=baseline.loaded.cluster)
    lines: dict[str, list[str]] = {}
    for f in (*before, *findings):
        if f.span is not None and f.span.path not in lines:
            text = workspace.text(f.span.path)
            if text is not None:
                lines[f.span.path] = split_lines(text)
    comparison = compare(baseline.path, baseline.loaded.profile, baseline.attribution.heat, loaded.profile,
                         attribution.heat)
    return BaselineResult(comparison, classify(before, findings, lines=lines))
