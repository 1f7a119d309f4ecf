"""Every diagnostic follows its code through a storm of edits (the real catalog on the tiny
transformer sample): comment and blank lines inserted all over train.py, without waiting in
between; once the server says it analysed the final version, each finding is on the line that
holds its code, and none is lost.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S
from tests.conftest import server_command

pytestmark = pytest.mark.asyncio(loop_scope="module")

# The code each train.py finding of the NPU profile stands on (--check on the sample); the device
# idle (NPU105) is the DataLoader's wait, one cause: folded into NPU104 (hints.consolidate)
ANCHORS = {
    "NPU104": "for step, (tokens, targets) in enumerate(loader):",
    "NPU107": "import torch_npu",
    "NPU220": "torch.optim.AdamW(model.parameters()",
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("storm") / "ws"
    src = S.SAMPLES / "tiny_transformer"
    root.mkdir()
    for name in ("model.py", "train.py"):
        shutil.copy2(src / name, root / name)
    shutil.copytree(src / "npu_profile", root / "npu_profile")
    return root


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=server_command()),
                    params=S.PROFILES)
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    root = request.getfixturevalue("workspace")
    options = S.init_options(root.parent, only_test_rules=False, select=sorted(ANCHORS))
    await S.open_session(lsp_client, request.param, root, options)
    yield
    await lsp_client.shutdown_session()


def _where(diags) -> dict[str, set[tuple[int, int]]]:  # noqa: ANN001
    out: dict[str, set[tuple[int, int]]] = {}
    for d in diags:
        out.setdefault(str(d.code), set()).add((d.range.start.line, d.range.start.character))
    return out


def _want(text: str) -> dict[str, set[tuple[int, int]]]:
    """Where each code's anchor text is now (0-based line, column: the sample is ASCII)."""
    out = {}
    for code, needle in ANCHORS.items():
        hits = {(i, line.index(needle)) for i, line in enumerate(text.split("\n")) if needle in line}
        assert len(hits) == 1, (code, hits)
        out[code] = hits
    return out


async def test_every_diagnostic_follows_its_code_through_an_edit_storm(client: LanguageClient) -> None:
    doc = S.Doc(client, client.root / "train.py")
    try:
        await S.wait_analysed(client, doc)
        assert _where(await S.diagnostics_now(client, client.profile, doc.uri)) == _want(doc.text)
        rng = random.Random(12)
        for i in range(150):
            lines = doc.text.split("\n")
            at = rng.randrange(len(lines) + 1)
            new = rng.choice(["\n", "# storm\n", "    # storm %d\n" % i, "\n\n"])
            doc.edit(at, 0, at, 0, new)  # line starts only: never inside a token
        await S.wait_analysed(client, doc)
        diags = await S.diagnostics_now(client, client.profile, doc.uri)
        assert _where(diags) == _want(doc.text)
        assert all(d.data["version"] == doc.version for d in diags)
    finally:
        doc.close()
