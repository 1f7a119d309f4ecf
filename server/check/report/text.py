"""Human output of ``--check``: the "Start here" block (the top findings by saving), then a header
per profile, findings grouped by file like a compiler's (by saving), then the top hotspots and a
summary line. Fits an 80-column terminal, except that a word is never
broken or cut: a path longer than the line is printed whole (the terminal wraps it) so it can be
pasted back into ``--profile``. Colour only when asked.

It reads the check run's view models only (``rows.report(run)``, server/analysis/views): every
figure it prints is a field of one of their rows, the same the JSON document and SARIF write.

Every string that came from a profile or the workspace (paths, messages, op names, source text,
load notes) goes through ``visible`` where it enters a line, so a control character in it is
shown as ``\x1b``-style text and never reaches the terminal — with colour or without.

``--format concise`` is the same findings one line each (``path:line:col: severity CODE message``),
for editors' problem matchers and grep: a matcher reads a line at a time and cannot follow the
grouped layout's wrapped messages.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

from msprof_lsp.hints.finding import Severity
from msprof_lsp.mapping.spans import Confidence
from msprof_lsp.mapping.units import format_share, format_us
from msprof_lsp.server.escape import visible

from ...analysis.views import document
from ...analysis.views.parts import BaselineView, RankFindingsView
from ...analysis.views.result import CheckRun
from ...analysis.views.rows import FindingRow, HotspotRow, ProfileView, Report, report

WIDTH = 80
TOP_HOTSPOTS = 8

_COLORS = {
    Severity.ERROR: "\x1b[31;1m",
    Severity.WARNING: "\x1b[33;1m",
    Severity.INFO: "\x1b[36m",
    Severity.HINT: "\x1b[2m",
}
_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"
_INFERRED = Confidence.INFERRED.value


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


def _place(path: str | None, line: int | None) -> str:
    """``path:line`` of a row (its path already relative to the cwd), controls shown; "(profile)"
    for a finding about the profile itself."""
    return f"{visible(path)}:{line}" if path is not None else "(profile)"


def header(p: ProfileView, style: _Style) -> list[str]:
    title = f"{p.kind} profile"
    path = visible(p.path)
    if len(title) + 1 + len(path) <= WIDTH:
        lines = [style(f"{title} {path}", _BOLD)]
    else:  # long run-directory names: the whole path on its own line, never cut
        lines = [style(title, _BOLD), style(f"  {path}", _BOLD)]
    facts = []
    if p.rank is not None:
        facts.append(f"rank {p.rank}" + (f" of {len(p.ranks)}" if len(p.ranks) > 1 else ""))
    facts.append(f"{p.steps} step{'s' if p.steps != 1 else ''}")
    facts.append(f"step {format_us(p.step_time_us)}")
    wall = p.wall_step_time_us
    if wall and wall > p.step_time_us * 1.1:  # host-bound phases (data loading) lie outside the device step
        facts[-1] += f" on device, {format_us(wall)} wall"
    facts.append(f"{format_share(p.mapped_share)} of {p.time_source} time mapped to code")
    lines += _wrap(" · ".join(facts), 2)
    lines += _wrap(breakdown_line(p), 2)
    c = p.cluster
    slow = next((r for r in c.ranks if r.rank == c.slowest_rank), None) if c is not None and len(c.ranks) > 1 else None
    if c is not None and slow is not None:
        lines += _wrap(
            f"cluster: {len(c.ranks)} ranks, slowest rank {c.slowest_rank} "
            f"({format_us(slow.step_time_us)}/step, +{(c.slowest_over_fastest - 1) * 100:.1f}% vs fastest); "
            f"analysing rank {c.analysed_rank}" + (f": {c.analysed_because}" if c.analysed_because else ""),
            2,
        )
        for r in c.ranks:
            lines.append(
                f"    rank {r.rank:>3}  step {format_us(r.step_time_us):>10}  "
                f"comm not overlapped {format_share(r.comm_share):>6}"
            )
    if not p.has_call_stacks:
        lines += _wrap("no Python call stacks in this profile: locations are approximate", 2)
    for issue in p.issues[:5]:
        lines += _wrap(f"note: {visible(issue)}", 2)
    if len(p.issues) > 5:
        lines.append(f"  note: … and {len(p.issues) - 5} more load notes")
    if p.step_time_source == "capture length":
        lines += _wrap("note: no step markers; step time = capture length / steps", 2)
    return lines


def breakdown_line(p: ProfileView) -> str:
    """The time model per step (docs/numbers.md), and where its figures come from."""
    b = p.breakdown
    if not b.steps:
        return "no device tasks: no step breakdown"
    m = b.mean

    def us(v: float | None) -> str:
        return format_us(v or 0.0)

    return (f"per step: computing {us(m.computing_us)} · communication {us(m.communication_us)} "
            f"({us(m.communication_not_overlapped_us)} not overlapped) · free {us(m.free_us)} · "
            f"device work {format_us(p.device_time_us)} ({b.source})")


_SEV_WIDTH = max(len(x.value) for x in Severity)


def _finding_lines(f: FindingRow, style: _Style) -> list[str]:
    """``  line:col severity CODE message`` with the message wrapped under itself."""
    where = f"{f.line}:{f.column}" if f.path is not None else "-"
    sev = style(f.severity.value.ljust(_SEV_WIDTH), _COLORS[f.severity])
    code = visible(f.code)
    prefix = f"  {where:>7} {f.severity.value.ljust(_SEV_WIDTH)} {code:<6} "
    indent = len(prefix)
    message = visible(" ".join(f.message.split()))
    body = textwrap.wrap(message, width=WIDTH - indent, break_on_hyphens=False, break_long_words=False) or [""]
    lines = [f"  {where:>7} {sev} {style(code, _BOLD):<6} " + body[0]] + [" " * indent + b for b in body[1:]]
    if f.path is not None and f.confidence == _INFERRED:  # beside the severity, never lowering it
        lines += [style(x, _DIM) for x in _wrap("anchor inferred: no call stack, the line was found by pattern search",
                                                indent)]
    for fix in f.fixes[:2]:
        lines += [style(x, _DIM) for x in _wrap(f"fix: {visible(fix.label)}", indent)]
    if len(f.fixes) > 2:
        lines.append(style(" " * indent + f"… and {len(f.fixes) - 2} more fixes", _DIM))
    return lines


def start_here(view: Report, style: _Style) -> list[str]:
    """The report's opening block: the top findings by saving (hints.consolidate.start_here), each
    with how much, what to change and where."""
    top = [view.findings[i] for i in view.start_here]
    if not top:
        return []
    out = [style("Start here", _BOLD)]
    for n, f in enumerate(top, 1):
        out += _wrap(f"{n}. {_place(f.path, f.line)}  {visible(f.code)} {visible(f.name)}", 2)
        out += _wrap(f.saving_text, 5)
        out += _wrap(f"change: {visible(' '.join(f.change.split()))}", 5)
    return out + [""]


def findings_by_file(findings: Iterable[FindingRow], style: _Style) -> list[str]:
    """Findings grouped by file in the order given (``Report.by_saving``: the files and the
    findings in each by saving, so the biggest lever of a file comes first)."""
    out: list[str] = []
    by_file: dict[str, list[FindingRow]] = {}
    for f in findings:
        key = visible(f.path) if f.path is not None else "(profile)"
        by_file.setdefault(key, []).append(f)
    for path, items in by_file.items():
        out.append(style(path, _BOLD))
        for f in items:
            out += _finding_lines(f, style)
        out.append("")
    return out


def hotspots(p: ProfileView, rows: Iterable[HotspotRow]) -> list[str]:
    spans = list(rows)[:TOP_HOTSPOTS]
    if not spans:
        return []
    out = [f"Hotspots ({p.time_source} time per step)", "   share    time/step  location / top operators"]
    for h in spans:
        loc = _place(h.path, h.line)
        if h.confidence == _INFERRED:
            loc += "  (inferred: no call stack)"  # ranked with the others, marked
        out.append(f"  {format_share(h.share):>6} {format_us(h.device_time_us):>12}  {loc}")
        code = visible(" ".join(h.code.split()))
        if code:
            out.append(f"{'':23}{textwrap.shorten(code, WIDTH - 23, placeholder='…')}")
        ops = ", ".join(f"{visible(name)} ×{count}" for name, count in h.ops_by_type[:3])
        if ops:
            out.append(f"{'':23}{textwrap.shorten(ops, WIDTH - 23, placeholder='…')}")
    return out


def baseline(cmp: BaselineView | None) -> list[str]:
    if cmp is None:
        return []
    change = f" ({cmp.step_change_pct:+.1f}%)" if cmp.step_change_pct is not None else ""
    out = [
        f"Compared with {visible(cmp.path)}:",
        f"  step time {format_us(cmp.step_time_us)} → {format_us(cmp.current_step_time_us)}{change}",
    ]
    for title, items in (("improved", cmp.improved), ("regressed", cmp.regressed)):
        for c in items[:5]:
            r = f" ({c.change * 100:+.0f}%)" if c.change is not None else " (new)"
            out.append(f"  {title:9} {_place(c.path, c.line)}: {format_us(c.before_us)} → {format_us(c.after_us)}/step{r}")
    if cmp.findings:
        out.append("  findings: " + ", ".join(f"{n} {state}" for state, n in cmp.state_counts()))
        for c in cmp.findings:
            figures = " → ".join("—" if x is None else f"{format_us(x.device_time_us)}/step" for x in (c.before, c.after))
            out.append(f"  {c.state:10} {visible(c.code)} {_place(c.path, c.line)}: {figures}")
    return out


MAX_RANK_GROUPS = 20  # --ranks all: the groups on most ranks; the JSON lists every one


def all_ranks(every: RankFindingsView | None) -> list[str]:
    """``--ranks all``: each finding on several ranks once, with how many ranks, the range of its
    time per step over them and the worst rank; the ranks named when not all have it."""
    if every is None:
        return []
    n = every.total
    out = [f"Every rank ({n:,} ranks, {every.engine}):"]
    for g in every.groups[:MAX_RANK_GROUPS]:
        low, high = format_us(g.low_us), format_us(g.high_us)
        spread = "" if g.high_us <= 0 else f", {high}/step" if low == high else f", {low}–{high}/step"
        out.append(f"  {g.code} on {len(g.ranks):,} of {n:,} ranks{spread}; worst rank {g.worst_rank}")
        where = f"{_place(g.path, g.line)}  " if g.path else ""
        out += _wrap(where + visible(g.message), 4)
        if len(g.ranks) < n:
            out += _wrap(f"ranks {document.rank_ranges(g.ranks)}", 4)
    if len(every.groups) > MAX_RANK_GROUPS:
        out.append(f"  … and {len(every.groups) - MAX_RANK_GROUPS} more (--format json lists every one)")
    if not every.groups:
        out.append("  no findings on any rank")
    for r, error in every.ranks_failed:
        out += _wrap(f"rank {r} not analysed: {visible(error)}", 2)
    return out + [""]


def render(run: CheckRun, *, color: bool = False) -> str:
    return render_report(report(run), color=color)


def render_report(view: Report, *, color: bool = False) -> str:
    """The text report of a check run's view models: every figure is one of their rows."""
    style = _Style(color)
    out: list[str] = start_here(view, style)
    for n, p in enumerate(view.profiles):
        out += header(p, style)
        out.append("")
        out += findings_by_file(view.by_saving(n), style)
        out += all_ranks(p.rank_findings)
        hs = hotspots(p, view.hotspots_of(n))
        if hs:
            out += hs + [""]
        bl = baseline(p.baseline)
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
    return render_concise_report(report(run))


def render_concise_report(view: Report) -> str:
    lines = [concise_line(f) for f in view.by_place()]
    return "\n".join(lines) + ("\n" if lines else "")
