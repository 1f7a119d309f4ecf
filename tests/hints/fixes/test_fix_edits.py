"""Text edits: application, minimal computation (property-tested), CRLF and code-point columns."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprof_lsp.hints.finding import TextEdit
from msprof_lsp.hints.fixes.edits import PositionError, apply_edits, edited_lines, minimal_edits, offset_of, position_of


def E(line, col, end_line, end_col, text):  # noqa: N802 - short constructor for tables
    return TextEdit("f.py", line, col, end_line, end_col, text)


def test_apply_replacements_and_insertions():
    text = "a = 1\nb = 2\n"
    assert apply_edits(text, [E(2, 4, 2, 5, "3"), E(1, 0, 1, 0, "import x\n")]) == "import x\na = 1\nb = 3\n"
    assert apply_edits(text, [E(3, 0, 3, 0, "c = 4\n")]) == "a = 1\nb = 2\nc = 4\n"  # at the very end


def test_invalid_positions_and_overlaps_raise():
    with pytest.raises(PositionError):
        apply_edits("a\n", [E(5, 0, 5, 0, "x")])
    with pytest.raises(PositionError):
        apply_edits("ab\n", [E(1, 3, 1, 3, "x")])  # past the line's content
    with pytest.raises(PositionError):
        apply_edits("abcdef\n", [E(1, 0, 1, 3, "x"), E(1, 2, 1, 4, "y")])


def test_one_line_change_is_trimmed_to_the_changed_characters():
    old = "x = t.double().sum()  # 注释\n"
    new = "x = t.float().sum()  # 注释\n"
    (edit,) = minimal_edits(old, new, "m.py")
    assert (edit.line, edit.col, edit.end_line, edit.end_col, edit.new_text) == (1, 6, 1, 12, "float")
    assert edited_lines([edit]) == {1}


def test_columns_are_code_points():
    old = "名字 = f(x)\n"
    new = "名字 = f(x, inplace=True)\n"
    (edit,) = minimal_edits(old, new)
    assert (edit.col, edit.end_col, edit.new_text) == (8, 8, ", inplace=True")
    assert offset_of(old, 1, 8) == 8 and position_of(old, 8) == (1, 8)


def test_crlf_pairs_are_never_split():
    old = "a = 1\r\nb = 2\r\n"
    new = "a = 1\r\nz = 0\r\nb = 2\r\n"
    edits = minimal_edits(old, new)
    assert apply_edits(old, edits) == new
    for e in edits:
        for line, col in ((e.line, e.col), (e.end_line, e.end_col)):
            off = offset_of(old, line, col)
            assert not (0 < off < len(old) and old[off - 1] == "\r" and old[off] == "\n")


def test_form_feed_is_not_a_line_break():
    # str.splitlines would break at \x0c and shift every later line
    old = "a = 1\x0c\nb = 2\n"
    (edit,) = minimal_edits(old, old.replace("b = 2", "b = 3"))
    assert edit.line == 2


LINES = st.lists(st.sampled_from(["", "x = 1", "y = f(x)", "名 = '字'", "    pass", "# c", "z"]), max_size=8)
EOLS = st.sampled_from(["\n", "\r\n"])


@settings(max_examples=300, deadline=None)
@given(LINES, LINES, EOLS, st.booleans())
def test_minimal_edits_reproduce_the_target(a, b, eol, trailing):
    old = eol.join(a) + (eol if trailing and a else "")
    new = eol.join(b) + (eol if trailing and b else "")
    edits = minimal_edits(old, new, "p.py")
    assert apply_edits(old, edits) == new
    assert all(e.path == "p.py" for e in edits)
    if old == new:
        assert edits == ()


def test_a_source_builds_each_nodes_children_once(monkeypatch) -> None:
    """libcst rebuilds ``children`` on every access; the offers on one file walk the same
    statements again and again (``at``, ``within``, ``walk``, parents), so a Source keeps them:
    however often it is asked, each node's children are built once."""
    import libcst as cst

    from msprof_lsp.hints.fixes.cst_tools import Source
    from msprof_lsp.hints.fixes.result import Where

    text = (Path(__file__).resolve().parents[3] / "samples" / "tiny_transformer" / "model.py").read_text()
    src = Source(text)
    built: list[int] = []
    real = cst.CSTNode.children
    monkeypatch.setattr(cst.CSTNode, "children", property(lambda self: (built.append(id(self)), real.fget(self))[1]))
    for _ in range(3):
        for line in range(1, text.count("\n") + 1):
            src.at(Where(line, line), cst.Call)
        list(src.walk(cst.Name))
        for _a, _b, top in src.tops:
            list(src.within(top, cst.Attribute))
    assert built and len(built) == len(set(built))
