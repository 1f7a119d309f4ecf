"""The seed rules on thin or odd profiles: nothing to say is no finding, never a crash notice."""

from __future__ import annotations

import pytest
from seedkit import L, Launch, UserCall, analyse, fwd, step_run

from msprof_lsp.hints.config import RuleConfig
from msprof_lsp.hints.context import RuleContext
from msprof_lsp.hints.engine import run_rules
from msprof_lsp.hints.registry import rules_matching
from msprof_lsp.mapping.profile.model import Backend, Profile, ProfileKind, ProfileMeta, Step


def _no_crash(ctx):
    found = run_rules(ctx, rules_matching(["NPU1"]))
    assert not [f for f in found if f.evidence.get("notice") == "rule-error"], [f.message for f in found]
    return found


@pytest.mark.parametrize("backend", list(Backend))
def test_empty_profile(backend):
    prof = Profile(ProfileMeta(ProfileKind.KINETO if backend is not Backend.ASCEND else ProfileKind.TORCH_NPU,
                               "/nowhere", backend=backend))
    assert _no_crash(RuleContext(prof, None, None, RuleConfig(min_share=0.0))) == []


def test_steps_without_events():
    prof = Profile(ProfileMeta(ProfileKind.TORCH_NPU, "/nowhere"), steps=[Step(1, 0, 1_000_000)])
    assert _no_crash(RuleContext(prof, None, None, RuleConfig(min_share=0.0))) == []


def test_written_profile_without_sources(tmp_path):
    lin = L.linear(32, 1024, 64, mm_us=60.0, transdata=2, transdata_us=30.0)
    run = step_run([UserCall(fwd("x = self.drop(self.act(self.fc1(x)))"), (Launch(lin.op, lin.frames),))])
    a = analyse(run, tmp_path, project=False)
    found = _no_crash(a.ctx)
    assert all(f.span is None for f in found)  # nothing to anchor on: profile-level findings only
