"""Reader for the torch_npu.profiler text export (``*_ascend_pt``).

Accepts the ``*_ascend_pt`` root, its ``ASCEND_PROFILER_OUTPUT/`` directory, or a lone
``trace_view.json``. trace_view.json gives host ops, modules, kernels, flows and overlap slices
(:mod:`.npu_trace`); kernel_details.csv adds core type, shapes, formats, step and PMU columns to
the same kernels, joined by (name, start ns); the other CSV/JSON files go through the
readers in :mod:`.ascend_csv` / :mod:`.ascend_json`. Linking is :mod:`..linking`.

A directory without ``analyse.done`` is still being written: it loads what is readable, with
``meta.complete = False`` and an Issue, and a trace that cannot be read yet is an Issue too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.errors import Issue, ProfileError
from msprof_lsp.mapping.profile.frames import StackTable
from msprof_lsp.mapping.profile.linking import match_rows
from msprof_lsp.mapping.profile.locations import Layout, Progress, ProfileLocation, no_progress
from msprof_lsp.mapping.profile.model import (
    HOST_OP_SCHEMA,
    KERNEL_SCHEMA,
    Profile,
    ProfileKind,
    ProfileMeta,
    empty_table,
    make_table,
)
from msprof_lsp.mapping.profile.overlap import breakdown_from_overlap
from msprof_lsp.mapping.profile.step_infer import steps_from_launches
from msprof_lsp.mapping.profile.readers.assemble import attach_kernels, optional, read_into
from msprof_lsp.mapping.profile.readers.npu_trace import TraceTables, tables_from_trace
from msprof_lsp.mapping.profile.model import AICORE_FREQ_KEY
from msprof_lsp.mapping.profile.readers.protocol import (
    PROF_DIR_RE,
    Candidate,
    Folder,
    Held,
    RankFiles,
    Reader,
    SeenFile,
    as_rank,
    files_below,
    int_or_zero,
    is_file,
    mtime,
    mtime_path,
    own_layout,
    rank_from_names,
)
from msprof_lsp.mapping.profile.readers.trace_json import read_trace_events

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
TRACE = "trace_view.json"
DONE = "analyse.done"
TEXT_OUTPUTS = (TRACE, "kernel_details.csv", "operator_details.csv")
_LINK_COLUMNS = ("host_op", "stack", "fwd_op", "link", "backward")
_FILL_COLUMNS = ("stream", "task_id", "device", "core")
_ROOT_RE = re.compile(r"_ascend_(?:pt|ms)$")
_ROOT_TS_RE = re.compile(r"_(\d{17})_ascend_(?:pt|ms)$")
_INFO_RE = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
METADATA = "profiler_metadata.json"
DB_NAME_RE = re.compile(r"^ascend_pytorch_profiler(?:_(\d+))?\.db$")
"""The DB export's file name (``ascend_pytorch_profiler_<rank>.db``), read by :mod:`.torch_npu_db`."""


@dataclass(frozen=True, slots=True)
class NpuLayout(Layout):
    """Where the files of one torch_npu result are."""

    root: Path  # the *_ascend_pt directory (profiler_info*.json live here)
    output: Path | None  # ASCEND_PROFILER_OUTPUT; None for a lone trace file or a never-parsed root
    trace: Path | None  # trace_view.json if present
    infos: tuple[Path, ...] = ()  # the root's profiler_info*.json, sorted by name
    metadata: Path | None = None  # the root's profiler_metadata.json

    def out(self, name: str) -> Path | None:
        if self.output is None:
            return None
        p = self.output / name
        return p if p.is_file() else None


# ---------------------------------------------------------------------------------------------
# Recognising a result (the probes discovery runs; shared with the DB export's reader)


def is_run_root(folder: Folder) -> bool:
    """A ``*_ascend_pt`` / ``*_ascend_ms`` directory; a renamed one still has its profiler_info*.json."""
    return bool(_ROOT_RE.search(folder.path.name)) or any(_INFO_RE.match(e.name) for e in folder.entries)


def run_folders(folder: Folder) -> tuple[Folder, Folder] | None:
    """(root, output) of a run root or of its ASCEND_PROFILER_OUTPUT, or of a bare one (results
    copied out of their root: the output folder is its own root); None for any other folder."""
    if folder.path.name == OUTPUT_DIR and not is_run_root(folder):
        parent = folder.parent
        return (parent, folder) if is_run_root(parent) else (folder, folder)
    if is_run_root(folder):
        return folder, folder.sub(OUTPUT_DIR)
    return None


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What a run root's profiler_info*.json / profiler_metadata.json tell discovery."""

    rank: int | None
    mtimes: tuple[float, ...]
    infos: tuple[Path, ...]
    metadata: Path | None


