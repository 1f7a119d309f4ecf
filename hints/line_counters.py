"""The hardware counters per operator of each hot line: what the hover's counter table shows.

Computed once per analysis (the server keeps the result in its snapshot, next to the line heat),
from the kernels' PipeUtilization ratios (``profile_query.pipe_ratios``: per pipe the larger of
the cube and vector cores' ratio) and the kernel classes of the time model. One row per (line,
OpType, accelerator core, direction), as the line heat's operator rows are grouped; the ratios
are the plain mean over the row's kernels that carry counters, and the bound is the query layer's
one verdict (``profile_query.kernel_bounds``, what NPU202 and NPU206 read) of the row's kernel group
with the most time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from msprof_lsp.mapping.profile import timemodel
from msprof_lsp.mapping.profile.model import Profile
from msprof_lsp.mapping.source.heat import Attribution

from . import profile_query as pq
from .config import Thresholds

MAX_ROWS = 12  # per line, most time first


@dataclass(frozen=True, slots=True)
class OpCounters:
    """The counters of one operator row of a hot line."""

    type: str  # OpType
    name: str  # the kernel name with the most time
    core: str  # AI_CORE, AI_VECTOR_CORE, MIX_AIC, ...
    kernel_class: str  # Cube, Vector, MIX, FlashAttention, other
    backward: bool
    count: int  # kernels with counters over the capture
    total_ns: int  # their device time over the capture
    ratios: tuple[tuple[str, float], ...]  # (pipe, mean busy ratio in [0, 1]) in profile_query.PIPES order
    bound: str  # compute-bound, memory-bound, scalar-bound, no-bound


def line_counters(profile: Profile, attribution: Attribution, thresholds: Thresholds | None = None) -> dict[str, dict[int, list[OpCounters]]]:
    """Per path and analysed line: the operators with counters, most time first. Empty when the
    profile has no pipe counters (Level0, other ``aic_metrics`` sets). Computed once per
    attribution and thresholds, and kept with the profile (``profile.derived``)."""
    return profile.derived.memo("line_counters", (*profile.fields(), attribution, thresholds),
                                lambda: _line_counters(profile, attribution, thresholds))


def _line_counters(profile: Profile, attribution: Attribution, thresholds: Thresholds | None) -> dict[str, dict[int, list[OpCounters]]]:
    k = profile.kernels
    if not len(k) or not any(c.startswith("pmu:") for c in k.columns):
        return {}
    in_steps = pq.kernels_in_steps_mask(profile)
    site = attribution.kernel_site
    if len(site) != len(k):
        return {}
    ratios = pq.pipe_ratios(k)
    if ratios is None:
        return {}
    vals = ratios.to_numpy(np.float64)
    has = (vals > 0).any(axis=1) & in_steps & (site >= 0) & timemodel.is_class(k, timemodel.TaskClass.COMPUTE)
    rows = np.flatnonzero(has)
    if not len(rows):
        return {}
    # the verdicts of the rules' own table (the kernels in steps), so the groups average the same kernels
    verdicts = pq.kernel_bounds(k[in_steps], pq.BoundLimits.of(thresholds or Thresholds()))
    group = np.full(len(k), -1, dtype=np.int64)
    group[np.flatnonzero(in_steps)] = verdicts.group
    sites = attribution.sites
    paths = np.array([sites[i].span.path for i in site[rows].tolist()], dtype=object)
    lines = np.array([sites[i].span.line for i in site[rows].tolist()], dtype=np.int64)
    frame = pd.DataFrame({
        "path": paths, "line": lines, "type": pq.kernel_types(k.iloc[rows]), "core": pq.strs(k["core"])[rows],
        "backward": k["backward"].to_numpy(bool)[rows], "cls": timemodel.kernel_class_values(k.iloc[rows]),
        "name": pq.strs(k["name"])[rows], "dur": k["dur_ns"].to_numpy(np.int64)[rows],
        "group": group[rows],
    })
    pipes = list(ratios.columns)
    for i, p in enumerate(pipes):
        frame[p] = vals[rows, i]
    out: dict[str, dict[int, list[OpCounters]]] = {}
    for (path, line, t, core, bwd), g in frame.groupby(["path", "line", "type", "core", "backward"], sort=False):
        means = g[pipes].mean()
        lead = int(g.groupby("group", sort=False)["dur"].sum().idxmax())
        bound = verdicts.verdicts[lead].bound if lead >= 0 else pq.PipeBound.NO_DATA
        top = g.groupby("name", sort=False)["dur"].sum().idxmax()
        row = OpCounters(str(t), str(top), str(core), str(g["cls"].iloc[0]), bool(bwd), len(g), int(g["dur"].sum()),
                         tuple((p, round(float(means[p]), 3)) for p in pipes), bound.value)
        out.setdefault(str(path), {}).setdefault(int(line), []).append(row)
    for by_line in out.values():
        for line, ops in by_line.items():
            by_line[line] = sorted(ops, key=lambda o: -o.total_ns)[:MAX_ROWS]
    return out
