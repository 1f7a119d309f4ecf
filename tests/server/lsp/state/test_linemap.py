"""LineMap: analysed line -> current line through any sequence of edits (server/lsp/state/linemap.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from msprof_lsp.server.lsp.state.linemap import LineMap, split_lines

# An edit: replace lines [start, start + removed) by `added` new lines (positions as fractions of
# the current length, so every drawn edit is valid).
edits = st.lists(
    st.tuples(st.floats(0, 1), st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=40
)


def _apply(lines: list[str], origin: list[int | None], edit, serial: list[int]):  # noqa: ANN001
    where, removed, added = edit
    start = int(where * len(lines))
    removed = min(removed, len(lines) - start)
    new = []
    for _ in range(added):
        serial[0] += 1
        new.append(f"new {serial[0]}")
    return (lines[:start] + new + lines[start + removed:],
            origin[:start] + [None] * added + origin[start + removed:],
            (start, removed, added))


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 30), script=edits)
def test_every_surviving_line_is_found_and_no_other(n: int, script) -> None:  # noqa: ANN001
    old = [f"old {i}" for i in range(1, n + 1)]
    lines, origin, serial = list(old), list(range(1, n + 1)), [0]
    lm = LineMap.identity()
    broken: set[int] = set()  # x: an edit happened between old lines x and x + 1 at some point
    for edit in script:
        before, before_origin = lines, origin
        lines, origin, (start, removed, added) = _apply(lines, origin, edit, serial)
        if not removed and not added:
            continue  # a no-op edit
        index = {o: i for i, o in enumerate(before_origin) if o is not None}
        for x in range(1, n):
            if x in index and x + 1 in index and index[x + 1] >= start and start + removed >= index[x] + 1:
                broken.add(x)
        lm = lm.then(LineMap.diff(before, lines))
    where_now = {o: i + 1 for i, o in enumerate(origin) if o is not None}
    for line in range(1, n + 1):
        assert lm.line(line) == where_now.get(line)  # exact: every line text is unique
    for a in range(1, n + 1):
        for b in range(a, n + 1):
            intact = all(x in where_now for x in range(a, b + 1)) and not any(x in broken for x in range(a, b))
            assert lm.untouched(a, b) == ((where_now[a], where_now[b]) if intact else None), (a, b)


def test_runs_stay_few_under_a_burst_of_keystrokes() -> None:
    text = [f"line {i}" for i in range(3000)]
    lm = LineMap.identity()
    cur = list(text)
    for i in range(500):  # typing on one line
        nxt = list(cur)
        nxt[1500] = cur[1500] + "x"
        lm = lm.then(LineMap.diff(cur, nxt))
        cur = nxt
    assert len(lm._runs) == 2
    assert lm.line(1500) == 1500 and lm.line(1501) is None and lm.line(1502) == 1502


def test_identity_and_equal_texts() -> None:
    a = split_lines("x = 1\r\ny = 2\rz = 3\n")
    assert a == ["x = 1", "y = 2", "z = 3", ""]
    lm = LineMap.diff(a, list(a))
    assert lm.is_identity and lm.line(2) == 2 and lm.untouched(1, 4) == (1, 4)


def test_insertion_between_lines_touches_a_range_across_it() -> None:
    old = ["a", "b", "c", "d"]
    lm = LineMap.diff(old, ["a", "b", "NEW", "c", "d"])
    assert lm.line(2) == 2 and lm.line(3) == 4
    assert lm.lines(2, 3) == (2, 4)  # a diagnostic spanning the insertion grows
    assert lm.untouched(2, 3) is None  # an edit computed across it would be wrong now
    assert lm.untouched(3, 4) == (4, 5)


def test_an_analysis_that_lands_after_more_edits_keeps_every_untouched_line() -> None:
    """Edits at the top and the bottom made while an analysis of version 2 runs: rebasing from
    version 2's line maps keeps every line in between, where one text diff would lose them all."""
    from msprof_lsp.server.lsp.state.documents import HISTORY, DocumentStore

    text = "\n".join(f"line {i}" for i in range(1, 101))
    buffer = {"file:///m.py": text}  # what pygls' workspace holds
    store = DocumentStore(buffer.__getitem__)
    doc = store.open("file:///m.py", 1)
    doc.rebase(1, text)
    analysed = buffer["file:///m.py"] = "# head\n" + text
    doc.update(2)
    doc.pin(2)
    current = analysed
    for v in range(3, 3 + HISTORY + 10):  # more versions than the history keeps unpinned
        current = buffer["file:///m.py"] = "# more\n" + current if v % 2 else current + "\n# tail"
        doc.update(v)
    doc.rebase(2, analysed, 2)
    now = split_lines(current)
    for i, line in enumerate(split_lines(analysed), start=1):
        assert now[doc.linemap.line(i) - 1] == line  # type: ignore[union-attr]
    assert not doc.pinned
    diffed = store.open("file:///m.py", 1)  # opened again: no history
    diffed.rebase(2, analysed)  # without the version: the middle is lost
    assert diffed.linemap.line(50) is None  # type: ignore[union-attr]


