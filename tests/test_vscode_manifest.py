"""The VS Code manifest (vscode-client/package.json) must follow the server's own lists.

The annotated ``Settings`` model (server/settings.py, read as ``SETTINGS``) is the single source of
truth for server settings, rendered by ``python -m msprof_lsp.server.settings_schema``; PALETTE_COMMANDS
and the notification name (server/protocol.py) are what the client must offer and listen to. A
drift here means a setting the editor cannot set, or a palette entry that does nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from msprof_lsp.server import protocol, settings_schema
from msprof_lsp.server.settings import SETTINGS

CLIENT = Path(__file__).resolve().parents[1] / "vscode-client"
PREFIX = "msprof-lsp."
CLIENT_ONLY_SETTINGS = {"interpreter", "trace.server", "gutterHeat", "showNotifications"}
CLIENT_ONLY_COMMANDS = {"msprof-lsp.restart", "msprof-lsp.showLogs"}


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((CLIENT / "package.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def properties(manifest: dict) -> dict:
    return manifest["contributes"]["configuration"]["properties"]


@pytest.mark.parametrize("spec", SETTINGS, ids=lambda s: s.key)
def test_every_server_setting_is_contributed_unchanged(spec, properties: dict) -> None:
    entry = properties.get(PREFIX + spec.key)
    assert entry is not None, f"{PREFIX}{spec.key} missing from package.json"
    assert entry["type"] == spec.json_type
    default = list(spec.default) if isinstance(spec.default, tuple) else spec.default
    assert entry["default"] == default and type(entry["default"]) is type(default)
    assert entry["description"].startswith(spec.description)
    assert entry.get("scope", "window") == spec.scope.value
    assert entry.get("minimum") == spec.minimum and entry.get("maximum") == spec.maximum


def test_no_extra_settings(properties: dict) -> None:
    contributed = {name[len(PREFIX):] for name in properties if name.startswith(PREFIX)}
    assert not [name for name in properties if not name.startswith(PREFIX)]
    extra = contributed - {s.key for s in SETTINGS} - CLIENT_ONLY_SETTINGS
    assert not extra, f"package.json has settings the server does not know: {sorted(extra)}"
    assert CLIENT_ONLY_SETTINGS <= contributed


def test_client_only_settings(properties: dict) -> None:
    assert properties[PREFIX + "interpreter"]["scope"] == "machine-overridable"
    assert properties[PREFIX + "trace.server"]["enum"] == ["off", "messages", "verbose"]
    assert properties[PREFIX + "gutterHeat"] == {**properties[PREFIX + "gutterHeat"], "type": "boolean", "default": True}


def test_manifest_is_what_the_generator_writes(manifest: dict) -> None:
    """Item types, ranges and choices also come from the model (server/settings_schema.py)."""
    expected = settings_schema.synced(json.loads(json.dumps(manifest)))
    assert expected == manifest, "run python -m msprof_lsp.server.settings_schema to update package.json"


def test_docs_settings_table_is_current() -> None:
    docs = (CLIENT.parent / "docs" / "editors.md").read_text(encoding="utf-8")
    assert settings_schema.synced_docs(docs) == docs, "run python -m msprof_lsp.server.settings_schema to update docs/editors.md"
    for spec in SETTINGS:
        assert f"| `{spec.key}` | `{spec.toml_key}` |" in docs


def test_generator_check_on_this_checkout_and_on_a_drifted_copy(tmp_path: Path, capsys) -> None:
    assert settings_schema.main(["--check"]) == 0
    for rel in (settings_schema.MANIFEST, settings_schema.DOCS):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((CLIENT.parent / rel).read_text(encoding="utf-8"), encoding="utf-8")
    manifest = tmp_path / settings_schema.MANIFEST
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["contributes"]["configuration"]["properties"][PREFIX + "cubeAlign"]["minimum"] = 0
    manifest.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    docs = tmp_path / settings_schema.DOCS
    docs.write_text(docs.read_text(encoding="utf-8").replace("| `smallKernelUs` |", "| `smallKernelMs` |"), encoding="utf-8")
    assert settings_schema.main(["--check", "--root", str(tmp_path)]) == 1
    assert str(manifest) in capsys.readouterr().err
    assert settings_schema.main(["--root", str(tmp_path)]) == 0  # rewrites both files
    assert settings_schema.main(["--check", "--root", str(tmp_path)]) == 0
    assert json.loads(manifest.read_text(encoding="utf-8")) == json.loads((CLIENT / "package.json").read_text(encoding="utf-8"))
    assert docs.read_text(encoding="utf-8") == (CLIENT.parent / settings_schema.DOCS).read_text(encoding="utf-8")


def test_palette_commands_match_both_ways(manifest: dict) -> None:
    contributed = [c["command"] for c in manifest["contributes"]["commands"]]
    assert len(contributed) == len(set(contributed))
    assert set(contributed) - CLIENT_ONLY_COMMANDS == set(protocol.PALETTE_COMMANDS)
    assert CLIENT_ONLY_COMMANDS <= set(contributed)
    for command in manifest["contributes"]["commands"]:
        assert command["title"] and command["category"] == "msprof-lsp"


def test_typescript_constants_match_protocol() -> None:
    source = (CLIENT / "src" / "constants.ts").read_text(encoding="utf-8")
    constants = dict(re.findall(r'export const (\w+) = "([^"]*)";', source))
    for name in ("CMD_RELOAD", "CMD_SELECT_PROFILE", "CMD_SHOW_HOTSPOTS", "CMD_SET_BASELINE", "CMD_LINE_HEAT", "CMD_SHOW_OPERATORS", "CMD_REPORT_MODEL", "NOTIFY_PROFILE_STATUS"):
        assert constants.get(name) == getattr(protocol, name), name
    assert constants["SECTION"] == protocol.SETTINGS_SECTION
    assert constants["CLIENT_ID"] == protocol.SERVER_NAME


def test_activation(manifest: dict) -> None:
    assert "onLanguage:python" in manifest["activationEvents"]
    assert manifest["main"] == "./dist/extension.js"
