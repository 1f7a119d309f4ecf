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


def test_per_distinct_calls_once_per_value_and_passes_missing() -> None:
    from msprof_lsp.mapping.interning import per_distinct

    calls: list[object] = []

    def fn(v: object) -> str:
        calls.append(v)
        return "-" if v != v else str(v).upper()  # NaN: the missing value

    out = per_distinct(np.array(["a", None, "b", "a", None], dtype=object), fn)
    assert out.tolist() == ["A", "-", "B", "A", "-"]
    assert sorted(map(str, calls)) == ["a", "b", "nan"]  # three distinct values, three calls
    assert per_distinct(np.array([3, -1, 3]), lambda c: c * 2, np.int64).tolist() == [6, -2, 6]
    assert per_distinct(np.zeros(0), str).shape == (0,)


def test_no_hand_written_apply_per_distinct_left() -> None:
    """``uniq, inv = np.unique(x, return_inverse=True)`` followed by a Python list over ``uniq``
    is mapping.interning.per_distinct (issue 24 found it seven times)."""
    found = []
    for folder in ("mapping", "hints", "server"):
        for p in (ROOT / folder).rglob("*.py"):
            lines = p.read_text(encoding="utf-8").splitlines()
            for i, line in enumerate(lines):
                if "return_inverse=True" in line and "=" in line:
                    first = line.split("=")[0].split(",")[0].strip()
                    if any(f"for " in nxt and f" in {first}" in nxt for nxt in lines[i + 1:i + 3]):
                        found.append(f"{p.relative_to(ROOT)}:{i + 1}")
    assert not found, found
