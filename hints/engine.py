"""Run the rules over one profile: select/ignore, severity, min_share, suppressions, isolation.

``run_rules`` is the single entry point the server and ``--check`` call; it ends by folding
findings that charge the same time into one (``hints.consolidate``). Rules return fix offers;
with ``fixes=True`` (``--check``, tests) they are expanded here into edits, one parse per file;
the language server passes False and expands them when code actions are asked for. A rule that raises does
not stop the others: it becomes one ``Information`` notice naming the rule and the error (and
the traceback goes to the log). Output order is stable: path, line, column, code, message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .context import RuleContext
from .finding import Finding, Severity
from .consolidate import consolidate
from .fixes.offers import expand
from .source_query import runs_pytorch
from .registry import Rule, all_rules
from .fixed_in_source import mark_fixed
from .savings import fill_savings

log = logging.getLogger("msprof_lsp.hints")


def _ordered(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (*f.sort_key(), f.message))


def _crash_notice(rule: Rule, exc: BaseException) -> Finding:
    return Finding(
        code=rule.code,
        name=rule.name,
        severity=Severity.INFO,
        message=f"{rule.code} {rule.name} could not run on this profile ({type(exc).__name__}: {exc}); the other rules ran.",
        span=None,
        evidence={"notice": "rule-error", "error": f"{type(exc).__name__}: {exc}"},
    )


# A finding whose time per step prints as "0.0 µs" has nothing to save (issue 23's "findings of
# 0.0 µs"): the one place every rule's findings pass drops it, whatever minShare says.
ZERO_US = 0.05


def _settle(f: Finding, rule: Rule, ctx: RuleContext) -> Finding | None:
    """The one place a finding's severity is decided (the configured override, else the rule's
    fixed severity, else by share), the zero-time drop and the min_share cut (fixed-severity
    rules -- settings, notices -- carry no time and are never cut)."""
    override = ctx.config.severity_override(f.code)
    if override is not None:
        f.severity = override
        fixed = rule.fixed_severity
    elif rule.fixed_severity:
        assert rule.default_severity is not None
        f.severity = rule.default_severity
        fixed = True
    else:
        fixed = False
        computed = ctx.severity(f.code, f.share)
        # A rule may lower its own finding (a weak variant), never raise it above the share.
        f.severity = computed if computed.rank <= f.severity.rank else f.severity
    if not rule.fixed_severity and f.time_per_step_us < ZERO_US:
        return None
    if not fixed and f.share < ctx.config.min_share:
        return None
    return f


def run_rules(ctx: RuleContext, rules: Sequence[Rule] | None = None, *, fixes: bool = True) -> list[Finding]:
    """All findings for this profile after selection, severity, ``min_share`` and suppressions."""
    # a rule that reads what the others recorded (NPU901: their Level1 skips) runs after them all
    chosen = sorted(all_rules() if rules is None else rules, key=lambda r: r.after_others)
    pytorch = runs_pytorch(ctx)
    out: list[Finding] = []
    for rule in chosen:
        if not ctx.config.enabled(rule.code) or not rule.applies_to(ctx):
            continue
        if rule.pytorch_only and not pytorch:
            continue  # no PyTorch advice for a program that is not PyTorch
        try:
            produced = list(rule.check(ctx))
        except Exception as exc:  # noqa: BLE001 - one broken rule must not cost the user every other hint
            # one line (a bad input is never a traceback on the user's terminal); the traceback
            # only at DEBUG, for whoever debugs the rule
            log.error("rule %s (%s) failed: %s: %s", rule.code, rule.name, type(exc).__name__, exc)
            log.debug("rule %s traceback", rule.code, exc_info=True)
            out.append(_crash_notice(rule, exc))
            continue
        for f in produced:
            if not ctx.config.enabled(f.code):
                continue
            settled = _settle(f, rule, ctx)
            if settled is None or ctx.is_suppressed(settled):
                continue
            out.append(mark_fixed(settled, ctx))
    # what each fix would save (docs/savings.md), from the effects the rules gave: savings first,
    # then anything that compares findings by them
    fill_savings(out, ctx)
    # one finding per cause: after the cuts above, so a selected-out or suppressed rule never
    # joins a group (docs/rules/README.md "One finding per cause")
    out = consolidate(out, ctx)
    if fixes:
        expand(out, ctx.source_text)
    return _ordered(out)
