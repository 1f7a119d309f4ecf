"""Reader for the torch_npu.profiler text export (``*_ascend_pt``, formats §2-§10).

Accepts the ``*_ascend_pt`` root, its ``ASCEND_PROFILER_OUTPUT/`` directory, or a lone
``trace_view.json``. trace_view.json gives host ops, modules, kernels, flows and overlap slices
(:mod:`.npu_trace`); kernel_details.csv adds core type, shapes, formats, step and PMU columns to
the same kernels, joined by (name, start ns) (§10.4); the other CSV/JSON files go through the
readers in :mod:`.ascend_csv` / :mod:`.ascend_json`. Linking is :mod:`..linking`.

A directory without ``analyse.done`` is still being written: it loads what is readable, with
``meta.complete = False`` and an Issue, and a trace that cannot be read yet is an Issue too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import Issue, ProfileError
from ..frames import StackTable
from ..linking import match_rows
from ..locations import Progress, ProfileLocation, no_progress
from ..model import (
    HOST_OP_SCHEMA,
    KERNEL_SCHEMA,
    Profile,
    ProfileKind,
    ProfileMeta,
    empty_table,
    make_table,
)
from ..overlap import breakdown_from_overlap
from ..step_infer import steps_from_launches
from .assemble import attach_kernels, optional, read_into
from .npu_trace import tables_from_trace
from .trace_json import read_trace_events

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
TRACE = "trace_view.json"
DONE = "analyse.done"
_LINK_COLUMNS = ("host_op", "stack", "fwd_op", "link", "backward")
_FILL_COLUMNS = ("stream", "task_id", "device", "core")
_INFO_RE = re.compile(r"^profiler_info(_\d+)?\.json$")


@dataclass(frozen=True, slots=True)
class NpuLayout:
    """Where the files of one torch_npu result are."""

    root: Path  # the *_ascend_pt directory (profiler_info*.json live here)
    output: Path | None  # ASCEND_PROFILER_OUTPUT; None for a lone trace file
    trace: Path | None  # trace_view.json if present

    def out(self, name: str) -> Path | None:
        if self.output is None:
            return None
        p = self.output / name
        return p if p.is_file() else None


def layout(path: Path) -> NpuLayout:
    """Resolve the three accepted forms to a layout; ProfileError when none fits."""
    path = Path(path)
    if path.is_file():
        return NpuLayout(root=path.parent, output=None, trace=path)
    if not path.is_dir():
        raise ProfileError(path, "does not exist")
    if path.name == OUTPUT_DIR or (not (path / OUTPUT_DIR).is_dir() and _has_outputs(path)):
        output = path
        root = path.parent if _info_files(path.parent) else path
    else:
        output = path / OUTPUT_DIR
        root = path
        if not output.is_dir():
            raise ProfileError(
                path,
                f"has no {OUTPUT_DIR}/: torch_npu has not parsed this result yet (or it was exported as "
                "a DB only)",
            )
    trace = output / TRACE
    return NpuLayout(root=root, output=output, trace=trace if trace.is_file() else None)


def _has_outputs(path: Path) -> bool:
    return any((path / n).is_file() for n in (TRACE, "kernel_details.csv", "operator_details.csv", DONE))


def _info_files(root: Path) -> list[Path]:
    try:
        return sorted(p for p in root.iterdir() if _INFO_RE.match(p.name) and p.is_file())
    except OSError:
        return []


def read(location: ProfileLocation, progress: Progress = no_progress) -> Profile:
    """Load and link one torch_npu text-export result."""
    lay = layout(location.path)
    meta = ProfileMeta(kind=ProfileKind.TORCH_NPU, path=str(location.path), rank=location.rank)
    issues: list[Issue] = []
    stacks = StackTable()
    profile = Profile(meta=meta)

    if lay.output is not None and not (lay.output / DONE).exists():
        meta.complete = False
        issues.append(Issue(str(lay.output), f"still being written (no {DONE}); loaded what is readable"))

    _read_meta(lay, meta, issues)

    # -- trace_view.json ---------------------------------------------------------------------------
    tables = None
    if lay.trace is not None:
        def scaled(message: str, fraction: float | None) -> None:
            progress(message, None if fraction is None else 0.85 * fraction)

        try:
            events = read_trace_events(lay.trace, progress=scaled)
        except ProfileError as exc:
            if meta.complete:  # only a result still being written may lack a readable trace
                raise
            issues.append(Issue(exc.path, exc.message, exc.line))
            events = None
        if events is not None:
            meta.files.append(str(lay.trace))
            issues.extend(events.issues)
            if not events.complete:
                meta.complete = False
            tables = tables_from_trace(events, stacks)
            del events  # the raw columns are not kept: only the linked tables
            issues.extend(tables.issues)
            meta.extra["trace_counts"] = dict(tables.counts)
    progress("Linking", 0.9)

    if tables is not None:
        profile.host_ops = tables.host_ops
        profile.modules = tables.modules
        profile.host_events = tables.host_events
        profile.overlap = tables.overlap
        profile.steps = tables.steps
        kernels = tables.kernels
    else:
        kernels = empty_table(KERNEL_SCHEMA)
        _host_ops_without_trace(lay, profile, stacks, issues, meta)

    # -- kernel_details.csv ----------------------------------------------------------------------
    kd_path = lay.out("kernel_details.csv")
    if kd_path is not None:
        details = optional(kd_path, issues, _read_kernel_details)
        if details is not None:
            meta.files.append(str(kd_path))
            kernels, matched = join_kernel_details(kernels, details)
            meta.extra["kernel_details_matched"] = matched
            if tables is not None and len(details) and len(tables.kernels) and not matched:
                issues.append(
                    Issue(
                        str(kd_path),
                        "no kernel matches trace_view.json by (name, start time): the two files seem to "
                        "come from different runs; kernels are kept from both, unlinked ones marked",
                    )
                )
    elif lay.output is not None and meta.level != "Level_none":
        issues.append(
            Issue(
                str(lay.output),
                "kernel_details.csv missing: kernels come from trace_view.json only "
                "(no core type, shapes, formats or PMU ratios)",
            )
        )

    if not profile.steps and not (kernels["step"].to_numpy() >= 0).any():
        profile.steps = steps_from_launches(kernels, meta, issues, host=(profile.host_ops, profile.host_events))
    attach_kernels(profile, kernels)

    # -- the other files ---------------------------------------------------------------------------
    _read_other_files(lay, profile, issues)
    if not profile.step_breakdown and len(profile.overlap):
        profile.step_breakdown = breakdown_from_overlap(profile.overlap, profile.steps, profile.kernels)

    profile.stacks = stacks.stacks
    _gate_on_meta(lay, profile, issues)
    profile.issues = issues
    data_files = [f for f in meta.files if not Path(f).name.startswith(("profiler_info", "profiler_metadata"))]
    if not data_files:
        raise ProfileError(
            lay.output or lay.root,
            f"no readable profile data: neither {TRACE} nor any of the CSV/JSON outputs could be read"
            + ("" if meta.complete else f" (still being written: no {DONE})"),
        )
    if meta.rank is None:
        meta.rank = location.rank
    progress("Loaded", 1.0)
    return profile


def _read_kernel_details(path: Path) -> tuple[pd.DataFrame, list[Issue]]:
    from .ascend_csv import read_kernel_table

    table = read_kernel_table(path, producer="torch_npu")
    return table.to_frame(), table.issues


def join_kernel_details(trace_kernels: pd.DataFrame, details: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Merge kernel_details.csv rows into the trace kernels by (name, start ns) (formats §10.4).

    Matched kernels take every kernel_details column (core, type, shapes, formats, step, PMU) and
    keep the trace's links; stream/task/device fill in from the trace where the CSV lacks them.
    Kernels only in the trace and rows only in the CSV are both kept. Returns (table, matched).
    """
    t_name = trace_kernels["name"].astype(str).to_numpy(dtype=object)
    t_start = trace_kernels["start_ns"].to_numpy(dtype=np.int64)
    d_name = details["name"].astype(str).to_numpy(dtype=object)
    d_start = details["start_ns"].to_numpy(dtype=np.int64)
    row = match_rows((d_name, d_start), (t_name, t_start))
    matched = row >= 0
    only_trace = np.flatnonzero(~matched)
    nd = len(details)
    columns: dict[str, np.ndarray] = {}
    at = np.flatnonzero(matched)
    for col, (kind, default) in KERNEL_SCHEMA.items():
        text = kind in ("cat", "str")
        d = details[col].to_numpy(dtype=object if text else None)
        t = trace_kernels[col].to_numpy(dtype=object if text else None)
        merged = d.copy()
        if col in _LINK_COLUMNS:
            merged[:] = default
            merged[row[at]] = t[at]
        elif col in _FILL_COLUMNS:
            empty = d[row[at]] == (default if text else -1)
            merged[row[at[empty]]] = t[at[empty]]
        columns[col] = np.concatenate([merged, t[only_trace]])
    for col in details.columns:
        if col.startswith("pmu:"):
            values = details[col].to_numpy(dtype=np.float64)
            columns[col] = np.concatenate([values, np.full(len(only_trace), np.nan)])
    table = make_table(KERNEL_SCHEMA, columns, nd + len(only_trace))
    table = table.sort_values("start_ns", kind="stable").reset_index(drop=True)
    return table, int(matched.sum())


