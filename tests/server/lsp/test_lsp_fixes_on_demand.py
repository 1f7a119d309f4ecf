"""Fixes on demand: with a loaded profile and the real catalog, opening a 3,000-line file and
typing 20 changes runs no libcst parse for fixes; the first code action parses the file once,
and further code actions of the same analysis reuse that parse.

The server runs under serve_counting_fix_parses.py, which logs every parse the fixes make (the
one parse helper, ``hints.fixes.cst_tools.Source``) with the parsed file's line count.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S
from tests.conftest import client_python_flags

pytestmark = pytest.mark.asyncio(loop_scope="module")

HERE = Path(__file__).resolve().parent
PARSE_LOG = Path(os.environ.get("TMPDIR", "/tmp")) / f"msprof-lsp-fix-parses-{os.getpid()}.log"
LINES = 3000
CODES = ["NPU104", "NPU107", "NPU220"]  # the train.py findings of the sample that offer fixes


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ondemand") / "ws"
    src = S.SAMPLES / "tiny_transformer"
    root.mkdir()
    shutil.copy2(src / "model.py", root / "model.py")
    text = (src / "train.py").read_text(encoding="utf-8")
    # padding after the code the profile points at, so its lines stay where the stacks say
    pad, i = [], 0
    while text.count("\n") + len(pad) * 3 < LINES:
        pad.append(f"\n\ndef _helper_{i}(x):\n    return x + {i}")
        i += 1
    (root / "train.py").write_text(text + "".join(pad) + "\n", encoding="utf-8")
    shutil.copytree(src / "npu_profile", root / "npu_profile")
    return root


@pytest_lsp.fixture(
    scope="module",
    config=ClientServerConfig(
        server_command=[sys.executable, *client_python_flags(), str(HERE / "serve_counting_fix_parses.py")],
        server_env={**os.environ, "MSPROF_LSP_TEST_PARSE_LOG": str(PARSE_LOG)},
    ),
    params=S.PROFILES,
)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    PARSE_LOG.unlink(missing_ok=True)
    root = request.getfixturevalue("workspace")
    await S.open_session(lsp_client, request.param, root, S.init_options(root.parent, only_test_rules=False, select=CODES))
    yield
    await lsp_client.shutdown_session()
    PARSE_LOG.unlink(missing_ok=True)


def parses() -> list[int]:
    """Line counts of the files parsed for fixes so far."""
    return [int(n) for n in PARSE_LOG.read_text().split()] if PARSE_LOG.exists() else []


async def test_typing_parses_nothing_for_fixes_until_a_code_action_is_asked(client: LanguageClient) -> None:
    doc = S.Doc(client, client.root / "train.py")
    try:
        assert doc.text.count("\n") >= LINES
        await S.wait_analysed(client, doc)
        rng = random.Random(13)
        for i in range(20):
            at = rng.randrange(doc.text.count("\n"))
            doc.edit(at, 0, at, 0, f"# typed {i}\n")  # a line start: never inside a token
        await S.wait_analysed(client, doc)
        diags = await S.diagnostics_now(client, client.profile, doc.uri)
        offering = [d for d in diags if d.data.get("fixes", 0) > 0]  # left out at 0
        assert {str(d.code) for d in offering} >= {"NPU104", "NPU220"}
        assert parses() == []  # open, 20 changes, their analyses and publishes: no parse for fixes

        first = offering[0]
        result = await client.text_document_code_action_async(types.CodeActionParams(
            types.TextDocumentIdentifier(doc.uri), first.range,
            types.CodeActionContext(diagnostics=[first], only=[types.CodeActionKind.QuickFix])))
        fixes = [a for a in result or [] if isinstance(a, types.CodeAction) and "Disable" not in a.title]
        assert fixes and all(a.title.startswith(f"msprof ({first.code}): ") for a in fixes)
        assert parses() == [doc.text.count("\n") + 1]  # the file as analysed, parsed once

        for d in offering[1:]:
            await client.text_document_code_action_async(types.CodeActionParams(
                types.TextDocumentIdentifier(doc.uri), d.range, types.CodeActionContext(diagnostics=[d])))
        assert len(parses()) == 1  # the other findings of this analysis reuse the parse
    finally:
        doc.close()
