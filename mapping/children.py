"""The one home for starting a child process: isolated (``-I``) and outside the workspace.

The product starts no process of its own except multiprocessing's (the rank-loading pool, its
forkserver, the resource tracker; spawned workers where there is no forkserver). multiprocessing
starts every one of them, on CPython 3.10 to 3.13, through ``multiprocessing.util.spawnv_passfds``
with ``[python, *util._args_from_interpreter_flags(), "-c", ...]`` and our cwd. ``-c`` puts the cwd
(``''``) first on the child's sys.path, and the flags carry ``-I`` only when this interpreter has it:
started by the console script from a repository, the resource tracker would import the
repository's ``multiprocessing/`` or ``json.py``. So:

* :func:`install` wraps ``spawnv_passfds`` once: every multiprocessing child gets ``-I`` (no cwd,
  no PYTHON* variables, no user site on its start-up path) and is exec'd from :data:`SAFE_CWD`,
  whenever and from wherever it is started (the tracker is started lazily, by the first
  semaphore, and restarted if it dies).
* :func:`isolated_children` also holds :data:`SAFE_CWD` while a pool is built and fed: each worker,
  spawned or forked by the forkserver, ``chdir``s to the cwd its parent had when it pickled the
  worker's start-up data (``spawn.get_preparation_data``), before it imports anything.
* ``server/__main__.py`` takes the cwd off this process's own sys.path when started as
  ``python -m`` (workers copy our sys.path).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any



def _safe_cwd() -> str:
    """The standard library's own folder: nothing there shadows the standard library, and it is
    never a workspace (the filesystem root where that folder is missing, as in frozen builds)."""
    stdlib = sysconfig.get_path("stdlib")
    return stdlib if stdlib and os.path.isdir(stdlib) else os.path.abspath(os.sep)


# Children start here; they are handed absolute paths only.
SAFE_CWD: str = _safe_cwd()

ISOLATED_FLAG = "-I"

# chdir is process-wide: one holder at a time (re-entrant, since the wrapper below runs inside
# isolated_children()).
_CWD_LOCK = threading.RLock()
_INSTALL_LOCK = threading.Lock()
_ORIGINAL_SPAWNV_PASSFDS: Callable[..., int] | None = None


def isolated_argv(args: Sequence[Any]) -> list[Any]:
    """``[python, *flags, ...]`` with ``-I`` right after the interpreter (once)."""
    argv = list(args)
    if not argv or getattr(sys, "frozen", False):  # a frozen program takes no interpreter flags
        return argv
    flags = argv[1:argv.index("-c")] if "-c" in argv else argv[1:]
    if ISOLATED_FLAG in flags:
        return argv
    return [argv[0], ISOLATED_FLAG, *argv[1:]]


@contextmanager
def outside_the_workspace() -> Iterator[None]:
    """Hold :data:`SAFE_CWD` as this process's cwd, then return to where it was."""
    with _CWD_LOCK:
        try:
            here: str | None = os.getcwd()
        except OSError:  # the cwd was removed: nothing to return to
            here = None
        os.chdir(SAFE_CWD)
        try:
            yield
        finally:
            if here is not None:
                os.chdir(here)


def _isolated_spawnv_passfds(path: Any, args: Sequence[Any], passfds: Any) -> int:
    assert _ORIGINAL_SPAWNV_PASSFDS is not None
    with outside_the_workspace():
        return _ORIGINAL_SPAWNV_PASSFDS(path, isolated_argv(args), passfds)


def install() -> None:
    """Route every multiprocessing child start through :func:`_isolated_spawnv_passfds` (once)."""
    global _ORIGINAL_SPAWNV_PASSFDS
    if sys.platform == "win32":  # no spawnv_passfds there; children start by CreateProcess
        return
    from multiprocessing import util

    with _INSTALL_LOCK:
        current = util.spawnv_passfds
        if current is _isolated_spawnv_passfds:
            return
        _ORIGINAL_SPAWNV_PASSFDS = current
        util.spawnv_passfds = _isolated_spawnv_passfds


def installed() -> bool:
    if sys.platform == "win32":
        return True
    from multiprocessing import util

    return util.spawnv_passfds is _isolated_spawnv_passfds


@contextmanager
def isolated_children() -> Iterator[None]:
    """Build, feed and use a process pool inside this: its children start isolated and outside the
    workspace. Use it around the pool's constructor too (its queues' semaphores start the resource
    tracker)."""
    install()
    with outside_the_workspace():
        yield

