"""msprof CLI output: a ``PROF_*`` directory.

Layouts read:

* current: ``mindstudio_profiler_output/<name>_<ts>.csv|json`` (and ``<name>_slice_<n>_<ts>``
  parts of one export) for op_summary, op_statistic, api_statistic, step_trace,
  communication_statistic, memory files and ``msprof_*.json``;
* CANN 7.0.x: ``device_{id}/summary/op_summary_{dev}_{model}[_{iter}]_{ts}.csv`` and
  ``device_{id}/timeline/msprof_*.json`` per device (6.3.RC2: no ``_{ts}`` in the names);
* ``--type=db`` only: ``msprof_*.db`` with the CANN tables (read by :mod:`.cann_db`).

When a name occurs with several timestamps (re-exports), the newest is read, with all its slices.
msprof has no Python layer: kernels keep link ``none`` but carry everything the no-stack
anchoring needs (name, OpType, core, shapes, PMU); ``msprof_*.json`` adds the CANN API events and,
where present, the Overlap Analysis lanes.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.errors import Issue, ProfileError
from msprof_lsp.mapping.numbers import int64_of
from msprof_lsp.mapping.profile.frames import StackTable
from msprof_lsp.mapping.profile.linking import resolve_kernel_links
from msprof_lsp.mapping.profile.locations import Layout, ProfileLocation, Progress, no_progress
from msprof_lsp.mapping.profile.model import (
    HOST_EVENT_SCHEMA,
    KERNEL_SCHEMA,
    OVERLAP_SCHEMA,
    Backend,
    Profile,
    ProfileKind,
    ProfileMeta,
    Step,
    empty_table,
    make_table,
)
from msprof_lsp.mapping.profile.overlap import breakdown_from_overlap
from msprof_lsp.mapping.profile.step_infer import steps_from_launches
from msprof_lsp.mapping.profile.readers import ascend_csv, ascend_json
from msprof_lsp.mapping.profile.readers.cann_db import read_cann
from msprof_lsp.mapping.profile.readers.assemble import attach_kernels, optional, read_into
from msprof_lsp.mapping.profile.readers.npu_trace import tables_from_trace
from msprof_lsp.mapping.profile.model import AICORE_FREQ_KEY
from msprof_lsp.mapping.profile.readers.protocol import (
    PROF_DIR_RE,
    Candidate,
    Folder,
    Listings,
    Reader,
    SeenFile,
    as_rank,
    files_below,
    int_or_zero,
    is_file,
    is_dir,
    mtime,
    mtime_path,
    rank_from_names,
)
from msprof_lsp.mapping.profile.readers.sqlite_db import SqliteDb
from msprof_lsp.mapping.profile.readers.torch_npu import join_kernel_details
from msprof_lsp.mapping.profile.readers.trace_json import read_trace_events

OUTPUT = "mindstudio_profiler_output"
_FILE_RE = re.compile(
    r"^(?P<base>[a-z][a-z_]*?)(?:_slice_(?P<slice>\d+))?(?P<nums>(?:_\d+)*)\.(?P<ext>csv|json)$"
)
DB_RE = re.compile(r"^msprof_(\d{1,20})\.db$")
_PROF_TS_RE = re.compile(r"^PROF_\d+_(\d{17})_")
_DEVICE_RE = re.compile(r"^device_(\d+)$")
STAMP_DIGITS = 12
"""A trailing number this long is an export timestamp (YYYYmmddHHMMSS...), not a device/model id."""

EXPORT_HINT = "export it first: msprof --export=on --output=<this PROF_* directory>"


@dataclass(slots=True)
class MsprofLayout(Layout):
    """The files of one PROF_* directory that the reader uses, newest export of each name."""

    root: Path
    files: dict[str, list[tuple[Path, int]]] = field(default_factory=dict)  # base -> [(path, device)]
    info: Path | None = None
    db: Path | None = None
    analyze: Path | None = None
    devices: list[int] = field(default_factory=list)
    style: str = ""  # current | cann7 | db | raw

    def get(self, base: str) -> list[tuple[Path, int]]:
        return self.files.get(base, [])


def _stamp(nums: str) -> int:
    parts = [p for p in nums.split("_") if p]
    return int(parts[-1]) if parts and len(parts[-1]) >= STAMP_DIGITS else 0


def newest_exports(paths: list[Path]) -> dict[str, list[Path]]:
    """Group files by name (without slice/ids/timestamp) and keep the newest timestamp's files.

    ``op_summary_slice_0_<ts>.csv`` and ``op_summary_slice_1_<ts>.csv`` are parts of one export;
    ``op_summary_<older ts>.csv`` beside them is an earlier export and is dropped.
    """
    groups: dict[str, list[tuple[int, Path]]] = {}
    for p in paths:
        m = _FILE_RE.match(p.name)
        if not m:
            continue
        groups.setdefault(m.group("base"), []).append((_stamp(m.group("nums")), p))
    out: dict[str, list[Path]] = {}
    for base, items in groups.items():
        newest = max(ts for ts, _ in items)
        out[base] = sorted(p for ts, p in items if ts == newest)
    return out


def _layout_of(root: Folder) -> MsprofLayout:
    """The files of one PROF_* directory, from the pass's listings (each folder listed once)."""
    lay = MsprofLayout(root.path)
    host = root.sub("host") if root.has_dir("host") else None
    info = host.entry("info.json") if host is not None else None
    lay.info = Path(info.path) if info is not None and is_file(info) else None
    lay.analyze = root.path / "analyze" if root.has_dir("analyze") else None
    dbs = sorted(Path(e.path) for e in root.entries if DB_RE.match(e.name))
    lay.db = dbs[-1] if dbs else None
    device_dirs = sorted(  # device_<30 digits> is no device folder (int64_of: None)
        (n, e.name) for e in root.entries
        if (m := _DEVICE_RE.match(e.name)) and (n := int64_of(m.group(1))) is not None and is_dir(e)
    )
    lay.devices = [d for d, _ in device_dirs]

    def exports(folder: Folder) -> dict[str, list[Path]]:
        return newest_exports([Path(e.path) for e in folder.files()])

    if root.has_dir(OUTPUT):
        lay.style = "current"
        for base, files in exports(root.sub(OUTPUT)).items():
            lay.files[base] = [(p, -1) for p in files]
    else:
        for dev, name in device_dirs:
            ddir = root.sub(name)
            for sub in ("summary", "timeline"):
                if not ddir.has_dir(sub):
                    continue
                lay.style = "cann7"
                for base, files in exports(ddir.sub(sub)).items():
                    lay.files.setdefault(base, []).extend((p, dev) for p in files)
        for sub in ("summary", "timeline"):  # host-side summaries (api_statistic) in older layouts
            if host is not None and host.has_dir(sub):
                for base, files in exports(host.sub(sub)).items():
                    lay.files.setdefault(base, []).extend((p, -1) for p in files)
    if not lay.files:
        lay.style = "db" if lay.db is not None else "raw"
    return lay


