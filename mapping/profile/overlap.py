"""Per-step time breakdown computed from ``Overlap Analysis`` slices (when step_trace_time.csv is absent).

torch_npu writes step_trace_time.csv from the same slices; this recomputes its main
columns so a profile without the CSV still has step figures. Which slices belong to a step: those
starting inside the step's *device* span (first kernel start to last kernel end of the kernels
whose ``step`` is N on that device), or inside the host ProfilerStep range when the step has no
kernels there -- device work runs behind the host, so the host range alone would drop the tail.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from msprof_lsp.mapping.profile.model import Step, StepBreakdown

COMPUTING = "Computing"
COMMUNICATION = "Communication"
NOT_OVERLAPPED = "Communication(Not Overlapped)"
FREE = "Free"


def breakdown_from_overlap(overlap: pd.DataFrame, steps: list[Step], kernels: pd.DataFrame, *,
                           preparing: bool = True) -> list[StepBreakdown]:
    """One StepBreakdown per (step, device); step -1 (whole capture) when there are no steps.
    ``preparing=False`` leaves Preparing unknown (-1), so the time model takes it from the tasks'
    launches (the DB readers: there it equals analysis.db's Preparing, this span's does not)."""
    if not len(overlap):
        return []
    lane = overlap["lane"].astype(str).to_numpy()
    start = overlap["start_ns"].to_numpy(dtype=np.int64)
    dur = overlap["dur_ns"].to_numpy(dtype=np.int64)
    device = overlap["device"].to_numpy(dtype=np.int64)
    k_start = kernels["start_ns"].to_numpy(dtype=np.int64)
    k_end = k_start + kernels["dur_ns"].to_numpy(dtype=np.int64)
    k_step = kernels["step"].to_numpy(dtype=np.int64)
    k_dev = kernels["device"].to_numpy(dtype=np.int64)
    lanes = (COMPUTING, COMMUNICATION, NOT_OVERLAPPED, FREE)
    lane_id = np.full(len(lane), -1, dtype=np.int64)
    for i, name in enumerate(lanes):
        lane_id[lane == name] = i
    big = np.iinfo(np.int64).max
    out: list[StepBreakdown] = []
    for dev in sorted(set(device.tolist())):
        # step ranges on this device: the span of its kernels of step N, else the host range
        ids = np.array([s.id for s in steps], dtype=np.int64)
        lo = np.array([s.start_ns for s in steps], dtype=np.int64)
        hi = np.array([s.end_ns for s in steps], dtype=np.int64)
        before = np.full(len(steps), -1, dtype=np.int64)
        if len(steps):
            mine = (k_step >= 0) & ((k_dev == dev) | (k_dev < 0) | (dev < 0))
            spans = (
                pd.DataFrame({"step": k_step[mine], "lo": k_start[mine], "hi": k_end[mine]})
                .groupby("step")
                .agg(lo=("lo", "min"), hi=("hi", "max"))
            )
            pos = pd.Index(ids).get_indexer(spans.index)
            ok = pos >= 0
            host_lo = lo.copy()
            lo[pos[ok]] = spans["lo"].to_numpy()[ok]
            hi[pos[ok]] = spans["hi"].to_numpy()[ok] + 1
            before[pos[ok]] = lo[pos[ok]] - host_lo[pos[ok]]
        else:
            ids, lo, hi = np.array([-1]), np.array([np.iinfo(np.int64).min]), np.array([big])
            before = np.array([-1])
        order = np.argsort(lo, kind="stable")
        sel = np.flatnonzero((device == dev) & (lane_id >= 0))
        # a slice belongs to the last range that starts at or before it, if it is still open
        r = np.searchsorted(lo[order], start[sel], side="right") - 1
        inside = (r >= 0) & (start[sel] < hi[order][np.maximum(r, 0)])
        bins = order[r[inside]] * len(lanes) + lane_id[sel][inside]
        sums = np.bincount(bins, weights=dur[sel][inside], minlength=len(ids) * len(lanes))
        sums = np.rint(sums).astype(np.int64).reshape(len(ids), len(lanes))
        for i in range(len(ids)):
            computing, comm, not_ov, free = (int(v) for v in sums[i])
            out.append(
                StepBreakdown(
                    step=int(ids[i]),
                    device=dev,
                    computing_ns=computing,
                    comm_not_overlapped_ns=not_ov,
                    overlapped_ns=comm - not_ov,
                    comm_ns=comm,
                    free_ns=free,
                    preparing_ns=int(before[i]) if preparing else -1,
                    derived=True,
                )
            )
    return out
