"""torch_npu.profiler text export: ``{worker}_{YYYYmmddHHMMSSmmm}_ascend_pt/``.

Streams: every file is written while the steps are laid out one at a time; only the small
aggregates (statistics, communication entries) are kept until the end.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path

from .clock import Clock
from .fmt import CsvOut, JsonArrayOut
from .overlap import step_overlap
from .run import Run
from .tables import (
    API_STATISTIC_HEADER,
    OP_STATISTIC_HEADER,
    OPERATOR_DETAILS_HEADER,
    STEP_TRACE_HEADER,
    KernelTable,
    Statistics,
    WaitClock,
    communication_matrix_step,
    communication_step,
    operator_rows,
    step_trace_row,
    summary_kernels,
)
from .trace_events import TraceWriter
from .variant import TextVariant

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"


def stamp(ns: int, digits: int = 17) -> str:
    """Epoch ns -> ``YYYYmmddHHMMSSmmm`` (UTC, so outputs do not depend on the machine)."""
    t = _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.timezone.utc)
    return t.strftime("%Y%m%d%H%M%S") + f"{(ns // 1_000_000) % 1000:03d}"[: digits - 14]


def root_name(run: Run) -> str:
    return f"{run.worker_name}_{stamp(run.start_ns)}_ascend_pt"


def profiler_info(run: Run, *, end_ns: int, rank_id_string: bool = False) -> dict:
    cfg = run.config
    return {
        "config": {
            "common_config": {
                "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                "schedule": dict(cfg.schedule),
                "record_shapes": cfg.record_shapes,
                "profile_memory": cfg.profile_memory,
                "with_stack": cfg.with_stack,
                "with_flops": cfg.with_flops,
                "with_modules": cfg.with_modules,
            },
            "experimental_config": {
                "_profiler_level": cfg.level,
                "_aic_metrics": cfg.aic_metrics,
                "_l2_cache": False,
                "_msprof_tx": False,
                "_mstx": False,
                "_data_simplification": cfg.data_simplification,
                "record_op_args": False,
                "_export_type": list(cfg.export_type),
                "_host_sys": [],
                "_op_attr": False,
                "_gc_detect_threshold": cfg.gc_detect_threshold,
                "_mstx_domain_include": [],
                "_mstx_domain_exclude": [],
                "_sys_io": False,
                "_sys_interconnection": False,
            },
        },
        "start_info": {
            "syscnt_enable": True,
            "freq": 100,
            "start_cnt": run.start_ns // 10 % 10**16,
            "start_monotonic": run.start_ns % 10**16,
        },
        "end_info": {"collectionTimeEnd": end_ns, "MonotonicTimeEnd": end_ns % 10**16},
        "torch_npu_version": run.torch_npu_version,
        "cann_version": run.cann_version,
        "rank_id": str(run.rank) if rank_id_string else run.rank,
    }


def profiler_metadata(run: Run) -> dict:
    groups = run.parallel_groups or {
        "group_name_0": {"group_name": "default_group", "group_rank": run.rank,
                         "global_ranks": list(range(run.world_size))}}
    out = {"ENV_VARIABLES": dict(run.env), "parallel_group_info": groups}
    out.update(run.user_metadata)
    return out


def write_root_files(run: Run, root: Path, *, end_ns: int, variant: TextVariant) -> None:
    """profiler_info_{rank}.json (indent 4, as torch_npu) and profiler_metadata.json (compact)."""
    if "profiler_info.json" not in variant.omit:
        name = f"profiler_info_{run.rank}.json" if variant.info_file_rank else "profiler_info.json"
        with open(root / name, "w", encoding="utf-8") as f:
            json.dump(profiler_info(run, end_ns=end_ns, rank_id_string=variant.rank_id_string), f, indent=4)
    if "profiler_metadata.json" not in variant.omit:
        with open(root / "profiler_metadata.json", "w", encoding="utf-8") as f:
            json.dump(profiler_metadata(run), f, ensure_ascii=False)


class _Files:
    """The open incremental outputs of one export."""

    def __init__(self, run: Run, out: Path, variant: TextVariant) -> None:
        self.run = run
        self.v = variant
        want = lambda name: name not in variant.omit  # noqa: E731
        level_none = run.config.level == "Level_none"
        nl = variant.newline
        enc = variant.csv_encoding
        self.trace = JsonArrayOut(out / "trace_view.json") if want("trace_view.json") else None
        self.kt = KernelTable.kernel_details(run, variant)
        self.kernels = (CsvOut(out / "kernel_details.csv", self.kt.header, newline=nl, encoding=enc)
                        if want("kernel_details.csv") and not level_none else None)
        self.operators = (CsvOut(out / "operator_details.csv", OPERATOR_DETAILS_HEADER, newline=nl, encoding=enc)
                          if want("operator_details.csv") else None)
        self.step_trace = (CsvOut(out / "step_trace_time.csv", STEP_TRACE_HEADER, newline=nl, encoding=enc)
                           if want("step_trace_time.csv") and not level_none else None)
        self.waits = WaitClock()
        self.stats = Statistics()
        self.comm: dict[str, dict] = {}
        self.matrix: dict[str, dict] = {}

    def close(self) -> None:
        if self.trace is not None:
            self.trace.close()
        for f in (self.kernels, self.operators, self.step_trace):
            if f is not None:
                f.close()
                if f.rows == 0:  # torch_npu writes no CSV without data rows
                    f.path.unlink()


def write_torch_npu_text(run: Run, parent_dir: str | os.PathLike[str], *, variant: TextVariant | None = None) -> Path:
    """Write the run as a torch_npu text export under ``parent_dir``; return the ``*_ascend_pt`` root."""
    v = variant or TextVariant()
    root = Path(parent_dir) / root_name(run)
    out = root / OUTPUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    files = _Files(run, out, v)
    tw = TraceWriter(run, v)
    device_cell = str(run.device) if v.device_label == "id" else "-1"
    end_ns = run.start_ns
    try:
        if files.trace is not None:
            files.trace.extend(tw.metadata())
        for tl in Clock(run).steps():
            end_ns = max(end_ns, tl.end_ns, *(k.end_ns for k in tl.kernels))
            if files.trace is not None:
                files.trace.extend(tw.step_events(tl))
            if files.kernels is not None:
                for k in summary_kernels(tl):
                    files.kernels.row(files.kt.row(run, k, files.waits(k)))
            if files.operators is not None:
                for row in operator_rows(run, tl, aicore_counts=v.task_type == "core", frame_space=v.frame_space):
                    files.operators.row(row)
            if files.step_trace is not None and tl.kernels:
                files.step_trace.row(step_trace_row(run, step_overlap(tl), device_cell=device_cell))
            files.stats.add_step(tl, level0=run.level0)
            if not run.level0 and run.world_size > 1:
                c = communication_step(run, tl)
                if c is not None:
                    files.comm[f"step{tl.number}"] = c
                m = communication_matrix_step(run, tl)
                if m is not None:
                    files.matrix[f"step{tl.number}"] = m
    finally:
        files.close()
    _write_statistics(run, out, v, files.stats)
    if files.comm and "communication.json" not in v.omit:
        with open(out / "communication.json", "w", encoding="utf-8") as f:
            json.dump(files.comm, f)
    if files.matrix and "communication_matrix.json" not in v.omit:
        with open(out / "communication_matrix.json", "w", encoding="utf-8") as f:
            json.dump(files.matrix, f)
    write_root_files(run, root, end_ns=end_ns, variant=v)
    if v.truncate_trace_bytes is not None and files.trace is not None:
        with open(out / "trace_view.json", "r+b") as f:
            f.truncate(v.truncate_trace_bytes)
    if v.analyse_done:
        (out / "analyse.done").touch()
    return root


def _write_statistics(run: Run, out: Path, v: TextVariant, stats: Statistics) -> None:
    """op_statistic.csv / api_statistic.csv: Level1+ only; a table without rows is not written."""
    if run.level0:
        return
    rows = stats.op_rows(str(run.device))
    if rows and "op_statistic.csv" not in v.omit:
        with CsvOut(out / "op_statistic.csv", OP_STATISTIC_HEADER, newline=v.newline, encoding=v.csv_encoding) as f:
            for r in rows:
                f.row(r)
    rows = stats.api_rows()
    if rows and "api_statistic.csv" not in v.omit:
        with CsvOut(out / "api_statistic.csv", API_STATISTIC_HEADER, newline=v.newline, encoding=v.csv_encoding) as f:
            for r in rows:
                f.row(r)