def run_facts(root: Folder, bare: bool) -> RunFacts:
    if bare:  # a bare output's neighbours may belong to another run
        return RunFacts(None, (), (), None)
    rank: int | None = None
    mtimes: list[float] = []
    infos: list[Path] = []
    metadata = None
    for e in root.entries:
        m = _INFO_RE.match(e.name)
        if m and is_file(e):
            infos.append(Path(e.path))
            mtimes.append(mtime(e))
            if m.group(1) is not None:
                rank = as_rank(m.group(1))  # profiler_info_<30 digits>.json names no rank
            elif rank is None:
                rank = _rank_from_profiler_info(Path(e.path))
        elif e.name == METADATA and is_file(e):
            metadata = Path(e.path)
            mtimes.append(mtime(e))
    return RunFacts(rank, tuple(mtimes), tuple(sorted(infos, key=lambda p: p.name)), metadata)


def root_name_ts(root: Path) -> int:
    """The 17-digit timestamp torch_npu puts in a root's name (0 if none)."""
    return int_or_zero(_ROOT_TS_RE.search(root.name))


def has_text_outputs(output: Folder) -> bool:
    return any(output.entry(n) is not None for n in TEXT_OUTPUTS)


def _rank_from_profiler_info(path: Path) -> int | None:
    """``rank_id`` of a small profiler_info.json: string ``"0"`` or int ``0``; -1 = not distributed."""
    try:
        data = json.loads(safe_io.read_bytes(path, 1024 * 1024))
    except (ProfileError, ValueError, RecursionError):
        return None
    return as_rank(data.get("rank_id") if isinstance(data, dict) else None)


RAW_DIRS = frozenset({"FRAMEWORK", "logs"})
"""A result's raw framework data and parser logs: never a profile, often huge."""

LOOKS_FOR = f"*_ascend_pt / *_ascend_ms directories, {OUTPUT_DIR}, {TRACE}"


def bare_output(folder: Folder) -> Held | None:
    """A folder holding an ASCEND_PROFILER_OUTPUT (results copied out of their root): the output
    is the profile; it and the run's raw CANN ``PROF_*`` data beside it are not walked."""
    if not folder.has_dir(OUTPUT_DIR):
        return None
    return Held(folder.sub(OUTPUT_DIR), lambda name: name == OUTPUT_DIR or bool(PROF_DIR_RE.match(name)))


def enclosing(path: Path) -> tuple[Path, ...]:
    """A ``PROF_*`` folder the user named may be a result's raw CANN data: that result (its
    parent, or the parent's parent) is the profile."""
    return (path.parent, path.parent.parent) if PROF_DIR_RE.match(path.name) else ()


def run_root(location: ProfileLocation) -> Path:
    """The run's root: a DB or a lone trace_view.json inside ASCEND_PROFILER_OUTPUT belongs to the
    root above it; a root (or a bare output) is its own."""
    path = Path(location.path)
    return path.parent.parent if path.parent.name == OUTPUT_DIR else path


def inputs(location: ProfileLocation) -> list[Path]:
    """Every file of the result but its raw data (FRAMEWORK/, logs/, CANN's PROF_*/ and its
    mindstudio_profiler_log/: thousands of files; the export already holds what is read)."""
    return files_below(Path(location.path), _raw)


def _raw(name: str) -> bool:
    return name in RAW_DIRS or name == "mindstudio_profiler_log" or name.startswith("PROF_")


def probe_dir(folder: Folder) -> Candidate | None:
    """A run root or bare output with the text export (or with nothing parsed yet)."""
    found = run_folders(folder)
    if found is None:
        return None
    root, out = found
    bare = root is out
    if not has_text_outputs(out) and any(DB_NAME_RE.match(e.name) for e in out.entries):
        return None  # a DB-only export: the DB reader's
    facts = run_facts(root, bare)
    files = out.files()
    output = out.path if bare or root.has_dir(OUTPUT_DIR) else None
    trace = out.entry(TRACE)
    lay = NpuLayout(
        root=root.path,
        output=output,
        trace=Path(trace.path) if output is not None and trace is not None and is_file(trace) else None,
        infos=facts.infos,
        metadata=facts.metadata,
    )
    loc = ProfileLocation(
        kind=ProfileKind.TORCH_NPU,
        path=root.path,
        rank=facts.rank if facts.rank is not None else rank_from_names(root.path),
        mtime=max([*facts.mtimes, *(mtime(e) for e in files)], default=mtime_path(root.path)),
        complete=out.entry(DONE) is not None,
        layout=lay,
    )
    return Candidate(loc, bool(files), root_name_ts(root.path))


