"""``initialize`` / ``initialized`` / ``shutdown`` and ``workspace/didChangeConfiguration``.

``initialize`` resolves the client's capabilities once and registers the features only some
clients have (pull diagnostics, inlay hints: capabilities are computed after this handler).
``initialized`` settles the settings, starts watching and starts the first load (off the loop).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from msprof_lsp.server.escape import visible

from ..analysis.settings import Retrigger, retriggers
from . import configuration, pull, watch
from .capabilities import resolve as resolve_caps
from .guard import guarded, spawn
from .inlay_hints import inlay_hints
from .state.context import with_context

if TYPE_CHECKING:
    from .app import MsprofLanguageServer


def initialize(ls: MsprofLanguageServer, params: types.InitializeParams) -> None:
    ls.caps = resolve_caps(params.capabilities, ls.workspace.position_encoding)
    options: Any = params.initialization_options
    if isinstance(options, dict):
        ls.client_settings = options
    elif options is not None:
        ls.startup_warnings.append(
            f"initializationOptions must be an object of settings, got {type(options).__name__} (ignored)")
    if ls.caps.pull_diagnostics:
        ls.feature(
            types.TEXT_DOCUMENT_DIAGNOSTIC,
            types.DiagnosticOptions(identifier=pull.IDENTIFIER, inter_file_dependencies=False, workspace_diagnostics=True),
        )(guarded(lambda: types.RelatedFullDocumentDiagnosticReport(items=[]), name="textDocument/diagnostic")(
            with_context(pull.document_diagnostic)))
        ls.feature(types.WORKSPACE_DIAGNOSTIC)(
            guarded(lambda: types.WorkspaceDiagnosticReport(items=[]), name="workspace/diagnostic")(
                pull.workspace_diagnostic))
    if ls.caps.inlay_hints:
        ls.feature(types.TEXT_DOCUMENT_INLAY_HINT, types.InlayHintOptions(resolve_provider=False))(
            guarded(list, name="textDocument/inlayHint")(with_context(inlay_hints)))


async def initialized(ls: MsprofLanguageServer, params: types.InitializedParams) -> None:
    settings, warnings = await configuration.resolve(ls)
    ls.settings = settings
    configuration.warn(ls, ls.startup_warnings + warnings)
    ls.startup_warnings.clear()
    if ls.caps.did_change_configuration_dynamic:
        spawn(ls, _register_configuration(ls), "registering for configuration changes")
    await watch.start(ls)
    spawn(ls, ls.loader.load("starting"), "loading the profile")


async def _register_configuration(ls: MsprofLanguageServer) -> None:
    reg = types.Registration(id="msprof-lsp-configuration", method=types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    await asyncio.wait_for(ls.client_register_capability_async(types.RegistrationParams(registrations=[reg])), 10.0)


async def did_change_configuration(ls: MsprofLanguageServer, params: types.DidChangeConfigurationParams) -> None:
    pushed = configuration.client_values(params.settings, pushed=True)
    if pushed is not None:
        ls.client_settings = pushed
        ls.settings_pushed = True
    new, warnings = await configuration.resolve(ls)
    configuration.warn(ls, warnings)
    changed = retriggers(ls.settings, new)
    ls.settings = new
    if not changed:
        return
    if Retrigger.RELOAD in changed:
        await ls.loader.load("settings changed")
        return
    if Retrigger.BASELINE in changed:
        ls.loader.follow_baseline_setting()
        target = ls.loader.baseline_path()
        try:
            await ls.loader.set_baseline(str(target) if target else None)
        except Exception as exc:  # noqa: BLE001 - a bad baseline is a message, never a crash
            ls.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Error, message=visible(f"msprof-lsp: cannot read the baseline profile: {exc}")))
        ls.loader.follow_baseline_setting()
    if Retrigger.RULES in changed:
        await ls.loader.reconfigure()
    elif Retrigger.VIEW in changed:
        ls.refresh_views()


def did_change_workspace_folders(ls: MsprofLanguageServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
    """Folders added or removed: discover again (pygls already updated its folder list)."""
    if ls.loader.explicit is None and not ls.settings.profile:
        ls.loader.schedule_reload("workspace folders changed", delay=0.2)


def shutdown(ls: MsprofLanguageServer, params: Any = None) -> None:
    if ls.poller is not None:
        ls.poller.stop()
    ls.loader.cancel_all()
    ls.publisher.cancel_all()
    ls.worker.shutdown(wait=False, cancel_futures=True)
