"""One finished analysis as the request handlers read it (never mutated after it is built).

Positions in a snapshot refer to ``texts[path]``, the text each file had when it was analysed;
open buffers reach them through their line map (documents.py). Only the summary is kept: heat
per line/function/span, findings, the baseline comparison — not the raw profile events.

What the request handlers derive from a snapshot (diagnostics, heat per buffer version, the
analysed lines) is kept on the snapshot itself (:meth:`Snapshot.derived`): installing a new one
drops it all, so a value computed from an older analysis is never served and no reload has to
remember to clear a cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from msprof_lsp.hints.consolidate import start_here
from msprof_lsp.hints.finding import Finding
from msprof_lsp.hints.line_counters import OpCounters
from msprof_lsp.hints.verify import FindingChange
from msprof_lsp.mapping.source.compare import Comparison, LineChange
from msprof_lsp.mapping.source.critical_path import LinePath
from msprof_lsp.mapping.source.heat import FunctionHeat, LineHeat, SpanHeat

from ...analysis.settings import Settings
from msprof_lsp.mapping.source.positions import split_lines

T = TypeVar("T")
MAX_DERIVED = 512  # derived values kept per snapshot (a long edit session keys them by version)


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
    critical_path_unavailable: str | None = None  # why the steps have no critical path


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
    # hardware counters per operator of the hot lines (hints.line_counters), by path and analysed line
    counters: dict[str, dict[int, list[OpCounters]]] = field(default_factory=dict)
    functions: dict[str, list[FunctionHeat]] = field(default_factory=dict)
    spans: dict[str, list[SpanHeat]] = field(default_factory=dict)
    hotspots: list[SpanHeat] = field(default_factory=list)  # most time first, all files
    comparison: Comparison | None = None
    changes: dict[str, dict[int, LineChange]] = field(default_factory=dict)  # baseline, by path and line
    path_lines: dict[str, dict[int, LinePath]] = field(default_factory=dict)  # critical path, by path and line
    # with a baseline: each finding's state (parallel to ``findings[path]``), and the baseline's
    # findings resolved since, at the line their code is on now
    states: dict[str, list[FindingChange]] = field(default_factory=dict)
    resolved: dict[str, list[FindingChange]] = field(default_factory=dict)
    finding_changes: list[FindingChange] = field(default_factory=list)  # the primary job's, all of them
    # files served by another job than ``info``'s (a workspace with several jobs): its profile
    infos: dict[str, ProfileInfo] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    # values derived from this snapshot; not an init field, so ``replace`` starts a copy empty
    _derived: dict[tuple[Any, ...], Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def start_here(self) -> list[Finding]:
        """The top findings by saving over every held job (hints.consolidate.start_here, as
        ``--check`` chooses them): the status bar's headline and the "Start here" code lenses."""
        def top() -> list[Finding]:
            every = sorted([f for fs in self.findings.values() for f in fs] + list(self.profile_findings),
                           key=Finding.sort_key)
            return [every[i] for i in start_here(every)]
        return self.derived(("start_here",), top)

    def derived(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        """``compute()`` once per ``key`` for this snapshot (the key names the kind of value and
        the buffer state it depends on). Only the event loop reads snapshots, so no lock."""
        try:
            return self._derived[key]  # type: ignore[no-any-return]
        except KeyError:
            pass
        value = compute()
        if len(self._derived) >= MAX_DERIVED:
            self._derived.clear()
        self._derived[key] = value
        return value

    def analysed_lines(self, path: str) -> list[str] | None:
        """The lines of ``texts[path]``, the text the analysis saw."""
        text = self.texts.get(path)
        if text is None:
            return None
        return self.derived(("lines", path), lambda: split_lines(text))

    def info_for(self, path: str | None) -> ProfileInfo | None:
        """The profile the file's numbers come from."""
        return self.infos.get(path, self.info) if path else self.info

    def steps_for(self, path: str | None) -> int:
        return self.steps.get(path, self.num_steps) if path else self.num_steps

    @property
    def loaded(self) -> bool:
        return self.info is not None

    def paths(self) -> set[str]:
        """Every file the snapshot says something about."""
        return set(self.findings) | set(self.lines) | set(self.functions)


_BY_PATH = ("findings", "texts", "lines", "counters", "functions", "spans", "changes", "path_lines", "states", "resolved")


def merge(generation: int, parts: Sequence[tuple[Any, Snapshot]], owner: Callable[[str], Any]) -> Snapshot:
    """One snapshot of several jobs' analyses, ``(job, snapshot)`` with the primary job first:
    each file's findings, heat and text come from the job ``owner(path)`` names (else from the
    first that has the file), so two jobs never mix on one file."""
    (_, first), rest = parts[0], parts[1:]
    if not rest:
        return replace(first, generation=generation)
    out = Snapshot(generation=generation, settings=first.settings, info=first.info, num_steps=first.num_steps,
                   comparison=first.comparison, finding_changes=first.finding_changes)
    for job, part in parts:
        def mine(path: str, job: Any = job) -> bool:
            o = owner(path)
            return o is None or o == job

        for name in _BY_PATH:
            dst = getattr(out, name)
            for path, value in getattr(part, name).items():
                if path in dst or not mine(path):
                    continue
                dst[path] = value
                if part is not first and part.info is not None:
                    out.infos[path] = part.info
                    out.steps[path] = part.num_steps
        out.profile_findings.extend(part.profile_findings)
        out.hotspots.extend(h for h in part.hotspots if mine(h.site.span.path))
    return out


def empty(generation: int, settings: Settings) -> Snapshot:
    return Snapshot(generation=generation, settings=settings)
