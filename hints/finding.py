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


class ShareOf(str, enum.Enum):
    """The denominator of a finding's ``share`` (docs/rules/README.md "Shares")."""

    WALL_STEP = "wall-step"  # the wall-clock step: costs the host pays (data wait, syncs, Python)
    DEVICE_STEP = "device-step"  # the device step: device work (kernels, collectives)


class Target(str, enum.Enum):
    """Which recorded work a :class:`Change` acts on: rows of the profile's tables."""

    KERNELS = "kernels"  # Profile.kernels rows: their duration is scaled
    HOST_OPS = "host_ops"  # Profile.host_ops rows: their self time is scaled
    SYNC_CALLS = "sync_calls"  # Profile.host_events rows of blocking calls: removed, the host runs ahead


@dataclass(frozen=True, slots=True)
class Change:
    """One part of what applying a fix does to the recorded step: the ``rows`` of ``target`` take
    ``factor`` of their recorded time (0: removed; 0.5: twice as fast). ``best`` and ``worst`` bound
    the factor (the saving's high and low end); ``factor`` is the estimate."""

    target: Target
    rows: tuple[int, ...]
    factor: float
    best: float
    worst: float


@dataclass(frozen=True, slots=True)
class Effect:
    """What a finding's fix does to the profile, for the step replay that turns it into a saving
    (docs/savings.md). ``unknown``: why no model is defensible (the saving is then "unknown")."""

    changes: tuple[Change, ...] = ()
    basis: str = ""  # one line: the model, e.g. "TransData kernels removed"
    unknown: str = ""

    def rows(self, target: Target) -> frozenset[int]:
        """Every row of ``target`` the fix touches: what the finding charges."""
        return frozenset().union(*(c.rows for c in self.changes if c.target is target))


@dataclass(frozen=True, slots=True)
class Saving:
    """The step time applying a finding's fix would save, per step, in µs (the JSON contract of
    design.md): the estimate and its range, or None with the reason in ``basis``."""

    us_per_step: float | None
    low_us: float | None
    high_us: float | None
    basis: str

    @classmethod
    def unknown(cls, why: str) -> "Saving":
        return cls(None, None, None, why)

    @property
    def known(self) -> bool:
        return self.us_per_step is not None

    def as_dict(self) -> dict[str, Any]:
        r = lambda v: None if v is None else round(v, 3)  # noqa: E731
        return {"us_per_step": r(self.us_per_step), "low_us": r(self.low_us), "high_us": r(self.high_us),
                "basis": self.basis}


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
    share_of: ShareOf = ShareOf.DEVICE_STEP  # the denominator of ``share``
    effect: Effect | None = None  # what the fix does, for the saving (None: not modelled yet)
    saving: Saving | None = None  # filled after the rules ran, from ``effect`` (hints.savings)

    def sort_key(self) -> tuple:
        s = self.span
        return (s.path if s else "", s.line if s else 0, s.col if s else 0, self.code)
