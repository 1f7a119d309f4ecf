"""The one interner (mapping/interning.py) that readers, attribution and the report share."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from msprof_lsp.mapping.interning import Interner

ROOT = Path(__file__).resolve().parents[2]


def test_codes_in_first_seen_order_and_bulk_equals_one_by_one() -> None:
    a, b = Interner(), Interner()
    values = ["x", "y", "x", "z", "y"]
    assert [a.code(v) for v in values] == [0, 1, 0, 2, 1]
    assert b.codes(values).tolist() == [0, 1, 0, 2, 1]
    assert a.values == b.values == ["x", "y", "z"]


def test_normalize_and_fixed_codes() -> None:
    pool = Interner(normalize=str, fixed={None: -1}, dtype=np.int32)
    out = pool.codes([None, 7, "7", "a"])
    assert out.dtype == np.int32 and out.tolist() == [-1, 0, 0, 1]
    assert pool.values == ["7", "a"]


def test_no_hand_written_interning_left() -> None:
    """The pattern ``i = d.get(v); if i is None: i = len(lst); lst.append(v); d[v] = i`` lives in
    mapping/interning.py only (issue 24 found it five times)."""
    found = []
    for folder in ("mapping", "hints", "server"):
        for p in (ROOT / folder).rglob("*.py"):
            if p.name == "interning.py":
                continue
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                        and isinstance(node.test.left, ast.Name) and isinstance(node.test.ops[0], ast.Is)):
                    continue
                name = node.test.left.id  # `if code is None:` ... `code = ... = len(values)`
                for a in ast.walk(node):
                    if (isinstance(a, ast.Assign) and isinstance(a.value, ast.Call)
                            and getattr(a.value.func, "id", "") == "len"
                            and any(isinstance(t, ast.Name) and t.id == name for t in a.targets)):
                        found.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
