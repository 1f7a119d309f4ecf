"""Which files a piece of code opens: an audit hook (installed once, on first import, for the rest
of the process, so it stays cheap while nothing is watched) that records ``open`` of paths under
the watched folders."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_watched: list[str] = []
_opened: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _watched and isinstance(args[0], (str, bytes, os.PathLike)):
        p = os.fsdecode(args[0])
        if any(p.startswith(w) for w in _watched):
            _opened.append(p)


sys.addaudithook(_audit)


@contextmanager
def opens_under(*folders: Path) -> Iterator[list[str]]:
    """Yields the list of paths under ``folders`` (as given and resolved) opened inside the block."""
    found: list[str] = []
    _opened.clear()
    _watched[:] = sorted({str(f) for f in folders} | {str(Path(f).resolve()) for f in folders})
    try:
        yield found
    finally:
        _watched.clear()
        found.extend(_opened)
        _opened.clear()
