"""Errors and warnings raised while reading profiles.

Every problem names the file and, where one applies, the line, so that `--check` can print one
line on stderr and the server can turn it into one diagnostic-level message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Issue:
    """A non-fatal problem found while loading: the load went on with what was readable."""

    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


class ProfileError(Exception):
    """The profile (or one required file of it) cannot be read at all."""

    def __init__(self, path: str | Path, message: str, line: int | None = None) -> None:
        self.path = str(path)
        self.message = message
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


class NoProfileFound(ProfileError):
    """Discovery found nothing that looks like a profile under the given path."""