def probe_dir(folder: Folder) -> Candidate | None:
    """A ``PROF_<n>_<time>_<letters>`` directory."""
    if not PROF_DIR_RE.match(folder.path.name):
        return None
    lay = _layout_of(folder)
    outputs = folder.sub(OUTPUT).files() if folder.has_dir(OUTPUT) else []
    for e in folder.entries:
        if _DEVICE_RE.match(e.name) and is_dir(e):
            device = folder.sub(e.name)
            for sub in ("summary", "timeline"):
                if device.has_dir(sub):
                    outputs.extend(device.sub(sub).files())
    mtimes = [mtime(e) for e in outputs]
    if lay.db is not None:
        mtimes.append(mtime_path(lay.db))
    if lay.info is not None:
        mtimes.append(mtime_path(lay.info))
    has_output = bool(outputs) or lay.db is not None
    rank = rank_from_names(folder.path)
    if rank is None and lay.info is not None:
        rank = _rank_from_info(lay.info)
    loc = ProfileLocation(
        kind=ProfileKind.MSPROF,
        path=folder.path,
        rank=rank,
        mtime=max(mtimes, default=mtime_path(folder.path)),
        complete=has_output,
        layout=lay,
    )
    return Candidate(loc, has_output, int_or_zero(_PROF_TS_RE.match(folder.path.name)))


