"""A repository's settings are confined to it in the editor too (issue 22, item 2): the workspace
folder's pyproject.toml may not send the server outside the workspace folders, nor stop it with
its size or nesting; what the client sends (initializationOptions) is the user's and stays free.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

import lsp_support as S

from msprof_lsp.server.protocol import CMD_RELOAD


@pytest_lsp.fixture(config=ClientServerConfig(server_command=S.SERVER_COMMAND))
async def client(request: pytest.FixtureRequest, lsp_client: LanguageClient):
    """Parametrised indirectly: (pyproject text, initializationOptions); ``{other}`` in either is
    a folder outside the workspace holding a copy of the sample's profile."""
    pyproject, options = request.param
    tmp = request.getfixturevalue("tmp_path")
    root = S.cnn_workspace(tmp / "ws")
    other = tmp / "other"
    shutil.copytree(root / "npu_profile", other / "npu_profile")
    (root / "pyproject.toml").write_text(pyproject.replace("{other}", str(other)), encoding="utf-8")
    options = {k: v.replace("{other}", str(other)) if isinstance(v, str) else v for k, v in options.items()}
    await S.open_session(lsp_client, "visual-studio-code", root, {**S.init_options(tmp), **options})
    lsp_client.other = other
    yield
    await lsp_client.shutdown_session()


def _warnings(client: LanguageClient) -> list[str]:
    return [m.message for m in client.messages if m.type == types.MessageType.Warning]


def _loaded_from(client: LanguageClient) -> str:
    assert S.status_value(client.status, "state") == "loaded", client.status
    return str(Path(S.status_value(client.status, "path")).resolve())


@pytest.mark.parametrize("client", [
    ('[tool.msprof-lsp]\nprofile = "/"\n', {}),
    ('[tool.msprof-lsp]\nprofile = "../other/npu_profile"\n', {}),
    ('[tool.msprof-lsp]\nprofile = "{other}/npu_profile"\nbaseline = "{other}/npu_profile"\n', {}),
], indirect=True, ids=["slash", "dotdot", "absolute"])
async def test_pyproject_read_locations_outside_the_workspace_are_ignored(client: LanguageClient) -> None:
    (warning,) = _warnings(client)
    assert str(client.root / "pyproject.toml") in warning and "'profile'" in warning
    assert "outside the workspace" in warning
    assert _loaded_from(client).startswith(str(client.root.resolve()))  # discovery in the folder instead
    assert not S.status_value(client.status, "message").startswith("baseline")


@pytest.mark.parametrize("client", [
    ("[tool.msprof-lsp]\nselect = " + "[" * 100_000 + "]" * 100_000 + "\n", {}),
    ('[tool.msprof-lsp]\nprofile = "/"\n' + "#" * (2 << 20) + "\n", {}),
], indirect=True, ids=["nested-100k", "2MiB"])
async def test_a_pyproject_over_the_config_limits_is_one_warning(client: LanguageClient) -> None:
    (warning,) = _warnings(client)
    assert str(client.root / "pyproject.toml") in warning
    assert "TOML nesting depth" in warning or "config file size" in warning
    assert "RecursionError" not in warning and "internal error" not in warning
    assert _loaded_from(client).startswith(str(client.root.resolve()))
    assert await client.workspace_execute_command_async(  # the server still answers
        types.ExecuteCommandParams(command=CMD_RELOAD)) is not None


@pytest.mark.parametrize("client", [('[tool.msprof-lsp]\nprofile = "/"\n', {"profile": "{other}/npu_profile"})],
                         indirect=True, ids=["user-profile-outside"])
async def test_the_users_profile_setting_is_not_confined(client: LanguageClient) -> None:
    assert _loaded_from(client).startswith(str(client.other.resolve()))
    (warning,) = _warnings(client)  # only the repository's value was refused
    assert "'profile'" in warning and str(client.root / "pyproject.toml") in warning
