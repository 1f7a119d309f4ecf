"""Source positions shared by mapping, hints and the server.

Lines are 1-based; columns are 0-based **code points** (libcst's PositionProvider convention).
The server converts to the client's encoding (UTF-16 for VS Code) at its edge; the JSON/SARIF
outputs add 1 to columns.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class Span:
    path: str  # absolute local path of the source file
    line: int
    col: int
    end_line: int
    end_col: int

    def contains_line(self, line: int) -> bool:
        return self.line <= line <= self.end_line

    def shifted(self, delta_lines: int) -> "Span":
        return Span(self.path, self.line + delta_lines, self.col, self.end_line + delta_lines, self.end_col)


class Confidence(str, enum.Enum):
    """How a profile time was tied to source."""

    STACK = "stack"  # a captured call stack points at this line
    MODULE = "module"  # located through a function / nn.Module name plus static search
    INFERRED = "inferred"  # operator type -> construct pattern only

    @property
    def rank(self) -> int:
        """Higher is surer: stack 2, module 1, inferred 0."""
        return _RANK[self]


_RANK: dict[Confidence, int] = {Confidence.STACK: 2, Confidence.MODULE: 1, Confidence.INFERRED: 0}
