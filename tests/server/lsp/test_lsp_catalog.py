"""The real rule catalog through the plain entry point (``python -m msprof_lsp.server``) on the CNN
sample: NPU101 where the sample writes ReLU -> Dropout, with its related lines and a fix that
applies and compiles.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S
from tests.conftest import server_command

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return S.cnn_workspace(tmp_path_factory.mktemp("catalog") / "ws")


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=server_command()),
                    params=S.PROFILES)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    root = request.getfixturevalue("workspace")
    options = S.init_options(root.parent, only_test_rules=False, select=["NPU1"])
    await S.open_session(lsp_client, request.param, root, options)
    yield
    await lsp_client.shutdown_session()


def npu101_ranges(text: str) -> set[tuple[int, int, int, int]]:
    """The three ReLU -> Dropout constructs of model.py, found in its source: the Sequential's
    ``nn.ReLU(), nn.Dropout(...)`` elements, and the dropout call of the two forward lines."""
    lines = text.split("\n")
    relu = S.line_of(text, "            nn.ReLU(),") - 1
    dropout = relu + 1
    assert lines[dropout].strip().startswith("nn.Dropout(")
    seq = (relu, lines[relu].index("nn.ReLU()"), dropout, len(lines[dropout].rstrip().rstrip(",")))
    return {seq,
            S.call_range(text, S.line_of(text, "x = self.drop(self.act("), "self.drop("),
            S.call_range(text, S.line_of(text, "x = F.dropout(F.relu("), "F.dropout(")}


async def test_npu101_on_the_relu_dropout_constructs(client: LanguageClient) -> None:
    doc = S.Doc(client, client.root / "model.py")
    try:
        want = npu101_ranges(doc.text)
        diags = await S.wait_diagnostics(
            client, client.profile, doc.uri,
            lambda d: {k[1:] for k in S.keyed(d) if k[0] == "NPU101"} == want, what="NPU101 on the three pairs")
        pair = next(d for d in diags if d.code == "NPU101" and d.range.start.line == S.line_of(doc.text, "x = self.drop(") - 1)
        related_lines = {r.location.range.start.line + 1 for r in pair.related_information or []}
        assert related_lines == {S.line_of(doc.text, "self.drop = nn.Dropout("), S.line_of(doc.text, "self.act = nn.ReLU()")}
        assert all(d.severity is not None and d.source == "msprof-lsp" for d in diags)
        actions = await client.text_document_code_action_async(types.CodeActionParams(
            types.TextDocumentIdentifier(doc.uri), pair.range,
            types.CodeActionContext(diagnostics=[pair], only=[types.CodeActionKind.QuickFix])))
        compile_fix = next(a for a in actions if "torch.compile" in a.title)
        assert compile_fix.title.startswith("msprof (NPU101): ") and compile_fix.is_preferred is None  # review
        resolved = await client.code_action_resolve_async(compile_fix)  # both profiles resolve edits
        edits, _ = S.edits_for(resolved.edit, doc.uri)
        fixed = S.apply_text_edits(doc.text, edits)
        compile(ast.parse(fixed), "model.py", "exec")
        assert "torch.compile(" in fixed
    finally:
        doc.close()
