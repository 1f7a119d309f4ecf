"""Lines are split one way, as LSP and Python's tokenizer count them (issue 24: three ways before,
and ``str.splitlines`` where positions.py says the editor does not split)."""

from __future__ import annotations

import re
from pathlib import Path

from msprof_lsp.mapping.source.positions import line_starts, split_lines

ROOT = Path(__file__).resolve().parents[3]


def test_terminators_lsp_counts_and_no_others() -> None:
    text = "a\r\nb\rc\nd\x0ce\u2028f"
    assert split_lines(text) == ["a", "b", "c", "d\x0ce\u2028f"]  # \f and U+2028 end no line
    assert split_lines(text, keepends=True) == ["a\r\n", "b\r", "c\n", "d\x0ce\u2028f"]
    assert line_starts(text) == [0, 3, 5, 7]
    assert "".join(split_lines(text, keepends=True)) == text


def test_defined_once() -> None:
    homes = {"def split_lines": [], "def line_starts": [], r're.compile(r"\r\n|\r|\n")': []}
    for folder in ("mapping", "hints", "server"):
        for p in (ROOT / folder).rglob("*.py"):
            text = p.read_text(encoding="utf-8")
            for k in homes:
                if re.search(re.escape(k) + r"\b" if k.startswith("def") else re.escape(k), text):
                    homes[k].append(p.relative_to(ROOT).as_posix())
    assert all(v == ["mapping/source/positions.py"] for v in homes.values()), homes
