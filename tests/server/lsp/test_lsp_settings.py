"""Settings precedence in the editor: defaults -> [tool.msprof-lsp] of the folder's pyproject.toml
-> initializationOptions -> workspace/configuration (only where the client has it; a null answer
keeps initializationOptions); invalid values are one message and fall back to the layer below.
"""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S

PYPROJECT = """[project]
name = "cnn"

[tool.msprof-lsp]
select = ["TST102"]
min-share = 0.02
"""


@pytest_lsp.fixture(config=ClientServerConfig(server_command=S.SERVER_COMMAND))
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    """Parametrised indirectly: (profile, pyproject text or "", initializationOptions, configuration or None)."""
    profile, pyproject, options, configuration = request.param
    tmp = request.getfixturevalue("tmp_path")
    root = S.cnn_workspace(tmp / "ws")
    if pyproject:
        (root / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    if configuration is not None:
        lsp_client.set_configuration(configuration, section="msprof-lsp")
    # no select in the options here: the pyproject layer's select is under test
    await S.open_session(lsp_client, profile, root, {**S.init_options(tmp, only_test_rules=False), **options})
    lsp_client.doc = S.Doc(lsp_client, root / "model.py")
    yield
    await lsp_client.shutdown_session()


async def codes(client: LanguageClient, want: set[str]) -> set[str]:
    diags = await S.wait_diagnostics(client, client.profile, client.doc.uri,
                                     lambda d: d and {str(x.code) for x in d} == want, what=f"only {want}")
    return {str(x.code) for x in diags}


@pytest.mark.parametrize("client", [("neovim@v0.7", PYPROJECT, {"minShare": 7, "bogus": True}, None)],
                         indirect=True, ids=["pyproject+bad-options"])
async def test_pyproject_layer_and_invalid_options(client: LanguageClient) -> None:
    assert await codes(client, {S.HOT}) == {S.HOT}  # select from pyproject.toml
    (warning,) = [m for m in client.messages if m.type == types.MessageType.Warning]
    assert "'minShare'" in warning.message and "between 0 and 1" in warning.message
    assert "unknown setting 'bogus'" in warning.message
    assert "keeping 0.02" in warning.message  # the pyproject value stays


@pytest.mark.parametrize("client", [("visual-studio-code", PYPROJECT, {"select": ["TST102"]}, {"select": ["TST101"], "minShare": 0.01})],
                         indirect=True, ids=["configuration-wins"])
async def test_workspace_configuration_wins(client: LanguageClient) -> None:
    assert await codes(client, {S.PAIR}) == {S.PAIR}
    assert not [m for m in client.messages if m.type == types.MessageType.Warning]


@pytest.mark.parametrize("client", [("visual-studio-code", "", {"select": ["TST101"]}, None)],
                         indirect=True, ids=["null-configuration"])
async def test_null_configuration_keeps_initialization_options(client: LanguageClient) -> None:
    # pytest-lsp answers null for a section it does not have, as Helix always does
    assert await codes(client, {S.PAIR}) == {S.PAIR}
