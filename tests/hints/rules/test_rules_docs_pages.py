"""Every rule of the NPU2xx/NPU9xx families has its page (title = code + registered name) and a row
in the rules index; fixed-severity families are the notices and the environment rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from msprof_lsp.hints.finding import Severity
from msprof_lsp.hints.registry import all_rules

DOCS = Path(__file__).resolve().parents[3] / "docs" / "rules"
MINE = re.compile(r"^NPU(2\d\d|9\d\d)$")
RULES = [r for r in all_rules() if MINE.match(r.code)]


def test_the_families_are_registered():
    codes = {r.code for r in RULES}
    expected = {"NPU201", "NPU202", "NPU203", "NPU204", "NPU205", "NPU206", "NPU207", "NPU208", "NPU209", "NPU218", "NPU219", *(f"NPU21{i}" for i in range(8)), "NPU220", "NPU221", "NPU222", "NPU230",
                *(f"NPU24{i}" for i in range(1, 8)), "NPU250", "NPU251", "NPU900", "NPU901", "NPU902", "NPU903"}
    assert codes == expected


@pytest.mark.parametrize("r", RULES, ids=lambda r: r.code)
def test_page_and_index_row(r):
    page = DOCS / f"{r.code}.md"
    assert page.read_text(encoding="utf-8").splitlines()[0] == f"# {r.code} {r.name}"
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    assert f"| [{r.code}]({r.code}.md) | {r.name} |" in index
    fixed = r.code.startswith(("NPU24", "NPU9"))
    assert (r.default_severity is Severity.INFO) is fixed
