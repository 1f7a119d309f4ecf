"""One finding per cause (hints.consolidate, hints.charges) and where to start.

Engine-level cases use fake rules whose findings carry an ``Effect`` set directly (what a fix acts
on); the invariants run on the samples and the real fixtures: every share in [0, 1] with its
denominator, and no two findings of one job charging the same time.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from msprof_lsp.hints import registry
from msprof_lsp.hints.charges import Timeline, charges
from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.consolidate import (
    MERGE_OVERLAP, charged_alike, merge_into, overlap, same_cause, saving_key, saving_order, start_here,
)
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.finding import (Change, Effect, Finding, FixOffer, Saving, Severity, ShareOf, Target)
from msprof_lsp.hints.registry import Rule
from tests.hints.rules.rulekit import fake_rule
from msprof_lsp.mapping.profile.model import (HOST_OP_SCHEMA, KERNEL_SCHEMA, Profile, ProfileKind, ProfileMeta, Step,
                                              make_table)
from msprof_lsp.mapping.source.workspace import SourceWorkspace
from msprof_lsp.mapping.spans import Span
from msprof_lsp.mapping.units import format_us

US = 1_000
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO.parent / "shared" / "fixtures"


def _profile() -> Profile:
    """Two 1 ms steps; per step kernels at 0-200 µs (row 2s) and 600-900 µs (2s+1); a host op per
    step at 250-550 µs, inside the device's idle 200-600 µs."""
    k = {c: [] for c in ("name", "type", "core", "start_ns", "dur_ns", "step", "stream", "device")}
    h = {c: [] for c in ("name", "start_ns", "dur_ns", "pid", "tid", "parent")}
    for s in range(2):
        t0 = s * 1000 * US
        for name, start, dur in (("MatMul_1", 0, 200), ("Add_1", 600, 300)):
            for c, v in (("name", name), ("type", name.split("_")[0]), ("core", "AI_CORE"),
                         ("start_ns", t0 + start * US), ("dur_ns", dur * US), ("step", s), ("stream", 1), ("device", 0)):
                k[c].append(v)
        for c, v in (("name", "aten::slow_host"), ("start_ns", t0 + 250 * US), ("dur_ns", 300 * US), ("pid", 1),
                     ("tid", 1), ("parent", -1)):
            h[c].append(v)
    meta = ProfileMeta(kind=ProfileKind.TORCH_NPU, path="/prof")
    return Profile(meta=meta, kernels=make_table(KERNEL_SCHEMA, k), host_ops=make_table(HOST_OP_SCHEMA, h),
                   steps=[Step(s, s * 1000 * US, (s + 1) * 1000 * US) for s in range(2)])


def _rule(code: str, emit) -> Rule:
    return fake_rule(code, emit)


def _kernels(*rows: int) -> Effect:
    return Effect(changes=(Change(Target.KERNELS, rows, 0.0, 0.0, 0.5),), basis="removed")


def _emit(span: Span | None, total_us: float, effect: Effect | None, *, fix: bool = False, wall: bool = False):
    def emit(rule, ctx):
        offers = [FixOffer("remove_synchronize", span.path, span)] if fix and span else []
        yield ctx.finding(rule, span=span, message=f"{rule.code} says so", total_ns=total_us * US * ctx.num_steps,
                          fixes=offers, effect=effect, wall=wall)
    return emit


def _at(line: int) -> Span:
    return Span("/ws/train.py", line, 0, line, 20)


def _run(rules, config: RuleConfig | None = None, workspace: SourceWorkspace | None = None) -> list[Finding]:
    ctx = RuleContext(_profile(), None, workspace, config or RuleConfig(min_share=0.0))
    return run_rules(ctx, rules, fixes=False)


def test_findings_charging_the_same_kernels_are_one_kept_by_the_one_with_a_fix():
    a = _rule("TST101", _emit(_at(3), 200, _kernels(0, 2)))  # the MatMuls
    b = _rule("TST102", _emit(_at(7), 150, _kernels(0, 2), fix=True))  # the same MatMuls, with a fix
    out = _run([a, b])
    assert [f.code for f in out] == ["TST102"]
    keeper = out[0]
    assert keeper.evidence["same_cause"] == ["TST101"]
    rel = [r for r in keeper.related if r.message.startswith("same cause")]
    assert len(rel) == 1 and rel[0].span.line == 3 and "TST101 says so" in rel[0].message
    assert keeper.span.line == 7  # the keeper keeps its place
    [folded] = keeper.evidence["same_cause_findings"]
    assert (folded["code"], folded["message"], folded["share_of"]) == ("TST101", "TST101 says so", "device-step")
    # the folded finding's own saving stays readable: unknown here (this profile links no launches)
    assert folded["saving"]["us_per_step"] is None and "applied alone" not in rel[0].message


