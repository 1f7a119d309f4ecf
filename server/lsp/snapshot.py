"""One finished analysis as the request handlers read it (never mutated after it is built).

Positions in a snapshot refer to ``texts[path]``, the text each file had when it was analysed;
open buffers reach them through their line map (documents.py). Only the summary is kept: heat
per line/function/span, findings, the baseline comparison — not the raw profile events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from msprof_lsp.hints.finding import Finding
from msprof_lsp.mapping.compare import Comparison, LineChange
from msprof_lsp.mapping.heat import FunctionHeat, LineHeat, SpanHeat

from ..settings import Settings


@dataclass(frozen=True, slots=True)
class ProfileInfo:
    kind: str
    path: str
    rank: int | None
    ranks: tuple[int, ...]
    steps: int
    step_time_us: float
    mapped_share: float
    has_call_stacks: bool
    complete: bool
    issues: tuple[str, ...] = ()
    unmapped_files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(slots=True)
class Snapshot:
    generation: int
    settings: Settings
    info: ProfileInfo | None = None  # None: nothing loaded
    num_steps: int = 1
    findings: dict[str, list[Finding]] = field(default_factory=dict)  # by absolute path
    profile_findings: list[Finding] = field(default_factory=list)  # no source anchor
    texts: dict[str, str] = field(default_factory=dict)  # the analysed text of every path above/below
    lines: dict[str, list[LineHeat]] = field(default_factory=dict)
    functions: dict[str, list[FunctionHeat]] = field(default_factory=dict)
    spans: dict[str, list[SpanHeat]] = field(default_factory=dict)
    hotspots: list[SpanHeat] = field(default_factory=list)  # most time first, all files
    comparison: Comparison | None = None
    changes: dict[str, dict[int, LineChange]] = field(default_factory=dict)  # baseline, by path and line

    @property
    def loaded(self) -> bool:
        return self.info is not None

    def paths(self) -> set[str]:
        """Every file the snapshot says something about."""
        return set(self.findings) | set(self.lines) | set(self.functions)


def empty(generation: int, settings: Settings) -> Snapshot:
    return Snapshot(generation=generation, settings=settings)