def _host_ops_without_trace(
    lay: NpuLayout, profile: Profile, stacks: StackTable, issues: list[Issue], meta: ProfileMeta
) -> None:
    path = lay.out("operator_details.csv")
    if path is None:
        return

    def read_ops(p: Path) -> tuple[pd.DataFrame, list[Issue]]:
        from .ascend_csv import read_operator_details

        return read_operator_details(p, stacks)

    ops = optional(path, issues, read_ops)
    if ops is None:
        return
    meta.files.append(str(path))
    profile.host_ops = ops if set(HOST_OP_SCHEMA) <= set(ops.columns) else make_table(HOST_OP_SCHEMA, {}, 0)
    issues.append(
        Issue(
            str(path),
            f"no {TRACE}: host ops come from operator_details.csv without timestamps, so kernels "
            "cannot be linked to the ops that launched them",
        )
    )


def _read_meta(lay: NpuLayout, meta: ProfileMeta, issues: list[Issue]) -> None:
    if lay.output is None:
        return  # a lone trace file: its neighbours may belong to another run
    from .ascend_json import read_profiler_info, read_profiler_metadata

    infos = _info_files(lay.root)
    if infos:
        pick = infos[0]
        if meta.rank is not None:
            pick = next((p for p in infos if p.name == f"profiler_info_{meta.rank}.json"), pick)
        # (these two readers record the file in meta.files themselves)
        optional(pick, issues, lambda p: (None, read_profiler_info(p, meta)))
    md = lay.root / "profiler_metadata.json"
    if md.is_file():
        optional(md, issues, lambda p: (None, read_profiler_metadata(p, meta)))