def test_a_folded_finding_keeps_what_its_fix_saves_applied_alone():
    """Padding GEMMs that autocast also speeds up: one cause, one finding, but the folded fix is a
    lever of its own; its saving applied alone is in the related entry and the evidence, never added
    to the keeper's."""
    (a,) = _run([_rule("TST101", _emit(_at(3), 200, _kernels(0, 2)))])
    (b,) = _run([_rule("TST102", _emit(_at(7), 150, _kernels(0, 2), fix=True))])
    a.saving = Saving(120.0, 60.0, 120.0, "the kernels removed")
    keeper_saving = b.saving
    merge_into(b, [a])
    [folded] = b.evidence["same_cause_findings"]
    assert folded["saving"] == dataclasses.asdict(a.saving) and b.saving == keeper_saving
    [rel] = [r for r in b.related if r.message.startswith("same cause")]
    assert rel.message.endswith(f"TST101 says so (applied alone, its fix saves {format_us(120.0)}/step)")


def test_rows_of_an_effect_with_an_unknown_saving_still_charge():
    """A fix whose saving has no model still acts on the rows it names (the fused-API rules on a
    CPU-only trace: the matched host ops): two such findings on the same ops are one cause."""
    def unknown(*rows: int) -> Effect:
        return Effect((Change(Target.HOST_OPS, rows, 1.0, 1.0, 1.0),), unknown="unknown: no kernels")

    a = _rule("TST111", _emit(_at(3), 600, unknown(0, 1), fix=True))
    b = _rule("TST112", _emit(_at(5), 300, unknown(0, 1)))
    out = _run([a, b])
    assert [f.code for f in out] == ["TST111"] and out[0].evidence["same_cause"] == ["TST112"]
    t = Timeline(RuleContext(_profile(), None, None, RuleConfig()))
    assert charges(t, out[0])[("host-op", 0)] == 300 * US
    assert not out[0].saving.known  # the saving stays unknown


def test_disjoint_and_slightly_overlapping_charges_stay_apart():
    a = _rule("TST101", _emit(_at(3), 200, _kernels(0, 2)))  # MatMuls
    b = _rule("TST102", _emit(_at(7), 300, _kernels(1, 3)))  # Adds
    assert sorted(f.code for f in _run([a, b])) == ["TST101", "TST102"]
    # one shared MatMul (200 µs) of the 500 µs the smaller charges: 40 %, under MERGE_OVERLAP
    c = _rule("TST103", _emit(_at(9), 350, _kernels(0, 2, 1)))
    d = _rule("TST104", _emit(_at(11), 250, _kernels(2, 3)))
    assert sorted(f.code for f in _run([c, d])) == ["TST103", "TST104"]
    # two shared Adds (600 µs) of 800 µs each: 75 %, one finding
    e = _rule("TST105", _emit(_at(9), 400, _kernels(0, 1, 3)))
    g = _rule("TST106", _emit(_at(11), 400, _kernels(1, 3, 2)))
    assert len(_run([e, g])) == 1
    t = Timeline(RuleContext(_profile(), None, None, RuleConfig()))
    cc, cd = (charges(t, f) for f in sorted(_run([c, d]), key=lambda f: f.code))
    assert overlap(cc, cd) == 200 * US and not same_cause(cc, cd) and MERGE_OVERLAP * 500 * US > 200 * US


