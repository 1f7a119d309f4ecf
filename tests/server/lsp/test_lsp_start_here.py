""""Start here" in the editor: the status bar's headline names the first start-here finding (the
biggest saving; hints.consolidate.start_here, as --check chooses), and a code lens
"Start here (#n: …)" sits on the line of each start-here finding of the open file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S

pytestmark = pytest.mark.asyncio(loop_scope="module")
TITLE = re.compile(r"^Start here \(#(\d): (.+)\)$")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return S.cnn_workspace(tmp_path_factory.mktemp("start") / "ws")


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=S.SERVER_COMMAND), params=S.PROFILES)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    root = request.getfixturevalue("workspace")
    lsp_client.options = S.init_options(root.parent)
    await S.open_session(lsp_client, request.param, root, lsp_client.options)
    lsp_client.doc = S.Doc(lsp_client, root / "model.py")
    lsp_client.diags = await S.wait_diagnostics(lsp_client, request.param, lsp_client.doc.uri, lambda d: len(d) == 5)
    yield
    await lsp_client.shutdown_session()


async def test_status_headline_names_the_first_start_here_finding(client: LanguageClient) -> None:
    status = client.status
    top, headline = S.status_value(status, "topCode"), S.status_value(status, "headline")
    assert top.startswith("TST") and headline.startswith("Start here: ") and f" · {top} " in headline
    # the test rules model no saving: the headline says so and names the charged time's denominator
    assert S.status_value(status, "topSavingUs") is None
    assert "saving unknown" in headline and re.search(r"of the (device|wall) step\)", headline)


async def test_start_here_lenses_on_the_lines_of_the_top_findings(client: LanguageClient) -> None:
    lenses = await client.text_document_code_lens_async(types.CodeLensParams(types.TextDocumentIdentifier(client.doc.uri)))
    start = {}
    for lens in lenses:
        m = TITLE.match(lens.command.title)
        if m:
            start[int(m.group(1))] = lens
            assert m.group(2).endswith("/step, saving unknown")
    assert start and set(start) <= {1, 2, 3}
    # each sits on a line where a finding's diagnostic starts; the file's other lenses stay
    diag_lines = {d.range.start.line for d in client.diags}
    assert {lens.range.start.line for lens in start.values()} <= diag_lines
    assert len(lenses) > len(start)
