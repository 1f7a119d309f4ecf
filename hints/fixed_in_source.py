"""Findings whose fix is already in the source (the profile predates the edit).

A finding offers fixes at anchors in the current text; when the text at an offer's anchor already
has what that fix would write (the catalog's ``applied`` test: workers and pinned memory on the
DataLoader, ``fused=True`` on the optimizer), the profile was recorded before the fix. The
finding stays as evidence of the old run, drops to hint, says so, and offers to record a new
profile of the training loop instead of the fix. A rule that sees the fix itself (NPU108: the
``synchronize()`` between the recorded neighbours is gone) calls ``as_fixed``.
"""

from __future__ import annotations

from msprof_lsp.mapping.source.positions import split_lines
from msprof_lsp.mapping.spans import Span

from . import source_query as sq
from .context import RuleContext
from .finding import Finding, Severity
from .fixes import make_offer, spec_of
from .fixes.profiling import insert_profiler

FIXED_NOTE = "fixed in the source since this profile was recorded; re-profile to confirm"


def _anchor_text(text: str, anchor: Span | int) -> str:
    lines = split_lines(text)
    first, last = (anchor.line, anchor.end_line) if isinstance(anchor, Span) else (anchor, anchor)
    return "\n".join(lines[max(first - 1, 0):last])


def fixed_by(f: Finding, ctx: RuleContext) -> str | None:
    """The id of the offered fix the source already has, else None."""
    for o in f.offers:
        spec = spec_of(o.fix)
        if spec is None or spec.applied is None:
            continue
        text = ctx.source_text(o.path)
        if text is not None and spec.applied(_anchor_text(text, o.anchor)):
            return o.fix
    return None


def mark_fixed(f: Finding, ctx: RuleContext) -> Finding:
    """``f`` as fixed in the source when an offer's anchor already has its fix (after the rules run)."""
    fix = fixed_by(f, ctx)
    return f if fix is None else as_fixed(f, ctx, fix)


def as_fixed(f: Finding, ctx: RuleContext, fix: str) -> Finding:
    """``f`` (of the profile as recorded) with ``fix`` already in the source: a hint that says so,
    offering to record a new profile instead of the fix. Rules that see the fix themselves (a
    removed statement has no anchor left to test) call this directly."""
    if "fixed_in_source" in f.evidence:
        return f
    f.severity = Severity.HINT
    f.message = f"{f.message.rstrip()} Now {FIXED_NOTE}."
    f.evidence["fixed_in_source"] = fix
    f.fixes = []
    loop, _conf = sq.training_loop(ctx)
    f.offers = [make_offer(insert_profiler, loop.path, loop)] if loop is not None else []
    return f
