"""Property tests of the output escapes over arbitrary text (every code point, lone surrogates
included): plain text is one line with no raw control, Markdown has nothing live, a GitHub
annotation stays one line whatever its message and path, and JSON text parses back to the same
data."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msprof_lsp.hints.finding import Finding, Severity
from msprof_lsp.mapping.profile.model import Profile, ProfileKind, ProfileMeta
from msprof_lsp.mapping.source.heat import SourceHeat
from msprof_lsp.mapping.spans import Confidence, Span
from msprof_lsp.server.check.report import github, text
from msprof_lsp.server.analysis.views.result import CheckRun, JobReport
from msprof_lsp.server.escape import json_text, markdown, visible

from tests.synth.hostile_text import live_markdown, raw_controls

ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=60)
SETTINGS = settings(max_examples=200, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(ANY_TEXT)
def test_visible_is_one_printable_line(s: str) -> None:
    out = visible(s)
    assert "\n" not in out and "\r" not in out and raw_controls(out) == []
    assert visible(out) == out
    out.encode("utf-8")  # no lone surrogate left: it can be written to any UTF-8 stream


@SETTINGS
@given(ANY_TEXT)
def test_markdown_is_never_live(s: str) -> None:
    assert live_markdown(markdown(s)) == []


@SETTINGS
@given(ANY_TEXT)
def test_json_text_is_the_same_data(s: str) -> None:
    doc = json.dumps({"name": s, "list": [s, 1]}, ensure_ascii=False)
    out = json_text(doc)
    assert json.loads(out) == json.loads(doc) and raw_controls(out) == []


def _run(message: str, folder: str) -> CheckRun:
    src = Path("/ws") / folder / "m.py"
    f = Finding(code="NPU101", name="x", severity=Severity.WARNING, message=message,
                span=Span(str(src), 1, 0, 1, 1), share=0.1, time_per_step_us=1.0, confidence=Confidence.STACK)
    heat = SourceHeat(step_time_ns=1, num_steps=1, spans=[], lines=[], functions=[], total_device_ns=0,
                      attributed_ns=0, unattributed_ns=0)
    meta = ProfileMeta(kind=ProfileKind.TORCH_NPU, path=f"/ws/{folder}_ascend_pt", rank=0)
    return CheckRun(jobs=[JobReport(profile=Profile(meta=meta), heat=heat, findings=[f], ranks=[0])],
                    cwd=Path("/ws"), tool_version="0")


@SETTINGS
@given(ANY_TEXT, ANY_TEXT.filter(lambda s: "/" not in s and "\x00" not in s))
def test_github_and_concise_stay_one_line(message: str, folder: str) -> None:
    run = _run(message, folder or "d")
    for out in (github.render(run), text.render_concise(run)):
        assert out.endswith("\n") and out.count("\n") == 1 and "\r" not in out and raw_controls(out) == []
    assert github.render(run).startswith("::warning file=")
    assert raw_controls(text.render(run)) == []
