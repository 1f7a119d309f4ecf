"""Property test: every transform, at any line of real model code — whole or cut off mid-edit —
either declines or returns edits that reproduce its new_source; it never raises."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msprof_lsp.hints.fixes import CATALOG
from msprof_lsp.hints.fixes.edits import apply_edits

ROOT = Path(__file__).resolve().parents[3]
FILES = sorted((ROOT / "tests" / "hints" / "fixes" / "models").glob("*.py")) + sorted((ROOT / "samples").glob("*/*.py"))
TEXTS = [p.read_text(encoding="utf-8") for p in FILES]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(TEXTS), st.floats(0.3, 1.0), st.integers(1, 400), st.booleans())
def test_transforms_never_raise(text, keep, line, crlf):
    cut = text[: int(len(text) * keep)]
    if crlf:
        cut = cut.replace("\n", "\r\n")
    n = max(1, cut.count("\n") + 1)
    anchor = 1 + (line - 1) % n
    for spec in CATALOG:
        opts = {"name": "ASCEND_LAUNCH_BLOCKING", "value": None} if "name" in spec.options else {}
        why: list[str] = []
        res = spec.transform(cut, anchor, why=why, **opts)
        if res is None:
            assert why, spec.transform.__name__
        else:
            assert apply_edits(cut, res.edits) == res.new_source
