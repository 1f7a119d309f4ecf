"""Diagnostics end to end on the CNN sample: ranges, gating per client, edits, bursts, encodings.

One server per client profile for the module (tests close what they open, so the next one starts
from the file on disk).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return S.cnn_workspace(tmp_path_factory.mktemp("diagnostics") / "ws")


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=S.SERVER_COMMAND), params=S.PROFILES)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    root = request.getfixturevalue("workspace")
    await S.open_session(lsp_client, request.param, root, S.init_options(root.parent))
    yield
    await lsp_client.shutdown_session()


def hot_lines(client: LanguageClient) -> list[str]:
    """Contents of the model.py lines with >= 5 % of the step in the run description."""
    rank = S.status_value(client.status, "rank")
    lines = S.hot_model_lines((client.root / "model.py").read_text(encoding="utf-8"), S.cnn_truth_shares(rank))
    assert sorted(lines) == ["return self.pool(F.relu(self.bn(self.conv(x))))", "x = self.embed(x)"], lines
    return lines


async def test_loaded_status(client: LanguageClient) -> None:
    status = client.status
    assert S.status_value(status, "state") == "loaded"
    assert S.status_value(status, "kind") == "torch_npu"
    assert S.status_value(status, "ranks") == [0, 1]  # npu_profile holds ranks 0 and 1
    assert S.status_value(status, "path").startswith(str(client.root / "npu_profile"))


async def test_ranges_on_the_sample(client: LanguageClient) -> None:
    doc = S.Doc(client, client.root / "model.py")
    try:
        want = S.expected_cnn(doc.text, hot_lines(client))
        diags = await S.wait_diagnostics(
            client, client.profile, doc.uri, lambda d: S.keyed(d) == want and all(x.data["version"] == 1 for x in d))
        by_code = {str(d.code) for d in diags}
        assert by_code == {S.PAIR, S.HOT}
        for d in diags:
            assert d.source == "msprof-lsp"
            assert d.data["version"] == doc.version and d.data["code"] == d.code
            assert d.tags is None  # nothing here is "unnecessary" or "deprecated"
        rank = S.status_value(client.status, "rank")
        shares = S.cnn_truth_shares(rank)
        for d in diags:
            if d.code == S.HOT:
                line = d.range.start.line + 1
                share = shares[("model.py", line)]
                assert f"({share * 100:.1f}% of the device step)" in d.message  # the number in the message
                assert d.severity == types.DiagnosticSeverity.Warning  # >= 5 %: warning
    finally:
        doc.close()


async def test_gating_per_client(client: LanguageClient) -> None:
    doc = S.Doc(client, client.root / "model.py")
    try:
        diags = await S.wait_diagnostics(client, client.profile, doc.uri, lambda d: len(d) >= 5)
        pairs = [d for d in diags if d.code == S.PAIR]
        if client.profile == "visual-studio-code":
            assert all(d.code_description and d.code_description.href.endswith(f"/{d.code}.md") for d in diags)
        else:  # Neovim 0.7 does not declare codeDescriptionSupport
            assert all(d.code_description is None for d in diags)
        lines = doc.text.split("\n")
        for d in pairs:
            call = lines[d.range.start.line][d.range.start.character:]
            relu_call = next(v for k, v in S.PAIR_RELU.items() if call.startswith(k))
            if relu_call is None:
                assert not d.related_information
                continue
            (rel,) = d.related_information
            assert rel.location.uri == doc.uri
            assert rel.location.range.start.line == d.range.start.line
            assert lines[rel.location.range.start.line][rel.location.range.start.character:].startswith(relu_call)
    finally:
        doc.close()


async def test_profile_level_finding_is_one_message(client: LanguageClient) -> None:
    notes = [m for m in client.messages if S.PROFILE_NOTE in m.message]
    assert len(notes) == 1 and "2 profiled steps" in notes[0].message
    doc = S.Doc(client, client.root / "model.py")
    try:
        diags = await S.wait_diagnostics(client, client.profile, doc.uri, lambda d: len(d) > 0)
        assert all(d.code != S.PROFILE_NOTE for d in diags)
    finally:
        doc.close()


async def test_diagnostic_follows_the_call_moved_down(client: LanguageClient) -> None:
    doc = S.Doc(client, client.root / "model.py")
    try:
        hot = hot_lines(client)
        await S.wait_diagnostics(client, client.profile, doc.uri, lambda d: S.keyed(d) == S.expected_cnn(doc.text, hot))
        target = S.line_of(doc.text, "x = self.drop(self.act(")
        doc.edit(target - 1, 0, target - 1, 0, "        # moved\n" * 5)
        want = S.expected_cnn(doc.text, hot)
        assert S.line_of(doc.text, "x = self.drop(self.act(") == target + 5
        # at once (line map), and still after the re-analysis has re-anchored the call
        await S.wait_diagnostics(client, client.profile, doc.uri, lambda d: S.keyed(d) == want, what="moved")
        await S.wait_analysed(client, doc)
        diags = await S.diagnostics_now(client, client.profile, doc.uri)
        assert S.keyed(diags) == want
        moved = [d for d in diags if d.code == S.PAIR and d.range.start.line == target + 5 - 1]
        assert len(moved) == 1
    finally:
        doc.close()


async def test_burst_of_200_changes_stays_responsive(client: LanguageClient) -> None:
    doc = S.Doc(client, client.root / "model.py")
    try:
        # The burst starts once the profile is loaded and the opened file analysed: what is under
        # test is the answer during the burst, not a race with the first load on a busy machine.
        await S.wait_analysed(client, doc)
        line0 = S.line_of(doc.text, "x = self.embed(x)") - 1
        doc.edit(line0, 0, line0, 0, "        # typing\n")
        for i in range(199):
            col = len("        # typing") + i
            doc.edit(line0, col, line0, col, "x")
        assert doc.version == 201
        pos = types.Position(line=line0 + 1, character=12)
        hover = await asyncio.wait_for(client.text_document_hover_async(
            types.HoverParams(types.TextDocumentIdentifier(doc.uri), pos)), 60)
        assert hover is not None and "MatMulV2" in hover.contents.value  # the embed block's heat, moved down
        actions = await asyncio.wait_for(client.text_document_code_action_async(types.CodeActionParams(
            types.TextDocumentIdentifier(doc.uri), types.Range(pos, pos),
            types.CodeActionContext(diagnostics=[]))), 60)
        assert actions is not None
        # the server's own word that it analysed version 201, not a race against a sleep
        await S.wait_analysed(client, doc)
        want = S.expected_cnn(doc.text, hot_lines(client))
        diags = await S.diagnostics_now(client, client.profile, doc.uri)
        assert S.keyed(diags) == want
        assert all(d.data["version"] == 201 for d in diags)
    finally:
        doc.close()


async def test_utf16_columns_after_chinese_and_emoji(client: LanguageClient) -> None:
    doc = S.Doc(client, client.root / "model.py")
    try:
        line = S.line_of(doc.text, "x = self.drop(self.act(")
        prefix = 'tag = "中文😋"; '
        indent = len("        ")
        doc.edit(line - 1, indent, line - 1, indent, prefix)
        text_line = doc.text.split("\n")[line - 1]
        start_cp = text_line.index("self.drop(")
        # code points vs UTF-16: the emoji is one code point and two UTF-16 units
        assert S.utf16_col(text_line, start_cp) == start_cp + 1
        want = S.to_utf16(doc.text, S.call_range(doc.text, line, "self.drop("))
        # the edited line is re-anchored by the next analysis (its text changed)
        diags = await S.wait_diagnostics(
            client, client.profile, doc.uri,
            lambda d: any(d_.code == S.PAIR and S.keyed([d_]) == {(S.PAIR, *want)} for d_ in d), what="utf-16 range")
        assert any(d.range.start.character == start_cp + 1 for d in diags if d.code == S.PAIR)
    finally:
        doc.close()


async def test_pull_reports(client: LanguageClient) -> None:
    if not S.is_pull(client.profile):
        assert client.seen["init"][0].capabilities.diagnostic_provider is None  # push only for Neovim 0.7
        return
    assert not client.diagnostics  # a pull client gets no pushes
    provider = client.seen["init"][0].capabilities.diagnostic_provider
    assert provider.workspace_diagnostics and not provider.inter_file_dependencies
    doc = S.Doc(client, client.root / "model.py")
    try:
        await S.wait_diagnostics(client, client.profile, doc.uri, lambda d: len(d) == 5)
        ident = types.TextDocumentIdentifier(doc.uri)
        first = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(text_document=ident))
        again = await client.text_document_diagnostic_async(
            types.DocumentDiagnosticParams(text_document=ident, previous_result_id=first.result_id))
        assert again.kind == "unchanged" and again.result_id == first.result_id
        report = await client.workspace_diagnostic_async(types.WorkspaceDiagnosticParams(previous_result_ids=[]))
        by_uri = {item.uri: item for item in report.items}
        assert by_uri[doc.uri].kind == "full" and len(by_uri[doc.uri].items) == 5
        assert by_uri[doc.uri].version == doc.version
    finally:
        doc.close()
