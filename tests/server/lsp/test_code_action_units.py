"""Code actions without a running server: alternatives of one construct (a code action carries
its fix's group; "fix all" takes one fix of a group, never two that would stack on one
construct) and "Disable for this file" for a finding about the file, never inside its docstring."""

from __future__ import annotations

from types import SimpleNamespace

from lsprotocol import types

from msprof_lsp.hints import suppress
from msprof_lsp.hints.finding import Fix, TextEdit
from msprof_lsp.server.lsp import code_action, convert, payloads
from msprof_lsp.server.lsp.convert import FileView, fix_payload
from msprof_lsp.server.lsp.payloads import ChangeData, CodeActionData, DiagnosticData, EditData, FixData
from msprof_lsp.server.lsp.state.linemap import LineMap

URI = "file:///ws/train.py"


def _ls(resolve: bool) -> SimpleNamespace:
    caps = SimpleNamespace(code_action_resolve_edit=resolve, document_changes=True, position_encoding="utf-16")
    return SimpleNamespace(caps=caps)


def _fix(title: str, line: int, text: str, group: str = "") -> FixData:
    return FixData(title, True, [ChangeData(URI, 3, [EditData(line, 0, line, 0, text)])], group)


def _diag(line: int, finding: int) -> types.Diagnostic:
    rng = types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=4))
    data = payloads.dump(DiagnosticData("NPU101", URI, 3, 1, line + 1, finding, 1))
    return types.Diagnostic(range=rng, message="m", code="NPU101", source="msprof-lsp", data=data)


def test_fix_all_takes_one_fix_per_group(monkeypatch):
    a = _fix("drop p=0 dropout", 4, "x\n", group="NPU101/pair@5")
    b = _fix("the other way", 7, "y\n", group="NPU101/pair@5")  # no textual overlap with a
    c = _fix("unrelated", 9, "z\n")
    by_finding = {0: [a, b], 1: [c]}
    monkeypatch.setattr(code_action, "_fixes_of", lambda ls, views, view, data: by_finding[data.finding])
    for resolve in (True, False):
        action = code_action._fix_all(_ls(resolve), None, _view(), [_diag(4, 0), _diag(9, 1)])
        assert action.title == "msprof: apply 2 safe fixes"
        edits = action.data["changes"][0]["edits"] if resolve else action.edit.document_changes[0].edits
        texts = [e["newText"] if resolve else e.new_text for e in edits]
        assert sorted(texts) == ["x\n", "z\n"]


def test_code_action_data_carries_the_group_and_the_payload_keeps_it():
    for resolve in (True, False):
        action = convert.make_action(_ls(resolve).caps, "t", "quickfix", _fix("t", 1, "x").changes, group="NPU220/optimizer@90")
        assert action.data["group"] == "NPU220/optimizer@90"
        assert ("changes" in action.data) is resolve and (action.edit is None) is resolve
        back = payloads.load(action.data, CodeActionData)
        assert back.group == "NPU220/optimizer@90" and (back.changes == _fix("t", 1, "x").changes if resolve else back.changes is None)
    plain = convert.make_action(_ls(False).caps, "t", "quickfix", _fix("t", 1, "x").changes)
    assert plain.data is None
    view = FileView(URI, "/ws/train.py", 3, ["a = 1", "b = 2"], LineMap.identity())
    fix = Fix("t", False, (TextEdit("/ws/train.py", 1, 0, 1, 1, "c"),), "NPU220/optimizer@1")
    assert fix_payload(fix, {"/ws/train.py": view}, "utf-16").group == "NPU220/optimizer@1"
    assert fix_payload(Fix("t", False, fix.edits), {"/ws/train.py": view}, "utf-16").group == ""


def test_payloads_that_are_not_ours_read_back_as_absent():
    good = payloads.dump(DiagnosticData("NPU101", URI, None, 2, 7, 0, 1))
    assert good["version"] is None and good["line"] == 7  # the wire names the client and the tests read
    assert payloads.load(good, DiagnosticData) == DiagnosticData("NPU101", URI, None, 2, 7, 0, 1)
    for foreign in (None, "x", [1], {"line": 1}, {**good, "line": "seven"}, {**good, "finding": None}):
        assert payloads.load(foreign, DiagnosticData) is None
    assert payloads.load({"changes": [{"uri": URI, "version": 1, "edits": [{"line": 0}]}]}, CodeActionData) is None


DOC = ['"""Train a model.', "", 'More words."""', "", "import os", 'os.environ["X"] = "1"']


def _view() -> FileView:
    return FileView(URI, "/ws/train.py", 5, DOC, LineMap.identity())


def test_a_finding_at_the_file_start_gets_a_file_suppression_after_the_docstring():
    at_start = types.Diagnostic(range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
                                message="m", code="NPU241", source="msprof-lsp", data={"line": 1})
    action = code_action._suppression(_ls(False), _view(), "NPU241", 0, at_start)
    assert action.title == "msprof (NPU241): Disable for this file"
    (edit,) = action.edit.document_changes[0].edits
    assert (edit.range.start.line, edit.range.start.character, edit.new_text) == (3, 0, "# msprof: ignore-file[NPU241]\n")
    new = DOC[:3] + ["# msprof: ignore-file[NPU241]"] + DOC[3:]
    assert suppress.is_suppressed(suppress.suppressions("\n".join(new)), 1, "NPU241")
    # on a code line it stays a line suppression
    on_line = types.Diagnostic(range=types.Range(start=types.Position(line=5, character=0), end=types.Position(line=5, character=9)),
                               message="m", code="NPU241", source="msprof-lsp", data={"line": 6})
    action = code_action._suppression(_ls(False), _view(), "NPU241", 5, on_line)
    assert action.title.endswith("Disable for this line")
    assert action.edit.document_changes[0].edits[0].new_text == "  # msprof: ignore[NPU241]"
