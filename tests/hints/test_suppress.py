"""``# msprof: ignore[...]`` parsing (real comments only, robust to half-typed code) and the edit
that adds a suppression."""

from __future__ import annotations

import ast

from msprof_lsp.hints.fixes.edits import apply_edits
from msprof_lsp.hints.suppress import ALL, comments, is_suppressed, span_suppressed, suppression_edit, suppressions

SRC = '''import torch  # msprof: ignore[NPU103]
x = F.dropout(F.relu(x))  # msprof: ignore[npu101, NPU108]
s = "# msprof: ignore[NPU999]"
doc = """
# msprof: ignore
"""
loss.item()  # msprof: ignore
y = 1  # noqa: E501  # msprof: ignore[NPU2]
z = 2  # msprof: ignored-not-a-directive
'''


def test_codes_per_line_from_comments_only():
    table = suppressions(SRC)
    assert table[1] == frozenset({"NPU103"})
    assert table[2] == frozenset({"NPU101", "NPU108"})
    assert 3 not in table and 5 not in table  # inside strings
    assert table[7] is ALL
    assert table[8] == frozenset({"NPU2"})
    assert 9 not in table


def test_matching_by_code_prefix_and_all():
    table = suppressions(SRC)
    assert is_suppressed(table, 2, "NPU101") and not is_suppressed(table, 2, "NPU102")
    assert is_suppressed(table, 7, "NPU900")
    assert is_suppressed(table, 8, "NPU213") and not is_suppressed(table, 8, "NPU101")
    assert not is_suppressed(table, 4, "NPU101")


def test_a_span_is_silenced_by_its_first_or_last_line_only():
    table = suppressions(SRC)
    assert span_suppressed(table, 2, 4, "NPU101") and span_suppressed(table, 1, 2, "NPU101")
    assert not span_suppressed(table, 1, 1, "NPU101") and not span_suppressed(table, 1, 3, "NPU108")  # line 2 is inside


def test_the_engine_and_the_editor_share_the_span_check():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    users = [p.relative_to(root).as_posix() for d in ("hints", "server") for p in sorted((root / d).rglob("*.py"))
             if "span_suppressed(" in p.read_text(encoding="utf-8")]
    assert users == ["hints/context.py", "hints/suppress.py", "server/lsp/diagnostics.py"]


def test_incomplete_code_falls_back_to_the_line_scanner():
    half = (
        "def f(x:\n"  # unclosed paren: tokenize gives up at EOF
        "    y = g('#not', \"# msprof: ignore[NPU1]\")  # msprof: ignore[NPU104]\n"
        '    s = """# msprof: ignore\n'
        '    still string"""  # msprof: ignore[NPU105]\n'
        "    t = 'a\\'#b'  # msprof: ignore[NPU106]\n"
    )
    table = suppressions(half)
    assert table[2] == frozenset({"NPU104"})
    # the directive inside the string counts for nothing; the comment after it covers its lines
    assert table[3] == frozenset({"NPU105"})
    assert table[4] == frozenset({"NPU105"})
    assert table[5] == frozenset({"NPU106"})
    assert [c.line for c in comments("x = (  # msprof: ignore\n")] == [1]


def _roundtrip(text: str, line: int, code: str) -> str:
    edit = suppression_edit(text, line, code, "m.py")
    assert edit is not None and edit.path == "m.py" and edit.line == edit.end_line == line
    new = apply_edits(text, [edit])
    assert is_suppressed(suppressions(new), line, code)
    return new


def test_edit_adds_a_new_comment_keeping_code_intact():
    text = "x = F.relu(x)   \ny = 2\n"
    new = _roundtrip(text, 1, "NPU101")
    assert new == "x = F.relu(x)  # msprof: ignore[NPU101]\ny = 2\n"


def test_edit_appends_to_an_existing_directive_and_keeps_noqa():
    text = "x = 1  # noqa: E501  # msprof: ignore[NPU101]\n"
    assert _roundtrip(text, 1, "NPU108") == "x = 1  # noqa: E501  # msprof: ignore[NPU101, NPU108]\n"
    noqa = "import os  # noqa: F401\n"
    assert _roundtrip(noqa, 1, "NPU241") == "import os  # noqa: F401  # msprof: ignore[NPU241]\n"
    empty = "x = 1  # msprof: ignore[]\n"
    assert _roundtrip(empty, 1, "NPU1") == "x = 1  # msprof: ignore[NPU1]\n"


def test_edit_not_needed_or_not_possible():
    assert suppression_edit("x = 1  # msprof: ignore\n", 1, "NPU101") is None
    assert suppression_edit("x = 1  # msprof: ignore[NPU1]\n", 1, "NPU101") is None
    assert suppression_edit("x = 1 + \\\n    2\n", 1, "NPU101") is None
    assert suppression_edit("x = 1\n", 9, "NPU101") is None


def test_edit_inside_a_multiline_call_still_parses():
    text = "y = f(\n    a,\n    b,\n)\n"
    new = _roundtrip(text, 1, "NPU104")
    ast.parse(new)
    assert new.startswith("y = f(  # msprof: ignore[NPU104]\n")


def test_tokenize_errors_mid_file_are_rescanned():
    bad_indent = "if x:\n    a = 1  # msprof: ignore[NPU101]\n  b = 2  # msprof: ignore[NPU102]\nc = '# no'  # msprof: ignore\n"
    table = suppressions(bad_indent)
    assert table == {2: frozenset({"NPU101"}), 3: frozenset({"NPU102"}), 4: ALL}
    open_string = 'x = 1  # msprof: ignore[NPU109]\ns = """abc\n# msprof: ignore[NPU101]\n'
    assert suppressions(open_string) == {1: frozenset({"NPU109"})}