def _read_other_files(lay: NpuLayout, profile: Profile, issues: list[Issue]) -> None:
    if lay.output is None:
        return
    from . import ascend_csv, ascend_json

    def simple(name: str, reader, attr: str) -> None:  # noqa: ANN001
        path = lay.out(name)
        if path is not None:
            read_into(profile, attr, path, reader, issues)

    simple("step_trace_time.csv", ascend_csv.read_step_trace_time, "step_breakdown")
    simple("op_statistic.csv", ascend_csv.read_op_statistic, "op_statistic")
    simple("api_statistic.csv", ascend_csv.read_api_statistic, "api_statistic")
    simple("communication.json", ascend_json.read_communication, "comm_ops")
    simple("communication_matrix.json", ascend_json.read_communication_matrix, "comm_matrix")
    simple("operator_memory.csv", ascend_csv.read_operator_memory, "op_memory")
    simple("memory_record.csv", ascend_csv.read_memory_record, "memory_record")


def _gate_on_meta(lay: NpuLayout, profile: Profile, issues: list[Issue]) -> None:
    """Notes for what the capture settings promise but the files lack (never for what they exclude).

    Level0 prunes CANN events and op/api statistics (§4): their absence is normal then.
    """
    meta = profile.meta
    if meta.with_stack and len(profile.host_ops) and not profile.stacks and lay.trace is not None:
        issues.append(
            Issue(
                str(lay.trace),
                "profiler_info says with_stack=True but no cpu_op carries a 'Call stack': "
                "kernels are mapped by op and module names only",
            )
        )
    if meta.record_shapes and len(profile.host_ops):
        dims = profile.host_ops["input_dims"].to_numpy(dtype=object)
        if not any(d for d in dims[:10000]):
            issues.append(
                Issue(
                    str(lay.trace or lay.root),
                    "profiler_info says record_shapes=True but no op carries 'Input Dims'",
                )
            )
