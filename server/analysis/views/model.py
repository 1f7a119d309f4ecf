"""The report model: what the HTML report (``--format html``) and the VS Code "Show profile" view
draw, built once from a check run (its findings, "Start here", hotspots and profile headers from
the ``Report`` view model's rows, ``rows.report``) and serialised to JSON for the TypeScript renderer
(vscode-client/src/report/). Its TypeScript interfaces are generated from these structs
(vscode-client/src/generated/report.ts; ``python -m msprof_lsp.server.lsp.payload_schema``).

It is a summary, never the raw trace: the timeline carries a few steps, and on each lane the
longest tasks one by one and the rest merged into runs of one class (docs/report.md). Every figure
is one the JSON document already defines (docs/numbers.md); times are µs.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from msprof_lsp.hints.finding import Fix
from msprof_lsp.hints.fixes.edits import PositionError, apply_edits
from msprof_lsp.mapping.source.positions import split_lines
from msprof_lsp.mapping.interning import Interner, per_distinct
from msprof_lsp.mapping.profile.cluster import comm_links
from msprof_lsp.mapping.profile.model import CommLink, Profile, TimeBreakdown
from msprof_lsp.mapping.profile import step_windows
from msprof_lsp.mapping.profile.timemodel import TaskClass, column_codes, profile_breakdown, task_classes
from msprof_lsp.mapping.source.heat import Attribution, Site

from . import document
from ..diff import unified_diff
from .result import CheckRun, JobReport
from .rows import FindingRow, HotspotRow, ProfileView, Report, report

MODEL_VERSION = 1
MAX_TIMELINE_STEPS = 6  # the slowest and the ones around it; a selector switches between them
TOP_PER_LANE = 50  # the longest tasks of a lane stay single (named, linked to their line)
LANE_BINS = 1500  # the rest merge into runs no shorter than step / LANE_BINS
SNIPPET_CONTEXT = 2  # source lines shown before and after a hotspot


class LaneKind(str, enum.Enum):
    DEVICE = "device"  # one (device, stream)
    HOST = "host"  # the thread that ran the steps' framework ops


class EventClass(str, enum.Enum):
    """Colour classes: the time model's task classes (mapping/profile/timemodel.py), and host ops."""

    COMPUTE = TaskClass.COMPUTE.label
    MEMCPY = TaskClass.MEMCPY.label
    COMMUNICATION = TaskClass.COMMUNICATION.label
    WAIT = TaskClass.WAIT.label
    OTHER = TaskClass.OTHER.label
    HOST = "host"


_CLASS_ORDER = [EventClass.COMPUTE, EventClass.MEMCPY, EventClass.COMMUNICATION, EventClass.WAIT, EventClass.OTHER,
                EventClass.HOST]
_CLASS_CODE = {c: i for i, c in enumerate(_CLASS_ORDER)}
_HOST_CODE = _CLASS_CODE[EventClass.HOST]


class SourceRef(msgspec.Struct):
    """A source line time was attributed to (paths relative to the cwd, "/" separators)."""

    path: str
    line: int
    code: str  # the call's text


class Lane(msgspec.Struct):
    """One lane of a step, columnar: event i is ``start_us[i]`` (from the step start) for
    ``dur_us[i]``, class ``classes[cls[i]]``, ``count[i]`` tasks (1: one task, named
    ``names[name[i]]``; more: a merged run), ``busy_us[i]`` of them busy, and the source line
    ``sources[source[i]]`` it was launched from (-1: none or several)."""

    id: str
    label: str
    kind: LaneKind
    start_us: list[float]
    dur_us: list[float]
    busy_us: list[float]
    cls: list[int]
    count: list[int]
    name: list[int]
    source: list[int]
    tasks: int  # tasks of the lane in this step, before merging


class TimelineStep(msgspec.Struct):
    step: int  # -1: the whole capture
    start_us: float  # of the window, from the capture's first event
    dur_us: float
    lanes: list[Lane]


class Timeline(msgspec.Struct):
    classes: list[EventClass]  # what ``Lane.cls`` indexes
    names: list[str]
    sources: list[SourceRef]
    steps: list[TimelineStep]
    chosen: int  # index into steps: the slowest step
    steps_total: int  # steps in the profile (not all are carried)


