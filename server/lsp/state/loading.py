"""Loading and refreshing the analysis without ever blocking the event loop.

Every job runs on the single analysis worker thread (engine.py); the loop keeps answering
requests from the snapshot it has. A load reports work-done progress and ``msprof-lsp/profileStatus``
(loading/loaded/error/none); a failed or missing profile is ONE ``window/showMessage`` and the
server keeps serving. Edits are folded into debounced refreshes (re-anchoring + rules).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lsprotocol import types

from msprof_lsp.hints.fixes.profiling import HOW_TO_RECORD
from msprof_lsp.hints.verify import FindingState
from msprof_lsp.mapping.profile import safe_io
from msprof_lsp.mapping.errors import NoProfileFound, ProfileError
from msprof_lsp.server.escape import visible

from ...protocol import NOTIFY_ANALYSED, NOTIFY_PROFILE_STATUS
from .engine import LoadRequest
from ..guard import spawn
from ..progress import LoadProgress
from ..status_payload import Analysed, AnalysedDocument, ProfileState, ProfileStatus, to_json
from .snapshot import ProfileInfo, Snapshot, empty

if TYPE_CHECKING:
    from ..app import MsprofLanguageServer
    from .documents import OpenDocument

T = TypeVar("T")

REFRESH_DELAY_S = 0.3  # quiet time after the last keystroke before re-anchoring + rules
RELOAD_DELAY_S = 1.0  # profile files still being written: wait for the writer to settle
_UNSET: Any = object()


def state_counts(snap: Snapshot) -> dict[str, int]:
    """How many findings are in each state against the baseline (hints.verify order)."""
    counts = Counter(c.state for c in snap.finding_changes)
    return {s.value: counts[s] for s in FindingState if counts[s]}


class Loader:
    def __init__(self, ls: MsprofLanguageServer) -> None:
        self.ls = ls
        self.epoch = 0  # bumped by every load; results of older epochs are dropped
        self.explicit: Path | None = None  # msprof-lsp.selectProfile
        self.explicit_rank: int | None = None
        self.baseline_override: Any = _UNSET  # msprof-lsp.setBaseline (None: cleared by the user)
        self.status = ProfileStatus.of(ProfileState.NONE, None)
        self._dirty: dict[str, str | None] = {}
        self._refresh_sleeper: asyncio.Task[None] | None = None
        self._reload_sleeper: asyncio.Task[None] | None = None
        self._shown: set[str] = set()  # messages already shown for the current profile
        self._last_problem = ""
        self._problems_shown: set[str] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self.loading = False
        # msprof-lsp.adoptNewProfile: (the profile current then,) until another one is loaded
        self.adopting: tuple[str | None] | None = None

    # -- plumbing ----------------------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.ls.worker, fn, *args)

    def next_change(self) -> asyncio.Future[None]:
        """Resolved by the next snapshot or the next buffer change (open, edit, close): either
        changes what a diagnostics report says (a parked workspace pull answers then)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    def wake(self) -> None:
        """Resolve every ``next_change`` waiter."""
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def notify_status(self, state: ProfileState, message: str = "") -> None:
        # load messages name profile files: controls shown as text (status bar, messages, log)
        top = self.ls.snapshot.start_here()
        self.status = ProfileStatus.of(state, self.ls.snapshot.info, str(self.explicit) if self.explicit else "",
                                       visible(message), top[0] if top else None)
        self.ls.protocol.notify(NOTIFY_PROFILE_STATUS, to_json(self.status))

    def _message(self, kind: types.MessageType, text: str) -> None:
        self.ls.window_show_message(types.ShowMessageParams(type=kind, message=visible(text)))

    def _log(self, kind: types.MessageType, text: str) -> None:
        self.ls.window_log_message(types.LogMessageParams(type=kind, message=visible(text)))

    # -- what to load ------------------------------------------------------------------------

    def folders(self) -> list[Path]:
        return self.ls.folders()

    def follow_baseline_setting(self) -> None:
        """Forget a baseline chosen with the command: the ``baseline`` setting decides again."""
        self.baseline_override = _UNSET

    def baseline_path(self) -> Path | None:
        value = self.baseline_override
        if value is _UNSET:
            setting = self.ls.settings.baseline
            return self.ls.settings.resolve_path(setting) if setting else None
        return Path(value) if value else None

    def request(self) -> LoadRequest:
        settings = self.ls.settings
        explicit = self.explicit
        if explicit is None and settings.profile:
            explicit = settings.resolve_path(settings.profile)
        docs = [d for d in self.ls.documents.all() if d.path and d.path.endswith(".py")]
        return LoadRequest(
            folders=self.folders(),
            settings=settings,
            explicit=explicit,
            rank=self.explicit_rank if self.explicit is not None else None,
            open_texts={d.path: d.text for d in docs},  # type: ignore[misc]
            open_paths=self.ls.documents.paths_newest_last(),
            baseline=self.baseline_path(),
        )

    # -- loads -------------------------------------------------------------------------------

    async def load(self, reason: str = "") -> bool:
        """(Re)load the profile; True when a profile is loaded afterwards."""
        self.epoch += 1
        epoch = self.epoch
        self._cancel_reload()
        self._dirty.clear()  # the load reads every open buffer
        req = self.request()
        versions = self._capture(req.open_texts)
        self.loading = True
        self.notify_status(ProfileState.LOADING, reason)
        progress = LoadProgress(self.ls, "msprof-lsp: loading profile")
        await progress.begin()
        try:
            snap = await self._run(self.ls.engine.load, req, progress)
        except NoProfileFound as exc:
            progress.end("no profile found")
            if epoch == self.epoch:
                self._failed(ProfileState.NONE, types.MessageType.Info, f"msprof-lsp: {exc}. To choose one, use "
                             f"\"msprof-lsp: Select profile\" or the msprof-lsp.profile setting; {HOW_TO_RECORD}.")
            return False
        except ProfileError as exc:
            progress.end("the profile cannot be read")
            if epoch == self.epoch:
                self._failed(ProfileState.ERROR, types.MessageType.Error, f"msprof-lsp: cannot read the profile: {exc}")
            return False
        except Exception as exc:  # noqa: BLE001 - an internal error is a message too, never a dead server
            progress.end("failed")
            if epoch == self.epoch:
                self._failed(ProfileState.ERROR, types.MessageType.Error,
                             f"msprof-lsp: loading the profile failed: {safe_io.describe_unexpected(exc)}")
                from ..guard import report

                report(self.ls, "loading the profile", exc)
            return False
        finally:
            if epoch == self.epoch:
                self.loading = False
        progress.end("loaded")
        if epoch != self.epoch:
            return self.ls.snapshot.loaded  # a newer load is on its way
        self._last_problem = ""
        self._shown.clear()
        self.apply(snap, versions)
        self._announce(snap)
        self.notify_status(ProfileState.LOADED)
        await self._adopted(snap)
        self._follow_open_file()
        return True

    def adopt_next(self) -> str | None:
        """The next new profile found under the workspace becomes current and the current one
        (returned; None when there is none) its baseline. A profile chosen with selectProfile is
        dropped so discovery finds the new one; the ``profile`` setting still wins."""
        current = self.ls.snapshot.info.path if self.ls.snapshot.info is not None else None
        self.adopting = (current,)
        self.explicit, self.explicit_rank = None, None
        return current

    async def _adopted(self, snap: Snapshot) -> None:
        if self.adopting is None or snap.info is None or snap.info.path == self.adopting[0]:
            return
        (old,), self.adopting = self.adopting, None
        if old is None:
            return  # the first recording: nothing to compare with
        try:
            after = await self.set_baseline(old)
        except ProfileError as exc:
            self._message(types.MessageType.Error, f"msprof-lsp: cannot read the baseline profile: {exc}")
            return
        counts = state_counts(after) if after is not None else {}
        summary = ", ".join(f"{n} {state}" for state, n in counts.items()) or "no findings on either side"
        self._message(types.MessageType.Info, f"msprof-lsp: new profile {snap.info.path}, compared with the previous "
                      f"one {old}: {summary}")

    def _follow_open_file(self) -> None:
        """Files opened while loading may belong to jobs the load did not hold: add them."""
        if self.explicit is not None or self.ls.settings.profile:
            return
        paths = self.ls.documents.paths_newest_last()
        if paths:
            spawn(self.ls, self.follow(paths), "loading the job of an open file")

    async def follow(self, paths: list[str]) -> None:
        """Serve ``paths`` (oldest first) from their own jobs: a job not held yet is loaded and
        kept, and the last file's job becomes the primary one (the status). Nothing is unloaded,
        so opening files of two jobs never switches back and forth."""
        if self.explicit is not None or self.ls.settings.profile or self.loading or not self.ls.engine.jobs:
            return
        epoch = self.epoch
        for path in paths:
            req = self.request()
            versions = self._capture(req.open_texts)
            try:
                result = await self._run(self.ls.engine.ensure, path, req)
            except ProfileError as exc:
                text = f"msprof-lsp: cannot read the profile: {exc}"  # as a load says it: once
                self._log(types.MessageType.Error, text)
                if text != self._last_problem:
                    self._last_problem = text
                    self._message(types.MessageType.Error, text)
                continue
            if result is None or epoch != self.epoch:
                continue
            self.apply(result, versions)
            self._announce(result)
            self.notify_status(ProfileState.LOADED)

    def _failed(self, state: ProfileState, kind: types.MessageType, text: str) -> None:
        self._log(kind, text)
        if text != self._last_problem:  # a watcher reloading a half-written profile says it once
            self._last_problem = text
            self._message(kind, text)
        self.notify_status(state, text)  # last: whoever reacts to the status has the message
        if state is ProfileState.NONE and not self.ls.engine.attribution:
            self.apply(empty(self.ls.snapshot.generation + 1, self.ls.settings))

    def _announce(self, snap: Snapshot) -> None:
        """Log each profile just loaded; profile-level findings become one message, not a diagnostic."""
        for info in self.ls.engine.take_fresh():
            self._announce_profile(info)
        problems, self.ls.engine.problems = self.ls.engine.problems, []
        for problem in problems:
            self._log(types.MessageType.Warning, f"msprof-lsp: {problem}")
        self._show_profile_findings(snap)

    def _announce_profile(self, info: ProfileInfo) -> None:
        self._log(types.MessageType.Info,
                  f"msprof-lsp: loaded {info.kind} profile {info.path} (rank {info.rank}, {info.steps} steps, "
                  f"{info.step_time_us:,.1f} µs/step, {info.mapped_share * 100:.1f}% of device time mapped to source)")
        for issue in info.issues:
            self._log(types.MessageType.Warning, f"msprof-lsp: {issue}")
        if info.issues or not info.complete:
            # a half-written or damaged profile: said once, the rest of it is still used
            head = info.issues[0] if info.issues else f"{info.path}: still being written (no analyse.done yet)"
            more = f" (and {len(info.issues) - 1} more problems in the log)" if len(info.issues) > 1 else ""
            text = f"msprof-lsp: the profile loaded with problems: {head}{more}"
            if text not in self._problems_shown:  # a watcher reloading the same damage says it once
                self._problems_shown.add(text)
                self._message(types.MessageType.Warning, text)
        for path in info.unmapped_files:
            self._log(types.MessageType.Warning, f"msprof-lsp: profile file {path} matches no local file "
                      "(set msprof-lsp.pathMappings)")

    def _show_profile_findings(self, snap: Snapshot) -> None:
        new = [f for f in snap.profile_findings if f"{f.code}:{f.message}" not in self._shown]
        if not new:
            return
        for f in new:
            self._shown.add(f"{f.code}:{f.message}")
            self._log(types.MessageType.Info, f"msprof-lsp {f.code}: {f.message}")
        head = "; ".join(f"{f.code}: {f.message}" for f in new[:3])
        more = f" (and {len(new) - 3} more in the log)" if len(new) > 3 else ""
        self._message(types.MessageType.Info, f"msprof-lsp profile notes: {head}{more}")

    def schedule_reload(self, reason: str, delay: float = RELOAD_DELAY_S) -> None:
        self._cancel_reload()

        async def later() -> None:
            await asyncio.sleep(delay)
            self._reload_sleeper = None
            await self.load(reason)

        self._reload_sleeper = spawn(self.ls, later(), "reloading the profile")

    def _cancel_reload(self) -> None:
        if self._reload_sleeper is not None and not self._reload_sleeper.done():
            self._reload_sleeper.cancel()
        self._reload_sleeper = None

    # -- edits and settings ------------------------------------------------------------------

    def mark_dirty(self, path: str, text: str | None) -> None:
        """A buffer changed (or closed: None); re-anchor it after a quiet moment."""
        if not path.endswith(".py"):
            return
        self._dirty[path] = text
        if self._refresh_sleeper is not None and not self._refresh_sleeper.done():
            self._refresh_sleeper.cancel()
        self._refresh_sleeper = spawn(self.ls, self._refresh_later(REFRESH_DELAY_S), "re-analysing edited files")

    async def _refresh_later(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self._refresh_sleeper = None  # past this point the refresh is never cancelled (its result counts)
        if not self._dirty or not self.ls.snapshot.loaded:
            return
        texts, self._dirty = self._dirty, {}
        versions = self._capture(texts)
        epoch = self.epoch
        snap = await self._run(self.ls.engine.update, texts)
        if snap is not None and epoch == self.epoch:
            self.apply(snap, versions)
            self._show_profile_findings(snap)

    async def reconfigure(self) -> None:
        """Rule settings changed: re-run the rules on the loaded profile."""
        epoch = self.epoch
        snap = await self._run(self.ls.engine.reconfigure, self.ls.settings)
        if snap is not None and epoch == self.epoch:
            self.apply(snap)
            self._show_profile_findings(snap)

    async def set_baseline(self, path: str | None) -> Snapshot | None:
        """Compare against ``path`` (None: stop comparing); raises ProfileError."""
        self.baseline_override = path
        epoch = self.epoch
        snap = await self._run(self.ls.engine.set_baseline, Path(path) if path else None)
        if snap is not None and epoch == self.epoch:
            self.apply(snap)
        return snap

    # -- a new snapshot ----------------------------------------------------------------------

    def _capture(self, texts: dict[str, str | None]) -> dict[str, int]:
        """The buffer versions whose texts go to an analysis; their line maps are kept until it
        lands, so edits made meanwhile are followed edit by edit, not by one text diff."""
        versions: dict[str, int] = {}
        for path, text in texts.items():
            doc = self.ls.documents.by_path(path)
            if doc is not None and text is not None and text == doc.text:
                versions[path] = doc.version
                doc.pin(doc.version)
        return versions

    def apply(self, snap: Snapshot, versions: dict[str, int] | None = None) -> None:
        """Install a snapshot; ``versions``: the buffer version each analysed text came from."""
        ls = self.ls
        ls.snapshot = snap  # what was derived from the previous one goes with it
        for doc in ls.documents.all():
            doc.rebase(snap.generation, snap.texts.get(doc.path) if doc.path else None,
                       (versions or {}).get(doc.path or ""))
        ls.publisher.publish_all()
        ls.refresh_views()
        self.announce_analysed(ls.documents.all())
        self.wake()

    def announce_analysed(self, docs: list[OpenDocument]) -> None:
        """Say which open documents the current analysis saw as they are now (its diagnostics
        are published by then): what a client or a test waits for instead of sleeping."""
        seen = [AnalysedDocument(d.uri, d.version) for d in docs if d.linemap is not None and d.linemap.is_identity]
        if seen:
            self.ls.protocol.notify(NOTIFY_ANALYSED, to_json(Analysed(self.ls.snapshot.generation, seen)))

    def cancel_all(self) -> None:
        self._cancel_reload()
        if self._refresh_sleeper is not None:
            self._refresh_sleeper.cancel()