def probe_file(file: SeenFile) -> Candidate | None:
    """A lone ``trace_view.json``, or (named by the user) any JSON file holding an event array."""
    lower = file.name.lower()
    if file.name != TRACE:
        if not (file.explicit and lower.endswith(".json") and not lower.endswith(".pt.trace.json")):
            return None
        head, _ = file.head()
        if not head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
            return None
    lay = NpuLayout(root=file.path.parent, output=None, trace=file.path)
    loc = ProfileLocation(ProfileKind.TORCH_NPU, file.path, rank_from_names(file.path), mtime_path(file.path),
                          True, layout=lay)
    return Candidate(loc, True, 0)


def read(location: ProfileLocation, progress: Progress = no_progress) -> Profile:
    """Load and link one torch_npu text-export result."""
    lay = own_layout(location, READER, NpuLayout, f"is not a torch_npu result (no {OUTPUT_DIR}/, no {TRACE})")
    if lay.output is None and lay.trace is None:
        raise ProfileError(
            lay.root,
            f"has no {OUTPUT_DIR}/: torch_npu has not parsed this result yet (or it was exported as a DB only)",
        )
    meta = ProfileMeta(kind=ProfileKind.TORCH_NPU, path=str(location.path), rank=location.rank)
    issues: list[Issue] = []
    stacks = StackTable()
    profile = Profile(meta=meta)

    if lay.output is not None and not (lay.output / DONE).exists():
        meta.complete = False
        issues.append(Issue(str(lay.output), f"still being written (no {DONE}); loaded what is readable"))

    _read_meta(lay, meta, issues)
    tables = _read_trace_view(lay, meta, issues, stacks, progress)
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
    kernels = _join_kernel_details_csv(lay, meta, issues, kernels, trace_kernels=None if tables is None else tables.kernels)

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
    _require_data(lay, meta)
    if meta.rank is None:
        meta.rank = location.rank
    progress("Loaded", 1.0)
    return profile


def _read_trace_view(
    lay: NpuLayout, meta: ProfileMeta, issues: list[Issue], stacks: StackTable, progress: Progress
) -> TraceTables | None:
    """trace_view.json as linked tables; None when there is none, or (for a result still being
    written) when it does not read."""
    if lay.trace is None:
        return None

    def scaled(message: str, fraction: float | None) -> None:
        progress(message, None if fraction is None else 0.85 * fraction)

    try:
        events = read_trace_events(lay.trace, progress=scaled)
    except ProfileError as exc:
        if meta.complete:  # only a result still being written may lack a readable trace
            raise
        issues.append(Issue(exc.path, exc.message, exc.line))
        return None
    meta.files.append(str(lay.trace))
    issues.extend(events.issues)
    if not events.complete:
        meta.complete = False
    tables = tables_from_trace(events, stacks)
    del events  # the raw columns are not kept: only the linked tables
    issues.extend(tables.issues)
    meta.extra["trace_counts"] = dict(tables.counts)
    if tables.aicore_freq:
        meta.extra[AICORE_FREQ_KEY] = tables.aicore_freq
    return tables


def _join_kernel_details_csv(
    lay: NpuLayout, meta: ProfileMeta, issues: list[Issue], kernels: pd.DataFrame, *,
    trace_kernels: pd.DataFrame | None,
) -> pd.DataFrame:
    """kernel_details.csv joined into the trace's kernels (``trace_kernels``: None without a
    trace); a missing file is said unless the level records no kernels."""
    kd_path = lay.out("kernel_details.csv")
    if kd_path is None:
        if lay.output is not None and meta.level != "Level_none":
            # without trace_view.json either, there are no kernels at all: say that, not that
            # they come from a file that is not there
            what = ("kernel_details.csv missing: kernels come from trace_view.json only "
                    "(no core type, shapes, formats or PMU ratios)") if trace_kernels is not None else (
                    "no kernel table (kernel_details.csv and trace_view.json both absent): only the "
                    "step breakdown and communication of this rank are read")
            issues.append(Issue(str(lay.output), what))
        return kernels
    details = optional(kd_path, issues, _read_kernel_details)
    if details is None:
        return kernels
    meta.files.append(str(kd_path))
    kernels, matched = join_kernel_details(kernels, details)
    meta.extra["kernel_details_matched"] = matched
    if trace_kernels is not None and len(details) and len(trace_kernels) and not matched:
        issues.append(
            Issue(
                str(kd_path),
                "no kernel matches trace_view.json by (name, start time): the two files seem to "
                "come from different runs; kernels are kept from both, unlinked ones marked",
            )
        )
    return kernels


