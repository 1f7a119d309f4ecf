"""Where a profile lives on disk, and the progress callback readers report through."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from msprof_lsp.mapping.profile.model import ProfileKind

Progress = Callable[[str, "float | None"], None]
"""``progress(message, fraction)``: fraction in 0..1, or None when unknown. Must be cheap."""


def no_progress(message: str, fraction: float | None) -> None:  # noqa: ARG001
    return None


class Layout:
    """Base of the readers' layouts: where one profile's files are, as discovery listed them."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class ProfileLocation:
    """One rank's profile as found by discovery.

    ``path`` is the producer's root: the ``*_ascend_pt`` / ``*_ascend_ms`` directory (or a bare
    ``ASCEND_PROFILER_OUTPUT`` directory), the ``PROF_*`` directory, the ``.db`` file, or the
    Kineto ``*.json[.gz]`` file.
    """

    kind: ProfileKind
    path: Path
    rank: int | None = None
    mtime: float = 0.0  # newest input file's mtime; discovery picks the newest run
    complete: bool = True  # torch_npu: analyse.done present
    # The reader's layout found by discovery (None: made by hand; the reader probes the path).
    layout: Layout | None = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        rank = f", rank {self.rank}" if self.rank is not None else ""
        return f"{self.kind.value} profile {self.path}{rank}"
