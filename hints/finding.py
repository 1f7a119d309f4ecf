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


class Safety(str, enum.Enum):
    """How much a fix can be trusted without a second look (docs/quick-fixes.md)."""

    SAFE = "safe"  # same numerics and semantics: preferred, part of fixAll
    REVIEW = "review"  # changes numerics, memory or training semantics, or needs a re-profile
    PER_MATCH = "per-match"  # the transform decides from the construct it matched


@dataclass(frozen=True, slots=True)
class Construct:
    """What a rule recognised, handed to its fix so both act on the same thing: the kind of
    construct (a rule-defined name, e.g. ``nested`` for ``dropout(relu(x))``) and the names it
    matched (``torch.nn.functional.relu``)."""

    kind: str
    names: tuple[str, ...] = ()


OptionValue = str | int | float | bool


@dataclass(frozen=True, slots=True)
class FixOffer:
    """A fix a finding offers, not yet computed: which fix (a ``hints.fixes.CATALOG`` id), where
    (the anchor in ``path``), on which recognised construct, with which options.

    ``--check`` expands the offers of a file from one parse of it; the language server does so
    only when code actions are asked for. Offers of one finding with the same non-empty
    ``choice`` are tries of one fix at several places: the first that matches is kept.
    """

    fix: str
    path: str
    anchor: Span | int  # a line alone: the fix looks for its construct on that line
    options: tuple[tuple[str, OptionValue], ...] = ()
    construct: Construct | None = None
    choice: str = ""


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
    fixes: list[Fix] = field(default_factory=list)  # made without parsing, plus the offers once expanded
    offers: list[FixOffer] = field(default_factory=list)
    related: list[Related] = field(default_factory=list)

    def sort_key(self) -> tuple:
        s = self.span
        return (s.path if s else "", s.line if s else 0, s.col if s else 0, self.code)
