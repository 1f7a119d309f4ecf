"""Output is escaped in the editor: a profile whose kernel types carry terminal escapes, bidi
overrides, forged workflow commands, Markdown images/links and HTML tags reaches the client's
hover Markdown as literal text (no live link, image or HTML, no extra table cell) and its plain
texts (code lens titles, inlay hints, diagnostics) with every control shown as ``\\x1b`` text."""

from __future__ import annotations

import re

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S
from tests.synth.hostile_text import hostile_cnn_workspace, live_markdown, raw_controls

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=S.SERVER_COMMAND))
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    root = hostile_cnn_workspace(request.getfixturevalue("tmp_path_factory").mktemp("hostile-lsp") / "ws")
    lsp_client.options = S.init_options(root.parent)
    await S.open_session(lsp_client, "visual-studio-code", root, lsp_client.options)
    assert S.status_value(lsp_client.status, "state") == "loaded", lsp_client.status
    lsp_client.doc = S.Doc(lsp_client, root / "model.py")
    await S.wait_analysed(lsp_client, lsp_client.doc)
    yield
    await lsp_client.shutdown_session()


async def test_hover_markdown_is_literal(client: LanguageClient) -> None:
    doc = client.doc
    line = S.line_of(doc.text, "return self.pool(F.relu(self.bn(self.conv(x))))")
    hover = await client.text_document_hover_async(
        types.HoverParams(types.TextDocumentIdentifier(doc.uri), types.Position(line - 1, 20)))
    assert hover is not None and hover.contents.kind == types.MarkupKind.Markdown
    md = hover.contents.value
    assert raw_controls(md) == []
    assert "\\\\x1b\\]0\\;pwned\\\\x07" in md, "the hostile name is shown (escaped), not dropped"
    lines = md.splitlines()
    width = 0
    for i, row in enumerate(lines):
        if not row.startswith("| "):
            continue
        cells = re.split(r"(?<!\\)\|", row)[1:-1]
        if i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            width = len(cells)
        assert len(cells) == width, row  # no table cell came from a name
        for cell in cells:
            assert live_markdown(cell) == [], cell


async def test_plain_texts_show_controls(client: LanguageClient) -> None:
    doc = client.doc
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(doc.uri)))
    titles = [lens.command.title for lens in lenses if lens.command]
    assert titles and raw_controls("\n".join(titles)) == []
    assert any(t.startswith("CBI\\x1b[2J\\u202e · ") for t in titles), titles  # the conv line's top operator
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        types.TextDocumentIdentifier(doc.uri), types.Range(types.Position(0, 0), types.Position(len(doc.text.splitlines()), 0))))
    labels = [h.label if isinstance(h.label, str) else "".join(p.value for p in h.label) for h in hints or []]
    assert raw_controls("\n".join(labels)) == []
    report = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(types.TextDocumentIdentifier(doc.uri)))
    messages = [d.message for d in getattr(report, "items", [])]
    messages += [r.message for d in getattr(report, "items", []) for r in d.related_information or []]
    assert raw_controls("\n".join(messages)) == []
    assert raw_controls(str(S.status_value(client.status, "message") or "")) == []

