"""Helpers for the fix tests: check a FixResult the same way for every transform, and run
model code (the test's own sample files, never product code) with torch."""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path

from msprof_lsp.hints.fixes.edits import apply_edits, edited_lines
from msprof_lsp.hints.fixes.result import FixResult

MODELS = Path(__file__).resolve().parent / "models"


def model_source(name: str) -> str:
    return (MODELS / name).read_text(encoding="utf-8")


def line_of(text: str, needle: str, nth: int = 0) -> int:
    """1-based line of the nth line containing ``needle`` (computed from the text itself)."""
    hits = [i for i, ln in enumerate(text.splitlines(), 1) if needle in ln]
    assert len(hits) > nth, f"{needle!r} not found {nth + 1} times"
    return hits[nth]


def lines_with(text: str, *needles: str) -> set[int]:
    return {i for i, ln in enumerate(text.splitlines(), 1) if any(n in ln for n in needles)}


def check_fix(before: str, res: FixResult | None, *, allowed_lines: set[int], safe: bool | None = None) -> str:
    """The common contract: the fix exists, its edits reproduce new_source, the result parses,
    only ``allowed_lines`` of the original are touched, the title says (review) iff not safe."""
    assert res is not None, "expected a fix"
    assert apply_edits(before, res.edits) == res.new_source
    ast.parse(res.new_source.encode("utf-8"))  # bytes: a BOM is legal, as in a file
    touched = edited_lines(res.edits)
    assert touched <= allowed_lines, f"touched {sorted(touched)} outside {sorted(allowed_lines)}"
    assert res.fix.edits == res.edits and res.fix.safe == res.safe
    if safe is not None:
        assert res.safe is safe
    assert res.title.endswith("(review)") is (not res.safe)
    return res.new_source


def load(text: str, name: str, **stubs: types.ModuleType) -> dict:
    """Execute model code in a fresh namespace (``__name__`` is not ``__main__``)."""
    saved = {k: sys.modules.get(k) for k in stubs}
    try:
        for k, mod in stubs.items():
            sys.modules[k] = mod
        module = types.ModuleType(name)
        sys.modules[name] = module  # dataclasses and pickling look the module up by name
        exec(compile(text, f"<{name}>", "exec"), module.__dict__)  # noqa: S102 - test-only model code
        return module.__dict__
    finally:
        for k, mod in saved.items():
            if mod is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = mod
