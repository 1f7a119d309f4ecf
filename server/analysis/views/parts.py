"""The JSON document's nested parts as typed rows: a profile's cluster, step breakdown, critical
path and every rank's findings (``ProfileView``), and the baseline comparison (``Report``). Each
is built once from the domain objects (``of``) and written by ``as_dict`` with the keys, order and
rounding of design.md's schema version 1 (docs/report.md "JSON"; docs/numbers.md defines each
figure). Paths relative to the run's cwd with "/"; times µs per step unless a key says otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msprof_lsp.hints.finding import Finding
from msprof_lsp.hints.verify import FindingChange, FindingState
from msprof_lsp.mapping.profile.model import ClusterSummary, RankSummary
from msprof_lsp.mapping.profile.timemodel import StepTimes, TimeBreakdown
from msprof_lsp.mapping.source.compare import Comparison
from msprof_lsp.mapping.source.critical_path import CriticalPath, LinePath, StepPath

from ..ranks import AllRanks, RankGroup
from .document import rel_path, us

MAX_PATH_LINES = 20
MAX_PATH_SEGMENTS = 200  # of the first analysed step


# -- the cluster ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterRankRow:
    rank: int
    path: str
    step_time_us: float
    comm_not_overlapped_us: float
    comm_share: float
    device_data: bool

    @classmethod
    def of(cls, r: RankSummary) -> ClusterRankRow:
        return cls(rank=r.rank, path=r.path, step_time_us=us(r.step_time_ns),
                   comm_not_overlapped_us=us(r.comm_not_overlapped_ns), comm_share=round(r.comm_share, 6),
                   device_data=r.device_data)

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "path": self.path, "step_time_us": self.step_time_us,
                "comm_not_overlapped_us": self.comm_not_overlapped_us, "comm_share": self.comm_share,
                "device_data": self.device_data}


@dataclass(frozen=True, slots=True)
class ClusterView:
    """A multi-rank job's ranks compared (docs/numbers.md "Cluster")."""

    slowest_rank: int
    analysed_rank: int
    analysed_because: str
    slowest_over_fastest: float
    ranks: tuple[ClusterRankRow, ...]

    @classmethod
    def of(cls, c: ClusterSummary | None) -> ClusterView | None:
        if c is None:
            return None
        return cls(slowest_rank=c.slowest_rank, analysed_rank=c.analysed_rank, analysed_because=c.analysed_why,
                   slowest_over_fastest=round(c.slowest_over_fastest, 6),
                   ranks=tuple(ClusterRankRow.of(r) for r in c.ranks))

    def as_dict(self) -> dict[str, Any]:
        return {"slowest_rank": self.slowest_rank, "analysed_rank": self.analysed_rank,
                "analysed_because": self.analysed_because, "slowest_over_fastest": self.slowest_over_fastest,
                "ranks": [r.as_dict() for r in self.ranks]}


# -- the step breakdown ---------------------------------------------------------------------------

_BREAKDOWN_FIELDS = {
    "computing_us": "computing_ns",
    "communication_us": "communication_ns",
    "overlapped_us": "overlapped_ns",
    "communication_not_overlapped_us": "comm_not_overlapped_ns",
    "free_us": "free_ns",
    "step_us": "stage_ns",
    "memcpy_us": "memcpy_ns",
    "host_wall_us": "host_wall_ns",
    "preparing_us": "preparing_ns",
}
BREAKDOWN_KEYS = list(_BREAKDOWN_FIELDS)  # the per-step keys, in order


@dataclass(frozen=True, slots=True)
class BreakdownFigures:
    """The time model's figures of one step, or their mean over the steps (None: unknown)."""

    computing_us: float | None
    communication_us: float | None
    overlapped_us: float | None
    communication_not_overlapped_us: float | None
    free_us: float | None
    step_us: float | None
    memcpy_us: float | None
    host_wall_us: float | None
    preparing_us: float | None

    @classmethod
    def of_step(cls, s: StepTimes) -> BreakdownFigures:
        return cls(**{key: us(v) if (v := getattr(s, attr)) >= 0 else None for key, attr in _BREAKDOWN_FIELDS.items()})

    @classmethod
    def of_mean(cls, b: TimeBreakdown) -> BreakdownFigures:
        return cls(**{key: None if (v := b.mean(attr)) is None else us(v) for key, attr in _BREAKDOWN_FIELDS.items()})

    def as_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in _BREAKDOWN_FIELDS}


