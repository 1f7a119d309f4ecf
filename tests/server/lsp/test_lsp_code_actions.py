"""Code actions end to end: quick fixes (deferred through codeAction/resolve or inline), fixAll,
"Disable for this line", context.only, and refusing an action computed for an older text.

Three client profiles: VS Code (resolve + versioned documentChanges), Neovim 0.7 (resolve +
plain `changes`), Emacs/eglot 29.1 (no resolve: edits inline; UTF-32 positions).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S

pytestmark = pytest.mark.asyncio(loop_scope="module")
PROFILES = (*S.PROFILES, "emacs")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return S.cnn_workspace(tmp_path_factory.mktemp("actions") / "ws")


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=S.SERVER_COMMAND), params=PROFILES)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    root = request.getfixturevalue("workspace")
    await S.open_session(lsp_client, request.param, root, S.init_options(root.parent))
    yield
    await lsp_client.shutdown_session()


def deferred(client: LanguageClient) -> bool:
    return client.profile != "emacs"


async def open_with_diagnostics(client: LanguageClient) -> tuple[S.Doc, list[types.Diagnostic]]:
    """Open model.py as on disk and wait for its diagnostics (an earlier test's edits may still be
    settling in the server: the file was closed, so it converges back to the disk text)."""
    doc = S.Doc(client, client.root / "model.py")
    rank = S.status_value(client.status, "rank")
    hot = S.hot_model_lines(doc.text, S.cnn_truth_shares(rank))
    want = S.expected_cnn(doc.text, hot)
    diags = await S.wait_diagnostics(
        client, client.profile, doc.uri,
        lambda d: S.keyed(d) == want and all(x.data["version"] == doc.version for x in d), what="the disk state")
    return doc, diags


def on_line(text: str, diags: list[types.Diagnostic], needle: str, code: str) -> types.Diagnostic:
    line0 = S.line_of(text, needle) - 1
    (d,) = [d for d in diags if d.code == code and d.range.start.line == line0]
    return d


async def actions_for(client: LanguageClient, doc: S.Doc, diags: list[types.Diagnostic],
                      only: list[str] | None = None) -> list[types.CodeAction]:
    rng = diags[0].range if diags else types.Range(types.Position(0, 0), types.Position(0, 0))
    result = await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(doc.uri), rng, types.CodeActionContext(diagnostics=diags, only=only)))
    return [a for a in result or [] if isinstance(a, types.CodeAction)]


async def edit_of(client: LanguageClient, action: types.CodeAction) -> types.WorkspaceEdit:
    if deferred(client):
        assert action.edit is None and action.data is not None  # computed only when chosen
        action = await client.code_action_resolve_async(action)
    assert action.edit is not None
    return action.edit


async def apply(client: LanguageClient, doc: S.Doc, action: types.CodeAction) -> str:
    edit = await edit_of(client, action)
    edits, version = S.edits_for(edit, doc.uri)
    if client.profile == "neovim@v0.7":
        assert edit.document_changes is None and edit.changes  # no documentChanges support declared
    else:
        assert edit.changes is None and version == doc.version  # versioned: stale edits are refused
    assert edits
    return S.apply_text_edits(doc.text, edits)


async def test_quick_fix_compiles_the_pair(client: LanguageClient) -> None:
    doc, diags = await open_with_diagnostics(client)
    try:
        d = on_line(doc.text, diags, "x = self.drop(self.act(", S.PAIR)
        everything = await actions_for(client, doc, [d])
        assert [a.kind for a in everything].count("source.fixAll.msprof-lsp") == 1  # no `only`: offered too
        actions = [a for a in everything if a.kind == types.CodeActionKind.QuickFix]
        titles = [a.title for a in actions]
        assert all(t.startswith(f"msprof ({S.PAIR}): ") for t in titles)
        assert f"msprof ({S.PAIR}): Disable for this line" in titles
        fixes = [a for a in actions if "Disable" not in a.title]
        assert fixes
        assert all(a.is_preferred is None for a in fixes)  # review fixes are never preferred
        compile_fix = next(a for a in fixes if "compile" in a.title.lower())
        new_text = await apply(client, doc, compile_fix)
        tree = ast.parse(new_text)  # the fixed module still parses
        compile(tree, "model.py", "exec")
        assert "torch.compile(" in new_text and "self.drop(self.act(" not in new_text
        # the rewritten call is not a ReLU -> Dropout pair of the profile any more
        doc.replace_all(new_text)
        await S.wait_diagnostics(
            client, client.profile, doc.uri,
            lambda ds: sum(1 for x in ds if x.code == S.PAIR) == 2 and all(x.data["version"] == doc.version for x in ds),
            what="one pair fewer")
    finally:
        doc.close()


async def test_fix_all_applies_every_safe_fix(client: LanguageClient) -> None:
    doc, diags = await open_with_diagnostics(client)
    try:
        hot = [d for d in diags if d.code == S.HOT]
        assert len(hot) == 2
        (action,) = await actions_for(client, doc, [], only=[types.CodeActionKind.SourceFixAll])
        assert action.kind == "source.fixAll.msprof-lsp" and "2 safe fixes" in action.title
        new_text = await apply(client, doc, action)
        ast.parse(new_text)
        new_lines = new_text.split("\n")
        for d in hot:  # one comment above each hot statement, nothing else changed
            line0 = d.range.start.line + sum(1 for h in hot if h.range.start.line < d.range.start.line)
            assert new_lines[line0].strip().startswith("# hot: ")
            assert new_lines[line0 + 1] == doc.text.split("\n")[d.range.start.line]
        assert len(new_lines) == len(doc.text.split("\n")) + 2
        # "source" asks for it too; "quickfix" does not
        assert [a.kind for a in await actions_for(client, doc, [], only=["source"])] == ["source.fixAll.msprof-lsp"]
        quick = await actions_for(client, doc, hot, only=[types.CodeActionKind.QuickFix])
        assert quick and all(a.kind == types.CodeActionKind.QuickFix for a in quick)
        preferred = [a for a in quick if a.is_preferred]
        assert len(preferred) == 2 and all("Mark the hot line" in a.title for a in preferred)  # safe ones only
    finally:
        doc.close()


async def test_disable_for_this_line(client: LanguageClient) -> None:
    doc, diags = await open_with_diagnostics(client)
    try:
        needle = "x = self.embed(x)"  # both rules fire here
        for code in (S.PAIR, S.HOT):
            d = on_line(doc.text, diags, needle, code)
            actions = await actions_for(client, doc, [d], only=[types.CodeActionKind.QuickFix])
            (disable,) = [a for a in actions if a.title == f"msprof ({code}): Disable for this line"]
            doc.replace_all(await apply(client, doc, disable))
            others = {str(x.code) for x in diags if x.range.start.line == d.range.start.line} - {code}
            # the edited line's other diagnostics come back once the re-analysis has re-anchored it
            diags = await S.wait_diagnostics(
                client, client.profile, doc.uri,
                lambda ds: {str(x.code) for x in ds if x.range.start.line == d.range.start.line} == others
                and all(x.data["version"] == doc.version for x in ds), what=f"{code} silenced")
        line = doc.text.split("\n")[S.line_of(doc.text, needle) - 1]
        assert line.endswith(f"x = self.embed(x)  # msprof: ignore[{S.PAIR}, {S.HOT}]")
        ast.parse(doc.text)
        assert len(diags) == 3  # the other lines keep theirs
    finally:
        doc.close()


async def test_action_for_an_older_text_is_refused(client: LanguageClient) -> None:
    doc, diags = await open_with_diagnostics(client)
    try:
        d = on_line(doc.text, diags, "x = F.dropout(F.relu(", S.PAIR)
        old = await actions_for(client, doc, [d], only=[types.CodeActionKind.QuickFix])
        doc.edit(0, 0, 0, 0, "# edited\n")  # every line moves down by one
        if deferred(client):
            with pytest.raises(JsonRpcException) as info:
                await client.code_action_resolve_async(old[0])
            assert "changed since" in str(info.value)
        # asked again with the old diagnostic: answered from the current text (line moved), or not at all
        fresh = await actions_for(client, doc, [d], only=[types.CodeActionKind.QuickFix])
        assert any("Disable" in a.title for a in fresh)
        for action in fresh:
            edit = await edit_of(client, action)
            edits, version = S.edits_for(edit, doc.uri)
            if version is not None:
                assert version == doc.version
            if "Disable" in action.title:  # computed on the current text: the comment lands on the call
                new_line = S.apply_text_edits(doc.text, edits).split("\n")[S.line_of(doc.text, "x = F.dropout(F.relu(") - 1]
                assert new_line.endswith(f"# msprof: ignore[{S.PAIR}]") and "F.dropout(F.relu(" in new_line
    finally:
        doc.close()
