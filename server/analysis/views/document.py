"""The pieces of the reports that every view model and renderer shares: paths relative to the
run's cwd, times in µs, a finding's saving and advice as printed (the JSON document's nested
parts are typed rows in ``parts``).

Positions: lines 1-based, columns 1-based code points; paths relative to the cwd with "/".
Times: µs per step unless a key says otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from msprof_lsp.hints.finding import Finding, Fix
from msprof_lsp.mapping.source.heat import SpanHeat
from msprof_lsp.mapping.units import format_share, format_us

SCHEMA_VERSION = 1
MAX_HOTSPOTS = 20


def rel_path(path: str | os.PathLike[str], cwd: Path) -> str:
    """Path relative to ``cwd`` with "/" separators (absolute when on another drive)."""
    try:
        rel = os.path.relpath(os.fspath(path), cwd)
    except ValueError:  # pragma: no cover - Windows, other drive
        rel = os.fspath(path)
    return rel.replace(os.sep, "/")


def us(ns: float) -> float:
    """ns as µs, rounded to the ns (every time figure of the reports)."""
    return round(ns / 1000, 3)


def fix_label(fix: Fix) -> str:
    """The fix title, marked "(review)" when it changes behaviour (fix titles often say so already)."""
    if fix.safe or "review" in fix.title.lower():
        return fix.title
    return f"{fix.title} (review)"


def saving_text(f: Finding) -> str:
    """How much a finding saves per step, as the reports print it (docs/report.md "Start here")."""
    s = f.saving
    if s is not None and s.known:
        rng = ""
        if s.low_us is not None and s.high_us is not None:
            rng = f" ({format_us(s.low_us)}–{format_us(s.high_us)})"
        return f"saves {format_us(s.us_per_step)}/step{rng}"
    return (f"saving unknown, {format_us(f.time_per_step_us)}/step charged "
            f"({format_share(f.share)} of the {f.share_of.value.replace('-', ' ')})")


def advice(f: Finding) -> str:
    """What to change: the first fix's title, else the message's advice (its sentence after the
    diagnosis, docs/rules/README.md "Message")."""
    if f.fixes:
        return fix_label(f.fixes[0])
    parts = f.message.split(". ", 1)
    return parts[1].strip() if len(parts) > 1 else f.message


def hot_spans(heat) -> list[SpanHeat]:  # noqa: ANN001 - SourceHeat
    """Spans with time, most first (spans of host-only calls carry none and are no hotspot)."""
    return [h for h in heat.spans if h.per_step_ns > 0]


def rank_ranges(ranks: Sequence[int]) -> str:
    """``0-3, 8, 10-11``: sorted ranks with runs of consecutive ones as ranges."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