@dataclass(frozen=True, slots=True)
class BreakdownStepRow:
    step: int
    device: int
    figures: BreakdownFigures

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "device": self.device, **self.figures.as_dict()}


@dataclass(frozen=True, slots=True)
class BreakdownView:
    """The time model per step and averaged (docs/numbers.md "The step breakdown")."""

    source: str
    device_streams: int
    mean: BreakdownFigures
    steps: tuple[BreakdownStepRow, ...]

    @classmethod
    def of(cls, b: TimeBreakdown) -> BreakdownView:
        return cls(source=b.source.value, device_streams=b.streams, mean=BreakdownFigures.of_mean(b),
                   steps=tuple(BreakdownStepRow(s.step, s.device, BreakdownFigures.of_step(s)) for s in b.steps))

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "device_streams": self.device_streams, "mean": self.mean.as_dict(),
                "steps": [s.as_dict() for s in self.steps]}


# -- the critical path ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PathStepRow:
    step: int
    total_us: float
    span_us: float
    segments: int
    by_kind_us: dict[str, float]

    @classmethod
    def of(cls, p: StepPath) -> PathStepRow:
        return cls(step=p.step, total_us=us(p.total_ns), span_us=us(p.span_ns), segments=len(p.segments),
                   by_kind_us={k.value: us(v) for k, v in p.by_kind().items()})

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "total_us": self.total_us, "span_us": self.span_us, "segments": self.segments,
                "by_kind_us": dict(self.by_kind_us)}


@dataclass(frozen=True, slots=True)
class PathSegmentRow:
    kind: str
    start_us: float  # from the first analysed step's first segment
    us: float
    name: str

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "start_us": self.start_us, "us": self.us, "name": self.name}


@dataclass(frozen=True, slots=True)
class PathLineRow:
    path: str
    line: int
    total_us: float
    on_path_us: float
    host_on_path_us: float
    own_us: float
    path_share: float
    bound: str | None
    charged_us: dict[str, float]
    waits: tuple[tuple[str, float], ...]  # (collective, µs)

    @classmethod
    def of(cls, lp: LinePath, cwd: Path) -> PathLineRow:
        return cls(path=rel_path(lp.path, cwd), line=lp.line, total_us=us(lp.total_per_step_ns),
                   on_path_us=us(lp.on_path_per_step_ns), host_on_path_us=us(lp.host_on_path_per_step_ns),
                   own_us=us(lp.own_per_step_ns), path_share=round(lp.path_share, 6),
                   bound=lp.bound.value if lp.bound is not None else None,
                   charged_us={b.value: us(v) for b, v in lp.charged.items()},
                   waits=tuple((name, us(ns)) for name, ns in lp.waits))

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "total_us": self.total_us, "on_path_us": self.on_path_us,
                "host_on_path_us": self.host_on_path_us, "own_us": self.own_us, "path_share": self.path_share,
                "bound": self.bound, "charged_us": dict(self.charged_us),
                "waits": [{"name": name, "us": t} for name, t in self.waits]}