class BreakdownBar(msgspec.Struct):
    """One step of one rank: docs/numbers.md "The step breakdown"; None where unknown."""

    rank: int  # -1: a single-rank profile
    step: int
    computing_us: float | None
    communication_not_overlapped_us: float | None
    free_us: float | None
    step_us: float | None


class RankBar(msgspec.Struct):
    rank: int
    step_time_us: float
    comm_not_overlapped_us: float
    slowest: bool
    analysed: bool


class CommMatrix(msgspec.Struct):
    """Rank x rank: ``transit_ms[i][j]`` from ``ranks[i]`` to ``ranks[j]`` per step, None where no
    link was written (docs/numbers.md "Communication matrix")."""

    ranks: list[int]
    transit_ms: list[list[float | None]]
    size_mb: list[list[float | None]]
    bandwidth_gbps: list[list[float | None]]


class FixView(msgspec.Struct):
    title: str
    safe: bool
    diff: str  # unified diff of the files it edits ("" when the file could not be read)


class FindingView(msgspec.Struct):
    code: str
    name: str
    severity: str
    path: str | None
    line: int | None
    message: str
    share: float
    share_of: str  # the share's denominator: "wall-step" or "device-step"
    saving_us: float | None  # per step (None: unknown, see ``saving``)
    saving: str  # how much, as the reports print it ("saves 2.1 ms/step (…)" or "saving unknown, …")
    fixes: list[FixView]


class StartHere(msgspec.Struct):
    """One of the top findings by saving (hints.consolidate.start_here): how much, what to change,
    where. The report opens with them."""

    rank: int  # 1, 2, 3
    job: int  # index into ReportModel.jobs
    finding: int  # index into that job's findings
    code: str
    name: str
    path: str | None
    line: int | None
    saving: str
    change: str


class SnippetLine(msgspec.Struct):
    line: int
    text: str


class HotspotView(msgspec.Struct):
    path: str
    line: int
    end_line: int
    code: str
    share: float
    device_time_us: float
    calls: int
    ops: list[str]  # "TransData ×8", most time first
    snippet: list[SnippetLine]
    findings: list[int]  # indexes into JobModel.findings


class ProfileHeader(msgspec.Struct):
    path: str
    kind: str
    rank: int | None
    ranks: list[int]
    steps: int
    step_time_us: float
    mapped_share: float
    breakdown_source: str


class JobModel(msgspec.Struct):
    profile: ProfileHeader
    breakdown: list[BreakdownBar]
    ranks: list[RankBar]
    comm: CommMatrix | None
    timeline: Timeline
    hotspots: list[HotspotView]
    findings: list[FindingView]
    notes: list[str]


class ReportModel(msgspec.Struct):
    version: int
    tool_version: str
    base: str  # the folder the paths are relative to ("": the cwd of the --check run)
    jobs: list[JobModel]
    start_here: list[StartHere] = msgspec.field(default_factory=list)  # the top findings by saving, all jobs


# ---------------------------------------------------------------------------------------------
# Building


def _us(ns: float) -> float:
    return round(float(ns) / 1000, 3)


def _opt_us(ns: int) -> float | None:
    return _us(ns) if ns >= 0 else None


def breakdown_bars(b: TimeBreakdown, rank: int) -> list[BreakdownBar]:
    """One bar per step: the slowest device's row where a step has several (as the breakdown does)."""
    per_step = {}
    for s in b.steps:
        have = per_step.get(s.step)
        if have is None or s.stage_ns > have.stage_ns:
            per_step[s.step] = s
    return [BreakdownBar(rank=rank, step=s.step, computing_us=_opt_us(s.computing_ns),
                         communication_not_overlapped_us=_opt_us(s.comm_not_overlapped_ns),
                         free_us=_opt_us(s.free_ns), step_us=_opt_us(s.stage_ns))
            for _, s in sorted(per_step.items())]


