"""Settings in the editor: defaults -> ``[tool.msprof-lsp]`` of the workspace folder's pyproject.toml
-> ``initializationOptions`` -> ``workspace/configuration`` (section ``msprof-lsp``, only asked when
the client declares it) -> later ``workspace/didChangeConfiguration`` pushes.

A ``null`` configuration answer keeps what initializationOptions said (Helix answers null).
Invalid values become one ``window/showMessage`` and the previous layer's value.
"""

from __future__ import annotations

import asyncio
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from msprof_lsp.server.escape import visible

from ..protocol import SETTINGS_SECTION
from ..settings import SETTING_KEYS, Settings, apply, from_pyproject

if TYPE_CHECKING:
    from .app import MsprofLanguageServer

# What a change of each settings field requires.
RELOAD_FIELDS = frozenset({"profile", "rank", "path_mappings", "cache_dir", "third_party_roots", "base_dir"})
RULE_FIELDS = frozenset({"select", "ignore", "severity", "min_share", "thresholds", "compile_backend"})
VIEW_FIELDS = frozenset({"code_lens", "inlay_hints"})


def base_settings(folder: Path | None, roots: list[Path] | None = None) -> tuple[Settings, list[str]]:
    """Defaults, then the folder's own pyproject.toml; the paths it names to read must lie inside
    ``roots`` (the workspace folders; default: ``folder``). The client's settings are the user's
    and are not confined."""
    settings = Settings(base_dir=str(folder) if folder else "")
    if folder is None:
        return settings, []
    pyproject = folder / "pyproject.toml"
    if not pyproject.exists():  # not is_file(): a FIFO or a device there gets its warning from the reader
        return settings, []
    return from_pyproject(settings, pyproject, roots=roots if roots else [folder])


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
    settings, warnings = base_settings(ls.primary_folder(), ls.folders())
    if ls.client_settings is not None:
        settings, more = apply(settings, ls.client_settings, "initializationOptions" if not ls.settings_pushed
                               else "didChangeConfiguration")
        warnings += more
    if ask_client:
        answer = await pull(ls)
        values = client_values(answer) if answer is not None else None
        if values is not None:
            settings, more = apply(settings, values, "workspace/configuration")
            warnings += more
    return settings, warnings


def changed_fields(old: Settings, new: Settings) -> set[str]:
    return {f.name for f in fields(Settings) if getattr(old, f.name) != getattr(new, f.name)}


def warn(ls: MsprofLanguageServer, warnings: list[str]) -> None:
    """Invalid settings: one message (the values fell back to the previous layer)."""
    if not warnings:
        return
    text = visible("msprof-lsp settings: " + "; ".join(warnings))  # values quoted from a pyproject.toml
    ls.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=text))
    ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=text))
