"""msprof CLI output: ``PROF_{6d}_{17d}_{16 letters}/``.

``mindstudio_profiler_output/`` holds the summaries (op_summary, op_statistic, api_statistic,
step_trace, communication_statistic) and ``msprof_<ts>.json``: the trace_view array without the
Python process and without torch flows (only CANN -> device ``HostToDevice`` links), so a bare
msprof result gives kernels but no source mapping.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

from .clock import Clock, StepTimeline
from .fmt import CsvOut, JsonArrayOut, ts_text, us_trim
from .run import Run
from .tables import (
    API_STATISTIC_HEADER,
    COMM_STATISTIC_HEADER,
    OP_STATISTIC_HEADER,
    KernelTable,
    Statistics,
    WaitClock,
    summary_kernels,
)
from .trace_events import TraceWriter
from .variant import TextVariant
from .write_text import stamp

OUTPUT = "mindstudio_profiler_output"
STEP_TRACE_HEADER = ("Device_id", "Iteration ID", "FP Start(us)", "BP End(us)", "Iteration End(us)",
                     "Iteration Time(us)", "FP to BP Time(us)", "Iteration Refresh(us)", "Data Aug Bound(us)",
                     "Model ID", "Reduce Start(us)", "Reduce Duration(us)")


def prof_name(run: Run) -> str:
    seed = zlib.crc32(f"{run.hostname}:{run.pid}:{run.rank}".encode())
    letters = ""
    for _ in range(16):
        seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
        letters += chr(ord("A") + seed % 26)
    return f"PROF_{run.rank + 1:06d}_{stamp(run.start_ns)}_{letters}"


def _step_trace_row(run: Run, tl: StepTimeline, prev_end: int | None) -> tuple[list[str], int] | None:
    ks = [k for k in tl.kernels]
    if not ks:
        return None
    fp = min(k.start_ns for k in ks)
    end = max(k.end_ns for k in ks)
    bwd = [k.end_ns for k in ks if k.backward and not k.spec.is_comm]
    bp = max(bwd) if bwd else end
    comm = [k for k in ks if k.spec.is_comm]
    it_time = end - (prev_end if prev_end is not None else fp)
    aug = fp - prev_end if prev_end is not None else 0
    row = [str(run.device), str(tl.number), ts_text(fp), ts_text(bp), ts_text(end), us_trim(it_time),
           us_trim(bp - fp), "0", us_trim(max(aug, 0)), "4294967295",
           ts_text(min(k.start_ns for k in comm)) if comm else "N/A",
           us_trim(sum(k.dur_ns for k in comm)) if comm else "N/A"]
    return row, end


def write_msprof_cli(run: Run, parent_dir: str | os.PathLike[str], *, newline: str = "\n",
                     step_trace: bool = True) -> Path:
    """Write the run as an msprof CLI result; return the ``PROF_*`` directory. ``step_trace=False``
    leaves out ``step_trace_*.csv``, as msprof does for an eager (PyTorch) job: it writes the
    iteration table in graph mode only, so such a result has no step markers at all."""
    root = Path(parent_dir) / prof_name(run)
    out = root / OUTPUT
    for d in (out, root / "host" / "data", root / f"device_{run.device}" / "data", root / "mindstudio_profiler_log"):
        d.mkdir(parents=True, exist_ok=True)
    ts = stamp(run.start_ns)[:14]
    table = KernelTable.op_summary(run)
    waits = WaitClock()
    stats = Statistics()
    trace = TraceWriter(run, TextVariant(), python=False)
    js = JsonArrayOut(out / f"msprof_{ts}.json")
    summary = CsvOut(out / f"op_summary_{ts}.csv", table.header, newline=newline)
    steps = CsvOut(out / f"step_trace_{ts}.csv", STEP_TRACE_HEADER, newline=newline) if step_trace else None
    prev_end: int | None = None
    end_ns = run.start_ns
    try:
        js.extend(trace.metadata())
        for tl in Clock(run).steps():
            end_ns = max(end_ns, tl.end_ns, *(k.end_ns for k in tl.kernels))
            js.extend(trace.step_events(tl))
            for k in summary_kernels(tl):
                summary.row(table.row(run, k, waits(k)))
            r = _step_trace_row(run, tl, prev_end) if steps is not None else None
            if steps is not None and r is not None:
                steps.row(r[0])
                prev_end = r[1]
            stats.add_step(tl, level0=False)
    finally:
        js.close()
        summary.close()
        if steps is not None:
            steps.close()
    for name, header, rows in ((f"op_statistic_{ts}.csv", OP_STATISTIC_HEADER, stats.op_rows(str(run.device))),
                               (f"api_statistic_{ts}.csv", API_STATISTIC_HEADER, stats.api_rows()),
                               (f"communication_statistic_{ts}.csv", COMM_STATISTIC_HEADER,
                                stats.comm_rows(str(run.device)))):
        if rows:
            with CsvOut(out / name, header, newline=newline) as f:
                for row in rows:
                    f.row(row)
    _write_info(run, root, end_ns)
    return root


def _write_info(run: Run, root: Path, end_ns: int) -> None:
    info = {
        "hostname": run.hostname,
        "pid": str(run.pid),
        "platform": "linux",
        "DeviceInfo": [{"id": run.device, "env_type": 3, "ai_core_num": 24, "aiv_num": 48,
                        "aic_frequency": "1800", "aiv_frequency": "1800", "hwts_frequency": "50"}],
        "ai_core_num": 24,
        "aiv_num": 48,
        "aic_frequency": "1800",
        "rank_id": run.rank,
    }
    with open(root / "host" / "info.json", "w", encoding="utf-8") as f:
        json.dump(info, f, indent=4)
    start = {"collectionTimeBegin": str(run.start_ns // 1000), "clockMonotonicRaw": str(run.start_ns % 10**16)}
    with open(root / "host" / "start_info", "w", encoding="utf-8") as f:
        json.dump(start, f)
    with open(root / f"device_{run.device}" / f"start_info.{run.device}", "w", encoding="utf-8") as f:
        json.dump(dict(start, collectionTimeEnd=str(end_ns // 1000)), f)
