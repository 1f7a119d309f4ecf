"""Human output of ``--check``: the "Start here" block (the top findings by saving), then a header
per profile, findings grouped by file like a compiler's (by saving), then the top hotspots and a
summary line. Fits an 80-column terminal, except that a word is never
broken or cut: a path longer than the line is printed whole (the terminal wraps it) so it can be
pasted back into ``--profile``. Colour only when asked.

Every string that came from a profile or the workspace (paths, messages, op names, source text,
load notes) goes through ``visible`` where it enters a line, so a control character in it is
shown as ``\x1b``-style text and never reaches the terminal — with colour or without.

``--format concise`` is the same findings one line each (``path:line:col: severity CODE message``),
for editors' problem matchers and grep: a matcher reads a line at a time and cannot follow the
grouped layout's wrapped messages.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Iterable

from msprof_lsp.hints.consolidate import saving_key
from msprof_lsp.hints.finding import Finding, Severity
from msprof_lsp.hints.verify import FindingState
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.profile.timemodel import device_time_per_step_ns, profile_breakdown
from msprof_lsp.mapping.units import format_share, format_us
from msprof_lsp.server.escape import visible

from ...analysis.views import document
from ...analysis.views.result import CheckRun, JobReport
from ...analysis.views.rows import FindingRow, Report, report

WIDTH = 80
TOP_HOTSPOTS = 8

_COLORS = {
    Severity.ERROR: "\x1b[31;1m",
    Severity.WARNING: "\x1b[33;1m",
    Severity.INFO: "\x1b[36m",
    Severity.HINT: "\x1b[2m",
}
_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"


class _Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if self.color else text


def _wrap(text: str, indent: int, width: int = WIDTH) -> list[str]:
    """Wrapped at spaces only: paths and code stay whole (a longer word gets a line of its own)."""
    pad = " " * indent
    return textwrap.wrap(text, width=width, initial_indent=pad, subsequent_indent=pad, break_on_hyphens=False,
                         break_long_words=False) or [pad]


def _path(path, run: CheckRun) -> str:  # noqa: ANN001 - str | PathLike
    """A profile or source path as printed: relative to the cwd, controls shown, never emitted."""
    return visible(document.rel_path(path, run.cwd))


def header(job: JobReport, run: CheckRun, style: _Style) -> list[str]:
    p = job.profile
    meta = p.meta
    step_ns, source = p.step_time()
    title = f"{meta.kind.value} profile"
    path = _path(meta.path, run)
    if len(title) + 1 + len(path) <= WIDTH:
        lines = [style(f"{title} {path}", _BOLD)]
    else:  # long run-directory names: the whole path on its own line, never cut
        lines = [style(title, _BOLD), style(f"  {path}", _BOLD)]
    facts = []
    if meta.rank is not None:
        facts.append(f"rank {meta.rank}" + (f" of {len(job.ranks)}" if len(job.ranks) > 1 else ""))
    facts.append(f"{p.num_steps} step{'s' if p.num_steps != 1 else ''}")
    facts.append(f"step {format_us(step_ns / 1000)}")
    wall = p.wall_step_ns()
    if wall and wall > step_ns * 1.1:  # host-bound phases (data loading) lie outside the device step
        facts[-1] += f" on device, {format_us(wall / 1000)} wall"
    what = job.heat.time_source.value
    facts.append(f"{format_share(job.heat.mapped_share)} of {what} time mapped to code")
    lines += _wrap(" · ".join(facts), 2)
    lines += _wrap(breakdown_line(p), 2)
    if job.cluster is not None and len(job.cluster.ranks) > 1:
        c = job.cluster
        slow = next((r for r in c.ranks if r.rank == c.slowest_rank), None)
        if slow is not None:
            fastest = min(r.step_time_ns for r in c.ranks if r.step_time_ns > 0)
            extra = (slow.step_time_ns / fastest - 1) * 100 if fastest else 0.0
            lines += _wrap(
                f"cluster: {len(c.ranks)} ranks, slowest rank {c.slowest_rank} "
                f"({format_us(slow.step_time_ns / 1000)}/step, +{extra:.1f}% vs fastest); "
                f"analysing rank {c.analysed_rank}" + (f": {c.analysed_why}" if c.analysed_why else ""),
                2,
            )
            for r in c.ranks:
                lines.append(
                    f"    rank {r.rank:>3}  step {format_us(r.step_time_ns / 1000):>10}  "
                    f"comm not overlapped {format_share(r.comm_share):>6}"
                )
    if not p.has_call_stacks:
        lines += _wrap("no Python call stacks in this profile: locations are approximate", 2)
    for issue in p.issues[:5]:
        lines += _wrap(f"note: {visible(issue)}", 2)
    if len(p.issues) > 5:
        lines.append(f"  note: … and {len(p.issues) - 5} more load notes")
    if source == "capture length":
        lines += _wrap("note: no step markers; step time = capture length / steps", 2)
    return lines


def breakdown_line(p) -> str:  # noqa: ANN001 - a Profile
    """The time model per step (docs/numbers.md), and where its figures come from."""
    b = profile_breakdown(p)
    if not b.steps:
        return "no device tasks: no step breakdown"

    def us(attr: str) -> str:
        v = b.mean(attr)
        return format_us((v or 0.0) / 1000)

    return (f"per step: computing {us('computing_ns')} · communication {us('communication_ns')} "
            f"({us('comm_not_overlapped_ns')} not overlapped) · free {us('free_ns')} · "
            f"device work {format_us(device_time_per_step_ns(p) / 1000)} ({b.source.value})")


_SEV_WIDTH = max(len(x.value) for x in Severity)


def _finding_lines(f: Finding, style: _Style) -> list[str]:
    """``  line:col severity CODE message`` with the message wrapped under itself."""
    s = f.span
    where = f"{s.line}:{s.col + 1}" if s else "-"
    sev = style(f.severity.value.ljust(_SEV_WIDTH), _COLORS[f.severity])
    code = visible(f.code)
    prefix = f"  {where:>7} {f.severity.value.ljust(_SEV_WIDTH)} {code:<6} "
    indent = len(prefix)
    message = visible(" ".join(f.message.split()))
    body = textwrap.wrap(message, width=WIDTH - indent, break_on_hyphens=False, break_long_words=False) or [""]
    lines = [f"  {where:>7} {sev} {style(code, _BOLD):<6} " + body[0]] + [" " * indent + b for b in body[1:]]
    if s is not None and f.confidence is Confidence.INFERRED:  # beside the severity, never lowering it
        lines += [style(x, _DIM) for x in _wrap("anchor inferred: no call stack, the line was found by pattern search",
                                                indent)]
    for fix in f.fixes[:2]:
        lines += [style(x, _DIM) for x in _wrap(f"fix: {visible(document.fix_label(fix))}", indent)]
    if len(f.fixes) > 2:
        lines.append(style(" " * indent + f"… and {len(f.fixes) - 2} more fixes", _DIM))
    return lines


def start_here(view: Report, run: CheckRun, style: _Style) -> list[str]:
    """The report's opening block: the top findings by saving (hints.consolidate.start_here), each
    with how much, what to change and where."""
    top = [view.findings[i].finding for i in view.start_here]
    if not top:
        return []
    out = [style("Start here", _BOLD)]
    for n, f in enumerate(top, 1):
        where = f"{_path(f.span.path, run)}:{f.span.line}" if f.span else "(profile)"
        out += _wrap(f"{n}. {where}  {visible(f.code)} {visible(f.name)}", 2)
        out += _wrap(document.saving_text(f), 5)
        out += _wrap(f"change: {visible(' '.join(document.advice(f).split()))}", 5)
    return out + [""]


def findings_by_file(findings: Iterable[Finding], run: CheckRun, style: _Style) -> list[str]:
    """Findings grouped by file; the files and the findings in each by saving (unknown last, then
    share), so the biggest lever of a file comes first."""
    out: list[str] = []
    by_file: dict[str, list[Finding]] = {}
    for f in sorted(sorted(findings, key=Finding.sort_key), key=saving_key):
        key = _path(f.span.path, run) if f.span else "(profile)"
        by_file.setdefault(key, []).append(f)
    for path, items in by_file.items():
        out.append(style(path, _BOLD))
        for f in items:
            out += _finding_lines(f, style)
        out.append("")
    return out


def _ops_by_type(ops) -> list[tuple[str, int]]:
    """Forward and backward kernels of one type shown once, most time first."""
    totals: dict[str, list[int]] = {}
    for o in ops:
        t = totals.setdefault(o.type or o.name, [0, 0])
        t[0] += o.total_ns
        t[1] += o.count
    return [(name, c) for name, (_, c) in sorted(totals.items(), key=lambda kv: -kv[1][0])]


def hotspots(job: JobReport, run: CheckRun) -> list[str]:
    spans = document.hot_spans(job.heat)[:TOP_HOTSPOTS]
    if not spans:
        return []
    what = job.heat.time_source.value
    out = [f"Hotspots ({what} time per step)", "   share    time/step  location / top operators"]
    for h in spans:
        span = h.site.span
        loc = f"{_path(span.path, run)}:{span.line}"
        if h.site.confidence is Confidence.INFERRED:
            loc += "  (inferred: no call stack)"  # ranked with the others, marked
        out.append(f"  {format_share(h.share):>6} {format_us(h.per_step_ns / 1000):>12}  {loc}")
        code = visible(" ".join(h.site.call_text.split()))
        if code:
            out.append(f"{'':23}{textwrap.shorten(code, WIDTH - 23, placeholder='…')}")
        ops = ", ".join(f"{visible(name)} ×{count}" for name, count in _ops_by_type(h.ops)[:3])
        if ops:
            out.append(f"{'':23}{textwrap.shorten(ops, WIDTH - 23, placeholder='…')}")
    return out


def baseline(job: JobReport, run: CheckRun) -> list[str]:
    cmp = job.comparison
    if cmp is None:
        return []
    ratio = cmp.step_ratio
    change = f" ({ratio * 100:+.1f}%)" if ratio is not None else ""
    out = [
        f"Compared with {_path(cmp.baseline_path, run)}:",
        f"  step time {format_us(cmp.before_step_us)} → {format_us(cmp.after_step_us)}{change}",
    ]
    for title, items in (("improved", cmp.improved()), ("regressed", cmp.regressed())):
        for c in items[:5]:
            r = f" ({c.ratio * 100:+.0f}%)" if c.ratio is not None else " (new)"
            out.append(
                f"  {title:9} {_path(c.path, run)}:{c.line}: "
                f"{format_us(c.before_us)} → {format_us(c.after_us)}/step{r}"
            )
    if job.finding_changes:
        counts = Counter(c.state for c in job.finding_changes)
        out.append("  findings: " + ", ".join(f"{counts[s]} {s.value}" for s in FindingState if counts[s]))
        for c in job.finding_changes:
            f = c.finding
            place = f"{_path(f.span.path, run)}:{f.span.line}" if f.span else "(profile)"
            figures = " → ".join("—" if x is None else f"{format_us(x.time_per_step_us)}/step" for x in (c.before, c.after))
            out.append(f"  {c.state.value:10} {visible(c.code)} {place}: {figures}")
    return out


MAX_RANK_GROUPS = 20  # --ranks all: the groups on most ranks; the JSON lists every one


def all_ranks(job: JobReport, run: CheckRun) -> list[str]:
    """``--ranks all``: each finding on several ranks once, with how many ranks, the range of its
    time per step over them and the worst rank; the ranks named when not all have it."""
    every = job.all_ranks
    if every is None:
        return []
    n = every.total
    out = [f"Every rank ({n:,} ranks, {every.engine}):"]
    for g in every.groups[:MAX_RANK_GROUPS]:
        low, high = format_us(g.low_us), format_us(g.high_us)
        spread = "" if g.high_us <= 0 else f", {high}/step" if low == high else f", {low}–{high}/step"
        out.append(f"  {g.code} on {len(g.ranks):,} of {n:,} ranks{spread}; worst rank {g.worst_rank}")
        where = f"{_path(g.path, run)}:{g.line}  " if g.path else ""
        out += _wrap(where + visible(g.message), 4)
        if len(g.ranks) < n:
            out += _wrap(f"ranks {document.rank_ranges(g.ranks)}", 4)
    if len(every.groups) > MAX_RANK_GROUPS:
        out.append(f"  … and {len(every.groups) - MAX_RANK_GROUPS} more (--format json lists every one)")
    if not every.groups:
        out.append("  no findings on any rank")
    for r, error in every.failed:
        out += _wrap(f"rank {r} not analysed: {visible(error)}", 2)
    return out + [""]


def render(run: CheckRun, *, color: bool = False) -> str:
    style = _Style(color)
    view = report(run)
    out: list[str] = start_here(view, run, style)
    for job in run.jobs:
        out += header(job, run, style)
        out.append("")
        out += findings_by_file(job.findings, run, style)
        out += all_ranks(job, run)
        hs = hotspots(job, run)
        if hs:
            out += hs + [""]
        bl = baseline(job, run)
        if bl:
            out += bl + [""]
    counts = view.counters
    total = counts.total
    if total:
        parts = ", ".join(f"{n} {s.value}" for s, n in counts.by_severity.items() if n)
        files = counts.files
        out.append(f"Found {total} finding{'s' if total != 1 else ''} ({parts}) in {files} file{'s' if files != 1 else ''}.")
    else:
        out.append("No findings.")
    return "\n".join(out) + "\n"


def concise_line(f: FindingRow) -> str:
    """``path:line:col: severity CODE message``; a finding about the profile itself has no place."""
    message = visible(" ".join(f.message.split()))
    code = visible(f.code)
    if f.path is None:
        return f"(profile): {f.severity.value} {code} {message}"
    return f"{visible(f.path)}:{f.line}:{f.column}: {f.severity.value} {code} {message}"


def render_concise(run: CheckRun) -> str:
    lines = [concise_line(f) for f in report(run).by_place()]
    return "\n".join(lines) + ("\n" if lines else "")