def comm_matrix(links: Sequence[CommLink]) -> CommMatrix | None:
    """Per-step transit time and size of every link the ranks wrote, bandwidth = size / time."""
    if not links:
        return None
    ranks = sorted({x.src for x in links} | {x.dst for x in links})
    at = {r: i for i, r in enumerate(ranks)}
    n = len(ranks)
    time: list[list[float | None]] = [[None] * n for _ in range(n)]
    size: list[list[float | None]] = [[None] * n for _ in range(n)]
    bw: list[list[float | None]] = [[None] * n for _ in range(n)]
    for x in links:
        i, j = at[x.src], at[x.dst]
        steps = max(x.steps, 1)
        time[i][j] = round(x.transit_ms / steps, 6)
        size[i][j] = round(x.size_mb / steps, 6)
        g = x.bandwidth_gbps
        bw[i][j] = None if g is None else round(g, 4)
    return CommMatrix(ranks=ranks, transit_ms=time, size_mb=size, bandwidth_gbps=bw)


class _Names:
    """The timeline's name and source tables (indexes into them travel with the tasks)."""

    def __init__(self) -> None:
        self._names: Interner[str] = Interner()
        self._src: Interner[tuple[str, int, str]] = Interner()
        self.names = self._names.values
        self.sources: list[SourceRef] = []

    def name(self, text: str) -> int:
        return self._names.code(text)

    def source(self, site: Site | None, cwd: Path) -> int:
        if site is None:
            return -1
        key = (document.rel_path(site.span.path, cwd), site.span.line, site.call_text)
        i = self._src.code(key)
        if i == len(self.sources):  # first seen
            self.sources.append(SourceRef(path=key[0], line=key[1], code=key[2]))
        return i


