"""Settings in the editor, by the core's one resolver (``server.analysis.settings.resolve``):
defaults -> ``[tool.msprof-lsp]`` of the nearest pyproject.toml at or above the workspace folder
(never above its workspace root) -> ``initializationOptions`` -> ``workspace/configuration``
(section ``msprof-lsp``, only asked when the client declares it) -> later
``workspace/didChangeConfiguration`` pushes. What a change re-triggers is declared on the model
(``settings.on_change``).

A ``null`` configuration answer keeps what initializationOptions said (Helix answers null).
Invalid values become one ``window/showMessage`` and the previous layer's value.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from msprof_lsp.server.escape import visible

from ..protocol import SETTINGS_SECTION
from ..analysis.settings import SETTING_KEYS, Layer, Settings
from ..analysis.settings import resolve as resolve_settings

if TYPE_CHECKING:
    from .app import MsprofLanguageServer


def base_settings(folder: Path | None, roots: list[Path] | None = None) -> tuple[Settings, list[str]]:
    """Defaults, then the nearest pyproject.toml at or above ``folder`` but not above the workspace
    root holding it (the core's resolver); the paths it names to read must lie inside ``roots``
    (the workspace folders; default: ``folder``). The client's settings are the user's and are
    not confined."""
    return settings_for(folder, roots, [])


def settings_for(folder: Path | None, roots: list[Path] | None, layers: list[Layer]) -> tuple[Settings, list[str]]:
    """The editor's settings: the core's resolver with the workspace folders as its roots."""
    homes = roots if roots else ([folder] if folder else [])
    return resolve_settings(folder, workspace_roots=homes, layers=layers, base_dir=folder)


def client_values(raw: Any, *, pushed: bool = False) -> dict[str, Any] | None:
    """The flat settings object in what a client sent.

    A configuration answer for our section is the object itself; a didChangeConfiguration push is
    ``{"msprof-lsp": {...}}`` (VS Code client) or, from some clients, the flat object. Other
    sections in a push are none of our business (no warnings for them).
    """
    if not isinstance(raw, dict):
        return None
    nested = raw.get(SETTINGS_SECTION)
    if isinstance(nested, dict):
        return nested
    if not pushed:
        return raw
    return raw if any(k in SETTING_KEYS for k in raw) else None


async def pull(ls: MsprofLanguageServer) -> Any:
    """``workspace/configuration`` for section msprof-lsp (None when unsupported or unanswered)."""
    if not ls.caps.configuration:
        return None
    folder = ls.primary_folder()
    item = types.ConfigurationItem(scope_uri=folder.as_uri() if folder else None, section=SETTINGS_SECTION)
    try:
        answer = await asyncio.wait_for(
            ls.workspace_configuration_async(types.ConfigurationParams(items=[item])), 10.0
        )
    except Exception as exc:  # noqa: BLE001 - a client that cannot answer keeps the other layers
        ls.window_log_message(types.LogMessageParams(
            type=types.MessageType.Warning, message=f"msprof-lsp: workspace/configuration failed: {exc}"))
        return None
    return answer[0] if answer else None


async def resolve(ls: MsprofLanguageServer, *, ask_client: bool = True) -> tuple[Settings, list[str]]:
    layers: list[Layer] = []
    if ls.client_settings is not None:
        layers.append(Layer("initializationOptions" if not ls.settings_pushed else "didChangeConfiguration",
                            ls.client_settings))
    if ask_client:
        answer = await pull(ls)
        values = client_values(answer) if answer is not None else None
        if values is not None:
            layers.append(Layer("workspace/configuration", values))
    return settings_for(ls.primary_folder(), ls.folders(), layers)


def warn(ls: MsprofLanguageServer, warnings: list[str]) -> None:
    """Invalid settings: one message (the values fell back to the previous layer)."""
    if not warnings:
        return
    text = visible("msprof-lsp settings: " + "; ".join(warnings))  # values quoted from a pyproject.toml
    ls.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=text))
    ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=text))
