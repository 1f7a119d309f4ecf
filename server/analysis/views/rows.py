"""The report as typed view models: what one check run shows, built once from its jobs
(``report(run)``) and read by every front-end -- the JSON document (``Report.as_dict()``, schema
version 1 of design.md), the text, SARIF and GitHub renderers, the LSP commands, and the MCP tools
and Python API that come next.

Positions: lines 1-based, columns 1-based code points; paths relative to the run's cwd with "/".
Times: µs per step unless a field says otherwise (docs/numbers.md defines each figure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msprof_lsp.hints.consolidate import saving_order, start_here
from msprof_lsp.hints.finding import Finding, Fix, Saving, Severity, ShareOf
from msprof_lsp.hints.verify import FindingState
from msprof_lsp.mapping.profile.model import ClusterSummary, Profile
from msprof_lsp.mapping.profile.step_infer import describe as describe_steps
from msprof_lsp.mapping.profile.timemodel import device_time_per_step_ns, profile_breakdown
from msprof_lsp.mapping.source.critical_path import CriticalPath
from msprof_lsp.mapping.source.heat import SourceHeat, SpanHeat

from ..ranks import AllRanks
from . import document
from .parts import BaselineView, BreakdownView, ClusterView, CriticalPathView, RankFindingsView
from .result import CheckRun

TOOL_NAME = "msprof-lsp"


@dataclass(frozen=True, slots=True)
class EditRow:
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    new_text: str


@dataclass(frozen=True, slots=True)
class FixRow:
    title: str
    safe: bool
    group: str | None  # same group in one finding: alternatives, apply one
    edits: tuple[EditRow, ...]
    label: str  # the title as the text formats print it ("(review)" when it changes behaviour)

    @classmethod
    def of(cls, fix: Fix, cwd: Path) -> FixRow:
        return cls(title=fix.title, safe=fix.safe, group=fix.group or None, label=document.fix_label(fix),
                   edits=tuple(EditRow(path=document.rel_path(e.path, cwd), line=e.line, column=e.col + 1,
                                       end_line=e.end_line, end_column=e.end_col + 1, new_text=e.new_text)
                               for e in fix.edits))

    def as_dict(self) -> dict[str, Any]:
        return {"title": self.title, "safe": self.safe, "group": self.group,
                "edits": [{"path": e.path, "line": e.line, "column": e.column, "end_line": e.end_line,
                           "end_column": e.end_column, "new_text": e.new_text} for e in self.edits]}


@dataclass(frozen=True, slots=True)
class RelatedRow:
    path: str
    line: int
    column: int
    message: str
    end_line: int  # SARIF's region; the JSON document names the start only
    end_column: int


@dataclass(frozen=True, slots=True)
class FindingRow:
    """One finding as every report lists it; ``finding`` is the domain object it was built from,
    ``job`` the index of its profile in ``Report.profiles``."""

    code: str
    name: str
    severity: Severity
    path: str | None  # None: a finding about the profile itself
    line: int | None
    column: int | None
    end_line: int | None
    end_column: int | None
    message: str
    share: float
    share_of: ShareOf
    device_time_us: float
    saving: Saving
    confidence: str
    evidence: dict[str, Any]
    fixes: tuple[FixRow, ...]
    related: tuple[RelatedRow, ...]
    saving_text: str  # how much it saves, as the text formats print it (document.saving_text)
    change: str  # what to change, as "Start here" prints it (document.advice)
    profile_path: str | None
    finding: Finding = field(repr=False, compare=False)
    # against a baseline (SARIF's baselineState; the JSON document lists the states under "baseline")
    state: FindingState | None = None
    job: int = 0

    @classmethod
    def of(cls, f: Finding, cwd: Path, profile_path: str | None = None,
           state: FindingState | None = None, job: int = 0) -> FindingRow:
        s = f.span
        return cls(
            code=f.code, name=f.name, severity=f.severity, path=document.rel_path(s.path, cwd) if s else None,
            line=s.line if s else None, column=s.col + 1 if s else None, end_line=s.end_line if s else None,
            end_column=s.end_col + 1 if s else None, message=f.message, share=round(f.share, 6), share_of=f.share_of,
            device_time_us=round(f.time_per_step_us, 3),
            saving=f.saving or Saving.unknown("no saving model for this rule yet"), confidence=f.confidence.value,
            evidence=f.evidence, fixes=tuple(FixRow.of(x, cwd) for x in f.fixes),
            related=tuple(RelatedRow(path=document.rel_path(r.span.path, cwd), line=r.span.line,
                                     column=r.span.col + 1, message=r.message, end_line=r.span.end_line,
                                     end_column=r.span.end_col + 1) for r in f.related),
            saving_text=document.saving_text(f), change=document.advice(f), profile_path=profile_path, finding=f,
            state=state, job=job)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "code": self.code, "name": self.name, "severity": self.severity.value, "path": self.path,
            "line": self.line, "column": self.column, "end_line": self.end_line, "end_column": self.end_column,
            "message": self.message, "share": self.share, "share_of": self.share_of.value,
            "device_time_us": self.device_time_us, "saving": self.saving.as_dict(), "confidence": self.confidence,
            "evidence": self.evidence, "fixes": [x.as_dict() for x in self.fixes],
            "related": [{"path": r.path, "line": r.line, "column": r.column, "message": r.message}
                        for r in self.related],
        }
        if self.profile_path is not None:
            d["profile_path"] = self.profile_path
        return d


@dataclass(frozen=True, slots=True)
class OpRow:
    name: str
    type: str
    core: str
    time_us: float
    count: int
    shapes: tuple[str, ...]
    backward: bool


@dataclass(frozen=True, slots=True)
class PathFigures:
    """A hotspot's time on the critical path (docs/numbers.md "Critical path"): ``on_path_us``
    is None with ``unavailable`` saying why when there is no path."""

    on_path_us: float | None
    path_share: float | None = None
    unavailable: str | None = None

    @classmethod
    def of(cls, cp: CriticalPath | None, path: str, line: int) -> PathFigures | None:
        if cp is None:
            return None
        if cp.unavailable is not None:
            return cls(on_path_us=None, unavailable=cp.unavailable)
        lp = cp.line(path, line)
        return cls(on_path_us=document.us(lp.on_path_per_step_ns) if lp is not None else 0.0,
                   path_share=round(lp.path_share, 6) if lp is not None else 0.0)

    def as_dict(self) -> dict[str, Any]:
        if self.unavailable is not None:
            return {"on_path_us": None, "critical_path_unavailable": self.unavailable}
        return {"on_path_us": self.on_path_us, "path_share": self.path_share}


@dataclass(frozen=True, slots=True)
class HotspotRow:
    """A source span with device time (docs/numbers.md "Hotspots"); ``ops_by_type``: its
    operators' forward and backward kernels of one type counted once (name, count), most time
    first, as the text report lists them; ``job``: the index of its profile in ``Report.profiles``."""

    path: str
    line: int
    end_line: int
    column: int
    function: str
    code: str
    confidence: str
    device_time_us: float
    forward_us: float
    backward_us: float
    share: float
    calls: int
    ops: tuple[OpRow, ...]
    ops_by_type: tuple[tuple[str, int], ...]
    heat: SpanHeat = field(repr=False, compare=False)  # what it was built from
    on_path: PathFigures | None = None  # JSON only: the critical path when it was computed
    profile_path: str | None = None
    job: int = 0

    @classmethod
    def of(cls, h: SpanHeat, cwd: Path, steps: int, cp: CriticalPath | None = None,
           profile_path: str | None = None, job: int = 0) -> HotspotRow:
        span, us = h.site.span, document.us
        per_step = max(steps, 1)
        return cls(path=document.rel_path(span.path, cwd), line=span.line, end_line=span.end_line,
                   column=span.col + 1, function=h.site.function,
                   code=h.site.call_text or (f"in {h.site.function}()" if h.site.function else ""),
                   confidence=h.site.confidence.value, device_time_us=us(h.per_step_ns),
                   forward_us=us(h.fwd_ns / per_step), backward_us=us(h.bwd_ns / per_step), share=round(h.share, 6),
                   calls=h.calls,
                   ops=tuple(OpRow(name=o.name, type=o.type, core=o.core, time_us=us(o.total_ns / per_step),
                                   count=o.count, shapes=tuple(o.shapes), backward=o.backward) for o in h.ops),
                   ops_by_type=_ops_by_type(h), heat=h, on_path=PathFigures.of(cp, span.path, span.line),
                   profile_path=profile_path, job=job)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "path": self.path, "line": self.line, "end_line": self.end_line, "column": self.column,
            "function": self.function, "code": self.code, "confidence": self.confidence,
            "device_time_us": self.device_time_us, "forward_us": self.forward_us, "backward_us": self.backward_us,
            "share": self.share, "calls": self.calls,
            "ops": [{"name": o.name, "type": o.type, "core": o.core, "time_us": o.time_us, "count": o.count,
                     "shapes": list(o.shapes), "backward": o.backward} for o in self.ops],
        }
        if self.on_path is not None:
            d.update(self.on_path.as_dict())
        if self.profile_path is not None:
            d["profile_path"] = self.profile_path
        return d


def _ops_by_type(h: SpanHeat) -> tuple[tuple[str, int], ...]:
    totals: dict[str, list[int]] = {}
    for o in h.ops:
        t = totals.setdefault(o.type or o.name, [0, 0])
        t[0] += o.total_ns
        t[1] += o.count
    return tuple((name, c) for name, (_, c) in sorted(totals.items(), key=lambda kv: -kv[1][0]))


def hotspot_rows(heat: SourceHeat, cwd: Path, steps: int, cp: CriticalPath | None = None,
                 profile_path: str | None = None, job: int = 0) -> list[HotspotRow]:
    """The spans with the most device time, most first, at most ``document.MAX_HOTSPOTS``."""
    return [HotspotRow.of(h, cwd, steps, cp, profile_path, job) for h in document.hot_spans(heat)[: document.MAX_HOTSPOTS]]


@dataclass(frozen=True, slots=True)
class ProfileView:
    """One analysed profile's header (docs/report.md "JSON"); the nested parts are typed rows
    (``parts``) whose ``as_dict`` is the JSON document's. ``time_source``: what the mapped share and
    the hotspots' times are of ("device", or "host" for a profile without device tasks);
    ``baseline``: this profile against the baseline (the JSON document has the first one's, as
    ``Report.baseline``); the JSON document leaves both out."""

    path: str
    kind: str
    backend: str
    rank: int | None
    ranks: tuple[int, ...]
    steps: int
    steps_source: str
    step_time_us: float
    step_time_source: str
    wall_step_time_us: float | None
    device_time_us: float
    has_call_stacks: bool
    mapped_share: float
    complete: bool
    issues: tuple[str, ...]
    cluster: ClusterView | None
    breakdown: BreakdownView
    breakdown_source: str
    critical_path: CriticalPathView | None = None
    rank_findings: RankFindingsView | None = None  # --ranks all: every rank's findings grouped
    time_source: str = "device"
    baseline: BaselineView | None = None

    @classmethod
    def of(cls, profile: Profile, cluster: ClusterSummary | None, ranks: Sequence[int], cwd: Path, heat: SourceHeat,
           cp: CriticalPath | None = None, all_ranks: AllRanks | None = None,
           baseline: BaselineView | None = None) -> ProfileView:
        meta, us = profile.meta, document.us
        step_ns, step_source = profile.step_time()
        wall = profile.wall_step_ns()
        breakdown = profile_breakdown(profile)
        return cls(
            path=document.rel_path(meta.path, cwd), kind=meta.kind.value, backend=meta.backend.value, rank=meta.rank,
            ranks=tuple(sorted(ranks)), steps=profile.num_steps,
            steps_source=describe_steps(meta, bool(profile.steps) or bool((profile.kernels["step"] >= 0).any())),
            step_time_us=us(step_ns), step_time_source=step_source, wall_step_time_us=None if wall is None else us(wall),
            device_time_us=us(device_time_per_step_ns(profile)), has_call_stacks=profile.has_call_stacks,
            mapped_share=round(heat.mapped_share, 6), complete=meta.complete, issues=tuple(str(i) for i in profile.issues),
            cluster=ClusterView.of(cluster), breakdown=BreakdownView.of(breakdown),
            breakdown_source=breakdown.source.value, critical_path=CriticalPathView.of(cp, cwd),
            rank_findings=RankFindingsView.of(all_ranks, cwd), time_source=heat.time_source.value, baseline=baseline)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "kind": self.kind, "backend": self.backend, "rank": self.rank, "ranks": list(self.ranks),
            "steps": self.steps, "steps_source": self.steps_source, "step_time_us": self.step_time_us,
            "step_time_source": self.step_time_source, "wall_step_time_us": self.wall_step_time_us,
            "device_time_us": self.device_time_us, "has_call_stacks": self.has_call_stacks,
            "mapped_share": self.mapped_share, "complete": self.complete, "issues": list(self.issues),
            "cluster": _dict_of(self.cluster), "breakdown": self.breakdown.as_dict(),
            "critical_path": _dict_of(self.critical_path), "rank_findings": _dict_of(self.rank_findings),
        }


def _dict_of(part: ClusterView | CriticalPathView | RankFindingsView | BaselineView | None) -> dict[str, Any] | None:
    return None if part is None else part.as_dict()


@dataclass(frozen=True, slots=True)
class Counters:
    """How many findings at each severity, and in how many source files (the text report's last line)."""

    by_severity: dict[Severity, int]
    files: int

    @property
    def total(self) -> int:
        return sum(self.by_severity.values())


@dataclass(frozen=True, slots=True)
class Report:
    """One check run, every job: its profiles, findings (per job, by place), hotspots, what to
    start with (indexes into ``findings``), the baseline comparison of the first job, and counters.
    ``cwd``: what the paths are relative to; ``resolved``: every job's baseline findings that are
    gone (SARIF's "absent" results; the JSON document lists them under ``baseline``)."""

    tool_version: str
    profiles: tuple[ProfileView, ...]
    findings: tuple[FindingRow, ...]
    hotspots: tuple[HotspotRow, ...]
    start_here: tuple[int, ...]
    baseline: BaselineView | None
    counters: Counters
    cwd: Path
    unreadable: tuple[dict[str, str], ...] = ()  # jobs of the run that could not be read (job, error)
    resolved: tuple[FindingRow, ...] = ()
    version: int = document.SCHEMA_VERSION

    def by_place(self) -> list[FindingRow]:
        """Every job's findings in one list by place: what the line formats (concise, GitHub) print."""
        return sorted(self.findings, key=lambda r: r.finding.sort_key())

    def by_saving(self, job: int) -> list[FindingRow]:
        """One job's findings as the text report lists them: by saving (unknown last), then time
        per step; by place among equals (hints.consolidate.saving_order)."""
        rows = [r for r in self.findings if r.job == job]
        return [rows[i] for i in saving_order([r.finding for r in rows])]

    def hotspots_of(self, job: int) -> list[HotspotRow]:
        """One job's hotspots, most time first."""
        return [h for h in self.hotspots if h.job == job]

    def as_dict(self) -> dict[str, Any]:
        """The ``--format json`` document."""
        profiles = [p.as_dict() for p in self.profiles]
        return {
            "version": self.version,
            "tool": {"name": TOOL_NAME, "version": self.tool_version},
            "profile": profiles[0] if profiles else None,
            "profiles": profiles,
            "findings": [f.as_dict() for f in self.findings],
            "hotspots": [h.as_dict() for h in self.hotspots],
            "start_here": list(self.start_here),
            "unreadable": list(self.unreadable),
            "baseline": _dict_of(self.baseline),
        }


def counters(findings: Sequence[Finding]) -> Counters:
    by_severity = {s: 0 for s in Severity}
    for f in findings:
        by_severity[f.severity] += 1
    return Counters(by_severity=by_severity, files=len({f.span.path for f in findings if f.span}))


def report(run: CheckRun) -> Report:
    """The view models of a check run (what ``--check`` prints in every format)."""
    cwd = run.cwd
    profiles: list[ProfileView] = []
    findings: list[FindingRow] = []
    hotspots: list[HotspotRow] = []
    resolved: list[FindingRow] = []
    # a finding of a run compared with a baseline has a state, NEW when the baseline lacks it
    compared = any(j.comparison is not None for j in run.jobs)
    for n, job in enumerate(run.jobs):
        p = ProfileView.of(job.profile, job.cluster, job.ranks, cwd, job.heat, job.critical_path, job.all_ranks,
                           BaselineView.of(job.comparison, cwd, job.finding_changes))
        profiles.append(p)
        states = {id(c.after): c.state for c in job.finding_changes if c.after is not None}
        findings += [FindingRow.of(f, cwd, p.path, states.get(id(f), FindingState.NEW) if compared else None, n)
                     for f in sorted(job.findings, key=Finding.sort_key)]
        hotspots += hotspot_rows(job.heat, cwd, job.profile.num_steps, job.critical_path, p.path, n)
        resolved += [FindingRow.of(c.before, cwd, p.path, FindingState.RESOLVED, n) for c in job.finding_changes
                     if c.state is FindingState.RESOLVED and c.before is not None]
    return Report(
        tool_version=run.tool_version, profiles=tuple(profiles), findings=tuple(findings), hotspots=tuple(hotspots),
        start_here=tuple(start_here([r.finding for r in findings])),
        baseline=profiles[0].baseline if profiles else None, counters=counters(run.findings), cwd=cwd,
        unreadable=tuple({"job": u.job, "error": str(u.error)} for u in run.unreadable), resolved=tuple(resolved))
