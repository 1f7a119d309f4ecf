"""The fix catalog: every transform follows the one calling convention, declines garbage input
without raising, and every code it covers has a rule page."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from msprof_lsp.hints.finding import Safety
from msprof_lsp.hints.fixes import CATALOG, fixes_for

DOCS = Path(__file__).resolve().parents[3] / "docs" / "rules"


@pytest.mark.parametrize("spec", CATALOG, ids=lambda s: f"{s.code}-{s.transform.__name__}")
def test_calling_convention(spec):
    params = inspect.signature(spec.transform).parameters
    names = list(params)
    assert names[:2] == ["source", "anchor"]
    assert params["path"].kind is inspect.Parameter.KEYWORD_ONLY and params["path"].default is None
    assert params["why"].kind is inspect.Parameter.KEYWORD_ONLY
    for opt in spec.options:
        assert opt.split(":")[0].strip() in params, opt
    assert isinstance(spec.safety, Safety)


@pytest.mark.parametrize("spec", CATALOG, ids=lambda s: f"{s.code}-{s.transform.__name__}")
@pytest.mark.parametrize("text", ["", "def broken(:\n", "x = 1\n", "\ufeffimport numpy\n\n\nprint('名')\r\n"])
def test_declines_unrelated_or_broken_source(spec, text):
    why: list[str] = []
    kwargs = {"name": "X", "value": "1"} if "name" in spec.options else {}
    assert spec.transform(text, 1, why=why, **kwargs) is None
    assert why and all(isinstance(w, str) and w for w in why)


def test_every_code_with_fixes_has_a_rule_page():
    codes = {s.code for s in CATALOG}
    missing = [c for c in sorted(codes) if not (DOCS / f"{c}.md").is_file()]
    assert not missing
    assert [s.transform.__name__ for s in fixes_for("npu101")] == ["compile_pair", "inplace_relu", "drop_zero_dropout"]


def test_bom_and_mixed_newlines_survive_a_fix():
    from fixkit import check_fix

    from msprof_lsp.hints.fixes import npu_switches

    text = "\ufeffimport torch\r\nimport torch_npu\r\n\r\nprint('名')\r\n"
    new = check_fix(text, npu_switches.disable_internal_format(text), allowed_lines=set())
    assert new == "\ufeffimport torch\r\nimport torch_npu\r\ntorch_npu.npu.config.allow_internal_format = False\r\n\r\nprint('名')\r\n"


def test_offer_turns_an_unexpected_error_into_no_fix(caplog):
    from msprof_lsp.hints.fixes import offer

    def broken(source, anchor, *, path=None, why=None):
        raise IndexError("list index out of range")

    why: list[str] = []
    assert offer(broken, "x = 1\n", 1, why=why) is None
    assert "IndexError" in why[0] and "broken" in caplog.text
    ok = offer(CATALOG[0].transform, "x = 1\n", 1, why=why)
    assert ok is None and len(why) == 2
