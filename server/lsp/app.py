"""The msprof-lsp language server: state, feature registration, and ``serve()`` on stdio.

One module per LSP feature (text_sync, publish/pull, code_action(+_resolve), code_lens, hover,
inlay_hints, commands, watch, lifecycle); this module wires them to pygls behind the ``guarded``
decorator, so no handler exception ever ends the session.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from ..cli import version
from ..protocol import (
    CMD_ADOPT_NEW_PROFILE,
    CMD_LINE_HEAT,
    CMD_REPORT_MODEL,
    CMD_RELOAD,
    CMD_SELECT_PROFILE,
    CMD_SET_BASELINE,
    CMD_SHOW_HOTSPOTS,
    CMD_SHOW_OPERATORS,
    FIX_ALL_KIND,
    SERVER_NAME,
)
from ..analysis.settings import Settings
from . import commands, lifecycle, text_sync, watch
from .capabilities import ClientCaps
from .code_action import code_action
from .code_action_resolve import resolve as resolve_code_action
from .code_lens import code_lens
from .state.documents import DocumentStore, path_of
from .state.engine import Session
from .guard import OneLineFormatter, guarded, report, spawn
from .hover import hover
from .state.loading import Loader
from .publish import Publisher
from .rpc import Protocol, serve_stdio
from .state.context import RequestContext, with_context
from .state.snapshot import Snapshot, empty

log = logging.getLogger("msprof_lsp.server")


class MsprofLanguageServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(SERVER_NAME, version(), text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
                         protocol_cls=Protocol)
        self.caps = ClientCaps()
        self.client_settings: dict[str, Any] | None = None  # initializationOptions, later pushes
        self.settings_pushed = False
        self.startup_warnings: list[str] = []
        self.settings = Settings()
        self.documents = DocumentStore(self.buffer_text)
        self.engine = Session()
        # one thread: loads, re-anchoring and rule runs mutate the same analysis state
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="msprof-analysis")
        self.snapshot: Snapshot = empty(0, self.settings)
        self.loader = Loader(self)
        self.publisher = Publisher(self)
        self.poller: watch.Poller | None = None
        self.memo: dict[tuple, Any] = {}  # RequestContext.memo
        self.exit_code = 0

    def report_server_error(self, error: Exception, source: Any) -> None:  # type: ignore[override]
        """pygls pops up "Error in server" for failures outside request handlers; a log line is
        enough (request failures already go back to the client as JSON-RPC errors)."""
        from pygls.exceptions import FeatureRequestError

        if source is FeatureRequestError:
            return
        report(self, f"pygls ({getattr(source, '__name__', source)})", error)

    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:  # type: ignore[override]
        """Serve until ``exit`` or the end of stdin, through the frame reader of rpc.py (pygls'
        loop gives up on the stream after one malformed frame). The exit code pygls chose for
        ``exit`` (0 after ``shutdown``, else 1) is kept in ``exit_code``."""
        try:
            asyncio.run(serve_stdio(self, stdin or sys.stdin.buffer, stdout or sys.stdout.buffer))
        except SystemExit as done:
            self.exit_code = done.code if isinstance(done.code, int) else 0
        except (BrokenPipeError, KeyboardInterrupt):
            log.info("the client is gone")
        finally:
            self.shutdown()

    def context(self) -> RequestContext:
        """What a feature sees of this request: the snapshot and buffers now, the client, the settings."""
        return RequestContext(snapshot=self.snapshot, documents=self.documents, caps=self.caps, settings=self.settings,
                              memo=self.memo)

    def next_change(self) -> asyncio.Future[None]:
        return self.loader.next_change()

    # -- where things are ----------------------------------------------------------------------

    def folders(self) -> list[Path]:
        """Workspace folders; without any, the folders of the open files."""
        out: list[Path] = []
        try:
            ws = self.workspace
        except RuntimeError:  # before initialize
            return out
        for folder in ws.folders.values():
            p = path_of(folder.uri)
            if p:
                out.append(Path(p))
        if not out and ws.root_path:
            out.append(Path(ws.root_path).resolve())
        if not out:
            out = sorted({Path(p).parent for p in self.documents.paths_newest_last()})
        return out

    def primary_folder(self) -> Path | None:
        folders = self.folders()
        return folders[0] if folders else None

    def resolve_user_path(self, raw: str) -> Path:
        p = Path(raw).expanduser()
        if not p.is_absolute():
            base = self.primary_folder() or Path.cwd()
            p = base / p
        return p.resolve()

    def buffer_text(self, uri: str) -> str:
        """An open buffer's text as pygls' workspace holds it (it applies every change); never
        the file on disk, which ``get_text_document`` would read for a URI not open."""
        ws = self.workspace
        if unquote(uri) not in ws.text_documents:  # pygls keys its documents by the unquoted URI
            return ""
        return ws.get_text_document(uri).source

    # -- asking the client to re-query ---------------------------------------------------------

    def fire(self, request: Callable[[], Awaitable[Any]], what: str) -> None:
        async def run() -> None:
            try:
                await request()
            except Exception as exc:  # noqa: BLE001 - a client may not implement a refresh
                log.info("%s: %s", what, exc)

        spawn(self, run(), what)

    def refresh_views(self) -> None:
        caps = self.caps
        if caps.code_lens_refresh:
            self.fire(lambda: self.workspace_code_lens_refresh_async(None), "workspace/codeLens/refresh")
        if caps.inlay_hints and caps.inlay_hint_refresh:
            self.fire(lambda: self.workspace_inlay_hint_refresh_async(None), "workspace/inlayHint/refresh")
        if caps.pull_diagnostics and caps.diagnostic_refresh:
            self.fire(lambda: self.workspace_diagnostic_refresh_async(None), "workspace/diagnostic/refresh")


@dataclass(frozen=True, slots=True)
class Route:
    """One entry of the dispatch table: an LSP method, its handler ``(server, params)``, the
    options pygls advertises for it, and the answer when the handler fails (None: no answer)."""

    method: str
    name: str  # as the log names it
    handler: Callable[..., Any]
    options: Any = None
    empty: Callable[[], Any] | None = None


CODE_ACTION_OPTIONS = types.CodeActionOptions(
    code_action_kinds=[types.CodeActionKind.QuickFix, types.CodeActionKind.RefactorRewrite, FIX_ALL_KIND],  # type: ignore[list-item]
    resolve_provider=True,
)

# What the server answers from the start (lifecycle.initialize adds pull diagnostics and inlay
# hints when the client supports them). Read-only features take a RequestContext: with_context.
ROUTES = (
    Route(types.INITIALIZE, "initialize", lifecycle.initialize),
    Route(types.INITIALIZED, "initialized", lifecycle.initialized),
    Route(types.SHUTDOWN, "shutdown", lifecycle.shutdown),
    Route(types.TEXT_DOCUMENT_DID_OPEN, "didOpen", text_sync.did_open),
    Route(types.TEXT_DOCUMENT_DID_CHANGE, "didChange", text_sync.did_change),
    Route(types.TEXT_DOCUMENT_DID_CLOSE, "didClose", text_sync.did_close),
    Route(types.WORKSPACE_DID_CHANGE_CONFIGURATION, "didChangeConfiguration", lifecycle.did_change_configuration),
    Route(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS, "didChangeWorkspaceFolders",
          lifecycle.did_change_workspace_folders),
    Route(types.WORKSPACE_DID_CHANGE_WATCHED_FILES, "didChangeWatchedFiles", watch.did_change_watched_files),
    Route(types.TEXT_DOCUMENT_CODE_ACTION, "textDocument/codeAction", with_context(code_action), CODE_ACTION_OPTIONS,
          list),
    Route(types.CODE_ACTION_RESOLVE, "codeAction/resolve", with_context(resolve_code_action)),
    Route(types.TEXT_DOCUMENT_CODE_LENS, "textDocument/codeLens", with_context(code_lens),
          types.CodeLensOptions(resolve_provider=False), list),
    Route(types.TEXT_DOCUMENT_HOVER, "textDocument/hover", with_context(hover)),
)

COMMANDS = (
    (CMD_RELOAD, commands.reload_profile),
    (CMD_SELECT_PROFILE, commands.select_profile),
    (CMD_SHOW_HOTSPOTS, commands.show_hotspots),
    (CMD_SET_BASELINE, commands.set_baseline),
    (CMD_LINE_HEAT, commands.line_heat),
    (CMD_SHOW_OPERATORS, commands.show_operators),
    (CMD_REPORT_MODEL, commands.report_model),
    (CMD_ADOPT_NEW_PROFILE, commands.adopt_new_profile),
)


def create_server() -> MsprofLanguageServer:
    ls = MsprofLanguageServer()
    for r in ROUTES:
        registered = ls.feature(r.method, r.options) if r.options is not None else ls.feature(r.method)
        registered(guarded(r.empty, name=r.name)(r.handler))
    for name, handler in COMMANDS:
        ls.command(name)(guarded(name=name)(handler))
    return ls


def serve() -> int:
    """Serve LSP on stdio. The JSON-RPC stream gets a private copy of fd 1; fd 1 itself (and
    ``sys.stdout``) then point at stderr, so a stray print -- ours, a library's, a worker
    process's -- can never corrupt the protocol."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter("msprof-lsp %(levelname)s %(name)s: %(message)s"))
    raw_level = os.environ.get("MSPROF_LSP_LOG_LEVEL", "WARNING").strip().upper()
    level = logging.getLevelName(raw_level)
    logging.basicConfig(handlers=[handler], level=level if isinstance(level, int) else logging.WARNING)
    if not isinstance(level, int):
        log.warning("MSPROF_LSP_LOG_LEVEL=%r is not a log level (DEBUG, INFO, WARNING, ERROR); using WARNING",
                    raw_level[:40])
    rpc_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    server = create_server()
    server.start_io(sys.stdin.buffer, rpc_out)
    # The editor is gone. A load still running on the analysis thread (a GB profile) would keep
    # the process alive until it finished -- interpreter exit joins executor threads -- so leave now.
    server.worker.shutdown(wait=False, cancel_futures=True)
    busy = [t for t in threading.enumerate() if t.name.startswith("msprof-analysis")]
    for t in busy:
        t.join(0.2)  # an idle worker leaves at once
    if any(t.is_alive() for t in busy):
        sys.stderr.flush()
        os._exit(server.exit_code)
    return server.exit_code
