"""Data a rule needs that the capture settings may have left out (docs/formats.md).

At ``profiler_level=Level0`` torch_npu prunes the CANN layer from trace_view.json (no
``AscendCL@...`` events) and writes no op/api statistics. A rule that reads that data must not
conclude "no problem" from its absence: it calls ``ctx.needs_level1(code, reason)`` first and,
when that returns True, yields nothing. The skip is recorded, and notice NPU901 names every
skipped rule with the data it would have needed (the engine runs rules in code order, so every
NPU1xx-NPU8xx rule has run, and recorded its skip, before NPU901).

Rules also ``declare_level1`` their need once at import: the static list of rules that *may*
need Level1 data (docs, NPU901's evidence). Only the skips recorded in the context are named as
skipped -- a declared rule can still run fully (NPU230 with recorded GC events needs no CANN
layer).
"""

from __future__ import annotations

from msprof_lsp.mapping.profile.model import Profile, ProfileKind

LEVEL0_LEVELS = frozenset({"Level0", "Level_none"})
"""``_profiler_level`` values without the CANN layer."""

_DECLARED: dict[str, str] = {}


def declare_level1(code: str, reason: str) -> None:
    """Register at import that rule ``code`` may need Level1 data (``reason``: which data)."""
    _DECLARED[code.upper()] = reason


def declared_level1() -> dict[str, str]:
    """Rule code -> the Level1 data it may need, for every rule that declared one."""
    return dict(_DECLARED)


def level1_missing(profile: Profile) -> str | None:
    """Why the profile lacks Level1 data (None when it has it or the producer has no levels).

    The level comes from profiler_info*.json; a torch_npu text result read without it (a lone
    trace_view.json) that holds device kernels but not one CANN API event was pruned the same way.
    """
    level = profile.meta.level
    if level in LEVEL0_LEVELS:
        return f"captured at profiler_level {level}"
    if level or profile.meta.kind is not ProfileKind.TORCH_NPU:
        return None
    if len(profile.kernels) and not (profile.host_events["cat"] == "cann").any():
        return "no CANN API events in the trace (captured at Level0?)"
    return None
