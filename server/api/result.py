"""``msprof_lsp.analyse(...)``: the Python API (docs/python-api.md) -- one workspace analysed as
``--check --format json`` analyses it, as typed findings and pandas DataFrames."""

from __future__ import annotations

import html as html_escape
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import pandas as pd

from msprof_lsp.hints.finding import Finding

from ..analysis.settings import parse_path_mapping
from ..analysis.views import document
from ..analysis.views.result import CheckRun
from ..analysis.views.rows import report as build_report
from ..check.report import html
from . import tables
from .workspace_run import Request, run_request

REPORT_HEIGHT_PX = 900  # of the notebook frame the HTML report is shown in


@dataclass(frozen=True, slots=True)
class FindingView:
    """One finding as the JSON report and the MCP tools give it (paths relative to the workspace;
    µs per step). ``id``: ``CODE:path:line``, stable while the line does not move."""

    id: str
    code: str
    name: str
    severity: str
    path: str | None
    line: int | None
    column: int | None
    message: str
    share: float
    device_time_us: float
    saving_us_per_step: float | None
    saving_basis: str
    confidence: str
    fixes: tuple[str, ...]  # fix titles; a safe fix changes no behaviour
    profile: str


def finding_ids(findings: Iterable[Finding], cwd) -> list[str]:  # noqa: ANN001 - cwd: Path
    """``CODE:path:line`` per finding (``CODE`` alone without a line), ``#2``, ``#3`` … on repeats."""
    ids: list[str] = []
    seen: dict[str, int] = {}
    for f in findings:
        base = f"{f.code}:{document.rel_path(f.span.path, cwd)}:{f.span.line}" if f.span is not None else f.code
        seen[base] = seen.get(base, 0) + 1
        ids.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return ids


def finding_views(run: CheckRun, doc: dict[str, Any]) -> list[FindingView]:
    """The findings in the JSON report's order (``doc``: the run's document; its ``start_here``
    indexes this list)."""
    ordered = [r.finding for r in build_report(run).findings]
    views = []
    for fid, f, d in zip(finding_ids(ordered, run.cwd), ordered, doc["findings"]):
        views.append(FindingView(
            id=fid, code=d["code"], name=d["name"], severity=d["severity"], path=d["path"], line=d["line"],
            column=d["column"], message=d["message"], share=d["share"], device_time_us=d["device_time_us"],
            saving_us_per_step=d["saving"]["us_per_step"], saving_basis=d["saving"]["basis"],
            confidence=d["confidence"], fixes=tuple(x["title"] for x in d["fixes"]), profile=d.get("profile_path", ""),
        ))
    return views


@dataclass(slots=True)
class Analysis:
    """A workspace's profile(s) analysed. ``report`` is the ``--check --format json`` document;
    the DataFrames hold its figures row by row (docs/python-api.md)."""

    run: CheckRun = field(repr=False)
    warnings: list[str]
    report: dict[str, Any] = field(repr=False)
    findings: list[FindingView]
    start_here: list[FindingView]
    hotspots: pd.DataFrame = field(repr=False)
    steps: pd.DataFrame = field(repr=False)
    kernels: pd.DataFrame = field(repr=False)

    def _repr_html_(self) -> str:
        """The HTML report (``--format html``) in a frame: its own styles and content policy stay its own."""
        page = html.render(self.run)
        return (f'<iframe srcdoc="{html_escape.escape(page, quote=True)}" sandbox="allow-scripts" '
                f'style="width:100%;height:{REPORT_HEIGHT_PX}px;border:0"></iframe>')


def _pairs(path_map: Mapping[str, str] | Iterable[str] | None) -> tuple[tuple[str, str], ...]:
    if path_map is None:
        return ()
    if isinstance(path_map, Mapping):
        return tuple((str(r), str(l)) for r, l in path_map.items())
    return tuple(parse_path_mapping(v) for v in path_map)


def analyse(
    workspace: str | PathLike[str], *, profile: str | PathLike[str] | None = None,
    path_map: Mapping[str, str] | Iterable[str] | None = None, baseline: str | PathLike[str] | None = None,
    rank: int | None = None,
) -> Analysis:
    """Analyse ``workspace`` (its source; profiles are discovered under it unless ``profile``
    names one) as ``msprof-lsp --check`` does. ``path_map``: ``{remote_prefix: local_prefix}`` or
    ``["REMOTE=LOCAL", …]``. Raises ValueError on a bad argument, ProfileError on a bad profile."""
    request = Request(workspace=str(workspace), profile=None if profile is None else str(profile),
                      baseline=None if baseline is None else str(baseline), path_map=_pairs(path_map), rank=rank,
                      confined=False)
    run, warnings = run_request(request)
    report = build_report(run).as_dict()
    views = finding_views(run, report)
    return Analysis(run=run, warnings=warnings, report=report, findings=views,
                    start_here=[views[i] for i in report["start_here"]], hotspots=tables.hotspots(run),
                    steps=tables.steps(run), kernels=tables.kernels(run))
