"""One finding per cause, and where to start (docs/rules/README.md "One finding per cause",
docs/report.md "Start here").

``consolidate`` runs once per job at the end of ``engine.run_rules``, after selection, severity,
``minShare`` and suppressions (so a selected-out or suppressed rule never takes part): findings
whose charges (``hints.charges``) overlap by at least half of the smaller one's become one. The
finding whose fix acts on the cause keeps its place; the others become its related information,
their codes listed in ``evidence["same_cause"]``, so no time is counted twice.

``start_here`` and ``saving_order`` rank findings by their saving for every front-end (JSON,
text, HTML, the editor's status bar and code lenses); no renderer ranks on its own.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Sequence

from msprof_lsp.mapping.units import format_us

from .charges import Charges, Timeline, charges
from .context import RuleContext
from .finding import Finding, Related

MERGE_OVERLAP = 0.5  # of the smaller finding's charged time, shared with the other
SAME_CAUSE = "same cause"  # how a folded-in finding's related entry starts
START_HERE = 3
NOTICE_PREFIX = "NPU9"  # NPU900-NPU903: notices about the profile itself, nothing to change in the code
# Rules whose finding names a symptom more broadly than the rule that names its cause (the critical
# path's bound, device idle, a kernel's pipe verdict): they give way to a more specific finding.
GENERALITY = {"NPU251": 3, "NPU105": 2, "NPU202": 1, "NPU206": 1, "NPU209": 1}


def consolidate(findings: list[Finding], ctx: RuleContext) -> list[Finding]:
    """The findings with each group that charges the same time folded into one (in input order)."""
    if len(findings) < 2:
        return findings
    t = Timeline(ctx)
    # a finding whose fix is already in the source is the old run's evidence, a hint to re-profile
    # (hints.fixed_in_source): it charges nothing now and folds nothing in
    charged = [{} if "fixed_in_source" in f.evidence else charges(t, f) for f in findings]
    kept: list[Finding] = []
    alike = lambda a, b: charged_alike(findings[a], charged[a], findings[b], charged[b])  # noqa: E731
    for members in _groups(charged, [GENERALITY.get(f.code, 0) > 0 for f in findings], alike):
        if len(members) == 1:
            kept.append(findings[members[0]])
            continue
        codes = {findings[i].code for i in members}
        keeper = min(members, key=lambda i: _keeper_key(findings[i], charged[i], codes))
        others = sorted((i for i in members if i != keeper), key=lambda i: -findings[i].time_per_step_us)
        merge_into(findings[keeper], [findings[i] for i in others])
        kept.append(findings[keeper])
    order = {id(f): n for n, f in enumerate(findings)}
    return sorted(kept, key=lambda f: order[id(f)])


def overlap(a: Charges, b: Charges) -> float:
    """The ns both charge (per key, the smaller of the two weights; summed correctly rounded, so in
    any order)."""
    both = a.keys() & b.keys()
    return math.fsum(map(min, map(a.__getitem__, both), map(b.__getitem__, both)))


def same_cause(a: Charges, b: Charges) -> bool:
    """At least ``MERGE_OVERLAP`` of the smaller charge is charged by the other too."""
    if not a or not b:
        return False
    return overlap(a, b) >= MERGE_OVERLAP * min(sum(a.values()), sum(b.values()))


def _modelled(f: Finding) -> bool:
    """The finding's fix has a model: it names the work it changes (its effect's rows)."""
    e = f.effect
    return e is not None and not e.unknown and any(c.rows for c in e.changes)


def _work(c: Charges) -> Charges:
    """The charges on recorded work (kernels, host ops, syncs), without the device idle they cover."""
    return {k: v for k, v in c.items() if k[0] != "idle"}


def charged_alike(a: Finding, ca: Charges, b: Finding, cb: Charges) -> bool:
    """Whether findings ``a`` and ``b`` (charging ``ca``, ``cb``) are one cause. Two modelled fixes
    that change different work are two causes even where the device idle they cover overlaps (a
    sync, then a data fetch, in one idle stretch): each saving is its own replay."""
    if _modelled(a) and _modelled(b):
        return same_cause(_work(ca), _work(cb))
    return same_cause(ca, cb)


def _groups(charged: Sequence[Charges], general: Sequence[bool],
            alike: Callable[[int, int], bool] | None = None) -> list[list[int]]:
    """Groups of findings that charge the same time, in input order. Specific findings join
    transitively; a general one (``GENERALITY``: a broad symptom such as device idle) joins the one
    group it shares the most time with, so it never bridges two causes (the DataLoader's wait and
    the optimizer's host time both overlap the device idle, and stay two). Two ``modelled`` findings
    (fixes with an effect) are compared on the work they change only, never on the idle they cover."""
    parent = list(range(len(charged)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    n = len(charged)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if not charged[a].keys().isdisjoint(charged[b].keys())]
    alike = alike if alike is not None else (lambda a, b: same_cause(charged[a], charged[b]))
    same = [(a, b) for a, b in pairs if alike(a, b)]
    for a, b in same:
        if not general[a] and not general[b] and root(a) != root(b):
            parent[root(b)] = root(a)
    best: dict[int, tuple[float, int]] = {}  # general finding -> (shared ns, specific partner)
    for a, b in same:
        for g, o in ((a, b), (b, a)):
            if general[g] and not general[o]:
                shared = overlap(charged[g], charged[o])
                if shared > best.get(g, (-1.0, -1))[0]:
                    best[g] = (shared, o)
    for g, (_, o) in best.items():
        parent[root(g)] = root(o)
    for a, b in same:  # general findings with no specific partner: among themselves
        if general[a] and general[b] and a not in best and b not in best and root(a) != root(b):
            parent[root(b)] = root(a)
    groups: dict[int, list[int]] = defaultdict(list)
    for i in range(len(charged)):
        groups[root(i)].append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def _keeper_key(f: Finding, charged: Charges, codes: set[str]) -> tuple:
    """The finding whose fix acts on the cause comes first: one with a fix, not pointing at another
    member's rule (NPU251's ``see``), the most specific rule, anchored; then the largest saving,
    the most time of its own (it explains more of the shared time), the narrowest charge."""
    points_elsewhere = f.evidence.get("see") in codes - {f.code}
    return (not (f.fixes or f.offers), points_elsewhere, GENERALITY.get(f.code, 0), f.span is None,
            -_saving_us(f), -f.time_per_step_us, sum(charged.values()), f.sort_key())


def merge_into(keeper: Finding, others: Sequence[Finding]) -> None:
    """``others`` become related information of ``keeper`` (their message, at their place or the
    keeper's); their codes go to ``evidence["same_cause"]`` and their code, message, share, time
    and saving applied alone to ``evidence["same_cause_findings"]``; their fixes join the keeper's, the highest
    severity stays."""
    same = list(keeper.evidence.get("same_cause", []))
    folded = list(keeper.evidence.get("same_cause_findings", []))
    for o in others:
        span = o.span or keeper.span
        alone = o.saving if o.saving is not None and o.saving.known else None
        # its own fix may be a lever of its own (padding the GEMMs autocast also speeds up): what
        # it saves applied alone, not added to the keeper's (the two act on the same time)
        tail = f" (applied alone, its fix saves {format_us(alone.us_per_step)}/step)" if alone is not None else ""
        if span is not None:
            keeper.related.append(Related(span, f"{SAME_CAUSE}, {o.code} {o.name}: {o.message}{tail}"))
        same += [o.code, *o.evidence.get("same_cause", [])]
        # the figures stay readable where there is no place for a related entry (profile-level findings)
        folded += [{"code": o.code, "message": o.message, "share": round(o.share, 6), "share_of": o.share_of.value,
                    "time_per_step_us": round(o.time_per_step_us, 3),
                    "saving": None if o.saving is None else dataclasses.asdict(o.saving)},
                   *o.evidence.get("same_cause_findings", [])]
        if o.severity.rank > keeper.severity.rank:
            keeper.severity = o.severity
        titles = {(x.title, x.edits) for x in keeper.fixes}
        keeper.fixes += [x for x in o.fixes if (x.title, x.edits) not in titles]
        keeper.offers += [x for x in o.offers if x not in keeper.offers]
    keeper.evidence["same_cause"] = list(dict.fromkeys(c for c in same if c != keeper.code))
    keeper.evidence["same_cause_findings"] = folded


# ---------------------------------------------------------------------------------------------
# Where to start


def _saving_us(f: Finding) -> float:
    s = f.saving
    return s.us_per_step if s is not None and s.us_per_step is not None else 0.0


def saving_key(f: Finding) -> tuple:
    """Sort key, best first: a known saving (largest first), then the unknown ones by their time
    per step (µs), never by share: shares of the wall step and of the device step have different
    denominators (docs/savings.md "Ranking"). Ties: the time per step."""
    known = f.saving is not None and f.saving.known
    return (not known, -_saving_us(f), -f.time_per_step_us)


def saving_order(findings: Sequence[Finding]) -> list[int]:
    """Indexes of ``findings`` in saving order (stable for equal keys)."""
    return sorted(range(len(findings)), key=lambda i: saving_key(findings[i]))


def actionable(f: Finding) -> bool:
    """A finding worth starting with: it saves time, or (saving unknown) it has a share; the
    profile notices never."""
    if f.code.startswith(NOTICE_PREFIX):
        return False
    if f.saving is not None and f.saving.known:
        return (f.saving.us_per_step or 0.0) > 0
    return f.share > 0


def start_here(findings: Sequence[Finding], limit: int = START_HERE) -> list[int]:
    """Indexes into ``findings`` of the top ``limit`` by saving (``saving_key``): the JSON
    ``start_here``, what the text and HTML reports open with and what the editor shows first."""
    return [i for i in saving_order(findings) if actionable(findings[i])][:limit]
