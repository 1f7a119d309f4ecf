"""Per-step time breakdown computed from ``Overlap Analysis`` slices (when step_trace_time.csv is absent).

torch_npu writes step_trace_time.csv from the same slices (formats §7); this recomputes its main
columns so a profile without the CSV still has step figures. Which slices belong to a step: those
starting inside the step's *device* span (first kernel start to last kernel end of the kernels
whose ``step`` is N on that device), or inside the host ProfilerStep range when the step has no
kernels there -- device work runs behind the host, so the host range alone would drop the tail.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .model import Step, StepBreakdown

COMPUTING = "Computing"
COMMUNICATION = "Communication"
NOT_OVERLAPPED = "Communication(Not Overlapped)"
FREE = "Free"


def breakdown_from_overlap(overlap: pd.DataFrame, steps: list[Step], kernels: pd.DataFrame) -> list[StepBreakdown]:
    """One StepBreakdown per (step, device); step -1 (whole capture) when there are no steps."""
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
    out: list[StepBreakdown] = []
    for dev in sorted(set(device.tolist())):
        on_dev = device == dev
        ranges: list[tuple[int, int, int, int]] = []  # step, lo, hi, preparing
        if steps:
            for s in steps:
                mine = (k_step == s.id) & ((k_dev == dev) | (k_dev < 0) | (dev < 0))
                if mine.any():
                    lo, hi = int(k_start[mine].min()), int(k_end[mine].max())
                    ranges.append((s.id, lo, hi + 1, lo - s.start_ns))
                else:
                    ranges.append((s.id, s.start_ns, s.end_ns, -1))
        else:
            ranges.append((-1, np.iinfo(np.int64).min, np.iinfo(np.int64).max, -1))
        for step_id, lo, hi, preparing in ranges:
            inside = on_dev & (start >= lo) & (start < hi)

            def total(name: str) -> int:
                return int(dur[inside & (lane == name)].sum())

            comm, not_ov = total(COMMUNICATION), total(NOT_OVERLAPPED)
            out.append(
                StepBreakdown(
                    step=step_id,
                    device=dev,
                    computing_ns=total(COMPUTING),
                    comm_not_overlapped_ns=not_ov,
                    overlapped_ns=comm - not_ov,
                    comm_ns=comm,
                    free_ns=total(FREE),
                    preparing_ns=preparing,
                )
            )
    return out
