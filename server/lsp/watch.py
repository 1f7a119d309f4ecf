"""Reload when the profile changes on disk.

Clients that allow it get a dynamic ``workspace/didChangeWatchedFiles`` registration for profile
files (and ``.py`` files, so source changed outside the editor is re-anchored); the others
(Neovim up to 0.11 reports no dynamic registration) are served by polling the profile folders
off the event loop every few seconds. Either way a reload waits for the writer to settle
(a new ``analyse.done`` appears last in a torch_npu run).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lsprotocol import types

from msprof_lsp.mapping.profile.readers.registry import READERS
from msprof_lsp.mapping.profile.safe_io import is_folder

from .state.documents import path_of
from .guard import spawn

if TYPE_CHECKING:
    from .app import MsprofLanguageServer

PROFILE_GLOBS = tuple(dict.fromkeys(g for reader in READERS for g in reader.watch))  # each reader's files
SOURCE_GLOB = "**/*.py"
POLL_INTERVAL_S = float(os.environ.get("MSPROF_LSP_POLL_INTERVAL", "3"))
POLL_DEPTH = 3
_IDS = itertools.count(1)


def watchers(ls: MsprofLanguageServer) -> list[types.FileSystemWatcher]:
    out = [types.FileSystemWatcher(glob_pattern=g) for g in (*PROFILE_GLOBS, SOURCE_GLOB)]
    explicit = ls.loader.explicit
    if explicit is None and ls.settings.profile:
        explicit = ls.settings.resolve_path(ls.settings.profile)
    folders = ls.folders()
    if explicit is not None and ls.caps.watched_files_relative and not any(
        f == explicit or f in explicit.parents for f in folders
    ):
        base = explicit if is_folder(explicit) else explicit.parent
        out.append(types.FileSystemWatcher(
            glob_pattern=types.RelativePattern(base_uri=base.as_uri(), pattern="**/*")))
    return out


async def start(ls: MsprofLanguageServer) -> None:
    """Register with the client when it can watch for us, else poll."""
    if ls.caps.watched_files_dynamic:
        reg = types.Registration(
            id=f"msprof-lsp-watch-{next(_IDS)}",
            method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers(ls)),
        )
        try:
            await asyncio.wait_for(
                ls.client_register_capability_async(types.RegistrationParams(registrations=[reg])), 10.0
            )
            return
        except Exception as exc:  # noqa: BLE001 - fall back to polling
            ls.window_log_message(types.LogMessageParams(
                type=types.MessageType.Warning, message=f"msprof-lsp: file watching refused ({exc}); polling instead"))
    ls.poller = Poller(ls)
    ls.poller.start()


def did_change_watched_files(ls: MsprofLanguageServer, params: types.DidChangeWatchedFilesParams) -> None:
    profile_changed = False
    known = ls.snapshot.paths()
    for event in params.changes:
        path = path_of(event.uri)
        if path is None:
            continue
        if path.endswith(".py"):
            if ls.documents.by_path(path) is None and path in known:
                ls.loader.mark_dirty(path, None)  # edited outside the editor: re-read and re-anchor
            continue
        profile_changed = True
    if profile_changed:
        ls.loader.schedule_reload("the profile changed on disk")


def _signature(roots: list[Path], depth: int) -> tuple:
    """Names, mtimes and sizes a few levels down (a new run, a rewritten or finished file)."""
    seen: list[tuple[str, int, int]] = []

    def walk(d: str, level: int) -> None:
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            seen.append((e.path, st.st_mtime_ns, st.st_size))
            if level < depth and e.is_dir(follow_symlinks=False) and not e.name.startswith("."):
                walk(e.path, level + 1)

    for root in roots:
        if root.is_file():
            st = root.stat()
            seen.append((str(root), st.st_mtime_ns, st.st_size))
        else:
            walk(str(root), 1)
    return tuple(seen)


class Poller:
    """mtime polling of the profile folders (off the loop)."""

    def __init__(self, ls: MsprofLanguageServer, interval: float = POLL_INTERVAL_S) -> None:
        self.ls = ls
        self.interval = interval
        self._task: asyncio.Task[None] | None = None
        self._last: tuple[tuple, tuple] | None = None
        self._looked_ns = 0  # wall clock of the last look (before its walk)

    def roots(self) -> tuple[list[Path], int]:
        ls = self.ls
        held = ls.engine.held()
        if held:
            return [j.folder for j in held], POLL_DEPTH
        explicit = ls.loader.explicit
        if explicit is None and ls.settings.profile:
            explicit = ls.settings.resolve_path(ls.settings.profile)
        if explicit is not None:
            return [explicit], POLL_DEPTH
        return ls.folders(), 2  # nothing loaded yet: notice a profile appearing

    def start(self) -> None:
        self._task = spawn(self.ls, self._run(), "polling the profile folders")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval)
            roots, depth = self.roots()
            key = tuple(str(r) for r in roots)
            now = time.time_ns()
            sig = await loop.run_in_executor(None, _signature, roots, depth)
            if self._last is None:
                changed = False
            elif self._last[0] == key:
                changed = self._last[1] != sig
            else:  # the folders changed (a load narrowed them to its jobs): what is newer than the
                # last look was written since, e.g. a run that finished while the first load ran
                changed = any(mtime > self._looked_ns for _, mtime, _ in sig)
            if changed and self.ls.loader.loading:
                continue  # keep the baseline: the change is acted on once the load is done
            if changed:
                self.ls.loader.schedule_reload("the profile changed on disk")
            self._last, self._looked_ns = (key, sig), now

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
