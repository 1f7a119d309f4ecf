"""What a rule reports: findings with evidence and fixes. Free of LSP types.

Positions follow ``msprof_lsp.mapping.spans``: 1-based lines, 0-based code-point columns. The
server's adapter converts them to the client's encoding; ``--check`` writes them 1-based.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from msprof_lsp.mapping.spans import Confidence, Span


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    HINT = "hint"

    @property
    def rank(self) -> int:
        return {"error": 3, "warning": 2, "info": 1, "hint": 0}[self.value]

    @classmethod
    def parse(cls, text: str) -> "Severity":
        """Accept the JSON names and the LSP spellings (Information, Warning, ...)."""
        t = text.strip().lower()
        aliases = {"information": "info", "note": "info", "warn": "warning", "err": "error"}
        return cls(aliases.get(t, t))


@dataclass(frozen=True, slots=True)
class TextEdit:
    """Replace [line:col, end_line:end_col) of ``path`` with ``new_text``."""

    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    new_text: str


@dataclass(frozen=True, slots=True)
class Fix:
    title: str
    safe: bool  # True: same numerics/semantics (preferred, part of fixAll); False: review
    edits: tuple[TextEdit, ...]
    # Fixes of one finding with the same non-empty group are alternatives for one construct
    # (fused=True or NpuFusedSGD): apply at most one of them.
    group: str = ""


@dataclass(frozen=True, slots=True)
class Related:
    """Another place involved in a finding (the ReLU of a ReLU->Dropout pair, optimizer.step())."""

    span: Span
    message: str


@dataclass(slots=True)
class Finding:
    code: str  # stable rule code, e.g. NPU101
    name: str  # rule name, e.g. relu-dropout-fusion
    severity: Severity
    message: str  # one line with the numbers (docs/rules/README.md "Message")
    span: Span | None  # None: profile-level finding with no source anchor
    share: float = 0.0  # attributable time per step / step time (0..1)
    time_per_step_us: float = 0.0  # attributable (device) time per step, µs
    confidence: Confidence = Confidence.STACK
    evidence: dict[str, Any] = field(default_factory=dict)
    fixes: list[Fix] = field(default_factory=list)
    related: list[Related] = field(default_factory=list)

    def sort_key(self) -> tuple:
        s = self.span
        return (s.path if s else "", s.line if s else 0, s.col if s else 0, self.code)
