"""One workspace analysed for the MCP server and the Python API: the same run as
``--check --format json`` (the core's ``analysis.check_run``), with report paths relative to the workspace,
and kept in memory until a file it read changes.

Where the request comes from decides the confinement: an agent's ``profile``, ``baseline``, path
and the local side of its path mappings must lie inside the workspace (as a workspace's own
pyproject.toml must), a notebook user's are taken as given (as command-line flags are).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..analysis.check_run import CheckFailed, RunHooks, RunRequest, check_run
from ..analysis.settings import Layer, Settings, inside, resolve
from ..analysis.views.result import CheckRun
from ..cli import version
from ..escape import visible

CONFINED = "an agent's request may only name files inside its workspace"
MAX_CACHED = 8  # analyses kept in memory (a session rarely switches between more workspaces)


class RequestError(ValueError):
    """A request the run cannot take (a path outside the workspace, a missing folder): one line."""


@dataclass(frozen=True, slots=True)
class Request:
    """What to analyse. ``path_map``: (remote prefix, local prefix) pairs; ``confined``: every
    path named must lie inside ``workspace`` (an agent's request)."""

    workspace: str
    profile: str | None = None
    baseline: str | None = None
    path_map: tuple[tuple[str, str], ...] = ()
    rank: int | None = None
    confined: bool = True

    def root(self) -> Path:
        root = Path(self.workspace).expanduser()
        if self.confined and not root.is_absolute():
            raise RequestError(f"{self.workspace}: the workspace must be an absolute path")
        if not root.is_dir():
            raise RequestError(f"{self.workspace}: no such folder (workspace)")
        return root.resolve()

    def place(self, value: str, what: str) -> Path:
        """``value`` (relative to the workspace, or absolute) resolved; inside it when confined."""
        root = self.root()
        try:
            path = Path(inside(value, str(root), [root], CONFINED)) if self.confined else (root / Path(value).expanduser()).resolve()
        except ValueError as exc:
            raise RequestError(f"{what}: {exc}") from None
        if not path.exists():
            raise RequestError(f"{value}: no such file or directory ({what})")
        return path


def settings_for(request: Request) -> tuple[Settings, list[str]]:
    """The core's resolver with the workspace as the editor's one folder: defaults -> the nearest
    pyproject.toml inside it -> the request's path mappings and rank."""
    root = request.root()
    flags: dict[str, object] = {}
    if request.path_map:
        local = [(r, str(request.place(l, "path_map")) if request.confined else l) for r, l in request.path_map]
        flags["pathMappings"] = [f"{r}={l}" for r, l in local]
    if request.rank is not None:
        flags["rank"] = request.rank
    return resolve(root, workspace_roots=[root], layers=[Layer("request", flags)], base_dir=root)


def run_request(request: Request) -> tuple[CheckRun, list[str]]:
    """The check run of ``request`` and its warnings. Raises RequestError, ProfileError."""
    root = request.root()
    settings, warnings = settings_for(request)
    profile = request.place(request.profile, "profile") if request.profile else None
    baseline = request.place(request.baseline, "baseline") if request.baseline else None
    # the JSON document's run, critical paths included; a job that could not be read is a warning
    req = RunRequest(cwd=root, tool_version=version(), paths=(root,), profile=profile, baseline=baseline,
                     critical_path=True)
    said: list[str] = []
    hooks = RunHooks(on_unreadable=lambda bad: said.append(visible(f"msprof-lsp: error: {bad.error}")))
    try:
        run = check_run(req, lambda _path: settings, hooks)
    except CheckFailed as exc:
        raise RequestError(str(exc)) from None
    return run, warnings + said


def _stamp(run: CheckRun) -> tuple[tuple[str, int, int], ...]:
    """What the run read that an agent or a profiler may change: each profile and the folder holding
    it (a new run written beside it), and each source file a finding, fix or hotspot names (size and
    modification time)."""
    paths = {str(p) for job in run.jobs for p in (job.profile.meta.path, Path(job.profile.meta.path).parent)}
    for job in run.jobs:
        paths.update(f.span.path for f in job.findings if f.span is not None)
        paths.update(e.path for f in job.findings for x in f.fixes for e in x.edits)
        paths.update(h.site.span.path for h in job.heat.spans)
    out = []
    for p in sorted(paths):
        try:
            st = os.stat(p)
            out.append((p, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((p, -1, -1))
    return tuple(out)


class RunCache:
    """The last analyses by request, each reused while nothing it read changed (the profile itself
    also comes from the on-disk profile cache when it has to be loaded again)."""

    def __init__(self, size: int = MAX_CACHED) -> None:
        self._size = size
        self._runs: OrderedDict[Request, tuple[CheckRun, list[str], tuple]] = OrderedDict()
        self.loads = 0  # analyses run (not reused): what the tests count

    def get(self, request: Request) -> tuple[CheckRun, list[str]]:
        held = self._runs.get(request)
        if held is not None and held[2] == _stamp(held[0]):
            self._runs.move_to_end(request)
            return held[0], held[1]
        run, warnings = run_request(request)
        self.loads += 1
        self._runs[request] = (run, warnings, _stamp(run))
        self._runs.move_to_end(request)
        while len(self._runs) > self._size:
            self._runs.popitem(last=False)
        return run, warnings
