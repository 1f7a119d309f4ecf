"""What the connected client can do, resolved once after ``initialize``.

Every feature module asks this dataclass instead of walking ``ClientCapabilities`` (whose optional
nesting differs per client: VS Code, Neovim 0.7, eglot, Helix).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lsprotocol import types


def _get(obj: Any, dotted: str, default: Any = None) -> Any:
    for name in dotted.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return default
    return obj


@dataclass(frozen=True, slots=True)
class ClientCaps:
    position_encoding: str = "utf-16"  # negotiated: utf-8 | utf-16 | utf-32
    # diagnostics
    pull_diagnostics: bool = False
    diagnostic_refresh: bool = False
    related_information: bool = False
    code_description: bool = False
    diagnostic_data: bool = False
    # code actions
    code_action_literals: bool = False
    code_action_resolve_edit: bool = False  # resolveSupport lists "edit" and dataSupport is on
    code_action_disabled: bool = False
    is_preferred: bool = False
    document_changes: bool = False
    apply_edit: bool = False
    # window / workspace
    work_done_progress: bool = False
    show_document: bool = False
    configuration: bool = False
    did_change_configuration_dynamic: bool = False
    watched_files_dynamic: bool = False
    watched_files_relative: bool = False
    # heat views
    code_lens: bool = False
    code_lens_refresh: bool = False
    inlay_hints: bool = False
    inlay_hint_refresh: bool = False
    hover: bool = False
    hover_markdown: bool = False


def resolve(caps: types.ClientCapabilities | None, position_encoding: object = None) -> ClientCaps:
    """Flatten the client's capabilities (``position_encoding``: what pygls negotiated)."""
    if caps is None:
        caps = types.ClientCapabilities()
    enc = getattr(position_encoding, "value", position_encoding) or "utf-16"
    resolve_props = _get(caps, "text_document.code_action.resolve_support.properties", []) or []
    hover_formats = _get(caps, "text_document.hover.content_format", []) or []
    return ClientCaps(
        position_encoding=str(enc),
        pull_diagnostics=_get(caps, "text_document.diagnostic") is not None,
        diagnostic_refresh=bool(_get(caps, "workspace.diagnostics.refresh_support", False)),
        related_information=bool(_get(caps, "text_document.publish_diagnostics.related_information", False)),
        code_description=bool(_get(caps, "text_document.publish_diagnostics.code_description_support", False)),
        diagnostic_data=bool(_get(caps, "text_document.publish_diagnostics.data_support", False)),
        code_action_literals=_get(caps, "text_document.code_action.code_action_literal_support") is not None,
        code_action_resolve_edit="edit" in resolve_props
        and bool(_get(caps, "text_document.code_action.data_support", False)),
        code_action_disabled=bool(_get(caps, "text_document.code_action.disabled_support", False)),
        is_preferred=bool(_get(caps, "text_document.code_action.is_preferred_support", False)),
        document_changes=bool(_get(caps, "workspace.workspace_edit.document_changes", False)),
        apply_edit=bool(_get(caps, "workspace.apply_edit", False)),
        work_done_progress=bool(_get(caps, "window.work_done_progress", False)),
        show_document=bool(_get(caps, "window.show_document.support", False)),
        configuration=bool(_get(caps, "workspace.configuration", False)),
        did_change_configuration_dynamic=bool(
            _get(caps, "workspace.did_change_configuration.dynamic_registration", False)
        ),
        watched_files_dynamic=bool(_get(caps, "workspace.did_change_watched_files.dynamic_registration", False)),
        watched_files_relative=bool(
            _get(caps, "workspace.did_change_watched_files.relative_pattern_support", False)
        ),
        code_lens=_get(caps, "text_document.code_lens") is not None,
        code_lens_refresh=bool(_get(caps, "workspace.code_lens.refresh_support", False)),
        inlay_hints=_get(caps, "text_document.inlay_hint") is not None,
        inlay_hint_refresh=bool(_get(caps, "workspace.inlay_hint.refresh_support", False)),
        hover=_get(caps, "text_document.hover") is not None,
        hover_markdown=types.MarkupKind.Markdown in hover_formats or "markdown" in hover_formats,
    )
