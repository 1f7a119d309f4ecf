"""The Python API's DataFrames, built from a check run's jobs with the JSON report's own
definitions (``analysis.views``: ``document``, the rows and their ``parts``), so their figures are the report's (docs/python-api.md)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import numpy as np
import pandas as pd

from msprof_lsp.mapping.profile.timemodel import profile_breakdown, work_mask
from msprof_lsp.mapping.source.heat import TimeSource

from ..analysis.views import document
from ..analysis.views.parts import BREAKDOWN_KEYS, BreakdownView
from ..analysis.views.result import CheckRun, JobReport
from ..analysis.views.rows import HotspotRow

HOTSPOT_COLUMNS = ["profile", "path", "line", "end_line", "column", "function", "code", "time_us_per_step", "share",
                   "forward_us", "backward_us", "calls", "confidence", "top_op"]
STEP_COLUMNS = ["profile", "step", "device", *BREAKDOWN_KEYS]
KERNEL_COLUMNS = ["profile", "name", "type", "core", "step", "device", "stream", "start_us", "duration_us",
                  "backward", "in_step", "work", "path", "line"]


def _frame(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns) if rows else pd.DataFrame({c: [] for c in columns})


def hotspots(run: CheckRun) -> pd.DataFrame:
    """One row per source span with device time, hottest first per profile: the JSON report's
    ``hotspots`` (which keeps the first 20) with every span."""
    rows = []
    for job in run.jobs:
        profile = document.rel_path(job.profile.meta.path, run.cwd)
        for h in document.hot_spans(job.heat):
            d = HotspotRow.of(h, run.cwd, job.profile.num_steps)
            rows.append({"profile": profile, "path": d.path, "line": d.line, "end_line": d.end_line,
                         "column": d.column, "function": d.function, "code": d.code,
                         "time_us_per_step": d.device_time_us, "share": d.share, "forward_us": d.forward_us,
                         "backward_us": d.backward_us, "calls": d.calls, "confidence": d.confidence,
                         "top_op": d.ops[0].name if d.ops else None})
    return _frame(rows, HOTSPOT_COLUMNS)


def steps(run: CheckRun) -> pd.DataFrame:
    """One row per step (and device) with the time model's breakdown (docs/numbers.md), µs."""
    rows = []
    for job in run.jobs:
        profile = document.rel_path(job.profile.meta.path, run.cwd)
        for s in BreakdownView.of(profile_breakdown(job.profile)).steps:
            rows.append({"profile": profile, **s.as_dict()})
    return _frame(rows, STEP_COLUMNS)


def job_kernels(job: JobReport, cwd: Path, sites: Collection[int] | None = None) -> pd.DataFrame:
    """``kernels`` of one job; only the tasks attributed to ``sites`` (indexes into the attribution's
    sites) when given."""
    k = job.profile.kernels
    profile = document.rel_path(job.profile.meta.path, cwd)
    attribution = job.attribution
    sites_of = attribution.kernel_site if attribution is not None and attribution.heat.time_source is TimeSource.DEVICE \
        else np.full(len(k), -1, dtype=np.int64)
    paths = [document.rel_path(s.span.path, cwd) for s in attribution.sites] if attribution is not None else []
    lines = [s.span.line for s in attribution.sites] if attribution is not None else []
    in_step = np.zeros(len(k), dtype=bool)
    in_step[k.index.get_indexer(job.profile.kernels_in_steps().index)] = True
    if sites is not None:
        keep = np.isin(sites_of, np.fromiter(sites, dtype=np.int64))
        k, in_step, sites_of = k[keep], in_step[keep], sites_of[keep]
    return pd.DataFrame({
        "profile": profile,
        "name": k["name"].astype(str).to_numpy(),
        "type": k["type"].astype(str).to_numpy(),
        "core": k["core"].astype(str).to_numpy(),
        "step": k["step"].to_numpy(np.int64),
        "device": k["device"].to_numpy(np.int64),
        "stream": k["stream"].to_numpy(np.int64),
        "start_us": k["start_ns"].to_numpy(np.int64) / 1000,
        "duration_us": k["dur_ns"].to_numpy(np.int64) / 1000,
        "backward": k["backward"].to_numpy(bool),
        # a line's time and the report's device time count the work tasks (compute kernels and
        # memory copies; docs/numbers.md) inside the profiled steps
        "in_step": in_step,
        "work": work_mask(k),
        "path": [paths[i] if i >= 0 else None for i in sites_of],
        "line": pd.array([lines[i] if i >= 0 else None for i in sites_of], dtype="Int64"),
    }, columns=KERNEL_COLUMNS)


def kernels(run: CheckRun) -> pd.DataFrame:
    """One row per device task, with the source line it was attributed to (None: no line)."""
    frames = [job_kernels(job, run.cwd) for job in run.jobs if len(job.profile.kernels)]
    return pd.concat(frames, ignore_index=True) if frames else _frame([], KERNEL_COLUMNS)
