"""The pieces of the reports that every view model and renderer shares: paths relative to the
run's cwd, times in µs, a finding's saving and advice as printed, and the JSON document's nested
parts (cluster, breakdown, critical path, baseline) as ``rows.Report`` carries them.

Positions: lines 1-based, columns 1-based code points; paths relative to the cwd with "/".
Times: µs per step unless a key says otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from msprof_lsp.hints.finding import Finding, Fix
from msprof_lsp.hints.verify import FindingChange
from msprof_lsp.mapping.source.compare import Comparison
from msprof_lsp.mapping.source.critical_path import CriticalPath
from msprof_lsp.mapping.source.heat import SpanHeat
from msprof_lsp.mapping.profile.model import ClusterSummary
from msprof_lsp.mapping.units import format_share, format_us
from msprof_lsp.mapping.profile.timemodel import StepTimes, TimeBreakdown

from ..ranks import AllRanks

SCHEMA_VERSION = 1
MAX_HOTSPOTS = 20


def rel_path(path: str | os.PathLike[str], cwd: Path) -> str:
    """Path relative to ``cwd`` with "/" separators (absolute when on another drive)."""
    try:
        rel = os.path.relpath(os.fspath(path), cwd)
    except ValueError:  # pragma: no cover - Windows, other drive
        rel = os.fspath(path)
    return rel.replace(os.sep, "/")


def us(ns: float) -> float:
    """ns as µs, rounded to the ns (every time figure of the reports)."""
    return round(ns / 1000, 3)


def fix_label(fix: Fix) -> str:
    """The fix title, marked "(review)" when it changes behaviour (fix titles often say so already)."""
    if fix.safe or "review" in fix.title.lower():
        return fix.title
    return f"{fix.title} (review)"


def saving_text(f: Finding) -> str:
    """How much a finding saves per step, as the reports print it (docs/report.md "Start here")."""
    s = f.saving
    if s is not None and s.known:
        rng = ""
        if s.low_us is not None and s.high_us is not None:
            rng = f" ({format_us(s.low_us)}–{format_us(s.high_us)})"
        return f"saves {format_us(s.us_per_step)}/step{rng}"
    return (f"saving unknown, {format_us(f.time_per_step_us)}/step charged "
            f"({format_share(f.share)} of the {f.share_of.value.replace('-', ' ')})")


def advice(f: Finding) -> str:
    """What to change: the first fix's title, else the message's advice (its sentence after the
    diagnosis, docs/rules/README.md "Message")."""
    if f.fixes:
        return fix_label(f.fixes[0])
    parts = f.message.split(". ", 1)
    return parts[1].strip() if len(parts) > 1 else f.message


def hot_spans(heat) -> list[SpanHeat]:  # noqa: ANN001 - SourceHeat
    """Spans with time, most first (spans of host-only calls carry none and are no hotspot)."""
    return [h for h in heat.spans if h.per_step_ns > 0]


MAX_PATH_LINES = 20
MAX_PATH_SEGMENTS = 200  # of the first analysed step


def critical_path_dict(cp: CriticalPath | None, cwd: Path) -> dict[str, Any] | None:
    """The critical path per analysed step and per source line (docs/numbers.md "Critical path");
    when it cannot be computed, the same shape, empty, with ``unavailable`` saying why."""
    if cp is None:
        return None
    n = len(cp.steps)
    return {
        "unavailable": cp.unavailable,
        "steps_analysed": [p.step for p in cp.steps],
        "total_us": us(cp.total_per_step_ns),
        "span_us": us(sum(p.span_ns for p in cp.steps) / n) if n else 0.0,
        "by_kind_us": {k.value: us(v) for k, v in cp.by_kind_per_step().items()},
        "steps": [
            {"step": p.step, "total_us": us(p.total_ns), "span_us": us(p.span_ns), "segments": len(p.segments),
             "by_kind_us": {k.value: us(v) for k, v in p.by_kind().items()}}
            for p in cp.steps
        ],
        "segments": [
            {"kind": s.kind.value, "start_us": us(s.start_ns - cp.steps[0].segments[0].start_ns),
             "us": us(s.weight_ns), "name": s.name}
            for s in cp.steps[0].segments[:MAX_PATH_SEGMENTS]
        ] if n and cp.steps[0].segments else [],
        "lines": [
            {"path": rel_path(lp.path, cwd), "line": lp.line, "total_us": us(lp.total_per_step_ns),
             "on_path_us": us(lp.on_path_per_step_ns), "host_on_path_us": us(lp.host_on_path_per_step_ns),
             "own_us": us(lp.own_per_step_ns), "path_share": round(lp.path_share, 6),
             "bound": lp.bound.value if lp.bound is not None else None,
             "charged_us": {b.value: us(v) for b, v in lp.charged.items()},
             "waits": [{"name": name, "us": us(ns)} for name, ns in lp.waits]}
            for lp in cp.lines[:MAX_PATH_LINES]
        ],
        "notes": list(cp.notes),
    }


def cluster_dict(cluster: ClusterSummary | None) -> dict[str, Any] | None:
    if cluster is None:
        return None
    return {
        "slowest_rank": cluster.slowest_rank,
        "analysed_rank": cluster.analysed_rank,
        "analysed_because": cluster.analysed_why,
        "slowest_over_fastest": round(cluster.slowest_over_fastest, 6),
        "ranks": [
            {
                "rank": r.rank,
                "path": r.path,
                "step_time_us": us(r.step_time_ns),
                "comm_not_overlapped_us": us(r.comm_not_overlapped_ns),
                "comm_share": round(r.comm_share, 6),
                "device_data": r.device_data,
            }
            for r in cluster.ranks
        ],
    }


def rank_ranges(ranks: Sequence[int]) -> str:
    """``0-3, 8, 10-11``: sorted ranks with runs of consecutive ones as ranges."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def rank_findings_dict(all_ranks: AllRanks | None, cwd: Path) -> dict[str, Any] | None:
    """``--ranks all``: every rank's findings grouped (docs/numbers.md "Every rank's findings")."""
    if all_ranks is None:
        return None
    return {
        "engine": all_ranks.engine,
        "ranks_analysed": list(all_ranks.analysed),
        "ranks_failed": [{"rank": r, "error": e} for r, e in all_ranks.failed],
        "groups": [
            {"code": g.code, "name": g.name, "severity": g.severity.value,
             "path": rel_path(g.path, cwd) if g.path else None, "line": g.line, "message": g.message,
             "ranks": list(g.ranks), "low_us": round(g.low_us, 3), "high_us": round(g.high_us, 3),
             "worst_rank": g.worst_rank}
            for g in all_ranks.groups
        ],
    }


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


