"""The savings memo (hints/savings.py ``saving_of``, hints/charges.py ``Timeline.gaps``): the
editor re-runs the rules on every edit, and nothing that depends on the profile alone is computed
twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.mapping.profile.load import load_location, locate

REPO = Path(__file__).resolve().parents[2]
CNN = REPO / "samples/cnn_classifier/npu_profile/ma-node-0_3185260_20250731080000000_ascend_pt"


def _ctx(profile):
    return RuleContext(profile, None, None, RuleConfig())



def test_a_second_rule_run_recomputes_no_saving_and_no_idle_gaps(monkeypatch):
    """The editor re-runs the rules on every edit: the savings (per code and effect) and
    consolidate's device idle stretches come from ``profile.derived.memo`` the second time."""
    import msprof_lsp.hints.charges as charges
    import msprof_lsp.hints.savings as savings
    from msprof_lsp.hints.engine import run_rules

    calls = {"what_if": 0, "idle_gaps": 0}

    def counted(name, fn):
        def wrapper(*a, **kw):
            calls[name] += 1
            return fn(*a, **kw)
        return wrapper

    monkeypatch.setattr(savings, "what_if", counted("what_if", savings.what_if))
    monkeypatch.setattr(charges, "idle_gaps", counted("idle_gaps", charges.idle_gaps))
    profile = load_location(locate(CNN), use_cache=False)
    first = run_rules(_ctx(profile))
    after_first = dict(calls)
    assert after_first["what_if"] > 0 and after_first["idle_gaps"] == 1, after_first
    second = run_rules(_ctx(profile))  # a new context, as after an edit: the same loaded profile
    assert calls == after_first
    assert [(f.code, f.saving) for f in second] == [(f.code, f.saving) for f in first]


def test_a_warm_run_reads_the_step_models_and_gives_the_same_savings(tmp_path, monkeypatch):
    """The step models depend on the profile alone and travel with its cache entry
    (mapping/source/replay.py ``PERSIST``): a warm run decodes them, and every finding's saving is
    the cold run's."""
    from msprof_lsp.hints.engine import run_rules
    from msprof_lsp.mapping.profile import cache
    from msprof_lsp.mapping.source import replay

    loc = locate(CNN)
    cold = load_location(loc, cache_dir=tmp_path)
    want = [(f.code, f.saving) for f in run_rules(_ctx(cold))]
    assert any(s.known for _, s in want)
    assert cache.store_derived(loc, cold, tmp_path)
    monkeypatch.setattr(replay, "_replay_base", lambda *a: pytest.fail("the step models were built again"))
    warm = load_location(loc, cache_dir=tmp_path)
    assert warm.derived.stored  # a hit, with the derived values
    assert [(f.code, f.saving) for f in run_rules(_ctx(warm))] == want
