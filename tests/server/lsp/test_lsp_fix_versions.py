"""Fixes and diagnostics against the text the client has (issue 22, item 6: no lost edit).

* A quick fix for a file that is not open and changed on disk since the analysis is not computed
  on the old text: no fix is offered (or one that applies to the disk text as it is now), and an
  action obtained before the change is refused at resolve time.
* Right after a fix is applied (didChange with its edit), asking again at the same place with the
  new version does not offer the same fix on top of itself (a duplicated line).
* After many incremental edits, one whole-document change still gets its diagnostics published.

Three client profiles: VS Code (pull diagnostics, resolve, versioned documentChanges), Neovim 0.7
(push, resolve, plain ``changes``), Emacs/eglot 29.1 (push, edits inline).
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S

pytestmark = pytest.mark.asyncio(loop_scope="module")
PROFILES = (*S.PROFILES, "emacs")
HANG_S = 90.0  # only ends a hang: every wait below is normally well under a second


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return S.cnn_workspace(tmp_path_factory.mktemp("fixversions") / "ws")


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=S.SERVER_COMMAND), params=PROFILES)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    root = request.getfixturevalue("workspace")
    original = (root / "model.py").read_text(encoding="utf-8")
    await S.open_session(lsp_client, request.param, root, S.init_options(root.parent))
    yield
    await lsp_client.shutdown_session()
    (root / "model.py").write_text(original, encoding="utf-8")  # the next profile's session starts clean


def deferred(client: LanguageClient) -> bool:
    return client.profile != "emacs"


async def code_actions(client: LanguageClient, uri: str, diags: list[types.Diagnostic],
                       only: list[str] | None = None) -> list[types.CodeAction]:
    rng = diags[0].range if diags else types.Range(types.Position(0, 0), types.Position(0, 0))
    result = await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(uri), rng, types.CodeActionContext(diagnostics=diags, only=only)))
    return [a for a in result or [] if isinstance(a, types.CodeAction)]


async def edit_of(client: LanguageClient, action: types.CodeAction) -> types.WorkspaceEdit:
    if deferred(client):
        action = await client.code_action_resolve_async(action)
    assert action.edit is not None
    return action.edit


async def open_model(client: LanguageClient) -> tuple[S.Doc, list[types.Diagnostic]]:
    """model.py open as on disk, once the analysis of that version is published."""
    doc = S.Doc(client, client.root / "model.py")
    await S.wait_analysed(client, doc, HANG_S)
    diags = await S.wait_diagnostics(
        client, client.profile, doc.uri,
        lambda ds: len(ds) >= 2 and all(x.data["version"] == doc.version for x in ds), HANG_S, "model.py analysed")
    return doc, diags


def analysed_seen(client: LanguageClient, doc: S.Doc) -> bool:
    return any(S.status_value(d, "uri") == doc.uri and S.status_value(d, "version") == doc.version
               for n in client.seen["analysed"] for d in S.status_value(n, "documents") or [])


async def closed_file_diagnostics(client: LanguageClient, uri: str) -> list[types.Diagnostic]:
    """What the client shows for a file it does not have open (pushed, or one workspace pull)."""
    if S.is_pull(client.profile):
        report = await client.workspace_diagnostic_async(types.WorkspaceDiagnosticParams(previous_result_ids=[]))
        return [d for item in report.items if item.uri == uri and item.kind == "full" for d in item.items]
    await S.wait_until(lambda: len(client.diagnostics.get(uri, [])) >= 2, HANG_S, "model.py's pushed diagnostics")
    return list(client.diagnostics[uri])


def applies_cleanly(text: str, edit: types.WorkspaceEdit, uri: str) -> str:
    edits, _ = S.edits_for(edit, uri)
    assert edits
    new_text = S.apply_text_edits(text, edits)
    ast.parse(new_text)  # raises when the edit landed on other text than it was made for
    return new_text


# -- (a) a closed file changed on disk since the analysis ---------------------------------------


async def test_fix_for_a_closed_file_changed_on_disk_is_not_computed_on_the_old_text(client: LanguageClient) -> None:
    path = client.root / "model.py"
    uri = path.as_uri()
    original = path.read_text(encoding="utf-8")
    diags = await closed_file_diagnostics(client, uri)
    hot = next(d for d in diags if d.code == S.HOT)
    pair = next(d for d in diags if d.code == S.PAIR)
    hot_line = original.split("\n")[hot.range.start.line]
    try:
        # unchanged on disk: the fix is offered, unversioned (no buffer), and applies to the file
        before = await code_actions(client, uri, [hot], only=[types.CodeActionKind.QuickFix])
        (mark,) = [a for a in before if "Mark the hot line" in a.title]
        edit = await edit_of(client, mark)
        _, version = S.edits_for(edit, uri)
        assert version is None
        fixed = applies_cleanly(original, edit, uri).split("\n")
        assert fixed[hot.range.start.line].strip().startswith("# hot: ") and fixed[hot.range.start.line + 1] == hot_line
        (stale,) = [a for a in await code_actions(client, uri, [hot], only=[types.CodeActionKind.QuickFix])
                    if "Mark the hot line" in a.title]

        # edited outside the editor, no watcher event: every line one down, then a fix is asked for
        path.write_text("# edited elsewhere\n" + original, encoding="utf-8")
        disk = path.read_text(encoding="utf-8")
        after = await code_actions(client, uri, [hot, pair])
        for action in after:  # none (the simplest correct answer), or computed on the disk text now
            new_text = applies_cleanly(disk, await edit_of(client, action), uri).split("\n")
            if "Mark the hot line" in action.title:
                at = disk.split("\n").index(hot_line)
                assert new_text[at].strip().startswith("# hot: ") and new_text[at + 1] == hot_line
        if deferred(client):  # an action computed before the change is refused when chosen
            with pytest.raises(JsonRpcException) as info:
                await client.code_action_resolve_async(stale)
            assert "changed on disk" in str(info.value)
    finally:
        path.write_text(original, encoding="utf-8")


async def test_fix_for_a_closed_file_deleted_on_disk_is_not_offered(client: LanguageClient) -> None:
    path = client.root / "model.py"
    uri = path.as_uri()
    original = path.read_text(encoding="utf-8")
    diags = await closed_file_diagnostics(client, uri)
    hot = next(d for d in diags if d.code == S.HOT)
    (stale,) = [a for a in await code_actions(client, uri, [hot], only=[types.CodeActionKind.QuickFix])
                if "Mark the hot line" in a.title]
    try:
        path.unlink()  # deleted outside the editor, no watcher event: there is no text to edit
        after = await code_actions(client, uri, [hot], only=[types.CodeActionKind.QuickFix])
        assert [a.title for a in after if "Mark the hot line" in a.title] == []
        if deferred(client):  # one computed before the deletion is refused when chosen
            with pytest.raises(JsonRpcException) as info:
                await client.code_action_resolve_async(stale)
            assert "changed on disk" in str(info.value)
        else:
            assert stale.edit is not None  # computed eagerly while the file was there
    finally:
        path.write_text(original, encoding="utf-8")


async def test_fix_for_a_closed_file_is_refused_once_the_file_is_opened(client: LanguageClient) -> None:
    if not deferred(client):
        return  # edits inline: nothing is resolved later
    uri = (client.root / "model.py").as_uri()
    hot = next(d for d in await closed_file_diagnostics(client, uri) if d.code == S.HOT)
    (mark,) = [a for a in await code_actions(client, uri, [hot], only=[types.CodeActionKind.QuickFix])
               if "Mark the hot line" in a.title]
    doc = S.Doc(client, client.root / "model.py", "# typed before saving\n" + (client.root / "model.py").read_text())
    try:  # computed on the disk text; the buffer is another text: an unversioned edit would land on it
        with pytest.raises(JsonRpcException) as info:
            await client.code_action_resolve_async(mark)
        assert "opened in the editor" in str(info.value)
    finally:
        doc.close()


# -- (b) a fix just applied is not offered again on top of itself --------------------------------


async def test_applied_fix_is_not_offered_again_before_the_reanalysis(client: LanguageClient) -> None:
    doc, diags = await open_model(client)
    try:
        hot = sorted((d for d in diags if d.code == S.HOT), key=lambda d: d.range.start.line)
        assert len(hot) == 2
        first, second = hot
        (mark,) = [a for a in await code_actions(client, doc.uri, [first], only=[types.CodeActionKind.QuickFix])
                   if "Mark the hot line" in a.title]
        edit = await edit_of(client, mark)
        edits, version = S.edits_for(edit, doc.uri)
        if edit.document_changes is not None:
            assert version == doc.version  # an open document's edit names the version it was made for
        # the client applies it: its didChange, then asks again at once (the lightbulb refreshes)
        for e in edits:
            doc.edit(e.range.start.line, e.range.start.character, e.range.end.line, e.range.end.character, e.new_text)
        marked = doc.text
        for context in ([first], await S.diagnostics_now(client, client.profile, doc.uri)):
            again = await code_actions(client, doc.uri, context)
            if analysed_seen(client, doc):
                continue  # the re-analysis of this version already landed: its own fixes are fair
            titles = [a.title for a in again]
            assert not any("Mark the hot line" in t for t in titles), titles  # it would duplicate the comment
            assert not any(a.kind == "source.fixAll.msprof-lsp" for a in again), titles
        assert doc.text == marked
        # once this version is analysed, fixes are offered again, for this version
        await S.wait_analysed(client, doc, HANG_S)
        now = await S.wait_diagnostics(client, client.profile, doc.uri,
                                       lambda ds: all(x.data["version"] == doc.version for x in ds) and ds, HANG_S)
        moved = [d for d in now if d.code == S.HOT and d.range.start.line == second.range.start.line + 1]
        assert moved
        (fix,) = [a for a in await code_actions(client, doc.uri, moved, only=[types.CodeActionKind.QuickFix])
                  if "Mark the hot line" in a.title]
        edits, version = S.edits_for(await edit_of(client, fix), doc.uri)
        if client.profile != "neovim@v0.7":
            assert version == doc.version
        ast.parse(S.apply_text_edits(doc.text, edits))
    finally:
        doc.close()


# -- (c) a whole-document change after many incremental ones ------------------------------------


async def workspace_ids(client: LanguageClient) -> list[types.PreviousResultId]:
    report = await client.workspace_diagnostic_async(types.WorkspaceDiagnosticParams(previous_result_ids=[]))
    return [types.PreviousResultId(uri=i.uri, value=i.result_id) for i in report.items if i.result_id]


async def test_full_change_after_many_incremental_edits_is_published(client: LanguageClient) -> None:
    doc, diags = await open_model(client)
    try:
        want = S.keyed(diags)
        for i in range(200):
            doc.edit(0, 0, 0, 0, f"# typed {i}\n")  # line starts only
        for _ in range(200):  # and taken out again, one by one
            doc.edit(0, 0, 1, 0, "")
        assert S.keyed(await S.wait_diagnostics(
            client, client.profile, doc.uri, lambda ds: all(x.data["version"] == doc.version for x in ds) and ds,
            HANG_S, "the diagnostics after the incremental edits")) == want
        await S.wait_analysed(client, doc, HANG_S)

        # one whole-document change: two lines on top, every finding two lines down
        doc.replace_all("# a\n# b\n" + doc.text)
        moved = {(c, l0 + 2, a, l1 + 2, b) for c, l0, a, l1, b in want}
        await S.wait_diagnostics(
            client, client.profile, doc.uri,
            lambda ds: S.keyed(ds) == moved and all(x.data["version"] == doc.version for x in ds),
            HANG_S, "the diagnostics of the whole-document change")
        await S.wait_analysed(client, doc, HANG_S)  # and its analysis lands too

        # a whole-document change the analysis cannot take (an unfinished line: no parse, no new
        # analysis): its diagnostics, followed to their lines, are still reported for it at once
        parked = None
        if S.is_pull(client.profile):  # a workspace pull that has nothing new waits for a change
            parked = asyncio.ensure_future(client.workspace_diagnostic_async(
                types.WorkspaceDiagnosticParams(previous_result_ids=await workspace_ids(client))))
            await asyncio.sleep(0.2)
            assert not parked.done()
        doc.replace_all(doc.text + "x = (\n")
        await S.wait_diagnostics(
            client, client.profile, doc.uri,
            lambda ds: S.keyed(ds) == moved and all(x.data["version"] == doc.version for x in ds),
            HANG_S, "the diagnostics of the unparsable change")
        if parked is not None:
            report = await asyncio.wait_for(parked, 20)  # the park is 60 s: only a fix answers in time
            (item,) = [i for i in report.items if i.uri == doc.uri]
            assert item.kind == "full" and item.version == doc.version and S.keyed(item.items) == moved
    finally:
        doc.close()