def test_several_changes_in_one_notification_keep_the_code_between_them() -> None:
    """A didChange with two range changes (multi-cursor): composed change by change, every line
    between the two places is found; one diff of the texts would lose them all."""
    from lsprotocol import types

    from msprof_lsp.server.lsp.state.documents import DocumentStore
    from msprof_lsp.server.lsp.text_sync import _steps

    old = [f"line {i}" for i in range(1, 51)]
    buffer = {"file:///m.py": "\n".join(old)}
    doc = DocumentStore(buffer.__getitem__).open("file:///m.py", 1)
    doc.rebase(1, doc.text)

    def change(line0: int, text: str) -> types.TextDocumentContentChangePartial:
        pos = types.Position(line0, 0)
        return types.TextDocumentContentChangePartial(range=types.Range(pos, pos), text=text)

    # applied in order: "# a\n# b\n" above line 3, then (positions after that) "# z\n" above old line 40
    changes = [change(2, "# a\n# b\n"), change(41, "# z\n")]
    new = old[:2] + ["# a", "# b"] + old[2:39] + ["# z"] + old[39:]
    buffer["file:///m.py"] = "\n".join(new)
    doc.update(2, _steps(changes))
    for i, line in enumerate(old, start=1):
        assert new[doc.linemap.line(i) - 1] == line  # type: ignore[union-attr]
    assert LineMap.diff(old, new).line(20) is None  # what the text diff alone would give


def test_one_change_map_agrees_with_the_text() -> None:
    """Each line the map of one change keeps has the same text in the new buffer; the lines it
    drops are the ones the change touched."""
    old = [f"line {i}" for i in range(1, 21)]
    text = "\n".join(old)
    cases = [  # (start line0, char, end line0, char, new text)
        (2, 0, 2, 0, "# a\n# b\n"), (4, 3, 4, 3, "x"), (5, 0, 9, 0, ""), (7, 2, 11, 4, "q\nr"),
        (19, 7, 19, 7, "\n# tail"), (0, 0, 0, 0, "\n"), (3, 0, 6, 0, "new\n"),
    ]
    for l0, c0, l1, c1, new_text in cases:
        lines = text.split("\n")
        a = sum(len(x) + 1 for x in lines[:l0]) + c0
        b = sum(len(x) + 1 for x in lines[:l1]) + c1
        new = (text[:a] + new_text + text[b:]).split("\n")
        lm = LineMap.edit(l0 + 1, c0, l1 + 1, c1, new_text)
        for i, line in enumerate(old, start=1):
            j = lm.line(i)
            if j is not None:
                assert new[j - 1] == line, (l0, c0, l1, c1, new_text, i)
            else:
                assert l0 + 1 <= i <= l1 + 1, (l0, c0, l1, c1, new_text, i)
