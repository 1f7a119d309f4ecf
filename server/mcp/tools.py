"""What each MCP tool answers (docs/agents.md), as plain JSON-ready dicts built from the one
check run (``api.workspace_run``) with the JSON report's definitions; ``app.py`` only registers
them with the SDK. Times are µs per step; paths are relative to the workspace."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from msprof_lsp.hints.finding import Finding
from msprof_lsp.hints.fixes.profiling import PROFILE_ENV, Flavour, snippet
from msprof_lsp.mapping.source.positions import split_lines

from ..api import tables
from ..api.result import finding_ids, finding_views
from ..api.workspace_run import Request, RequestError
from ..analysis.views import document, model
from ..analysis.views.result import CheckRun, JobReport
from ..analysis.views.rows import report as build_report

MAX_LINE_KERNELS = 20  # kernel names listed for one line, most time first
MAX_LINE_CHANGES = 20  # lines listed by ``compare``, biggest change first


def _summary(p: dict[str, Any]) -> dict[str, Any]:
    keys = ("path", "kind", "backend", "rank", "ranks", "steps", "step_time_us", "wall_step_time_us",
            "device_time_us", "has_call_stacks", "mapped_share")
    return {**{k: p[k] for k in keys}, "breakdown": p["breakdown"]["mean"]}


def analyse(run: CheckRun, notes: list[str]) -> dict[str, Any]:
    doc = build_report(run).as_dict()
    views = finding_views(run, doc)
    profiles = [_summary(p) for p in doc["profiles"]]
    return {"summary": {**profiles[0], "profiles": profiles}, "findings": [asdict(v) for v in views],
            "start_here": [views[i].id for i in doc["start_here"]], "notes": notes}


def _find(run: CheckRun, finding_id: str) -> tuple[JobReport, Finding]:
    ordered = [r.finding for r in build_report(run).findings]
    for fid, f in zip(finding_ids(ordered, run.cwd), ordered):
        if fid == finding_id:
            return next(j for j in run.jobs if any(x is f for x in j.findings)), f
    raise RequestError(f"no finding {finding_id!r} in this analysis (ids come from the analyse tool)")


def propose_fix(run: CheckRun, finding_id: str) -> dict[str, Any]:
    """The finding's fixes as unified diffs against the files as they are now (paths relative to
    the workspace: ``git apply`` there); nothing is written."""
    job, f = _find(run, finding_id)
    text_of = job.source_text or (lambda _path: None)
    fixes = [{"title": x.title, "safe": x.safe, "diff": model.fix_diff(x, text_of, run.cwd)} for x in f.fixes]
    usable = [x for x in fixes if x["diff"]]
    first = usable[0] if usable else {"title": None, "safe": False, "diff": ""}
    out = {"finding_id": finding_id, "title": first["title"], "diff": first["diff"], "safe": first["safe"],
           "alternatives": usable[1:]}
    if not usable:
        out["advice"] = document.advice(f)  # no automatic edit: what the message says to change
    return out


def _line_kernels(job: JobReport, run: CheckRun, target: str, line: int) -> list[dict[str, Any]]:
    sites = job.attribution.sites if job.attribution is not None else []
    here = [i for i, s in enumerate(sites) if s.span.line == line and os.path.realpath(s.span.path) == target]
    k = tables.job_kernels(job, run.cwd, here)
    mine = k[k["in_step"] & k["work"]]
    steps = max(job.profile.num_steps, 1)
    by_name = mine.groupby(["name", "type", "core"], observed=True)["duration_us"].agg(["sum", "size", "mean"])
    by_name = by_name.sort_values("sum", ascending=False).head(MAX_LINE_KERNELS)
    return [{"name": n, "type": t, "core": c, "count": int(r["size"]), "time_us_per_step": round(r["sum"] / steps, 3),
             "mean_us": round(r["mean"], 3)} for (n, t, c), r in by_name.iterrows()]


def _line_in(job: JobReport, run: CheckRun, target: str, line: int) -> dict[str, Any] | None:
    heat = next((lh for lh in job.heat.lines if os.path.realpath(lh.path) == target and lh.line == line), None)
    if heat is None:
        return None
    steps = max(job.profile.num_steps, 1)
    return {"profile": document.rel_path(job.profile.meta.path, run.cwd),
            "time_us_per_step": round(heat.per_step_ns / 1000, 3), "share": round(heat.share, 6),
            "forward_us": round(heat.fwd_ns / steps / 1000, 3), "backward_us": round(heat.bwd_ns / steps / 1000, 3),
            "operators": [{"name": o.name, "type": o.type, "core": o.core, "count": o.count, "backward": o.backward,
                           "time_us_per_step": round(o.total_ns / steps / 1000, 3)} for o in heat.ops],
            "kernels": _line_kernels(job, run, target, line)}


def explain_line(run: CheckRun, request: Request, path: str, line: int) -> dict[str, Any]:
    """The line's device time per step in each profile that has time on it (the most first), its
    operators and kernels, and the findings on it."""
    target = str(request.place(path, "path"))
    # each job reads the source under its own root: the first that has the file
    text = next((t for job in run.jobs if job.source_text and (t := job.source_text(target)) is not None), None)
    if text is None:
        raise RequestError(f"{path}: not a readable source file of the workspace")
    lines = split_lines(text)
    n = len(lines) - (1 if lines and not lines[-1] else 0)  # no line after a final newline
    if not 1 <= line <= n:
        raise RequestError(f"{path}: line {line} is out of range (the file has {n} lines)")
    rel = document.rel_path(target, run.cwd)
    found = [x for job in run.jobs if (x := _line_in(job, run, target, line)) is not None]
    found.sort(key=lambda x: -x["time_us_per_step"])
    views = [v for v in finding_views(run, build_report(run).as_dict()) if v.path == rel and v.line == line]
    return {"path": rel, "line": line, "text": lines[line - 1].rstrip("\r\n"),
            "time_us_per_step": found[0]["time_us_per_step"] if found else 0.0,
            "share": found[0]["share"] if found else 0.0, "profiles": found,
            "findings": [asdict(v) for v in views]}


def compare(run: CheckRun) -> dict[str, Any]:
    """The first job against the baseline: step time and each finding's state, before -> after."""
    base = build_report(run).as_dict()["baseline"]
    if base is None:
        raise RequestError("no baseline comparison was made")
    changes = sorted(base["changes"], key=lambda c: -abs(c["after_us"] - c["before_us"]))[:MAX_LINE_CHANGES]
    findings = [{"id": f"{c['code']}:{c['path']}:{c['line']}" if c["path"] else c["code"], **c}
                for c in base["findings"]]
    return {"baseline": base["path"], "profile": document.rel_path(run.jobs[0].profile.meta.path, run.cwd),
            "step_time_us": {"before": base["step_time_us"], "after": base["current_step_time_us"]},
            "step_change": base["step_change"], "findings": findings, "lines": changes}


def profiler_snippet(kind: str) -> dict[str, Any]:
    try:
        flavour = Flavour(kind)
    except ValueError:
        raise RequestError(f"kind must be one of {', '.join(f.value for f in Flavour)}, got {kind!r}") from None
    return {"kind": flavour.value, "snippet": snippet(flavour),
            "how": f"put it around the training loop; set {PROFILE_ENV}=1 to record a profile"}
