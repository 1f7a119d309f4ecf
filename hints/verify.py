"""Verify a change per finding: the findings of a baseline profile against those of the new one.

Both runs are attributed against the *current* source, so a finding is matched across them by its
code, its file and the text of the line it is anchored on (with an occurrence number when that text
repeats), never by line number alone: a line that moved keeps its match, a line that now holds
other code does not take over an old finding.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from msprof_lsp.hints.finding import Finding
from msprof_lsp.mapping.source.positions import split_lines
from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.units import format_us

# A finding whose attributable time per step changed by at most this fraction of its baseline time
# is "persisting": re-profiling the same code moves figures by a few percent (docs/numbers.md).
TOLERANCE = 0.05


class FindingState(str, enum.Enum):
    RESOLVED = "resolved"  # in the baseline, gone now
    IMPROVED = "improved"  # both runs, time down by more than TOLERANCE
    PERSISTING = "persisting"  # both runs, within TOLERANCE
    REGRESSED = "regressed"  # both runs, time up by more than TOLERANCE
    NEW = "new"  # only in the new run


@dataclass(frozen=True, slots=True)
class FindingChange:
    code: str
    state: FindingState
    before: Finding | None  # the baseline's finding (None: new)
    after: Finding | None  # the new run's finding (None: resolved)

    @property
    def finding(self) -> Finding:
        """The finding to show: the current one, or the baseline's when it is resolved."""
        f = self.after or self.before
        assert f is not None
        return f

    def note(self) -> str:
        """What the editor appends to the finding's message: its state and time per step on both
        sides, e.g. "improved since the baseline: 1,436 → 312 µs/step"."""
        if self.state is FindingState.NEW:
            return "new since the baseline"
        figures = " → ".join("—" if x is None else format_us(x.time_per_step_us) for x in (self.before, self.after))
        return f"{self.state.value} since the baseline: {figures}/step"


def line_text(path: str, line: int, cache: dict[str, list[str]]) -> str:
    """The stripped text of ``path``'s 1-based ``line`` (empty when unreadable or out of range)."""
    if path not in cache:
        text = safe_io.read_source_text(path)
        cache[path] = split_lines(text) if text is not None else []
    lines = cache[path]
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def place_keys(findings: list[Finding], cache: dict[str, list[str]]) -> list[tuple[str, str, str, int]]:
    """Per finding (code, file, anchored line's text or the message when unanchored, occurrence)."""
    seen: dict[tuple[str, str, str], int] = {}
    out = []
    for f in findings:
        path = f.span.path if f.span else ""
        text = line_text(f.span.path, f.span.line, cache) if f.span else ""
        key = (f.code, path, text)
        n = seen.get(key, 0)
        seen[key] = n + 1
        out.append((*key, n))
    return out


def _state(before: Finding, after: Finding, tolerance: float) -> FindingState:
    b, a = before.time_per_step_us, after.time_per_step_us
    if b <= 0 and a <= 0:  # a finding without attributable time: compare its share
        b, a = before.share, after.share
    if b <= 0:
        return FindingState.REGRESSED if a > 0 else FindingState.PERSISTING
    ratio = a / b - 1.0
    if ratio < -tolerance:
        return FindingState.IMPROVED
    if ratio > tolerance:
        return FindingState.REGRESSED
    return FindingState.PERSISTING


def classify(before: list[Finding], after: list[Finding], *, tolerance: float = TOLERANCE,
             lines: dict[str, list[str]] | None = None) -> list[FindingChange]:
    """Every baseline finding as resolved / improved / persisting / regressed, then the new ones;
    sorted by file, line and code of the finding shown. ``lines``: the analysed text of files
    (an editor's open buffers), read from disk where missing."""
    # occurrence numbers follow source order on both sides
    before, after = sorted(before, key=Finding.sort_key), sorted(after, key=Finding.sort_key)
    cache: dict[str, list[str]] = dict(lines or {})
    now = dict(zip(place_keys(after, cache), after))
    matched: set[int] = set()
    out = []
    for key, b in zip(place_keys(before, cache), before):
        a = now.get(key)
        if a is None:
            out.append(FindingChange(b.code, FindingState.RESOLVED, b, None))
        else:
            matched.add(id(a))
            out.append(FindingChange(b.code, _state(b, a, tolerance), b, a))
    out += [FindingChange(a.code, FindingState.NEW, None, a) for a in after if id(a) not in matched]
    out.sort(key=lambda c: c.finding.sort_key())
    return out