def _require_data(lay: NpuLayout, meta: ProfileMeta) -> None:
    """ProfileError when nothing but the metadata files could be read."""
    data_files = [f for f in meta.files if not Path(f).name.startswith(("profiler_info", "profiler_metadata"))]
    if not data_files:
        raise ProfileError(
            lay.output or lay.root,
            f"no readable profile data: neither {TRACE} nor any of the CSV/JSON outputs could be read"
            + ("" if meta.complete else f" (still being written: no {DONE})"),
        )


def _read_kernel_details(path: Path) -> tuple[pd.DataFrame, list[Issue]]:
    from msprof_lsp.mapping.profile.readers.ascend_csv import read_kernel_table

    table = read_kernel_table(path, producer="torch_npu")
    return table.to_frame(), table.issues


def join_kernel_details(trace_kernels: pd.DataFrame, details: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Merge kernel_details.csv rows into the trace kernels by (name, start ns).

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
        from msprof_lsp.mapping.profile.readers.ascend_csv import read_operator_details

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
    from msprof_lsp.mapping.profile.readers.ascend_json import read_profiler_info, read_profiler_metadata

    infos = lay.infos
    if infos:
        pick = infos[0]
        if meta.rank is not None:
            pick = next((p for p in infos if p.name == f"profiler_info_{meta.rank}.json"), pick)
        # (these two readers record the file in meta.files themselves)
        optional(pick, issues, lambda p: (None, read_profiler_info(p, meta)))
    md = lay.metadata
    if md is not None:
        optional(md, issues, lambda p: (None, read_profiler_metadata(p, meta)))


def _summary_files():  # noqa: ANN202 - (file name, reader, Profile attribute)
    from msprof_lsp.mapping.profile.readers import ascend_csv, ascend_json

    return (("step_trace_time.csv", ascend_csv.read_step_trace_time, "step_breakdown"),
            ("communication.json", ascend_json.read_communication, "comm_ops"),
            ("communication_matrix.json", ascend_json.read_communication_matrix, "comm_matrix"))


def _read_other_files(lay: NpuLayout, profile: Profile, issues: list[Issue]) -> None:
    if lay.output is None:
        return
    from msprof_lsp.mapping.profile.readers import ascend_csv

    others = (("op_statistic.csv", ascend_csv.read_op_statistic, "op_statistic"),
              ("api_statistic.csv", ascend_csv.read_api_statistic, "api_statistic"),
              ("operator_memory.csv", ascend_csv.read_operator_memory, "op_memory"),
              ("memory_record.csv", ascend_csv.read_memory_record, "memory_record"))
    for name, reader, attr in (*_summary_files(), *others):
        path = lay.out(name)
        if path is not None:
            read_into(profile, attr, path, reader, issues)


def read_summary(location: ProfileLocation) -> RankFiles | None:
    """The rank's cluster-view files only: profiler_info/metadata, step_trace_time.csv,
    communication.json and communication_matrix.json. None without a step_trace_time.csv that
    gives a step time (the rank is then loaded whole)."""
    lay = own_layout(location, READER, NpuLayout, f"is not a torch_npu result (no {OUTPUT_DIR}/, no {TRACE})")
    if lay.out("step_trace_time.csv") is None:
        return None
    meta = ProfileMeta(kind=ProfileKind.TORCH_NPU, path=str(location.path), rank=location.rank)
    issues: list[Issue] = []
    profile = Profile(meta=meta)
    _read_meta(lay, meta, issues)
    for name, reader, attr in _summary_files():
        path = lay.out(name)
        if path is not None:
            read_into(profile, attr, path, reader, issues)
    if not any(b.step_time_ns > 0 and not b.derived for b in profile.step_breakdown):
        return None
    profile.issues = issues
    if meta.rank is None:
        meta.rank = location.rank
    device = lay.trace is not None or lay.out("kernel_details.csv") is not None
    return RankFiles(profile, device, tuple(Path(f) for f in meta.files))


def _gate_on_meta(lay: NpuLayout, profile: Profile, issues: list[Issue]) -> None:
    """Notes for what the capture settings promise but the files lack (never for what they exclude).

    Level0 prunes CANN events and op/api statistics: their absence is normal then.
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


READER = Reader(
    ProfileKind.TORCH_NPU, read, probe_dir, probe_file, summary=read_summary, looks_for=LOOKS_FOR, watch=("**/*_ascend_pt/**",),
    holder=bare_output, enclosing=enclosing, raw_dirs=RAW_DIRS, inputs=inputs, run_root=run_root, detail=1,
)