def test_host_time_charges_the_device_idle_it_overlaps():
    """A host op's effect and NPU105's device idle (its family helper) are one wait."""
    host = Effect(changes=(Change(Target.HOST_OPS, (0, 1), 0.0, 0.0, 0.5),), basis="host work removed")
    a = _rule("TST201", _emit(_at(5), 300, host, fix=True, wall=True))
    idle = _rule("NPU105", _emit(_at(2), 400, None))
    out = _run([a, idle])
    assert [f.code for f in out] == ["TST201"] and out[0].evidence["same_cause"] == ["NPU105"]
    t = Timeline(RuleContext(_profile(), None, None, RuleConfig()))
    gs, ge = t.gaps
    assert (gs // US).tolist() == [200, 900, 1200, 1900] and (ge // US).tolist() == [600, 1000, 1600, 2000]


def test_a_selected_out_or_suppressed_rule_never_joins(tmp_path):
    a = _rule("TST101", _emit(_at(3), 200, _kernels(0, 2)))
    b = _rule("TST102", _emit(_at(7), 150, _kernels(0, 2), fix=True))
    out = _run([a, b], RuleConfig(min_share=0.0, ignore=("TST102",)))
    assert [f.code for f in out] == ["TST101"] and "same_cause" not in out[0].evidence
    src = tmp_path / "train.py"
    src.write_text("\n".join(f"x{i} = {i}" + ("  # msprof: ignore[TST101]" if i == 3 else "") for i in range(1, 12)) + "\n")
    ws = SourceWorkspace([tmp_path])
    span = lambda line: Span(str(src), line, 0, line, 5)  # noqa: E731
    a = _rule("TST101", _emit(span(3), 200, _kernels(0, 2)))
    b = _rule("TST102", _emit(span(7), 150, _kernels(0, 2), fix=True))
    out = _run([a, b], workspace=ws)
    assert [f.code for f in out] == ["TST102"] and "same_cause" not in out[0].evidence
    assert not any("TST101" in r.message for r in out[0].related)


def _finding(code: str, share: float, saving: float | None, share_of: ShareOf = ShareOf.WALL_STEP,
             step_us: float = 10_000.0) -> Finding:
    s = Saving(saving, saving, saving, "test") if saving is not None else Saving.unknown("no model")
    return Finding(code, "x", Severity.WARNING, "m", None, share=share, time_per_step_us=share * step_us,
                   share_of=share_of, saving=s)


def test_unknown_savings_rank_by_time_not_by_shares_of_different_steps():
    """A 3 ms wall-step finding (30 % of 10 ms) outranks a 0.5 ms device-step one (50 % of a 1 ms
    device step); neither outranks a modelled saving, however small."""
    wall = _finding("NPU104", 0.30, None)
    device = _finding("NPU206", 0.50, None, ShareOf.DEVICE_STEP, step_us=1_000.0)
    small = _finding("NPU101", 0.001, 3.0)
    assert [f.code for f in sorted([device, wall, small], key=saving_key)] == ["NPU101", "NPU104", "NPU206"]
    assert start_here([device, wall, small]) == [2, 1, 0]


def test_start_here_ranks_by_known_saving_then_share_and_leaves_out_notices():
    fs = [_finding("NPU101", 0.30, None), _finding("NPU102", 0.10, 900.0), _finding("NPU103", 0.20, 900.0),
          _finding("NPU104", 0.05, 2000.0), _finding("NPU903", 0.50, None), _finding("NPU105", 0.0, None),
          _finding("NPU106", 0.40, 0.0)]
    assert start_here(fs) == [3, 2, 1]
    assert start_here(fs, limit=5) == [3, 2, 1, 0]  # a known saving of 0 and the notice are no start
    assert saving_order(fs)[:5] == [3, 2, 1, 6, 4]  # unknown savings last, by share
    assert start_here([]) == []


# ---------------------------------------------------------------------------------------------
# On the samples and the real fixtures


def _analyses(root: Path):
    from msprof_lsp.server.analysis.run import analyse_paths
    from msprof_lsp.server.analysis.settings import Settings

    return analyse_paths([root], Settings(base_dir=str(root)), use_cache=False)


ROOTS = [REPO / "samples"] + ([p for p in sorted(FIXTURES.iterdir()) if p.is_dir()] if FIXTURES.is_dir() else [])


@pytest.mark.parametrize("root", ROOTS, ids=lambda p: p.name)
def test_every_share_has_its_denominator_and_no_two_findings_charge_the_same_time(root):
    for a in _analyses(root):
        ctx = RuleContext(a.profile, a.attribution, a.workspace, RuleConfig())
        t = Timeline(ctx)
        charged = [charges(t, f) for f in a.findings]
        for f in a.findings:
            assert 0.0 <= f.share <= 1.0, (f.code, f.share)
            assert isinstance(f.share_of, ShareOf)
        for i, ci in enumerate(charged):
            for j in range(i + 1, len(charged)):
                fi, fj = a.findings[i], a.findings[j]
                assert not charged_alike(fi, ci, fj, charged[j]), (fi.code, fj.code)
        for of in ShareOf:
            # findings that charge nothing in common: their shares of one denominator add up to <= 1
            disjoint = [f for f, c in zip(a.findings, charged) if c and f.share_of is of
                        and all(overlap(c, d) == 0 for d in charged if d is not c)]
            assert sum(f.share for f in disjoint) <= 1.0 + 1e-9, [(f.code, f.share) for f in disjoint]