@dataclass(frozen=True, slots=True)
class CriticalPathView:
    """The critical path per analysed step and per source line (docs/numbers.md "Critical path");
    when it cannot be computed, the same shape, empty, with ``unavailable`` saying why."""

    unavailable: str | None
    steps_analysed: tuple[int, ...]
    total_us: float
    span_us: float
    by_kind_us: dict[str, float]
    steps: tuple[PathStepRow, ...]
    segments: tuple[PathSegmentRow, ...]
    lines: tuple[PathLineRow, ...]
    notes: tuple[str, ...]

    @classmethod
    def of(cls, cp: CriticalPath | None, cwd: Path) -> CriticalPathView | None:
        if cp is None:
            return None
        n = len(cp.steps)
        first = cp.steps[0].segments if n else []
        segments = tuple(PathSegmentRow(kind=s.kind.value, start_us=us(s.start_ns - first[0].start_ns),
                                        us=us(s.weight_ns), name=s.name) for s in first[:MAX_PATH_SEGMENTS])
        return cls(unavailable=cp.unavailable, steps_analysed=tuple(p.step for p in cp.steps),
                   total_us=us(cp.total_per_step_ns), span_us=us(sum(p.span_ns for p in cp.steps) / n) if n else 0.0,
                   by_kind_us={k.value: us(v) for k, v in cp.by_kind_per_step().items()},
                   steps=tuple(PathStepRow.of(p) for p in cp.steps), segments=segments,
                   lines=tuple(PathLineRow.of(lp, cwd) for lp in cp.lines[:MAX_PATH_LINES]), notes=tuple(cp.notes))

    def as_dict(self) -> dict[str, Any]:
        return {"unavailable": self.unavailable, "steps_analysed": list(self.steps_analysed),
                "total_us": self.total_us, "span_us": self.span_us, "by_kind_us": dict(self.by_kind_us),
                "steps": [s.as_dict() for s in self.steps], "segments": [s.as_dict() for s in self.segments],
                "lines": [x.as_dict() for x in self.lines], "notes": list(self.notes)}


# -- every rank's findings (--ranks all) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankGroupRow:
    code: str
    name: str
    severity: str
    path: str | None
    line: int | None
    message: str
    ranks: tuple[int, ...]
    low_us: float
    high_us: float
    worst_rank: int

    @classmethod
    def of(cls, g: RankGroup, cwd: Path) -> RankGroupRow:
        return cls(code=g.code, name=g.name, severity=g.severity.value, path=rel_path(g.path, cwd) if g.path else None,
                   line=g.line, message=g.message, ranks=tuple(g.ranks), low_us=round(g.low_us, 3),
                   high_us=round(g.high_us, 3), worst_rank=g.worst_rank)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "name": self.name, "severity": self.severity, "path": self.path, "line": self.line,
                "message": self.message, "ranks": list(self.ranks), "low_us": self.low_us, "high_us": self.high_us,
                "worst_rank": self.worst_rank}


@dataclass(frozen=True, slots=True)
class RankFindingsView:
    """``--ranks all``: every rank's findings grouped (docs/numbers.md "Every rank's findings")."""

    engine: str
    ranks_analysed: tuple[int, ...]
    ranks_failed: tuple[tuple[int, str], ...]  # (rank, error)
    groups: tuple[RankGroupRow, ...]

    @property
    def total(self) -> int:
        """The ranks of the job: analysed or failed."""
        return len(self.ranks_analysed) + len(self.ranks_failed)

    @classmethod
    def of(cls, all_ranks: AllRanks | None, cwd: Path) -> RankFindingsView | None:
        if all_ranks is None:
            return None
        return cls(engine=all_ranks.engine, ranks_analysed=tuple(all_ranks.analysed),
                   ranks_failed=tuple((r, e) for r, e in all_ranks.failed),
                   groups=tuple(RankGroupRow.of(g, cwd) for g in all_ranks.groups))

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "ranks_analysed": list(self.ranks_analysed),
                "ranks_failed": [{"rank": r, "error": e} for r, e in self.ranks_failed],
                "groups": [g.as_dict() for g in self.groups]}


# -- the baseline comparison ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FindingFigures:
    severity: str
    share: float
    device_time_us: float
    message: str

    @classmethod
    def of(cls, f: Finding | None) -> FindingFigures | None:
        return None if f is None else cls(severity=f.severity.value, share=round(f.share, 6),
                                          device_time_us=round(f.time_per_step_us, 3), message=f.message)

    def as_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "share": self.share, "device_time_us": self.device_time_us,
                "message": self.message}


