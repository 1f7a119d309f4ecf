"""Data a rule needs that the capture settings may have left out (docs/formats.md).

At ``profiler_level=Level0`` torch_npu prunes the CANN layer from trace_view.json (no
``AscendCL@...`` events) and writes no op/api statistics. A rule that reads that data must not
conclude "no problem" from its absence: it calls ``ctx.needs_level1(self)`` first and,
when that returns True, yields nothing. The skip is recorded, and notice NPU901 names every
skipped rule with the data it would have needed (NPU901 declares ``after_others``: the engine
runs it after every other rule, whatever the codes, so each skip is recorded before it reads them).

Rules declare that data on their declaration (``Rule.level1``), which ``needs_level1`` records:
also the static list of rules that *may* need Level1 data (``registry.declared_level1``: docs,
NPU901's evidence). Only the skips recorded in the context are named as
skipped -- a declared rule can still run fully (NPU230 with recorded GC events needs no CANN
layer).
"""

from __future__ import annotations

from msprof_lsp.mapping.profile.model import Profile, ProfileKind

LEVEL0_LEVELS = frozenset({"Level0", "Level_none"})
"""``_profiler_level`` values without the CANN layer."""

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