def _step_times(s: StepTimes) -> dict[str, Any]:
    out: dict[str, Any] = {"step": s.step, "device": s.device}
    for key, attr in _BREAKDOWN_FIELDS.items():
        v = getattr(s, attr)
        out[key] = us(v) if v >= 0 else None
    return out


def breakdown_dict(b: TimeBreakdown) -> dict[str, Any]:
    """The time model per step and averaged (docs/numbers.md); None where a figure is unknown."""
    mean: dict[str, Any] = {}
    for key, attr in _BREAKDOWN_FIELDS.items():
        v = b.mean(attr)
        mean[key] = None if v is None else us(v)
    return {"source": b.source.value, "device_streams": b.streams, "mean": mean,
            "steps": [_step_times(s) for s in b.steps]}


def _figures(f: Finding | None) -> dict[str, Any] | None:
    return None if f is None else {"severity": f.severity.value, "share": round(f.share, 6),
                                   "device_time_us": round(f.time_per_step_us, 3), "message": f.message}


def finding_change_dict(c: FindingChange, cwd: Path) -> dict[str, Any]:
    """One baseline finding's fate; the place is the current finding's (the baseline's when resolved)."""
    f = c.finding
    return {"code": c.code, "state": c.state.value, "path": rel_path(f.span.path, cwd) if f.span else None,
            "line": f.span.line if f.span else None, "before": _figures(c.before), "after": _figures(c.after)}


def baseline_dict(cmp: Comparison | None, cwd: Path, changes: Sequence[FindingChange] = ()) -> dict[str, Any] | None:
    if cmp is None:
        return None
    return {
        "path": rel_path(cmp.baseline_path, cwd),
        "step_time_us": round(cmp.before_step_us, 3),
        "current_step_time_us": round(cmp.after_step_us, 3),
        "step_change": None if cmp.step_ratio is None else round(cmp.step_ratio, 6),
        "changes": [
            {"path": rel_path(c.path, cwd), "line": c.line, "before_us": round(c.before_us, 3), "after_us": round(c.after_us, 3)}
            for c in cmp.lines
        ],
        "operators": [
            {"type": c.key, "before_us": round(c.before_us, 3), "after_us": round(c.after_us, 3)} for c in cmp.operators
        ],
        "findings": [finding_change_dict(c, cwd) for c in changes],
    }