@dataclass(frozen=True, slots=True)
class FindingChangeRow:
    """One baseline finding's fate; the place is the current finding's (the baseline's when resolved)."""

    code: str
    state: str
    path: str | None
    line: int | None
    before: FindingFigures | None
    after: FindingFigures | None

    @classmethod
    def of(cls, c: FindingChange, cwd: Path) -> FindingChangeRow:
        f = c.finding
        return cls(code=c.code, state=c.state.value, path=rel_path(f.span.path, cwd) if f.span else None,
                   line=f.span.line if f.span else None, before=FindingFigures.of(c.before),
                   after=FindingFigures.of(c.after))

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "state": self.state, "path": self.path, "line": self.line,
                "before": self.before.as_dict() if self.before else None,
                "after": self.after.as_dict() if self.after else None}


@dataclass(frozen=True, slots=True)
class LineChangeRow:
    path: str
    line: int
    before_us: float
    after_us: float
    change: float | None  # after / before - 1 (None: no time before); the JSON document leaves it out

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "before_us": self.before_us, "after_us": self.after_us}


@dataclass(frozen=True, slots=True)
class OperatorChangeRow:
    type: str
    before_us: float
    after_us: float

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, "before_us": self.before_us, "after_us": self.after_us}


@dataclass(frozen=True, slots=True)
class BaselineView:
    """A job against the baseline: step time, per line, per operator type and per finding
    (docs/numbers.md "Baseline"). ``improved`` and ``regressed``: the lines of ``changes`` whose
    time fell or rose (the text report's lists; the JSON document leaves them out)."""

    path: str
    step_time_us: float
    current_step_time_us: float
    step_change: float | None
    changes: tuple[LineChangeRow, ...]
    operators: tuple[OperatorChangeRow, ...]
    findings: tuple[FindingChangeRow, ...]
    improved: tuple[LineChangeRow, ...] = ()
    regressed: tuple[LineChangeRow, ...] = ()

    @classmethod
    def of(cls, cmp: Comparison | None, cwd: Path, changes: Sequence[FindingChange] = ()) -> BaselineView | None:
        if cmp is None:
            return None
        lines = [LineChangeRow(path=rel_path(c.path, cwd), line=c.line, before_us=round(c.before_us, 3),
                               after_us=round(c.after_us, 3), change=_ratio(c.ratio)) for c in cmp.lines]
        row = {id(c): r for c, r in zip(cmp.lines, lines)}
        return cls(
            path=rel_path(cmp.baseline_path, cwd), step_time_us=round(cmp.before_step_us, 3),
            current_step_time_us=round(cmp.after_step_us, 3), step_change=_ratio(cmp.step_ratio),
            changes=tuple(lines),
            operators=tuple(OperatorChangeRow(type=c.key, before_us=round(c.before_us, 3),
                                              after_us=round(c.after_us, 3)) for c in cmp.operators),
            findings=tuple(FindingChangeRow.of(c, cwd) for c in changes),
            improved=tuple(row[id(c)] for c in cmp.improved()), regressed=tuple(row[id(c)] for c in cmp.regressed()))

    @property
    def step_change_pct(self) -> float | None:
        """The step time's change in percent as the text report prints it (one decimal; None: no
        step time in the baseline)."""
        return None if self.step_change is None else round(self.step_change * 100, 1)

    def regressed_beyond(self, pct: float) -> bool:
        """``--fail-on-regression PCT``: the step time grew by more than ``pct`` percent, judged on
        the figure the report prints (``step_change_pct``), so the exit status and the report agree."""
        return self.step_change_pct is not None and self.step_change_pct > pct

    def state_counts(self) -> list[tuple[str, int]]:
        """(state, how many baseline findings have it), in ``FindingState`` order, the states none has left out."""
        have = [f.state for f in self.findings]
        return [(s.value, n) for s in FindingState if (n := have.count(s.value))]

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "step_time_us": self.step_time_us,
                "current_step_time_us": self.current_step_time_us, "step_change": self.step_change,
                "changes": [c.as_dict() for c in self.changes], "operators": [o.as_dict() for o in self.operators],
                "findings": [f.as_dict() for f in self.findings]}


def _ratio(r: float | None) -> float | None:
    return None if r is None else round(r, 6)
