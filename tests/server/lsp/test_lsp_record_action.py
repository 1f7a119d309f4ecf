"""The record action in the language server: offered on the training loop with no profile
loaded, its edit is the library transform's, the no-profile message names it, and a second
request after applying it offers nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loop"))
from test_record_profile import TRAIN  # noqa: E402  (the CNN sample's loop without a profiler)

from msprof_lsp.hints.fixes.profiling import TITLE, insert_profiler  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="module")
REWRITE = types.CodeActionKind.RefactorRewrite.value


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return S.train_workspace(tmp_path_factory.mktemp("record") / "ws", TRAIN)


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=S.SERVER_COMMAND), params=S.PROFILES)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    root = request.getfixturevalue("workspace")
    await S.open_session(lsp_client, request.param, root, S.init_options(root.parent))
    yield
    await lsp_client.shutdown_session()


async def _actions(client: LanguageClient, doc: S.Doc, line0: int, only: list[str] | None = None) -> list[types.CodeAction]:
    rng = types.Range(types.Position(line0, 4), types.Position(line0, 4))
    got = await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(doc.uri), rng, types.CodeActionContext(diagnostics=[], only=only)))
    return [a for a in got or [] if isinstance(a, types.CodeAction)]


async def test_record_action_without_a_profile(client: LanguageClient) -> None:
    assert S.status_value(client.status, "state") == "none"
    await S.wait_until(lambda: client.messages, 10, "the no-profile message")
    (msg,) = client.messages
    assert "no profile found" in msg.message and TITLE in msg.message and "--print-profiler-snippet" in msg.message
    doc = S.Doc(client, client.root / "train.py")
    loop0 = S.line_of(doc.text, "loss.backward()") - 1
    assert await _actions(client, doc, S.line_of(doc.text, "def train") - 1) == []  # not on the loop
    (action,) = await _actions(client, doc, loop0, only=[REWRITE])
    assert action.title == f"msprof: {TITLE}" and action.kind == REWRITE
    assert await _actions(client, doc, loop0, only=[types.CodeActionKind.QuickFix.value]) == []
    assert action.command is None  # an edit only: the server never runs the script (docs/security.md)
    if action.edit is None:
        action = await client.code_action_resolve_async(action)
    assert action.command is None
    edits, _version = S.edits_for(action.edit, doc.uri)
    new = S.apply_text_edits(doc.text, edits)
    assert new == insert_profiler(TRAIN, loop0 + 1, path=str(client.root / "train.py")).new_source
    doc.replace_all(new)
    assert await _actions(client, doc, S.line_of(new, "loss.backward()") - 1) == []  # idempotent
    doc.close()