def probe_file(file: SeenFile) -> Candidate | None:
    """A ``msprof_*.db`` named by the user: its PROF_* directory (walking finds the directory)."""
    if file.explicit and DB_RE.match(file.name) and PROF_DIR_RE.match(file.path.parent.name):
        return probe_dir(file.listings.folder(file.path.parent))
    return None


RAW_DIRS = frozenset({"data", "mindstudio_profiler_log"})
"""device_*/data and host/data hold the raw collection (thousands of files), the log folder msprof's
own log: never read, so never stamped in the cache key."""


def inputs(location: ProfileLocation) -> list[Path]:
    """Every file of the PROF_* directory but its raw collection and logs."""
    return files_below(Path(location.path), RAW_DIRS.__contains__)


def _rank_from_info(path: Path) -> int | None:
    # msprof's host/info.json may carry a rank id for distributed jobs [inferred]; -1 = none.
    try:
        data = json.loads(safe_io.read_bytes(path, 4 * 1024 * 1024))
    except (ProfileError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    for key in ("rank_id", "rankId", "rank"):
        rank = as_rank(data.get(key))
        if rank is not None:
            return rank
    return None


def _layout(location: ProfileLocation) -> MsprofLayout:
    if isinstance(location.layout, MsprofLayout):
        return location.layout
    root = Path(location.path)
    if not root.is_dir():
        raise ProfileError(root, "not a directory (expected a msprof PROF_* directory)")
    return _layout_of(Listings().folder(root))


def read(location: ProfileLocation, progress: Progress = no_progress) -> Profile:
    lay = _layout(location)
    meta = ProfileMeta(kind=ProfileKind.MSPROF, path=str(lay.root), backend=Backend.ASCEND, rank=location.rank)
    meta.with_stack = False  # msprof records no Python stacks
    meta.extra["layout"] = lay.style
    profile = Profile(meta=meta)
    issues: list[Issue] = []
    _read_info(lay, meta, issues)

    if lay.style == "raw":
        raise ProfileError(lay.root, f"only raw msprof data here (no {OUTPUT}/ and no msprof_*.db): {EXPORT_HINT}")
    if lay.style == "db":
        _read_db(lay, profile, issues, progress)
    else:
        _read_text(lay, profile, issues, progress)

    devices = sorted({int(d) for d in profile.kernels["device"].unique() if d >= 0}) if len(profile.kernels) else []
    meta.extra["devices"] = devices or lay.devices
    if meta.device_id is None and len(devices) == 1:
        meta.device_id = devices[0]
    profile.issues = issues
    progress("Loaded", 1.0)
    return profile


# ---------------------------------------------------------------------------------------------
# host/info.json


def _read_info(lay: MsprofLayout, meta: ProfileMeta, issues: list[Issue]) -> None:
    if lay.info is None:
        return
    try:
        info = ascend_json.read_msprof_info(lay.info)
    except ProfileError as exc:
        issues.append(Issue(exc.path, exc.message, exc.line))
        return
    issues.extend(info.issues)
    meta.files.append(str(lay.info))
    for key in ("ai_core_num", "aiv_num", "aic_frequency_mhz", "aiv_frequency_mhz"):
        value = getattr(info, key)
        if value is not None:
            meta.extra[key] = value
    if info.device_id is not None:
        meta.device_id = info.device_id
    rank = info.extra.get("rank_id", info.extra.get("rankId"))
    if meta.rank is None and as_rank(rank) is not None:  # "²" or 400 digits: no rank
        meta.rank = as_rank(rank)
    for key in ("hostname", "platform", "version", "cann_version"):
        if key in info.extra:
            meta.extra.setdefault(f"host_{key}" if key in ("hostname", "platform") else key, info.extra[key])


# ---------------------------------------------------------------------------------------------
# CSV / JSON exports


@dataclass(slots=True)
class _Timelines:
    """What the ``msprof_*.json`` timelines (slices, devices) held, one table per file."""

    kernels: list[pd.DataFrame] = field(default_factory=list)
    host_events: list[pd.DataFrame] = field(default_factory=list)
    overlap: list[pd.DataFrame] = field(default_factory=list)


def _read_text(lay: MsprofLayout, profile: Profile, issues: list[Issue], progress: Progress) -> None:
    """op_summary and the timelines -> kernels (joined), CANN API events and Overlap Analysis;
    then steps, statistics, memory and communication."""
    meta = profile.meta
    details = _read_op_summary(lay, meta, issues)
    timelines = _read_timelines(lay, meta, issues, progress)
    progress("Joining op_summary and the timeline", 0.85)
    kernels = _join_kernels(lay, meta, issues, details, timelines.kernels)
    if timelines.host_events:
        profile.host_events = _concat_schema(timelines.host_events, HOST_EVENT_SCHEMA)
    if timelines.overlap:
        profile.overlap = _concat_schema(timelines.overlap, OVERLAP_SCHEMA)

    # -- steps (graph-mode iterations) -------------------------------------------------------------
    iterations = [it for its in _each(lay, "step_trace", ascend_csv.read_msprof_step_trace, profile, issues) for it in its]
    _name_runtime_tasks(kernels)
    profile.steps = _steps_from_iterations(iterations)
    if not profile.steps:  # an eager job: msprof writes step_trace in graph mode only
        profile.steps = steps_from_launches(kernels, meta, issues, host=(profile.host_events,), say_none=True)
    attach_kernels(profile, kernels)

    _read_statistics(lay, profile, issues)
    _read_analyze(lay, profile, issues)
    if not profile.step_breakdown and len(profile.overlap):
        profile.step_breakdown = breakdown_from_overlap(profile.overlap, profile.steps, profile.kernels)


def _read_op_summary(lay: MsprofLayout, meta: ProfileMeta, issues: list[Issue]) -> pd.DataFrame | None:
    """op_summary (+ slices, + one file per device in the 7.0.x layout) as one kernel table."""
    frames: list[pd.DataFrame] = []
    for path, dev in lay.get("op_summary"):
        table = optional(path, issues, _kernel_table)
        if table is None:
            continue
        meta.files.append(str(path))
        if dev >= 0:
            table.loc[table["device"] < 0, "device"] = dev
        frames.append(table)
    return _concat_kernels(frames) if frames else None


def _read_timelines(lay: MsprofLayout, meta: ProfileMeta, issues: list[Issue], progress: Progress) -> _Timelines:
    """msprof_*.json (+ slices): device tasks, CANN API, Overlap Analysis."""
    timelines = lay.get("msprof")
    out = _Timelines()
    counts: dict[str, int] = {}
    stacks = StackTable()
    for i, (path, dev) in enumerate(timelines):
        def scaled(message: str, fraction: float | None, i: int = i) -> None:
            if fraction is not None:
                progress(message, 0.8 * (i + fraction) / len(timelines))

        try:
            ev = read_trace_events(path, progress=scaled)
        except ProfileError as exc:
            issues.append(Issue(exc.path, exc.message, exc.line))
            continue
        meta.files.append(str(path))
        issues.extend(ev.issues)
        if not ev.complete:
            meta.complete = False
        tables = tables_from_trace(ev, stacks)
        del ev
        issues.extend(tables.issues)
        for k, v in tables.counts.items():
            counts[k] = counts.get(k, 0) + v
        if tables.aicore_freq:
            meta.extra[AICORE_FREQ_KEY] = sorted(meta.extra.get(AICORE_FREQ_KEY, []) + tables.aicore_freq)
        k = tables.kernels
        if dev >= 0:
            k.loc[k["device"] < 0, "device"] = dev
        out.kernels.append(k)
        out.host_events.append(tables.host_events)
        out.overlap.append(tables.overlap)
    if counts:
        meta.extra["trace_counts"] = counts
    return out


def _join_kernels(
    lay: MsprofLayout, meta: ProfileMeta, issues: list[Issue], details: pd.DataFrame | None,
    trace_kernels: list[pd.DataFrame],
) -> pd.DataFrame:
    """The kernels: op_summary rows joined to the timeline's tasks, else whichever one exists."""
    tk = _concat_kernels(trace_kernels) if trace_kernels else None
    if details is not None and tk is not None:
        kernels, matched = join_kernel_details(tk, details)
        meta.extra["op_summary_matched"] = matched
        if len(details) and len(tk) and not matched:
            issues.append(Issue(str(lay.root), "no op_summary row matches the msprof timeline by (name, start "
                                               "time): they seem to come from different exports; both kept"))
        return kernels
    if details is not None:
        if lay.style == "current":
            issues.append(Issue(str(lay.root / OUTPUT), "no msprof_*.json timeline: no CANN API events"))
        return details
    if tk is not None:
        issues.append(Issue(str(lay.root), "no op_summary_*.csv: kernels come from the timeline only (no core "
                                           "type, shapes or PMU ratios)"))
        return tk
    raise ProfileError(lay.root, f"no readable op_summary_*.csv or msprof_*.json in this PROF_* directory; "
                                 f"{EXPORT_HINT}")


def _read_statistics(lay: MsprofLayout, profile: Profile, issues: list[Issue]) -> None:
    """op/api/communication statistics and the memory files (each kind: every file of it)."""
    meta = profile.meta
    profile.op_statistic = [r for rows in _each(lay, "op_statistic", ascend_csv.read_op_statistic, profile, issues) for r in rows]
    api = [f for f in (optional(p, issues, ascend_csv.read_api_statistic) for p, _ in lay.get("api_statistic"))
           if f is not None]
    if api:
        profile.api_statistic = pd.concat(api, ignore_index=True)
        meta.files.extend(str(p) for p, _ in lay.get("api_statistic"))
    comm_stats = [asdict(r) for rows in _each(lay, "communication_statistic", ascend_csv.read_communication_statistic,
                                                 profile, issues) for r in rows]
    if comm_stats:
        meta.extra["communication_statistic"] = comm_stats
    records = [f for f in (optional(p, issues, ascend_csv.read_memory_record)
                           for p, _ in lay.get("memory_record") + lay.get("ge_memory_record")) if f is not None]
    if records:
        profile.memory_record = pd.concat(records, ignore_index=True)
    op_mem = [f for f in (optional(p, issues, ascend_csv.read_operator_memory)
                          for p, _ in lay.get("operator_memory") + lay.get("ge_operator_memory")) if f is not None]
    if op_mem:
        profile.op_memory = pd.concat(op_mem, ignore_index=True)


_RUNTIME_TASK_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _name_runtime_tasks(kernels: pd.DataFrame) -> None:
    """Timeline-only tasks (``MEMCPY_ASYNC``, ...) have no op_summary row: their name is their
    type, as in the DB export's TASK.taskType, so per-type figures agree across producers."""
    if not len(kernels):
        return
    names = kernels["name"].astype(str)
    untyped = (kernels["type"].astype(str) == "").to_numpy() & names.str.match(_RUNTIME_TASK_RE).to_numpy()
    if not untyped.any():
        return
    for col in ("type", "core"):
        values = kernels[col].astype(object).to_numpy().copy()
        fill = untyped & (values == "")
        values[fill] = names.to_numpy()[fill]
        kernels[col] = pd.Categorical(values)


def _kernel_table(path: Path) -> tuple[pd.DataFrame, list[Issue]]:
    table = ascend_csv.read_kernel_table(path, producer="msprof")
    return table.to_frame(), table.issues


def _each(lay: MsprofLayout, base: str, fn, profile: Profile, issues: list[Issue]) -> list:  # noqa: ANN001
    """What ``fn`` reads from every ``base`` file, each file that reads recorded in meta.files."""
    out = []
    for path, _ in lay.get(base):
        value = optional(path, issues, fn)
        if value is not None:
            profile.meta.files.append(str(path))
            out.append(value)
    return out


def _read_analyze(lay: MsprofLayout, profile: Profile, issues: list[Issue]) -> None:
    """``analyze/`` (``msprof --analyze=on``): communication.json / communication_matrix.json."""
    if lay.analyze is None:
        return
    for name, reader, attr in (("communication.json", ascend_json.read_communication, "comm_ops"),
                               ("communication_matrix.json", ascend_json.read_communication_matrix, "comm_matrix")):
        path = lay.analyze / name
        if path.is_file():
            read_into(profile, attr, path, reader, issues)


def _steps_from_iterations(iterations: list) -> list[Step]:
    """One Step per iteration id: the first device's iterations (devices run the same steps)."""
    if not iterations:
        return []
    first_device = min(it.device for it in iterations)
    steps = {it.iteration_id: it.to_step() for it in iterations if it.device == first_device}
    return sorted(steps.values(), key=lambda s: s.start_ns)


def _concat_kernels(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Several kernel tables (slices, devices) as one KERNEL_SCHEMA table, sorted by start."""
    if len(frames) == 1:
        return frames[0].sort_values("start_ns", kind="stable").reset_index(drop=True)
    n = sum(len(f) for f in frames)
    columns: dict[str, np.ndarray] = {}
    names = list(KERNEL_SCHEMA) + sorted({c for f in frames for c in f.columns if c.startswith("pmu:")})
    for col in names:
        kind, default = KERNEL_SCHEMA.get(col, ("f8", np.nan))
        parts = []
        for f in frames:
            if col in f:
                parts.append(f[col].to_numpy(dtype=object if kind in ("cat", "str") else None))
            else:
                parts.append(np.full(len(f), default, dtype=object if kind in ("cat", "str") else None))
        columns[col] = np.concatenate(parts) if parts else np.empty(0)
    table = make_table(KERNEL_SCHEMA, columns, n)
    return table.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _concat_schema(frames: list[pd.DataFrame], schema: dict) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return empty_table(schema)
    columns = {
        col: np.concatenate([f[col].to_numpy(dtype=object if kind in ("cat", "str") else None) for f in frames])
        for col, (kind, _) in schema.items()
    }
    table = make_table(schema, columns, sum(len(f) for f in frames))
    return table.sort_values("start_ns", kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# msprof --type=db


def _read_db(lay: MsprofLayout, profile: Profile, issues: list[Issue], progress: Progress) -> None:
    assert lay.db is not None
    progress(f"Reading {lay.db.name}", 0.1)
    with SqliteDb(lay.db) as db:
        profile.meta.files.append(str(lay.db))
        cann = read_cann(db, device_hint=profile.meta.device_id if profile.meta.device_id is not None else -1)
        if db.unreadable_string_ids:
            issues.append(Issue(str(lay.db), f"STRING_IDS: {db.unreadable_string_ids} row(s) whose id is no integer "
                                             "in int64 range; left out"))
    issues.extend(cann.issues)
    kernels = cann.kernels
    if not profile.steps:
        profile.steps = steps_from_launches(kernels, profile.meta, issues, host=(profile.host_events,), say_none=True)
    resolve_kernel_links(kernels, profile.host_ops)
    profile.kernels = kernels
    profile.comm_ops = cann.comm_ops
    profile.overlap = cann.overlap
    if cann.host_events:
        n = len(cann.host_events["start_ns"])
        profile.host_events = make_table(HOST_EVENT_SCHEMA, cann.host_events, n).sort_values(
            "start_ns", kind="stable").reset_index(drop=True)
    _read_analyze(lay, profile, issues)
    # the DB's OVERLAP_ANALYSIS is the producer's own breakdown: its Free wins over one recomputed
    # from the tasks (issue 25: 4 % apart on a real msprof DB export)
    if not profile.step_breakdown and len(profile.overlap):
        profile.step_breakdown = breakdown_from_overlap(profile.overlap, profile.steps, profile.kernels,
                                                        preparing=False)


READER = Reader(ProfileKind.MSPROF, read, probe_dir, probe_file, looks_for="PROF_* directories",
                watch=("**/PROF_*/**",), inputs=inputs, detail=1)
