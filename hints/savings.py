"""The saving of each finding: its fix's ``Effect`` replayed over the recorded steps (docs/savings.md).

The estimate replays each analysed step with the change's ``factor``, the low end with ``worst``
and the high end with ``best`` (mapping/source/replay.py); each is the unchanged replay's length
minus the changed one's, so what the model misses cancels. The mean over the analysed steps,
clamped to [0, the step]. "unknown" with the reason where the rule has no defensible model, the
effect is missing, or the profile's steps cannot be replayed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

import numpy as np

from msprof_lsp.mapping.source.critical_path import graph_inputs
from msprof_lsp.mapping.source.replay import WhatIf, replay_base, what_if
from msprof_lsp.mapping.units import NS_PER_US

from .context import RuleContext
from .finding import Change, Effect, Finding, Saving, Target

ENV_AB = "A/B test: the profile cannot show the effect of an environment variable"
log = logging.getLogger("msprof_lsp.hints")

NOTICE = "a notice about the capture or the sources, not a change to the step"

# Rules without a model: why not (docs/savings.md "Rules without a model")
UNMODELLED: dict[str, str] = {
    **{f"NPU24{i}": ENV_AB for i in range(1, 8)},
    **{f"NPU90{i}": NOTICE for i in range(0, 4)},
    "NPU105": "A/B test: device idle time has several causes; the saving is that of the finding that names the cause",
    "NPU107": "A/B test: how long compilation would take after the fix is not in the profile",
    "NPU109": "A/B test: a memory setting changes the allocator, which the profile does not time",
    "NPU202": "A/B test: the rate a tuned kernel would reach is not in the profile",
    "NPU203": "A/B test: how collectives behave with bigger packets is not in the profile",
    "NPU204": "A/B test: a faster link's transfer rate is not in the profile",
    "NPU205": "A/B test: whether the copies can be avoided depends on the code that needs them",
    "NPU206": "A/B test: the rate a pipe-bound kernel would reach after tuning is not in the profile",
    "NPU207": "A/B test: the saving is on the slow rank, whose recording this is not",
    "NPU208": "A/B test: the saving is on the slow rank, whose recording this is not",
    "NPU209": "A/B test: the rate a pipe-bound kernel would reach after tuning is not in the profile",
    "NPU218": "A/B test: the kernels' time at the nominal clock is not in the profile",
    "NPU219": "A/B test: how collectives behave with another algorithm is not in the profile",
    "NPU230": "A/B test: how often the collector runs after tuning is not in the profile",
    "NPU250": "A/B test: the inference settings change the whole graph",
    "NPU251": "the critical path names where the time goes; the saving is that of the finding for that work",
}


def fill_savings(findings: Sequence[Finding], ctx: RuleContext) -> None:
    """Set ``saving`` on every finding (once per job, after the rules)."""
    for f in findings:
        if f.evidence.get("notice") == "rule-error":
            f.saving = Saving.unknown("unknown: the rule did not run")
            continue
        try:
            f.saving = saving_of(ctx, f.code, f.effect)
        except Exception as exc:  # noqa: BLE001 - a replay that fails costs one saving, not the findings
            log.error("saving of %s failed: %s: %s", f.code, type(exc).__name__, exc)
            log.debug("saving traceback", exc_info=True)
            f.saving = Saving.unknown(f"unknown: the replay failed ({type(exc).__name__})")


def saving_of(ctx: RuleContext, code: str, effect: Effect | None) -> Saving:
    """The saving of ``effect`` (rule ``code``), once per loaded profile and effect: the editor
    re-runs the rules on every edit, and the replays depend on the profile alone
    (``profile.derived.memo``, the one memo of profile-derived values)."""
    p = ctx.profile
    digest = hashlib.blake2b(repr((code, effect)).encode(), digest_size=16).hexdigest()
    return p.derived.memo(f"saving/{digest}", graph_inputs(p), lambda: _saving_of(ctx, code, effect))


def _saving_of(ctx: RuleContext, code: str, effect: Effect | None) -> Saving:
    if effect is None:
        return Saving.unknown(UNMODELLED.get(code.upper(), "unknown: no model of this rule's fix yet"))
    if effect.unknown:
        return Saving.unknown(effect.unknown)
    if not effect.changes:
        return Saving.unknown("unknown: the fix touches nothing the profile recorded")
    base = replay_base(ctx.profile)
    if base.unavailable is not None:
        return Saving.unknown(f"unknown: the steps cannot be replayed ({base.unavailable})")
    runs: dict[str, float] = {}
    for end in ("factor", "worst", "best"):
        runs[end] = _mean_saving_ns(ctx, effect.changes, end)
    low, high = sorted((runs["worst"], runs["best"]))
    est = min(max(runs["factor"], low), high)
    steps = len(base.steps)
    basis = f"{effect.basis}; replayed over {steps} step{'s' if steps != 1 else ''}"
    return Saving(est / NS_PER_US, low / NS_PER_US, high / NS_PER_US, basis)


def _mean_saving_ns(ctx: RuleContext, changes: Sequence[Change], end: str) -> float:
    """The mean per-step saving of ``changes`` at their ``end`` factor, each step's clamped to
    [0, its length]."""
    parts: dict[Target, tuple[list[int], list[float]]] = {t: ([], []) for t in Target}
    for c in changes:
        f = float(getattr(c, end))
        parts[c.target][0].extend(c.rows)
        parts[c.target][1].extend([f] * len(c.rows))
    k_rows, k_f = parts[Target.KERNELS]
    h_rows, h_f = parts[Target.HOST_OPS]
    s_rows, s_f = parts[Target.SYNC_CALLS]
    # a sync call is removed when its factor says so (below one half), kept otherwise
    removed = [r for r, f in zip(s_rows, s_f) if f < 0.5]
    change = WhatIf(np.asarray(k_rows, np.int64), np.asarray(k_f), np.asarray(h_rows, np.int64), np.asarray(h_f),
                    np.asarray(removed, np.int64))
    out = what_if(ctx.profile, change)
    if not out:
        return 0.0
    return float(np.mean([min(max(s.saving_ns, 0), s.base_ns) for s in out]))