def summarise_lane(start: np.ndarray, dur: np.ndarray, cls: np.ndarray, site: np.ndarray, name: np.ndarray,
                   window_ns: int) -> tuple[list[int], list[int], list[int], list[int], list[int], list[int], list[int]]:
    """The lane's tasks as drawn: the TOP_PER_LANE longest, and the TOP_PER_LANE longest linked to
    a source line, one by one; every other task merged with the others of its class that start in
    the same bin of step / LANE_BINS -- at most LANE_BINS + 1 events per class, whatever the trace.

    Returns per drawn event, in start order: start, extent, busy (ns), class, count, name (-1:
    merged), site (-1: none, or several)."""
    n = len(start)
    if not n:
        return [], [], [], [], [], [], []
    end = start + dur
    top = np.zeros(n, dtype=bool)
    top[np.argsort(-dur, kind="stable")[:TOP_PER_LANE]] = True
    linked = np.flatnonzero(site >= 0)
    top[linked[np.argsort(-dur[linked], kind="stable")[:TOP_PER_LANE]]] = True
    rest = np.flatnonzero(~top)
    width = max(window_ns // LANE_BINS, 1)
    bins = (start[rest] - start.min()) // width
    groups, inv = np.unique(bins * (int(cls.max()) + 1) + cls[rest], return_inverse=True)
    g = len(groups)
    g_start = np.full(g, np.iinfo(np.int64).max, dtype=np.int64)
    g_end = np.zeros(g, dtype=np.int64)
    g_site_lo = np.full(g, np.iinfo(np.int64).max, dtype=np.int64)
    g_site_hi = np.full(g, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(g_start, inv, start[rest])
    np.maximum.at(g_end, inv, end[rest])
    np.minimum.at(g_site_lo, inv, site[rest])
    np.maximum.at(g_site_hi, inv, site[rest])
    g_count = np.bincount(inv, minlength=g)
    g_busy = np.bincount(inv, weights=dur[rest], minlength=g).astype(np.int64)
    g_cls = np.zeros(g, dtype=np.int64)
    g_cls[inv] = cls[rest]
    g_name = np.full(g, -1, dtype=np.int64)
    g_name[inv] = name[rest]
    g_name[g_count > 1] = -1  # a merged run has no one name
    g_site = np.where(g_site_lo == g_site_hi, g_site_lo, -1)
    t = np.flatnonzero(top)
    cols = [np.concatenate(pair) for pair in (
        (start[t], g_start), (dur[t], g_end - g_start), (dur[t], g_busy), (cls[t], g_cls),
        (np.ones(len(t), dtype=np.int64), g_count), (name[t], g_name), (site[t], g_site))]
    order = np.argsort(cols[0], kind="stable")
    return tuple([int(v) for v in c[order].tolist()] for c in cols)  # type: ignore[return-value]


def _lane(lane_id: str, label: str, kind: LaneKind, ev: tuple[list[int], ...], t0: int, tasks: int) -> Lane:
    s, d, b, c, k, nm, src = ev
    return Lane(id=lane_id, label=label, kind=kind, start_us=[_us(x - t0) for x in s], dur_us=[_us(x) for x in d],
                busy_us=[_us(x) for x in b], cls=c, count=k, name=nm, source=src, tasks=tasks)


def _step_windows(profile: Profile) -> list[tuple[int, int, int]]:
    """(step, start, end) ns of every step window (``step_windows.windows``, the rules' own: the
    steps, else one per Step Id, else the capture, drawn as step -1)."""
    whole = not profile.steps and not (profile.kernels["step"].to_numpy() >= 0).any()
    return [(-1 if whole else w.id, w.start_ns, w.end_ns) for w in step_windows.windows(profile)]


STEP_MARK = "ProfilerStep#"


def host_rows(ops: pd.DataFrame) -> tuple[tuple[int, int], np.ndarray] | None:
    """The host lane: the thread whose outermost framework ops last longest (the training loop's),
    and those ops -- the ones directly inside a ``ProfilerStep#N`` range, or at the top where
    there is none (the step marks themselves are the step windows, not a lane's events)."""
    if not len(ops):
        return None
    codes, values = column_codes(ops["name"])  # once per distinct name
    mark = np.array([str(v).startswith(STEP_MARK) for v in values], dtype=bool)[codes] if len(values) else np.zeros(len(ops), bool)
    parent = ops["parent"].to_numpy(dtype=np.int64)
    under_mark = np.zeros(len(ops), dtype=bool)
    has_parent = parent >= 0
    under_mark[has_parent] = mark[parent[has_parent]]
    outer = ~mark & (~has_parent | under_mark) & (ops["start_ns"].to_numpy() >= 0)
    if not outer.any():
        return None
    top = ops[outer]
    pid, tid = top.groupby(["pid", "tid"], sort=True)["dur_ns"].sum().idxmax()
    rows = outer & (ops["pid"].to_numpy() == pid) & (ops["tid"].to_numpy() == tid)
    return (int(pid), int(tid)), rows


def _slowest(bars: list[BreakdownBar], windows: list[tuple[int, int, int]]) -> int:
    """Index in ``windows`` of the slowest step: the breakdown's Stage, else the window length."""
    stage = {b.step: b.step_us for b in bars if b.step_us is not None}
    return max(range(len(windows)), key=lambda i: (stage.get(windows[i][0], -1.0), windows[i][2] - windows[i][1]))


def timeline(profile: Profile, attribution: Attribution | None, bars: list[BreakdownBar], cwd: Path) -> Timeline:
    k = profile.kernels
    names = _Names()
    windows = _step_windows(profile)
    if not windows:
        return Timeline(classes=list(_CLASS_ORDER), names=[], sources=[], steps=[], chosen=-1, steps_total=0)
    slowest = _slowest(bars, windows)
    lo = max(0, min(slowest - MAX_TIMELINE_STEPS // 2, len(windows) - MAX_TIMELINE_STEPS))
    carried = windows[lo: lo + MAX_TIMELINE_STEPS]
    t_origin = min(w[1] for w in windows)

    start = k["start_ns"].to_numpy(dtype=np.int64)
    dur = k["dur_ns"].to_numpy(dtype=np.int64)
    kstep = k["step"].to_numpy(dtype=np.int64)
    cls = task_classes(k).astype(np.int64)
    ksite = np.full(len(k), -1, dtype=np.int64) if attribution is None else attribution.kernel_site
    kname_codes, kname_values = column_codes(k["name"])
    lane_keys = k[["device", "stream"]].drop_duplicates().sort_values(["device", "stream"]).to_numpy().tolist() if len(k) else []
    dev = k["device"].to_numpy(dtype=np.int64)
    stream = k["stream"].to_numpy(dtype=np.int64)

    ops = profile.host_ops
    host = host_rows(ops)
    thread = None
    if host is not None:
        thread, on = host
        hstart = ops["start_ns"].to_numpy(dtype=np.int64)
        hdur = ops["dur_ns"].to_numpy(dtype=np.int64)
        hsite = np.full(len(ops), -1, dtype=np.int64) if attribution is None else attribution.op_site
        hname_codes, hname_values = column_codes(ops["name"])

    def site_codes(rows: np.ndarray, sites: np.ndarray) -> np.ndarray:
        return per_distinct(sites[rows], lambda i: names.source(attribution.sites[int(i)], cwd)
                            if i >= 0 and attribution else -1, np.int64)

    def name_codes(rows: np.ndarray, codes: np.ndarray, values: Sequence[str]) -> np.ndarray:
        return per_distinct(codes[rows], lambda i: names.name(str(values[int(i)])), np.int64)

    steps: list[TimelineStep] = []
    for sid, ws, we in carried:
        in_step = (kstep == sid) if sid >= 0 and (kstep >= 0).any() else ((start >= ws) & (start < we))
        lanes: list[Lane] = []
        t0, t1 = ws, we
        if in_step.any():  # a Step Id task may start before its ProfilerStep range or end after it
            t0, t1 = min(ws, int(start[in_step].min())), max(we, int((start[in_step] + dur[in_step]).max()))
        window = max(t1 - t0, 1)
        for d, s in lane_keys:
            rows = np.flatnonzero(in_step & (dev == d) & (stream == s))
            if not len(rows):
                continue
            ev = summarise_lane(start[rows], dur[rows], cls[rows], site_codes(rows, ksite),
                                name_codes(rows, kname_codes, kname_values), window)
            label = f"device {d} · stream {s}" if d >= 0 else f"stream {s}"
            lanes.append(_lane(f"d{d}s{s}", label, LaneKind.DEVICE, ev, t0, len(rows)))
        if thread is not None:
            rows = np.flatnonzero(on & (hstart < we) & (hstart + hdur > ws))
            if len(rows):
                ev = summarise_lane(hstart[rows], hdur[rows], np.full(len(rows), _HOST_CODE, dtype=np.int64),
                                    site_codes(rows, hsite), name_codes(rows, hname_codes, hname_values), window)
                lanes.append(_lane(f"h{thread[0]}t{thread[1]}", f"host thread {thread[1]}", LaneKind.HOST, ev, t0,
                                   len(rows)))
        steps.append(TimelineStep(step=sid, start_us=_us(t0 - t_origin), dur_us=_us(window), lanes=lanes))
    return Timeline(classes=list(_CLASS_ORDER), names=names.names, sources=names.sources, steps=steps,
                    chosen=slowest - lo, steps_total=len(windows))


def fix_diff(fix: Fix, text_of, cwd: Path) -> str:  # noqa: ANN001 - text_of: path -> str | None
    """The fix as a unified diff: its edits applied to each file's current text (the same edits
    --check expands and the editor applies)."""
    by_path: dict[str, list] = {}
    for e in fix.edits:
        by_path.setdefault(e.path, []).append(e)
    parts: list[str] = []
    for path, edits in by_path.items():
        old = text_of(path)
        if old is None:
            return ""
        try:
            new = apply_edits(old, edits)
        except PositionError:
            return ""
        parts.append(unified_diff(old, new, document.rel_path(path, cwd), context=2))
    return "".join(parts)


def _snippet(text: str | None, line: int, end_line: int) -> list[SnippetLine]:
    if text is None:
        return []
    lines = split_lines(text)
    lo, hi = max(1, line - SNIPPET_CONTEXT), min(len(lines), end_line + SNIPPET_CONTEXT)
    return [SnippetLine(line=i, text=lines[i - 1].rstrip("\r\n")) for i in range(lo, hi + 1)]


def finding_view(r: FindingRow, text_of, cwd: Path) -> FindingView:  # noqa: ANN001 - text_of: path -> str | None
    """A finding as the report model draws it: every figure and text the ``Report`` row's (the
    JSON document's saving, share and its denominator, the reports' saving text and fix labels);
    each fix as a diff of the file's current text."""
    return FindingView(code=r.code, name=r.name, severity=r.severity.value, path=r.path, line=r.line,
                       message=r.message, share=r.share, share_of=r.share_of.value,
                       saving_us=r.saving.as_dict()["us_per_step"], saving=r.saving_text,
                       fixes=[FixView(title=x.label, safe=x.safe, diff=fix_diff(fix, text_of, cwd))
                              for x, fix in zip(r.fixes, r.finding.fixes)])


def start_views(view: Report, ordered: Sequence[Sequence[FindingRow]]) -> list[StartHere]:
    """The report's "Start here": the ``Report``'s (the JSON ``start_here`` and the text report's
    choice), each pointing at its entry in its job's findings (``ordered[job]``, ``by_saving``)."""
    at = {id(r): (j, n) for j, rows in enumerate(ordered) for n, r in enumerate(rows)}
    out = []
    for rank, i in enumerate(view.start_here, 1):
        r = view.findings[i]
        job, n = at[id(r)]
        out.append(StartHere(rank=rank, job=job, finding=n, code=r.code, name=r.name, path=r.path, line=r.line,
                             saving=r.saving_text, change=r.change))
    return out


def _hotspot_view(h: HotspotRow, ordered: Sequence[FindingRow], text_of) -> HotspotView:  # noqa: ANN001
    span = h.heat.site.span
    mine = [i for i, f in enumerate(ordered) if f.path == h.path and f.line is not None and h.line <= f.line <= h.end_line]
    return HotspotView(path=h.path, line=h.line, end_line=h.end_line, code=h.code, share=h.share,
                       device_time_us=h.device_time_us, calls=h.calls,
                       ops=[f"{o.type or o.name} ×{o.count}" for o in h.ops[:4]],
                       snippet=_snippet(text_of(span.path), span.line, span.end_line), findings=mine)


def job_model(job: JobReport, head: ProfileView, ordered: Sequence[FindingRow], hotspots: Sequence[HotspotRow],
              cwd: Path) -> JobModel:
    """One job's model from its ``Report`` rows (``head``: its profile, ``ordered``: its findings by
    saving, ``hotspots``: its hotspots) and what only the model draws (breakdown bars, ranks,
    matrix, timeline, snippets, fix diffs)."""
    profile, cluster = job.profile, job.cluster
    text_of = job.source_text or (lambda _path: None)
    own = profile_breakdown(profile)
    if cluster is not None:
        bars = [bar for r in cluster.ranks if r.breakdown is not None for bar in breakdown_bars(r.breakdown, r.rank)]
        rank_bars = [RankBar(rank=r.rank, step_time_us=_us(r.step_time_ns), comm_not_overlapped_us=_us(r.comm_not_overlapped_ns),
                             slowest=r.rank == cluster.slowest_rank, analysed=r.rank == cluster.analysed_rank)
                     for r in cluster.ranks]
        comm = comm_matrix([x for r in cluster.ranks for x in r.links])
    else:
        bars = breakdown_bars(own, profile.meta.rank if profile.meta.rank is not None else -1)
        rank_bars = []
        comm = comm_matrix(comm_links(profile, profile.meta.rank))
    own_bars = [b for b in bars if b.rank == (profile.meta.rank if profile.meta.rank is not None else -1)] or bars
    header = ProfileHeader(path=head.path, kind=head.kind, rank=head.rank, ranks=list(head.ranks), steps=head.steps,
                           step_time_us=head.step_time_us, mapped_share=head.mapped_share,
                           breakdown_source=head.breakdown_source)
    notes = [str(i) for i in profile.issues]
    if comm is None:
        notes.append("no communication matrix in this profile (communication_matrix.json / CommAnalyzerMatrix: "
                     "multi-rank torch_npu Level1 exports write it)")
    return JobModel(profile=header, breakdown=bars if cluster is not None else own_bars, ranks=rank_bars, comm=comm,
                    timeline=timeline(profile, job.attribution, own_bars, cwd),
                    hotspots=[_hotspot_view(h, ordered, text_of) for h in hotspots],
                    findings=[finding_view(r, text_of, cwd) for r in ordered], notes=notes)


def report_model(run: CheckRun, base: str = "", *, view: Report | None = None) -> ReportModel:
    """The model of a check run: the HTML report's (``base`` "": paths relative to the run's cwd)
    and the editor's "Show profile" of its one job (``base``: the folder they are relative to).
    Its profiles, findings, hotspots and "Start here" are the ``Report`` view model's rows
    (``view``: that model where the caller built it, else built here)."""
    view = view if view is not None else report(run)
    ordered = [view.by_saving(n) for n in range(len(run.jobs))]
    jobs = [job_model(j, view.profiles[n], ordered[n], view.hotspots_of(n), run.cwd) for n, j in enumerate(run.jobs)]
    return ReportModel(version=MODEL_VERSION, tool_version=run.tool_version, base=base, jobs=jobs,
                       start_here=start_views(view, ordered))


def encode(model: ReportModel) -> bytes:
    return msgspec.json.encode(model)
